"""Compile the spec's GLUON kernel with GLUON_PINGPONG ahead of time for sm_90a (no GPU) with
Triton 3.6.0, the device's version: ptxas's registers and spills, the shared memory, and the
barrier instructions of the PTX (the ping-pong's named ones take their ids in registers).

Usage (repo root): PYTHONPATH=/tmp/t36:$PWD python3 benchmarks/results/attention_sweep/2026-12-04-c93fd3e-h200-pingpong-all/aot_sm90.py
(/tmp/t36: pip install --no-deps --target /tmp/t36 triton==3.6.0)
"""

import os
import re
import subprocess
import tempfile
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon import language as gl
from triton.experimental.gluon._runtime import GluonASTSource

from search_spaces.kernels import _flash_attention_gluon as g

ARGS = ("q_desc", "k_desc", "v_desc", "out_ptr", "cu_seqlens_ptr", "stride_ot", "stride_oh",
        "qk_scale", "n_m", "n_heads", "batch")  # fmt: skip
CONSTEXPRS = ("GROUP", "HEAD_DIM", "BLOCK_N", "STAGES", "CAUSAL", "OVERLAP", "PERSISTENT",
              "PINGPONG")  # fmt: skip


def descriptor(rows: int, d: int, dt: str) -> str:
    layout = gl.NVMMASharedLayout.get_default_for(
        [rows, d], {"fp16": gl.float16, "bf16": gl.bfloat16}[dt]
    )
    return f"tensordesc<{dt}[{rows}, {d}],{layout!r}>"


for d, bn, stages, causal, dt, persistent, pingpong in [
    (128, 128, 3, False, "fp16", False, False),
    (128, 128, 3, False, "fp16", False, True),
    (128, 128, 3, True, "bf16", True, True),
    (64, 64, 4, False, "fp16", False, True),
]:
    types = [descriptor(64, d, dt), descriptor(bn, d, dt), descriptor(bn, d, dt), f"*{dt}", "*i32",
             "i32", "i32", "fp32", "i32", "i32", "i32"]  # fmt: skip
    sig = {**dict(zip(ARGS, types, strict=True)), **dict.fromkeys(CONSTEXPRS, "constexpr")}
    values = (4, d, bn, stages, causal, True, persistent, pingpong)
    names = list(sig)
    cons = {(names.index(k),): v for k, v in zip(CONSTEXPRS, values, strict=True)}
    src = GluonASTSource(fn=g.flash_attention_gluon_kernel, signature=sig, constexprs=cons)
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    ptx = Path(tempfile.mkdtemp()) / "k.ptx"
    ptx.write_text(k.asm["ptx"])
    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/ptxas")
    cmd = [ptxas, "-v", "--gpu-name", "sm_90a", str(ptx), "-o", str(ptx.with_suffix(".cubin"))]
    err = subprocess.run(cmd, capture_output=True, text=True).stderr
    info = " ".join(
        line.split("info    : ")[-1]
        for line in err.splitlines()
        if "Used" in line or "spill" in line
    )
    bars = sorted(
        set(
            re.sub(r"%r\d+", "%r", b)
            for b in re.findall(r"\bbar\.(?:sync|arrive)[^;]*", k.asm["ptx"])
        )
    )
    print(f"d={d} {bn}-key ring {stages} overlap causal={causal} {dt} persistent={persistent} "
          f"pingpong={pingpong}: smem {k.metadata.shared} | {info} | {bars}")  # fmt: skip
