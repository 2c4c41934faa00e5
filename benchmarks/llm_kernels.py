"""LLM kernels tuned by tunefleet against the vendor paths users have, one GPU run.

Usage (GPU machine, repo root):
    python benchmarks/llm_kernels.py --out-dir DIR [--kernels flash_attention paged_attention
        fused_moe] [--trials 16] [--in-flight 12] [--flash-grid GRID] [--moe-grid GRID]
Per kernel: one `python -m orchestrator tune JOB.json --json` job over the kernel's suite (local
Ray, one worker per GPU, compile pool, TPE); the winners are what `tunefleet pull` exports from its
database (the deployment path; with --best-db/--best-landscape, the fastest stored times instead).
Then, in this process, per problem on one set of fresh random inputs: the tuned config, the spec's
default config and every vendor path that runs, timed interleaved (ROUNDS rounds, each entry once
per round in a rotated order, the workers' timer: CUDA events, L2 flushed before each rep, warm-up,
median of 25; the median over rounds); the tuned config once more on fresh inputs against the spec's
reference; and the portability matrix (each problem's best config run on every other problem of a
subset). Writes DIR/llm_kernels.json; prints a table per kernel. ``--flash-grid GRID`` tunes
flash_attention over one of attention_sweep.py's grids instead of its suite here; flash_attention's
geomeans are also given per group (seq >= 4096, each head size, causal or not).

Vendor paths: flash_attention -> torch SDPA with each of the cuDNN, flash and efficient backends
on the [batch, heads, seq, head_dim] views of the packed tensors (uniform lengths, so exact; GQA
through enable_gqa); paged_attention -> the same three backends over the context gathered into
contiguous K/V beforehand (the no-paging reference), and gather through the block table + SDPA;
fused_moe -> torch._grouped_mm on the same routing (argsort, counts, gather, grouped GEMM, routed
weights, scatter back; benchmarks/_vendor.py).
"""

from __future__ import annotations

import argparse
import functools
import json
from collections.abc import Callable
from typing import Any

from _bench import (  # this folder (run as a script)
    add_job_args,
    geomean,
    interleaved_ms,
    local_target,
    timed,
    tune_suite,
)

#: Rounds of the interleaved timing (each round times every entry once, order rotated).
ROUNDS = 3

SUITES: dict[str, list[str]] = {
    # A slice of the grid (GQA 32/8, causal, bf16): batch 1 and 8, seq 1k-8k, d 64 and 128.
    "flash_attention": [
        f"batch={b},max_seqlen={s},pattern=uniform,q_heads=32,kv_heads=8,head_dim={d},"
        "causal=true,dtype=bfloat16"
        for d in (64, 128)
        for b in (1, 8)
        for s in (1024, 4096, 8192)
    ],
    "paged_attention": [
        f"batch={b},context_len={c},pattern=uniform,q_heads=32,kv_heads=8,head_dim=128,"
        "dtype=float16"
        for b in (1, 16, 64, 256)
        for c in (1024, 8192)
    ],
    "fused_moe": [
        f"M={m},E={e},topk={topk},N={n},K={k},dtype=bfloat16,gemm={gemm}"
        for e, topk, n, k, gemm in (
            (8, 2, 14336, 4096, "up"),
            (8, 2, 4096, 7168, "down"),
            (64, 8, 2048, 2048, "up"),
            (64, 8, 2048, 1024, "down"),
        )
        for m in (16, 256, 4096)
    ],
}
#: Tiny suites for a dry run of this script on a machine without a GPU (--smoke).
SMOKE: dict[str, list[str]] = {
    "flash_attention": [
        "batch=2,max_seqlen=32,q_heads=4,kv_heads=2,head_dim=64,causal=true,dtype=float16",
        "batch=1,max_seqlen=48,q_heads=2,kv_heads=2,head_dim=64,causal=true,dtype=float16",
    ],
    "paged_attention": [
        "batch=2,context_len=64,q_heads=4,kv_heads=2,head_dim=64,dtype=float16",
        "batch=3,context_len=32,q_heads=4,kv_heads=2,head_dim=64,dtype=float16",
    ],
    "fused_moe": [
        "M=8,E=4,topk=2,N=32,K=32,dtype=float16",
        "M=4,E=4,topk=2,N=32,K=32,dtype=float16",
    ],
}
#: Problems (indices into the suite) whose best configs are swapped for the portability matrix.
PORTABILITY: dict[str, list[int]] = {
    "flash_attention": [0, 2, 5, 6, 8, 11],
    "paged_attention": list(range(8)),
    "fused_moe": list(range(3)),
}


