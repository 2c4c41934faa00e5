# Triton reads kernel parameter annotations itself, so the kernels stay unannotated.
# mypy: disallow-untyped-defs=False
"""Triton kernel of the ``flash_attention`` spec: variable-length flash-attention forward.

Imported only inside ``FlashAttentionSpec.make_launcher`` (it imports triton); its text is the
kernel's source for the version hash.
"""

import triton
import triton.language as tl


@triton.jit
def _attend_block(
    acc,
    l_i,
    m_i,
    q,
    k_ptrs,
    v_ptrs,
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
    DOT_IN_FP32: tl.constexpr,
):
    """One online-softmax step over keys [start_n, start_n + BLOCK_N); scores in the log2 domain.

    ``MASKED`` blocks mask keys past ``seq_len`` (and, if ``CAUSAL``, keys after the query row);
    unmasked blocks are known to lie wholly inside the sequence and below the diagonal.
    """
    cols = start_n + offs_n
    if MASKED:
        key_ok = cols < seq_len
        k = tl.load(k_ptrs + start_n * stride_kt, mask=key_ok[None, :], other=0.0)
    else:
        k = tl.load(k_ptrs + start_n * stride_kt)
    if PRE_LOAD_V:
        if MASKED:
            v = tl.load(v_ptrs + start_n * stride_vt, mask=key_ok[:, None], other=0.0)
        else:
            v = tl.load(v_ptrs + start_n * stride_vt)
    if DOT_IN_FP32:
        k = k.to(tl.float32)
    qk = tl.dot(q, k) * qk_scale
    if MASKED:
        keep = key_ok[None, :]
        if CAUSAL:
            keep = keep & (cols[None, :] <= offs_m[:, None])
        qk = tl.where(keep, qk, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(qk, 1))
    p = tl.math.exp2(qk - m_new[:, None])
    alpha = tl.math.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    if not PRE_LOAD_V:
        if MASKED:
            v = tl.load(v_ptrs + start_n * stride_vt, mask=key_ok[:, None], other=0.0)
        else:
            v = tl.load(v_ptrs + start_n * stride_vt)
    if DOT_IN_FP32:
        v = v.to(tl.float32)
    acc = tl.dot(p.to(v.dtype), v, acc)
    return acc, l_i, m_new


@triton.jit
def flash_attention_fwd_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
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
    DOT_IN_FP32: tl.constexpr,
):
    """out = softmax(q k^T * scale [causal mask]) v for packed variable-length sequences.

    Tensors are packed [total_tokens, heads, HEAD_DIM]; sequence s owns tokens
    cu_seqlens[s] .. cu_seqlens[s+1]. Grid: (cdiv(max_seqlen, BLOCK_M), q_heads, batch); query head
    h reads KV head h // GROUP. ``qk_scale`` is softmax scale * log2(e). Programs whose row block
    starts past their sequence's end exit: those rows belong to no sequence. Needs
    BLOCK_M % BLOCK_N == 0, so causal blocks split into unmasked ones and a masked diagonal band.
    """
    pid_m = tl.program_id(0)
    head = tl.program_id(1)
    seq = tl.program_id(2)
    seq_start = tl.load(cu_seqlens_ptr + seq)
    seq_len = tl.load(cu_seqlens_ptr + seq + 1) - seq_start
    start_m = pid_m * BLOCK_M
    if start_m >= seq_len:
        return
    kv_head = head // GROUP

    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    # int64 token offsets: total_tokens * heads * HEAD_DIM can pass 2**31 elements.
    tok_m = (seq_start + offs_m).to(tl.int64)
    tok_n = (seq_start + offs_n).to(tl.int64)
    row_ok = offs_m < seq_len

    q_ptrs = q_ptr + tok_m[:, None] * stride_qt + head * stride_qh + offs_d[None, :]
    q = tl.load(q_ptrs, mask=row_ok[:, None], other=0.0)
    if DOT_IN_FP32:
        q = q.to(tl.float32)
    # K is read transposed ([HEAD_DIM, BLOCK_N]) so that q @ k needs no transpose.
    k_ptrs = k_ptr + tok_n[None, :] * stride_kt + kv_head * stride_kh + offs_d[:, None]
    v_ptrs = v_ptr + tok_n[:, None] * stride_vt + kv_head * stride_vh + offs_d[None, :]

    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32)

    full_end = (seq_len // BLOCK_N) * BLOCK_N
    if CAUSAL:
        unmasked_end = tl.minimum(start_m, full_end)
        hi = tl.minimum(seq_len, start_m + BLOCK_M)
    else:
        unmasked_end = full_end
        hi = seq_len
    for start_n in range(0, unmasked_end, BLOCK_N):
        acc, l_i, m_i = _attend_block(
            acc, l_i, m_i, q, k_ptrs, v_ptrs, offs_m, offs_n, seq_len, qk_scale, start_n,
            stride_kt, stride_vt,
            BLOCK_N, False, CAUSAL, PRE_LOAD_V, DOT_IN_FP32,
        )  # fmt: skip
    for start_n in range(unmasked_end, hi, BLOCK_N):
        acc, l_i, m_i = _attend_block(
            acc, l_i, m_i, q, k_ptrs, v_ptrs, offs_m, offs_n, seq_len, qk_scale, start_n,
            stride_kt, stride_vt,
            BLOCK_N, True, CAUSAL, PRE_LOAD_V, DOT_IN_FP32,
        )  # fmt: skip

    acc = acc / l_i[:, None]
    o_ptrs = out_ptr + tok_m[:, None] * stride_ot + head * stride_oh + offs_d[None, :]
    tl.store(o_ptrs, acc.to(out_ptr.dtype.element_ty), mask=row_ok[:, None])
