# mypy: disable-error-code="no-untyped-def"
"""Tiny Triton kernels for the runner tests (imported inside the trial process only)."""

import triton
import triton.language as tl


@triton.jit
def double_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)


@triton.jit
def double_skip_last_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # Off by one: the last element is never written.
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n - 1
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)
