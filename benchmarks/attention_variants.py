# mypy: disallow-untyped-defs=False
"""Candidate flash-attention forward variants at head_dim 128 against every SDPA backend, one GPU.

Usage (GPU machine, repo root): python benchmarks/attention_variants.py --out FILE.json
A prototype bench: the variants are constexpr flags of a copy of the spec's kernel (TMA path
only), so a winner can be folded back into ``search_spaces.kernels._flash_attention_kernels``:
``EXP16`` exponentiates the scores in packed half precision (``ex2.approx.f16x2`` / ``bf16x2``),
giving P in the dot's dtype directly; ``LAZY`` rescales the accumulator only when some row's
maximum grew by more than 2**8 (a block-uniform branch; P then stays below 2**8); ``SPLIT`` runs
the row block as two halves that share each K/V tile, both q k^T products issued before either
half's softmax. Each variant is checked against float32 attention on fresh inputs (output
poisoned with NaN first), then all are timed with the spec's own launcher configs and SDPA's
cuDNN, flash and efficient backends, interleaved (do_bench medians, rotated order).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).parent))
from _sweep import add_runnable, geomean, interleaved, medians  # this folder
from _vendor import BACKENDS, packed_sdpa

#: Largest growth (log2 units) of a row maximum that LAZY leaves unrescaled.
LAZY_THRESHOLD = 8.0


@triton.jit
def _exp2_to(x, dtype: tl.constexpr, EXP16: tl.constexpr):
    """2**x as ``dtype``: in fp32 then rounded, or (EXP16) rounded first, then the packed
    half-precision exponential."""
    if EXP16:
        if dtype == tl.float16:
            y = tl.inline_asm_elementwise(
                "{ .reg .b32 t; cvt.rn.f16x2.f32 t, $2, $1; ex2.approx.f16x2 $0, t; }",
                "=r,r,r",
                [x],
                dtype=tl.float16,
                is_pure=True,
                pack=2,
            )
        else:
            y = tl.inline_asm_elementwise(
                "{ .reg .b32 t; cvt.rn.bf16x2.f32 t, $2, $1; ex2.approx.ftz.bf16x2 $0, t; }",
                "=r,r,r",
                [x],
                dtype=tl.bfloat16,
                is_pure=True,
                pack=2,
            )
    else:
        y = tl.math.exp2(x).to(dtype)
    return y


@triton.jit
def _softmax_pv(acc, l_i, m_i, qk, v, offs_m, cols, seq_len, qk_scale,
                MASKED: tl.constexpr, CAUSAL: tl.constexpr, EXP16: tl.constexpr,
                LAZY: tl.constexpr):  # fmt: skip
    if MASKED:
        keep = (cols < seq_len)[None, :]
        if CAUSAL:
            keep = keep & (cols[None, :] <= offs_m[:, None])
        qk = tl.where(keep, qk, float("-inf"))
    m_blk = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
    if LAZY:
        if tl.max(m_blk - m_i, 0) > 8.0:
            alpha = tl.math.exp2(m_i - m_blk)
            acc = acc * alpha[:, None]
            l_i = l_i * alpha
            m_i = m_blk
        p = _exp2_to(qk * qk_scale - m_i[:, None], v.dtype, EXP16)
        l_i = l_i + tl.sum(p.to(tl.float32), 1)
        acc = tl.dot(p, v, acc)
        return acc, l_i, m_i
    else:
        p = _exp2_to(qk * qk_scale - m_blk[:, None], v.dtype, EXP16)
        alpha = tl.math.exp2(m_i - m_blk)
        l_i = l_i * alpha + tl.sum(p.to(tl.float32), 1)
        acc = acc * alpha[:, None]
        acc = tl.dot(p, v, acc)
        return acc, l_i, m_blk


@triton.jit
def variant_fwd_kernel(
    q_src, k_src, v_src, out_ptr, cu_seqlens_ptr, stride_ot, stride_oh, qk_scale,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, EXP16: tl.constexpr, LAZY: tl.constexpr, SPLIT: tl.constexpr,
):  # fmt: skip
    """The spec kernel's TMA path (uniform or packed lengths), with the three flags above.
    With SPLIT the q descriptor's blocks are BLOCK_M // 2 rows."""
    pid_m = tl.program_id(0)
    head = tl.program_id(1)
    seq = tl.program_id(2)
    seq_start = tl.load(cu_seqlens_ptr + seq)
    seq_len = tl.load(cu_seqlens_ptr + seq + 1) - seq_start
    start_m = pid_m * BLOCK_M
    if start_m >= seq_len:
        return
    kv_col0 = (head // GROUP) * HEAD_DIM
    HALF: tl.constexpr = BLOCK_M // 2
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    full_end = (seq_len // BLOCK_N) * BLOCK_N
    if CAUSAL:
        unmasked_end = tl.minimum(start_m // BLOCK_N * BLOCK_N, full_end)
        hi = tl.minimum(seq_len, start_m + BLOCK_M)
    else:
        unmasked_end = full_end
        hi = seq_len
    if SPLIT:
        offs_m0 = start_m + tl.arange(0, HALF)
        offs_m1 = start_m + HALF + tl.arange(0, HALF)
        q0 = q_src.load([seq_start + start_m, head * HEAD_DIM])
        q1 = q_src.load([seq_start + start_m + HALF, head * HEAD_DIM])
        m0 = tl.full((HALF,), float("-inf"), dtype=tl.float32)
        m1 = tl.full((HALF,), float("-inf"), dtype=tl.float32)
        l0 = tl.zeros((HALF,), dtype=tl.float32)
        l1 = tl.zeros((HALF,), dtype=tl.float32)
        acc0 = tl.zeros((HALF, HEAD_DIM), dtype=tl.float32)
        acc1 = tl.zeros((HALF, HEAD_DIM), dtype=tl.float32)
        for start_n in tl.range(0, unmasked_end, BLOCK_N):
            k = k_src.load([seq_start + start_n, kv_col0]).T
            v = v_src.load([seq_start + start_n, kv_col0])
            cols = start_n + offs_n
            qk0 = tl.dot(q0, k)
            qk1 = tl.dot(q1, k)
            acc0, l0, m0 = _softmax_pv(acc0, l0, m0, qk0, v, offs_m0, cols, seq_len, qk_scale,
                                       False, CAUSAL, EXP16, LAZY)  # fmt: skip
            acc1, l1, m1 = _softmax_pv(acc1, l1, m1, qk1, v, offs_m1, cols, seq_len, qk_scale,
                                       False, CAUSAL, EXP16, LAZY)  # fmt: skip
        for start_n in range(unmasked_end, hi, BLOCK_N):
            k = k_src.load([seq_start + start_n, kv_col0]).T
            v = v_src.load([seq_start + start_n, kv_col0])
            cols = start_n + offs_n
            qk0 = tl.dot(q0, k)
            qk1 = tl.dot(q1, k)
            acc0, l0, m0 = _softmax_pv(acc0, l0, m0, qk0, v, offs_m0, cols, seq_len, qk_scale,
                                       True, CAUSAL, EXP16, LAZY)  # fmt: skip
            acc1, l1, m1 = _softmax_pv(acc1, l1, m1, qk1, v, offs_m1, cols, seq_len, qk_scale,
                                       True, CAUSAL, EXP16, LAZY)  # fmt: skip
        tok0 = (seq_start + offs_m0).to(tl.int64)
        tok1 = (seq_start + offs_m1).to(tl.int64)
        o0 = out_ptr + tok0[:, None] * stride_ot + head * stride_oh + offs_d[None, :]
        o1 = out_ptr + tok1[:, None] * stride_ot + head * stride_oh + offs_d[None, :]
        tl.store(o0, (acc0 / l0[:, None]).to(out_ptr.dtype.element_ty),
                 mask=(offs_m0 < seq_len)[:, None])  # fmt: skip
        tl.store(o1, (acc1 / l1[:, None]).to(out_ptr.dtype.element_ty),
                 mask=(offs_m1 < seq_len)[:, None])  # fmt: skip
    else:
        offs_m = start_m + tl.arange(0, BLOCK_M)
        q = q_src.load([seq_start + start_m, head * HEAD_DIM])
        m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
        l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
        acc = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32)
        for start_n in tl.range(0, unmasked_end, BLOCK_N):
            k = k_src.load([seq_start + start_n, kv_col0]).T
            qk = tl.dot(q, k)
            v = v_src.load([seq_start + start_n, kv_col0])
            acc, l_i, m_i = _softmax_pv(acc, l_i, m_i, qk, v, offs_m, start_n + offs_n, seq_len,
                                        qk_scale, False, CAUSAL, EXP16, LAZY)  # fmt: skip
        for start_n in range(unmasked_end, hi, BLOCK_N):
            k = k_src.load([seq_start + start_n, kv_col0]).T
            qk = tl.dot(q, k)
            v = v_src.load([seq_start + start_n, kv_col0])
            acc, l_i, m_i = _softmax_pv(acc, l_i, m_i, qk, v, offs_m, start_n + offs_n, seq_len,
                                        qk_scale, True, CAUSAL, EXP16, LAZY)  # fmt: skip
        tok = (seq_start + offs_m).to(tl.int64)
        o_ptrs = out_ptr + tok[:, None] * stride_ot + head * stride_oh + offs_d[None, :]
        tl.store(o_ptrs, (acc / l_i[:, None]).to(out_ptr.dtype.element_ty),
                 mask=(offs_m < seq_len)[:, None])  # fmt: skip


def variant_launcher(inputs: dict[str, Any], v: dict[str, Any]) -> Any:
    from triton.tools.tensor_descriptor import TensorDescriptor

    q, k, vv, out, cu = inputs["q"], inputs["k"], inputs["v"], inputs["out"], inputs["cu_seqlens"]
    _, qh, d = q.shape
    kvh = k.shape[1]
    bm, bn = v["BLOCK_M"], v["BLOCK_N"]
    qrows = bm // 2 if v["SPLIT"] else bm
    lens = (cu[1:] - cu[:-1]).cpu()
    grid = (triton.cdiv(int(lens.max()), bm), qh, len(lens))

    def desc(t: Any, rows: int) -> Any:
        n, h, dd = t.shape
        return TensorDescriptor(t, [n, h * dd], [h * dd, 1], [rows, dd])

    srcs = (desc(q, qrows), desc(k, bn), desc(vv, bn))
    args = {
        "GROUP": qh // kvh,
        "HEAD_DIM": d,
        "BLOCK_M": bm,
        "BLOCK_N": bn,
        "CAUSAL": bool(inputs["causal"]),
        "EXP16": v["EXP16"],
        "LAZY": v["LAZY"],
        "SPLIT": v["SPLIT"],
        "num_warps": v["num_warps"],
        "num_stages": v["num_stages"],
    }
    scale = math.log2(math.e) / math.sqrt(d)

    def launch() -> Any:
        return variant_fwd_kernel[grid](*srcs, out, cu, out.stride(0), out.stride(1), scale, **args)

    return launch


def _v(bm, bn, w, s, exp16=False, lazy=False, split=False) -> dict[str, Any]:
    return {"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": w, "num_stages": s,
            "EXP16": exp16, "LAZY": lazy, "SPLIT": split}  # fmt: skip


VARIANTS = [
    _v(64, 64, 4, 3),  # the spec's sm_90 default, re-expressed
    _v(64, 64, 4, 3, exp16=True),
    _v(64, 64, 4, 3, lazy=True),
    _v(64, 64, 4, 3, exp16=True, lazy=True),
    _v(128, 64, 8, 2, exp16=True),
    _v(128, 128, 8, 2, exp16=True),
    _v(128, 128, 8, 2, exp16=True, lazy=True),
    _v(128, 64, 4, 2, split=True),
    _v(128, 64, 4, 2, exp16=True, split=True),
    _v(128, 64, 4, 2, exp16=True, lazy=True, split=True),
    _v(256, 64, 8, 2, exp16=True, split=True),
    _v(128, 128, 8, 2),
]
#: The spec's own configs timed through its launcher (the sm_90 default and the 128x128 tile).
SPEC_CONFIGS = [
    {"BLOCK_M": 64, "BLOCK_N": 64, "PRE_LOAD_V": False, "num_warps": 4, "num_stages": 3,
     "TMA": True, "HEAVY_FIRST": False, "WARP_SPECIALIZE": False},
]  # fmt: skip

PROBLEMS = [
    "batch=8,max_seqlen=4096,pattern=uniform,q_heads=32,kv_heads=8,head_dim=128,causal=false,dtype=float16",
    "batch=32,max_seqlen=512,pattern=uniform,q_heads=32,kv_heads=8,head_dim=128,causal=false,dtype=float16",
    "batch=1,max_seqlen=8192,pattern=uniform,q_heads=32,kv_heads=8,head_dim=128,causal=true,dtype=bfloat16",
    "batch=8,max_seqlen=1024,pattern=uniform,q_heads=32,kv_heads=8,head_dim=128,causal=true,dtype=bfloat16",
]


def _label(v: dict[str, Any]) -> str:
    flags = [f for f in ("EXP16", "LAZY", "SPLIT") if v[f]]
    return f"{v['BLOCK_M']}x{v['BLOCK_N']} w{v['num_warps']} s{v['num_stages']} " + "+".join(flags)


def main() -> None:
    import torch

    from search_spaces import get_spec
    from search_spaces.accuracy import max_rel_error

    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    spec = get_spec("flash_attention")
    rows = []
    start = time.perf_counter()
    for text in PROBLEMS:
        problem = spec.parse_problem(text)
        inputs = spec.build_inputs(problem, "cuda")
        ref = spec.reference(inputs)
        entries: dict[str, Any] = {}
        errors: dict[str, str] = {}
        for i, v in enumerate(VARIANTS):
            name = f"v{i}"
            try:
                launch = variant_launcher(inputs, v)
                inputs["out"].fill_(float("nan"))
                compiled = launch()
                torch.cuda.synchronize()
                err = max_rel_error(inputs["out"], ref)
                regs = f" regs {compiled.n_regs} spills {compiled.n_spills}"
            except Exception as exc:  # a variant that does not compile is reported, not fatal
                errors[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                continue
            errors[name] = f"{err:.2e}{regs}"
            if err < 2e-2:
                entries[name] = launch
        for i, c in enumerate(SPEC_CONFIGS):
            entries[f"spec{i}"] = spec.make_launcher(inputs, c)
        add_runnable(entries, {b: packed_sdpa(inputs, problem, b) for b in BACKENDS})
        med = medians(interleaved(entries, args.rounds))
        fastest = min((b for b in BACKENDS if b in med), key=med.__getitem__)
        row = {"problem": text, "ms": med, "errors": errors, "fastest_backend": fastest,
               "tflops": {n: spec.flops(problem) / t / 1e9 for n, t in med.items()}}  # fmt: skip
        rows.append(row)
        print(text.replace("pattern=uniform,", ""), flush=True)
        for n in sorted(med, key=med.__getitem__):
            lab = _label(VARIANTS[int(n[1:])]) if n.startswith("v") else n
            print(f"  {n:<7} {lab:<32} {med[n]:.4f} ms {row['tflops'][n]:5.0f} TF/s "
                  f"x{med[fastest] / med[n]:.3f} vs {fastest[:5]}  err {errors.get(n, '')}")  # fmt: skip
        bad = {n: e for n, e in errors.items() if n not in med}
        if bad:
            print("  not timed:", bad)
        del inputs, ref, entries
        torch.cuda.empty_cache()
        args.out.write_text(json.dumps({"variants": VARIANTS, "rows": rows}, indent=1))
    names = [f"v{i}" for i in range(len(VARIANTS))] + [f"spec{i}" for i in range(len(SPEC_CONFIGS))]
    print(
        f"\ngeomean vs fastest SDPA over {len(rows)} problems ({time.perf_counter() - start:.0f} s):"
    )
    for n in names:
        vals = [r["ms"][r["fastest_backend"]] / r["ms"][n] for r in rows if n in r["ms"]]
        lab = _label(VARIANTS[int(n[1:])]) if n.startswith("v") else "spec " + n
        if vals:
            print(f"  {n:<7} {lab:<32} x{geomean(vals):.3f} ({len(vals)} problems)")


if __name__ == "__main__":
    main()
