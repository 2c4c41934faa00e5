"""Served (drop-in, from the bundle) configs against triton.autotune's own pick, and host time
per launch of the drop-in and of a captured kernel against plain triton.autotune's cached path.

Everything in one process, interleaved: per key, do_bench medians of the served config and of
triton.autotune's pick, alternating over rounds (the ratio is pick / served); host µs per launch
of real launches (a tiny copy kernel, launches queued then one sync) and of no-op launches
(``host_overhead.measure``: Autotuner.run alone). ``compare.json`` is rewritten after each part.

Run with APP_BUNDLE=<bundle dir> (so tutorial_kernels uses the drop-in) and the output path:
    APP_BUNDLE=bundles python3 compare.py results.json
With APP_DEVICE=cpu and TRITON_INTERPRET=1 it runs on the interpreter at small shapes and few
rounds: the CPU dry run (its times mean nothing).
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import host_overhead
import torch
import triton
import triton.testing
from app import DEVICE, MATMULS, NORMS, synchronize
from triton.runtime.autotuner import Autotuner
from tutorial_kernels import (
    BENCH,
    LAYER_NORM_CONFIGS,
    MATMUL_CONFIGS,
    copy_kernel,
    layer_norm,
    layer_norm_kernel,
    matmul,
    matmul_kernel,
)

from search_spaces.bundle_env import current_environment
from search_spaces.triton_autotune import _device_class, autotune
from search_spaces.triton_capture import CaptureWriter, kernel_source, patch_autotuner, source_hash

GPU = DEVICE == "cuda"
ROUNDS = 5 if GPU else 1
#: Real launches per round and rounds of the host-overhead part; then no-op launches and rounds.
LAUNCH_OVERHEAD = (2000, 15) if GPU else (3, 1)
NOOP_OVERHEAD = (20000, 30) if GPU else (200, 2)


def _cfg(config: Any) -> dict[str, Any]:
    return {**config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages}


def _time_pair(launch_a: Any, launch_b: Any) -> tuple[float, float]:
    """Median over interleaved rounds of do_bench's median (ms) for each launcher."""
    a, b = [], []
    for _ in range(ROUNDS):
        a.append(_bench(launch_a))
        b.append(_bench(launch_b))
    return statistics.median(a), statistics.median(b)


def _bench(launch: Any) -> float:
    if GPU:
        return float(triton.testing.do_bench(launch, warmup=10, rep=40, return_mode="median"))
    start = time.perf_counter()  # the interpreter: one call, only to run the code path
    launch()
    return (time.perf_counter() - start) * 1e3


def served_vs_pick() -> list[dict[str, Any]]:
    rows = []
    plain_mm = triton.autotune(configs=MATMUL_CONFIGS, key=["M", "N", "K"], **BENCH)(
        matmul_kernel.fn
    )
    plain_ln = triton.autotune(configs=LAYER_NORM_CONFIGS, key=["N"], **BENCH)(layer_norm_kernel.fn)
    for m, n, k in MATMULS:
        a = torch.randn(m, k, device=DEVICE, dtype=torch.float16)
        b = torch.randn(k, n, device=DEVICE, dtype=torch.float16)
        ref = (a.double() @ b.double()).float()
        out = matmul(a, b)  # served: no benchmarking
        err = ((out.float() - ref).norm() / ref.norm()).item()
        matmul(a, b, kernel=plain_mm)  # triton.autotune benchmarks its list here
        key = (m, n, k, "torch.float16", "torch.float16", "torch.float16")
        served, pick = matmul_kernel.cache[key], plain_mm.cache[key]
        c = a.new_empty((m, n))

        def run(config: Any, a=a, b=b, c=c, m=m, n=n, k=k) -> Any:
            grid = (
                triton.cdiv(m, config.kwargs["BLOCK_M"]) * triton.cdiv(n, config.kwargs["BLOCK_N"]),
            )
            return lambda: matmul_kernel.fn[grid](
                a,
                b,
                c,
                m,
                n,
                k,
                a.stride(0),
                a.stride(1),
                b.stride(0),
                b.stride(1),
                c.stride(0),
                c.stride(1),
                **config.all_kwargs(),
            )

        t_served, t_pick = _time_pair(run(served), run(pick))
        rows.append(
            {
                "kernel": "matmul",
                "key": f"M={m},N={n},K={k}",
                "served": _cfg(served),
                "triton_pick": _cfg(pick),
                "served_ms": t_served,
                "pick_ms": t_pick,
                "served_configs_timed": matmul_kernel.timed,
                "rel_error": err,
            }
        )
    for rows_, cols in NORMS:
        x = torch.randn(rows_, cols, device=DEVICE, dtype=torch.float16)
        w = torch.randn(cols, device=DEVICE, dtype=torch.float16)
        bias = torch.randn(cols, device=DEVICE, dtype=torch.float16)
        ref = torch.nn.functional.layer_norm(x.double(), (cols,), w.double(), bias.double()).float()
        out = layer_norm(x, w, bias)
        err = ((out.float() - ref).norm() / ref.norm()).item()
        layer_norm(x, w, bias, kernel=plain_ln)
        key = (cols, "torch.float16", "torch.float16", "torch.float16", "torch.float16")
        served, pick = layer_norm_kernel.cache[key], plain_ln.cache[key]
        y = x.new_empty(x.shape)

        def run_ln(config: Any, x=x, w=w, bias=bias, y=y, cols=cols) -> Any:
            return lambda: layer_norm_kernel.fn[(x.shape[0],)](
                x, y, w, bias, x.stride(0), cols, 1e-5, **config.all_kwargs()
            )

        t_served, t_pick = _time_pair(run_ln(served), run_ln(pick))
        rows.append(
            {
                "kernel": "layer_norm",
                "key": f"rows={rows_},N={cols}",
                "served": _cfg(served),
                "triton_pick": _cfg(pick),
                "served_ms": t_served,
                "pick_ms": t_pick,
                "served_configs_timed": layer_norm_kernel.timed,
                "rel_error": err,
            }
        )
    return rows


