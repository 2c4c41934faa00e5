# mypy: disallow-untyped-defs=False
"""Gluon (triton.experimental.gluon) Hopper flash-attention forward variants against the spec
kernel and every SDPA backend, one GPU.

Usage (Hopper GPU machine, repo root, Triton 3.6):
    python benchmarks/attention_gluon.py --out FILE.json [--rounds 3] [--problems subset|grid|quick]

A prototype bench, not a spec kernel. One Gluon kernel, ``gluon_attn_fwd``, over the spec's inputs
(packed q [tokens, q_heads, d], k and v [tokens, kv_heads, d], cu_seqlens; GQA; causal or not;
fp16/bf16; d 64 or 128), read through TMA descriptors over the packed [tokens, heads * d] views.
Its constexprs make the variants, so the table shows what each step buys:

* ``MODE`` 0: no warp specialization; the compute warps issue the K/V TMA loads themselves into a
  ``STAGES``-deep shared ring (one mbarrier per slot for K and one for V), refilling a slot once
  the P @ V wgmma that read it has been waited for. ``MODE`` 1: a 1-warp producer partition
  (``gl.warp_specialize``, 24 registers) feeds the ring; the consumer (the default partition,
  ``num_warps`` warps, BLOCK_M = 16 * num_warps rows) releases each slot through an "empty"
  mbarrier. ``MODE`` 2: ping-pong-style, two 4-warp consumer partitions of 64 rows each (the
  default partition and one worker) share one 128-row block's K/V ring fed by the producer warp.
* ``OVERLAP``: intra-warpgroup pipelining (as in FlashAttention-3): q k^T of tile j is issued
  asynchronously, then P(j-1) @ V(j-1), then the softmax of tile j runs while P @ V is on the
  tensor cores (``warpgroup_mma_wait(1)``). Without it each wgmma is waited for at once.
* ``SCHED`` (``MODE`` 2 only): FlashAttention-3's inter-warpgroup ping-pong schedule. The two
  consumer partitions issue their GEMMs strictly in turn through two mbarriers in shared memory
  (``turn_bars``, one per partition, count 1): a partition waits on its own barrier, issues its
  q k^T (and, with OVERLAP, the previous tile's P @ V), then arrives on the other's barrier, so
  one partition's softmax runs while the other's GEMMs hold the tensor cores. Partition 0's
  barrier starts primed (its first wait is on parity 1, which a fresh barrier passes). With
  causal masking the lower partition skips key tiles wholly above its 64 rows (one 64-key tile
  per block) and then passes its skipped turns in the same wait-then-arrive alternation, so the
  upper partition never waits on an arrive that does not come and no barrier runs two phases
  ahead of its waiter.

Every variant is checked against the spec's float32 reference on the problem's fresh random
inputs (output poisoned with NaN first; max |err| / max |ref| < 2e-2 like attention_variants.py),
then all are timed with the spec's own launcher (sm_90 default and SPLIT_M 128x64 w4 s2 TMA) and
SDPA's cuDNN, flash and efficient backends, interleaved (do_bench medians, rotated order). Causal
problems launch the row blocks heaviest first.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

# The spec's GLUON kernel holds the kept layout; its producer and softmax step serve every variant.
from search_spaces.kernels._flash_attention_gluon import _fill_ring, _softmax

sys.path.insert(0, str(Path(__file__).parent))
from _sweep import add_runnable, geomean, interleaved, medians  # this folder
from _vendor import BACKENDS, packed_sdpa

#: Largest max |out - ref| / max |ref| a variant may show and still be timed.
TOLERANCE = 2e-2


@gluon.jit
def _load_kv(k_desc, v_desc, k_smem, v_smem, k_ready, v_ready, j, kv_row0, kv_col,
             BLOCK_N: gl.constexpr, STAGES: gl.constexpr):  # fmt: skip
    """TMA loads of key/value tile ``j`` into ring slot j % STAGES."""
    s = j % STAGES
    row = kv_row0 + j * BLOCK_N
    mbarrier.expect(k_ready.index(s), k_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(k_desc, [row, kv_col], k_ready.index(s), k_smem.index(s))
    mbarrier.expect(v_ready.index(s), v_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(v_desc, [row, kv_col], v_ready.index(s), v_smem.index(s))


@gluon.jit
def _release(j, n_tiles, k_desc, v_desc, k_smem, v_smem, k_ready, v_ready, kv_empty, kv_row0,
             kv_col, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, INLINE: gl.constexpr,
             SYNC: gl.constexpr):  # fmt: skip
    """Tile ``j``'s slot is no longer read: refill it (INLINE) or tell the producer. With SYNC
    (two warpgroups in one partition) both warpgroups' wgmmas must be done first."""
    if SYNC:
        gl.thread_barrier()
    if INLINE:
        if j + STAGES < n_tiles:
            _load_kv(k_desc, v_desc, k_smem, v_smem, k_ready, v_ready, j + STAGES, kv_row0,
                     kv_col, BLOCK_N, STAGES)  # fmt: skip
    else:
        mbarrier.arrive(kv_empty.index(j % STAGES))


