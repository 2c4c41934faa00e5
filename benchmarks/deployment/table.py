"""Tables of the deployment benchmark (benchmarks/deployment/run.sh), and the jobs it tunes.

Usage: python benchmarks/deployment/table.py RES          one markdown table per model
       python benchmarks/deployment/table.py --jobs DIR N  the hottest emitted job per kernel and phase
       python benchmarks/deployment/table.py --weights DIR N  their shares of the profiled time,
                                                              comma-separated, in the same order

A model's folder ``RES/MODEL`` holds per phase (``prefill``, ``decode``, ``prefill-long-SEQ`` per
long sequence; ``prefill-long`` from older runs) a baseline profile ``PHASE/report.json`` and a
``profile --with-bundle`` report ``PHASE-tuned/report.json``. A row: baseline and swapped latency
(medians, interleaved), their change, the A/A change (the baseline timed again, last in each
round: the rounds' own noise; "-" in reports from before it), the speed-up (baseline / swapped),
the Amdahl bound of the
swapped kernels (workers/profiling/bound.py: the best change their measured kernel speed-ups allow,
and the part of the swapped time those measurements cover), the ceiling (the change the swapped
problems allow at the device's roofline, vendor peak numbers: what no kernel can beat; "-" in
reports from before it), the share of the bound reached (the change over the bound's, where the
bound is a gain larger than the row's A/A and the change is not a loss), the in-model
figure and the share of it the all-swapped forward reached (the change in the eager traces' GPU
kernel time per forward, all-swapped minus baseline, over the baseline latency: what the kernels'
time inside the model allows, where the bound takes their studies' speed-ups; a bound of more gain
says they ran slower in the model than in their studies), the swapped kernels' share of the
forward, the errors of baseline and swapped logits against the float32 twin (routed as each was: a
note counts the tokens it would have routed otherwise), and whether the point was refused. Per
report, what was swapped: problems run on Triton / kept on the vendor path, per kernel. Under the
table, per phase, the kernels whose problems the bundle answered by a nearest entry (no speed-up of
their own: the bound counts them as s = 1), and the problems whose study timed a vendor path more
than 25% off the model's own op (workers/profiling/fidelity.py). Exit 2 on bad input.
"""

from __future__ import annotations

import json
import re
import sys
from itertools import zip_longest
from pathlib import Path
from typing import Any

#: A long-sequence phase's folder: ``prefill-long-SEQ`` (``prefill-long``: one LONG_SEQ, older runs).
LONG = re.compile(r"prefill-long(?:-(\d+))?")


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _speedup(row: dict[str, Any]) -> str:
    tuned = row.get("tuned_ms")
    return f"{row['baseline_ms'] / tuned:.3f}x" if tuned else "-"


def _of_bound(change: float | None, bound: float | None, noise: float = 0.0) -> float | None:
    """The share of a gain bound that a measured change reached (None where the bound claims no
    gain beyond ``noise``, a relative change, or the swap lost)."""
    if change is None or bound is None or bound >= -abs(noise) or change > 0:
        return None
    return change / bound


def _in_model(row: dict[str, Any]) -> str:
    """The in-model change and, in brackets, the share of it the all-swapped forward reached."""
    gpu = (row.get("in_model") or {}).get("change")
    swapped = row.get("swapped_all_ms")
    change = swapped / row["baseline_ms"] - 1.0 if swapped else None
    return f"{_num(gpu, '+.1%')} ({_num(_of_bound(change, gpu), '.0%')})"


def phases(folder: Path) -> list[str]:
    """The phases of a model's folder (``-tuned`` stripped): prefill, decode, then the long
    sequences by length."""
    names = {p.name.removesuffix("-tuned") for p in folder.iterdir() if p.is_dir()}
    matches = [m for n in names if (m := LONG.fullmatch(n))]
    long = [m.group(0) for m in sorted(matches, key=lambda m: int(m.group(1) or 0))]
    return [n for n in ("prefill", "decode") if n in names] + long


def hottest_jobs(folder: Path, limit: int) -> list[tuple[str, float]]:
    """The emitted job files of ``folder``'s baseline reports, each with its share (its problems'
    summed share of the phase's profiled time): per phase, the hottest job of each kernel, hottest
    first, at most ``limit``; the phases' lists interleaved (every phase's first, then every
    phase's second, ...)."""
    per_phase: list[list[tuple[str, float]]] = []
    for phase in phases(folder):
        report = folder / phase / "report.json"
        if not report.is_file():
            continue
        data = json.loads(report.read_text())
        ranked = sorted(
            zip(data.get("emitted_jobs", []), data["hot_shapes"], strict=False),
            key=lambda job: -sum(p["share"] for p in job[1]["problems"]),
        )
        chosen: dict[str, tuple[str, float]] = {}
        for path, hot in ranked:
            chosen.setdefault(hot["kernel"], (path, sum(p["share"] for p in hot["problems"])))
        per_phase.append(list(chosen.values())[:limit])
    return [job for rank in zip_longest(*per_phase) for job in rank if job is not None]


def _swapped(used: dict[str, dict[str, int]]) -> str:
    return ", ".join(f"{k} {c.get('triton', 0)}/{c.get('kept vendor', 0)}" for k, c in used.items())


