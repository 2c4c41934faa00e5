"""A job's results, read back from the database: a JSON-ready dict and rich tables.

Per study (problem, device class): the best config for the key (the promoted row, preferring the
one this job wrote), its time, TFLOP/s and GB/s, % of the device's roofline when the class's peak
numbers are known (never for ``cpu``), and trials by outcome, measured and reused. Given the
job's winners (orchestrator.run.promotion), also this job's winner and its speedups over the default
config, the study's median config and the vendor path, all timed side by side in the one final
re-timing; never a re-timed time over an earlier trial's (a study not re-timed, as in a cancelled
job, has no speedups; one whose only config was the default has 1.00x, one measurement on both
sides). ``backend`` says which backend holds the key (``triton`` or ``vendor``), with the vendor
path's name and its time from the best row. A study with no best says why in ``undecided``: the
distinct first lines of its trials' and vendor paths' errors, or that nothing was measured.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from db import Database, Objective, StudyStatus, TrialOutcome, repository
from db.repository import JobRecord
from orchestrator.app.rates import rates
from orchestrator.app.study_best import rows_by_key
from search_spaces.registry import spec_from_storage

if TYPE_CHECKING:
    from orchestrator.run.promotion import Winner


def collect(
    database: Database,
    job_id: int,
    kernel_modules: Collection[str] = (),
    winners: Mapping[int, Winner] | None = None,
) -> dict[str, Any]:
    """The job's summary: ``{"job", "status", "kernel", "studies": [...]}`` (see the module doc);
    ``winners``: per study id, what this run's promotion re-timed.

    The job row's kernel is loaded through :func:`search_spaces.registry.spec_from_storage`: a
    ``module:attribute`` is imported only if ``kernel_modules`` allows it.
    """
    with database.session(readonly=True) as s:
        job: JobRecord = repository.get_job(s, job_id)
        kernel = spec_from_storage(str(job.spec.get("kernel", job.kernel_name)), kernel_modules)
        objective = job.objective
        studies = []
        for study in repository.studies_for_job(s, job_id):
            cls = study.device_class
            trials = repository.trials_for_study(s, study.id)
            ok = {t.config_key: t for t in trials if t.outcome is TrialOutcome.OK and t.median_ms}
            bests = repository.get_best(
                s,
                job.kernel_name,
                study.problem_key,
                cls.key,
                job.kernel_version,
                objective=objective,
            )
            best_cfg: dict[str, Any] | None = None
            best_ms: float | None = None
            best_job: int | None = None
            decided: dict[str, Any] = {}
            if bests:
                chosen = rows_by_key(bests, job_id)[(study.problem_key, cls.key)]
                best_cfg, best_ms, best_job = chosen.config, chosen.time_ms, chosen.job_id
                decided = {
                    "backend": chosen.backend.value,
                    "vendor": chosen.vendor,
                    "triton_ms": chosen.triton_ms,
                    "vendor_ms": chosen.vendor_ms,
                    "noise": chosen.noise,
                }
            elif ok:
                fastest = min(ok.values(), key=lambda t: t.median_ms or 0.0)
                best_cfg, best_ms, best_job = fastest.config, fastest.median_ms, job_id
            problem = dict(study.problem)
            entry: dict[str, Any] = {
                "problem": problem,
                "device_class": cls.key,
                "best": None
                if best_cfg is None
                else {"config": best_cfg, "time_ms": best_ms, "job": best_job, **decided},
                "backend": decided.get("backend", "triton") if best_cfg is not None else None,
                "trials": repository.outcome_counts(s, study.id),
                "measured": sum(
                    1 for t in trials if not t.reused and t.outcome is not TrialOutcome.INFRA
                ),
                "reused": sum(1 for t in trials if t.reused),
                "status": study.status.value,
                "sampler": study.sampler,
            }
            if best_cfg is None and study.status is not StudyStatus.RUNNING:
                vendor = repository.vendor_trials_for_study(s, study.id)
                entry["undecided"] = undecided(
                    [(f"config {t.config_key}", t.outcome, t.error) for t in trials]
                    + [(f"vendor path {v.vendor}", v.outcome, v.error) for v in vendor]
                )
            winner = (winners or {}).get(study.id)
            entry["retimed"] = None if winner is None else _retimed(winner)
            # Speedups compare like with like: times of one re-timing, never a trial's.
            entry["speedup_vs_default"] = winner.speedup_vs_default if winner else None
            entry["speedup_vs_median"] = winner.speedup_vs_median if winner else None
            entry["speedup_vs_vendor"] = winner.speedup_vs_vendor if winner else None
            if best_ms:
                r = rates(kernel, problem, best_ms, cls.name)
                entry.update(tflops=r.tflops, gbs=r.gbs, roofline_pct=r.roofline_pct)
            studies.append(entry)
    return {
        "job": job.id,
        "status": job.status.value,
        "kernel": job.kernel_name,
        "kernel_version": job.kernel_version,
        "objective": objective.value,
        "error": job.error,
        "studies": studies,
    }


#: Most distinct errors ``undecided`` names.
UNDECIDED_ERRORS = 3


def undecided(measured: list[tuple[str, TrialOutcome, str | None]]) -> str:
    """Why a finished study holds no decision, from its measurements ((what, outcome, error),
    oldest first): how many failed, and the first of each distinct failure, at most
    UNDECIDED_ERRORS."""
    failed = [m for m in measured if m[1] is not TrialOutcome.OK]
    if not measured:
        return "nothing was measured: the job ended before this key's first trial or vendor path"
    seen: dict[str, str] = {}
    for what, outcome, error in failed:
        line = error.strip().splitlines()[0] if error and error.strip() else ""
        seen.setdefault(
            f"{outcome.value}: {line}", f"{what}: {outcome.value}{': ' if line else ''}{line}"
        )
    named = list(seen.values())
    more = f" (and {len(named) - UNDECIDED_ERRORS} more)" if len(named) > UNDECIDED_ERRORS else ""
    return f"{len(failed)} of {len(measured)} measurements failed" + (
        ": " + "; ".join(named[:UNDECIDED_ERRORS]) + more if named else ""
    )


def _retimed(winner: Winner) -> dict[str, Any]:
    """This job's winner as its final re-timing measured it, with the two references."""
    return {
        "config": winner.config,
        "time_ms": winner.time_ms,
        "retimed": winner.retimed,
        "promoted": winner.promoted,
        "default_ms": winner.default_ms,
        "median_ms": winner.median_ms,
        "backend": winner.backend.value,
        "vendor": winner.vendor,
        "vendor_ms": winner.vendor_ms,
        "noise": winner.noise,
        "held": winner.held,
    }


