"""matmul and rmsnorm tuned by tunefleet against the vendor paths, one GPU run.

Usage (GPU machine, repo root):
    python benchmarks/kernels.py --out-dir DIR [--kernels matmul rmsnorm] [--trials 40]
        [--in-flight 12] [--best-db DB ...] [--only IDX ...] [--objective kernel|graph]
Per kernel: one `tunefleet tune` job over the shape suite (the product's sampler); the winners are
what `tunefleet pull` exports from its database (the deployment path; with --best-db or
--best-landscape, the fastest stored times over those and it instead, so that a problem's tuning
can be skipped and --only other indices tuned). Then in this process, on fresh random inputs, with
the objective's timer (kernel: the workers' timer, events, L2 flushed, warm-up, median of 25;
graph: launches back to back in a CUDA graph over rotating input sets, workers.timing.time_graph),
interleaved over ROUNDS rounds (every entry once per round, order rotated; median over rounds):
the tuned config, the spec's default config and the vendor paths — torch.matmul (cuBLAS) for
matmul; torch's rms_norm and torch.compile of it, and a device copy of the same x into out, for
rmsnorm; then the tuned config on fresh inputs against the spec's reference. Roofline ceilings are
measured in the same run: the device copy bandwidth (a 4 GiB device-to-device copy, bytes read +
written) and the bf16 GEMM rate (torch.matmul at 8192^3). Writes DIR/kernels.json; prints a table
per kernel.
"""

from __future__ import annotations

import argparse
import functools
import json
from collections.abc import Callable
from typing import Any

from _bench import (  # this folder (run as a script)
    add_job_args,
    ceilings,
    geomean,
    input_sets,
    interleaved_ms,
    local_target,
    tune_suite,
)

#: Rounds of the interleaved timing (each round times every entry once, order rotated).
ROUNDS = 3

#: Linear layers (N, K): qkv, o, gate+up, down.
LLAMA3_8B = ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336))
LLAMA3_70B = ((10240, 8192), (8192, 8192), (57344, 8192), (8192, 28672))
#: Mixtral 8x7B's attention linears are Llama-3-8B's; its experts' w1/w3 and w2 run unfused per
#: expert at the tokens an expert gets (M 64: decode-sized batches; 512: prefill).
MIXTRAL_EXPERTS = ((14336, 4096), (4096, 14336))
#: The matmul suite in groups (each group's geomean is reported on its own).
MATMUL_GROUPS: dict[str, list[str]] = {
    "llama-3-8b": [
        f"M={m},N={n},K={k},dtype=bfloat16" for m in (1, 16, 128, 1024, 4096) for n, k in LLAMA3_8B
    ],
    "llama-3-70b": [
        f"M={m},N={n},K={k},dtype=bfloat16" for m in (16, 256, 2048) for n, k in LLAMA3_70B
    ],
    "mixtral-experts": [
        f"M={m},N={n},K={k},dtype=bfloat16" for m in (64, 512) for n, k in MIXTRAL_EXPERTS
    ],
}
SUITES: dict[str, list[str]] = {
    "matmul": [text for group in MATMUL_GROUPS.values() for text in group],
    "rmsnorm": [
        f"M={m},N={n},dtype=bfloat16" for m in (1, 128, 4096, 16384) for n in (2048, 4096, 8192)
    ],
}
SMOKE: dict[str, list[str]] = {
    "matmul": ["M=16,N=64,K=64,dtype=float16", "M=32,N=32,K=64,dtype=float16"],
    "rmsnorm": ["M=4,N=256,dtype=float16", "M=8,N=512,dtype=float16"],
}


def matmul_baseline(inputs: dict[str, Any], problem: dict[str, Any]) -> Callable[[], Any]:
    import torch

    a, b, out = inputs["a"], inputs["b"], inputs["out"]
    return lambda: torch.matmul(a, b, out=out)


def rmsnorm_eager(inputs: dict[str, Any], problem: dict[str, Any]) -> Callable[[], Any]:
    import torch.nn.functional as F

    x, w = inputs["x"], inputs["weight"]
    return lambda: F.rms_norm(x, (x.shape[-1],), w, eps=1e-6)


#: torch.compile of rmsnorm for the problem being timed (one entry; key: the problem's JSON).
_COMPILED: dict[str, Any] = {}


def rmsnorm_compiled(inputs: dict[str, Any], problem: dict[str, Any]) -> Callable[[], Any]:
    import torch

    def rms(t: Any, weight: Any) -> Any:
        variance = t.float().pow(2).mean(-1, keepdim=True)
        return (t.float() * torch.rsqrt(variance + 1e-6) * weight.float()).to(t.dtype)

    key = json.dumps(problem, sort_keys=True)
    if key not in _COMPILED:
        # one shape per compile; else dynamo's recompile limit falls back to eager
        torch._dynamo.reset()
        _COMPILED.clear()
        _COMPILED[key] = torch.compile(rms, dynamic=False)
    compiled, x, w = _COMPILED[key], inputs["x"], inputs["weight"]
    return lambda: compiled(x, w)


