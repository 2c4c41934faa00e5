# Triton reads kernel parameter annotations itself, so the kernels stay unannotated.
# mypy: disallow-untyped-defs=False
"""Triton kernel of the ``flash_attention`` spec: variable-length flash-attention forward.

Imported only inside ``FlashAttentionSpec.make_launcher`` (it imports triton); its text is the
kernel's source for the version hash.
"""

import triton
import triton.language as tl


@triton.jit
def _load_kv(src, ptrs, start_n, stride_t, key_ok, row0, col0, MASKED: tl.constexpr,
             TMA: tl.constexpr, TRANSPOSE: tl.constexpr):  # fmt: skip
    """A K or V tile at key offset ``start_n``: through the tensor descriptor ``src`` at
    [row0 + start_n, col0] (rows past the tensor read 0; rows of the next sequence are masked by
    the caller's scores), or through ``ptrs`` (masked to ``key_ok`` when ``MASKED``).
    ``TRANSPOSE``: the tile is K, wanted as [HEAD_DIM, BLOCK_N]."""
    if TMA:
        tile = src.load([row0 + start_n, col0])
        if TRANSPOSE:
            tile = tile.T
    elif MASKED:
        if TRANSPOSE:
            tile = tl.load(ptrs + start_n * stride_t, mask=key_ok[None, :], other=0.0)
        else:
            tile = tl.load(ptrs + start_n * stride_t, mask=key_ok[:, None], other=0.0)
    else:
        tile = tl.load(ptrs + start_n * stride_t)
    return tile


