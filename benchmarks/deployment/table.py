"""Tables of the deployment benchmark (benchmarks/deployment/run.sh), and the jobs it tunes.

Usage: python benchmarks/deployment/table.py RES          one markdown table per model
       python benchmarks/deployment/table.py --jobs DIR N  the hottest emitted job per kernel

``RES/MODEL/{prefill,decode,prefill-long}-tuned/report.json`` are ``profile --with-bundle``
reports. A row: baseline and swapped latency (medians, interleaved), their change, the Amdahl
bound of the swapped kernels (workers/profiling/bound.py: the best change their measured kernel
speed-ups allow, and the part of the swapped time those measurements cover), the swapped kernels'
share of the forward, the errors of baseline and swapped logits against the float32 twin, and
whether the point was refused. Per report, what was swapped: problems run on Triton / kept on the
vendor path, per kernel. Exit 2 on bad input.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

PHASES = ("prefill", "decode", "prefill-long")


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def hottest_jobs(folder: Path, limit: int) -> list[str]:
    """The emitted job files of ``folder``'s baseline reports, the hottest (summed share of the
    profiled time) of each kernel first, at most ``limit``."""
    ranked: list[tuple[float, str, str]] = []
    for phase in PHASES:
        report = folder / phase / "report.json"
        if not report.is_file():
            continue
        data = json.loads(report.read_text())
        for path, hot in zip(data.get("emitted_jobs", []), data["hot_shapes"], strict=False):
            ranked.append((sum(p["share"] for p in hot["problems"]), hot["kernel"], path))
    chosen: dict[str, str] = {}
    for _, kernel, path in sorted(ranked, key=lambda r: -r[0]):
        chosen.setdefault(kernel, path)
    return list(chosen.values())[:limit]


def _swapped(used: dict[str, dict[str, int]]) -> str:
    return ", ".join(f"{k} {c.get('triton', 0)}/{c.get('kept vendor', 0)}" for k, c in used.items())


def model_table(folder: Path) -> list[str]:
    lines: list[str] = []
    notes: list[str] = []
    for phase in PHASES:
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
                "| phase | seq | batch | mode | baseline ms | swapped ms | change | bound "
                "(measured) | swapped share | err base | err swap | refused / policy |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|",
            ]
        for r in wb.get("rows", []):
            bound = r.get("amdahl") or {}
            lines.append(
                f"| {phase} | {data['seq']} | {r['batch']} | {r['mode']} | {r['baseline_ms']:.3f} "
                f"| {_num(r['tuned_ms'], '.3f')} | {_num(r['change'], '+.1%')} "
                f"| {_num(bound.get('change'), '+.1%')} ({_num(bound.get('measured_share'), '.0%')}) "
                f"| {_num(bound.get('swapped_share'), '.0%')} "
                f"| {_num(r.get('baseline_error'), '.2g')} | {_num(r.get('swapped_error'), '.2g')} "
                f"| {r['refused'] or _policy(r)} |"
            )
        lines.append(f"| {phase}: swapped (Triton/kept vendor) | {_swapped(wb.get('used', {}))} |")
    if lines:
        lines += ["", *(f"* {n}" for n in notes), ""]
    return lines


def _policy(row: dict[str, Any]) -> str:
    """The launch-bound policy's note, with the all-swapped time it avoided."""
    if not row.get("policy"):
        return ""
    return f"kept vendor (launch-bound eager; all swapped: {_num(row.get('swapped_all_ms'), '.3f')} ms)"


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "--jobs" and argv[2].isdigit():
        print("\n".join(hottest_jobs(Path(argv[1]), int(argv[2]))))
        return 0
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("error: usage: table.py RES | table.py --jobs DIR N (RES a folder)", file=sys.stderr)
        return 2
    res = Path(argv[0])
    out: list[Any] = ["# Deployment benchmark", ""]
    for folder in sorted(p for p in res.iterdir() if p.is_dir() and p.name != "bundle"):
        out += model_table(folder)
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
