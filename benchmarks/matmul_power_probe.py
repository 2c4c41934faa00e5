"""Where the time of a split 128x256 tile goes at M=256 (one GPU process; run from the repo root).

Times, interleaved over 3 rounds (triton.testing.do_bench medians, L2 flushed by do_bench): the
spec's launcher for each case, the split-K main kernel alone (partials written, no reduction), and
cuBLAS; cases with the same work per program (128x256 tiles, 64 K steps of 64) at 64, 128 programs;
then the SM clock and power (NVML) sampled while each 128x256 case runs back to back for ~1.5 s.
Usage (repo root): PYTHONPATH=$PWD python3 benchmarks/matmul_power_probe.py OUT.json
(TRITON_INTERPRET=1 on CPU: tiny sizes, no NVML; recorded on the H200:
benchmarks/results/matmul_sweep/2026-12-01-15272c0-h200-rate/)
"""

import json
import os
import sys
import threading
import time

import torch
import triton

from search_spaces import get_spec
from search_spaces.kernels._common import tensor_descriptor
from search_spaces.kernels._matmul_kernels import matmul_tma_kernel
from search_spaces.spec import split_launch_options

CPU = os.environ.get("TRITON_INTERPRET") == "1"
DEV = "cpu" if CPU else "cuda"
spec = get_spec("matmul")


def cfg(bm, bn, bk, w, s, split=1, group=8):
    return {
        "BLOCK_M": bm,
        "BLOCK_N": bn,
        "BLOCK_K": bk,
        "GROUP_M": 1 if split > 1 else group,
        "SPLIT_K": split,
        "FUSED_REDUCE": False,
        "num_warps": w,
        "num_stages": s,
        "TMA": True,
        "PERSISTENT": False,
        "STREAM_K": False,
    }


def main_only(inputs, config):
    """The split-K TMA kernel alone: partials to the workspace, no reduction."""
    a, b, out = inputs["a"], inputs["b"], inputs["out"]
    m, k = a.shape
    n = b.shape[1]
    meta, options = split_launch_options(config)
    for p in ("TMA", "PERSISTENT", "STREAM_K", "FUSED_REDUCE"):
        meta.pop(p, None)
    bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
    td = tensor_descriptor()
    da, db = td.from_tensor(a, [bm, bk]), td.from_tensor(b, [bk, bn])
    split = config["SPLIT_K"]
    ws = torch.empty(split, m, n, dtype=torch.float32, device=a.device)
    tiles = triton.cdiv(m, bm) * triton.cdiv(n, bn)
    kw = {
        **meta,
        **options,
        "FUSED_REDUCE": False,
        "DOT_IN_FP32": CPU and a.dtype == torch.bfloat16,
    }
    args = (da, db, out, ws, out, m, n, k, *out.stride(), m * n)
    return lambda: matmul_tma_kernel[(tiles, split)](*args, **kw)


if CPU:
    S = {"A": (32, 64, 128), "B": (64, 64, 64), "C": (32, 128, 64), "D": (32, 32, 128)}
    T = (16, 32, 32, 2, 2)
else:
    S = {
        "A": (256, 8192, 8192),
        "B": (512, 8192, 4096),
        "C": (256, 16384, 4096),
        "D": (256, 4096, 8192),
    }
    T = (128, 256, 64, 8, 4)
cases = [  # (name, shape, config, main-only)
    ("A 128x256 split1 (64 programs x 128 steps)", "A", cfg(*T), False),
    ("A 128x256 split2 two-kernel (128 x 64)", "A", cfg(*T, split=2), False),
    ("A 128x256 split2 main kernel only (128 x 64)", "A", cfg(*T, split=2), True),
    ("A 64x256 split1 (128 x 128)", "A", cfg(T[0] // 2, T[1], T[2], 4, T[4]), False),
    ("B 128x256 split1 (128 x 64)", "B", cfg(*T), False),
    ("C 128x256 split1 (128 x 64)", "C", cfg(*T), False),
    ("D 128x256 split1 (32 x 128)", "D", cfg(*T), False),
    ("D 128x256 split2 main kernel only (64 x 64)", "D", cfg(*T, split=2), True),
]
inputs = {}
for key, (m, n, k) in S.items():
    inputs[key] = spec.build_inputs({"M": m, "N": n, "K": k, "dtype": "bfloat16"}, DEV)
fns = {}
for name, key, c, only in cases:
    fns[name] = main_only(inputs[key], c) if only else spec.make_launcher(inputs[key], c)
for key in S:
    a, b, out = inputs[key]["a"], inputs[key]["b"], inputs[key]["out"]
    fns[f"{key} cuBLAS"] = lambda a=a, b=b, out=out: torch.matmul(a, b, out=out)
for f in fns.values():
    f()
# correctness of the full launchers on these inputs
errs = {}
for name, key, _c, only in cases:
    if not only:
        fns[name]()
        ref = spec.reference(inputs[key])
        errs[name] = float((inputs[key]["out"].float() - ref.float()).abs().max() / ref.abs().max())
times = {n: [] for n in fns}
for r in range(1 if CPU else 3):
    order = list(fns)[r % len(fns) :] + list(fns)[: r % len(fns)]
    for n in order:
        if CPU:
            t0 = time.perf_counter()
            fns[n]()
            times[n].append((time.perf_counter() - t0) * 1e3)
        else:
            times[n].append(
                triton.testing.do_bench(fns[n], warmup=25, rep=100, return_mode="median")
            )
med = {n: sorted(v)[len(v) // 2] for n, v in times.items()}
clocks = {}
if not CPU:
    import pynvml

    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    for name in [c[0] for c in cases if not c[3]] + ["A cuBLAS"]:
        f = fns[name]
        reps = max(1, int(1500 / med[name]))
        s, stop = [], threading.Event()

        def sample(s=s, stop=stop):
            t0 = time.perf_counter()
            while not stop.is_set():
                if time.perf_counter() - t0 > 0.3:
                    s.append(
                        (
                            pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                            pynvml.nvmlDeviceGetPowerUsage(h) / 1000,
                        )
                    )
                time.sleep(0.05)

        th = threading.Thread(target=sample)
        th.start()
        for _ in range(reps):
            f()
        torch.cuda.synchronize()
        stop.set()
        th.join()
        clocks[name] = {
            "samples": len(s),
            "sm_mhz_median": sorted(x[0] for x in s)[len(s) // 2] if s else None,
            "power_w_median": sorted(x[1] for x in s)[len(s) // 2] if s else None,
        }
with open(sys.argv[1], "w") as fh:
    json.dump({"shapes": S, "median_ms": med, "rel_err": errs, "clocks": clocks}, fh, indent=1)
for n in fns:
    c = clocks.get(n, {})
    print(
        f"{n:<50} {med[n] * 1e3:8.1f} us  err {errs.get(n, float('nan')):.1e}  "
        f"SM {c.get('sm_mhz_median')} MHz  {c.get('power_w_median')} W"
    )