def same_size_copy(inputs: dict[str, Any]) -> tuple[Callable[[], Any], float]:
    """A device copy of x into out (the rows an rmsnorm reads and writes) and its bytes moved."""
    x, out = inputs["x"], inputs["out"]
    return (lambda: out.copy_(x)), 2.0 * x.numel() * x.element_size()


#: Memory-bound kernels: also timed against a device copy of the same tensors in the same run.
SAME_SIZE_COPY = {"rmsnorm": same_size_copy}

BASELINES: dict[str, dict[str, Callable[[dict[str, Any], dict[str, Any]], Callable[[], Any]]]] = {
    "matmul": {"torch.matmul (cuBLAS)": matmul_baseline},
    "rmsnorm": {"torch rms_norm": rmsnorm_eager, "torch.compile": rmsnorm_compiled},
}


def measure_problem(
    kernel: str, problem: dict[str, Any], config: dict[str, Any], roof: dict[str, float],
    objective: str,
) -> dict[str, Any]:  # fmt: skip
    """One problem on fresh inputs: the tuned config, the default and the baselines (and a copy of
    the same tensors for memory-bound kernels), all by the objective's timer, interleaved over
    ROUNDS rounds; then the tuned config on fresh inputs against the spec's reference."""
    from search_spaces import get_spec
    from search_spaces.accuracy import max_rel_error

    spec = get_spec(kernel)
    limits, backend, device = local_target()
    sets = input_sets(spec, problem, device, objective)
    inputs = sets[0]
    spec.make_launcher(inputs, config)()
    tuned_out = inputs["out"].clone()
    makers: dict[str, Any] = {
        "tuned": lambda s: spec.make_launcher(s, config),
        "default": lambda s: spec.make_launcher(s, spec.default_for(limits)),
    }
    for label, make in BASELINES[kernel].items():
        makers[label] = functools.partial(make, problem=problem)
    copy = SAME_SIZE_COPY.get(kernel)
    if copy is not None:
        makers["same-size copy"] = lambda s: copy(s)[0]
    ms = interleaved_ms(sets, makers, backend, objective, ROUNDS)
    tuned_ms = ms["tuned"]
    fresh = spec.build_inputs(problem, device)
    fresh["out"].fill_(float("nan"))
    spec.make_launcher(fresh, config)()
    flops, nbytes = spec.flops(problem), spec.bytes_moved(problem)
    row: dict[str, Any] = {
        "problem": problem,
        "config": config,
        "tuned_ms": tuned_ms,
        "default_ms": ms["default"],
        "tuned_max_rel_error_fresh_inputs": max_rel_error(fresh["out"], spec.reference(fresh)),
        "tolerance": spec.tolerance(problem),
        "tflops": flops / tuned_ms / 1e9,
        "gbps": nbytes / tuned_ms / 1e6,
        "pct_of_roofline": 100
        * max(
            flops / tuned_ms / 1e9 / roof["gemm_tflops"],
            nbytes / tuned_ms / 1e6 / roof["copy_gbps"],
        ),
        "speedup_vs_default": ms["default"] / tuned_ms,
        "baselines": {},
    }
    for label, make in BASELINES[kernel].items():
        out = make(inputs, problem)()
        row["baselines"][label] = {
            "ms": ms[label],
            "tuned_speedup": ms[label] / tuned_ms,
            "max_rel_error_vs_tuned": max_rel_error(tuned_out, out.reshape(tuned_out.shape)),
        }
    if copy is not None:
        row["same_size_copy_ms"] = ms["same-size copy"]
        row["pct_of_same_size_copy"] = (
            100 * (nbytes / tuned_ms) / (copy(inputs)[1] / ms["same-size copy"])
        )
    return row


def measure(
    kernel: str, best: dict[str, dict[str, Any]], roof: dict[str, float], objective: str
) -> dict[str, Any]:
    from search_spaces import get_spec, problem_key

    spec = get_spec(kernel)
    rows = []
    for text in SUITES[kernel]:
        problem = spec.parse_problem(text)
        config = best.get(problem_key(problem))
        if config is None:
            print(f"  {text}: no stored winner; skipped", flush=True)
            continue
        rows.append(measure_problem(kernel, problem, config, roof, objective))
    labels = list(BASELINES[kernel])
    return {
        "rows": rows,
        "geomean_vs": {
            lab: geomean([r["baselines"][lab]["tuned_speedup"] for r in rows]) for lab in labels
        },
        "min_vs": {lab: min(r["baselines"][lab]["tuned_speedup"] for r in rows) for lab in labels},
        "max_vs": {lab: max(r["baselines"][lab]["tuned_speedup"] for r in rows) for lab in labels},
        "geomean_vs_default": geomean([r["speedup_vs_default"] for r in rows]),
        "groups": group_summary(kernel, rows, labels),
    }


