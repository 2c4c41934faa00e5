"""Finishing a job: re-time each study's candidates in a fresh process and decide its key.

The candidates of a study are its top ``k`` configs (those with an ``ok`` row), the spec's default
config on the class, the study's median config (the ``ok`` trial of median time), the key's
*incumbent* (its stored best: its config when Triton holds the key and that config is not among
the others, its vendor path when the vendor path does) and the fastest vendor path measured ``ok``
on the key in this environment. They are timed again on a worker of the study's class,
interleaved, ``rounds`` times, in one fresh process; the decision (noise floor and tie rule) is
:mod:`orchestrator.run.decision`'s. Those that may win: the top ``k``, the default if it ran ``ok``,
the incumbent and the vendor path (a candidate whose re-timing failed keeps its measured time,
except the incumbent, which then takes no part). The median config is a reference only.

The key's best row is upserted with the decision (:class:`db.repository.BestDecision`): its
backend (``triton`` or ``vendor``, the path's name), ``config`` the fastest Triton candidate (the
winner, or the best Triton config when the vendor path wins; the spec's default when no Triton
config ran ``ok``), ``time_ms`` the winner's time, ``triton_ms`` that config's time, ``vendor_ms``
and ``default_ms`` the vendor path's and the default's, ``noise`` the floor. An incumbent Triton
config that holds keeps its trial and job and takes the fresh times; an incumbent vendor path that
holds is written again with this job's best Triton config beside it (``promoted`` stays False
for both); a challenger
replaces the row it was timed against (a row that someone else wrote meanwhile is replaced only
if slower). Speedups over the default, the median config and the vendor path come from that one
re-timing only, never from an earlier trial: a reference or a winner whose re-timing failed has
no speedup. A study with one candidate to time (the default was its only ``ok`` config, no
incumbent or vendor path) has nothing to choose or compare: it is not re-timed, its config is
promoted at its trial time, and its speedups are 1. A study with no ``ok`` config but an ``ok``
vendor path is decided for the vendor path at its measured time, not re-timed.

A cancelled job is not re-timed (its workers are being stopped): :func:`promote_trials` (its
driver) and :func:`promote_stored` (a job no driver runs, from its rows) upsert each study's
fastest ``ok`` trial by its trial time, or the fastest vendor path measured ``ok`` on the key if
strictly faster than that trial, under the faster-than-stored condition. The best-config row points
at the job, whose status says it was cancelled; a later ``resume`` re-times and decides as usual.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from db import BestBackend, TrialOutcome, repository
from orchestrator.run.decision import Timed, decide
from orchestrator.run.ledger import Ledger, OpenJob, StudyRows, triton_minor
from orchestrator.run.pool import Candidate, Pool, RetimeJob, VendorPath
from orchestrator.run.progress import Reporter
from orchestrator.run.speedup import speedup
from orchestrator.study.loop import Ranked, Study
from search_spaces.space import Config, config_key

if TYPE_CHECKING:
    from db import Session

#: Prefix of a vendor path's key among a re-timing's candidates (a config key is a JSON object).
VENDOR_KEY = "vendor:"


@dataclass(frozen=True)
class Winner:
    """How a study's key was decided: the key's Triton config, the winner's time (the vendor
    path's when ``backend`` is vendor), whether that time is from the final re-timing (else an
    earlier measurement's), whether this job's candidate became the key's best (False when the
    incumbent ``held``), the references' times in the same measurement as ``time_ms`` (None:
    none was, e.g. their re-timing failed), the vendor path and the noise floor."""

    config: Config
    time_ms: float
    promoted: bool
    retimed: bool
    default_ms: float | None = None
    median_ms: float | None = None
    backend: BestBackend = BestBackend.TRITON
    vendor: str | None = None
    vendor_ms: float | None = None
    triton_ms: float | None = None
    noise: float | None = None
    held: bool = False

    @property
    def speedup_vs_default(self) -> float | None:
        return speedup(self.default_ms, self.time_ms)

    @property
    def speedup_vs_median(self) -> float | None:
        return speedup(self.median_ms, self.time_ms)

    @property
    def speedup_vs_vendor(self) -> float | None:
        return speedup(self.vendor_ms, self.time_ms)


#: Per study id: its winner.
Winners = dict[int, Winner]


def _key(candidate: Candidate) -> str:
    if isinstance(candidate, VendorPath):
        return VENDOR_KEY + candidate.name
    return config_key(candidate)


@dataclass(frozen=True)
class _Plan:
    """What one study re-times: its top ``k``, then the references, the incumbent and the
    vendor paths not among them."""

    top: list[Ranked]
    default: Config
    measured_default: Ranked | None  # the default's ok row, if it has one: then it may win
    median: Ranked | None
    incumbent: repository.BestRecord | None
    vendors: dict[str, float]  # vendor path -> its measured time, fastest first

    def to_time(self) -> list[Candidate]:
        """Each candidate once, in order (interleaved by the pool); none when there is nothing
        to choose or compare (see the module docstring)."""
        if not self.top:
            return []
        configs = [*(r.config for r in self.top), self.default]
        if self.median is not None:
            configs.append(self.median.config)
        held = self.incumbent
        if held is not None and held.backend is BestBackend.TRITON:
            configs.append(dict(held.config))
        out: dict[str, Candidate] = {}
        candidates: list[Candidate] = [*configs, *(VendorPath(name) for name in self.vendors)]
        for candidate in candidates:
            out.setdefault(_key(candidate), candidate)
        return list(out.values()) if len(out) > 1 else []

    def ranked(self) -> list[Ranked]:
        """The configs of this study that may win: the top k and the default if it ran ok."""
        extra = self.measured_default
        return self.top + ([extra] if extra is not None and extra not in self.top else [])

    def incumbent_key(self) -> str | None:
        held = self.incumbent
        if held is None:
            return None
        if held.backend is BestBackend.VENDOR and held.vendor:
            return VENDOR_KEY + held.vendor
        return config_key(held.config)


def _plan(job: OpenJob, rows: StudyRows, study: Study, ledger: Ledger) -> _Plan | None:
    top = study.ranked(job.spec.top_k)
    incumbent = ledger.incumbent(job, rows)
    measured = ledger.vendor_times(job, rows)
    vendors = dict(sorted(measured.items(), key=lambda kv: kv[1])[:1])
    if incumbent is not None and incumbent.backend is BestBackend.VENDOR and incumbent.vendor:
        vendors.setdefault(incumbent.vendor, measured.get(incumbent.vendor, incumbent.time_ms))
    if not top and not vendors:
        return None
    everything = study.ranked(len(study.values))
    median = everything[(len(everything) - 1) // 2] if everything else None  # the lower median
    default = study.representative(job.kernel.default_for(study.limits))
    found = next((r for r in everything if config_key(r.config) == config_key(default)), None)
    return _Plan(top, default, found, median, incumbent, vendors)


def promote(
    job: OpenJob,
    studies: Sequence[tuple[StudyRows, Study]],
    pool: Pool,
    ledger: Ledger,
    rounds: int,
    reporter: Reporter,
) -> Winners:
    """Re-time and decide (see the module docstring); the winner of each study that had any
    ``ok`` config or vendor path."""
    plans = [_plan(job, rows, study, ledger) for rows, study in studies]
    timed = [plan.to_time() if plan else [] for plan in plans]
    jobs: list[RetimeJob] = [
        (rows.plan.class_key, job.spec.kernel, dict(rows.plan.problem), chosen)
        for (rows, _), chosen in zip(studies, timed, strict=True)
    ]
    retimed: Sequence[list[list[float]] | None] = [None] * len(jobs)
    if any(timed):
        reporter.note(
            "re-timing the top configs, the default, the incumbent and the vendor path "
            "in a fresh process"
        )
        retimed = pool.retime(jobs, rounds)
    winners: Winners = {}
    for (rows, _), plan, chosen, medians in zip(studies, plans, timed, retimed, strict=True):
        if plan is None:
            continue
        rounds_of = {_key(c): tuple(m) for c, m in zip(chosen, medians or [], strict=False) if m}
        winners[rows.study_id] = _decide(job, rows, plan, rounds_of, rounds, ledger)
    return winners


def _decide(
    job: OpenJob,
    rows: StudyRows,
    plan: _Plan,
    rounds_of: dict[str, tuple[float, ...]],
    rounds: int,
    ledger: Ledger,
) -> Winner:
    """Decide one study's key from its re-timing (``rounds_of``: candidate key -> its
    per-round medians; empty when it was not re-timed) and write the best row."""

    def timed(key: str, earlier: float | None) -> Timed | None:
        found = rounds_of.get(key)
        if found:
            return Timed(key, statistics.median(found), found)
        return None if earlier is None else Timed(key, earlier)

    configs: dict[str, tuple[Config, int | None]] = {
        config_key(r.config): (r.config, r.row) for r in plan.ranked()
    }
    held, held_key = plan.incumbent, plan.incumbent_key()
    if held is not None and held.backend is BestBackend.TRITON and held_key in rounds_of:
        configs.setdefault(config_key(held.config), (dict(held.config), held.trial_id))
    earlier = {config_key(r.config): r.value for r in plan.ranked()}
    triton = [t for k in configs if (t := timed(k, earlier.get(k))) is not None]
    vendors = [t for n, ms in plan.vendors.items() if (t := timed(VENDOR_KEY + n, ms))]
    vendor = min(vendors, key=lambda t: t.time_ms) if vendors else None
    decision = decide(
        [*triton, *vendors],
        rounds,
        incumbent=held_key if held_key in rounds_of else None,
        vendor=vendor.key if vendor else None,
    )
    by_key = {t.key: t for t in [*triton, *vendors]}
    won = by_key[decision.winner]
    best_triton = min(triton, key=lambda t: t.time_ms) if triton else None
    on_vendor = won.key.startswith(VENDOR_KEY)
    chosen = best_triton if on_vendor else won
    config, row = configs[chosen.key] if chosen is not None else (plan.default, None)
    retimed = won.key in rounds_of

    def same(key: str) -> float | None:
        """The time of ``key`` in the winner's measurement: this re-timing, when the winner's
        time is from it; the winner's own when nothing was re-timed."""
        if not rounds_of:
            return won.time_ms if key == won.key else None
        found = rounds_of.get(key) if retimed else None
        return statistics.median(found) if found else None

    vendor_ms = vendor.time_ms if vendor else None
    best = repository.BestDecision(
        BestBackend.VENDOR if on_vendor else BestBackend.TRITON,
        won.key.removeprefix(VENDOR_KEY) if on_vendor else None,
        triton_ms=chosen.time_ms if chosen is not None else None,
        vendor_ms=vendor_ms,
        default_ms=same(config_key(plan.default)),
        noise=decision.noise,
        over=held.updated_at if held is not None and held_key in rounds_of else None,
    )
    kept = held is not None and decision.winner == held_key
    producer = held if kept and not on_vendor else None
    written = ledger.promote(job, rows, config, won.time_ms, row, best, producer)
    return Winner(
        config,
        won.time_ms,
        written and not kept,
        retimed,
        default_ms=best.default_ms,
        median_ms=same(config_key(plan.median.config)) if plan.median else None,
        backend=best.backend,
        vendor=best.vendor or (vendor.key.removeprefix(VENDOR_KEY) if vendor else None),
        vendor_ms=same(vendor.key) if vendor else None,
        triton_ms=best.triton_ms,
        noise=decision.noise,
        held=kept,
    )


