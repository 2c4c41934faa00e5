# Triton reads kernel parameter annotations itself, so the kernels stay unannotated.
# mypy: disallow-untyped-defs=False
"""Triton kernels of the ``fp8_matmul`` spec: a grouped-tile FP8 GEMM with block scales applied per
K step in the fp32 accumulation (tiles loaded through pointers or TMA descriptors), optional
split-K whose fp32 slices a second kernel sums, and its persistent TMA variant.

Imported only inside ``Fp8MatmulSpec.make_launcher`` (it imports triton); its text is the kernel's
source for the version hash.
"""

import triton
import triton.language as tl


@triton.jit
def _tile(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """The (tile row, tile column) of program ``pid``: GROUP_M tile rows walked column by column,
    so that the programs running together share rows of A and columns of B in L2."""
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    rows = tl.minimum(tl.cdiv(M, BLOCK_M) - first_m, GROUP_M)
    in_group = pid % per_group
    return first_m + in_group % rows, in_group // rows


@triton.jit
def _scaled_k_steps(
    a_src, b_src, a_scales, bs_ptr, rows, cols, pid_m, pid_n, k_first, K, step,
    stride_am, stride_bn, stride_ask, stride_bsn, stride_bsk,
    BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
    SCALE_BLOCK: tl.constexpr, TMA: tl.constexpr, SCALE_LAG: tl.constexpr,
    WARP_SPEC: tl.constexpr,
):  # fmt: skip
    """The fp32 sum over K steps k_first, k_first + step, ... < K of tile (pid_m, pid_n)'s
    products, each scaled by its rows' scales (``a_scales``: A's scale row of each tile row) and
    its columns' (B's scales ``bs_ptr``). Where BLOCK_SIZE_N divides SCALE_BLOCK a tile's columns
    lie in one of B's scale blocks: that one scale folds into the row scales, and each product
    element takes one multiply-add. WARP_SPEC: Triton's automatic warp specialization of the K
    loop (TMA loads in a producer partition). See ``fp8_matmul_kernel``."""
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    if BLOCK_SIZE_N <= SCALE_BLOCK:
        b_scales = bs_ptr + (pid_n * BLOCK_SIZE_N // SCALE_BLOCK) * stride_bsn
    else:
        b_scales = bs_ptr + (cols // SCALE_BLOCK) * stride_bsn
    acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    # SCALE_LAG: the last step's unscaled product and its scales (zero before the first step).
    held = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    held_a = tl.zeros((BLOCK_SIZE_M,), dtype=tl.float32)
    held_b = tl.zeros((BLOCK_SIZE_N,), dtype=tl.float32)
    for k0 in tl.range(k_first, K, step, warp_specialize=WARP_SPEC):
        if TMA:
            a = a_src.load([pid_m * BLOCK_SIZE_M, k0])
            b = b_src.load([pid_n * BLOCK_SIZE_N, k0]).T
        else:
            k = k0 + offs_k
            a = tl.load(a_src + rows[:, None] * stride_am + k[None, :])
            b = tl.load(b_src + cols[None, :] * stride_bn + k[:, None])
        group = k0 // SCALE_BLOCK
        a_s = tl.load(a_scales + group * stride_ask)
        b_s = tl.load(b_scales + group * stride_bsk)
        if BLOCK_SIZE_N <= SCALE_BLOCK:
            a_s = a_s * b_s
            if SCALE_LAG:
                product = tl.dot(a, b)
                acc += held * held_a[:, None]
                held, held_a = product, a_s
            else:
                acc += tl.dot(a, b) * a_s[:, None]
        else:
            if SCALE_LAG:
                product = tl.dot(a, b)
                acc += held * held_a[:, None] * held_b[None, :]
                held, held_a, held_b = product, a_s, b_s
            else:
                acc += tl.dot(a, b) * a_s[:, None] * b_s[None, :]
    if SCALE_LAG:
        if BLOCK_SIZE_N <= SCALE_BLOCK:
            acc += held * held_a[:, None]
        else:
            acc += held * held_a[:, None] * held_b[None, :]
    return acc


@triton.jit
def fp8_matmul_kernel(
    a_src,
    b_src,
    as_ptr,
    bs_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_bn,
    stride_asm,
    stride_ask,
    stride_bsn,
    stride_bsk,
    stride_cs,
    stride_cm,
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr,
    GROUP_SIZE_M: tl.constexpr,
    SPLIT_K: tl.constexpr,
    SCALE_BLOCK: tl.constexpr,
    TMA: tl.constexpr,
    SCALE_LAG: tl.constexpr,
    WARP_SPEC: tl.constexpr,
):
    """C = (A * a_scale) @ (B * b_scale)^T with fp32 accumulation.

    A: e4m3 [M, K] (rows ``stride_am`` apart, unit K stride), its scales ``as_ptr``: fp32
    [M, K / SCALE_BLOCK]; B: e4m3 [N, K] (rows ``stride_bn`` apart), its scales ``bs_ptr``: fp32
    [cdiv(N, SCALE_BLOCK), K / SCALE_BLOCK] (N is any size: the last block of rows may be
    partial; column n's block is n // SCALE_BLOCK). K is a multiple of SCALE_BLOCK and
    BLOCK_SIZE_K divides SCALE_BLOCK, so every K step lies inside one scale group and no K load is
    masked: each step's product is scaled by its rows' and columns' scales and added to the
    accumulator (the tensor cores' partial sums never span more than SCALE_BLOCK products).
    SCALE_LAG: a step's product is scaled and added one step later, so the scaling (CUDA cores)
    can overlap the next step's MMA (tensor cores) at the cost of a third fp32 tile of registers.
    WARP_SPEC (with TMA): the K loop is warp-specialized by Triton (a producer partition issues
    the TMA loads, the consumers run the MMAs and the scaling).

    Grid: (cdiv(M, BLOCK_SIZE_M) * cdiv(N, BLOCK_SIZE_N), SPLIT_K). Program pid_k runs the K steps
    pid_k, pid_k + SPLIT_K, ...; it writes C (its dtype) with SPLIT_K == 1, else its fp32 slice of
    the workspace ``c_ptr`` ([SPLIT_K, M, N], slices ``stride_cs`` apart) that
    ``fp8_splitk_reduce_kernel`` sums. Rows past M and columns past N are read wrapped (so loads
    need no mask, and a wrapped column's scale index stays below cdiv(N, SCALE_BLOCK)) and never
    stored (TMA loads them as zeros). With TMA, ``a_src``/``b_src`` are tensor descriptors of A
    (block [BLOCK_SIZE_M, BLOCK_SIZE_K]) and B (block [BLOCK_SIZE_N, BLOCK_SIZE_K]) and the row
    strides of A and B are unused.
    """
    pid_m, pid_n = _tile(tl.program_id(0), M, N, BLOCK_SIZE_M, BLOCK_SIZE_N, GROUP_SIZE_M)
    pid_k = tl.program_id(1)
    offs_m = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_n = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    # int64 rows: M*K may exceed 2**31 elements.
    rows = (offs_m % M).to(tl.int64)
    cols = (offs_n % N).to(tl.int64)
    acc = _scaled_k_steps(
        a_src, b_src, as_ptr + rows * stride_asm, bs_ptr, rows, cols, pid_m, pid_n,
        pid_k * BLOCK_SIZE_K, K, SPLIT_K * BLOCK_SIZE_K, stride_am, stride_bn, stride_ask,
        stride_bsn, stride_bsk,
        BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K, SCALE_BLOCK, TMA, SCALE_LAG, WARP_SPEC,
    )  # fmt: skip
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    # int64: SPLIT_K * M * N may exceed 2**31 elements.
    out = c_ptr + pid_k.to(tl.int64) * stride_cs + offs_m[:, None].to(tl.int64) * stride_cm
    out += offs_n[None, :]
    tl.store(out, acc.to(c_ptr.dtype.element_ty), mask=mask)


@triton.jit
def fp8_matmul_persistent_kernel(
    a_desc,
    b_desc,
    as_ptr,
    bs_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_asm,
    stride_ask,
    stride_bsn,
    stride_bsk,
    stride_cm,
    PROGRAMS,
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr,
    GROUP_SIZE_M: tl.constexpr,
    SCALE_BLOCK: tl.constexpr,
    SCALE_LAG: tl.constexpr,
):
    """``fp8_matmul_kernel`` with TMA and without split-K as a persistent kernel: grid
    (PROGRAMS,), one per SM at most; program p computes tiles p, p + PROGRAMS, ... in one software
    pipeline (Triton flattens the tile and K loops), so the next tile's loads overlap this tile's
    epilogue."""
    tiles = tl.cdiv(M, BLOCK_SIZE_M) * tl.cdiv(N, BLOCK_SIZE_N)
    for tile in tl.range(tl.program_id(0), tiles, PROGRAMS, flatten=True):
        pid_m, pid_n = _tile(tile, M, N, BLOCK_SIZE_M, BLOCK_SIZE_N, GROUP_SIZE_M)
        offs_m = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
        offs_n = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
        rows = (offs_m % M).to(tl.int64)
        cols = (offs_n % N).to(tl.int64)
        acc = _scaled_k_steps(
            a_desc, b_desc, as_ptr + rows * stride_asm, bs_ptr, rows, cols, pid_m, pid_n, 0, K,
            BLOCK_SIZE_K, 0, 0, stride_ask, stride_bsn, stride_bsk,
            BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K, SCALE_BLOCK, True, SCALE_LAG, False,
        )  # fmt: skip
        mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        out = c_ptr + offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :]
        tl.store(out, acc.to(c_ptr.dtype.element_ty), mask=mask)


@triton.jit
def fp8_splitk_reduce_kernel(ws_ptr, c_ptr, MN, SPLIT_K: tl.constexpr, BLOCK: tl.constexpr):
    """C = sum of the SPLIT_K fp32 slices of ``ws_ptr`` ([SPLIT_K, MN], contiguous), in slice
    order, cast to C's dtype (C contiguous). Grid: (cdiv(MN, BLOCK),)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < MN
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    slice_stride = MN.to(tl.int64)  # SPLIT_K * MN may exceed 2**31 elements
    for s in tl.static_range(SPLIT_K):
        acc += tl.load(ws_ptr + s * slice_stride + offs, mask=mask, other=0.0)
    tl.store(c_ptr + offs, acc.to(c_ptr.dtype.element_ty), mask=mask)