def _nearest(lookups: dict[str, dict[str, int]]) -> str:
    """``kernel N of M`` for each kernel with problems answered by a nearest entry."""
    return ", ".join(
        f"{k} {c['nearest']} of {sum(c.values())}" for k, c in lookups.items() if c.get("nearest")
    )


def _versus(phase: str, row: dict[str, Any]) -> list[str]:
    """The row's flagged comparisons of a study's vendor time with the model's own op
    (workers.profiling.fidelity), one text each."""
    from workers.profiling.fidelity import describe

    items = row.get("vendor_vs_model") or []
    return [f"{phase} b{row['batch']} {describe(v)}" for v in items if v["differs"]]


def model_table(folder: Path) -> list[str]:
    lines: list[str] = []
    notes: list[str] = []
    nearest: list[str] = []
    rerouted: list[str] = []
    versus: list[str] = []
    for phase in phases(folder):
        report = folder / f"{phase}-tuned" / "report.json"
        if not report.is_file():
            continue
        data = json.loads(report.read_text())
        wb = data.get("with_bundle") or {}
        notes += [n for n in data.get("notes", []) if n not in notes]
        if not lines:
            layers = f", {data['layers']} layers" if data.get("layers") else ""
            lines += [
                f"## {data['model']}{layers} ({data['dtype']}, {data['device']})",
                "",
                "| phase | seq | batch | mode | baseline ms | swapped ms | change | A/A | speed-up "
                "| bound (measured) | ceiling | of bound | in-model (reached) | swapped share "
                "| err base | err swap | refused / policy |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
            ]
        for r in wb.get("rows", []):
            bound = r.get("amdahl") or {}
            lines.append(
                f"| {phase} | {data['seq']} | {r['batch']} | {r['mode']} | {r['baseline_ms']:.3f} "
                f"| {_num(r['tuned_ms'], '.3f')} | {_num(r['change'], '+.1%')} "
                f"| {_num(r.get('aa_change'), '+.1%')} | {_speedup(r)} "
                f"| {_num(bound.get('change'), '+.1%')} ({_num(bound.get('measured_share'), '.0%')}) "
                f"| {_num(bound.get('ceiling'), '+.1%')} "
                f"| {_num(_of_bound(r['change'], bound.get('change'), r.get('aa_change') or 0.0), '.0%')} "
                f"| {_in_model(r)} "
                f"| {_num(bound.get('swapped_share'), '.0%')} "
                f"| {_num(r.get('baseline_error'), '.2g')} | {_num(r.get('swapped_error'), '.2g')} "
                f"| {r['refused'] or _policy(r)} |"
            )
            versus += [v for v in _versus(phase, r) if v not in versus]
            moved = r.get("baseline_rerouted"), r.get("swapped_rerouted")
            point = f"{phase} b{r['batch']} {moved[0]} / {moved[1]}"
            if any(moved) and point not in rerouted:  # one check per point, in each mode's row
                rerouted.append(point)
        lines.append(f"| {phase}: swapped (Triton/kept vendor) | {_swapped(wb.get('used', {}))} |")
        if near := _nearest(wb.get("lookups", {})):
            nearest.append(f"{phase} {near}")
    if nearest:
        notes.append(
            "decided by a nearest bundle entry (a swapped one counts as s = 1 in the bound): "
            + "; ".join(nearest)
        )
    if versus:
        notes.append(
            "a study's vendor time and the model's own op for the same problem differ by more "
            "than 25% (per call, the baseline's eager trace): its decision and its bound may not "
            "hold in this model: " + "; ".join(versus)
        )
    if rerouted:
        notes.append(
            "errors against the float32 twin routed as each forward was; (layer, token) pairs "
            "the twin would have routed otherwise, baseline / swapped: " + "; ".join(rerouted)
        )
    if lines:
        lines += ["", *(f"* {n}" for n in notes), ""]
    return lines


def _policy(row: dict[str, Any]) -> str:
    """The launch-bound policy's note, with the all-swapped time it avoided."""
    if not row.get("policy"):
        return ""
    kept = str(row["policy"]).split(" (")[0].split(":")[0]  # "kept vendor[ except KERNELS]"
    return f"{kept} (launch-bound eager; all swapped: {_num(row.get('swapped_all_ms'), '.3f')} ms)"


def main(argv: list[str]) -> int:
    listing = len(argv) == 3 and argv[0] in ("--jobs", "--weights") and argv[2].isdigit()
    if listing and Path(argv[1]).is_dir():
        jobs = hottest_jobs(Path(argv[1]), int(argv[2]))
        if argv[0] == "--jobs":
            print("\n".join(path for path, _ in jobs))
        else:
            print(",".join(f"{share:.6g}" for _, share in jobs))
        return 0
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print(
            "error: usage: table.py RES | table.py --jobs|--weights DIR N (RES, DIR folders)",
            file=sys.stderr,
        )
        return 2
    res = Path(argv[0])
    out: list[Any] = ["# Deployment benchmark", ""]
    for folder in sorted(p for p in res.iterdir() if p.is_dir() and p.name != "bundle"):
        out += model_table(folder)
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