def promote_trials(
    job: OpenJob, studies: Sequence[tuple[StudyRows, Study]], ledger: Ledger
) -> Winners:
    """Promote each study's fastest ``ok`` trial by its trial time, or its fastest vendor path
    if strictly faster, with no re-timing (a cancelled job; see the module docstring)."""
    winners: Winners = {}
    for rows, study in studies:
        top = study.ranked(1)
        vendors = ledger.vendor_times(job, rows)
        triton = top[0] if top else None
        name = min(vendors, key=lambda n: vendors[n]) if vendors else None
        vendor_ms = vendors[name] if name is not None else None
        on_vendor = vendor_ms is not None and (triton is None or vendor_ms < triton.value)
        if triton is None and not on_vendor:
            continue
        config = (
            triton.config if triton else study.representative(job.kernel.default_for(study.limits))
        )
        time_ms = vendor_ms if on_vendor and vendor_ms else (triton.value if triton else 0.0)
        best = repository.BestDecision(
            BestBackend.VENDOR if on_vendor else BestBackend.TRITON,
            name if on_vendor else None,
            triton_ms=triton.value if triton else None,
            vendor_ms=vendor_ms,
        )
        promoted = ledger.promote(job, rows, config, time_ms, triton.row if triton else None, best)
        winners[rows.study_id] = Winner(
            config,
            time_ms,
            promoted,
            retimed=False,
            backend=best.backend,
            vendor=name,
            triton_ms=best.triton_ms,
        )
    return winners


