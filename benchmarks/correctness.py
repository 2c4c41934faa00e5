"""Correctness of every built-in kernel on a real GPU over problem grids (issues 2 and 5).

Usage (GPU machine, repo root): python benchmarks/correctness.py [--kernels K ...] [--configs N]
    [--out FILE]
For each problem: the spec's default config plus N configs drawn at random (seeded) from the
valid space, each run through the real TrialRunner (fresh random inputs, output poisoned with NaN,
checked against the higher-precision reference twice, then timed briefly). A `wrong` outcome is a
bug; `invalid` (out of resources) is allowed. Prints a table per kernel; writes JSON to --out.
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import time

GRIDS: dict[str, list[str]] = {
    "matmul": [
        f"M={m},N={n},K={k},dtype={d}"
        for m in (1, 16, 100, 1024)
        for (n, k) in ((4096, 4096), (6144, 4096), (4096, 14336))
        for d in ("bfloat16",)
    ]
    + ["M=333,N=1000,K=700,dtype=float16", "M=512,N=512,K=512,dtype=float32"],
    "rmsnorm": [
        f"M={m},N={n},dtype={d}"
        for m in (1, 64, 4096)
        for n in (2048, 4096, 8192)
        for d in ("bfloat16",)
    ]
    + ["M=77,N=5000,dtype=float16", "M=33,N=4096,dtype=float32"],
    "flash_attention": [
        f"batch={b},max_seqlen={s},pattern={p},q_heads=32,kv_heads={kv},head_dim={hd},"
        f"causal={c},dtype={d}"
        for (b, s) in ((1, 128), (8, 512), (4, 1024), (1, 4096))
        for kv in (32, 8)
        for (p, c, hd, d) in (
            ("uniform", "true", 128, "float16"),
            ("mixed", "true", 128, "float16"),
            ("mixed", "false", 64, "bfloat16"),
        )
    ],
    "paged_attention": [
        f"batch={b},context_len={c},pattern={p},q_heads=32,kv_heads={kv},head_dim=128,dtype={d}"
        for (b, c) in ((1, 128), (16, 2048), (64, 4096), (4, 32768), (256, 1024))
        for kv in (8, 32)
        for (p, d) in (("uniform", "float16"), ("mixed", "bfloat16"))
    ],
    "fused_moe": [f"M={m},E=8,topk=2,N=14336,K=4096,dtype=bfloat16" for m in (1, 16, 64, 256, 1024)]
    + ["M=37,E=5,topk=3,N=320,K=200,dtype=float16"],
}


def main() -> None:
    from search_spaces import config_key, get_spec
    from workers.device import detect
    from workers.runner import RunnerOptions, TrialRequest, TrialRunner

    parser = argparse.ArgumentParser()
    parser.add_argument("--kernels", nargs="*", default=list(GRIDS))
    parser.add_argument("--configs", type=int, default=3, help="random valid configs per problem")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    fingerprint = detect("auto")[0]
    limits = fingerprint.limits()
    rng = random.Random(args.seed)
    options = RunnerOptions.for_backend(fingerprint.backend, warmup=1, reps=3)
    rows = []
    with TrialRunner(options) as runner:
        for name in args.kernels:
            spec = get_spec(name)
            valid = spec.space.enumerate(limits)
            counts: collections.Counter[str] = collections.Counter()
            t0 = time.perf_counter()
            for text in GRIDS[name]:
                problem = spec.parse_problem(text)
                configs = [spec.default_for(limits), *rng.sample(valid, args.configs)]
                for config in configs:
                    m = runner.run(TrialRequest(kernel=name, problem=problem, config=config))
                    counts[m.outcome.value] += 1
                    rows.append(
                        {
                            "kernel": name,
                            "problem": problem,
                            "config": config_key(config),
                            "outcome": m.outcome.value,
                            "max_rel_error": m.max_rel_error,
                            "error": m.error,
                        }
                    )
                    if m.outcome.value not in ("ok", "invalid"):
                        print(f"  {name} {text} {config_key(config)}: {m.outcome.value} {m.error}")
            worst = max(
                (r["max_rel_error"] for r in rows if r["kernel"] == name and r["outcome"] == "ok"),
                default=None,
            )
            print(
                f"{name:<16} problems={len(GRIDS[name]):3d} trials={sum(counts.values()):4d} "
                f"{dict(counts)} worst_ok_err={worst} {time.perf_counter() - t0:.0f}s",
                flush=True,
            )
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"device": fingerprint.to_dict(), "rows": rows}, fh, indent=1, default=str)


if __name__ == "__main__":
    main()
