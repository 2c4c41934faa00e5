"""flash_attention against every SDPA backend that runs, over a grid of problems, one GPU process.

Usage (GPU machine, repo root; needs only torch, triton and search_spaces):
    python benchmarks/attention_sweep.py --out FILE.json [--grid explore|issue|issue-fp16|smoke]
        [--candidates explore|final] [--rounds 2] [--jobs 16]
Per problem (packed uniform batch, the spec's own inputs): every candidate config of the
``flash_attention`` spec through its launcher, and torch SDPA with each of the cuDNN, flash and
efficient backends on the same q, k, v viewed as [batch, heads, seq, head_dim] (no copy; GQA through
``enable_gqa``; a backend that refuses the problem is recorded as not run). Timing: Triton's
``do_bench`` (CUDA events, L2 flushed before each rep, median), all entries interleaved, ``--rounds``
rounds in rotated order, the median over rounds. The candidates are a fixed list, so the "tuned"
config is the fastest of that list (a tuning budget of len(list) trials per problem, stated in the
output); its output is checked on fresh inputs against the cuDNN (else flash) backend's output.
Candidates compile in ``--jobs`` processes first (one Triton cache). Writes FILE.json; prints one
row per problem and the geomeans of best-candidate time over the fastest backend's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from _sweep import (  # this folder
    add_runnable,
    candidate_launchers,
    compile_all,
    device,
    fastest_candidate,
    finish,
    geomean,
    interleaved,
    medians,
    on_gpu,
    start_sweep,
    sweep_parser,
    winner_on_fresh,
    winner_row,
)
from _vendor import BACKENDS, packed_sdpa


def _cfg(bm: int, bn: int, warps: int, stages: int, **flags: bool) -> dict[str, Any]:
    return {
        "BLOCK_M": bm,
        "BLOCK_N": bn,
        "PRE_LOAD_V": flags.get("plv", False),
        "num_warps": warps,
        "num_stages": stages,
        "TMA": flags.get("tma", False),
        "HEAVY_FIRST": flags.get("heavy", False),
        "SPLIT_M": flags.get("split", False),
        # GPU-only parameters: absent from the interpreter's space.
        **(
            {
                "WARP_SPECIALIZE": flags.get("ws", False),
                "GLUON": flags.get("gluon", False),
                "GLUON_OVERLAP": flags.get("overlap", False),
                "GLUON_PERSISTENT": flags.get("persistent", False),
                "GLUON_WIDE_KEYS": flags.get("wide", False),
                "GLUON_PINGPONG": flags.get("pingpong", False),
            }
            if on_gpu()
            else {}
        ),
    }


CANDIDATES: dict[str, list[dict[str, Any]]] = {
    "explore": [
        _cfg(64, 64, 4, 2),  # the spec default
        _cfg(128, 64, 4, 3),
        _cfg(128, 64, 8, 3),
        _cfg(128, 128, 8, 3),
        _cfg(64, 64, 4, 3, tma=True),
        _cfg(128, 64, 4, 2, tma=True),
        _cfg(128, 64, 4, 3, tma=True),
        _cfg(128, 64, 8, 3, tma=True),
        _cfg(128, 128, 8, 2, tma=True),
        _cfg(128, 128, 8, 3, tma=True),
        _cfg(128, 128, 8, 3, tma=True, heavy=True),
        _cfg(128, 64, 4, 3, tma=True, heavy=True),
        _cfg(128, 128, 4, 3, tma=True),
        _cfg(128, 64, 4, 3, tma=True, ws=True),
        _cfg(128, 128, 8, 3, tma=True, ws=True),
    ],
    # After the first: 64-row tiles on one warpgroup with TMA won 12 of 16 problems.
    "explore2": [
        _cfg(64, 64, 4, 2),  # the spec default
        _cfg(64, 64, 4, 3, tma=True),  # the first sweep's most frequent winner
        _cfg(64, 64, 4, 4, tma=True),
        _cfg(64, 64, 4, 3, tma=True, heavy=True),
        _cfg(64, 64, 4, 3, tma=True, plv=True),
        _cfg(64, 128, 4, 2, tma=True),
        _cfg(64, 128, 4, 3, tma=True),
        _cfg(64, 128, 4, 3, tma=True, heavy=True),
        _cfg(128, 128, 8, 2, tma=True, ws=True),
        _cfg(64, 64, 4, 3, tma=True, ws=True),
        _cfg(64, 128, 4, 3, tma=True, ws=True),
        _cfg(128, 128, 8, 3, tma=True, ws=True),
        _cfg(64, 128, 4, 2, tma=True, ws=True),
        _cfg(128, 64, 8, 3, tma=True, ws=True),
        _cfg(256, 64, 8, 2, tma=True),
        _cfg(256, 128, 8, 2, tma=True),
        _cfg(128, 64, 8, 3, tma=True),
    ],
    # For the issue's grid: the default, the second sweep's winners (64x64 3 stages TMA, with and
    # without heavy-first; 64x128 for d=64), and two-stage tiles whose shared memory lets two
    # programs share an SM at d=128 (64x64 on 4 warps, 128x64 on 8).
    "final": [
        _cfg(64, 64, 4, 2),
        _cfg(64, 64, 4, 3, tma=True),
        _cfg(64, 64, 4, 3, tma=True, heavy=True),
        _cfg(64, 128, 4, 2, tma=True),
        _cfg(64, 64, 4, 2, tma=True),
        _cfg(128, 64, 8, 2, tma=True),
    ],
    # d=128 after the issue grid: the two winners there, and 64x32 tiles, whose 64 KiB of shared
    # memory at three stages lets three programs share an SM (64x64 at three stages: two).
    "d128": [
        _cfg(64, 64, 4, 3, tma=True),
        _cfg(64, 64, 4, 3, tma=True, heavy=True),
        _cfg(64, 32, 4, 3, tma=True),
        _cfg(64, 32, 4, 3, tma=True, heavy=True),
        _cfg(64, 32, 4, 2, tma=True),
    ],
    # Row blocks split in two halves (SPLIT_M; a prototype of it in attention_variants.py ran
    # 128x64 on 4 warps at 0.985x cuDNN on batch 8 x 4096 full fp16 d=128, the sm_90 default
    # 0.823x), beside the sm_90 default and the issue sweep's other winners.
    "split": [
        _cfg(64, 64, 4, 3, tma=True),
        _cfg(64, 64, 4, 3, tma=True, heavy=True),
        _cfg(64, 128, 4, 2, tma=True),
        _cfg(128, 64, 4, 2, tma=True, split=True),
        _cfg(128, 64, 4, 2, tma=True, split=True, heavy=True),
        _cfg(128, 64, 4, 2, tma=True, split=True, plv=True),
        _cfg(128, 32, 4, 3, tma=True, split=True),
        _cfg(128, 128, 4, 2, tma=True, split=True),
        _cfg(128, 64, 8, 2, tma=True, split=True, ws=True),
    ],
    # After "split": the split tile's registers (244-255 per thread on 4 warps, spilling on causal)
    # against 8 warps, and a third stage, beside the sm_90 default and the split tile of SPLIT_LISTED.
    "split2": [
        _cfg(64, 64, 4, 3, tma=True),
        _cfg(128, 64, 4, 2, tma=True, split=True),
        _cfg(128, 64, 4, 3, tma=True, split=True),
        _cfg(128, 64, 8, 2, tma=True, split=True),
        _cfg(128, 64, 8, 3, tma=True, split=True),
        _cfg(128, 128, 8, 2, tma=True, split=True),
        _cfg(128, 64, 8, 2, tma=True, split=True, heavy=True),
        _cfg(128, 64, 8, 2, tma=True, split=True, plv=True),
    ],
    # The Gluon kernel (GLUON, sm_90) beside the Triton kernel's tiles a new H200 study asks
    # first: the sm_90 default, the d=64 winner 64x128, SPLIT_LISTED's first two; then GLUON's
    # two listed tiles and three more ring depths.
    "gluon": [
        _cfg(64, 64, 4, 3, tma=True),
        _cfg(64, 128, 4, 2, tma=True),
        _cfg(128, 64, 4, 2, tma=True, split=True),
        _cfg(128, 64, 4, 2, tma=True, split=True, heavy=True),
        _cfg(128, 128, 4, 2, tma=True, gluon=True),
        _cfg(128, 64, 4, 4, tma=True, gluon=True, overlap=True),
        _cfg(128, 64, 4, 4, tma=True, gluon=True),
        _cfg(128, 128, 4, 3, tma=True, gluon=True),
        _cfg(128, 64, 4, 6, tma=True, gluon=True, overlap=True),
    ],
    # "gluon" plus GLUON_PERSISTENT on GLUON's two listed tiles, with and without the overlap.
    "persistent": [
        _cfg(64, 64, 4, 3, tma=True),
        _cfg(64, 128, 4, 2, tma=True),
        _cfg(128, 64, 4, 2, tma=True, split=True),
        _cfg(128, 64, 4, 2, tma=True, split=True, heavy=True),
        _cfg(128, 128, 4, 2, tma=True, gluon=True),
        _cfg(128, 64, 4, 4, tma=True, gluon=True, overlap=True),
        _cfg(128, 64, 4, 4, tma=True, gluon=True),
        _cfg(128, 128, 4, 3, tma=True, gluon=True),
        _cfg(128, 64, 4, 6, tma=True, gluon=True, overlap=True),
        _cfg(128, 128, 4, 2, tma=True, gluon=True, persistent=True),
        _cfg(128, 128, 4, 2, tma=True, gluon=True, overlap=True, persistent=True),
        _cfg(128, 64, 4, 4, tma=True, gluon=True, persistent=True),
        _cfg(128, 64, 4, 4, tma=True, gluon=True, overlap=True, persistent=True),
    ],
    # GLUON_WIDE_KEYS (d=64 only; at d=128 they do not fit and are skipped) beside the strongest
    # candidates of "persistent".
    "wide": [
        _cfg(64, 64, 4, 3, tma=True),
        _cfg(64, 128, 4, 2, tma=True),
        _cfg(128, 64, 4, 2, tma=True, split=True),
        _cfg(128, 128, 4, 2, tma=True, gluon=True),
        _cfg(128, 64, 4, 4, tma=True, gluon=True, overlap=True),
        _cfg(128, 64, 4, 6, tma=True, gluon=True, overlap=True),
        _cfg(128, 128, 4, 2, tma=True, gluon=True, persistent=True),
        _cfg(128, 64, 4, 4, tma=True, gluon=True, overlap=True, persistent=True),
        _cfg(128, 128, 4, 2, tma=True, gluon=True, wide=True),
        _cfg(128, 128, 4, 3, tma=True, gluon=True, wide=True),
        _cfg(128, 128, 4, 2, tma=True, gluon=True, persistent=True, wide=True),
        _cfg(128, 128, 4, 3, tma=True, gluon=True, persistent=True, wide=True),
    ],
    "smoke": [_cfg(16, 16, 4, 2), _cfg(32, 16, 4, 2, tma=True, heavy=True)],
}


# GLUON_PINGPONG on 128-key tiles with a 3-deep ring and the overlap (without the ping-pong too,
# and persistent), after "wide".
CANDIDATES["pingpong"] = [
    *CANDIDATES["wide"],
    _cfg(128, 128, 4, 3, tma=True, gluon=True, overlap=True),
    _cfg(128, 128, 4, 3, tma=True, gluon=True, overlap=True, pingpong=True),
    _cfg(128, 128, 4, 3, tma=True, gluon=True, overlap=True, persistent=True, pingpong=True),
]


def _problem(b: int, s: int, kv: int, d: int, causal: bool, dtype: str) -> str:
    return (
        f"batch={b},max_seqlen={s},pattern=uniform,q_heads=32,kv_heads={kv},head_dim={d},"
        f"causal={str(causal).lower()},dtype={dtype}"
    )


def _issue_grid(dtypes: tuple[str, ...]) -> list[str]:
    return [
        _problem(b, s, kv, d, causal, dtype)
        for dtype in dtypes
        for causal in (True, False)
        for d in (64, 128)
        for kv in (32, 8)
        for b in (1, 8, 32)
        for s in (512, 1024, 4096, 8192)
    ]


def _long_grid(d: int) -> list[str]:
    """16 fp16 problems at head_dim ``d``: batch 1 and 8, seq 4096 and 8192, heads 32/32 and
    32/8, causal and not."""
    return [
        _problem(b, s, kv, d, causal, "float16")
        for causal in (True, False)
        for kv in (32, 8)
        for b in (1, 8)
        for s in (4096, 8192)
    ]


GRIDS: dict[str, list[str]] = {
    "explore": [
        _problem(b, s, 8, d, causal, "float16")
        for causal in (True, False)
        for d in (64, 128)
        for b, s in ((8, 1024), (1, 8192), (32, 512), (8, 4096))
    ],
    # The first grid, at both dtypes and both head layouts for d=128.
    "explore2": [
        _problem(b, s, kv, d, causal, dtype)
        for causal in (True, False)
        for d in (64, 128)
        for b, s in ((8, 1024), (1, 8192), (32, 512), (8, 4096))
        for kv, dtype in ((8, "float16"),) + (((32, "bfloat16"),) if d == 128 else ())
    ],
    "issue": _issue_grid(("float16", "bfloat16")),
    # The issue's grid without batch 32 (128 problems; llm_kernels.py --flash-grid tunes it
    # through the product path, where batch 32 does not fit one device call).
    "issue-b1-8": [t for t in _issue_grid(("float16", "bfloat16")) if "batch=32," not in t],
    "issue-fp16": _issue_grid(("float16",)),
    # The issue's 96 problems at seq >= 4096 (where its 1.0x target is set).
    "issue-long": [
        t
        for t in _issue_grid(("float16", "bfloat16"))
        if "max_seqlen=4096," in t or "max_seqlen=8192," in t
    ],
    # The issue's 96 problems at seq <= 1024 (issue 46's short sequences).
    "issue-short": [
        t
        for t in _issue_grid(("float16", "bfloat16"))
        if "max_seqlen=512," in t or "max_seqlen=1024," in t
    ],
    "issue-fp16-d128": [t for t in _issue_grid(("float16",)) if "head_dim=128" in t],
    "issue-d128": [t for t in _issue_grid(("float16", "bfloat16")) if "head_dim=128" in t],
    "issue-d128-b32": [
        t for t in _issue_grid(("float16", "bfloat16")) if "head_dim=128" in t and "batch=32," in t
    ],
    "d128-long": _long_grid(128),
    # The same at head_dim 64 (where GLUON_WIDE_KEYS fits).
    "d64-long": _long_grid(64),
    "smoke": [
        "batch=2,max_seqlen=32,q_heads=4,kv_heads=2,head_dim=64,causal=true,dtype=float16",
        "batch=1,max_seqlen=48,q_heads=2,kv_heads=2,head_dim=64,causal=false,dtype=float16",
    ],
}


def _specialization(text: str) -> str:
    """Problems sharing these fields share the kernel's compiled variants: ``text`` at batch 1 and
    256 tokens."""
    fields = dict(kv.split("=") for kv in text.split(","))
    fields["batch"], fields["max_seqlen"] = "1", "256"
    return ",".join(f"{k}={v}" for k, v in fields.items())


def measure(text: str, candidates: list[dict[str, Any]], broken: set[int], rounds: int) -> dict:
    """One problem: each working candidate and each SDPA backend, interleaved over ``rounds``."""
    from search_spaces import get_spec
    from search_spaces.accuracy import max_rel_error

    spec = get_spec("flash_attention")
    problem = spec.parse_problem(text)
    inputs = spec.build_inputs(problem, device())
    entries = candidate_launchers(spec, inputs, candidates, broken)
    not_run = add_runnable(entries, {b: packed_sdpa(inputs, problem, b) for b in BACKENDS})
    times = interleaved(entries, rounds)
    med = medians(times)
    best = fastest_candidate(med)
    ran = [b for b in BACKENDS if b in med]
    fastest = min(ran, key=med.__getitem__)
    # The winner on fresh inputs, against the vendor path's output.
    fresh = winner_on_fresh(spec, problem, candidates[int(best[1:])])
    ref_backend = "CUDNN_ATTENTION" if "CUDNN_ATTENTION" in med else fastest
    ref = packed_sdpa(fresh, problem, ref_backend)().transpose(1, 2).reshape(fresh["out"].shape)
    err = max_rel_error(fresh["out"], ref)
    flops = spec.flops(problem)
    del inputs, fresh, entries, ref
    return {
        **winner_row(spec, problem, med, candidates, best, err),
        "rounds": times,
        "fastest_backend": fastest,
        "fastest_backend_ms": med[fastest],
        "vs_fastest_backend": med[fastest] / med[best],
        "vs_backend": {b: med[b] / med[best] for b in ran},
        "best_tflops": flops / med[best] / 1e9,
        "backend_tflops": flops / med[fastest] / 1e9,
        "backends_not_run": not_run,
        "winner_error_vs": ref_backend,
    }


def main() -> None:
    parser = sweep_parser(GRIDS, grid="explore")
    parser.add_argument("--candidates", default="explore", help="a preset name or a JSON file")
    parser.add_argument("--only", help="keep problems whose text contains this")
    parser.add_argument(
        "--outside-space",
        action="store_true",
        help="also run candidates the space's rules leave out (a probe of a change to the space)",
    )
    args = parser.parse_args()
    if args.candidates in CANDIDATES:
        candidates = CANDIDATES[args.candidates]
    else:
        candidates = json.loads(Path(args.candidates).read_text())
    grid = [t for t in GRIDS[args.grid] if not args.only or args.only in t]
    start = start_sweep()
    from search_spaces import get_spec

    spec = get_spec("flash_attention")
    small = {_specialization(t): spec.parse_problem(_specialization(t)) for t in grid}
    broken = compile_all(
        "flash_attention", small, candidates, args.jobs, outside_space=args.outside_space
    )
    rows = []
    for text in grid:
        rows.append(measure(text, candidates, broken[_specialization(text)], args.rounds))
        r = rows[-1]
        print(
            f"{text.replace('pattern=uniform,', '').replace('q_heads=32,', ''):<62} best {r['best']}"
            f" {r['best_ms']:.4f} ms {r['best_tflops']:5.0f} TF/s  {r['fastest_backend'][:5]} "
            f"{r['fastest_backend_ms']:.4f} x{r['vs_fastest_backend']:.3f}  "
            f"err {r['winner_max_rel_error']:.1e}",
            flush=True,
        )
        args.out.write_text(json.dumps({"candidates": candidates, "rows": rows}, indent=1))
    long = [r for r in rows if int(r["problem"]["max_seqlen"]) >= 4096]
    wins: dict[str, int] = {}
    for r in rows:
        wins[r["best"]] = wins.get(r["best"], 0) + 1
    summary = {
        "grid": args.grid,
        "problems": len(rows),
        "candidates_per_problem": len(candidates),
        "rounds": args.rounds,
        "compile_failures": {k: sorted(v) for k, v in broken.items() if v},
        "geomean_vs_fastest_backend": geomean([r["vs_fastest_backend"] for r in rows]),
        "geomean_vs_fastest_backend_seq_ge_4096": geomean([r["vs_fastest_backend"] for r in long])
        if long
        else None,
        "min_vs_fastest_backend": min(r["vs_fastest_backend"] for r in rows),
        "geomean_vs_backend": {
            b: geomean([r["vs_backend"][b] for r in rows if b in r["vs_backend"]])
            for b in BACKENDS
            if any(b in r["vs_backend"] for r in rows)
        },
        "geomean_best_vs_default": geomean(
            [r["default_ms"] / r["best_ms"] for r in rows if r["default_ms"]]
        )
        if any(r["default_ms"] for r in rows)
        else None,
        "wins": wins,
    }
    finish(args.out, summary, candidates, rows, start)


if __name__ == "__main__":
    main()