@gluon.jit
def _turn_wait(turn_bars, turn, SCHED: gl.constexpr, PART: gl.constexpr):
    """SCHED: wait until this partition may issue its ``turn``-th GEMM batch. Partition 0's
    barrier is primed (a fresh barrier passes a wait on parity 1 at once), so the two consumer
    partitions issue strictly in turn: 0, 1, 0, 1, ..."""
    if SCHED:
        mbarrier.wait(turn_bars.index(PART), (turn & 1) ^ (1 - PART))


@gluon.jit
def _turn_pass(turn_bars, SCHED: gl.constexpr, PART: gl.constexpr):
    """SCHED: this partition's GEMMs are issued; the other partition may issue its own."""
    if SCHED:
        mbarrier.arrive(turn_bars.index(1 - PART))


@gluon.jit
def _segment(acc, m_i, l_i, turn, turn_bars, j0, j1, n_tiles, q_smem, k_smem, v_smem, k_ready, v_ready, kv_empty,
             k_desc, v_desc, kv_row0, kv_col, rows, seq_len, qk_scale,
             ROWS: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
             MASKED: gl.constexpr, CAUSAL: gl.constexpr, OVERLAP: gl.constexpr,
             INLINE: gl.constexpr, SYNC: gl.constexpr, WARPS: gl.constexpr,
             SCHED: gl.constexpr, PART: gl.constexpr):  # fmt: skip
    """Key tiles j0..j1-1 into (acc, m_i, l_i); ``turn`` counts this partition's SCHED turns
    (one per q k^T issued)."""
    HEAD_DIM: gl.constexpr = acc.shape[1]
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[WARPS, 1], instr_shape=[16, BLOCK_N, 16]
    )
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[WARPS, 1], instr_shape=[16, HEAD_DIM, 16]
    )
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    dtype: gl.constexpr = k_desc.dtype
    s_zero = gl.zeros([ROWS, BLOCK_N], gl.float32, s_layout)
    if OVERLAP:
        if j1 > j0:
            s0 = j0 % STAGES
            mbarrier.wait(k_ready.index(s0), (j0 // STAGES) & 1)
            _turn_wait(turn_bars, turn, SCHED, PART)
            s = warpgroup_mma(q_smem, k_smem.index(s0).permute((1, 0)), s_zero, use_acc=False,
                              is_async=True)  # fmt: skip
            _turn_pass(turn_bars, SCHED, PART)
            turn += 1
            s = warpgroup_mma_wait(0, deps=(s,))
            p, alpha, m_i, l_i = _softmax(s, m_i, l_i, j0, rows, seq_len, qk_scale, s_layout,
                                          BLOCK_N, MASKED, CAUSAL)  # fmt: skip
            acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
            p_op = gl.convert_layout(p.to(dtype), p_layout)
            for j in range(j0 + 1, j1):
                sj = j % STAGES
                sp = (j - 1) % STAGES
                mbarrier.wait(k_ready.index(sj), (j // STAGES) & 1)
                if SCHED:  # both operands ready before taking the turn
                    mbarrier.wait(v_ready.index(sp), ((j - 1) // STAGES) & 1)
                    _turn_wait(turn_bars, turn, SCHED, PART)
                s = warpgroup_mma(q_smem, k_smem.index(sj).permute((1, 0)), s_zero,
                                  use_acc=False, is_async=True)  # fmt: skip
                mbarrier.wait(v_ready.index(sp), ((j - 1) // STAGES) & 1)
                acc = warpgroup_mma(p_op, v_smem.index(sp), acc, is_async=True)
                _turn_pass(turn_bars, SCHED, PART)
                turn += 1
                s = warpgroup_mma_wait(1, deps=(s,))  # q k^T done, P @ V still running
                p, alpha, m_i, l_i = _softmax(s, m_i, l_i, j, rows, seq_len, qk_scale,
                                              s_layout, BLOCK_N, MASKED, CAUSAL)  # fmt: skip
                acc, p_op = warpgroup_mma_wait(0, deps=(acc, p_op))
                _release(j - 1, n_tiles, k_desc, v_desc, k_smem, v_smem, k_ready, v_ready,
                         kv_empty, kv_row0, kv_col, BLOCK_N, STAGES, INLINE, SYNC)  # fmt: skip
                acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
                p_op = gl.convert_layout(p.to(dtype), p_layout)
            sl = (j1 - 1) % STAGES
            mbarrier.wait(v_ready.index(sl), ((j1 - 1) // STAGES) & 1)
            acc = warpgroup_mma(p_op, v_smem.index(sl), acc, is_async=True)
            acc, p_op = warpgroup_mma_wait(0, deps=(acc, p_op))
            _release(j1 - 1, n_tiles, k_desc, v_desc, k_smem, v_smem, k_ready, v_ready,
                     kv_empty, kv_row0, kv_col, BLOCK_N, STAGES, INLINE, SYNC)  # fmt: skip
    else:
        for j in range(j0, j1):
            sj = j % STAGES
            ph = (j // STAGES) & 1
            mbarrier.wait(k_ready.index(sj), ph)
            _turn_wait(turn_bars, turn, SCHED, PART)
            s = warpgroup_mma(q_smem, k_smem.index(sj).permute((1, 0)), s_zero, use_acc=False,
                              is_async=True)  # fmt: skip
            _turn_pass(turn_bars, SCHED, PART)
            turn += 1
            s = warpgroup_mma_wait(0, deps=(s,))
            p, alpha, m_i, l_i = _softmax(s, m_i, l_i, j, rows, seq_len, qk_scale, s_layout,
                                          BLOCK_N, MASKED, CAUSAL)  # fmt: skip
            acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
            p_op = gl.convert_layout(p.to(dtype), p_layout)
            mbarrier.wait(v_ready.index(sj), ph)
            acc = warpgroup_mma(p_op, v_smem.index(sj), acc, is_async=True)
            acc, p_op = warpgroup_mma_wait(0, deps=(acc, p_op))
            _release(j, n_tiles, k_desc, v_desc, k_smem, v_smem, k_ready, v_ready, kv_empty,
                     kv_row0, kv_col, BLOCK_N, STAGES, INLINE, SYNC)  # fmt: skip
    return acc, m_i, l_i, turn


@gluon.jit
def _consumer(q_desc, k_desc, v_desc, q_smem, q_bar, k_smem, v_smem, k_ready, v_ready, kv_empty,
              turn_bars,
              out_ptr, stride_ot, stride_oh, head, seq_start, seq_len, row0, kv_col, n_full,
              n_tiles, qk_scale, ROWS: gl.constexpr, HEAD_DIM: gl.constexpr,
              BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
              OVERLAP: gl.constexpr, INLINE: gl.constexpr, WARPS: gl.constexpr,
              SCHED: gl.constexpr = False, PART: gl.constexpr = 0):  # fmt: skip
    """``ROWS`` query rows from ``row0`` (within the sequence) over all their key tiles, then the
    normalized output stored. INLINE: this partition also issues the K/V loads. SCHED (MODE 2):
    GEMM issue alternates with the other consumer partition through ``turn_bars``; a causal
    partition skips key tiles wholly above its own rows and passes the turns it skipped."""
    SYNC: gl.constexpr = WARPS > 4
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[WARPS, 1], instr_shape=[16, BLOCK_N, 16]
    )
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[WARPS, 1], instr_shape=[16, HEAD_DIM, 16]
    )
    mbarrier.expect(q_bar, q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [seq_start + row0, head * HEAD_DIM], q_bar, q_smem)
    if INLINE:
        for j in gl.static_range(STAGES):
            if j < n_tiles:
                _load_kv(k_desc, v_desc, k_smem, v_smem, k_ready, v_ready, j, seq_start, kv_col,
                         BLOCK_N, STAGES)  # fmt: skip
    rows = row0 + gl.arange(0, ROWS, layout=gl.SliceLayout(1, s_layout))
    m_i = gl.full([ROWS], float("-inf"), gl.float32, gl.SliceLayout(1, s_layout))
    l_i = gl.full([ROWS], 0.0, gl.float32, gl.SliceLayout(1, s_layout))
    acc = gl.zeros([ROWS, HEAD_DIM], gl.float32, o_layout)
    n_own = n_tiles
    if SCHED and CAUSAL:  # the lower partition's rows need no key tile past row0 + ROWS - 1
        n_own = (gl.minimum(seq_len, row0 + ROWS) + BLOCK_N - 1) // BLOCK_N
    turn = 0
    mbarrier.wait(q_bar, 0)
    acc, m_i, l_i, turn = _segment(acc, m_i, l_i, turn, turn_bars, 0, n_full, n_tiles, q_smem,
                                   k_smem, v_smem, k_ready, v_ready, kv_empty, k_desc, v_desc,
                                   seq_start, kv_col, rows, seq_len, qk_scale, ROWS, BLOCK_N,
                                   STAGES, False, CAUSAL, OVERLAP, INLINE, SYNC, WARPS, SCHED,
                                   PART)  # fmt: skip
    acc, m_i, l_i, turn = _segment(acc, m_i, l_i, turn, turn_bars, n_full, n_own, n_tiles, q_smem,
                                   k_smem, v_smem, k_ready, v_ready, kv_empty, k_desc, v_desc,
                                   seq_start, kv_col, rows, seq_len, qk_scale, ROWS, BLOCK_N,
                                   STAGES, True, CAUSAL, OVERLAP, INLINE, SYNC, WARPS, SCHED,
                                   PART)  # fmt: skip
    if SCHED:
        # The other partition takes n_tiles turns (n_own <= n_tiles, equal for the upper
        # partition): pass the skipped ones in strict alternation, never two arrives ahead.
        for _t in range(n_own, n_tiles):
            _turn_wait(turn_bars, turn, SCHED, PART)
            _turn_pass(turn_bars, SCHED, PART)
            turn += 1
    l_o = gl.convert_layout(l_i, gl.SliceLayout(1, o_layout))
    o = (acc / gl.expand_dims(l_o, 1)).to(out_ptr.dtype.element_ty)
    offs_m = row0 + gl.arange(0, ROWS, layout=gl.SliceLayout(1, o_layout))
    offs_d = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, o_layout))
    tok = (seq_start + offs_m).to(gl.int64)
    ptrs = (out_ptr + gl.expand_dims(tok * stride_ot, 1) + head * stride_oh
            + gl.expand_dims(offs_d, 0))  # fmt: skip
    gl.store(ptrs, o, mask=gl.expand_dims(offs_m < seq_len, 1))


@gluon.jit
def gluon_attn_fwd(q_desc, k_desc, v_desc, out_ptr, cu_seqlens_ptr, stride_ot, stride_oh,
                   qk_scale, GROUP: gl.constexpr, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr,
                   BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                   OVERLAP: gl.constexpr, MODE: gl.constexpr, num_warps: gl.constexpr,
                   SCHED: gl.constexpr = False):  # fmt: skip
    """Grid (row blocks, q heads, sequences); see the module docstring for MODE, OVERLAP and
    SCHED."""
    pid = gl.program_id(0)
    head = gl.program_id(1)
    seq = gl.program_id(2)
    if CAUSAL:  # heaviest row blocks first
        pid = gl.num_programs(0) - 1 - pid
    seq_start = gl.load(cu_seqlens_ptr + seq)
    seq_len = gl.load(cu_seqlens_ptr + seq + 1) - seq_start
    start_m = pid * BLOCK_M
    if start_m < seq_len:
        kv_col = (head // GROUP) * HEAD_DIM
        if CAUSAL:
            kv_end = gl.minimum(seq_len, start_m + BLOCK_M)
            n_full = gl.minimum(start_m // BLOCK_N, seq_len // BLOCK_N)
        else:
            kv_end = seq_len
            n_full = seq_len // BLOCK_N
        n_tiles = (kv_end + BLOCK_N - 1) // BLOCK_N
        NQ: gl.constexpr = 2 if MODE == 2 else 1
        QROWS: gl.constexpr = BLOCK_M // NQ
        dtype: gl.constexpr = q_desc.dtype
        q_smem = gl.allocate_shared_memory(dtype, [NQ, QROWS, HEAD_DIM], q_desc.layout)
        k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
        v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], v_desc.layout)
        q_bar = gl.allocate_shared_memory(gl.int64, [NQ, 1], mbarrier.MBarrierLayout())
        k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        kv_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(NQ):
            mbarrier.init(q_bar.index(i), count=1)
        for i in gl.static_range(STAGES):
            mbarrier.init(k_ready.index(i), count=1)
            mbarrier.init(v_ready.index(i), count=1)
            mbarrier.init(kv_empty.index(i), count=NQ)
        if SCHED:  # MODE 2 only: one turn barrier per consumer partition, one arrive a phase
            turn_bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
            mbarrier.init(turn_bars.index(0), count=1)
            mbarrier.init(turn_bars.index(1), count=1)
        else:
            turn_bars = kv_empty  # never touched
        if MODE == 0:
            _consumer(q_desc, k_desc, v_desc, q_smem.index(0), q_bar.index(0), k_smem, v_smem,
                      k_ready, v_ready, kv_empty, turn_bars, out_ptr, stride_ot, stride_oh, head,
                      seq_start,
                      seq_len, start_m, kv_col, n_full, n_tiles, qk_scale, BLOCK_M, HEAD_DIM,
                      BLOCK_N, STAGES, CAUSAL, OVERLAP, True, num_warps)  # fmt: skip
        elif MODE == 1:
            gl.warp_specialize(
                [
                    (_consumer, (q_desc, k_desc, v_desc, q_smem.index(0), q_bar.index(0), k_smem,
                                 v_smem, k_ready, v_ready, kv_empty, turn_bars, out_ptr,
                                 stride_ot, stride_oh, head, seq_start, seq_len, start_m, kv_col,
                                 n_full, n_tiles, qk_scale, BLOCK_M, HEAD_DIM, BLOCK_N, STAGES,
                                 CAUSAL, OVERLAP, False, num_warps)),
                    (_fill_ring, (k_desc, v_desc, k_smem, v_smem, k_ready, v_ready, kv_empty,
                                seq_start, kv_col, 0, n_tiles, BLOCK_N, STAGES)),
                ],
                [1],
                [24],
            )  # fmt: skip
        else:
            gl.warp_specialize(
                [
                    (_consumer, (q_desc, k_desc, v_desc, q_smem.index(0), q_bar.index(0), k_smem,
                                 v_smem, k_ready, v_ready, kv_empty, turn_bars, out_ptr,
                                 stride_ot, stride_oh, head, seq_start, seq_len, start_m, kv_col,
                                 n_full, n_tiles, qk_scale, QROWS, HEAD_DIM, BLOCK_N, STAGES,
                                 CAUSAL, OVERLAP, False, 4, SCHED, 0)),
                    (_consumer, (q_desc, k_desc, v_desc, q_smem.index(1), q_bar.index(1), k_smem,
                                 v_smem, k_ready, v_ready, kv_empty, turn_bars, out_ptr,
                                 stride_ot, stride_oh, head, seq_start, seq_len, start_m + QROWS,
                                 kv_col, n_full, n_tiles, qk_scale, QROWS, HEAD_DIM, BLOCK_N,
                                 STAGES, CAUSAL, OVERLAP, False, 4, SCHED, 1)),
                    (_fill_ring, (k_desc, v_desc, k_smem, v_smem, k_ready, v_ready, kv_empty,
                                seq_start, kv_col, 0, n_tiles, BLOCK_N, STAGES)),
                ],
                [4, 1],
                [240, 24],
            )  # fmt: skip


def _gl_dtype(t: Any) -> Any:
    import torch

    return {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16}[t.dtype]


def gluon_launcher(inputs: dict[str, Any], v: dict[str, Any]) -> Any:
    """A callable launching variant ``v`` over the spec's ``inputs``."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    q, k, vv, out, cu = inputs["q"], inputs["k"], inputs["v"], inputs["out"], inputs["cu_seqlens"]
    _, qh, d = q.shape
    kvh = k.shape[1]
    bm, bn, mode = v["BLOCK_M"], v["BLOCK_N"], v["MODE"]
    lens = (cu[1:] - cu[:-1]).cpu()
    grid = (-(-int(lens.max()) // bm), qh, len(lens))

    def desc(t: Any, rows: int) -> Any:
        n, h, dd = t.shape
        layout = gl.NVMMASharedLayout.get_default_for([rows, dd], _gl_dtype(t))
        return TensorDescriptor(t, [n, h * dd], [h * dd, 1], [rows, dd], layout)

    srcs = (desc(q, bm // 2 if mode == 2 else bm), desc(k, bn), desc(vv, bn))
    meta = {
        "GROUP": qh // kvh,
        "HEAD_DIM": d,
        "BLOCK_M": bm,
        "BLOCK_N": bn,
        "STAGES": v["STAGES"],
        "CAUSAL": bool(inputs["causal"]),
        "OVERLAP": v["OVERLAP"],
        "MODE": mode,
        "num_warps": v["num_warps"],
        "SCHED": v["SCHED"],
    }
    scale = math.log2(math.e) / math.sqrt(d)

    def launch() -> Any:
        return gluon_attn_fwd[grid](*srcs, out, cu, out.stride(0), out.stride(1), scale, **meta)

    return launch


def _v(name: str, mode: int, bm: int, bn: int, stages: int, overlap: bool,
       sched: bool = False) -> dict[str, Any]:  # fmt: skip
    warps = 4 if mode == 2 else bm // 16
    return {"name": name, "MODE": mode, "BLOCK_M": bm, "BLOCK_N": bn, "STAGES": stages,
            "OVERLAP": overlap, "num_warps": warps, "SCHED": sched}  # fmt: skip


#: The Gluon variants, simplest first (names are the table's row labels).
VARIANTS = [
    _v("g64_plain", 0, 64, 64, 3, False),  # 1 warpgroup, inline TMA ring, every wgmma waited
    _v("g64_ovl", 0, 64, 64, 3, True),  # + q k^T(j) / P @ V(j-1) / softmax(j) overlap
    _v("g64n128_ovl", 0, 64, 128, 2, True),
    _v("g128_plain", 0, 128, 128, 2, False),  # 2 warpgroups in one partition (8 warps)
    _v("g128_ovl", 0, 128, 128, 2, True),
    _v("g128_ws", 1, 128, 128, 2, False),  # + producer warp (warp_specialize)
    _v("g128_ws_ovl", 1, 128, 128, 2, True),
    _v("g128_pp", 2, 128, 128, 2, False),  # 2 consumer partitions (ping-pong) + producer
    _v("g128_pp_ovl", 2, 128, 128, 2, True),
    _v("g128n64_pp", 2, 128, 64, 4, False),  # ping-pong on 64-key tiles, 4-deep ring
    _v("g128n64_pp_ovl", 2, 128, 64, 4, True),
    # + inter-partition GEMM-issue alternation through two mbarriers (FA3's ping-pong schedule)
    _v("g128_pp_sched", 2, 128, 128, 2, False, True),
    _v("g128_pp_ovl_sched", 2, 128, 128, 2, True, True),
    _v("g128n64_pp_sched", 2, 128, 64, 4, False, True),
    _v("g128n64_pp_ovl_sched", 2, 128, 64, 4, True, True),
]

#: The spec's own configs through its launcher: the sm_90 default and SPLIT_M 128x64 w4 s2 TMA.
SPEC_CONFIGS = {
    "spec_default": {"BLOCK_M": 64, "BLOCK_N": 64, "PRE_LOAD_V": False, "num_warps": 4,
                     "num_stages": 3, "TMA": True, "HEAVY_FIRST": False,
                     "WARP_SPECIALIZE": False, "SPLIT_M": False},
    "spec_split": {"BLOCK_M": 128, "BLOCK_N": 64, "PRE_LOAD_V": False, "num_warps": 4,
                   "num_stages": 2, "TMA": True, "HEAVY_FIRST": False,
                   "WARP_SPECIALIZE": False, "SPLIT_M": True},
}  # fmt: skip


def _p(b: int, s: int, h: tuple[int, int], causal: bool, dtype: str, d: int = 128) -> str:
    return (f"batch={b},max_seqlen={s},pattern=uniform,q_heads={h[0]},kv_heads={h[1]},"
            f"head_dim={d},causal={str(causal).lower()},dtype={dtype}")  # fmt: skip


#: The issue's d=128 grid: batch x seq x heads x causal x dtype.
GRID = [
    _p(b, s, h, c, dt)
    for b in (1, 8, 32)
    for s in (512, 1024, 4096, 8192)
    for h in ((32, 32), (32, 8))
    for c in (False, True)
    for dt in ("float16", "bfloat16")
]
#: A representative subset of GRID (the brief's five, plus two).
SUBSET = [
    _p(1, 8192, (32, 8), True, "bfloat16"),
    _p(8, 4096, (32, 32), False, "float16"),
    _p(8, 1024, (32, 8), True, "bfloat16"),
    _p(32, 512, (32, 32), False, "float16"),
    _p(8, 8192, (32, 8), True, "bfloat16"),
    _p(8, 4096, (32, 8), False, "bfloat16"),
    _p(1, 8192, (32, 32), False, "float16"),
]
#: Correctness only (not timed): ragged lengths, d=64, odd lengths.
CHECK_ONLY = [
    "batch=4,max_seqlen=777,pattern=mixed,q_heads=8,kv_heads=2,head_dim=128,causal=true,dtype=float16",
    "batch=4,max_seqlen=777,pattern=mixed,q_heads=8,kv_heads=2,head_dim=128,causal=false,dtype=bfloat16",
    "batch=2,max_seqlen=1000,pattern=uniform,q_heads=8,kv_heads=8,head_dim=64,causal=true,dtype=bfloat16",
    "batch=2,max_seqlen=1000,pattern=uniform,q_heads=8,kv_heads=4,head_dim=64,causal=false,dtype=float16",
]


def _check(spec: Any, inputs: dict[str, Any], ref: Any, launch: Any) -> str:
    """Max relative error of one launch (output poisoned with NaN first), or why it failed."""
    import torch

    from search_spaces.accuracy import max_rel_error

    inputs["out"].fill_(float("nan"))
    compiled = launch()
    torch.cuda.synchronize()
    err = max_rel_error(inputs["out"], ref)
    extra = ""
    if compiled is not None and hasattr(compiled, "n_regs"):
        extra = f" regs {compiled.n_regs} spills {compiled.n_spills}"
    return f"{err:.2e}{extra}" if err < TOLERANCE else f"WRONG {err:.2e}{extra}"


def _passed(result: str) -> bool:
    """Whether a ``_check`` result is a (passing) error figure."""
    try:
        return float(result.split()[0]) < TOLERANCE
    except (ValueError, IndexError):
        return False


def main() -> None:
    import torch

    from search_spaces import get_spec

    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--problems", choices=("subset", "grid", "quick", "none"), default="subset")
    parser.add_argument("--variants", default="", help="comma-separated names (default all)")
    parser.add_argument(
        "--checked",
        type=Path,
        help="JSON of an earlier --problems none run: time only the variants that passed every "
        "check there (one that hung or failed is left out); its checks are not rerun",
    )
    args = parser.parse_args()
    spec = get_spec("flash_attention")
    variants = [v for v in VARIANTS if not args.variants or v["name"] in args.variants.split(",")]
    problems = {"subset": SUBSET, "grid": GRID, "quick": SUBSET[:2], "none": []}[args.problems]
    checks: dict[str, dict[str, str]] = {}
    check_problems = CHECK_ONLY
    if args.checked:
        checks = json.loads(args.checked.read_text())["checks"]
        passed = [
            v
            for v in variants
            if all(_passed(checks.get(t, {}).get(v["name"], "")) for t in CHECK_ONLY)
        ]
        print("left out after the checks:", [v["name"] for v in variants if v not in passed])
        variants, check_problems = passed, []
    start = time.perf_counter()
    for text in check_problems:
        problem = spec.parse_problem(text)
        inputs = spec.build_inputs(problem, "cuda")
        ref = spec.reference(inputs)
        checks[text] = {}
        for v in variants:
            try:
                checks[text][v["name"]] = _check(spec, inputs, ref, gluon_launcher(inputs, v))
            except Exception as exc:  # a variant that does not compile is reported, not fatal
                checks[text][v["name"]] = f"{type(exc).__name__}: {str(exc)[:300]}"
            print("check", text, v["name"], checks[text][v["name"]], flush=True)
            args.out.write_text(json.dumps({"variants": variants, "checks": checks}, indent=1))
    rows = []
    for text in problems:
        problem = spec.parse_problem(text)
        inputs = spec.build_inputs(problem, "cuda")
        ref = spec.reference(inputs)
        entries: dict[str, Any] = {}
        errors: dict[str, str] = {}
        for v in variants:
            try:
                launch = gluon_launcher(inputs, v)
                errors[v["name"]] = _check(spec, inputs, ref, launch)
            except Exception as exc:
                errors[v["name"]] = f"{type(exc).__name__}: {str(exc)[:300]}"
                continue
            if not errors[v["name"]].startswith("WRONG"):
                entries[v["name"]] = launch
        for name, c in SPEC_CONFIGS.items():
            launch = spec.make_launcher(inputs, c)
            errors[name] = _check(spec, inputs, ref, launch)
            entries[name] = launch
        del ref
        add_runnable(entries, {b: packed_sdpa(inputs, problem, b) for b in BACKENDS})
        med = medians(interleaved(entries, args.rounds))
        fastest = min((b for b in BACKENDS if b in med), key=med.__getitem__)
        row = {"problem": text, "ms": med, "errors": errors, "fastest_backend": fastest,
               "tflops": {n: spec.flops(problem) / t / 1e9 for n, t in med.items()}}  # fmt: skip
        rows.append(row)
        print(text.replace("pattern=uniform,", ""), flush=True)
        for n in sorted(med, key=med.__getitem__):
            print(f"  {n:<20} {med[n]:.4f} ms {row['tflops'][n]:5.0f} TF/s "
                  f"x{med[fastest] / med[n]:.3f} vs {fastest[:5]}  {errors.get(n, '')}")  # fmt: skip
        bad = {n: e for n, e in errors.items() if n not in med}
        if bad:
            print("  not timed:", bad, flush=True)
        del inputs, entries
        torch.cuda.empty_cache()
        args.out.write_text(json.dumps({"variants": variants, "spec_configs": SPEC_CONFIGS,
                                        "checks": checks, "rows": rows}, indent=1))  # fmt: skip
    names = [v["name"] for v in variants] + list(SPEC_CONFIGS) + list(BACKENDS)
    short = {"CUDNN_ATTENTION": "cudnn", "FLASH_ATTENTION": "flash", "EFFICIENT_ATTENTION": "eff"}
    print(f"\nms per problem, x = fastest SDPA / entry ({time.perf_counter() - start:.0f} s)")
    cols = [n for n in names if any(n in r["ms"] for r in rows)]
    print("problem".ljust(34) + "".join(short.get(n, n)[:11].rjust(12) for n in cols))
    for r in rows:
        p = spec.parse_problem(r["problem"])
        lab = (f"b{p['batch']}x{p['max_seqlen']} {p['q_heads']}/{p['kv_heads']} "
               f"{'causal' if p['causal'] else 'full'} {str(p['dtype'])[-4:]}")  # fmt: skip
        f = r["ms"][r["fastest_backend"]]
        cells = "".join(
            (f"{r['ms'][n]:.3f}/x{f / r['ms'][n]:.2f}" if n in r["ms"] else "-").rjust(12)
            for n in cols
        )
        print(lab.ljust(34) + cells)
    print("geomean vs fastest SDPA / vs cuDNN:")
    for n in cols:
        vals = [r["ms"][r["fastest_backend"]] / r["ms"][n] for r in rows if n in r["ms"]]
        cud = [
            r["ms"]["CUDNN_ATTENTION"] / r["ms"][n]
            for r in rows
            if n in r["ms"] and "CUDNN_ATTENTION" in r["ms"]
        ]
        if vals:
            print(f"  {n:<20} x{geomean(vals):.3f}  cuDNN x{geomean(cud) if cud else 0:.3f}"
                  f"  ({len(vals)} problems)")  # fmt: skip


if __name__ == "__main__":
    main()
