"""paged_attention (decode) against the copy bandwidth and a contiguous-KV SDPA, one GPU process.

Usage (GPU machine, repo root; needs only torch, triton and search_spaces):
    python benchmarks/paged_sweep.py --out FILE.json [--grid issue|smoke] [--rounds 2] [--jobs 16]
Per problem (the spec's own inputs: a paged KV cache in random page order): every candidate config
through the spec's launcher; and, as the no-paging reference, torch SDPA with each of the cuDNN,
flash and efficient backends on the same context laid out contiguously ([batch, kv_heads, context,
head_dim], gathered once outside the timing; GQA through ``enable_gqa``; a backend that refuses is
recorded as not run). Bytes are counted as the spec does (``bytes_moved``: K and V of every context
token read once, q read and out written, plus block tables and lengths) and set against the
device-to-device copy bandwidth measured in the same run (4 GiB, bytes read + written). Timing as in
attention_sweep.py; the fastest candidate is checked on fresh inputs against the spec's reference.
"""

from __future__ import annotations

import json
from typing import Any

from _sweep import (
    add_runnable,
    candidate_launchers,
    checked_winner,
    compile_all,
    copy_gbps,
    device,
    finish,
    geomean,
    interleaved,
    medians,
    on_gpu,
    start_sweep,
    sweep_parser,
    winner_row,
)
from _vendor import BACKENDS, contiguous_sdpa


def _cfg(partition: int, bn: int, warps: int, stages: int) -> dict[str, Any]:
    pdl = {"PDL": False} if on_gpu() else {}
    return {"PARTITION_SIZE": partition, "BLOCK_N": bn, "num_warps": warps, "num_stages": stages,
            **pdl}  # fmt: skip


def _candidates(name: str) -> list[dict[str, Any]]:
    if name == "smoke":
        return [_cfg(0, 16, 4, 1), _cfg(32, 16, 4, 2)]
    return [
        _cfg(512, 64, 4, 2),  # the spec default
        _cfg(0, 64, 4, 2),
        _cfg(0, 128, 4, 2),
        _cfg(256, 64, 4, 2),
        _cfg(512, 128, 4, 2),
        _cfg(1024, 64, 4, 2),
        _cfg(1024, 128, 4, 3),
        _cfg(2048, 128, 8, 2),
        _cfg(512, 32, 2, 2),
        _cfg(1024, 256, 8, 2),
    ]


GRIDS: dict[str, list[str]] = {
    "issue": [
        f"batch={b},context_len={c},q_heads=32,kv_heads=8,head_dim=128,dtype=bfloat16"
        for b in (1, 16, 64, 128, 256)
        for c in (1024, 8192, 32768)
        if b * c <= 256 * 8192
    ],
    "smoke": [
        "batch=2,context_len=64,q_heads=4,kv_heads=2,head_dim=64,dtype=float16",
        "batch=3,context_len=96,q_heads=4,kv_heads=2,head_dim=64,dtype=float16",
    ],
}


def measure(text: str, candidates: list[dict[str, Any]], broken: set[int], rounds: int,
            copy: float) -> dict[str, Any]:  # fmt: skip
    from search_spaces import get_spec

    spec = get_spec("paged_attention")
    problem = spec.parse_problem(text)
    inputs = spec.build_inputs(problem, device())
    entries = candidate_launchers(spec, inputs, candidates, broken)
    not_run = add_runnable(entries, {b: contiguous_sdpa(inputs, problem, b) for b in BACKENDS})
    med = medians(interleaved(entries, rounds))
    best, err = checked_winner(spec, problem, med, candidates)
    ran = [b for b in BACKENDS if b in med]
    fastest = min(ran, key=med.__getitem__) if ran else None
    nbytes = spec.bytes_moved(problem)
    del inputs, entries
    row: dict[str, Any] = {
        **winner_row(spec, problem, med, candidates, best, err),
        "bytes": nbytes,
        "gbps": nbytes / med[best] / 1e6,
        "pct_of_copy": 100 * nbytes / med[best] / 1e6 / copy,
        "backends_not_run": not_run,
    }
    if fastest is not None:
        row.update(
            fastest_backend=fastest,
            fastest_backend_ms=med[fastest],
            backend_pct_of_copy=100 * nbytes / med[fastest] / 1e6 / copy,
            vs_fastest_backend=med[fastest] / med[best],
        )
    return row


def main() -> None:
    args = sweep_parser(GRIDS).parse_args()
    candidates = _candidates(args.grid)
    grid = GRIDS[args.grid]
    start = start_sweep()
    from search_spaces import get_spec

    spec = get_spec("paged_attention")
    small = {"all": spec.parse_problem(grid[0].replace(grid[0].split(",")[0], "batch=2"))}
    broken = compile_all("paged_attention", small, candidates, args.jobs)
    copy = copy_gbps()
    print(f"device copy: {copy:.0f} GB/s (read + written)", flush=True)
    rows = []
    for text in grid:
        rows.append(measure(text, candidates, broken["all"], args.rounds, copy))
        r = rows[-1]
        base = (
            f"{r['fastest_backend'][:5]} {r['fastest_backend_ms']:.4f} "
            f"({r['backend_pct_of_copy']:.0f}%) x{r['vs_fastest_backend']:.2f}"
            if "fastest_backend" in r
            else "no SDPA backend ran"
        )
        print(
            f"{text:<70} best {r['best']} {r['best_ms']:.4f} ms {r['gbps']:6.0f} GB/s "
            f"{r['pct_of_copy']:5.1f}% of copy  {base}  err {r['winner_max_rel_error']:.1e}",
            flush=True,
        )
        args.out.write_text(json.dumps({"copy_gbps": copy, "rows": rows}, indent=1))
    big = [
        r
        for r in rows
        if int(r["problem"]["batch"]) >= 64 and int(r["problem"]["context_len"]) >= 8192
    ]
    summary = {
        "grid": args.grid,
        "problems": len(rows),
        "candidates_per_problem": len(candidates),
        "copy_gbps": copy,
        "min_pct_of_copy_batch_ge_64_context_ge_8k": min(
            (r["pct_of_copy"] for r in big), default=None
        ),
        "geomean_vs_fastest_backend": geomean(
            [r["vs_fastest_backend"] for r in rows if "vs_fastest_backend" in r]
        ),
    }
    finish(args.out, summary, candidates, rows, start)


if __name__ == "__main__":
    main()
