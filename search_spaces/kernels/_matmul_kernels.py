# Triton reads kernel parameter annotations itself, so the kernels stay unannotated.
# mypy: disallow-untyped-defs=False
"""Triton kernels of the ``matmul`` spec: a grouped-tile GEMM (pointer loads or TMA descriptors)
with optional split-K, and its reduction.

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
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cs,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    SPLIT_K: tl.constexpr,
    DOT_IN_FP32: tl.constexpr,
):
    """C[pid_k] = A[:, K-slice pid_k] @ B[K-slice pid_k, :], fp32 accumulation.

    Grid: (cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N), SPLIT_K). Program pid_k reduces the K blocks
    pid_k, pid_k + SPLIT_K, ...; with SPLIT_K == 1, ``c_ptr`` is the output (cast to its dtype),
    otherwise an fp32 workspace [SPLIT_K, M, N] that ``splitk_reduce_kernel`` sums.
    """
    pid_m, pid_n = _tile(M, N, BLOCK_M, BLOCK_N, GROUP_M)
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
    _store_tile(
        c_ptr, acc, pid_m, pid_n, pid_k, M, N, stride_cs, stride_cm, stride_cn, BLOCK_M, BLOCK_N
    )


@triton.jit
def matmul_tma_kernel(
    a_desc,
    b_desc,
    c_ptr,
    M,
    N,
    K,
    stride_cs,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    SPLIT_K: tl.constexpr,
    DOT_IN_FP32: tl.constexpr,
):
    """``matmul_kernel`` with A and B tiles loaded through TMA tensor descriptors (Hopper+).

    ``a_desc``/``b_desc`` describe A (MxK, block [BLOCK_M, BLOCK_K]) and B (KxN, block
    [BLOCK_K, BLOCK_N]); the hardware zero-fills tiles past the edges, so no load is masked.
    """
    pid_m, pid_n = _tile(M, N, BLOCK_M, BLOCK_N, GROUP_M)
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
    _store_tile(
        c_ptr, acc, pid_m, pid_n, pid_k, M, N, stride_cs, stride_cm, stride_cn, BLOCK_M, BLOCK_N
    )


@triton.jit
def _tile(M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """(tile row, tile column) of this program, visiting tiles in groups of GROUP_M tile rows so
    that neighbouring programs share B in L2."""
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    first_pid_m = (pid // num_pid_in_group) * GROUP_M
    group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (pid % num_pid_in_group) % group_size_m
    pid_n = (pid % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@triton.jit
def _store_tile(
    c_ptr, acc, pid_m, pid_n, pid_k, M, N, stride_cs, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """Store the fp32 tile ``acc`` at (pid_m, pid_n) of slice ``pid_k``, cast to C's dtype."""
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + pid_k * stride_cs + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    c_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)


@triton.jit
def splitk_reduce_kernel(
    ws_ptr,
    c_ptr,
    MN,
    SPLIT_K: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """c[i] = sum over s of ws[s, i] for contiguous ``ws`` [SPLIT_K, MN] (fp32) and ``c`` [MN].

    Sums in a fixed order, so the result is deterministic.
    """
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < MN
    acc = tl.load(ws_ptr + offs, mask=mask, other=0.0)
    for s in tl.static_range(1, SPLIT_K):
        acc += tl.load(ws_ptr + s * MN + offs, mask=mask, other=0.0)
    tl.store(c_ptr + offs, acc.to(c_ptr.dtype.element_ty), mask=mask)
