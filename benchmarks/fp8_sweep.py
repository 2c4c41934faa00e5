"""fp8_matmul candidates against the spec's vendor paths on DeepSeek-V3's block-FP8 linears, one
GPU process.

Usage (GPU machine, repo root; needs only torch, triton and search_spaces):
    python benchmarks/fp8_sweep.py --out FILE.json [--grid issue|smoke] [--rounds 3] [--jobs 16]
    python benchmarks/fp8_sweep.py --summarize FILE.json   (a stored run's summary, recomputed)
Per problem (the spec's own inputs: A e4m3 [M, K] with per-token-group scales, B e4m3 [N, K] with
128x128 block scales, bfloat16 out):

* every candidate config through the spec's launcher (c0 is the spec's default, vLLM's untuned
  fallback);
* ``torch._scaled_mm``: cuBLASLt's blockwise (1x128, 128x128) FP8 GEMM, where it runs (sm_90,
  and there not every shape: each row, and the summary per problem, says where it did not and why);
* ``dequant+torch.matmul``: A dequantized to bfloat16 per call, B once beforehand, bfloat16 GEMM.

Correctness first: every entry's output on the shared inputs is checked against the float32
reference before anything is timed (an entry out of tolerance is reported and not timed), and the
fastest candidate again on fresh inputs. Timing as in moe_sweep.py: do_bench medians (CUDA events,
L2 flushed before each rep), all entries interleaved over ``--rounds`` rounds.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from _sweep import (  # this folder
    candidate_launchers,
    checked_winner,
    compile_all,
    device,
    finish,
    for_device,
    geomean,
    interleaved,
    medians,
    problem_text,
    resummarize,
    start_sweep,
    sweep_parser,
    winner_row,
)


def _cfg(bm: int, bn: int, bk: int, group: int, warps: int, stages: int, split: int = 1,
         tma: bool = False, lag: bool = False, persistent: bool = False, ws: bool = False,
         gluon: bool = False) -> dict[str, Any]:  # fmt: skip
    return {
        "BLOCK_SIZE_M": bm,
        "BLOCK_SIZE_N": bn,
        "BLOCK_SIZE_K": bk,
        "GROUP_SIZE_M": group,
        "SPLIT_K": split,
        "num_warps": warps,
        "num_stages": stages,
        "TMA": tma,
        "PERSISTENT": persistent,
        "SCALE_LAG": lag,
        "WARP_SPEC": ws,
        "GLUON": gluon,
    }


CANDIDATES: dict[str, list[dict[str, Any]]] = {
    "issue": [
        _cfg(64, 128, 128, 32, 4, 2),  # the spec default (vLLM's fallback)
        _cfg(64, 128, 128, 32, 4, 3),
        _cfg(64, 128, 128, 32, 4, 4, tma=True),
        _cfg(128, 128, 128, 16, 8, 3),
        _cfg(128, 256, 128, 16, 8, 3, tma=True),
        _cfg(32, 64, 128, 1, 4, 4),
        _cfg(16, 64, 128, 1, 4, 5),
        _cfg(16, 128, 128, 1, 4, 4, split=4),
        _cfg(16, 64, 128, 1, 4, 5, split=8, tma=True),
        _cfg(64, 64, 64, 1, 4, 6, split=2),
        _cfg(128, 128, 128, 16, 8, 3, lag=True),
        _cfg(128, 128, 128, 16, 8, 4, tma=True, lag=True),
        _cfg(64, 128, 128, 32, 4, 4, tma=True, lag=True),
        _cfg(64, 256, 128, 16, 8, 3, tma=True, lag=True),
        _cfg(128, 256, 128, 16, 8, 3, tma=True, persistent=True),
        _cfg(128, 128, 128, 16, 8, 4, tma=True, persistent=True, lag=True),
        # c16-c19: warp-specialized 64-row tiles (where Triton 3.6's pass gives a kernel that
        # runs): the twins of c2 and c12, a 5-deep ring, and 64x64 with 6.
        _cfg(64, 128, 128, 32, 4, 4, tma=True, ws=True),
        _cfg(64, 128, 128, 32, 4, 4, tma=True, lag=True, ws=True),
        _cfg(64, 128, 128, 32, 4, 5, tma=True, ws=True),
        _cfg(64, 64, 128, 32, 4, 6, tma=True, ws=True),
        # c20-c23: the Gluon kernel (two 64-row consumer warpgroups, a TMA producer warp) on
        # 128x128 tiles with 4- and 5-deep rings, persistent with 4, and 128x64 with 6.
        _cfg(128, 128, 128, 16, 4, 4, tma=True, gluon=True),
        _cfg(128, 128, 128, 16, 4, 5, tma=True, gluon=True),
        _cfg(128, 128, 128, 16, 4, 4, tma=True, persistent=True, gluon=True),
        _cfg(128, 64, 128, 16, 4, 6, tma=True, gluon=True),
    ],
    "smoke": [
        _cfg(64, 128, 128, 32, 4, 2),
        _cfg(16, 64, 128, 1, 4, 3, split=2, tma=True),
        _cfg(32, 128, 128, 1, 4, 2, lag=True),
        _cfg(32, 128, 128, 1, 4, 2, tma=True, persistent=True, lag=True),
        _cfg(64, 128, 128, 1, 4, 2, tma=True, ws=True),
    ],
}

#: DeepSeek-V3's block-FP8 linears (N, K): fused q_a/kv_a projection (N = 1536 + 576 = 2112 ends
#: inside a 128-row scale block), q_b, o_proj, the dense MLP's gate+up and down.
SHAPES = ((2112, 7168), (24576, 1536), (7168, 16384), (36864, 7168), (7168, 18432))

GRIDS: dict[str, list[dict[str, Any]]] = {
    "issue": [
        {"M": m, "N": n, "K": k} for n, k in SHAPES for m in (1, 16, 64, 128, 512, 2048, 4096)
    ],
    "smoke": [
        {"M": 16, "N": 256, "K": 512},
        {"M": 33, "N": 384, "K": 256},
        {"M": 16, "N": 200, "K": 256},
    ],
}

VENDOR = ("torch._scaled_mm", "dequant+torch.matmul")


def _checked_entries(spec: Any, inputs: dict[str, Any], entries: dict[str, Any]) -> dict[str, str]:
    """Launch each entry once into a NaN-poisoned out and compare with the reference; drop (and
    return, label -> why) those out of tolerance."""
    from search_spaces.accuracy import max_rel_error

    ref = spec.reference(inputs)
    tolerance = spec.tolerance({})
    wrong = {}
    for label, fn in list(entries.items()):
        inputs["out"].fill_(float("nan"))
        fn()
        err = max_rel_error(inputs["out"], ref)
        if err > tolerance:
            wrong[label] = f"max rel. error {err:.2e} > {tolerance:.0e}"
            del entries[label]
    return wrong


def measure(problem: dict[str, Any], candidates: list[dict[str, Any]], broken: set[int],
            rounds: int) -> dict[str, Any]:  # fmt: skip
    from search_spaces import SpecError, get_spec

    spec = get_spec("fp8_matmul")
    problem = spec.validate_problem(problem)
    inputs = spec.build_inputs(problem, device())
    entries = candidate_launchers(spec, inputs, candidates, broken)
    not_run = {}
    for name in VENDOR:
        try:
            entries[name] = spec.make_vendor_launcher(inputs, name)
        except SpecError as exc:
            not_run[name] = str(exc)
    wrong = _checked_entries(spec, inputs, entries)
    if not any(label[0] == "c" for label in entries):
        raise SystemExit(f"no candidate is within tolerance on {problem}: {wrong}")
    med = medians(interleaved(entries, rounds))
    best, err = checked_winner(spec, problem, med, candidates)
    del inputs, entries
    row: dict[str, Any] = {
        **winner_row(spec, problem, med, candidates, best, err),
        "tflops": spec.flops(problem) / med[best] / 1e9,
        "gbps": spec.bytes_moved(problem) / med[best] / 1e6,
        "not_run": not_run,
        "wrong": wrong,
    }
    for name in VENDOR:
        if name in med:
            row[f"vs {name}"] = med[name] / med[best]
    return row


def main() -> None:
    args = sweep_parser(GRIDS, rounds=3).parse_args()
    candidates = [for_device("fp8_matmul", c) for c in CANDIDATES[args.grid]]
    grid = GRIDS[args.grid]
    start = start_sweep()
    # M, N, K are runtime values: one small problem compiles every candidate (M=1 compiles its
    # own specialization at its first launch).
    broken = compile_all("fp8_matmul", {"any": {"M": 16, "N": 256, "K": 512}}, candidates,
                         args.jobs)["any"]  # fmt: skip
    rows = []
    for problem in grid:
        rows.append(measure(problem, candidates, broken, args.rounds))
        r = rows[-1]
        text = problem_text(problem)
        vendors = "  ".join(
            f"{name} {r['ms'][name]:.4f} x{r[f'vs {name}']:.3f}"
            if f"vs {name}" in r
            else f"{name} not run"
            for name in VENDOR
        )
        print(
            f"{text:<22} best {r['best']} {r['best_ms']:.4f} ms (default {r['default_ms']:.4f}) "
            f"{r['tflops']:5.0f} TF/s  {vendors}  err {r['winner_max_rel_error']:.1e}"
            + (f"  WRONG {r['wrong']}" if r["wrong"] else ""),
            flush=True,
        )
        args.out.write_text(json.dumps({"candidates": candidates, "rows": rows}, indent=1))
    summary = summarize(args.grid, args.rounds, len(candidates), rows)
    finish(args.out, summary, candidates, rows, start)


#: Where the per-candidate summary splits the grid: the memory-bound small M and the large M.
LARGE_M = 512


def summarize(
    grid: str, rounds: int, candidates: int, rows: list[dict[str, Any]]
) -> dict[str, Any]:
    """The sweep's summary: vendor paths not run (per path, problem -> why), candidates out of
    tolerance, the best against the default and each vendor path (geomean, min), the same
    against the first vendor path below and from LARGE_M (``best_by_m``), and per candidate."""
    summary: dict[str, Any] = {
        "grid": grid,
        "problems": len(rows),
        "candidates_per_problem": candidates,
        "rounds": rounds,
        # vendor path -> {problem: why} for each problem it did not run on
        "not_run": {
            name: {
                problem_text(r["problem"]): r["not_run"][name] for r in rows if name in r["not_run"]
            }
            for name in VENDOR
            if any(name in r["not_run"] for r in rows)
        },
        "wrong": sorted({label for r in rows for label in r["wrong"]}),
        "geomean_best_vs_default": geomean(
            [r["default_ms"] / r["best_ms"] for r in rows if r["default_ms"] is not None]
        ),
    }
    for name in VENDOR:
        ratios = [r[f"vs {name}"] for r in rows if f"vs {name}" in r]
        if ratios:
            summary[f"geomean_vs {name}"] = geomean(ratios)
            summary[f"min_vs {name}"] = min(ratios)
            summary[f"problems_vs {name}"] = len(ratios)
    key = f"vs {VENDOR[0]}"
    summary["best_by_m"] = {}
    for label, keep in (
        (f"M < {LARGE_M}", lambda m: m < LARGE_M),
        (f"M >= {LARGE_M}", lambda m: m >= LARGE_M),
    ):
        ratios = [r[key] for r in rows if key in r and keep(r["problem"]["M"])]
        if ratios:
            summary["best_by_m"][label] = {
                f"geomean_{key}": geomean(ratios),
                f"min_{key}": min(ratios),
                "problems": len(ratios),
            }
    summary["per_candidate"] = per_candidate(rows, VENDOR[0])
    return summary


def _stored_summary(stored: dict[str, Any]) -> dict[str, Any]:
    """:func:`summarize` of a stored sweep output (``--summarize``)."""
    old = stored["summary"]
    return summarize(old["grid"], old["rounds"], len(stored["candidates"]), stored["rows"])


def per_candidate(rows: list[dict[str, Any]], vendor: str) -> dict[str, dict[str, Any]]:
    """Per candidate label: the geomean of vendor ms / its ms over the problems where both ran,
    below and from LARGE_M, and the problems it won."""
    labels = sorted({k for r in rows for k in r["ms"] if k[0] == "c"}, key=lambda k: int(k[1:]))
    out: dict[str, dict[str, Any]] = {}
    for label in labels:
        both = [r for r in rows if label in r["ms"] and vendor in r["ms"]]
        small = [r["ms"][vendor] / r["ms"][label] for r in both if r["problem"]["M"] < LARGE_M]
        large = [r["ms"][vendor] / r["ms"][label] for r in both if r["problem"]["M"] >= LARGE_M]
        out[label] = {
            f"vs {vendor}, M < {LARGE_M}": geomean(small) if small else None,
            f"vs {vendor}, M >= {LARGE_M}": geomean(large) if large else None,
            "won": sum(r["best"] == label for r in rows),
        }
    return out


if __name__ == "__main__":
    status = resummarize(sys.argv[1:], "fp8_sweep.py", _stored_summary)
    if status is not None:
        sys.exit(status)
    main()