@triton.jit
def _online_softmax(l_i, m_i, qk, offs_m, cols, key_ok, qk_scale, MASKED: tl.constexpr,
                    CAUSAL: tl.constexpr):  # fmt: skip
    """The online-softmax step of one score tile ``qk``: (p, alpha, l_i, m_new), scores in the
    log2 domain (``qk_scale`` = softmax scale * log2(e), folded into the max and the exponent:
    one FMA). ``MASKED`` tiles mask keys past ``seq_len`` (``key_ok``) and, if ``CAUSAL``, keys
    after the query row; unmasked tiles lie wholly inside the sequence and below the diagonal."""
    if MASKED:
        keep = key_ok[None, :]
        if CAUSAL:
            keep = keep & (cols[None, :] <= offs_m[:, None])
        qk = tl.where(keep, qk, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
    p = tl.math.exp2(qk * qk_scale - m_new[:, None])
    alpha = tl.math.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    return p, alpha, l_i, m_new


@triton.jit
def _attend_block(
    acc,
    l_i,
    m_i,
    q,
    k_src,
    v_src,
    k_ptrs,
    v_ptrs,
    kv_row0,
    kv_col0,
    offs_m,
    offs_n,
    seq_len,
    qk_scale,
    start_n,
    stride_kt,
    stride_vt,
    BLOCK_N: tl.constexpr,
    MASKED: tl.constexpr,
    CAUSAL: tl.constexpr,
    PRE_LOAD_V: tl.constexpr,
    TMA: tl.constexpr,
    DOT_IN_FP32: tl.constexpr,
):
    """One online-softmax step of the rows ``offs_m`` over keys [start_n, start_n + BLOCK_N)."""
    cols = start_n + offs_n
    key_ok = cols < seq_len
    k = _load_kv(k_src, k_ptrs, start_n, stride_kt, key_ok, kv_row0, kv_col0, MASKED, TMA, True)
    if PRE_LOAD_V:
        v = _load_kv(v_src, v_ptrs, start_n, stride_vt, key_ok, kv_row0, kv_col0, MASKED, TMA,
                     False)  # fmt: skip
    if DOT_IN_FP32:
        k = k.to(tl.float32)
    qk = tl.dot(q, k)
    p, alpha, l_i, m_new = _online_softmax(l_i, m_i, qk, offs_m, cols, key_ok, qk_scale, MASKED,
                                           CAUSAL)  # fmt: skip
    acc = acc * alpha[:, None]
    if not PRE_LOAD_V:
        v = _load_kv(v_src, v_ptrs, start_n, stride_vt, key_ok, kv_row0, kv_col0, MASKED, TMA,
                     False)  # fmt: skip
    if DOT_IN_FP32:
        v = v.to(tl.float32)
    acc = tl.dot(p.to(v.dtype), v, acc)
    return acc, l_i, m_new


@triton.jit
def _attend_block_split(
    acc0,
    l0,
    m0,
    q0,
    acc1,
    l1,
    m1,
    q1,
    k_src,
    v_src,
    k_ptrs,
    v_ptrs,
    kv_row0,
    kv_col0,
    offs_m0,
    offs_m1,
    offs_n,
    seq_len,
    qk_scale,
    start_n,
    stride_kt,
    stride_vt,
    BLOCK_N: tl.constexpr,
    MASKED: tl.constexpr,
    CAUSAL: tl.constexpr,
    PRE_LOAD_V: tl.constexpr,
    TMA: tl.constexpr,
    DOT_IN_FP32: tl.constexpr,
):
    """``_attend_block`` for a row block held as two halves sharing each K and V tile: both
    halves' q k^T first, then each half's softmax and P @ V (the second half's softmax can run
    while the first half's P @ V is in the matrix units)."""
    cols = start_n + offs_n
    key_ok = cols < seq_len
    k = _load_kv(k_src, k_ptrs, start_n, stride_kt, key_ok, kv_row0, kv_col0, MASKED, TMA, True)
    if PRE_LOAD_V:
        v = _load_kv(v_src, v_ptrs, start_n, stride_vt, key_ok, kv_row0, kv_col0, MASKED, TMA,
                     False)  # fmt: skip
    if DOT_IN_FP32:
        k = k.to(tl.float32)
    qk0 = tl.dot(q0, k)
    qk1 = tl.dot(q1, k)
    p0, alpha0, l0, m0 = _online_softmax(l0, m0, qk0, offs_m0, cols, key_ok, qk_scale, MASKED,
                                         CAUSAL)  # fmt: skip
    acc0 = acc0 * alpha0[:, None]
    if not PRE_LOAD_V:
        v = _load_kv(v_src, v_ptrs, start_n, stride_vt, key_ok, kv_row0, kv_col0, MASKED, TMA,
                     False)  # fmt: skip
    if DOT_IN_FP32:
        v = v.to(tl.float32)
    acc0 = tl.dot(p0.to(v.dtype), v, acc0)
    p1, alpha1, l1, m1 = _online_softmax(l1, m1, qk1, offs_m1, cols, key_ok, qk_scale, MASKED,
                                         CAUSAL)  # fmt: skip
    acc1 = acc1 * alpha1[:, None]
    acc1 = tl.dot(p1.to(v.dtype), v, acc1)
    return acc0, l0, m0, acc1, l1, m1


@triton.jit
def _load_q(q_src, seq_start, start_m, head, offs_m, seq_len, stride_qt, stride_qh,
            HEAD_DIM: tl.constexpr, TMA: tl.constexpr, DOT_IN_FP32: tl.constexpr):  # fmt: skip
    """The query rows ``offs_m`` (from ``start_m``) of ``head``: through the tensor descriptor
    (rows past this sequence belong to the next one, or read 0 past the tensor; they are never
    stored), or through pointers masked to the sequence."""
    if TMA:
        q = q_src.load([seq_start + start_m, head * HEAD_DIM])
    else:
        tok = (seq_start + offs_m).to(tl.int64)
        offs_d = tl.arange(0, HEAD_DIM)
        q_ptrs = q_src + tok[:, None] * stride_qt + head * stride_qh + offs_d[None, :]
        q = tl.load(q_ptrs, mask=(offs_m < seq_len)[:, None], other=0.0)
    if DOT_IN_FP32:
        q = q.to(tl.float32)
    return q


@triton.jit
def _store_out(out_ptr, acc, l_i, seq_start, offs_m, seq_len, head, stride_ot, stride_oh,
               HEAD_DIM: tl.constexpr):  # fmt: skip
    """out[rows offs_m of this sequence, head] = acc / l_i (rows past the sequence not stored)."""
    tok = (seq_start + offs_m).to(tl.int64)
    offs_d = tl.arange(0, HEAD_DIM)
    o_ptrs = out_ptr + tok[:, None] * stride_ot + head * stride_oh + offs_d[None, :]
    tl.store(o_ptrs, (acc / l_i[:, None]).to(out_ptr.dtype.element_ty),
             mask=(offs_m < seq_len)[:, None])  # fmt: skip


@triton.jit
def flash_attention_fwd_kernel(
    q_src,
    k_src,
    v_src,
    out_ptr,
    cu_seqlens_ptr,
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_ot,
    stride_oh,
    qk_scale,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
    PRE_LOAD_V: tl.constexpr,
    TMA: tl.constexpr,
    HEAVY_FIRST: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr,
    SPLIT_M: tl.constexpr,
    DOT_IN_FP32: tl.constexpr,
):
    """out = softmax(q k^T * scale [causal mask]) v for packed variable-length sequences.

    Tensors are packed [total_tokens, heads, HEAD_DIM]; sequence s owns tokens
    cu_seqlens[s] .. cu_seqlens[s+1]. Grid: (cdiv(max_seqlen, BLOCK_M), q_heads, batch); query head
    h reads KV head h // GROUP. ``qk_scale`` is softmax scale * log2(e). Programs whose row block
    starts past their sequence's end exit: those rows belong to no sequence. With causal, key
    blocks wholly below the row block's first query run unmasked, the rest up to its last query
    (the diagonal band: one or two key blocks when BLOCK_N > BLOCK_M) masked.

    ``TMA``: q_src, k_src, v_src are tensor descriptors over the [total_tokens, heads * HEAD_DIM]
    views with blocks [BLOCK_M, HEAD_DIM] (q; [BLOCK_M // 2, HEAD_DIM] with ``SPLIT_M``) and
    [BLOCK_N, HEAD_DIM] (k, v); else pointers. ``HEAVY_FIRST``: program 0 takes the last row
    block (with causal, the most keys), so the longest programs start first.
    ``WARP_SPECIALIZE``: Triton splits the unmasked key loop into producer (loads) and consumer
    (math) warps. ``SPLIT_M``: the row block is two halves of BLOCK_M // 2 rows that share each
    K/V tile (``_attend_block_split``).
    """
    pid_m = tl.num_programs(0) - 1 - tl.program_id(0) if HEAVY_FIRST else tl.program_id(0)
    head = tl.program_id(1)
    seq = tl.program_id(2)
    seq_start = tl.load(cu_seqlens_ptr + seq)
    seq_len = tl.load(cu_seqlens_ptr + seq + 1) - seq_start
    start_m = pid_m * BLOCK_M
    if start_m >= seq_len:
        return
    kv_head = head // GROUP

    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    # int64 token offsets: total_tokens * heads * HEAD_DIM can pass 2**31 elements.
    tok_n = (seq_start + offs_n).to(tl.int64)
    if TMA:
        k_ptrs = k_src
        v_ptrs = v_src
    else:
        # K is read transposed ([HEAD_DIM, BLOCK_N]) so that q @ k needs no transpose.
        k_ptrs = k_src + tok_n[None, :] * stride_kt + kv_head * stride_kh + offs_d[:, None]
        v_ptrs = v_src + tok_n[:, None] * stride_vt + kv_head * stride_vh + offs_d[None, :]
    kv_col0 = kv_head * HEAD_DIM

    full_end = (seq_len // BLOCK_N) * BLOCK_N
    if CAUSAL:
        unmasked_end = tl.minimum(start_m // BLOCK_N * BLOCK_N, full_end)
        hi = tl.minimum(seq_len, start_m + BLOCK_M)
    else:
        unmasked_end = full_end
        hi = seq_len
    if SPLIT_M:
        HALF: tl.constexpr = BLOCK_M // 2
        offs_m0 = start_m + tl.arange(0, HALF)
        offs_m1 = offs_m0 + HALF
        q0 = _load_q(q_src, seq_start, start_m, head, offs_m0, seq_len, stride_qt, stride_qh,
                     HEAD_DIM, TMA, DOT_IN_FP32)  # fmt: skip
        q1 = _load_q(q_src, seq_start, start_m + HALF, head, offs_m1, seq_len, stride_qt,
                     stride_qh, HEAD_DIM, TMA, DOT_IN_FP32)  # fmt: skip
        m0 = tl.full((HALF,), float("-inf"), dtype=tl.float32)
        m1 = tl.full((HALF,), float("-inf"), dtype=tl.float32)
        l0 = tl.zeros((HALF,), dtype=tl.float32)
        l1 = tl.zeros((HALF,), dtype=tl.float32)
        acc0 = tl.zeros((HALF, HEAD_DIM), dtype=tl.float32)
        acc1 = tl.zeros((HALF, HEAD_DIM), dtype=tl.float32)
        for start_n in tl.range(0, unmasked_end, BLOCK_N, warp_specialize=WARP_SPECIALIZE):
            acc0, l0, m0, acc1, l1, m1 = _attend_block_split(
                acc0, l0, m0, q0, acc1, l1, m1, q1, k_src, v_src, k_ptrs, v_ptrs, seq_start,
                kv_col0, offs_m0, offs_m1, offs_n, seq_len, qk_scale, start_n, stride_kt,
                stride_vt, BLOCK_N, False, CAUSAL, PRE_LOAD_V, TMA, DOT_IN_FP32,
            )  # fmt: skip
        for start_n in range(unmasked_end, hi, BLOCK_N):
            acc0, l0, m0, acc1, l1, m1 = _attend_block_split(
                acc0, l0, m0, q0, acc1, l1, m1, q1, k_src, v_src, k_ptrs, v_ptrs, seq_start,
                kv_col0, offs_m0, offs_m1, offs_n, seq_len, qk_scale, start_n, stride_kt,
                stride_vt, BLOCK_N, True, CAUSAL, PRE_LOAD_V, TMA, DOT_IN_FP32,
            )  # fmt: skip
        _store_out(out_ptr, acc0, l0, seq_start, offs_m0, seq_len, head, stride_ot, stride_oh,
                   HEAD_DIM)  # fmt: skip
        _store_out(out_ptr, acc1, l1, seq_start, offs_m1, seq_len, head, stride_ot, stride_oh,
                   HEAD_DIM)  # fmt: skip
    else:
        offs_m = start_m + tl.arange(0, BLOCK_M)
        q = _load_q(q_src, seq_start, start_m, head, offs_m, seq_len, stride_qt, stride_qh,
                    HEAD_DIM, TMA, DOT_IN_FP32)  # fmt: skip
        m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
        l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
        acc = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32)
        for start_n in tl.range(0, unmasked_end, BLOCK_N, warp_specialize=WARP_SPECIALIZE):
            acc, l_i, m_i = _attend_block(
                acc, l_i, m_i, q, k_src, v_src, k_ptrs, v_ptrs, seq_start, kv_col0, offs_m,
                offs_n, seq_len, qk_scale, start_n, stride_kt, stride_vt,
                BLOCK_N, False, CAUSAL, PRE_LOAD_V, TMA, DOT_IN_FP32,
            )  # fmt: skip
        for start_n in range(unmasked_end, hi, BLOCK_N):
            acc, l_i, m_i = _attend_block(
                acc, l_i, m_i, q, k_src, v_src, k_ptrs, v_ptrs, seq_start, kv_col0, offs_m,
                offs_n, seq_len, qk_scale, start_n, stride_kt, stride_vt,
                BLOCK_N, True, CAUSAL, PRE_LOAD_V, TMA, DOT_IN_FP32,
            )  # fmt: skip
        _store_out(out_ptr, acc, l_i, seq_start, offs_m, seq_len, head, stride_ot, stride_oh,
                   HEAD_DIM)  # fmt: skip
