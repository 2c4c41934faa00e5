"""Issue 5 benchmark: LLM kernels tuned by tunefleet against the torch paths users have, one run.

Usage (GPU machine, repo root):
    python benchmarks/llm_kernels.py --out-dir DIR [--kernels flash_attention paged_attention
        fused_moe] [--trials 16] [--in-flight 12]
Per kernel: one `python -m orchestrator tune JOB.json --json` job over the kernel's suite (local
Ray, one worker per GPU, compile pool, TPE), then, in this process and with the workers' timer
(CUDA events, L2 flushed before each rep, warm-up, median of 25): the tuned config, the spec's
default config and the torch baseline on fresh random inputs of each problem; and the portability
matrix (each problem's best config run on every other problem of a subset). Writes
DIR/llm_kernels.json; prints a table per kernel.

Baselines: flash_attention -> torch scaled_dot_product_attention with the flash backend only, on
the padded [batch, heads, seq, head_dim] view (the suite uses uniform lengths, so padding is
exact), GQA through enable_gqa; paged_attention -> gather of the pages through the block table
plus SDPA (torch picks the backend); fused_moe -> the torch per-expert loop in the inputs' dtype.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from _bench import (  # this folder (run as a script)
    add_job_args,
    geomean,
    local_target,
    time_tuned_and_default,
    timed,
    tune_suite,
)

SUITES: dict[str, list[str]] = {
    "flash_attention": [
        f"batch={b},max_seqlen={s},pattern=uniform,q_heads=32,kv_heads={kv},head_dim=128,"
        "causal=true,dtype=float16"
        for b in (1, 8, 32, 128)
        for s in (128, 512, 1024, 4096)
        for kv in (32, 8)
    ],
    "paged_attention": [
        f"batch={b},context_len={c},pattern=uniform,q_heads=32,kv_heads=8,head_dim=128,"
        "dtype=float16"
        for b in (1, 16, 64, 256)
        for c in (1024, 8192)
    ],
    "fused_moe": [
        f"M={m},E=8,topk=2,N=14336,K=4096,dtype=bfloat16" for m in (1, 16, 64, 256, 1024, 4096)
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
    "flash_attention": [0, 6, 8, 14, 16, 22, 24, 30],
    "paged_attention": list(range(8)),
    "fused_moe": list(range(6)),
}


def sdpa_baseline(inputs: dict[str, Any], problem: dict[str, Any]) -> Callable[[], Any]:
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    b, s = int(problem["batch"]), int(problem["max_seqlen"])
    hq, hkv, d = int(problem["q_heads"]), int(problem["kv_heads"]), int(problem["head_dim"])
    q = inputs["q"].view(b, s, hq, d).transpose(1, 2)
    k = inputs["k"].view(b, s, hkv, d).transpose(1, 2)
    v = inputs["v"].view(b, s, hkv, d).transpose(1, 2)

    backends = [SDPBackend.FLASH_ATTENTION] if q.is_cuda else [SDPBackend.MATH]

    def run() -> Any:
        with sdpa_kernel(backends):
            return F.scaled_dot_product_attention(
                q, k, v, is_causal=bool(problem["causal"]), enable_gqa=hq != hkv
            )

    return run


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


def moe_baseline(inputs: dict[str, Any], problem: dict[str, Any]) -> Callable[[], Any]:
    from search_spaces.kernels.fused_moe import per_expert_loop

    return lambda: per_expert_loop(inputs, str(problem["dtype"]))


BASELINES = {
    "flash_attention": ("torch SDPA (flash backend)", sdpa_baseline),
    "paged_attention": ("torch gather + SDPA", gather_sdpa_baseline),
    "fused_moe": ("torch per-expert loop", moe_baseline),
}


def measure(kernel: str, best: dict[str, dict[str, Any]]) -> dict[str, Any]:
    from search_spaces import get_spec, problem_key
    from search_spaces.accuracy import max_rel_error

    spec = get_spec(kernel)
    limits, backend, device = local_target()
    label, baseline = BASELINES[kernel]
    rows = []
    for text in SUITES[kernel]:
        problem = spec.parse_problem(text)
        config = best[problem_key(problem)]
        inputs, tuned_ms, tuned_out, default_ms = time_tuned_and_default(
            spec, problem, config, limits, backend, device
        )
        base_fn = baseline(inputs, problem)
        base_ms = timed(base_fn, backend)
        base_out = base_fn()
        agree = max_rel_error(
            tuned_out,
            base_out.transpose(1, 2).reshape(tuned_out.shape)
            if kernel == "flash_attention"
            else base_out.reshape(tuned_out.shape),
        )
        rows.append(
            {
                "problem": problem,
                "config": config,
                "tuned_ms": tuned_ms,
                "default_ms": default_ms,
                "baseline_ms": base_ms,
                "speedup_vs_baseline": base_ms / tuned_ms,
                "speedup_vs_default": default_ms / tuned_ms,
                "tuned_vs_baseline_max_rel_error": agree,
                "tflops": spec.flops(problem) / tuned_ms / 1e9,
                "gbps": spec.bytes_moved(problem) / tuned_ms / 1e6,
            }
        )
        del inputs, base_fn, base_out, tuned_out
    subset = [SUITES[kernel][i] for i in PORTABILITY[kernel]]
    matrix = []
    for target in subset:
        problem = spec.parse_problem(target)
        inputs = spec.build_inputs(problem, device)
        times = []
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
    speedups = [r["speedup_vs_baseline"] for r in rows]
    return {
        "baseline": label,
        "rows": rows,
        "geomean_speedup_vs_baseline": geomean(speedups),
        "min_speedup_vs_baseline": min(speedups),
        "max_speedup_vs_baseline": max(speedups),
        "geomean_speedup_vs_default": geomean([r["speedup_vs_default"] for r in rows]),
        "portability_subset": subset,
        "portability": matrix,
        "max_portability_loss": max(
            (x for m in matrix for x in m["loss_vs_own_best"] if x is not None), default=None
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    add_job_args(parser, list(SUITES), trials=16)
    args = parser.parse_args()
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
        print(
            f"{kernel} vs {r['baseline']}: geomean {r['geomean_speedup_vs_baseline']:.3f}x "
            f"(min {r['min_speedup_vs_baseline']:.3f}, max {r['max_speedup_vs_baseline']:.3f}); "
            f"vs default config geomean {r['geomean_speedup_vs_default']:.3f}x; "
            f"worst portability loss {r['max_portability_loss']}",
            flush=True,
        )
        for row in r["rows"]:
            p = ",".join(f"{k}={v}" for k, v in row["problem"].items() if k not in ("dtype",))
            print(
                f"  {p:<70} tuned {row['tuned_ms']:.4f} ms  base {row['baseline_ms']:.4f} "
                f"default {row['default_ms']:.4f}  x{row['speedup_vs_baseline']:.2f}  "
                f"err {row['tuned_vs_baseline_max_rel_error']:.1e}",
                flush=True,
            )


if __name__ == "__main__":
    main()
