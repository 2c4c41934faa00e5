"""fused_moe (both GEMMs of the layer) against torch._grouped_mm on the same routing, one GPU process.

Usage (GPU machine, repo root; needs only torch, triton and search_spaces):
    python benchmarks/moe_sweep.py --out FILE.json [--grid issue|qwen|smoke] [--rounds 2] [--jobs 16]
Per problem (the spec's own inputs: x, expert weights w [E, N, K], top-k ids and weights):

* ``fused_moe``: every candidate config through the spec's launcher: the alignment by expert (a
  zero fill and three Triton kernels) and the grouped GEMM with the routed weights applied and each
  slot's row written in place.
* ``torch._grouped_mm`` (CUTLASS grouped GEMM on Hopper) on the same routing, every step timed:
  a stable argsort of the M*topk expert ids, per-expert counts (a scatter-add, no host
  synchronization) and their cumulative sum as the group offsets, the gather of the rows
  (x[slot // topk] for gemm=up, x[slot] for gemm=down), the grouped GEMM, for gemm=up_silu
  SiLU(gate) * up, the routed weights and the scatter back to [M, topk, N] (N/2 for up_silu; for
  gemm=down_sum then torch's sum over topk into [M, N]).
* ``silu_and_mul`` (gemm=up only): the activation pass an up GEMM needs and up_silu saves; the
  summary's ``up_silu_vs_up_then_silu`` sets the best up tile plus it against the best up_silu tile.
* ``topk_sum`` (gemm=down only): torch's sum over topk that a down GEMM needs and down_sum saves;
  the summary's ``down_sum_vs_down_then_sum`` sets the best down tile plus it against the best
  down_sum tile.
* ``grouped_mm_gemm_only``: that grouped GEMM alone, on rows sorted beforehand (a lower bound for
  the torch path, not a path a layer can run: it leaves out the routing both sides must do).

Both therefore start from the router's output and end with the weighted rows in place; neither sums
over topk (vLLM's moe_sum is a separate step for both) except for gemm=down_sum. Timing as in attention_sweep.py (do_bench
medians, all entries interleaved over ``--rounds`` rounds). The fastest candidate ("tuned": the
best of the fixed list) is checked on fresh inputs against the float32 per-expert reference.
"""

from __future__ import annotations

import json
from typing import Any

from _sweep import (  # this folder
    candidate_launchers,
    checked_winner,
    compile_all,
    device,
    finish,
    geomean,
    interleaved,
    medians,
    start_sweep,
    sweep_parser,
    winner_row,
)
from _vendor import grouped_mm_path


def _cfg(
    bm: int, bn: int, bk: int, group: int, warps: int, stages: int, tma: bool = False
) -> dict[str, Any]:
    return {
        "BLOCK_SIZE_M": bm,
        "BLOCK_SIZE_N": bn,
        "BLOCK_SIZE_K": bk,
        "GROUP_SIZE_M": group,
        "num_warps": warps,
        "num_stages": stages,
        "TMA": tma,
    }


#: Tiles for the Qwen3-30B-A3B-like layer (E=128, top 8) from decode to long prefill, each with
#: pointer loads and with TMA weight tiles.
_QWEN_TILES = (
    (64, 64, 64, 16, 4, 3),  # the spec default
    (16, 128, 128, 1, 4, 4),
    (32, 64, 128, 1, 4, 4),
    (64, 128, 64, 32, 4, 4),
    (128, 128, 64, 32, 4, 4),
    (128, 128, 64, 16, 8, 3),
    (128, 128, 64, 16, 8, 4),
    (128, 128, 128, 16, 8, 3),
    (128, 256, 64, 16, 8, 3),
    (64, 256, 64, 16, 8, 4),
    (256, 128, 64, 16, 8, 3),
)


CANDIDATES: dict[str, list[dict[str, Any]]] = {
    "issue": [
        _cfg(64, 64, 64, 16, 4, 3),  # the spec default (vLLM's fallback)
        _cfg(16, 64, 128, 1, 4, 4),
        _cfg(16, 128, 128, 1, 4, 3),
        _cfg(32, 64, 128, 1, 4, 4),
        _cfg(64, 128, 64, 16, 4, 4),
        _cfg(64, 128, 128, 1, 4, 3),
        _cfg(128, 128, 64, 16, 8, 3),
        _cfg(128, 256, 64, 16, 8, 3),
        _cfg(64, 256, 64, 16, 8, 3),
        _cfg(128, 128, 64, 1, 4, 4),
    ],
    "qwen": [_cfg(*tile, tma=tma) for tma in (False, True) for tile in _QWEN_TILES],
    "smoke": [_cfg(16, 32, 64, 1, 4, 2), _cfg(32, 32, 64, 16, 4, 2, tma=True)],
}

