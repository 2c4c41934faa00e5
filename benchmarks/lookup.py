"""Config selection at deployment: tunefleet's bundle lookup against triton.autotune's cached path.

Usage: python benchmarks/lookup.py [--calls 200000] [--json]
Both sides run on the CPU and exclude the kernel launch itself:
- tunefleet: ``Bundle.lookup(problem)`` on a bundle of 20 tuned matmul problems, for an exact key,
  a problem answered by the nearest entry (cached after its first call), and the first (uncached)
  nearest-entry search.
- triton.autotune: ``Autotuner.run`` with its cache already holding the key (the path every call
  after the first takes: build the key from the arguments and their dtypes, look it up, merge the
  config's kwargs), with the wrapped kernel's ``run`` replaced by a no-op so that only the selection
  is timed. Arguments are CPU tensors.
Prints microseconds per call (median of 5 repeats).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from typing import Any


def per_call_us(fn: Callable[[], Any], calls: int) -> float:
    runs = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        runs.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(runs)


def bundle_doc() -> dict[str, Any]:
    entries = [
        {
            "problem": {"M": m, "N": n, "K": 4096, "dtype": "bfloat16"},
            "config": {
                "BLOCK_M": 128,
                "BLOCK_N": 128,
                "BLOCK_K": 64,
                "GROUP_M": 8,
                "SPLIT_K": 1,
                "num_warps": 8,
                "num_stages": 3,
            },
            "time_ms": 0.1,
            "job": 1,
        }
        for m in (1, 16, 128, 1024, 4096)
        for n in (4096, 6144, 14336, 28672)
    ]
    return {
        "format": "tunefleet-bundle/1",
        "kernel": "matmul",
        "kernel_version": "bench",
        "device_class": "NVIDIA H200",
        "triton_minor": "3.6",
        "environment": {},
        "default": entries[0]["config"],
        "entries": entries,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from search_spaces.bundle import bundle_from_dict

    bundle = bundle_from_dict(bundle_doc())
    exact = {"M": 1024, "N": 4096, "K": 4096, "dtype": "bfloat16"}
    near = {"M": 1000, "N": 4096, "K": 4096, "dtype": "bfloat16"}
    results = {
        "tunefleet_exact_us": per_call_us(lambda: bundle.lookup(exact), args.calls),
        "tunefleet_nearest_cached_us": per_call_us(lambda: bundle.lookup(near), args.calls),
    }
    cold = [{"M": m, "N": 5000, "K": 4096, "dtype": "bfloat16"} for m in range(2, 2002)]
    start = time.perf_counter()
    for p in cold:
        bundle.lookup(p)
    results["tunefleet_nearest_first_call_us"] = (time.perf_counter() - start) / len(cold) * 1e6

    os.environ.setdefault("TRITON_INTERPRET", "1")
    import torch
    import triton
    import triton.language as tl

    configs = [triton.Config({"BLOCK": b}, num_warps=w) for b in (64, 128) for w in (4, 8)]

    @triton.autotune(configs=configs, key=["M", "N", "K"])
    @triton.jit
    def kernel(a, b, c, M, N, K, BLOCK: tl.constexpr):
        pass

    class NoLaunch:
        """Stands in for the JIT function so only the autotuner's selection is timed."""

        def run(self, *a: Any, **k: Any) -> None:
            return None

    kernel.fn = NoLaunch()
    a = torch.empty(8, dtype=torch.bfloat16)
    key = (1024, 4096, 4096, "torch.bfloat16", "torch.bfloat16", "torch.bfloat16")
    kernel.cache[key] = configs[0]
    kernel.run(a, a, a, 1024, 4096, 4096, grid=(1,))
    if list(kernel.cache) != [key]:
        raise SystemExit(f"autotuner built another key than expected: {list(kernel.cache)}")
    results["triton_autotune_cached_us"] = per_call_us(
        lambda: kernel.run(a, a, a, 1024, 4096, 4096, grid=(1,)), args.calls
    )
    results["triton_version"] = triton.__version__
    if args.json:
        print(json.dumps(results, indent=1))
        return
    for name, value in results.items():
        print(f"{name:<36} {value:.3f}" if isinstance(value, float) else f"{name:<36} {value}")


if __name__ == "__main__":
    main()
