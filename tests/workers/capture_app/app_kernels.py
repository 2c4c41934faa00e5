"""Two @triton.autotune kernels of a small app, written for the capture tests.

With APP_BUNDLE set, the kernels use tunefleet's drop-in decorator instead (APP_VERSIONS and
APP_NEAREST pass its options): the one-line change a user makes to serve tuned configs.
"""

import functools
import os
import time

import triton
import triton.language as tl

if os.environ.get("APP_BUNDLE"):
    from search_spaces.triton_autotune import autotune as served

    autotune = functools.partial(
        served,
        bundle=os.environ["APP_BUNDLE"],
        versions=os.environ.get("APP_VERSIONS", "use"),
        nearest=os.environ.get("APP_NEAREST") == "1",
    )
else:
    autotune = triton.autotune

BENCH_CALLS = []


def cpu_bench(fn, quantiles):
    """Triton's interpreter has no benchmarker: one timed call (counted) stands in for do_bench."""
    BENCH_CALLS.append(fn)
    start = time.perf_counter()
    fn()
    return [time.perf_counter() - start] * len(quantiles)


@autotune(
    configs=[
        triton.Config({"BLOCK": 64}, num_warps=2),
        triton.Config({"BLOCK": 128}, num_warps=4),
    ],
    key=["n"],
    do_bench=cpu_bench,
)
@triton.jit
def scaled_add(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * alpha + y, mask=mask)


@autotune(
    configs=[
        triton.Config({"BLOCK_R": 2, "BLOCK_C": 32}, num_warps=1),
        triton.Config({"BLOCK_R": 4, "BLOCK_C": 16}, num_warps=2),
    ],
    key=["rows", "cols"],
    do_bench=cpu_bench,
)
@triton.jit
def row_sum(x_ptr, out_ptr, rows, cols, stride_r, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    acc = tl.zeros((BLOCK_R,), dtype=tl.float32)
    for start in range(0, cols, BLOCK_C):
        c = start + tl.arange(0, BLOCK_C)
        mask = (r[:, None] < rows) & (c[None, :] < cols)
        x = tl.load(x_ptr + r[:, None] * stride_r + c[None, :], mask=mask, other=0.0)
        acc += tl.sum(x.to(tl.float32), axis=1)
    tl.store(out_ptr + r, acc, mask=r < rows)


def add(x, y, alpha=2.0):
    out = x.new_empty(x.shape)
    n = x.numel()
    scaled_add[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, n, alpha)
    return out


def sums(x):
    rows, cols = x.shape
    out = x.new_empty((rows,), dtype=x.dtype)
    row_sum[lambda meta: (triton.cdiv(rows, meta["BLOCK_R"]),)](x, out, rows, cols, x.stride(0))
    return out
