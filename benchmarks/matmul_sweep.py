"""matmul candidates (split-K and stream-K among them) against cuBLAS on few-tile shapes, one GPU
process.

Usage (GPU machine, repo root; needs only torch, triton and search_spaces):
    python benchmarks/matmul_sweep.py --out FILE.json [--grid issue|smoke] [--rounds 3] [--jobs 16]
Per problem (the spec's own inputs: A [M, K], B [K, N], C [M, N]): every candidate config through
the spec's launcher (a stream-K launch includes nothing but its kernel: the workspace and the
zeroed arrival counts are made once, with the launcher) and torch.matmul into the same C
(cuBLAS), all interleaved over ``--rounds`` rounds (do_bench medians, L2 flushed; as
attention_sweep.py). The fastest candidate is checked on fresh inputs against the float32
reference.
"""

from __future__ import annotations

import json
from typing import Any

from _sweep import (
    candidate_launchers,
    checked_winner,
    compile_all,
    device,
    finish,
    for_device,
    geomean,
    interleaved,
    medians,
    start_sweep,
    sweep_parser,
    winner_row,
)


def _cfg(bm: int, bn: int, bk: int, warps: int, stages: int, *, split: int = 1,
         fused: bool = False, tma: bool = False, stream_k: bool = False, group: int = 1,
         persistent: bool = False, pdl: bool = False, wide: bool = False) -> dict[str, Any]:  # fmt: skip
    return {
        "WIDE_N": wide,
        "PDL": pdl,
        "BLOCK_M": bm,
        "BLOCK_N": bn,
        "BLOCK_K": bk,
        "GROUP_M": group,
        "SPLIT_K": split,
        "FUSED_REDUCE": fused,
        "num_warps": warps,
        "num_stages": stages,
        "TMA": tma,
        "PERSISTENT": persistent,
        "STREAM_K": stream_k,
    }


_ISSUE: list[dict[str, Any]] = [
    _cfg(64, 64, 32, 4, 3, group=8),  # the spec default
    # The split-K winners of the 200-trial tune on the Llama-3-8B suite (M 16 and 128).
    _cfg(16, 64, 64, 4, 4, split=4, fused=True),
    _cfg(16, 32, 64, 2, 4, split=4, fused=True, tma=True),
    _cfg(128, 64, 64, 8, 4, split=2, fused=True, tma=True),
    _cfg(128, 64, 64, 8, 4, split=4),
    _cfg(128, 64, 64, 4, 4, split=4, tma=True),
    _cfg(64, 64, 64, 4, 4, split=4, fused=True, tma=True),
    # Stream-K.
    _cfg(16, 64, 64, 4, 4, stream_k=True),
    _cfg(16, 128, 64, 4, 4, stream_k=True, tma=True),
    _cfg(32, 64, 64, 4, 4, stream_k=True, tma=True),
    _cfg(64, 64, 64, 4, 4, stream_k=True, tma=True),
    _cfg(64, 128, 64, 4, 4, stream_k=True, tma=True),
    _cfg(64, 128, 64, 4, 4, stream_k=True),
    _cfg(128, 64, 64, 8, 4, stream_k=True, tma=True),
    _cfg(128, 64, 64, 8, 4, stream_k=True),
    _cfg(128, 128, 64, 8, 3, stream_k=True, tma=True),
    _cfg(128, 128, 64, 8, 4, stream_k=True, tma=True),
    _cfg(64, 256, 64, 8, 3, stream_k=True, tma=True),
]