def _sdpa_makers(kernel: str) -> dict[str, Baseline]:
    from _vendor import BACKENDS, contiguous_sdpa, packed_sdpa

    build = packed_sdpa if kernel == "flash_attention" else contiguous_sdpa
    return {
        f"SDPA {b.removesuffix('_ATTENTION').lower()}": functools.partial(_sdpa_with, build, b)
        for b in BACKENDS
    }


def _sdpa_with(build: Any, backend: str, inputs: dict[str, Any], problem: dict[str, Any]) -> Any:
    return build(inputs, problem, backend)


def gather_sdpa_baseline(inputs: dict[str, Any], problem: dict[str, Any]) -> Callable[[], Any]:
    import torch.nn.functional as F

    q, kc, vc, tables = inputs["q"], inputs["k_cache"], inputs["v_cache"], inputs["block_tables"]
    b, hq, d = q.shape
    page, hkv = kc.shape[1], kc.shape[2]
    n = int(problem["context_len"])
    pages = -(-n // page)
    idx = tables[:, :pages].long()

    def run() -> Any:
        k = kc[idx].reshape(b, pages * page, hkv, d)[:, :n].transpose(1, 2)
        v = vc[idx].reshape(b, pages * page, hkv, d)[:, :n].transpose(1, 2)
        return F.scaled_dot_product_attention(q.unsqueeze(2), k, v, enable_gqa=hq != hkv)

    return run


def grouped_mm_baseline(inputs: dict[str, Any], problem: dict[str, Any]) -> Callable[[], Any]:
    from _vendor import grouped_mm_path

    return grouped_mm_path(inputs, problem)[0]


Baseline = Callable[[dict[str, Any], dict[str, Any]], Callable[[], Any]]


def baselines(kernel: str) -> dict[str, Baseline]:
    """The vendor paths of ``kernel``, label -> maker (each may refuse a problem: not run)."""
    if kernel == "flash_attention":
        return _sdpa_makers(kernel)
    if kernel == "paged_attention":
        return {**_sdpa_makers(kernel), "torch gather + SDPA": gather_sdpa_baseline}
    return {"torch._grouped_mm": grouped_mm_baseline}


def as_out(kernel: str, result: Any, out: Any) -> Any:
    """A baseline's result laid out like the kernel's ``out``."""
    if kernel == "flash_attention":
        return result.transpose(1, 2).reshape(out.shape)
    return result.reshape(out.shape)


#: flash_attention's groups: name -> whether a problem belongs to it.
FLASH_GROUPS: dict[str, Callable[[dict[str, Any]], bool]] = {
    "seq>=4096": lambda p: int(p["max_seqlen"]) >= 4096,
    "head_dim=64": lambda p: int(p["head_dim"]) == 64,
    "head_dim=128": lambda p: int(p["head_dim"]) == 128,
    "head_dim=128,seq>=4096": lambda p: int(p["head_dim"]) == 128 and int(p["max_seqlen"]) >= 4096,
    "causal": lambda p: bool(p["causal"]),
    "full": lambda p: not p["causal"],
}


def group_geomeans(kernel: str, rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per group of FLASH_GROUPS (flash_attention only; none for other kernels): the geomean and
    min of the tuned speedup over the fastest vendor path, and the problems counted."""
    if kernel != "flash_attention":
        return {}
    out: dict[str, dict[str, float]] = {}
    for name, member in FLASH_GROUPS.items():
        speedups = [
            r["speedup_vs_fastest_baseline"]
            for r in rows
            if r["fastest_baseline"] and member(r["problem"])
        ]
        if speedups:
            out[name] = {
                "geomean": geomean(speedups),
                "min": min(speedups),
                "problems": len(speedups),
            }
    return out


def print_row(row: dict[str, Any]) -> None:
    """One measured problem: tuned, default and vendor times, the speedup over the fastest."""
    p = ",".join(f"{k}={v}" for k, v in row["problem"].items() if k not in ("dtype",))
    base = "  ".join(f"{k} {b['ms']:.4f}" for k, b in row["baselines"].items())
    print(
        f"  {p:<70} tuned {row['tuned_ms']:.4f} ms default {row['default_ms']:.4f}  "
        f"{base}  x{row['speedup_vs_fastest_baseline'] or float('nan'):.2f} vs "
        f"{row['fastest_baseline']}  err {row['tuned_max_rel_error_fresh_inputs']:.1e}",
        flush=True,
    )


def measure(kernel: str, best: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Every problem of the kernel's suite with a winner in ``best``, each row printed as soon as
    it is measured (a run cut short keeps the rows it printed); then the portability matrix."""
    from search_spaces import get_spec, problem_key
    from search_spaces.accuracy import max_rel_error

    spec = get_spec(kernel)
    limits, backend, device = local_target()
    rows: list[dict[str, Any]] = []
    for text in SUITES[kernel]:
        problem = spec.parse_problem(text)
        config = best.get(problem_key(problem))
        if config is None:
            print(f"  {text}: no stored winner; skipped", flush=True)
            continue
        inputs = spec.build_inputs(problem, device)
        makers: dict[str, Any] = {
            "tuned": lambda s, c=config: spec.make_launcher(s, c),
            "default": lambda s: spec.make_launcher(s, spec.default_for(limits)),
        }
        spec.make_launcher(inputs, config)()
        tuned_out = inputs["out"].clone()
        agree: dict[str, float] = {}
        not_run: dict[str, str] = {}
        for label, make in baselines(kernel).items():
            fn = make(inputs, problem)
            try:
                agree[label] = max_rel_error(tuned_out, as_out(kernel, fn(), tuned_out))
            except RuntimeError as exc:  # e.g. an SDPA backend that does not take the problem
                not_run[label] = str(exc).splitlines()[0][:200]
                continue
            makers[label] = lambda _s, fn=fn: fn
        ms = interleaved_ms([inputs], makers, backend, "kernel", ROUNDS)
        # The winner once more on fresh inputs, its output poisoned first.
        fresh = spec.build_inputs(problem, device)
        fresh["out"].fill_(float("nan"))
        spec.make_launcher(fresh, config)()
        vendor = {k: v for k, v in ms.items() if k not in ("tuned", "default")}
        fastest = min(vendor, key=vendor.__getitem__) if vendor else None
        rows.append(
            {
                "problem": problem,
                "config": config,
                "tuned_ms": ms["tuned"],
                "default_ms": ms["default"],
                "baselines": {
                    k: {"ms": v, "speedup": v / ms["tuned"], "max_rel_error_vs_tuned": agree[k]}
                    for k, v in vendor.items()
                },
                "baselines_not_run": not_run,
                "fastest_baseline": fastest,
                "speedup_vs_fastest_baseline": vendor[fastest] / ms["tuned"] if fastest else None,
                "speedup_vs_default": ms["default"] / ms["tuned"],
                "tuned_max_rel_error_fresh_inputs": max_rel_error(
                    fresh["out"], spec.reference(fresh)
                ),
                "tolerance": spec.tolerance(problem),
                "tflops": spec.flops(problem) / ms["tuned"] / 1e9,
                "gbps": spec.bytes_moved(problem) / ms["tuned"] / 1e6,
            }
        )
        print_row(rows[-1])
        del inputs, fresh, tuned_out, makers
    subset = [
        text
        for text in (SUITES[kernel][i] for i in PORTABILITY[kernel])
        if problem_key(spec.parse_problem(text)) in best
    ]
    matrix: list[dict[str, Any]] = []
    for target in subset:
        problem = spec.parse_problem(target)
        inputs = spec.build_inputs(problem, device)
        times: list[float | None] = []
        for source in subset:
            config = best[problem_key(spec.parse_problem(source))]
            try:
                times.append(timed(spec.make_launcher(inputs, config), backend))
            except Exception as exc:  # a config may not fit another problem: record why
                times.append(None)
                print(f"  portability {source} -> {target}: {type(exc).__name__}", flush=True)
        own = times[subset.index(target)]
        matrix.append(
            {
                "problem": target,
                "times_ms": times,
                "loss_vs_own_best": [
                    None if t is None or own is None else 1 - own / t for t in times
                ],
            }
        )
        del inputs
    labels = sorted({k for r in rows for k in r["baselines"]})
    return {
        "rows": rows,
        "geomean_speedup_vs": {
            lab: geomean([r["baselines"][lab]["speedup"] for r in rows if lab in r["baselines"]])
            for lab in labels
        },
        "geomean_speedup_vs_fastest_baseline": geomean(
            [r["speedup_vs_fastest_baseline"] for r in rows if r["fastest_baseline"]]
        ),
        "min_speedup_vs_fastest_baseline": min(
            r["speedup_vs_fastest_baseline"] for r in rows if r["fastest_baseline"]
        ),
        "groups": group_geomeans(kernel, rows),
        "geomean_speedup_vs_default": geomean([r["speedup_vs_default"] for r in rows]),
        "all_tuned_within_tolerance": all(
            r["tuned_max_rel_error_fresh_inputs"] <= r["tolerance"] for r in rows
        ),
        "portability_subset": subset,
        "portability": matrix,
        "max_portability_loss": max(
            (x for m in matrix for x in m["loss_vs_own_best"] if x is not None), default=None
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    add_job_args(parser, list(SUITES), trials=16)
    parser.add_argument(
        "--flash-grid",
        help="tune flash_attention over this grid of attention_sweep.py (e.g. issue-b1-8)",
    )
    parser.add_argument(
        "--moe-grid", help="tune fused_moe over this grid of moe_sweep.py (e.g. issue)"
    )
    args = parser.parse_args()
    if args.moe_grid:
        from moe_sweep import GRIDS as MOE_GRIDS  # this folder

        if args.moe_grid not in MOE_GRIDS:
            raise SystemExit(f"--moe-grid: one of {', '.join(MOE_GRIDS)}")
        SUITES["fused_moe"] = [
            ",".join(f"{k}={v}" for k, v in p.items()) for p in MOE_GRIDS[args.moe_grid]
        ]
        PORTABILITY["fused_moe"] = list(range(min(3, len(SUITES["fused_moe"]))))
    if args.flash_grid:
        from attention_sweep import GRIDS  # this folder

        if args.flash_grid not in GRIDS:
            raise SystemExit(f"--flash-grid: one of {', '.join(GRIDS)}")
        SUITES["flash_attention"] = list(GRIDS[args.flash_grid])
    if args.smoke:
        SUITES.update(SMOKE)
        PORTABILITY.update({k: [0, 1] for k in SMOKE})
    args.out_dir.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {}
    out_file = args.out_dir / "llm_kernels.json"
    for kernel in args.kernels:
        job, best = tune_suite(args, kernel, SUITES[kernel], args.out_dir / "llm_kernels.db")
        report[kernel] = {"tune": job, **measure(kernel, best)}
        out_file.write_text(json.dumps(report, indent=1, default=str))
        r = report[kernel]
        vs = ", ".join(f"{lab} {g:.3f}x" for lab, g in r["geomean_speedup_vs"].items())
        print(
            f"{kernel}: geomean vs the fastest vendor path {r['geomean_speedup_vs_fastest_baseline']:.3f}x "
            f"(min {r['min_speedup_vs_fastest_baseline']:.3f}); {vs}; vs default config "
            f"{r['geomean_speedup_vs_default']:.3f}x; worst portability loss "
            f"{r['max_portability_loss']}",
            flush=True,
        )
        for name, g in r["groups"].items():
            print(
                f"  {name}: geomean {g['geomean']:.3f}x, min {g['min']:.3f}x over "
                f"{g['problems']} problems",
                flush=True,
            )


if __name__ == "__main__":
    main()
