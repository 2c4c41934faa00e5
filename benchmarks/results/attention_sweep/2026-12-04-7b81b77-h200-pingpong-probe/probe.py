"""Probe: GLUON with FA3's warpgroup ping-pong (named barriers) and split K / V slot release,
beside the spec's GLUON candidates and SDPA's cuDNN and flash backends, d=128 long problems.

``gluon_variants.py`` (this folder) is the spec's ``_flash_attention_gluon.py`` with two more
constexprs: ``PP`` (in the overlap loop each consumer partition waits for its turn on a named
barrier, ``bar.sync 14 + HALF, 256``, issues q k^T(j) and P @ V(j-1), then hands the turn to the
other, ``bar.arrive 15 - HALF, 256``) and ``SPLIT`` (a K slot is released once q k^T has read it,
a V slot once P @ V has; the producer waits for each separately). Each candidate runs through the
spec's launcher with the variant kernel swapped in; every candidate's output is checked on fresh
inputs against cuDNN with the spec's tolerance; timing as ``benchmarks/attention_sweep.py``
(do_bench medians, all entries interleaved, rotated, ``ROUNDS`` rounds).

Usage (GPU machine, repo root): python3 benchmarks/results/attention_sweep/2026-12-04-7b81b77-h200-pingpong-probe/probe.py OUT.json
"""

import json
import math
import multiprocessing as mp
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[2]))  # benchmarks/

ROUNDS = 3
D128 = "q_heads=32,head_dim=128,pattern=uniform"
PROBLEMS = [
    f"batch={b},max_seqlen={s},kv_heads={kv},causal={c},dtype={dt},{D128}"
    for b, s, kv, c, dt in [
        (8, 8192, 32, "false", "float16"),
        (32, 4096, 8, "false", "float16"),
        (1, 8192, 8, "false", "float16"),
        (8, 4096, 8, "false", "float16"),
        (8, 8192, 8, "false", "bfloat16"),
        (32, 8192, 32, "true", "float16"),
        (8, 4096, 8, "true", "float16"),
        (1, 8192, 8, "true", "float16"),
    ]
]
BASE = {
    "BLOCK_M": 128,
    "BLOCK_N": 128,
    "PRE_LOAD_V": False,
    "num_warps": 4,
    "num_stages": 2,
    "TMA": True,
    "HEAVY_FIRST": False,
    "SPLIT_M": False,
    "WARP_SPECIALIZE": False,
    "GLUON": True,
    "GLUON_OVERLAP": False,
    "GLUON_PERSISTENT": False,
    "GLUON_WIDE_KEYS": False,
}


def _c(bn, stages, ovl=False, pers=False, split=False, pp=False):
    cfg = {**BASE, "BLOCK_N": bn, "num_stages": stages, "GLUON_OVERLAP": ovl}
    cfg["GLUON_PERSISTENT"] = pers
    return cfg, {"SPLIT": split, "PP": pp}


CANDIDATES = {
    "r128x2": _c(128, 2),
    "r64x4o": _c(64, 4, ovl=True),
    "r64x6o": _c(64, 6, ovl=True),
    "r128x2P": _c(128, 2, pers=True),
    "r128x2o": _c(128, 2, ovl=True),
    "r64x4o_pp": _c(64, 4, ovl=True, pp=True),
    "r64x6o_pp": _c(64, 6, ovl=True, pp=True),
    "r128x2o_pp": _c(128, 2, ovl=True, pp=True),
    "r128x3o_pp": _c(128, 3, ovl=True, pp=True),
    "r64x4o_pp_sp": _c(64, 4, ovl=True, pp=True, split=True),
    "r64x4o_sp": _c(64, 4, ovl=True, split=True),
    "r128x2_sp": _c(128, 2, split=True),
    "r64x4oP_pp": _c(64, 4, ovl=True, pers=True, pp=True),
}


class _Variant:
    """Stands in for the spec's Gluon kernel object: launches the variant kernel with ``extra``."""

    def __init__(self, extra):
        self.extra = extra

    def __getitem__(self, grid):
        import gluon_variants

        run = gluon_variants.flash_attention_gluon_kernel[grid]
        return lambda *a, **kw: run(*a, **kw, **self.extra)


def launcher(spec, inputs, name):
    from search_spaces.kernels import _flash_attention_gluon as module

    cfg, extra = CANDIDATES[name]
    module.flash_attention_gluon_kernel = _Variant(extra)
    return spec.make_launcher(inputs, cfg)