#: (E, topk, up N, up K = hidden, down N = hidden, down K = intermediate): Mixtral 8x7B, and
#: fine-grained 64- and 256-expert top-8 layers.
SHAPES = ((8, 2, 14336, 4096, 4096, 7168), (64, 8, 2048, 2048, 2048, 1024),
          (256, 8, 2048, 2048, 2048, 1024))  # fmt: skip
#: Qwen3-30B-A3B's layer (workers.profiling.models' qwen3-30b-a3b).
QWEN_SHAPE = ((128, 8, 1536, 2048, 2048, 768),)


def _grid(
    shapes: tuple[tuple[int, ...], ...],
    tokens: tuple[int, ...],
    firsts: tuple[str, ...] = ("up",),
    lasts: tuple[str, ...] = ("down",),
) -> list[dict[str, Any]]:
    grid = []
    for e, topk, up_n, up_k, down_n, down_k in shapes:
        gemms = [*((g, up_n, up_k) for g in firsts), *((g, down_n, down_k) for g in lasts)]
        for gemm, n, k in gemms:
            for m in tokens:
                grid.append(
                    {
                        "M": m,
                        "E": e,
                        "topk": topk,
                        "N": n,
                        "K": k,
                        "dtype": "bfloat16",
                        "gemm": gemm,
                    }
                )
    return grid


GRIDS: dict[str, list[dict[str, Any]]] = {
    "issue": _grid(SHAPES, (16, 64, 256, 1024, 4096)),
    # decode batch 64, prefill batch 1 and 16 at seq 512; each GEMM plain and with its epilogue
    "qwen": _grid(QWEN_SHAPE, (64, 512, 8192), ("up", "up_silu"), ("down", "down_sum")),
    "smoke": [
        {"M": 16, "E": 4, "topk": 2, "N": 64, "K": 64, "dtype": "bfloat16", "gemm": "up"},
        {"M": 16, "E": 4, "topk": 2, "N": 64, "K": 64, "dtype": "bfloat16", "gemm": "up_silu"},
        {"M": 16, "E": 8, "topk": 4, "N": 32, "K": 64, "dtype": "bfloat16", "gemm": "down"},
        {"M": 16, "E": 8, "topk": 4, "N": 32, "K": 64, "dtype": "bfloat16", "gemm": "down_sum"},
    ],
}


