"""The 'application' the H200 run captures: matmuls and layer norms at a few shapes (fp16)."""

import torch
from tutorial_kernels import layer_norm, matmul

MATMULS = ((512, 512, 512), (2048, 2048, 2048), (4096, 4096, 4096))
NORMS = ((4096, 4096), (8192, 1024))

if __name__ == "__main__":
    for m, n, k in MATMULS:
        a = torch.randn(m, k, device="cuda", dtype=torch.float16)
        b = torch.randn(k, n, device="cuda", dtype=torch.float16)
        torch.testing.assert_close(matmul(a, b), a @ b, atol=1e-1, rtol=1e-2)
    for rows, cols in NORMS:
        x = torch.randn(rows, cols, device="cuda", dtype=torch.float16)
        w = torch.randn(cols, device="cuda", dtype=torch.float16)
        b = torch.randn(cols, device="cuda", dtype=torch.float16)
        ref = torch.nn.functional.layer_norm(x.float(), (cols,), w.float(), b.float()).half()
        torch.testing.assert_close(layer_norm(x, w, b), ref, atol=2e-2, rtol=1e-2)
    torch.cuda.synchronize()
    print("app done")
