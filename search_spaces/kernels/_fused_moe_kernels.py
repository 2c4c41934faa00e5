# Triton reads kernel parameter annotations itself, so the kernels stay unannotated.
# mypy: disallow-untyped-defs=False
"""Triton kernels of the ``fused_moe`` spec: token alignment by expert, the grouped GEMM (plain, or
the gate and up projections with SiLU-and-mul in its epilogue, or the down projection adding each
slot into its token's row), and the SiLU-and-mul between a layer's two GEMMs.

Imported only inside the launch functions of ``fused_moe`` (it imports triton); its text is the
kernel's source for the version hash.
"""

import triton
import triton.language as tl

#: Chunks of the per-expert scan over the count matrix, and expert-id blocks, per vector step.
SCAN_BLOCK = 256


def launch_align(topk_ids, sorted_ids, expert_ids, num_post_padded, workspace, counts, slots,
                 experts, max_padded, block_m, e_p2, chunk, scan=SCAN_BLOCK):  # fmt: skip
    """vLLM's moe_align_block_size in three launches that scale with E and with the slots, with no
    host synchronization. Writes:

    * ``num_post_padded[0]``: total padded rows (a multiple of block_m, <= max_padded);
    * ``sorted_ids[p]`` for p < num_post_padded: the slot index (token * topk + j) of row p, slots
      of one expert in slot order; padding rows hold ``slots`` (never a valid slot);
    * ``expert_ids[b]``: the expert of rows [b*block_m, (b+1)*block_m) for every block
      b < cdiv(max_padded, block_m); blocks past num_post_padded get experts-1 and are not read.

    ``topk_ids`` is [slots] int32 with values in [0, experts); experts <= e_p2 (a power of two);
    ``workspace`` is int32 [cdiv(slots, chunk), e_p2]; ``counts`` int32 [e_p2], zeroed here;
    ``scan``: vector width of the per-expert loops (a power of two).
    """
    chunks = triton.cdiv(slots, chunk)
    counts.zero_()
    moe_count_kernel[(chunks,)](topk_ids, workspace, counts, slots, experts, E_P2=e_p2, CHUNK=chunk)
    moe_offsets_kernel[(experts,)](
        counts, workspace, sorted_ids, expert_ids, num_post_padded, slots, experts, max_padded,
        chunks, BLOCK_SIZE_M=block_m, E_P2=e_p2, SCAN=scan,
    )  # fmt: skip
    moe_scatter_kernel[(chunks,)](
        topk_ids, workspace, sorted_ids, slots, experts, E_P2=e_p2, CHUNK=chunk
    )


@triton.jit
def moe_count_kernel(topk_ids_ptr, workspace_ptr, counts_ptr, T, E, E_P2: tl.constexpr,
                     CHUNK: tl.constexpr):  # fmt: skip
    """Program c counts the slots [c*CHUNK, (c+1)*CHUNK) of each expert into workspace[c, :] and
    adds them to counts[:E] (atomically; the order of the additions does not matter)."""
    c = tl.program_id(0)
    experts = tl.arange(0, E_P2)
    t = c * CHUNK + tl.arange(0, CHUNK)
    ids = tl.load(topk_ids_ptr + t, mask=t < T, other=-1)
    n = tl.sum((ids[:, None] == experts[None, :]).to(tl.int32), axis=0)
    tl.store(workspace_ptr + c * E_P2 + experts, n)
    tl.atomic_add(counts_ptr + experts, n, mask=experts < E)