#: The winners of the 200-trial suite tune at M <= 256 and M = 4096
#: (benchmarks/results/kernels/2026-12-04-3510b3e-h200-deep6-200-again/).
_SUITE_WINNERS = [
    _cfg(16, 64, 64, 2, 4, split=4, fused=True),
    _cfg(16, 64, 64, 4, 5, split=4, fused=True),
    _cfg(64, 256, 32, 4, 6),
    _cfg(16, 64, 128, 2, 3, split=4, tma=True, pdl=True),
    _cfg(16, 64, 64, 4, 4, split=4, fused=True),
    _cfg(16, 64, 64, 2, 6, split=3, fused=True),
    _cfg(16, 64, 128, 4, 3, split=4, tma=True, pdl=True),
    _cfg(128, 256, 32, 8, 6, split=4, pdl=True),
    _cfg(128, 128, 64, 8, 5, split=4, pdl=True),
    _cfg(128, 256, 64, 8, 3, tma=True),
    _cfg(128, 128, 64, 8, 4, split=4, tma=True, pdl=True),
    _cfg(128, 256, 64, 8, 3, tma=True, persistent=True, group=8),
    _cfg(128, 256, 64, 8, 3, tma=True, persistent=True, group=4),
    _cfg(128, 256, 64, 8, 4, tma=True, persistent=True, group=8),
    _cfg(16, 32, 128, 2, 3, split=2, tma=True, pdl=True),
    _cfg(16, 64, 128, 2, 3, split=2, tma=True, pdl=True),
    _cfg(16, 64, 32, 4, 3),
    _cfg(16, 64, 128, 2, 3, split=2, fused=True),
    _cfg(128, 256, 64, 8, 4, tma=True, persistent=True, group=4),
    _cfg(128, 128, 64, 4, 6, tma=True, persistent=True, group=4),
    _cfg(128, 256, 64, 8, 3, split=2, tma=True, pdl=True),
    _cfg(64, 128, 64, 4, 3, split=2, tma=True, pdl=True),
    _cfg(64, 128, 64, 4, 5, split=4, pdl=True),
]

