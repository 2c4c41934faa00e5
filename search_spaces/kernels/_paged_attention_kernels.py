# Triton reads kernel parameter annotations itself, so the kernels stay unannotated.
# mypy: disallow-untyped-defs=False
"""Triton kernels of the ``paged_attention`` spec: decode attention over a paged KV cache.

Imported only inside ``PagedAttentionSpec.make_launcher`` (it imports triton); its text is the
kernel's source for the version hash.
"""

import triton
import triton.language as tl


@triton.jit
def paged_attention_kernel(
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    block_tables_ptr,
    context_lens_ptr,
    out_ptr,
    ws_m_ptr,
    ws_l_ptr,
    ws_o_ptr,
    stride_qb,
    stride_qh,
    stride_kp,
    stride_ks,
    stride_kh,
    stride_vp,
    stride_vs,
    stride_vh,
    stride_bt,
    stride_ob,
    stride_oh,
    qk_scale,
    num_partitions,
    GROUP: tl.constexpr,
    GROUP_PAD: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PARTITION_SIZE: tl.constexpr,
    DOT_IN_FP32: tl.constexpr,
    PDL: tl.constexpr,
):
    """Attention of one query token per sequence over its pages, for one KV head's query group.

    Grid: (batch, kv_heads, num_partitions). A program takes the GROUP query heads that share KV
    head ``pid(1)`` (padded to GROUP_PAD >= 16 rows for tl.dot) and walks keys in BLOCK_N tiles,
    translating token t to page block_tables[b, t // PAGE_SIZE], slot t % PAGE_SIZE.
    PARTITION_SIZE == 0: one program covers the whole context and writes normalized ``out``.
    Otherwise the program covers tokens [p*PARTITION_SIZE, (p+1)*PARTITION_SIZE) and writes its
    running max (log2 domain), sum and unnormalized output to the fp32 workspaces
    ws_m/ws_l [batch, q_heads, num_partitions] and ws_o [batch, q_heads, num_partitions, HEAD_DIM];
    partitions past the context write max -inf, sum 0, output 0.
    PDL (launched with launch_pdl): wait for the previous kernel's writes before any load, then
    let the next kernel launch.
    """
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    part = tl.program_id(2)
    ctx = tl.load(context_lens_ptr + seq)
    if PARTITION_SIZE == 0:
        lo = 0
        hi = ctx
    else:
        lo = part * PARTITION_SIZE
        hi = tl.minimum(ctx, lo + PARTITION_SIZE)

    offs_g = tl.arange(0, GROUP_PAD)
    offs_d = tl.arange(0, HEAD_DIM)
    offs_n = tl.arange(0, BLOCK_N)
    heads = kv_head * GROUP + offs_g
    head_ok = offs_g < GROUP
    q = tl.load(
        q_ptr + seq * stride_qb + heads[:, None] * stride_qh + offs_d[None, :],
        mask=head_ok[:, None],
        other=0.0,
    )
    if DOT_IN_FP32:
        q = q.to(tl.float32)

    m_i = tl.full((GROUP_PAD,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((GROUP_PAD,), dtype=tl.float32)
    acc = tl.zeros((GROUP_PAD, HEAD_DIM), dtype=tl.float32)
    table = block_tables_ptr + seq.to(tl.int64) * stride_bt
    for start in range(lo, hi, BLOCK_N):
        tok = start + offs_n
        tok_ok = tok < hi
        page = tl.load(table + tok // PAGE_SIZE, mask=tok_ok, other=0).to(tl.int64)
        slot = tok % PAGE_SIZE
        k = tl.load(
            k_cache_ptr
            + page[None, :] * stride_kp
            + slot[None, :] * stride_ks
            + kv_head * stride_kh
            + offs_d[:, None],
            mask=tok_ok[None, :],
            other=0.0,
        )
        v = tl.load(
            v_cache_ptr
            + page[:, None] * stride_vp
            + slot[:, None] * stride_vs
            + kv_head * stride_vh
            + offs_d[None, :],
            mask=tok_ok[:, None],
            other=0.0,
        )
        if DOT_IN_FP32:
            k = k.to(tl.float32)
        qk = tl.dot(q, k) * qk_scale
        qk = tl.where(tok_ok[None, :], qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.math.exp2(qk - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        if DOT_IN_FP32:
            v = v.to(tl.float32)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new

    if PARTITION_SIZE == 0:
        o_ptrs = out_ptr + seq * stride_ob + heads[:, None] * stride_oh + offs_d[None, :]
        tl.store(o_ptrs, (acc / l_i[:, None]).to(out_ptr.dtype.element_ty), mask=head_ok[:, None])
    else:
        # Workspaces are contiguous; row = (seq * q_heads + head) * num_partitions + part.
        rows = ((seq * GROUP * tl.num_programs(1) + heads) * num_partitions + part).to(tl.int64)
        tl.store(ws_m_ptr + rows, m_i, mask=head_ok)
        tl.store(ws_l_ptr + rows, l_i, mask=head_ok)
        tl.store(ws_o_ptr + rows[:, None] * HEAD_DIM + offs_d[None, :], acc, mask=head_ok[:, None])


@triton.jit
def paged_attention_reduce_kernel(
    ws_m_ptr,
    ws_l_ptr,
    ws_o_ptr,
    out_ptr,
    num_partitions,
    stride_ob,
    stride_oh,
    HEAD_DIM: tl.constexpr,
    PARTITIONS_PAD: tl.constexpr,
    PDL: tl.constexpr,
):
    """out[b, h] = sum_p 2^(m_p - M) o_p / sum_p 2^(m_p - M) l_p over the split-KV partitions.

    Grid: (batch, q_heads). Reads the workspaces ``paged_attention_kernel`` wrote;
    PARTITIONS_PAD is num_partitions rounded up to a power of two. PDL: as in
    ``paged_attention_kernel`` (the workspaces are only read after the wait).
    """
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    seq = tl.program_id(0)
    head = tl.program_id(1)
    offs_p = tl.arange(0, PARTITIONS_PAD)
    offs_d = tl.arange(0, HEAD_DIM)
    part_ok = offs_p < num_partitions
    rows = ((seq * tl.num_programs(1) + head) * num_partitions + offs_p).to(tl.int64)
    m = tl.load(ws_m_ptr + rows, mask=part_ok, other=float("-inf"))
    l_p = tl.load(ws_l_ptr + rows, mask=part_ok, other=0.0)
    o = tl.load(
        ws_o_ptr + rows[:, None] * HEAD_DIM + offs_d[None, :], mask=part_ok[:, None], other=0.0
    )
    m_max = tl.max(m, 0)
    w = tl.math.exp2(m - m_max)
    total = tl.sum(w * l_p, 0)
    acc = tl.sum(o * w[:, None], 0) / total
    tl.store(
        out_ptr + seq * stride_ob + head * stride_oh + offs_d, acc.to(out_ptr.dtype.element_ty)
    )