@triton.jit
def moe_offsets_kernel(
    counts_ptr,
    workspace_ptr,
    sorted_ids_ptr,
    expert_ids_ptr,
    num_post_padded_ptr,
    T,
    E,
    max_padded,
    chunks,
    BLOCK_SIZE_M: tl.constexpr,
    E_P2: tl.constexpr,
    SCAN: tl.constexpr,
):
    """Program e: its expert's first padded row (the padded counts of the experts before it),
    workspace[:, e] turned in place into each chunk's first destination row for expert e, its
    padding rows (slot T) and its blocks' expert ids. Program 0 also writes the total and the
    expert ids of the blocks past it."""
    e = tl.program_id(0)
    experts = tl.arange(0, E_P2)
    counts = tl.load(counts_ptr + experts, mask=experts < E, other=0)
    padded = (counts + BLOCK_SIZE_M - 1) // BLOCK_SIZE_M * BLOCK_SIZE_M
    ends = tl.cumsum(padded, axis=0)
    mine = experts == e
    start = tl.sum(tl.where(mine, ends - padded, 0), axis=0)
    count = tl.sum(tl.where(mine, counts, 0), axis=0)
    end = tl.sum(tl.where(mine, ends, 0), axis=0)

    running = start
    for c0 in range(0, chunks, SCAN):
        cs = c0 + tl.arange(0, SCAN)
        n = tl.load(workspace_ptr + cs * E_P2 + e, mask=cs < chunks, other=0)
        tl.store(
            workspace_ptr + cs * E_P2 + e, running + tl.cumsum(n, axis=0) - n, mask=cs < chunks
        )
        running += tl.sum(n, axis=0)

    pad = start + count + tl.arange(0, BLOCK_SIZE_M)
    tl.store(sorted_ids_ptr + pad, tl.zeros_like(pad) + T, mask=pad < end)
    for b0 in range(start // BLOCK_SIZE_M, end // BLOCK_SIZE_M, SCAN):
        b = b0 + tl.arange(0, SCAN)
        tl.store(expert_ids_ptr + b, tl.zeros_like(b) + e, mask=b < end // BLOCK_SIZE_M)
    if e == 0:
        total = tl.sum(padded, axis=0)
        tl.store(num_post_padded_ptr, total)
        blocks = tl.cdiv(max_padded, BLOCK_SIZE_M)
        for b0 in range(total // BLOCK_SIZE_M, blocks, SCAN):
            b = b0 + tl.arange(0, SCAN)
            tl.store(expert_ids_ptr + b, tl.zeros_like(b) + E - 1, mask=b < blocks)


@triton.jit
def moe_scatter_kernel(topk_ids_ptr, workspace_ptr, sorted_ids_ptr, T, E, E_P2: tl.constexpr,
                       CHUNK: tl.constexpr):  # fmt: skip
    """Program c writes each slot of its chunk to its expert's first row for the chunk
    (workspace[c, expert]) plus the number of earlier slots of that expert in the chunk."""
    c = tl.program_id(0)
    experts = tl.arange(0, E_P2)
    t = c * CHUNK + tl.arange(0, CHUNK)
    ids = tl.load(topk_ids_ptr + t, mask=t < T, other=-1)
    onehot = (ids[:, None] == experts[None, :]).to(tl.int32)
    rank = tl.cumsum(onehot, axis=0) - 1
    base = tl.load(workspace_ptr + c * E_P2 + experts, mask=experts < E, other=0)
    dest = tl.sum(onehot * (base[None, :] + rank), axis=1)
    tl.store(sorted_ids_ptr + dest, t, mask=t < T)


@triton.jit
def fused_moe_kernel(
    x_ptr,
    w_src,
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
    A_PER_SLOT: tl.constexpr,
    GATED: tl.constexpr,
    SUM_SLOTS: tl.constexpr,
    COLS: tl.constexpr,
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr,
    GROUP_SIZE_M: tl.constexpr,
    EVEN_K: tl.constexpr,
    TMA: tl.constexpr,
    DOT_IN_FP32: tl.constexpr,
):
    """out[slot] = (x[row] @ w[expert].T) * topk_weights[slot] for the aligned rows, with
    row = slot // TOP_K (the up projection: one x row per token) or, if ``A_PER_SLOT``, row = slot
    (the down projection: one activation row per routed slot). ``GATED``: the weights' N rows are
    gate rows then up rows (F = N // 2 each) and out[slot] = silu(gate) * up * topk_weights[slot]
    with gate = x[row] @ w[expert, :F].T and up = x[row] @ w[expert, F:].T, taken from the float32
    accumulators. ``SUM_SLOTS``: out[slot // TOP_K] += the slot's row instead (an atomic add in
    out's dtype, so the order of a token's additions varies from run to run; out is zeroed by the
    caller). A program covers ``COLS`` output columns: BLOCK_SIZE_N, or BLOCK_SIZE_N // 2
    where GATED (BLOCK_SIZE_N weight rows: half gate, half up, in two accumulators).

    Grid: cdiv(EM, BLOCK_SIZE_M) * cdiv(output columns, columns per program) with
    EM = len(sorted_ids) (the upper bound); M-blocks at or past num_post_padded return at once.
    Each M-block belongs to one expert (``expert_ids``); padding rows (slot >= num_valid_slots)
    read row 0 and columns past the output's read wrapped columns, so loads need no row or column
    mask, and neither is stored. ``EVEN_K``: BLOCK_SIZE_K divides K (no K mask either). ``TMA``:
    ``w_src`` is a tensor descriptor of the weights viewed as [E*N, K] (block [weight rows per
    accumulator, BLOCK_SIZE_K]; rows past the half or the expert read other rows or zeros, never
    stored; needs EVEN_K), else the weights' pointer. ``out`` is viewed as [num_valid_slots,
    output columns]; GROUP_SIZE_M M-blocks share the N-blocks' weights in L2.
    """
    n_out = N // 2 if GATED else N
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(EM, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(n_out, COLS)
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

    offs_n = pid_n * COLS + tl.arange(0, COLS)
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    rows = tl.where(slot_mask, slots if A_PER_SLOT else slots // TOP_K, 0)
    x_ptrs = x_ptr + rows[:, None] * stride_xm + offs_k[None, :] * stride_xk
    if TMA:
        w_row = (expert * N + pid_n * COLS).to(tl.int32)
    else:
        cols = offs_n % n_out
        w_ptrs = (
            w_src + expert * stride_we + offs_k[:, None] * stride_wk + cols[None, :] * stride_wn
        )

    acc = tl.zeros((BLOCK_SIZE_M, COLS), dtype=tl.float32)
    if GATED:
        acc_up = tl.zeros((BLOCK_SIZE_M, COLS), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_SIZE_K):
        if EVEN_K:  # noqa: SIM108 (constexpr branches, resolved when compiling)
            a = tl.load(x_ptrs)
        else:
            a = tl.load(x_ptrs, mask=offs_k[None, :] < K - k0, other=0.0)
        if TMA:
            b = w_src.load([w_row, k0]).T
            if GATED:
                b_up = w_src.load([w_row + n_out, k0]).T
        elif EVEN_K:
            b = tl.load(w_ptrs)
            if GATED:
                b_up = tl.load(w_ptrs + n_out * stride_wn)
        else:
            b = tl.load(w_ptrs, mask=offs_k[:, None] < K - k0, other=0.0)
            if GATED:
                b_up = tl.load(w_ptrs + n_out * stride_wn, mask=offs_k[:, None] < K - k0, other=0.0)
        if DOT_IN_FP32:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
            if GATED:
                b_up = b_up.to(tl.float32)
        acc = tl.dot(a, b, acc)
        if GATED:
            acc_up = tl.dot(a, b_up, acc_up)
        x_ptrs += BLOCK_SIZE_K * stride_xk
        if not TMA:
            w_ptrs += BLOCK_SIZE_K * stride_wk

    if GATED:
        acc = acc * tl.sigmoid(acc) * acc_up
    routed = tl.load(topk_weights_ptr + slots, mask=slot_mask, other=0.0)
    acc = acc * routed.to(tl.float32)[:, None]
    out_rows = slots // TOP_K if SUM_SLOTS else slots
    out_ptrs = out_ptr + out_rows[:, None] * stride_om + offs_n[None, :] * stride_on
    out_mask = slot_mask[:, None] & (offs_n[None, :] < n_out)
    if SUM_SLOTS:
        tl.atomic_add(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=out_mask, sem="relaxed")
    else:
        tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=out_mask)


@triton.jit
def silu_and_mul_kernel(hidden_ptr, out_ptr, R, F, stride_hr, stride_or, BLOCK_R: tl.constexpr,
                        BLOCK_F: tl.constexpr):  # fmt: skip
    """out[r, j] = silu(hidden[r, j]) * hidden[r, F + j] for r < R, j < F, in float32, stored in
    out's dtype. Grid: (cdiv(R, BLOCK_R), cdiv(F, BLOCK_F)); columns are contiguous in both."""
    # int64: R * 2F may exceed 2**31 elements.
    rows = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.program_id(1) * BLOCK_F + tl.arange(0, BLOCK_F)
    mask = (rows[:, None] < R) & (cols[None, :] < F)
    gate_ptrs = hidden_ptr + rows[:, None] * stride_hr + cols[None, :]
    gate = tl.load(gate_ptrs, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(gate_ptrs + F, mask=mask, other=0.0).to(tl.float32)
    y = gate * tl.sigmoid(gate) * up
    out_ptrs = out_ptr + rows[:, None] * stride_or + cols[None, :]
    tl.store(out_ptrs, y.to(out_ptr.dtype.element_ty), mask=mask)