CANDIDATES: dict[str, list[dict[str, Any]]] = {
    "issue": _ISSUE,
    # Few-tile shapes below 0.9x after the 200-trial tune: split-K counts that fill the waves, the
    # fused reduction against the second kernel, and stream-K at the tiles that won without it.
    "waves": [
        _cfg(128, 256, 64, 8, 4, tma=True, group=8),
        _cfg(128, 256, 64, 8, 4, split=2, fused=True, tma=True),
        _cfg(128, 256, 64, 8, 4, split=2, tma=True),
        _cfg(128, 256, 64, 8, 3, split=2, fused=True, tma=True),
        _cfg(128, 256, 64, 8, 4, split=3, fused=True, tma=True),
        _cfg(128, 256, 64, 8, 4, split=3, tma=True),
        _cfg(128, 256, 64, 8, 4, split=8, tma=True),
        _cfg(64, 256, 64, 4, 4, tma=True, group=8),
        _cfg(64, 256, 64, 4, 4, split=2, fused=True, tma=True),
        _cfg(128, 128, 64, 8, 4, tma=True, group=8),
        _cfg(128, 128, 64, 8, 4, split=2, tma=True),
        _cfg(128, 128, 64, 8, 4, split=3, fused=True, tma=True),
        _cfg(128, 128, 64, 8, 4, split=4, tma=True),
        _cfg(128, 128, 64, 8, 4, split=6, tma=True),
        _cfg(128, 64, 64, 8, 4, split=4, tma=True),
        _cfg(128, 64, 64, 8, 4, split=3, tma=True),
        _cfg(128, 64, 64, 8, 4, split=6, tma=True),
        _cfg(128, 64, 64, 8, 4, split=6, fused=True, tma=True),
        _cfg(64, 128, 64, 4, 4, split=3, tma=True),
        _cfg(64, 128, 64, 4, 4, split=4, fused=True, tma=True),
        _cfg(128, 256, 64, 8, 4, stream_k=True, tma=True),
        _cfg(128, 256, 32, 8, 5, stream_k=True, tma=True),
        _cfg(128, 128, 64, 8, 4, stream_k=True, tma=True),
        _cfg(128, 64, 64, 8, 4, stream_k=True, tma=True),
    ],
    # More K in flight than the space allows (BLOCK_K x stages up to 512, MAX_K_IN_FLIGHT is 256)
    # on the same few-tile shapes: does a weight-streaming GEMM at M <= 256 want deeper loads?
    # The waves winners first, as the reference.
    "deep": [
        _cfg(128, 64, 64, 8, 4, split=4, tma=True),
        _cfg(128, 256, 64, 8, 4, split=3, tma=True),
        _cfg(64, 256, 64, 4, 4, tma=True, group=8),
        _cfg(128, 256, 64, 8, 4, tma=True, group=8),
        _cfg(128, 64, 128, 8, 4, split=4, tma=True),
        _cfg(128, 64, 128, 4, 4, split=4, tma=True),
        _cfg(128, 64, 128, 8, 3, split=4, tma=True),
        _cfg(128, 64, 64, 8, 8, split=4, tma=True),
        _cfg(128, 64, 64, 8, 6, split=4, tma=True),
        _cfg(64, 128, 128, 4, 4, split=4, tma=True),
        _cfg(64, 128, 128, 8, 4, split=3, tma=True),
        _cfg(128, 128, 128, 8, 3, split=2, tma=True),
        _cfg(128, 128, 128, 8, 3, split=3, tma=True),
        _cfg(128, 128, 64, 8, 6, split=3, tma=True),
        _cfg(128, 128, 64, 8, 6, tma=True, group=8),
        _cfg(64, 256, 128, 8, 2, tma=True, group=8),
        _cfg(128, 256, 128, 8, 2, tma=True, group=8),
        _cfg(128, 256, 32, 8, 8, split=3, tma=True),
        _cfg(64, 64, 128, 4, 4, split=2, tma=True),
        _cfg(64, 64, 128, 4, 4, split=4, tma=True),
    ],
    # The issue grid's candidates and the six-stage pipelines that won on the deep grid (384 K
    # elements in flight: outside the space, run with --outside-space), with split-K at small M.
    "deep6": [
        *_ISSUE,
        _cfg(128, 256, 64, 8, 4, tma=True, group=8),  # the waves grid's in-space winners
        _cfg(128, 256, 64, 8, 4, split=3, tma=True),
        _cfg(64, 256, 64, 4, 4, tma=True, group=8),
        _cfg(128, 128, 64, 8, 6, tma=True, group=8),
        _cfg(128, 128, 64, 8, 6, split=2, tma=True),
        _cfg(128, 128, 64, 8, 6, split=3, tma=True),
        _cfg(64, 128, 64, 4, 6, tma=True, group=8),
        _cfg(64, 128, 64, 4, 6, split=4, tma=True),
        _cfg(64, 64, 64, 4, 6, split=4, tma=True),
        _cfg(16, 64, 64, 4, 6, split=4, fused=True),
        _cfg(64, 256, 64, 4, 5, tma=True, group=8),
        _cfg(128, 64, 64, 8, 6, tma=True, group=8),
    ],
    # PDL on split-K (each kernel launched while the one before it drains): the split-K winners
    # of the suite tune at M <= 128, each with and without it.
    "pdl": [
        c
        for base in (
            _cfg(128, 64, 64, 8, 4, split=4, tma=True),
            _cfg(128, 64, 64, 4, 3, split=4, tma=True),
            _cfg(128, 128, 64, 4, 4, split=4),
            _cfg(128, 64, 64, 4, 4, split=2, fused=True, tma=True),
            _cfg(16, 64, 64, 4, 4, split=4, fused=True),
            _cfg(16, 64, 64, 2, 4, split=6, fused=True),
            _cfg(64, 64, 64, 4, 4, split=4, fused=True),
            _cfg(64, 64, 64, 4, 4, split=2, tma=True),
        )
        for c in (base, {**base, "PDL": True})
    ],
    # cuBLAS's choice on the few-tile shapes (its nvjet kernel names:
    # results/matmul_sweep/2026-12-04-a56293d-h200-gluon/cublas_kernels.txt): 64-row tiles, no
    # split-K, about 128 programs and 8-13 stages of 64 K (up to 832 K elements in flight), beside
    # the suite's winners.
    "narrow": [
        *_SUITE_WINNERS,
        *[
            _cfg(bm, bn, bk, warps, stages, tma=tma)
            for bm, bn, bk, warps, stages in (
                (64, 64, 64, 4, 8),
                (64, 64, 64, 4, 10),
                (64, 64, 64, 4, 13),
                (64, 64, 128, 4, 6),
                (64, 128, 64, 4, 6),
                (64, 128, 64, 4, 8),
                (128, 64, 64, 4, 8),
                (64, 256, 64, 4, 5),
                (128, 128, 64, 8, 6),
            )
            for tma in (True, False)
        ],
    ],
    # WIDE_N (tiles of 5/4 BLOCK_N columns: 64x320 is cuBLAS's tile at M=256 N=10240 K=8192)
    # beside the deep13 suite tune's winners on the same shapes
    # (benchmarks/results/kernels/2026-12-04-c743efc-h200-deep13-200/).
    "wide": [
        _cfg(128, 256, 32, 8, 8, tma=True, group=4),
        _cfg(128, 128, 64, 8, 6, tma=True, group=4),
        _cfg(128, 128, 64, 4, 6, tma=True, persistent=True, group=4),
        _cfg(128, 128, 64, 4, 6, tma=True, group=4),
        _cfg(128, 256, 64, 8, 3, tma=True, persistent=True, group=8),
        _cfg(16, 64, 64, 2, 3, split=3, fused=True, tma=True),
        _cfg(64, 128, 128, 4, 3, tma=True, persistent=True),
        _cfg(128, 64, 64, 4, 8, tma=True),
        _cfg(64, 256, 64, 8, 4, tma=True, wide=True),
        _cfg(64, 256, 32, 8, 8, tma=True, wide=True),
        _cfg(64, 256, 64, 8, 4, tma=True, wide=True, group=4),
        _cfg(128, 128, 64, 8, 5, tma=True, wide=True),
        _cfg(128, 128, 64, 8, 5, tma=True, wide=True, group=4),
        _cfg(64, 128, 64, 4, 8, tma=True, wide=True),
        _cfg(64, 128, 64, 8, 8, tma=True, wide=True),
        _cfg(64, 64, 64, 4, 10, tma=True, wide=True),
    ],
    "smoke": [
        _cfg(16, 32, 32, 2, 2),
        _cfg(16, 32, 32, 2, 2, split=2, fused=True),
        _cfg(16, 32, 32, 2, 2, stream_k=True),
    ],
}

