"""Finishing a job: re-time each study's fastest configs in a fresh process, promote the winner.

The top ``k`` configs of every study (those with an ``ok`` row) are timed again on a worker of
the study's class, interleaved, ``rounds`` times, side by side with two references: the spec's
default config on the class and the study's median config (the ``ok`` trial of median time).
The winner is the lowest median of those re-timings among the top ``k`` and the default (a
config whose re-timing failed keeps its measured time); it is upserted as the key's best only if
faster than the stored best (a conditional upsert). Its speedups over the default and the median
config come from that one re-timing only, never from an earlier trial: a reference whose
re-timing failed, or a winner whose re-timing failed, has no speedup. A study with one config to
time (the default was its only ``ok`` config) has nothing to choose or compare: it is not
re-timed, its config is promoted at its trial time, and its speedups are 1 (the same
measurement on both sides).

A cancelled job is not re-timed (its workers are being stopped): :func:`promote_trials` (its
driver) and :func:`promote_stored` (a job no driver runs, from its trial rows) upsert each
study's fastest ``ok`` trial by its trial time, under the same condition. The best-config row
points at the job, whose status says it was cancelled; a later ``resume`` that finds a faster
config replaces it as usual.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.orm import Session

from db import TrialOutcome, repository
from orchestrator.ledger import Ledger, OpenJob, StudyRows, triton_minor
from orchestrator.pool import Pool, RetimeJob
from orchestrator.progress import Reporter
from orchestrator.study import Ranked, Study
from search_spaces.space import Config, config_key


@dataclass(frozen=True)
class Winner:
    """A study's promoted config: its time, whether that time is from the final re-timing
    (else its trial's), whether it became the key's best, and the two references' times in the
    same measurement as ``time_ms`` (None: none was, e.g. their re-timing failed)."""

    config: Config
    time_ms: float
    promoted: bool
    retimed: bool
    default_ms: float | None = None
    median_ms: float | None = None

    @property
    def speedup_vs_default(self) -> float | None:
        return self.default_ms / self.time_ms if self.default_ms else None

    @property
    def speedup_vs_median(self) -> float | None:
        return self.median_ms / self.time_ms if self.median_ms else None


#: Per study id: its winner.
Winners = dict[int, Winner]


@dataclass(frozen=True)
class _Plan:
    """What one study re-times: its top ``k``, then the references not among them."""

    top: list[Ranked]
    default: Config
    measured_default: Ranked | None  # the default's ok row, if it has one: then it may win
    median: Ranked

    def configs(self) -> list[Config]:
        """Top k, default, median: each config once, in that order (interleaved by the pool)."""
        out: dict[str, Config] = {}
        for config in [*(r.config for r in self.top), self.default, self.median.config]:
            out.setdefault(config_key(config), config)
        return list(out.values())

    def candidates(self) -> list[Ranked]:
        """The configs that may win: the top k and the default if it ran ``ok``."""
        extra = self.measured_default
        return self.top + ([extra] if extra is not None and extra not in self.top else [])


def _plan(job: OpenJob, study: Study) -> _Plan | None:
    top = study.ranked(job.spec.top_k)
    if not top:
        return None
    everything = study.ranked(len(study.values))
    median = everything[(len(everything) - 1) // 2]  # the lower median of an even count
    default = study.representative(job.kernel.default_for(study.limits))
    measured = next((r for r in everything if config_key(r.config) == config_key(default)), None)
    return _Plan(top, default, measured, median)


def promote(
    job: OpenJob,
    studies: Sequence[tuple[StudyRows, Study]],
    pool: Pool,
    ledger: Ledger,
    rounds: int,
    reporter: Reporter,
) -> Winners:
    """Re-time and promote (see the module docstring); the winner of each study that had any
    ``ok`` config."""
    plans = [_plan(job, study) for _, study in studies]
    configs = [plan.configs() if plan else [] for plan in plans]
    jobs: list[RetimeJob] = [
        (rows.plan.class_key, job.spec.kernel, dict(rows.plan.problem), chosen)
        for (rows, _), chosen in zip(studies, configs, strict=True)
    ]
    # One config has nothing to choose or compare: not re-timed (see the module docstring).
    jobs = [(c, k, p, chosen if len(chosen) > 1 else []) for c, k, p, chosen in jobs]
    retimed: Sequence[list[list[float]] | None] = [None] * len(jobs)
    if any(chosen for *_, chosen in jobs):
        reporter.note("re-timing the top configs and the default in a fresh process")
        retimed = pool.retime(jobs, rounds)
    winners: Winners = {}
    for (rows, _), plan, chosen, medians in zip(studies, plans, configs, retimed, strict=True):
        if plan is None:
            continue
        if len(chosen) == 1:
            (only,) = plan.top
            promoted = ledger.promote(job, rows, only.config, only.value, only.row)
            winners[rows.study_id] = Winner(
                only.config, only.value, promoted, False, only.value, only.value
            )
            continue
        times = {
            config_key(c): statistics.median(m)
            for c, m in zip(chosen, medians or [], strict=False)
            if m
        }

        def time_of(r: Ranked, known: dict[str, float] = times) -> float:
            return known.get(config_key(r.config), r.value)

        winner = min(plan.candidates(), key=time_of)
        promoted = ledger.promote(job, rows, winner.config, time_of(winner), winner.row)
        retimed_winner = config_key(winner.config) in times
        winners[rows.study_id] = Winner(
            winner.config,
            time_of(winner),
            promoted,
            retimed_winner,
            default_ms=times.get(config_key(plan.default)) if retimed_winner else None,
            median_ms=times.get(config_key(plan.median.config)) if retimed_winner else None,
        )
    return winners


def promote_trials(
    job: OpenJob, studies: Sequence[tuple[StudyRows, Study]], ledger: Ledger
) -> Winners:
    """Promote each study's fastest ``ok`` trial by its trial time, with no re-timing (a
    cancelled job; see the module docstring)."""
    winners: Winners = {}
    for rows, study in studies:
        top = study.ranked(1)
        if not top:
            continue
        (best,) = top
        promoted = ledger.promote(job, rows, best.config, best.value, best.row)
        winners[rows.study_id] = Winner(best.config, best.value, promoted, retimed=False)
    return winners


def promote_stored(s: Session, job_id: int) -> int:
    """Promote each study's fastest final ``ok`` trial row of job ``job_id`` by its trial time
    (a cancelled job that no driver runs); how many became their key's best."""
    job = repository.get_job(s, job_id)
    promoted = 0
    for study in repository.studies_for_job(s, job_id):
        ok = [
            t
            for t in repository.trials_for_study(s, study.id)
            if t.outcome is TrialOutcome.OK and t.median_ms and not t.provisional
        ]
        if not ok:
            continue
        best = min(ok, key=lambda t: t.median_ms or 0.0)
        env = repository.get_environment(s, best.environment_id) if best.environment_id else None
        promoted += repository.upsert_best(
            s,
            job.kernel_name,
            job.kernel_version,
            study.problem_key,
            study.device_class.key,
            triton_minor(env.triton_version if env is not None else None),
            best.config,
            best.median_ms or 0.0,
            best.id,
            job_id,
            best.environment_id,
            job.objective,
        )
    return promoted