def launch_overhead(tmp: Path) -> dict[str, float]:
    """Host µs per launch (2000 launches of a tiny copy, then one sync), medians of interleaved
    rounds: plain triton.autotune, the drop-in serving the key, and triton.autotune captured."""
    fn = copy_kernel.fn
    configs = copy_kernel.configs
    n = 1024
    bundle = {
        "format": "tunefleet-bundle/1",
        "kernel": "tutorial_kernels.copy_kernel",
        "kernel_version": source_hash(kernel_source(copy_kernel.base_fn))[:8] + "00000000",
        "device_class": _device_class(),
        "environment": current_environment(),
        "default": {"BLOCK": 128, "num_warps": 4, "num_stages": 3},
        "entries": [
            {
                "problem": {"n": n, "dtypes": "float32,float32"},
                "config": {"BLOCK": 256, "num_warps": 4, "num_stages": 3},
            }
        ],
    }
    (tmp / "b").mkdir()
    (tmp / "b" / "copy.json").write_text(json.dumps(bundle))
    served = autotune(configs=configs, key=["n"], bundle=tmp / "b")(fn)

    class CapturedAutotuner(Autotuner):  # type: ignore[misc]
        pass

    patch_autotuner(CapturedAutotuner, CaptureWriter(tmp / "cap"))
    captured = CapturedAutotuner(fn, fn.arg_names, configs, ["n"], None, None, **BENCH)
    x = torch.randn(n, device=DEVICE)
    y = torch.empty_like(x)
    kernels = {"triton.autotune": copy_kernel, "drop-in (served)": served, "captured": captured}
    for k in kernels.values():
        k[(4,)](x, y, n)
    synchronize()
    assert served.timed == 0, "the drop-in timed a config of a bundled key"
    launches, rounds = LAUNCH_OVERHEAD
    per: dict[str, list[float]] = {name: [] for name in kernels}
    names = list(kernels)
    for i in range(rounds):
        for name in names[i % 3 :] + names[: i % 3]:  # rotate who goes first
            k = kernels[name]
            start = time.perf_counter()
            for _ in range(launches):
                k[(4,)](x, y, n)
            synchronize()
            per[name].append((time.perf_counter() - start) / launches * 1e6)
    return {name: statistics.median(v) for name, v in per.items()}


def main() -> None:
    out = Path(sys.argv[1])
    found: dict[str, Any] = {"device": _device_class(), "triton": triton.__version__}
    found["served_vs_pick"] = rows = served_vs_pick()
    out.write_text(json.dumps(found, indent=1))
    print(
        f"{'kernel':<11} {'key':<22} {'served ms':>10} {'pick ms':>9} {'pick/served':>11}  served"
    )
    for r in rows:
        print(
            f"{r['kernel']:<11} {r['key']:<22} {r['served_ms']:>10.4f} {r['pick_ms']:>9.4f} "
            f"{r['pick_ms'] / r['served_ms']:>11.3f}  {r['served']} (pick {r['triton_pick']})"
        )
    with tempfile.TemporaryDirectory() as tmp:
        found["host_us_per_launch"] = overhead = launch_overhead(Path(tmp))
    out.write_text(json.dumps(found, indent=1))
    base = overhead["triton.autotune"]
    for name, us in overhead.items():
        print(f"real launch {name:<18} {us:7.2f} us  ({us - base:+.2f} us vs triton.autotune)")
    found["host_us_per_noop_launch"] = noop = host_overhead.measure(*NOOP_OVERHEAD)
    out.write_text(json.dumps(found, indent=1))
    print("no-op launch (Autotuner.run alone):")
    host_overhead.report(noop)


if __name__ == "__main__":
    main()