def _compile(args):
    """One candidate launched once on a small problem of ``text``'s constexprs (fills the
    cache); the error text or None."""
    text, name = args
    import torch

    from search_spaces import get_spec

    spec = get_spec("flash_attention")
    small = text.replace("max_seqlen=8192", "max_seqlen=256").replace(
        "max_seqlen=4096", "max_seqlen=256"
    )
    small = ",".join(f for f in small.split(",") if not f.startswith("batch=")) + ",batch=1"
    problem = spec.parse_problem(small)
    try:
        launcher(spec, spec.build_inputs(problem, "cuda"), name)()
        torch.cuda.synchronize()
    except Exception as e:
        return f"{type(e).__name__}: {str(e)[:300]}"
    return None


def _key(text):
    f = dict(kv.split("=") for kv in text.split(","))
    return (f["kv_heads"], f["causal"], f["dtype"])


def main() -> None:
    import torch
    from _sweep import bench_ms
    from _vendor import packed_sdpa

    from search_spaces import get_spec
    from search_spaces.accuracy import max_rel_error

    out = Path(sys.argv[1])
    reps = {}
    for text in PROBLEMS:
        reps.setdefault(_key(text), text)
    jobs = [(t, n) for t in reps.values() for n in CANDIDATES]
    with mp.get_context("spawn").Pool(min(16, len(jobs))) as pool:
        errs = dict(zip(jobs, pool.map(_compile, jobs), strict=True))
    broken = {(k, n) for (t, n), e in errs.items() if e for k in [_key(t)]}
    for (t, n), e in errs.items():
        if e:
            print("compile/launch failed", _key(t), n, e, flush=True)
    spec = get_spec("flash_attention")
    rows = []
    for text in PROBLEMS:
        problem = spec.parse_problem(text)
        names = [n for n in CANDIDATES if (_key(text), n) not in broken]
        # correctness first: each candidate on fresh inputs into a NaN-poisoned output
        fresh = spec.build_inputs(problem, "cuda")
        ref = (
            packed_sdpa(fresh, problem, "CUDNN_ATTENTION")()
            .transpose(1, 2)
            .reshape(fresh["out"].shape)
        )
        errors = {}
        for n in names:
            fresh["out"].fill_(float("nan"))
            launcher(spec, fresh, n)()
            errors[n] = max_rel_error(fresh["out"], ref)
        tol = spec.tolerance(problem)
        ok = [n for n in names if errors[n] <= tol]
        del fresh, ref
        inputs = spec.build_inputs(problem, "cuda")
        entries = {n: launcher(spec, inputs, n) for n in ok}
        entries["CUDNN"] = packed_sdpa(inputs, problem, "CUDNN_ATTENTION")
        entries["FLASH"] = packed_sdpa(inputs, problem, "FLASH_ATTENTION")
        order = list(entries)
        times = {n: [] for n in order}
        for r in range(ROUNDS):
            shift = (r * 5) % len(order)
            for n in order[shift:] + order[:shift]:
                times[n].append(bench_ms(entries[n]))
        med = {n: statistics.median(v) for n, v in times.items()}
        flops = spec.flops(problem)
        row = {
            "problem": text,
            "ms": med,
            "rounds": times,
            "errors": errors,
            "tolerance": tol,
            "failed_check": [n for n in names if n not in ok],
            "tflops": {n: flops / m / 1e9 for n, m in med.items()},
        }
        rows.append(row)
        best_base = min(med[n] for n in ("r128x2", "r64x4o", "r64x6o", "r128x2P") if n in med)
        print(
            text.split(",q_heads")[0],
            f"cuDNN {med['CUDNN']:.4f} ms; best base {med['CUDNN'] / best_base:.3f}x;",
            " ".join(
                f"{n} {med['CUDNN'] / med[n]:.3f}" for n in entries if n not in ("CUDNN", "FLASH")
            ),
            flush=True,
        )
        del inputs, entries
        torch.cuda.empty_cache()
    out.write_text(
        json.dumps(
            {"rows": rows, "compile_errors": {f"{k}": v for k, v in errs.items() if v}}, indent=1
        )
    )
    print("\n| candidate | geomean vs cuDNN | vs best base (per problem) |")
    print("|---|---|---|")
    for n in CANDIDATES:
        vals = [r["ms"]["CUDNN"] / r["ms"][n] for r in rows if n in r["ms"]]
        rel = [
            min(r["ms"][b] for b in ("r128x2", "r64x4o", "r64x6o", "r128x2P") if b in r["ms"])
            / r["ms"][n]
            for r in rows
            if n in r["ms"]
        ]
        if vals:
            g = math.exp(statistics.fmean(math.log(v) for v in vals))
            g2 = math.exp(statistics.fmean(math.log(v) for v in rel))
            print(f"| {n} | {g:.3f} ({len(vals)}) | {g2:.3f} |")


if __name__ == "__main__":
    main()
