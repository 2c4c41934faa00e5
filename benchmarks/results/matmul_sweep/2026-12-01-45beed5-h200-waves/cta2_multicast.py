"""Does num_ctas=2 (a thread-block cluster of two) give the tiled TMA matmul kernel multicast TMA
loads on sm_90 with Triton 3.6? Compiles it ahead of time (no GPU) and counts PTX markers.

Usage (repo root):
    PYTHONPATH=/tmp/t36:$PWD python3 benchmarks/results/matmul_sweep/2026-12-01-45beed5-h200-waves/cta2_multicast.py
"""

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from search_spaces.kernels import _matmul_kernels as mk

SIG = {
    "a_desc": "tensordesc<bf16[128, 64]>",
    "b_desc": "tensordesc<bf16[64, 256]>",
    "c_ptr": "*bf16",
    "ws_ptr": "*fp32",
    "arrivals_ptr": "*i32",
    "M": "i32",
    "N": "i32",
    "K": "i32",
    "stride_cm": "i32",
    "stride_cn": "constexpr",
    "stride_ws": "i32",
    **{p: "constexpr" for p in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "SPLIT_K")},
    "FUSED_REDUCE": "constexpr",
    "DOT_IN_FP32": "constexpr",
}
CONST = {"stride_cn": 1, "BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8,
         "SPLIT_K": 1, "FUSED_REDUCE": False, "DOT_IN_FP32": False}  # fmt: skip
for ctas in (1, 2):
    src = ASTSource(fn=mk.matmul_tma_kernel, signature=SIG, constexprs=CONST)
    options = {"num_warps": 8, "num_stages": 4, "num_ctas": ctas}
    ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options).asm["ptx"]
    print(f"num_ctas={ctas}: 'multicast' {ptx.count('multicast')}, 'cluster' "
          f"{ptx.count('cluster')}, cp.async.bulk.tensor {ptx.count('cp.async.bulk.tensor')}")  # fmt: skip