def promote_stored(s: Session, job_id: int) -> int:
    """Promote each study's fastest final ``ok`` trial row of job ``job_id`` by its trial time,
    or its fastest vendor path measured ``ok`` if strictly faster (a cancelled job that no
    driver runs); how many became their key's best."""
    job = repository.get_job(s, job_id)
    promoted = 0
    for study in repository.studies_for_job(s, job_id):
        ok = [
            t
            for t in repository.trials_for_study(s, study.id)
            if t.outcome is TrialOutcome.OK and t.median_ms and not t.provisional
        ]
        best = min(ok, key=lambda t: t.median_ms or 0.0) if ok else None
        envs = (
            {best.environment_id}
            if best is not None
            else {v.environment_id for v in repository.vendor_trials_for_study(s, study.id)}
        )
        vendors = [
            v
            for env in envs
            for v in repository.measured_vendor(
                s, job.kernel_name, study.problem_key, study.device_class.id, env, job.objective
            ).values()
        ]
        vendor = min(vendors, key=lambda v: v.median_ms or 0.0) if vendors else None
        triton_ms = best.median_ms if best is not None else None
        on_vendor = (
            vendor is not None
            and vendor.median_ms is not None
            and (triton_ms is None or vendor.median_ms < triton_ms)
        )
        if best is None and not on_vendor:
            continue
        environment_id = best.environment_id if best is not None else None
        if on_vendor and vendor is not None:
            environment_id = vendor.environment_id
        env = repository.get_environment(s, environment_id) if environment_id else None
        promoted += repository.upsert_best(
            s,
            job.kernel_name,
            job.kernel_version,
            study.problem_key,
            study.device_class.id,
            triton_minor(env.triton_version if env is not None else None),
            best.config if best is not None else {},
            (vendor.median_ms if on_vendor and vendor else triton_ms) or 0.0,
            best.id if best is not None else None,
            job_id,
            environment_id,
            job.objective,
            decision=repository.BestDecision(
                BestBackend.VENDOR if on_vendor else BestBackend.TRITON,
                vendor.vendor if on_vendor and vendor else None,
                triton_ms=triton_ms,
                vendor_ms=vendor.median_ms if vendor else None,
            ),
        )
    return promoted