def measure(problem: dict[str, Any], candidates: list[dict[str, Any]], broken: set[int],
            rounds: int) -> dict[str, Any]:  # fmt: skip
    from search_spaces import get_spec
    from search_spaces.accuracy import max_rel_error

    spec = get_spec("fused_moe")
    problem = spec.validate_problem(problem)
    inputs = spec.build_inputs(problem, device())
    entries = candidate_launchers(spec, inputs, candidates, broken)
    vendor, gemm_only = grouped_mm_path(inputs, problem)
    if problem["gemm"] == "up":  # the pass an up GEMM needs after it, which up_silu saves
        from search_spaces.kernels.fused_moe import silu_and_mul

        hidden = inputs["out"].view(-1, int(problem["N"]))
        act = hidden.new_empty(hidden.shape[0], hidden.shape[1] // 2)
        entries["silu_and_mul"] = lambda: silu_and_mul(hidden, act)
    if problem["gemm"] == "down":  # the pass a down GEMM needs after it, which down_sum saves
        import torch

        slots, summed = inputs["out"], inputs["out"].sum(dim=1)
        entries["topk_sum"] = lambda: torch.sum(slots, dim=1, out=summed)
    vendor_note = None
    try:
        vendor_err = max_rel_error(vendor(), spec.reference(inputs))
        entries["grouped_mm"] = vendor
        entries["grouped_mm_gemm_only"] = gemm_only
    except RuntimeError as exc:
        vendor_note = str(exc).splitlines()[0][:200]
        vendor_err = None
    med = medians(interleaved(entries, rounds))
    best, err = checked_winner(spec, problem, med, candidates)
    del inputs, entries, vendor, gemm_only
    row: dict[str, Any] = {
        **winner_row(spec, problem, med, candidates, best, err),
        "tflops": spec.flops(problem) / med[best] / 1e9,
        "gbps": spec.bytes_moved(problem) / med[best] / 1e6,
        "grouped_mm_max_rel_error": vendor_err,
        "grouped_mm_not_run": vendor_note,
    }
    for step in ("silu_and_mul", "topk_sum"):
        if step in med:
            row[f"{step}_ms"] = med[step]
            row["then_step_ms"] = med[best] + med[step]
    if "grouped_mm" in med:
        row["grouped_mm_ms"] = med["grouped_mm"]
        row["vs_grouped_mm"] = med["grouped_mm"] / med[best]
        row["grouped_mm_gemm_only_ms"] = med["grouped_mm_gemm_only"]
        row["vs_grouped_mm_gemm_only"] = med["grouped_mm_gemm_only"] / med[best]
    return row


def _fused_against_plain(
    rows: list[dict[str, Any]], plain: str, fused: str
) -> list[dict[str, Any]]:
    """Per GEMM timed both ways: the best ``plain`` tile plus the pass after it (``silu_and_mul``
    after up, ``topk_sum`` after down) against the best ``fused`` tile, which takes that pass in
    its epilogue (ratio > 1: the epilogue is faster)."""

    def shape(r: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(r["problem"][f] for f in ("M", "E", "topk", "N", "K", "dtype"))

    fused_rows = {shape(r): r for r in rows if r["problem"]["gemm"] == fused}
    return [
        {
            "M": r["problem"]["M"],
            f"{plain}_then_step_ms": r["then_step_ms"],
            f"{fused}_ms": fused_rows[shape(r)]["best_ms"],
            "ratio": r["then_step_ms"] / fused_rows[shape(r)]["best_ms"],
        }
        for r in rows
        if r["problem"]["gemm"] == plain and "then_step_ms" in r and shape(r) in fused_rows
    ]


def main() -> None:
    args = sweep_parser(GRIDS).parse_args()
    candidates = CANDIDATES[args.grid]
    grid = GRIDS[args.grid]
    start = start_sweep()
    # Compiled variants differ by topk and gemm (constexprs); M, N, K, E are runtime values.
    small = {
        f"topk={p['topk']},gemm={p['gemm']}": {**p, "M": 16, "E": 8, "N": 256, "K": 256}
        for p in grid
    }
    broken = compile_all("fused_moe", small, candidates, args.jobs)
    rows = []
    for problem in grid:
        key = f"topk={problem['topk']},gemm={problem['gemm']}"
        rows.append(measure(problem, candidates, broken[key], args.rounds))
        r = rows[-1]
        text = ",".join(f"{k}={v}" for k, v in problem.items() if k != "dtype")
        vs = f"grouped_mm {r['grouped_mm_ms']:.4f} x{r['vs_grouped_mm']:.3f} (GEMM alone " \
            f"{r['grouped_mm_gemm_only_ms']:.4f} x{r['vs_grouped_mm_gemm_only']:.3f})" if (
            "vs_grouped_mm" in r) else f"grouped_mm not run: {r['grouped_mm_not_run']}"  # fmt: skip
        print(
            f"{text:<52} best {r['best']} {r['best_ms']:.4f} ms (default {r['default_ms']:.4f}) "
            f"{r['tflops']:5.0f} TF/s {r['gbps']:5.0f} GB/s  {vs}  err {r['winner_max_rel_error']:.1e}",
            flush=True,
        )
        args.out.write_text(json.dumps({"candidates": candidates, "rows": rows}, indent=1))
    ratios = [r["vs_grouped_mm"] for r in rows if "vs_grouped_mm" in r]
    summary = {
        "grid": args.grid,
        "problems": len(rows),
        "candidates_per_problem": len(candidates),
        "rounds": args.rounds,
        "geomean_vs_grouped_mm": geomean(ratios) if ratios else None,
        "min_vs_grouped_mm": min(ratios) if ratios else None,
        "below_1": sum(r < 1 for r in ratios),
        "geomean_vs_grouped_mm_gemm_only": geomean(
            [r["vs_grouped_mm_gemm_only"] for r in rows if "vs_grouped_mm_gemm_only" in r]
        )
        if ratios
        else None,
        "geomean_best_vs_default": geomean([r["default_ms"] / r["best_ms"] for r in rows]),
        "up_silu_vs_up_then_silu": _fused_against_plain(rows, "up", "up_silu"),
        "down_sum_vs_down_then_sum": _fused_against_plain(rows, "down", "down_sum"),
    }
    finish(args.out, summary, candidates, rows, start)


if __name__ == "__main__":
    main()