def _backend(best: dict[str, Any]) -> str:
    """``triton`` or ``vendor (name)``."""
    backend = str(best.get("backend") or "triton")
    return (
        f"{backend} ({best['vendor']})" if backend == "vendor" and best.get("vendor") else backend
    )


def _vendor(retimed: dict[str, Any]) -> str:
    ms = retimed.get("vendor_ms")
    return "-" if ms is None else f"{ms:.4g} ms ({retimed.get('vendor')})"


def _pct(fraction: float | None) -> float | None:
    return None if fraction is None else 100 * fraction


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def render(summary: dict[str, Any], console: Console) -> None:
    """Print one two-column table per (problem, device class)."""
    objective = summary["objective"]
    timed = "" if objective == Objective.KERNEL.value else f" · {objective} objective"
    console.print(f"job {summary['job']} · {summary['kernel']} · {summary['status']}{timed}")
    for st in summary["studies"]:
        best = st["best"] or {}
        problem = ",".join(f"{k}={v}" for k, v in st["problem"].items())
        table = Table(title=f"{problem} @ {st['device_class']}", show_header=False)
        table.add_column("", style="bold")
        table.add_column("")
        counts = ", ".join(f"{k} {v}" for k, v in sorted(st["trials"].items()))
        config = ", ".join(f"{k}={v}" for k, v in (best.get("config") or {}).items())
        retimed = st.get("retimed") or {}
        winner = ("winner, re-timed", _fmt(retimed.get("time_ms"), ".4g", " ms"))
        if retimed and not retimed["retimed"]:
            winner = ("winner", _fmt(retimed["time_ms"], ".4g", " ms (its trial, not re-timed)"))
        rows = [
            ("backend", _backend(best) if best else "-"),
            ("best config", config or "-"),
            ("time", _fmt(best.get("time_ms"), ".4g", " ms")),
            ("TFLOP/s", _fmt(st.get("tflops"), ".3g")),
            ("GB/s", _fmt(st.get("gbs"), ".3g")),
            ("% of roofline", _fmt(st.get("roofline_pct"), ".0f", "%")),
        ]
        if retimed.get("held"):
            rows.append(("this job's winner", "the stored best holds (inside the noise floor)"))
        elif retimed and not retimed["promoted"]:
            mine = ", ".join(f"{k}={v}" for k, v in retimed["config"].items())
            rows.append(("this job's winner", f"{mine} (not faster than the stored best)"))
        rows += [
            winner,
            ("default, same timing", _fmt(retimed.get("default_ms"), ".4g", " ms")),
            ("median config, same timing", _fmt(retimed.get("median_ms"), ".4g", " ms")),
            ("vendor path, same timing", _vendor(retimed)),
            ("noise floor", _fmt(_pct(retimed.get("noise")), ".2g", "%")),
            ("vs default config", _fmt(st.get("speedup_vs_default"), ".2f", "x")),
            ("vs median config", _fmt(st.get("speedup_vs_median"), ".2f", "x")),
            ("vs vendor", _fmt(st.get("speedup_vs_vendor"), ".2f", "x")),
            ("trials", f"{counts or 'none'} (measured {st['measured']}, reused {st['reused']})"),
        ]
        if st.get("undecided"):
            rows.append(("no decision", f"[red]{escape(st['undecided'])}[/red]"))
        for name, value in rows:
            table.add_row(name, value)
        console.print(table)
    if summary.get("error"):
        console.print(f"[red]error:[/red] {summary['error']}")
