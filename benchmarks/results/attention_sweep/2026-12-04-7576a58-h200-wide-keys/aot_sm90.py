"""Compile the spec's GLUON kernel ahead of time for sm_90a (no GPU) with Triton 3.6.0, the device's version, and
print ptxas's register/spill report and the shared memory per config.

Usage (repo root): PYTHONPATH=/tmp/t36:$PWD python3 benchmarks/results/attention_sweep/2026-12-04-7576a58-h200-wide-keys/aot_sm90.py
(/tmp/t36: pip install --no-deps --target /tmp/t36 triton==3.6.0)
"""

import os
import subprocess
import tempfile
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon import language as gl
from triton.experimental.gluon._runtime import GluonASTSource

from search_spaces.kernels import _flash_attention_gluon as g

tgt = GPUTarget("cuda", 90, 32)


def lay(rows, d, dt):
    return repr(
        gl.NVMMASharedLayout.get_default_for(
            [rows, d], {"fp16": gl.float16, "bf16": gl.bfloat16}[dt]
        )
    )


for d, bn, st, ov, causal, dt, pers in [
    (128, 256, 1, False, False, "fp16", False),
    (128, 256, 1, False, True, "bf16", True),
    (64, 256, 2, False, False, "fp16", False),
    (64, 256, 3, False, False, "fp16", False),
    (64, 256, 2, True, False, "fp16", False),
    (64, 256, 3, False, False, "bf16", True),
]:
    sig = {
        "q_desc": f"tensordesc<{dt}[64, {d}],{lay(64, d, dt)}>",
        "k_desc": f"tensordesc<{dt}[{bn}, {d}],{lay(bn, d, dt)}>",
        "v_desc": f"tensordesc<{dt}[{bn}, {d}],{lay(bn, d, dt)}>",
        "out_ptr": f"*{dt}",
        "cu_seqlens_ptr": "*i32",
        "stride_ot": "i32",
        "stride_oh": "i32",
        "qk_scale": "fp32",
        "n_m": "i32",
        "n_heads": "i32",
        "batch": "i32",
        "GROUP": "constexpr",
        "HEAD_DIM": "constexpr",
        "BLOCK_N": "constexpr",
        "STAGES": "constexpr",
        "CAUSAL": "constexpr",
        "OVERLAP": "constexpr",
        "PERSISTENT": "constexpr",
    }
    names = list(sig)
    cons = {
        (names.index(k),): v
        for k, v in dict(
            GROUP=4,
            HEAD_DIM=d,
            BLOCK_N=bn,
            STAGES=st,
            CAUSAL=causal,
            OVERLAP=ov,
            PERSISTENT=pers,
        ).items()
    }
    src = GluonASTSource(fn=g.flash_attention_gluon_kernel, signature=sig, constexprs=cons)
    try:
        k = triton.compile(src, target=tgt, options={"num_warps": 4})
    except Exception as e:
        print(d, bn, st, ov, causal, dt, pers, "FAIL", type(e).__name__, str(e)[:1500])
        continue
    ptx = k.asm["ptx"]
    ptx_file = Path(tempfile.mkdtemp()) / "k.ptx"
    ptx_file.write_text(ptx)
    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/ptxas")
    r = subprocess.run(
        [
            ptxas,
            "-v",
            "--gpu-name",
            "sm_90a",
            str(ptx_file),
            "-o",
            str(ptx_file.with_suffix(".cubin")),
        ],
        capture_output=True,
        text=True,
    )
    info = " ".join(
        line.split("info    : ")[-1]
        for line in r.stderr.splitlines()
        if "Used" in line or "spill" in line
    )
    print(
        d,
        bn,
        st,
        ov,
        causal,
        dt,
        pers,
        "ok smem",
        k.metadata.shared,
        "wgmma",
        ptx.count("wgmma.mma_async"),
        info[:200],
    )
