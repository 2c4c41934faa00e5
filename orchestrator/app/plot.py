"""``tunefleet plot``: convergence and parameter importance per study, as PNG files and one HTML page.

Convergence is the best ``ok`` time so far against the trial number (trials of the study in the
order they were recorded, reused ones included). Parameter importance is the share of the variance
of log(time) over the ``ok`` trials that each parameter explains on its own (eta squared of a
one-way grouping by the parameter's value), normalized to sum to 1; it needs no scikit-learn and
is skipped for a study with fewer than 3 ok trials. The HTML page embeds the PNGs (base64) and a
table of each study's fastest configs; it loads nothing from the network.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import html
import json
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from db.states import TrialOutcome
from orchestrator.app.jobs import visible_job
from orchestrator.app.views import View
from orchestrator.export.bundle import slug
from orchestrator.output import check_folder, write_atomically

if TYPE_CHECKING:
    from db import Database


class TrialLike(Protocol):
    """What convergence and importance read of a trial (a stored row or a :class:`PlotTrial`)."""

    @property
    def outcome(self) -> TrialOutcome: ...
    @property
    def median_ms(self) -> float | None: ...
    @property
    def config(self) -> dict[str, Any]: ...


@dataclasses.dataclass(frozen=True)
class PlotTrial(View):
    """One trial as a plot reads it."""

    outcome: TrialOutcome
    median_ms: float | None
    config: dict[str, Any]
    reused: bool


@dataclasses.dataclass(frozen=True)
class PlotStudy(View):
    """One study of a job and its trials in the order they were recorded."""

    id: int
    problem: dict[str, Any]
    device_class: str
    trials: tuple[PlotTrial, ...]


@dataclasses.dataclass(frozen=True)
class JobPlot(View):
    """What ``tunefleet plot`` draws of a job: its studies with their trials."""

    job_id: int
    studies: tuple[PlotStudy, ...]


def plot_data(database: Database, job_id: int, *, team: str | None = None) -> JobPlot:
    """Job ``job_id``'s studies and trials (``team`` given: only that team's job; another's is
    the same NotFound as a missing one)."""
    from db import repository

    with database.session(readonly=True) as s:
        visible_job(s, job_id, team)
        studies = tuple(
            PlotStudy(
                st.id,
                dict(st.problem),
                st.device_class.key,
                tuple(
                    PlotTrial(t.outcome, t.median_ms, dict(t.config), t.reused)
                    for t in repository.trials_for_study(s, st.id)
                ),
            )
            for st in repository.studies_for_job(s, job_id)
        )
    return JobPlot(job_id, studies)


def convergence(trials: Sequence[TrialLike]) -> list[float | None]:
    """Best ok time so far after each trial (None until the first ok one); infra rows skipped."""
    out: list[float | None] = []
    best: float | None = None
    for t in trials:
        if t.outcome is TrialOutcome.INFRA:
            continue
        if t.outcome is TrialOutcome.OK and t.median_ms is not None:
            best = t.median_ms if best is None else min(best, t.median_ms)
        out.append(best)
    return out


def importance(trials: Sequence[TrialLike]) -> dict[str, float]:
    """Parameter -> share of log-time variance explained (see the module doc); {} if too few."""
    ok = [t for t in trials if t.outcome is TrialOutcome.OK and t.median_ms and t.median_ms > 0]
    if len(ok) < 3:
        return {}
    y = [math.log(t.median_ms or 1.0) for t in ok]
    mean = statistics.fmean(y)
    total = sum((v - mean) ** 2 for v in y)
    if total <= 0:
        return {}
    raw: dict[str, float] = {}
    for name in ok[0].config:
        groups: dict[str, list[float]] = {}
        for t, v in zip(ok, y, strict=True):
            groups.setdefault(json.dumps(t.config.get(name)), []).append(v)
        between = sum(len(g) * (statistics.fmean(g) - mean) ** 2 for g in groups.values())
        raw[name] = between / total
    norm = sum(raw.values()) or 1.0
    return dict(sorted(((k, v / norm) for k, v in raw.items()), key=lambda kv: -kv[1]))


def _png(path: Path, title: str, curve: list[float | None], imp: dict[str, float]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    xs = [i + 1 for i, v in enumerate(curve) if v is not None]
    ax1.step(xs, [v for v in curve if v is not None], where="post")
    ax1.set_xlabel("trial")
    ax1.set_ylabel("best time so far (ms)")
    ax1.set_title("convergence")
    ax1.grid(alpha=0.3)
    if imp:
        names = list(imp)[::-1]
        ax2.barh(names, [imp[n] for n in names])
        ax2.set_xlabel("share of log-time variance")
    else:
        ax2.text(0.5, 0.5, "fewer than 3 ok trials", ha="center", va="center")
        ax2.set_axis_off()
    ax2.set_title("parameter importance")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def write_plot(plot: JobPlot, out_dir: str | Path, top: int = 5) -> list[Path]:
    """Write ``study-<id>-<class>.png`` per study of ``plot`` and ``job-<id>.html`` into
    ``out_dir``; return the paths."""
    job_id = int(plot.job_id)  # names files: a number, whoever sent the data
    out = Path(out_dir)
    check_folder(out)
    paths: list[Path] = []
    sections: list[str] = []
    for study in plot.studies:
        trials = study.trials
        label = ",".join(f"{k}={v}" for k, v in study.problem.items()) + f" @ {study.device_class}"
        path = out / f"study-{int(study.id)}-{slug(study.device_class)}.png"
        imp = importance(trials)
        png = functools.partial(_png, title=label, curve=convergence(trials), imp=imp)
        write_atomically(path, png)
        paths.append(path)
        fastest = sorted(
            (t for t in trials if t.outcome is TrialOutcome.OK and t.median_ms),
            key=lambda t: t.median_ms or 0.0,
        )[:top]
        rows_html = "".join(
            f"<tr><td>{t.median_ms:.4g}</td><td><code>{html.escape(json.dumps(t.config))}"
            f"</code></td><td>{'yes' if t.reused else ''}</td></tr>"
            for t in fastest
        )
        image = base64.b64encode(path.read_bytes()).decode()
        sections.append(
            f"<h2>{html.escape(label)}</h2><img src='data:image/png;base64,{image}'/>"
            f"<table><tr><th>time (ms)</th><th>config</th><th>reused</th></tr>{rows_html}</table>"
        )
    page = out / f"job-{job_id}.html"
    text = (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>tunefleet job {job_id}</title><style>body{{font-family:sans-serif}}"
        "td,th{padding:2px 8px;text-align:left}</style></head><body>"
        f"<h1>tunefleet job {job_id}</h1>{''.join(sections) or '<p>no studies</p>'}</body></html>\n"
    )
    write_atomically(page, lambda temp: temp.write_text(text))
    paths.append(page)
    return paths
