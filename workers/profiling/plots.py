"""PNG plots of a profile report: TKLQT, latency (eager and graph) and GPU idle share vs batch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: (file stem, y-axis label, value of a report row, log y axis)
PLOTS: tuple[tuple[str, str, str, bool], ...] = (
    ("tklqt", "TKLQT per forward (ms)", "tklqt_ms", True),
    ("latency", "latency per forward (ms, median)", "latency_ms", True),
    ("idle", "GPU idle share of the forward", "idle_share", False),
)


def plot_report(rows: list[dict[str, Any]], out: Path, title: str) -> list[Path]:
    """One PNG per entry of PLOTS, a line per (phase, mode); rows lacking the value are skipped."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    written = []
    for stem, label, key, log in PLOTS:
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        series = sorted({(r["phase"], r["mode"]) for r in rows})
        for phase, mode in series:
            points = sorted(
                (r["batch"], r[key])
                for r in rows
                if r["phase"] == phase and r["mode"] == mode and r.get(key) is not None
            )
            if points:
                ax.plot(*zip(*points, strict=True), marker="o", label=f"{phase} {mode}")
        ax.set_xscale("log", base=2)
        if log:
            ax.set_yscale("log")
        ax.set_xlabel("batch size")
        ax.set_ylabel(label)
        ax.set_title(title, fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
        path = out / f"{stem}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written