#: (N, K) of Llama-3-8B's qkv, o and down projections and Llama-3-70B's (N <= 10240: few tiles).
SHAPES = ((6144, 4096), (4096, 4096), (4096, 14336), (10240, 8192), (8192, 8192), (8192, 28672))

GRIDS: dict[str, list[dict[str, Any]]] = {
    "issue": [
        {"M": m, "N": n, "K": k, "dtype": "bfloat16"} for m in (16, 64, 128, 256) for n, k in SHAPES
    ],
    "waves": [
        {"M": m, "N": n, "K": k, "dtype": "bfloat16"}
        for m, n, k in ((128, 6144, 4096), (128, 4096, 4096), (256, 10240, 8192), (256, 8192, 8192))
    ],
    "deep": [
        {"M": m, "N": n, "K": k, "dtype": "bfloat16"}
        for m, n, k in ((128, 6144, 4096), (128, 4096, 4096), (256, 10240, 8192), (256, 8192, 8192))
    ],
    "deep6": [
        {"M": m, "N": n, "K": k, "dtype": "bfloat16"} for m in (16, 64, 128, 256) for n, k in SHAPES
    ],
    "narrow": [
        {"M": m, "N": n, "K": k, "dtype": "bfloat16"} for m in (16, 64, 128, 256) for n, k in SHAPES
    ],
    "wide": [
        {"M": m, "N": n, "K": k, "dtype": "bfloat16"}
        for m, n, k in (
            (256, 10240, 8192),
            (128, 10240, 8192),
            (64, 10240, 8192),
            (256, 8192, 8192),
            (256, 6144, 4096),
            (256, 4096, 14336),
            (2048, 10240, 8192),
        )
    ],
    "pdl": [
        {"M": m, "N": n, "K": k, "dtype": "bfloat16"}
        for m in (1, 16, 64, 128)
        for n, k in ((6144, 4096), (4096, 4096), (4096, 14336), (14336, 4096))
    ],
    "smoke": [
        {"M": 16, "N": 64, "K": 96, "dtype": "float16"},
        {"M": 20, "N": 40, "K": 64, "dtype": "float16"},
    ],
}