def group_summary(
    kernel: str, rows: list[dict[str, Any]], labels: list[str]
) -> dict[str, dict[str, dict[str, float]]]:
    """Per suite group (matmul: MATMUL_GROUPS), each baseline's geomean and min tuned speedup."""
    if kernel != "matmul":
        return {}
    from search_spaces import get_spec, problem_key

    spec = get_spec(kernel)
    out: dict[str, dict[str, dict[str, float]]] = {}
    for group, texts in MATMUL_GROUPS.items():
        keys = {problem_key(spec.parse_problem(t)) for t in texts}
        mine = [r for r in rows if problem_key(r["problem"]) in keys]
        if mine:
            out[group] = {
                lab: {
                    "geomean": geomean([r["baselines"][lab]["tuned_speedup"] for r in mine]),
                    "min": min(r["baselines"][lab]["tuned_speedup"] for r in mine),
                    "problems": len(mine),
                }
                for lab in labels
            }
    return out


def stored_over_timed(job: dict[str, Any], rows: list[dict[str, Any]]) -> list[float]:
    """Per row, the tune job's stored best time over the tuned time measured here (1.0: agree)."""
    stored = {
        json.dumps(st["problem"], sort_keys=True): st["best"]["time_ms"]
        for st in job.get("studies", [])
        if st.get("best")
    }
    keys = [json.dumps(r["problem"], sort_keys=True) for r in rows]
    return [stored[k] / r["tuned_ms"] for k, r in zip(keys, rows, strict=True) if k in stored]


def main() -> None:
    from workers.device import detect

    parser = argparse.ArgumentParser()
    add_job_args(parser, list(SUITES), trials=40)
    parser.add_argument(
        "--objective",
        choices=("kernel", "graph"),
        default="kernel",
        help="tune and time by this objective (graph: launches back to back; needs a GPU)",
    )
    args = parser.parse_args()
    if args.objective == "graph" and args.best_landscape:
        raise SystemExit(
            "--best-landscape holds kernel-objective times; drop it for --objective graph"
        )
    if args.smoke:
        SUITES.update(SMOKE)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    roof = ceilings(detect("auto")[0].backend)
    print(
        f"measured ceilings: copy {roof['copy_gbps']:.0f} GB/s, bf16 GEMM "
        f"{roof['gemm_tflops']:.0f} TFLOP/s",
        flush=True,
    )
    report: dict[str, Any] = {"ceilings": roof, "objective": args.objective}
    for kernel in args.kernels:
        job, best = tune_suite(
            args, kernel, SUITES[kernel], args.out_dir / "kernels.db", args.objective
        )
        r = measure(kernel, best, roof, args.objective)
        report[kernel] = {"tune": job, **r}
        (args.out_dir / "kernels.json").write_text(json.dumps(report, indent=1, default=str))
        vs = ", ".join(
            f"{lab}: geomean {r['geomean_vs'][lab]:.3f}x ({r['min_vs'][lab]:.2f}-{r['max_vs'][lab]:.2f})"
            for lab in r["geomean_vs"]
        )
        print(
            f"{kernel} ({args.objective} objective): {vs}; vs default "
            f"{r['geomean_vs_default']:.3f}x",
            flush=True,
        )
        for group, by_label in r["groups"].items():
            for lab, g in by_label.items():
                print(
                    f"  {group}: {lab} geomean {g['geomean']:.3f}x, min {g['min']:.3f}x over "
                    f"{g['problems']} problems",
                    flush=True,
                )
        ratios = stored_over_timed(job, r["rows"]) if job else []
        if ratios:
            print(
                f"  the job's stored best times / tuned times here: {min(ratios):.2f}-"
                f"{max(ratios):.2f}",
                flush=True,
            )
        for row in r["rows"]:
            p = ",".join(f"{k}={v}" for k, v in row["problem"].items() if k != "dtype")
            base = "  ".join(f"{lab} {b['ms']:.4f}" for lab, b in row["baselines"].items())
            if "same_size_copy_ms" in row:
                base += (
                    f"  copy {row['same_size_copy_ms']:.4f} "
                    f"({row['pct_of_same_size_copy']:.0f}% of its GB/s)"
                )
            print(
                f"  {p:<24} tuned {row['tuned_ms']:.4f} ms {row['tflops']:7.1f} TFLOP/s "
                f"{row['gbps']:7.0f} GB/s {row['pct_of_roofline']:5.1f}% roof  {base}",
                flush=True,
            )


if __name__ == "__main__":
    main()
