# Gluon reads kernel parameter annotations itself, so the kernels stay unannotated.
# mypy: disallow-untyped-defs=False
"""Gluon kernel of the ``flash_attention`` spec (``GLUON``): a Hopper (sm_90) forward in
FlashAttention-3's layout, on the same packed inputs as the Triton kernel.

A work item is one 128-row block of one head of one sequence, held by two 4-warp consumer
partitions of 64 rows each, which share one ``STAGES``-deep shared-memory ring of K/V tiles fed
through TMA by a 1-warp producer partition (``gl.warp_specialize``); the producer loads each item's
query block too. Each consumer waits for a slot's "ready" mbarrier, runs q k^T and P @ V as
``warpgroup_mma`` and releases the slot on its "empty" mbarrier (count 2: both consumers).
``OVERLAP``: q k^T of tile j is issued, then P(j-1) @ V(j-1), and tile j's softmax runs while P @ V
is still on the tensor cores. Causal items run the diagonal band in a second, masked loop.

Without ``PERSISTENT`` the grid has one program per item, a head's row blocks adjacent (they share
its K/V in L2), heaviest first when causal. ``PERSISTENT``: fewer programs than items, each taking
items in rounds and keeping its barriers, so the producer loads the next item's query block and
first key tiles while the consumers finish the current one (normalize and store); causal items are taken
heaviest first with every other round's order reversed, which evens the programs' work. Imported
only inside ``FlashAttentionSpec.make_launcher``; its text is part of the kernel's source for the
version hash.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

#: Query rows per consumer partition (one warpgroup's wgmma M).
PART_ROWS = gl.constexpr(64)
#: Warps per consumer partition, and registers per thread of the consumers and of the producer.
PART_WARPS = gl.constexpr(4)
CONSUMER_REGS = gl.constexpr(240)
PRODUCER_REGS = gl.constexpr(24)


@gluon.jit
def _work(r, cu_seqlens_ptr, n_m, n_heads, batch, PERSISTENT: gl.constexpr,
          CAUSAL: gl.constexpr):  # fmt: skip
    """This program's item in round ``r``: (valid, head, seq_start, seq_len, start_m)."""
    BLOCK_M: gl.constexpr = 2 * PART_ROWS
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    if PERSISTENT:
        pos = pid
        if CAUSAL:
            pos = gl.where(r % 2 == 1, nprog - 1 - pid, pid)
        w = r * nprog + pos
        blk = w // (n_heads * batch)
        head = w % n_heads
        seq = (w // n_heads) % batch
    else:
        w = pid
        blk = w % n_m
        head = (w // n_m) % n_heads
        seq = w // (n_m * n_heads)
    if CAUSAL:
        blk = n_m - 1 - blk
    valid = w < n_m * n_heads * batch
    seq = gl.where(valid, seq, 0)
    seq_start = gl.load(cu_seqlens_ptr + seq)
    seq_len = gl.load(cu_seqlens_ptr + seq + 1) - seq_start
    start_m = blk * BLOCK_M
    return valid & (start_m < seq_len), head, seq_start, seq_len, start_m


@gluon.jit
def _tiles(start_m, seq_len, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr):
    """(unmasked key tiles, all key tiles) of the row block from ``start_m``."""
    if CAUSAL:
        kv_end = gl.minimum(seq_len, start_m + 2 * PART_ROWS)
        n_full = gl.minimum(start_m // BLOCK_N, seq_len // BLOCK_N)
    else:
        kv_end = seq_len
        n_full = seq_len // BLOCK_N
    return n_full, (kv_end + BLOCK_N - 1) // BLOCK_N


@gluon.jit
def _fill_ring(k_desc, v_desc, k_smem, v_smem, k_ready, v_ready, kv_empty, v_empty, kv_row0, kv_col,
             base, n_tiles, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, SPLIT: gl.constexpr):  # fmt: skip
    """Key tiles 0..n_tiles-1 in order, tile j into ring position ``base + j`` once both
    consumers released that slot."""
    for j in range(n_tiles):
        s = (base + j) % STAGES
        # a fresh barrier passes a wait on parity 1 at once: the first pass needs no release
        mbarrier.wait(kv_empty.index(s), (((base + j) // STAGES) & 1) ^ 1)
        row = kv_row0 + j * BLOCK_N
        mbarrier.expect(k_ready.index(s), k_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [row, kv_col], k_ready.index(s), k_smem.index(s))
        if SPLIT:
            mbarrier.wait(v_empty.index(s), (((base + j) // STAGES) & 1) ^ 1)
        mbarrier.expect(v_ready.index(s), v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(v_desc, [row, kv_col], v_ready.index(s), v_smem.index(s))


@gluon.jit
def _producer(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_ready, q_empty, k_ready, v_ready,
              kv_empty, v_empty, SPLIT: gl.constexpr, cu_seqlens_ptr, n_m, n_heads, batch, n_rounds, GROUP: gl.constexpr,
              HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
              PERSISTENT: gl.constexpr, CAUSAL: gl.constexpr):  # fmt: skip
    """Each item's two query halves (once both consumers released the previous item's), then its
    key tiles."""
    t = 0
    base = 0
    for r in range(n_rounds):
        valid, head, seq_start, seq_len, start_m = _work(r, cu_seqlens_ptr, n_m, n_heads, batch,
                                                         PERSISTENT, CAUSAL)  # fmt: skip
        if valid:
            _, n_tiles = _tiles(start_m, seq_len, BLOCK_N, CAUSAL)
            mbarrier.wait(q_empty, (t & 1) ^ 1)
            mbarrier.expect(q_ready, 2 * q_desc.block_type.nbytes)
            for h in gl.static_range(2):
                tma.async_copy_global_to_shared(
                    q_desc, [seq_start + start_m + h * PART_ROWS, head * HEAD_DIM], q_ready,
                    q_smem.index(h),
                )  # fmt: skip
            _fill_ring(k_desc, v_desc, k_smem, v_smem, k_ready, v_ready, kv_empty, v_empty,
                       seq_start, (head // GROUP) * HEAD_DIM, base, n_tiles, BLOCK_N, STAGES,
                       SPLIT)  # fmt: skip
            base += n_tiles
            t += 1


@gluon.jit
def _softmax(s, m_i, l_i, j, rows, seq_len, qk_scale, s_layout: gl.constexpr,
             BLOCK_N: gl.constexpr, MASKED: gl.constexpr, CAUSAL: gl.constexpr):  # fmt: skip
    """Online-softmax step on the scores ``s`` of key tile ``j``: (p fp32, alpha, m, l)."""
    if MASKED:
        cols = j * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        keep = gl.expand_dims(cols < seq_len, 0)
        if CAUSAL:
            keep = keep & (gl.expand_dims(cols, 0) <= gl.expand_dims(rows, 1))
        s = gl.where(keep, s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, 1) * qk_scale)
    p = gl.exp2(s * qk_scale - gl.expand_dims(m_new, 1))
    alpha = gl.exp2(m_i - m_new)
    l_i = l_i * alpha + gl.sum(p, 1)
    return p, alpha, m_new, l_i


@gluon.jit
def _named(asm: gl.constexpr, bid):
    """One named-barrier instruction (``bar.sync`` / ``bar.arrive``) of both consumer partitions."""
    gl.inline_asm_elementwise(asm, "=r,r", [bid], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _segment(acc, m_i, l_i, base, j0, j1, q_smem, k_smem, v_smem, k_ready, v_ready, kv_empty,
             v_empty, rows, seq_len, qk_scale, HALF: gl.constexpr, BLOCK_N: gl.constexpr,
             STAGES: gl.constexpr, MASKED: gl.constexpr, CAUSAL: gl.constexpr,
             OVERLAP: gl.constexpr, SPLIT: gl.constexpr, PP: gl.constexpr):  # fmt: skip
    """Key tiles j0..j1-1 (tile j at ring position ``base + j``) into (acc, m_i, l_i)."""
    HEAD_DIM: gl.constexpr = acc.shape[1]
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[PART_WARPS, 1], instr_shape=[16, BLOCK_N, 16]
    )
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[PART_WARPS, 1], instr_shape=[16, HEAD_DIM, 16]
    )
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    dtype: gl.constexpr = k_smem.dtype
    s_zero = gl.zeros([PART_ROWS, BLOCK_N], gl.float32, s_layout)
    if OVERLAP:
        if j1 > j0:
            s0 = (base + j0) % STAGES
            mbarrier.wait(k_ready.index(s0), ((base + j0) // STAGES) & 1)
            s = warpgroup_mma(q_smem, k_smem.index(s0).permute((1, 0)), s_zero, use_acc=False,
                              is_async=True)  # fmt: skip
            s = warpgroup_mma_wait(0, deps=(s,))
            if SPLIT:
                mbarrier.arrive(kv_empty.index(s0))
            p, alpha, m_i, l_i = _softmax(s, m_i, l_i, j0, rows, seq_len, qk_scale, s_layout,
                                          BLOCK_N, MASKED, CAUSAL)  # fmt: skip
            acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
            p_op = gl.convert_layout(p.to(dtype), p_layout)
            for j in range(j0 + 1, j1):
                sj = (base + j) % STAGES
                sp = (base + j - 1) % STAGES
                mbarrier.wait(k_ready.index(sj), ((base + j) // STAGES) & 1)
                if PP:
                    _named("bar.sync $1, 256; mov.u32 $0, 0;", 14 + HALF)
                s = warpgroup_mma(q_smem, k_smem.index(sj).permute((1, 0)), s_zero,
                                  use_acc=False, is_async=True)  # fmt: skip
                mbarrier.wait(v_ready.index(sp), ((base + j - 1) // STAGES) & 1)
                acc = warpgroup_mma(p_op, v_smem.index(sp), acc, is_async=True)
                if PP:
                    _named("bar.arrive $1, 256; mov.u32 $0, 0;", 15 - HALF)
                s = warpgroup_mma_wait(1, deps=(s,))  # q k^T done, P @ V still running
                if SPLIT:
                    mbarrier.arrive(kv_empty.index(sj))
                p, alpha, m_i, l_i = _softmax(s, m_i, l_i, j, rows, seq_len, qk_scale,
                                              s_layout, BLOCK_N, MASKED, CAUSAL)  # fmt: skip
                acc, p_op = warpgroup_mma_wait(0, deps=(acc, p_op))
                if SPLIT:
                    mbarrier.arrive(v_empty.index(sp))
                else:
                    mbarrier.arrive(kv_empty.index(sp))
                acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
                p_op = gl.convert_layout(p.to(dtype), p_layout)
            sl = (base + j1 - 1) % STAGES
            mbarrier.wait(v_ready.index(sl), ((base + j1 - 1) // STAGES) & 1)
            acc = warpgroup_mma(p_op, v_smem.index(sl), acc, is_async=True)
            acc, p_op = warpgroup_mma_wait(0, deps=(acc, p_op))
            if SPLIT:
                mbarrier.arrive(v_empty.index(sl))
            else:
                mbarrier.arrive(kv_empty.index(sl))
    else:
        for j in range(j0, j1):
            sj = (base + j) % STAGES
            ph = ((base + j) // STAGES) & 1
            mbarrier.wait(k_ready.index(sj), ph)
            s = warpgroup_mma(q_smem, k_smem.index(sj).permute((1, 0)), s_zero, use_acc=False,
                              is_async=True)  # fmt: skip
            s = warpgroup_mma_wait(0, deps=(s,))
            if SPLIT:
                mbarrier.arrive(kv_empty.index(sj))
            p, alpha, m_i, l_i = _softmax(s, m_i, l_i, j, rows, seq_len, qk_scale, s_layout,
                                          BLOCK_N, MASKED, CAUSAL)  # fmt: skip
            acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
            p_op = gl.convert_layout(p.to(dtype), p_layout)
            mbarrier.wait(v_ready.index(sj), ph)
            acc = warpgroup_mma(p_op, v_smem.index(sj), acc, is_async=True)
            acc, p_op = warpgroup_mma_wait(0, deps=(acc, p_op))
            if SPLIT:
                mbarrier.arrive(v_empty.index(sj))
            else:
                mbarrier.arrive(kv_empty.index(sj))
    return acc, m_i, l_i


@gluon.jit
def _consumer(q_smem, q_ready, q_empty, k_smem, v_smem, k_ready, v_ready, kv_empty, v_empty,
              SPLIT: gl.constexpr, PP: gl.constexpr, out_ptr,
              cu_seqlens_ptr, stride_ot, stride_oh, n_m, n_heads, batch, n_rounds, qk_scale,
              HALF: gl.constexpr, HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr,
              STAGES: gl.constexpr, PERSISTENT: gl.constexpr,
              CAUSAL: gl.constexpr, OVERLAP: gl.constexpr):  # fmt: skip
    """Query rows ``HALF * PART_ROWS`` onwards of each item's row block over all its key tiles
    (the unmasked ones, then the masked band), then the normalized output stored."""
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[PART_WARPS, 1], instr_shape=[16, BLOCK_N, 16]
    )
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[PART_WARPS, 1], instr_shape=[16, HEAD_DIM, 16]
    )
    t = 0
    base = 0
    if PP and HALF == 1:
        _named("bar.arrive $1, 256; mov.u32 $0, 0;", 14)
    for r in range(n_rounds):
        valid, head, seq_start, seq_len, start_m = _work(r, cu_seqlens_ptr, n_m, n_heads, batch,
                                                         PERSISTENT, CAUSAL)  # fmt: skip
        if valid:
            n_full, n_tiles = _tiles(start_m, seq_len, BLOCK_N, CAUSAL)
            row0 = start_m + HALF * PART_ROWS
            rows = row0 + gl.arange(0, PART_ROWS, layout=gl.SliceLayout(1, s_layout))
            m_i = gl.full([PART_ROWS], float("-inf"), gl.float32, gl.SliceLayout(1, s_layout))
            l_i = gl.full([PART_ROWS], 0.0, gl.float32, gl.SliceLayout(1, s_layout))
            acc = gl.zeros([PART_ROWS, HEAD_DIM], gl.float32, o_layout)
            q = q_smem.index(HALF)
            mbarrier.wait(q_ready, t & 1)
            acc, m_i, l_i = _segment(acc, m_i, l_i, base, 0, n_full, q, k_smem, v_smem, k_ready,
                                     v_ready, kv_empty, v_empty, rows, seq_len, qk_scale, HALF,
                                     BLOCK_N, STAGES, False, CAUSAL, OVERLAP, SPLIT, PP)  # fmt: skip
            acc, m_i, l_i = _segment(acc, m_i, l_i, base, n_full, n_tiles, q, k_smem, v_smem,
                                     k_ready, v_ready, kv_empty, v_empty, rows, seq_len, qk_scale,
                                     HALF, BLOCK_N, STAGES, True, CAUSAL, OVERLAP, SPLIT,
                                     PP)  # fmt: skip
            mbarrier.arrive(q_empty)
            l_o = gl.convert_layout(l_i, gl.SliceLayout(1, o_layout))
            o = (acc / gl.expand_dims(l_o, 1)).to(out_ptr.dtype.element_ty)
            offs_m = row0 + gl.arange(0, PART_ROWS, layout=gl.SliceLayout(1, o_layout))
            offs_d = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, o_layout))
            tok = (seq_start + offs_m).to(gl.int64)
            ptrs = (out_ptr + gl.expand_dims(tok * stride_ot, 1) + head * stride_oh
                    + gl.expand_dims(offs_d, 0))  # fmt: skip
            gl.store(ptrs, o, mask=gl.expand_dims(offs_m < seq_len, 1))
            base += n_tiles
            t += 1


# The item counts stay unspecialized: one compile serves every batch and length.
@gluon.jit(do_not_specialize=["n_m", "n_heads", "batch"])
def flash_attention_gluon_kernel(q_desc, k_desc, v_desc, out_ptr, cu_seqlens_ptr, stride_ot,
                                 stride_oh, qk_scale, n_m, n_heads, batch,
                                 GROUP: gl.constexpr, HEAD_DIM: gl.constexpr,
                                 BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                                 CAUSAL: gl.constexpr, OVERLAP: gl.constexpr,
                                 PERSISTENT: gl.constexpr, SPLIT: gl.constexpr = False,
                                 PP: gl.constexpr = False):  # fmt: skip
    """Items: ``n_m`` row blocks of 2 * PART_ROWS x ``n_heads`` q heads x ``batch`` sequences;
    a 1-D grid of one program per item, or (``PERSISTENT``) fewer; launched with num_warps =
    PART_WARPS (the first consumer partition). q_desc has blocks of PART_ROWS tokens x one head,
    k_desc and v_desc blocks of BLOCK_N tokens x one head."""
    n_items = n_m * n_heads * batch
    n_rounds = (n_items + gl.num_programs(0) - 1) // gl.num_programs(0)
    dtype: gl.constexpr = q_desc.dtype
    q_smem = gl.allocate_shared_memory(dtype, [2, PART_ROWS, HEAD_DIM], q_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], v_desc.layout)
    q_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    kv_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_ready, count=1)
    mbarrier.init(q_empty, count=2)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(kv_empty.index(i), count=2)
        mbarrier.init(v_empty.index(i), count=2)
    gl.warp_specialize(
        [
            (_consumer, (q_smem, q_ready, q_empty, k_smem, v_smem, k_ready, v_ready, kv_empty,
                         v_empty, SPLIT, PP, out_ptr, cu_seqlens_ptr, stride_ot, stride_oh, n_m, n_heads, batch,
                         n_rounds, qk_scale, 0, HEAD_DIM, BLOCK_N, STAGES, PERSISTENT,
                         CAUSAL, OVERLAP)),
            (_consumer, (q_smem, q_ready, q_empty, k_smem, v_smem, k_ready, v_ready, kv_empty,
                         v_empty, SPLIT, PP, out_ptr, cu_seqlens_ptr, stride_ot, stride_oh, n_m, n_heads, batch,
                         n_rounds, qk_scale, 1, HEAD_DIM, BLOCK_N, STAGES, PERSISTENT,
                         CAUSAL, OVERLAP)),
            (_producer, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_ready, q_empty,
                         k_ready, v_ready, kv_empty, v_empty, SPLIT, cu_seqlens_ptr, n_m, n_heads, batch,
                         n_rounds, GROUP, HEAD_DIM, BLOCK_N, STAGES, PERSISTENT,
                         CAUSAL)),
        ],
        [PART_WARPS, 1],
        [CONSUMER_REGS, PRODUCER_REGS],
    )  # fmt: skip