def measure(problem: dict[str, Any], candidates: list[dict[str, Any]], broken: set[int],
            rounds: int) -> dict[str, Any]:  # fmt: skip
    import torch

    from search_spaces import get_spec

    spec = get_spec("matmul")
    problem = spec.validate_problem(problem)
    inputs = spec.build_inputs(problem, device())
    entries = candidate_launchers(spec, inputs, candidates, broken)
    a, b, out = inputs["a"], inputs["b"], inputs["out"]
    entries["cublas"] = lambda: torch.matmul(a, b, out=out)
    med = medians(interleaved(entries, rounds))
    best, err = checked_winner(spec, problem, med, candidates)
    tried = [k for k in med if k != "cublas"]
    split = [k for k in tried if not candidates[int(k[1:])]["STREAM_K"]]
    stream = [k for k in tried if candidates[int(k[1:])]["STREAM_K"]]
    del inputs, entries
    best_split = min(split, key=med.__getitem__)
    best_stream = min(stream, key=med.__getitem__) if stream else None
    return {
        **winner_row(spec, problem, med, candidates, best, err),
        "cublas_ms": med["cublas"],
        "vs_cublas": med["cublas"] / med[best],
        "best_without_stream_k": best_split,
        "vs_cublas_without_stream_k": med["cublas"] / med[best_split],
        "best_stream_k": best_stream,
        "vs_cublas_stream_k_only": med["cublas"] / med[best_stream] if best_stream else None,
        "tflops": spec.flops(problem) / med[best] / 1e9,
        "gbps": spec.bytes_moved(problem) / med[best] / 1e6,
    }


def main() -> None:
    parser = sweep_parser(GRIDS, rounds=3)
    parser.add_argument(
        "--outside-space",
        action="store_true",
        help="also run candidates the space's rules leave out",
    )
    args = parser.parse_args()
    candidates = [for_device("matmul", c) for c in CANDIDATES[args.grid]]
    grid = GRIDS[args.grid]
    start = start_sweep()
    # M, N, K are runtime values: one stand-in per dtype compiles every variant.
    small = {p["dtype"]: {**p, "M": 64, "N": 256, "K": 256} for p in grid}
    broken = compile_all("matmul", small, candidates, args.jobs, outside_space=args.outside_space)
    rows = []
    for problem in grid:
        rows.append(measure(problem, candidates, broken[problem["dtype"]], args.rounds))
        r = rows[-1]
        text = ",".join(f"{k}={v}" for k, v in problem.items() if k != "dtype")
        print(
            f"{text:<22} best {r['best']} {r['best_ms']:.4f} ms cuBLAS {r['cublas_ms']:.4f} "
            f"x{r['vs_cublas']:.3f} (without stream-K {r['best_without_stream_k']} "
            f"x{r['vs_cublas_without_stream_k']:.3f}) {r['gbps']:5.0f} GB/s "
            f"err {r['winner_max_rel_error']:.1e}",
            flush=True,
        )
        args.out.write_text(json.dumps({"candidates": candidates, "rows": rows}, indent=1))
    ratios = [r["vs_cublas"] for r in rows]
    without = [r["vs_cublas_without_stream_k"] for r in rows]
    summary = {
        "grid": args.grid,
        "problems": len(rows),
        "candidates_per_problem": len(candidates),
        "rounds": args.rounds,
        "geomean_vs_cublas": geomean(ratios),
        "min_vs_cublas": min(ratios),
        "geomean_vs_cublas_without_stream_k": geomean(without),
        "min_vs_cublas_without_stream_k": min(without),
        "stream_k_wins": sum(bool(r["best_config"]["STREAM_K"]) for r in rows),
        "compile_failures": {k: sorted(v) for k, v in broken.items()},
    }
    finish(args.out, summary, candidates, rows, start)


if __name__ == "__main__":
    main()
