"""Compile the patched matmul_tma_kernel ahead of time for sm_90a (no GPU) with Triton 3.6.0 and print,
per case BMxBNxBKxSTAGESxSPLITxFUSEDxWARPSxWS, whether Triton made a warp-specialized kernel (a
ttg.warp_specialize op), ptxas's registers and spills, shared memory and the warps that run.

Usage (repo root, warp_specialize.patch applied; /tmp/t36: pip install --no-deps --target /tmp/t36
triton==3.6.0): PYTHONPATH=/tmp/t36:$PWD python3 benchmarks/results/matmul_sweep/2026-12-04-bb06ace-h200-warp-specialize/aot_sm90.py 128x256x64x3x1x0x4x1 ...
aot_sm90_tiles.txt: BLOCK_M 64/128/256 x BLOCK_N 16-256 x BLOCK_K 32/64/128, 3 stages, 4 warps, WS.
"""

import re
import subprocess
import sys
import tempfile
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from search_spaces.kernels import _matmul_kernels as mk

tgt = GPUTarget("cuda", 90, 32)
cases = [tuple(map(int, c.split("x"))) for c in sys.argv[1:]]
for bm, bn, bk, st, split, fused, nw, ws in cases:
    sig = {
        "a_desc": f"tensordesc<bf16[{bm}, {bk}]>",
        "b_desc": f"tensordesc<bf16[{bk}, {bn}]>",
        "c_ptr": "*bf16",
        "ws_ptr": "*fp32",
        "arrivals_ptr": "*i32",
        "M": "i32",
        "N": "i32",
        "K": "i32",
        "stride_cm": "i32",
        "stride_cn": "i32",
        "stride_ws": "i32",
    }
    cons = dict(
        BLOCK_M=bm,
        BLOCK_N=bn,
        BLOCK_K=bk,
        GROUP_M=1,
        SPLIT_K=split,
        FUSED_REDUCE=bool(fused),
        DOT_IN_FP32=False,
        PDL=False,
        WARP_SPECIALIZE=bool(ws),
    )
    for k in cons:
        sig[k] = "constexpr"
    names = list(sig)
    c = {(names.index(k),): v for k, v in cons.items()}
    tag = f"{bm}x{bn}x{bk} s{st} split{split}{'F' if fused else ''} w{nw} {'WS' if ws else '--'}"
    try:
        kk = triton.compile(
            ASTSource(fn=mk.matmul_tma_kernel, signature=sig, constexprs=c),
            target=tgt,
            options={"num_warps": nw, "num_stages": st},
        )
    except Exception as e:
        print(tag, "FAIL", type(e).__name__, str(e).splitlines()[-1][:200])
        continue
    p = Path(tempfile.mkdtemp()) / "k.ptx"
    p.write_text(kk.asm["ptx"])
    r = subprocess.run(
        [
            "/tmp/t36/triton/backends/nvidia/bin/ptxas",
            "-arch=sm_90a",
            "-v",
            str(p),
            "-o",
            "/dev/null",
        ],
        capture_output=True,
        text=True,
    )
    regs = re.findall(r"Used (\d+) registers", r.stderr)
    spill = re.findall(r"(\d+) bytes spill stores", r.stderr)
    print(
        tag,
        "ws_op",
        "ttg.warp_specialize(" in kk.asm["ttgir"],
        "regs",
        regs,
        "spill",
        spill,
        "smem",
        kk.metadata.shared,
        "warps",
        kk.metadata.num_warps,
        flush=True,
    )
