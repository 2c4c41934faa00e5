# Triton reads kernel parameter annotations itself, so the kernels stay unannotated.
# mypy: disallow-untyped-defs=False
"""Triton kernels of the ``matmul`` spec: a grouped-tile GEMM (pointer loads or TMA descriptors)
with optional split-K (reduced in the same launch by the last program to finish each tile, or by a
second kernel), a TMA variant on tiles a quarter wider than a power of two, a persistent TMA
variant and a stream-K variant (K steps split evenly over one program per SM, shared tiles fixed up
by the last program to finish them).

Imported only inside ``MatmulSpec.make_launcher`` (it imports triton); its text is the kernel's source
for the version hash.
"""

import triton
import triton.language as tl


@triton.jit
def matmul_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    ws_ptr,
    arrivals_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    stride_ws,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    SPLIT_K: tl.constexpr,
    FUSED_REDUCE: tl.constexpr,
    DOT_IN_FP32: tl.constexpr,
    PDL: tl.constexpr = False,
):
    """C = A @ B, fp32 accumulation, C cast to its dtype.

    Grid: (cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N), SPLIT_K). Program pid_k reduces the K blocks
    pid_k, pid_k + SPLIT_K, ...; with SPLIT_K > 1 see ``_finish_tile`` for ``ws_ptr`` (fp32
    [SPLIT_K, M, N], rows contiguous, slices ``stride_ws`` apart) and ``arrivals_ptr`` (int32, one
    per tile, zero before the launch and after it; not read without FUSED_REDUCE). With
    SPLIT_K == 1 neither is read. PDL (launched with launch_pdl): wait for the previous kernel's
    writes before any load, then let the next kernel (the reduction) launch.
    """
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    pid_m, pid_n = _tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    pid_k = tl.program_id(1)

    # int64 rows: M*K and M*N may exceed 2**31 elements.
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + (pid_k * BLOCK_K + offs_k)[None, :] * stride_ak
    b_ptrs = b_ptr + (pid_k * BLOCK_K + offs_k)[:, None] * stride_bk + offs_n[None, :] * stride_bn
    step = SPLIT_K * BLOCK_K

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(pid_k * BLOCK_K, K, step):
        k = k0 + offs_k
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (k[None, :] < K), other=0.0)
        b = tl.load(b_ptrs, mask=(k[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        if DOT_IN_FP32:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc)
        a_ptrs += step * stride_ak
        b_ptrs += step * stride_bk
    _finish_tile(
        c_ptr, ws_ptr, arrivals_ptr, acc, pid_m, pid_n, M, N, stride_cm, stride_cn, stride_ws,
        BLOCK_M, BLOCK_N, SPLIT_K, FUSED_REDUCE,
    )  # fmt: skip


@triton.jit
def matmul_tma_kernel(
    a_desc,
    b_desc,
    c_ptr,
    ws_ptr,
    arrivals_ptr,
    M,
    N,
    K,
    stride_cm,
    stride_cn,
    stride_ws,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    SPLIT_K: tl.constexpr,
    FUSED_REDUCE: tl.constexpr,
    DOT_IN_FP32: tl.constexpr,
    PDL: tl.constexpr = False,
):
    """``matmul_kernel`` with A and B tiles loaded through TMA tensor descriptors (Hopper+).

    ``a_desc``/``b_desc`` describe A (MxK, block [BLOCK_M, BLOCK_K]) and B (KxN, block
    [BLOCK_K, BLOCK_N]); the hardware zero-fills tiles past the edges, so no load is masked.
    PDL: as in ``matmul_kernel``.
    """
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    pid_m, pid_n = _tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    pid_k = tl.program_id(1)
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(pid_k * BLOCK_K, K, SPLIT_K * BLOCK_K):
        a = a_desc.load([off_m, k0])
        b = b_desc.load([k0, off_n])
        if DOT_IN_FP32:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc)
    _finish_tile(
        c_ptr, ws_ptr, arrivals_ptr, acc, pid_m, pid_n, M, N, stride_cm, stride_cn, stride_ws,
        BLOCK_M, BLOCK_N, SPLIT_K, FUSED_REDUCE,
    )  # fmt: skip


@triton.jit
def matmul_tma_wide_kernel(
    a_desc,
    b_desc,
    bx_desc,
    c_ptr,
    M,
    N,
    K,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    DOT_IN_FP32: tl.constexpr,
):
    """``matmul_tma_kernel`` without split-K on tiles of BLOCK_N + BLOCK_N // 4 columns: two
    accumulators, B loaded as a [BLOCK_K, BLOCK_N] block (``b_desc``) and the [BLOCK_K,
    BLOCK_N // 4] block right of it (``bx_desc``). Such widths give tile counts that powers of two
    cannot (N=10240: 32 tiles of 320, where 256 gives 40 and 512 gives 20).
    """
    WIDE: tl.constexpr = BLOCK_N + BLOCK_N // 4
    pid_m, pid_n = _tile(tl.program_id(0), M, N, BLOCK_M, WIDE, GROUP_M)
    off_m = pid_m * BLOCK_M
    off_n = pid_n * WIDE
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_x = tl.zeros((BLOCK_M, BLOCK_N // 4), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = a_desc.load([off_m, k0])
        b = b_desc.load([k0, off_n])
        bx = bx_desc.load([k0, off_n + BLOCK_N])
        if DOT_IN_FP32:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
            bx = bx.to(tl.float32)
        acc = tl.dot(a, b, acc)
        acc_x = tl.dot(a, bx, acc_x)
    offs_m = (off_m + tl.arange(0, BLOCK_M)).to(tl.int64)
    _store_tile(c_ptr, acc, offs_m, off_n + tl.arange(0, BLOCK_N), M, N, stride_cm, stride_cn)
    offs_x = off_n + BLOCK_N + tl.arange(0, BLOCK_N // 4)
    _store_tile(c_ptr, acc_x, offs_m, offs_x, M, N, stride_cm, stride_cn)


@triton.jit
def matmul_tma_persistent_kernel(
    a_desc,
    b_desc,
    c_ptr,
    M,
    N,
    K,
    stride_cm,
    stride_cn,
    PROGRAMS,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    DOT_IN_FP32: tl.constexpr,
):
    """``matmul_tma_kernel`` without split-K as a persistent kernel.

    Grid: (PROGRAMS,), one per SM at most; program p computes tiles p, p + PROGRAMS, ... Triton
    flattens the tile and K loops into one software pipeline, so the next tile's loads overlap
    this tile's epilogue.
    """
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for tile in tl.range(tl.program_id(0), tiles, PROGRAMS, flatten=True):
        pid_m, pid_n = _tile(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            a = a_desc.load([off_m, k0])
            b = b_desc.load([k0, off_n])
            if DOT_IN_FP32:
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            acc = tl.dot(a, b, acc)
        _finish_tile(
            c_ptr, c_ptr, c_ptr, acc, pid_m, pid_n, M, N, stride_cm, stride_cn, 0,
            BLOCK_M, BLOCK_N, 1, False,
        )  # fmt: skip


@triton.jit
def _tile(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """(tile row, tile column) of tile ``pid``, visiting tiles in groups of GROUP_M tile rows so
    that neighbouring tiles share B in L2."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    first_pid_m = (pid // num_pid_in_group) * GROUP_M
    group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (pid % num_pid_in_group) % group_size_m
    pid_n = (pid % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@triton.jit
def _store_tile(c_ptr, acc, offs_m, offs_n, M, N, stride_cm, stride_cn):
    """C[offs_m, offs_n] = ``acc`` cast to C's dtype, inside C only."""
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _finish_tile(
    c_ptr, ws_ptr, arrivals_ptr, acc, pid_m, pid_n, M, N, stride_cm, stride_cn, stride_ws,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT_K: tl.constexpr,
    FUSED_REDUCE: tl.constexpr,
):  # fmt: skip
    """Write the fp32 tile ``acc`` of (pid_m, pid_n) to C, cast to C's dtype.

    With SPLIT_K > 1, ``acc`` is the partial sum of K-slice pid_k: it goes to the workspace, which
    ``splitk_reduce_kernel`` sums afterwards; with FUSED_REDUCE the program that arrives last at
    this tile sums all SPLIT_K slices in slice order (the same bits whichever program that is),
    writes C and resets the tile's arrival count to zero.
    """
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if SPLIT_K == 1:
        _store_tile(c_ptr, acc, offs_m, offs_n, M, N, stride_cm, stride_cn)
    else:
        mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
        ws_ptrs = ws_ptr + offs_m[:, None] * N + offs_n[None, :]
        tl.store(ws_ptrs + tl.program_id(1).to(tl.int64) * stride_ws, acc, mask=mask)
        if FUSED_REDUCE:
            # Every thread's partial is stored before the release below publishes it.
            tl.debug_barrier()
            arrived = tl.atomic_add(arrivals_ptr + tl.program_id(0), 1, sem="acq_rel", scope="gpu")
            if arrived == SPLIT_K - 1:
                # .cg: read the other programs' partials from L2, never a stale L1 line.
                total = tl.load(ws_ptrs, mask=mask, other=0.0, cache_modifier=".cg")
                for _ in tl.static_range(1, SPLIT_K):
                    ws_ptrs += stride_ws
                    total += tl.load(ws_ptrs, mask=mask, other=0.0, cache_modifier=".cg")
                tl.store(c_ptrs, total.to(c_ptr.dtype.element_ty), mask=mask)
                tl.atomic_xchg(arrivals_ptr + tl.program_id(0), 0, sem="relaxed", scope="gpu")


@triton.jit
def splitk_reduce_kernel(
    ws_ptr,
    c_ptr,
    MN,
    SPLIT_K: tl.constexpr,
    BLOCK: tl.constexpr,
    PDL: tl.constexpr = False,
):
    """c[i] = sum over s of ws[s, i] for contiguous ``ws`` [SPLIT_K, MN] (fp32) and ``c`` [MN].

    Sums in slice order, as the fused reduction does, so both give the same bits. PDL (launched
    with launch_pdl): the partials are read only after the main kernel's writes are visible.
    """
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < MN
    acc = tl.load(ws_ptr + offs, mask=mask, other=0.0)
    for s in tl.static_range(1, SPLIT_K):
        acc += tl.load(ws_ptr + s * MN + offs, mask=mask, other=0.0)
    tl.store(c_ptr + offs, acc.to(c_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _first_program(it, base, extra):
    """The stream-K program whose iteration range holds iteration ``it`` (see below)."""
    long_iters = extra * (base + 1)
    return tl.where(it < long_iters, it // (base + 1), extra + (it - long_iters) // base)


@triton.jit
def matmul_streamk_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    ws_ptr,
    arrivals_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    PROGRAMS,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    TMA: tl.constexpr,
    DOT_IN_FP32: tl.constexpr,
):
    """Stream-K C = A @ B: the tiles' K steps, laid end to end, split evenly over PROGRAMS
    programs (grid (PROGRAMS,), one per SM at most), so that few tiles still fill the device.

    Program p runs iterations [start_p, start_p + base (+1 for the first ``extra`` programs)) of
    tiles * cdiv(K, BLOCK_K); a tile it covers whole goes straight to C. A tile shared by several
    programs: each stores its fp32 partial sum in its workspace slot (``ws_ptr``: fp32 [PROGRAMS,
    2, BLOCK_M, BLOCK_N]; slot 0 for the segment a program starts with, 1 for the one it ends
    with) and counts itself in at ``arrivals_ptr`` (int32, one per tile, zero before and after the
    launch); the last to arrive sums the partials in program order (the same bits whichever
    program that is), writes C and resets the count. No program waits for another. With TMA,
    ``a_ptr``/``b_ptr`` are tensor descriptors (blocks [BLOCK_M, BLOCK_K], [BLOCK_K, BLOCK_N])
    and the stride arguments are unused.
    """
    pid = tl.program_id(0)
    k_iters = tl.cdiv(K, BLOCK_K)
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    total = tiles * k_iters
    base = total // PROGRAMS
    extra = total % PROGRAMS
    start = pid * base + tl.minimum(pid, extra)
    end = start + base + (pid < extra).to(tl.int32)
    rm = tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    it = start
    while it < end:
        tile = it // k_iters
        tile_start = tile * k_iters
        k_lo = it - tile_start
        k_hi = tl.minimum(end - tile_start, k_iters)
        pid_m, pid_n = _tile(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        if TMA:
            for ki in range(k_lo, k_hi):
                a = a_ptr.load([pid_m * BLOCK_M, ki * BLOCK_K])
                b = b_ptr.load([ki * BLOCK_K, pid_n * BLOCK_N])
                if DOT_IN_FP32:
                    a = a.to(tl.float32)
                    b = b.to(tl.float32)
                acc = tl.dot(a, b, acc)
        else:
            offs_m = (pid_m * BLOCK_M + rm).to(tl.int64)
            offs_n = pid_n * BLOCK_N + rn
            for ki in range(k_lo, k_hi):
                k = ki * BLOCK_K + rk
                a = tl.load(
                    a_ptr + offs_m[:, None] * stride_am + k[None, :] * stride_ak,
                    mask=(offs_m[:, None] < M) & (k[None, :] < K),
                    other=0.0,
                )
                b = tl.load(
                    b_ptr + k[:, None] * stride_bk + offs_n[None, :] * stride_bn,
                    mask=(k[:, None] < K) & (offs_n[None, :] < N),
                    other=0.0,
                )
                if DOT_IN_FP32:
                    a = a.to(tl.float32)
                    b = b.to(tl.float32)
                acc = tl.dot(a, b, acc)
        if (k_lo == 0) & (k_hi == k_iters):
            _finish_tile(
                c_ptr, c_ptr, c_ptr, acc, pid_m, pid_n, M, N, stride_cm, stride_cn, 0,
                BLOCK_M, BLOCK_N, 1, False,
            )  # fmt: skip
        else:
            tile_elems = BLOCK_M * BLOCK_N
            local = rm[:, None] * BLOCK_N + rn[None, :]
            slot = (pid * 2 + (it != start).to(tl.int32)).to(tl.int64) * tile_elems
            tl.store(ws_ptr + slot + local, acc)
            # Every thread's partial is stored before the release below publishes it.
            tl.debug_barrier()
            first = _first_program(tile_start, base, extra)
            last = _first_program(tile_start + k_iters - 1, base, extra)
            arrived = tl.atomic_add(arrivals_ptr + tile, 1, sem="acq_rel", scope="gpu")
            if arrived == last - first:
                total_acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
                for q in range(first, last + 1):
                    q_start = q * base + tl.minimum(q, extra)
                    q_slot = (q * 2 + (q_start < tile_start).to(tl.int32)).to(tl.int64)
                    # .cg: read the other programs' partials from L2, never a stale L1 line.
                    total_acc += tl.load(ws_ptr + q_slot * tile_elems + local, cache_modifier=".cg")
                _finish_tile(
                    c_ptr, c_ptr, c_ptr, total_acc, pid_m, pid_n, M, N, stride_cm, stride_cn, 0,
                    BLOCK_M, BLOCK_N, 1, False,
                )  # fmt: skip
                tl.atomic_xchg(arrivals_ptr + tile, 0, sem="relaxed", scope="gpu")
        it = tile_start + k_hi
