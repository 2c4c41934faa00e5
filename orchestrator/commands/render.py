"""Rendering of the application layer's views for the job commands: tables, JSON and live progress.

Local commands and ``--server`` commands render the same views (orchestrator.app.views), so their
output is the same.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rich.table import Table

from db import Objective
from orchestrator.app.study_best import BestSource
from orchestrator.commands._common import console, print_json
from orchestrator.commands.tables import Column, print_table

if TYPE_CHECKING:
    from orchestrator.app.views import (
        BestView,
        JobDetail,
        JobPage,
        JobSummaryView,
        JobView,
        StudyProgress,
    )
    from orchestrator.run.progress import Reporter

#: Seconds between two polls of a watched job.
WATCH_POLL_S = 1.0


def _fmt_ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _pairs(values: dict[str, Any], sep: str = ",") -> str:
    return sep.join(f"{k}={v}" for k, v in values.items())


def age(at: datetime, now: datetime | None = None) -> str:
    """``at``'s age in the largest whole unit: ``42s``, ``5m``, ``3h``, ``2d``."""
    seconds = max(0.0, ((now or datetime.now(at.tzinfo)) - at).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def job_row(job: JobView) -> dict[str, Any]:
    """A job as a row of ``jobs --json`` (the keys it always had, then progress and times)."""
    return {
        "job": job.id,
        "kind": job.kind,
        "kernel": job.kernel,
        "status": job.status.value,
        "team": job.team,
        "problems": len(job.problems),
        "objective": job.objective.value,
        "created_at": job.created_at.isoformat(timespec="seconds"),
        "error": job.error,
        "priority": job.priority,
        "trials_done": job.trials_done,
        "trials_budget": job.trials_budget,
        "best_ms": job.best_ms,
        "started_at": job.started_at.isoformat(timespec="seconds") if job.started_at else None,
        "finished_at": job.finished_at.isoformat(timespec="seconds") if job.finished_at else None,
    }


def show_jobs(page: JobPage, json_out: bool, wide: bool = False) -> None:
    """The ``jobs`` listing: one row per job, newest first, and how many more match."""
    if json_out:
        print_json(
            {
                "jobs": [job_row(j) for j in page.items],
                "total": page.total,
                "limit": page.limit,
                "offset": page.offset,
                "next_before": page.next_before,
            }
        )
        return
    columns = [
        Column("job", justify="right"),
        Column("kernel"),
        Column("status"),
        Column("trials", justify="right"),
        Column("best ms", justify="right"),
        Column("team"),
        Column("age", justify="right"),
    ]
    rows = [
        [
            str(j.id),
            j.kernel + ("" if j.kind == "tune" else f" ({j.kind})"),
            j.status.value
            + (
                " (cancel asked)"
                if j.cancel_requested and j.status.value in ("queued", "running")
                else ""
            ),
            f"{j.trials_done}/{j.trials_budget}",
            _fmt_ms(j.best_ms),
            j.team or "-",
            age(j.created_at),
        ]
        for j in page.items
    ]
    console().print(f"jobs ({len(page.items)} of {page.total})")
    print_table(columns, rows, wide=wide)
    if page.next_before is not None:
        console().print(f"older: --before {page.next_before}")


def show_detail(detail: JobDetail, json_out: bool) -> None:
    """``job ID``: the job's state and one row per study (progress, outcomes, best so far)."""
    if json_out:
        print_json(detail.to_dict())
        return
    j = detail.job
    c = console()
    timed = "" if j.objective is Objective.KERNEL else f" · {j.objective.value} objective"
    c.print(
        f"job {j.id} · {j.kernel} · [bold]{j.status.value}[/] · {j.trials_done}/{j.trials_budget} "
        f"trials · team {j.team or '-'} · priority {j.priority}{timed}"
    )
    times = [f"created {j.created_at:%Y-%m-%d %H:%M:%S}"]
    if j.started_at:
        times.append(f"started {j.started_at:%H:%M:%S}")
    if j.finished_at:
        times.append(f"finished {j.finished_at:%H:%M:%S}")
    c.print(" · ".join(times) + " UTC")
    if detail.studies:
        table = Table()
        table.add_column("study", overflow="fold")
        table.add_column("status")
        table.add_column("trials", justify="right")
        table.add_column("outcomes")
        table.add_column("best ms", justify="right")
        table.add_column("best config", overflow="fold")
        for st in detail.studies:
            table.add_row(
                st.label,
                st.status.value,
                f"{st.done}/{st.budget}",
                ", ".join(f"{k} {v}" for k, v in st.outcomes.items()) or "-",
                _study_best(st),
                _pairs(st.best_config) if st.best_config else "-",
            )
        c.print(table)
        for note in _study_notes(detail.studies):
            c.print(note, markup=False)
        decided = [st for st in detail.studies if st.backend]
        if decided:
            keys = Table()
            keys.add_column("study", overflow="fold")
            keys.add_column("backend")
            keys.add_column("vs default", justify="right")
            keys.add_column("vs vendor", justify="right")
            for st in decided:
                backend = f"vendor ({st.vendor})" if st.backend == "vendor" else st.backend
                keys.add_row(
                    st.label,
                    backend or "-",
                    _speedup(st.speedup_vs_default),
                    _speedup(st.speedup_vs_vendor),
                )
            c.print(keys)
    elif j.status.value == "queued":
        c.print(
            f"waiting for a scheduler to run it (`tunefleet resume {j.id} --db URL` runs it "
            "here on its database)"
        )
    if j.error:
        c.print(f"[red]error:[/red] {j.error}")


#: After a study's best in ``job``: its fastest trial so far (not re-timed; the key undecided).
SO_FAR_MARK = " (so far)"


def _study_best(st: StudyProgress) -> str:
    """A study's best time as ``job`` shows it, marked when it is the best trial so far or was
    written by a cancelled job (the page marks it alike)."""
    if st.best_ms is None:
        return "-"
    so_far = SO_FAR_MARK if st.best_source is BestSource.SO_FAR else ""
    return f"{_fmt_ms(st.best_ms)}{so_far}{CANCELLED_MARK if st.cancelled_job else ''}"


def _study_notes(studies: Sequence[StudyProgress]) -> list[str]:
    """The lines explaining the marks of ``_study_best``."""
    notes = []
    if any(st.best_source is BestSource.SO_FAR for st in studies):
        notes.append("(so far): the fastest trial yet; the final re-timing decides the best")
    jobs = sorted({st.best_job for st in studies if st.cancelled_job and st.best_job is not None})
    if jobs:
        notes.append(_cancelled_line(jobs))
    return notes


def show_summary(summary: JobSummaryView, json_out: bool) -> None:
    """The end-of-job summary of ``tune`` and ``resume``."""
    from orchestrator.app.summary import render

    if json_out:
        print_json(summary.to_dict())
    else:
        render(summary.to_dict(), console())


def best_row(b: BestView) -> dict[str, Any]:
    """A best config as a row of ``best --json``."""
    return {
        "problem": b.problem,
        "device_class": b.device_class,
        "triton": b.triton,
        "objective": b.objective.value,
        "config": b.config,
        "time_ms": b.time_ms,
        "job": b.job_id,
        "cancelled_job": b.cancelled_job,
        "team": b.team,
        "tflops": b.tflops,
        "gbs": b.gbs,
        "roofline_pct": b.roofline_pct,
        "updated_at": b.updated_at.isoformat(timespec="seconds"),
        "revalidation": b.revalidation,
        "backend": b.backend,
        "vendor": b.vendor,
        "vendor_ms": b.vendor_ms,
        "default_ms": b.default_ms,
        "noise": b.noise,
        "speedup_vs_default": b.speedup_vs_default,
        "speedup_vs_vendor": b.speedup_vs_vendor,
    }


def _speedup(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _revalidated(mark: dict[str, Any] | None) -> str:
    """``best``'s revalidation cell: ``-``, ``holds``, ``REGRESSED 1.31x`` or ``FAILED``."""
    if mark is None:
        return "-"
    state = str(mark["state"])
    text = state if state == "holds" else state.upper()
    return text if mark.get("ratio") is None else f"{text} {mark['ratio']:.2f}x"


def show_best(
    kernel: str,
    version: str | None,
    objective: Objective,
    rows_in: Sequence[BestView],
    json_out: bool,
    wide: bool = False,
) -> None:
    """``best``: one row per stored best config (problem, class, config, time, provenance)."""
    if json_out:
        print_json(
            {"kernel": kernel, "kernel_version": version, "best": [best_row(b) for b in rows_in]}
        )
        return
    named = f"{kernel} version {version}" if version else kernel
    if not rows_in:
        print(f"no best configs stored for {named} (objective {objective.value})", file=sys.stderr)
        return
    console().print(f"best configs · {kernel} {version or ''} · {objective.value}")
    columns = [
        Column("problem"),
        Column("class"),
        Column("triton", essential=False),
        Column("config"),
        Column("time (ms)", justify="right"),
        Column("backend", essential=False),
        Column("vs default", justify="right", essential=False),
        Column("vs vendor", justify="right", essential=False),
        Column("job", justify="right"),
        Column("team", essential=False),
        # Essential once any row was revalidated; a column of "-" otherwise.
        Column("revalidated", essential=any(b.revalidation for b in rows_in)),
    ]
    # ", " lets problems and configs wrap between fields, so dtype=bfloat16 stays whole.
    rows = [
        [
            _pairs(b.problem, ", "),
            b.device_class,
            b.triton,
            _pairs(b.config, ", "),
            f"{b.time_ms:.4g}",
            b.backend if b.vendor is None or b.backend == "triton" else f"vendor ({b.vendor})",
            _speedup(b.speedup_vs_default),
            _speedup(b.speedup_vs_vendor),
            f"{b.job_id}{CANCELLED_MARK if b.cancelled_job else ''}",
            b.team or "-",
            _revalidated(b.revalidation),
        ]
        for b in rows_in
    ]
    print_table(columns, rows, wide=wide)
    note = cancelled_note(rows_in)
    if note:
        console().print(note, markup=False)


#: After a job id in ``best``: the config comes from a cancelled job.
CANCELLED_MARK = "*"


def cancelled_note(rows: Sequence[BestView]) -> str | None:
    """The line explaining CANCELLED_MARK, naming the cancelled jobs (None if there are none)."""
    jobs = sorted({b.job_id for b in rows if b.cancelled_job and b.job_id is not None})
    return _cancelled_line(jobs) if jobs else None


def _cancelled_line(jobs: Sequence[int]) -> str:
    named = ", ".join(map(str, jobs))
    return (
        f"{CANCELLED_MARK} from cancelled job {named}: its fastest trial so far, not re-timed; "
        f"its team's `tunefleet resume {jobs[0]}` finishes it (a server queues it again)"
    )


def watch(
    fetch: Callable[[], JobDetail],
    reporter: Reporter,
    poll_s: float = WATCH_POLL_S,
    sleep: Callable[[float], None] = time.sleep,
) -> JobDetail:
    """Show a job's progress through ``reporter`` (the bars of a local ``tune``), polling
    ``fetch`` every ``poll_s`` seconds until the job is done, failed or cancelled."""
    shown: set[str] = set()
    status = None
    try:
        while True:
            detail = fetch()
            if detail.job.status is not status:
                status = detail.job.status
                reporter.note(f"job {detail.job.id}: {status.value}")
            for st in detail.studies:
                if st.label not in shown:
                    shown.add(st.label)
                    reporter.add(st.label, st.budget, st.done)
                reporter.update(st.label, st.done, st.best_ms)
            if detail.finished:
                return detail
            sleep(poll_s)
    finally:
        reporter.close()
