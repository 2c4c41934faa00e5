"""The 'application' the H200 run captures: matmuls and layer norms at a few shapes (fp16).

``APP_DEVICE=cpu`` (with ``TRITON_INTERPRET=1``) runs it at small shapes on Triton's interpreter:
the CPU dry run of ``run_h200.sh``.
"""

import os

import torch
from tutorial_kernels import layer_norm, matmul

DEVICE = os.environ.get("APP_DEVICE", "cuda")
if DEVICE == "cuda":
    MATMULS = ((512, 512, 512), (2048, 2048, 2048), (4096, 4096, 4096))
    NORMS = ((4096, 4096), (8192, 1024))
else:
    MATMULS = ((64, 64, 64), (128, 64, 32))
    NORMS = ((4, 1024), (4, 512))


def synchronize() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


if __name__ == "__main__":
    for m, n, k in MATMULS:
        a = torch.randn(m, k, device=DEVICE, dtype=torch.float16)
        b = torch.randn(k, n, device=DEVICE, dtype=torch.float16)
        ref = (a.float() @ b.float()).half()
        torch.testing.assert_close(matmul(a, b), ref, atol=1e-1, rtol=1e-2)
    for rows, cols in NORMS:
        x = torch.randn(rows, cols, device=DEVICE, dtype=torch.float16)
        w = torch.randn(cols, device=DEVICE, dtype=torch.float16)
        b = torch.randn(cols, device=DEVICE, dtype=torch.float16)
        ref = torch.nn.functional.layer_norm(x.float(), (cols,), w.float(), b.float()).half()
        torch.testing.assert_close(layer_norm(x, w, b), ref, atol=2e-2, rtol=1e-2)
    synchronize()
    print("app done")
