"""Served (drop-in, from the bundle) configs against triton.autotune's own pick, and host time
per launch of the drop-in and of a captured kernel against plain triton.autotune's cached path.

Run with APP_BUNDLE=<bundle dir> (so tutorial_kernels uses the drop-in) and the output path:
    APP_BUNDLE=bundles python3 compare.py results.json
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import triton
import triton.testing
from app import MATMULS, NORMS
from triton.runtime.autotuner import Autotuner
from tutorial_kernels import (
    LAYER_NORM_CONFIGS,
    MATMUL_CONFIGS,
    copy_kernel,
    layer_norm,
    layer_norm_kernel,
    matmul,
    matmul_kernel,
)

from search_spaces.bundle_env import current_environment
from search_spaces.triton_autotune import autotune
from search_spaces.triton_capture import CaptureWriter, kernel_source, patch_autotuner, source_hash

ROUNDS = 5


def _cfg(config: Any) -> dict[str, Any]:
    return {**config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages}


def _time_pair(launch_a: Any, launch_b: Any) -> tuple[float, float]:
    """Median over interleaved rounds of do_bench's median (ms) for each launcher."""
    a, b = [], []
    for _ in range(ROUNDS):
        a.append(triton.testing.do_bench(launch_a, warmup=10, rep=40, return_mode="median"))
        b.append(triton.testing.do_bench(launch_b, warmup=10, rep=40, return_mode="median"))
    return statistics.median(a), statistics.median(b)


def served_vs_pick() -> list[dict[str, Any]]:
    rows = []
    plain_mm = triton.autotune(configs=MATMUL_CONFIGS, key=["M", "N", "K"])(matmul_kernel.fn)
    plain_ln = triton.autotune(configs=LAYER_NORM_CONFIGS, key=["N"])(layer_norm_kernel.fn)
    for m, n, k in MATMULS:
        a = torch.randn(m, k, device="cuda", dtype=torch.float16)
        b = torch.randn(k, n, device="cuda", dtype=torch.float16)
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
                "served_benchmarked": hasattr(matmul_kernel, "configs_timings"),
                "rel_error": err,
            }
        )
    for rows_, cols in NORMS:
        x = torch.randn(rows_, cols, device="cuda", dtype=torch.float16)
        w = torch.randn(cols, device="cuda", dtype=torch.float16)
        bias = torch.randn(cols, device="cuda", dtype=torch.float16)
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
                "served_benchmarked": hasattr(layer_norm_kernel, "configs_timings"),
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
        "device_class": " ".join(torch.cuda.get_device_name().split()),
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
    captured = CapturedAutotuner(fn, fn.arg_names, configs, ["n"], None, None)
    x = torch.randn(n, device="cuda")
    y = torch.empty_like(x)
    kernels = {"triton.autotune": copy_kernel, "drop-in (served)": served, "captured": captured}
    for k in kernels.values():
        k[(4,)](x, y, n)
    torch.cuda.synchronize()
    assert not hasattr(served, "configs_timings"), "the drop-in benchmarked a bundled key"
    per: dict[str, list[float]] = {name: [] for name in kernels}
    for _ in range(15):
        for name, k in kernels.items():
            start = time.perf_counter()
            for _ in range(2000):
                k[(4,)](x, y, n)
            torch.cuda.synchronize()
            per[name].append((time.perf_counter() - start) / 2000 * 1e6)
    return {name: statistics.median(v) for name, v in per.items()}


def main() -> None:
    out = Path(sys.argv[1])
    rows = served_vs_pick()
    with tempfile.TemporaryDirectory() as tmp:
        overhead = launch_overhead(Path(tmp))
    out.write_text(json.dumps({"served_vs_pick": rows, "host_us_per_launch": overhead}, indent=1))
    print(
        f"{'kernel':<11} {'key':<22} {'served ms':>10} {'pick ms':>9} {'pick/served':>11}  served config"
    )
    for r in rows:
        print(
            f"{r['kernel']:<11} {r['key']:<22} {r['served_ms']:>10.4f} {r['pick_ms']:>9.4f} "
            f"{r['pick_ms'] / r['served_ms']:>11.3f}  {r['served']}"
        )
    base = overhead["triton.autotune"]
    for name, us in overhead.items():
        print(f"host per launch {name:<18} {us:7.2f} us  ({us - base:+.2f} us vs triton.autotune)")


if __name__ == "__main__":
    main()
