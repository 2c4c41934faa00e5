"""Markdown tables of a recorded attention_sweep.py, moe_sweep.py or paged_sweep.py output.

Usage: python benchmarks/sweep_table.py FILE.json [FILE.json ...]
One row per problem (the figures the sweep wrote, unchanged), then the sweep's summary.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def _attention(rows: list[dict[str, Any]]) -> list[str]:
    out = [
        "| dtype | causal | d | heads q/kv | batch | seq | tuned ms | config | cuDNN ms | flash ms "
        "| efficient ms | tuned / fastest SDPA | TFLOP/s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        p, ms = r["problem"], r["ms"]
        c = r["best_config"]
        flags = ("TMA", "HEAVY_FIRST", "WARP_SPECIALIZE", "PRE_LOAD_V", "SPLIT_M", "GLUON",
                 "GLUON_OVERLAP", "GLUON_PERSISTENT", "GLUON_WIDE_KEYS", "GLUON_PINGPONG")  # fmt: skip
        cfg = f"{c['BLOCK_M']}x{c['BLOCK_N']} w{c['num_warps']} s{c['num_stages']}" + "".join(
            f" {flag}" for flag in flags if c.get(flag)
        )
        sdpa = [f"{ms[b]:.4f}" if b in ms else "-" for b in
                ("CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION")]  # fmt: skip
        out.append(
            f"| {p['dtype']} | {p['causal']} | {p['head_dim']} | {p['q_heads']}/{p['kv_heads']} "
            f"| {p['batch']} | {p['max_seqlen']} | {r['best_ms']:.4f} | {cfg} | {' | '.join(sdpa)} "
            f"| {r['vs_fastest_backend']:.3f} | {r['best_tflops']:.0f} |"
        )
    return out


def _moe(rows: list[dict[str, Any]]) -> list[str]:
    out = [
        "| gemm | E | topk | N | K | M | tuned ms | default ms | grouped_mm path ms | x | "
        "grouped GEMM alone ms | x | TFLOP/s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        p = r["problem"]
        alone = (
            f"{r['grouped_mm_gemm_only_ms']:.4f} | {r['vs_grouped_mm_gemm_only']:.3f}"
            if "grouped_mm_gemm_only_ms" in r
            else "- | -"
        )
        out.append(
            f"| {p.get('gemm', 'up')} | {p['E']} | {p['topk']} | {p['N']} | {p['K']} | {p['M']} "
            f"| {r['best_ms']:.4f} | {r['default_ms']:.4f} | {r['grouped_mm_ms']:.4f} "
            f"| {r['vs_grouped_mm']:.3f} | {alone} | {r['tflops']:.0f} |"
        )
    return out


def _paged(rows: list[dict[str, Any]]) -> list[str]:
    out = [
        "| batch | context | tuned ms | GB/s | % of copy | fastest contiguous SDPA | ms "
        "| its % of copy | tuned / SDPA |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        p = r["problem"]
        out.append(
            f"| {p['batch']} | {p['context_len']} | {r['best_ms']:.4f} | {r['gbps']:.0f} "
            f"| {r['pct_of_copy']:.1f} | {r.get('fastest_backend', '-')} "
            f"| {r.get('fastest_backend_ms', float('nan')):.4f} "
            f"| {r.get('backend_pct_of_copy', float('nan')):.1f} "
            f"| {r.get('vs_fastest_backend', float('nan')):.3f} |"
        )
    return out


def table(path: Path) -> str:
    data = json.loads(path.read_text())
    rows = data["rows"]
    first = rows[0]
    if "max_seqlen" in first["problem"]:
        lines = _attention(rows)
    elif "grouped_mm_ms" in first:
        lines = _moe(rows)
    else:
        lines = _paged(rows)
    summary = {k: v for k, v in data.get("summary", {}).items() if k != "argv"}
    return "\n".join([f"## {path}", "", *lines, "", f"summary: `{json.dumps(summary)}`", ""])


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit("usage: python benchmarks/sweep_table.py FILE.json [FILE.json ...]")
    for name in sys.argv[1:]:
        print(table(Path(name)))


if __name__ == "__main__":
    main()
