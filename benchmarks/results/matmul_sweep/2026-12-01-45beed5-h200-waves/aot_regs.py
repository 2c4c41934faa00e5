"""Compile the matmul spec's tiled and stream-K pointer kernels ahead of time for sm_90a (no GPU) and print ptxas's register/spill report and the pipelined shared-memory buffers.

Usage (repo root, triton 3.6.0 -- the device's version -- on PYTHONPATH):
    PYTHONPATH=/tmp/t36:$PWD python3 benchmarks/results/matmul_sweep/2026-12-01-45beed5-h200-waves/aot_regs.py BM BN BK WARPS STAGES
"""

import re
import sys

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from search_spaces.kernels import _matmul_kernels as mk

tgt = GPUTarget("cuda", 90, 32)


def comp(fn, signature, constexprs, warps, stages, tag):
    names = list(signature)
    attrs = {
        (i,): [["tt.divisibility", 16]]
        for i, n in enumerate(names)
        if signature[n] != "constexpr"
        and n not in ("PROGRAMS",)
        and not signature[n].startswith("tensordesc")
    }
    src = ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    k = triton.compile(src, target=tgt, options={"num_warps": warps, "num_stages": stages})
    ttgir = k.asm["ttgir"]
    allocs = re.findall(r"ttg.local_alloc.*?!ttg.memdesc<([0-9x]+)", ttgir)
    import os
    import subprocess

    with open("/tmp/aot_k.ptx", "w") as fh:
        fh.write(k.asm["ptx"])
    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/ptxas")
    arch = "sm_90a"
    r = subprocess.run(
        [ptxas, "-v", "--gpu-name", arch, "/tmp/aot_k.ptx", "-o", "/tmp/aot_k.cubin"],
        capture_output=True,
        text=True,
    )
    info = " ".join(
        line.split("info    : ")[-1]
        for line in r.stderr.splitlines()
        if "Used" in line or "spill" in line
    )
    print(
        tag,
        info,
        "smem",
        k.metadata.shared,
        "allocs",
        allocs[:6],
        "wgmma",
        k.asm["ptx"].count("wgmma.mma_async"),
        "cp.async.bulk",
        k.asm["ptx"].count("cp.async.bulk.tensor"),
    )
    return k


def sig_ptr(names_ptr, names_int):
    s = {n: "*bf16" for n in names_ptr}
    return s


BM, BN, BK = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
W = int(sys.argv[4])
S = int(sys.argv[5])
# tiled pointer kernel
sig = {
    "a_ptr": "*bf16",
    "b_ptr": "*bf16",
    "c_ptr": "*bf16",
    "ws_ptr": "*fp32",
    "arrivals_ptr": "*i32",
    "M": "i32",
    "N": "i32",
    "K": "i32",
    "stride_am": "i32",
    "stride_ak": "constexpr",
    "stride_bk": "i32",
    "stride_bn": "constexpr",
    "stride_cm": "i32",
    "stride_cn": "constexpr",
    "stride_ws": "i32",
    "BLOCK_M": "constexpr",
    "BLOCK_N": "constexpr",
    "BLOCK_K": "constexpr",
    "GROUP_M": "constexpr",
    "SPLIT_K": "constexpr",
    "FUSED_REDUCE": "constexpr",
    "DOT_IN_FP32": "constexpr",
}
ce = {
    "stride_ak": 1,
    "stride_bn": 1,
    "stride_cn": 1,
    "BLOCK_M": BM,
    "BLOCK_N": BN,
    "BLOCK_K": BK,
    "GROUP_M": 1,
    "SPLIT_K": 1,
    "FUSED_REDUCE": False,
    "DOT_IN_FP32": False,
}
comp(mk.matmul_kernel, sig, ce, W, S, "tiled")
sig2 = dict(sig)
del sig2["stride_ws"]
del sig2["SPLIT_K"]
del sig2["FUSED_REDUCE"]
sig2["PROGRAMS"] = "i32"
sig2["TMA"] = "constexpr"
sig2 = {
    k: sig2[k]
    for k in [
        "a_ptr",
        "b_ptr",
        "c_ptr",
        "ws_ptr",
        "arrivals_ptr",
        "M",
        "N",
        "K",
        "stride_am",
        "stride_ak",
        "stride_bk",
        "stride_bn",
        "stride_cm",
        "stride_cn",
        "PROGRAMS",
        "BLOCK_M",
        "BLOCK_N",
        "BLOCK_K",
        "GROUP_M",
        "TMA",
        "DOT_IN_FP32",
    ]
}
ce2 = {
    "stride_ak": 1,
    "stride_bn": 1,
    "stride_cn": 1,
    "BLOCK_M": BM,
    "BLOCK_N": BN,
    "BLOCK_K": BK,
    "GROUP_M": 1,
    "TMA": False,
    "DOT_IN_FP32": False,
}
k = comp(mk.matmul_streamk_kernel, sig2, ce2, W, S, "streamk")
