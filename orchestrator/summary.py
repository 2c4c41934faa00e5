"""A job's results, read back from the database: a JSON-ready dict and rich tables.

Per study (problem, device class): the best config for the key (the promoted row, preferring the
one this job wrote), its time, TFLOP/s and GB/s, % of the device's roofline when the class's peak
numbers are known (never for ``cpu``), speedups of the best config's trial over the median ``ok``
trial and over the default config's trial (both in this study; never the re-timed time over a
trial's), and trials by outcome, measured and reused.
"""

from __future__ import annotations

import statistics
from collections.abc import Collection
from typing import Any

from rich.console import Console
from rich.table import Table

from db import Database, Objective, TrialOutcome, repository
from db.repository import JobRecord
from orchestrator.bundle_export import default_config
from orchestrator.rates import rates
from search_spaces.registry import spec_from_storage
from search_spaces.space import config_key


def collect(
    database: Database, job_id: int, kernel_modules: Collection[str] = ()
) -> dict[str, Any]:
    """The job's summary: ``{"job", "status", "kernel", "studies": [...]}`` (see the module doc).

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
            if bests:
                chosen = min(bests, key=lambda b: (b.job_id != job_id, b.time_ms))
                best_cfg, best_ms, best_job = chosen.config, chosen.time_ms, chosen.job_id
            elif ok:
                fastest = min(ok.values(), key=lambda t: t.median_ms or 0.0)
                best_cfg, best_ms, best_job = fastest.config, fastest.median_ms, job_id
            problem = dict(study.problem)
            entry: dict[str, Any] = {
                "problem": problem,
                "device_class": cls.key,
                "best": None
                if best_cfg is None
                else {"config": best_cfg, "time_ms": best_ms, "job": best_job},
                "trials": repository.outcome_counts(s, study.id),
                "measured": sum(
                    1 for t in trials if not t.reused and t.outcome is not TrialOutcome.INFRA
                ),
                "reused": sum(1 for t in trials if t.reused),
                "status": study.status.value,
                "sampler": study.sampler,
            }
            if best_ms:
                # Speedups compare like with like: the best config's own trial in this study
                # against the median ok trial and the default's trial, all measured the same
                # way (the best's re-timed time_ms is never divided by a trial's time).
                own = ok.get(config_key(best_cfg)) if best_cfg is not None else None
                own_ms = own.median_ms if own is not None else None
                default = ok.get(config_key(default_config(kernel, cls)))
                medians = [t.median_ms for t in ok.values() if t.median_ms]
                entry["best_trial_ms"] = own_ms
                entry["default_time_ms"] = default.median_ms if default is not None else None
                entry["speedup_vs_median"] = (
                    statistics.median(medians) / own_ms if medians and own_ms else None
                )
                entry["speedup_vs_default"] = (
                    entry["default_time_ms"] / own_ms
                    if entry["default_time_ms"] and own_ms
                    else None
                )
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
        for name, value in (
            ("best config", config or "-"),
            ("time", _fmt(best.get("time_ms"), ".4g", " ms")),
            ("TFLOP/s", _fmt(st.get("tflops"), ".3g")),
            ("GB/s", _fmt(st.get("gbs"), ".3g")),
            ("% of roofline", _fmt(st.get("roofline_pct"), ".0f", "%")),
            ("vs median trial", _fmt(st.get("speedup_vs_median"), ".2f", "x")),
            ("vs default config", _fmt(st.get("speedup_vs_default"), ".2f", "x")),
            ("default config trial", _fmt(st.get("default_time_ms"), ".4g", " ms")),
            ("trials", f"{counts or 'none'} (measured {st['measured']}, reused {st['reused']})"),
        ):
            table.add_row(name, value)
        console.print(table)
    if summary.get("error"):
        console.print(f"[red]error:[/red] {summary['error']}")
