# Triton reads kernel parameter annotations itself, so the kernels stay unannotated.
# mypy: disallow-untyped-defs=False
"""Triton kernel of the ``rmsnorm`` spec.

Imported only inside ``RmsnormSpec.make_launcher`` (it imports triton); its text is the kernel's
source for the version hash.
"""

import triton
import triton.language as tl


@triton.jit
def rmsnorm_kernel(
    x_ptr,
    w_ptr,
    y_ptr,
    M,
    N,
    stride_xm,
    stride_ym,
    eps,
    BLOCK_N: tl.constexpr,
    ROWS_PER_PROGRAM: tl.constexpr,
    ONE_PASS: tl.constexpr,
    X_EVICT: tl.constexpr,
    W_EVICT: tl.constexpr,
    Y_CACHE: tl.constexpr,
    PDL: tl.constexpr,
):
    """y[r] = x[r] / sqrt(mean(x[r]**2) + eps) * w for ROWS_PER_PROGRAM rows per program, in fp32.

    Grid: (cdiv(M, ROWS_PER_PROGRAM),). ONE_PASS (BLOCK_N >= N) keeps the row tile in registers;
    otherwise one loop over BLOCK_N-wide column chunks sums the squares and a second one writes y.
    X_EVICT / W_EVICT: eviction policy of x's last read and of w's; Y_CACHE: y's store cache
    modifier ("" for the defaults). PDL (launched with launch_pdl): wait for the previous kernel's
    writes before any load, then let the next kernel launch.
    """
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    rows = tl.program_id(0).to(tl.int64) * ROWS_PER_PROGRAM + tl.arange(0, ROWS_PER_PROGRAM)
    row_mask = rows[:, None] < M
    x_rows = x_ptr + rows[:, None] * stride_xm
    y_rows = y_ptr + rows[:, None] * stride_ym
    cols = tl.arange(0, BLOCK_N)
    if ONE_PASS:
        mask = row_mask & (cols[None, :] < N)
        x = tl.load(x_rows + cols[None, :], mask=mask, other=0.0, eviction_policy=X_EVICT).to(
            tl.float32
        )
        rstd = tl.rsqrt(tl.sum(x * x, axis=1) / N + eps)
        w = tl.load(w_ptr + cols, mask=cols < N, other=0.0, eviction_policy=W_EVICT)
        y = x * rstd[:, None] * w.to(tl.float32)[None, :]
        tl.store(
            y_rows + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask, cache_modifier=Y_CACHE
        )
    else:
        acc = tl.zeros((ROWS_PER_PROGRAM, BLOCK_N), dtype=tl.float32)
        for c0 in range(0, N, BLOCK_N):
            c = c0 + cols
            mask = row_mask & (c[None, :] < N)
            x = tl.load(x_rows + c[None, :], mask=mask, other=0.0).to(tl.float32)
            acc += x * x
        rstd = tl.rsqrt(tl.sum(acc, axis=1) / N + eps)
        for c0 in range(0, N, BLOCK_N):
            c = c0 + cols
            mask = row_mask & (c[None, :] < N)
            x = tl.load(x_rows + c[None, :], mask=mask, other=0.0, eviction_policy=X_EVICT).to(
                tl.float32
            )
            w = tl.load(w_ptr + c, mask=c < N, other=0.0, eviction_policy=W_EVICT)
            y = x * rstd[:, None] * w.to(tl.float32)[None, :]
            tl.store(
                y_rows + c[None, :], y.to(y_ptr.dtype.element_ty), mask=mask, cache_modifier=Y_CACHE
            )
