"""The invariants every fault scenario must leave in the database (one checker for the suite).

- every trial ends in exactly one final row: per study, each config with any row has exactly
  one row that is neither ``infra`` nor provisional (in a job that is not done, a config with only
  a provisional row is waiting for its re-measurement, which ``resume`` runs);
- no budget is exceeded: per study, at most ``trials`` final rows (the job spec's budget);
- no finished trial is lost: every config a caller saw measured (``finished``) has its final row,
  and a ``done`` job's studies each hold their full budget (the tiny spaces here never run out);
- each stored best is the minimum of its ``ok`` trials (same kernel, problem, class, objective).
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

import sqlalchemy as sa

from db import Database, JobStatus, TrialOutcome, repository
from db.models import BestConfig, DeviceClass, Kernel, Trial


@dataclass
class Report:
    """What the checker counted: final rows, configs without one (lost), extra ones
    (duplicated), studies over budget, bests that are not their key's minimum."""

    final: int = 0
    lost: int = 0
    duplicated: int = 0
    over_budget: int = 0
    wrong_best: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def held(self) -> bool:
        return not self.problems


def check(
    database: Database,
    job_ids: Iterable[int],
    *,
    finished: Iterable[tuple[int, str]] = (),
) -> Report:
    """Check the invariants (module docstring) for ``job_ids``; ``finished``: (study id, config
    key) pairs the caller saw come back measured."""
    report = Report()
    with database.session(readonly=True) as s:
        for job_id in job_ids:
            job = repository.get_job(s, job_id)
            budget = int(job.spec["trials"])
            for study in repository.studies_for_job(s, job_id):
                trials = repository.trials_for_study(s, study.id)
                final = Counter(
                    t.config_key
                    for t in trials
                    if t.outcome is not TrialOutcome.INFRA and not t.provisional
                )
                keys = {t.config_key for t in trials}
                report.final += sum(final.values())
                provisional_only = {t.config_key for t in trials if t.provisional} - set(final)
                for key in keys:
                    if (
                        final[key] == 0
                        and job.status is not JobStatus.DONE
                        and key in provisional_only
                    ):
                        continue  # its re-measurement was cut short: resume measures it
                    if final[key] == 0:
                        report.lost += 1
                        report.problems.append(f"study {study.id}: {key} has no final row")
                    elif final[key] > 1:
                        report.duplicated += final[key] - 1
                        report.problems.append(
                            f"study {study.id}: {key} has {final[key]} final rows"
                        )
                if sum(final.values()) > budget:
                    report.over_budget += 1
                    report.problems.append(
                        f"study {study.id}: {sum(final.values())} final rows for a budget of {budget}"
                    )
                if job.status is JobStatus.DONE and sum(final.values()) < budget:
                    report.lost += budget - sum(final.values())
                    report.problems.append(
                        f"study {study.id} of done job {job_id}: {sum(final.values())} of {budget}"
                    )
        for study_id, key in finished:
            rows = [
                t
                for t in repository.trials_for_study(s, study_id)
                if t.config_key == key and t.outcome is not TrialOutcome.INFRA and not t.provisional
            ]
            if not rows:
                report.lost += 1
                report.problems.append(f"study {study_id}: finished {key} was not recorded")
        _check_bests(s, report)
    return report


def _check_bests(s: sa.orm.Session, report: Report) -> None:
    bests = s.execute(
        sa.select(BestConfig, Kernel.id, DeviceClass.id, DeviceClass.key)
        .join(Kernel, Kernel.name == BestConfig.kernel_name)
        .join(DeviceClass, DeviceClass.id == BestConfig.device_class_id)
        .where(Kernel.version_hash == BestConfig.kernel_version)
    ).all()
    for best, kernel_id, class_id, class_key in bests:
        fastest = s.scalar(
            sa.select(sa.func.min(Trial.median_ms)).where(
                Trial.kernel_id == kernel_id,
                Trial.problem_key == best.problem_key,
                Trial.device_class_id == class_id,
                Trial.objective == best.objective,
                Trial.outcome == TrialOutcome.OK,
                Trial.provisional.is_(False),
            )
        )
        if fastest is None or not math.isclose(best.time_ms, fastest, rel_tol=1e-9):
            report.wrong_best += 1
            report.problems.append(
                f"best of {best.problem_key} on {class_key}: {best.time_ms} ms, "
                f"fastest ok trial {fastest} ms"
            )


#: If set, :func:`assert_held` appends each report to this JSON-lines file (benchmarks/faults.py).
LOG_ENV = "TUNEFLEET_FAULTS_LOG"


def assert_held(database: Database, job_ids: Iterable[int], **kw: object) -> Report:
    """:func:`check`, failing the test with every problem found (and logged, see LOG_ENV)."""
    report = check(database, job_ids, **kw)  # type: ignore[arg-type]
    log = os.environ.get(LOG_ENV)
    if log:
        entry = {
            "test": os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0],
            **{k: v for k, v in asdict(report).items() if k != "problems"},
            "held": report.held,
        }
        with open(log, "a") as f:
            f.write(json.dumps(entry) + "\n")
    assert report.held, "\n".join(report.problems)
    return report
