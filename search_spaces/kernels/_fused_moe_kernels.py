# Triton reads kernel parameter annotations itself, so the kernels stay unannotated.
# mypy: disallow-untyped-defs=False
"""Triton kernels of the ``fused_moe`` spec: token alignment by expert, then the grouped GEMM.

Imported only inside ``FusedMoeSpec.make_launcher`` (it imports triton); its text is the kernel's
source for the version hash.
"""

import triton
import triton.language as tl


@triton.jit
def moe_align_kernel(
    topk_ids_ptr,
    sorted_ids_ptr,
    expert_ids_ptr,
    num_post_padded_ptr,
    T,
    E,
    max_padded,
    BLOCK_SIZE_M: tl.constexpr,
    E_P2: tl.constexpr,
    CHUNK: tl.constexpr,
):
    """Sort the T = M*topk token slots by expert and pad each expert's group to BLOCK_SIZE_M rows.

    One program (grid (1,)); no host synchronization. Writes, like vLLM's moe_align_block_size:

    * ``num_post_padded[0]``: total padded rows (a multiple of BLOCK_SIZE_M, <= max_padded);
    * ``sorted_ids[p]`` for p < num_post_padded: the slot index (token * topk + j) of row p, slots
      of one expert in slot order; padding rows hold T (never a valid slot);
    * ``expert_ids[b]``: the expert of rows [b*BLOCK_SIZE_M, (b+1)*BLOCK_SIZE_M) for every block
      b < cdiv(max_padded, BLOCK_SIZE_M); blocks past num_post_padded get E-1 and are not read.

    ``topk_ids`` is [T] int32 with values in [0, E); E <= E_P2 (a power of two).
    """
    experts = tl.arange(0, E_P2)
    offs = tl.arange(0, CHUNK)

    counts = tl.zeros((E_P2,), dtype=tl.int32)
    for t0 in range(0, T, CHUNK):
        t = t0 + offs
        ids = tl.load(topk_ids_ptr + t, mask=t < T, other=-1)
        counts += tl.sum((ids[:, None] == experts[None, :]).to(tl.int32), axis=0)
    padded = (counts + BLOCK_SIZE_M - 1) // BLOCK_SIZE_M * BLOCK_SIZE_M
    ends = tl.cumsum(padded, axis=0)
    starts = ends - padded
    total = tl.sum(padded, axis=0)
    tl.store(num_post_padded_ptr, total)

    # Each slot goes to its expert's start + the number of earlier slots of that expert.
    filled = starts
    for t0 in range(0, T, CHUNK):
        t = t0 + offs
        ids = tl.load(topk_ids_ptr + t, mask=t < T, other=-1)
        onehot = (ids[:, None] == experts[None, :]).to(tl.int32)
        rank = tl.cumsum(onehot, axis=0) - 1
        dest = tl.sum(onehot * (filled[None, :] + rank), axis=1)
        tl.store(sorted_ids_ptr + dest, t, mask=t < T)
        filled += tl.sum(onehot, axis=0)

    # Padding rows and per-block experts; disjoint from the rows written above, so no barrier.
    for p0 in range(0, max_padded, CHUNK):
        p = p0 + offs
        owner = tl.sum((ends[None, :] <= p[:, None]).to(tl.int32), axis=1)
        sel = (experts[None, :] == owner[:, None]).to(tl.int32)
        row_in_group = p - tl.sum(sel * starts[None, :], axis=1)
        is_pad = (p < total) & (row_in_group >= tl.sum(sel * counts[None, :], axis=1))
        tl.store(sorted_ids_ptr + p, tl.zeros_like(p) + T, mask=is_pad)
        block_start = (p % BLOCK_SIZE_M == 0) & (p < max_padded)
        tl.store(expert_ids_ptr + p // BLOCK_SIZE_M, tl.minimum(owner, E - 1), mask=block_start)


@triton.jit
def fused_moe_kernel(
    x_ptr,
    w_ptr,
    out_ptr,
    topk_weights_ptr,
    sorted_ids_ptr,
    expert_ids_ptr,
    num_post_padded_ptr,
    N,
    K,
    EM,
    num_valid_slots,
    stride_xm,
    stride_xk,
    stride_we,
    stride_wn,
    stride_wk,
    stride_om,
    stride_on,
    TOP_K: tl.constexpr,
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr,
    GROUP_SIZE_M: tl.constexpr,
    DOT_IN_FP32: tl.constexpr,
):
    """out[slot] = (x[slot // TOP_K] @ w[expert].T) * topk_weights[slot] for the aligned rows.

    Grid: cdiv(EM, BLOCK_SIZE_M) * cdiv(N, BLOCK_SIZE_N) with EM = len(sorted_ids) (the upper
    bound); M-blocks at or past num_post_padded return at once. Each M-block belongs to one expert
    (``expert_ids``); padding rows (slot >= num_valid_slots) are masked. ``out`` is viewed as
    [num_valid_slots, N]; GROUP_SIZE_M M-blocks share the N-blocks' weights in L2.
    """
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(EM, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    first_pid_m = (pid // num_pid_in_group) * GROUP_SIZE_M
    group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + (pid % num_pid_in_group) % group_size_m
    pid_n = (pid % num_pid_in_group) // group_size_m

    if pid_m * BLOCK_SIZE_M >= tl.load(num_post_padded_ptr):
        return
    offs_row = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    # int64: slot * N and expert * N * K may exceed 2**31 elements.
    slots = tl.load(sorted_ids_ptr + offs_row).to(tl.int64)
    slot_mask = slots < num_valid_slots
    expert = tl.load(expert_ids_ptr + pid_m).to(tl.int64)

    offs_n = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    x_ptrs = x_ptr + (slots[:, None] // TOP_K) * stride_xm + offs_k[None, :] * stride_xk
    w_ptrs = w_ptr + expert * stride_we + offs_k[:, None] * stride_wk + offs_n[None, :] * stride_wn

    acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_SIZE_K):
        k_mask = offs_k < K - k0
        a = tl.load(x_ptrs, mask=slot_mask[:, None] & k_mask[None, :], other=0.0)
        b = tl.load(w_ptrs, mask=k_mask[:, None] & (offs_n[None, :] < N), other=0.0)
        if DOT_IN_FP32:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc)
        x_ptrs += BLOCK_SIZE_K * stride_xk
        w_ptrs += BLOCK_SIZE_K * stride_wk

    routed = tl.load(topk_weights_ptr + slots, mask=slot_mask, other=0.0)
    acc = acc * routed.to(tl.float32)[:, None]
    out_ptrs = out_ptr + slots[:, None] * stride_om + offs_n[None, :] * stride_on
    out_mask = slot_mask[:, None] & (offs_n[None, :] < N)
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=out_mask)
