# Triton reads kernel parameter annotations itself, so the kernel stays unannotated.
# mypy: disallow-untyped-defs=False
"""The Triton kernel of ``examples.user_kernel``; imported only when a trial runs."""

import triton
import triton.language as tl


@triton.jit
def scale_add_kernel(a_ptr, b_ptr, out_ptr, n, scale, BLOCK_SIZE: tl.constexpr):
    """out[i] = a[i] * scale + b[i], computed in fp32, BLOCK_SIZE elements per program."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask).to(tl.float32)
    b = tl.load(b_ptr + offs, mask=mask).to(tl.float32)
    tl.store(out_ptr + offs, (a * scale + b).to(out_ptr.dtype.element_ty), mask=mask)
