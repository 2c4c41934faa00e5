"""A script whose @triton.autotune kernel lives in __main__ and updates its input in place."""

import torch
import triton
import triton.language as tl
from app_kernels import cpu_bench


@triton.autotune(
    configs=[triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})],
    key=["n"],
    restore_value=["y_ptr"],
    do_bench=cpu_bench,
)
@triton.jit
def axpy_inplace(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, y + 2.0 * tl.load(x_ptr + offs, mask=mask), mask=mask)


if __name__ == "__main__":
    x, y = torch.randn(50), torch.randn(50)
    expected = y + 2.0 * x
    axpy_inplace[lambda meta: (triton.cdiv(50, meta["BLOCK"]),)](x, y, 50)
    assert torch.allclose(y, expected)
