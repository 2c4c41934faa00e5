"""Which kernels torch.matmul (cuBLAS) launches on the few-tile shapes, and their grids: the
kernel names carry cuBLAS's tile, cluster and split/stream-K choices."""

import torch
from torch.profiler import ProfilerActivity, profile

SHAPES = [
    (256, 10240, 8192),
    (128, 4096, 4096),
    (128, 6144, 4096),
    (256, 4096, 4096),
    (128, 8192, 8192),
    (256, 8192, 28672),
    (64, 14336, 4096),
    (4096, 4096, 4096),
]
for m, n, k in SHAPES:
    a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(k, n, dtype=torch.bfloat16, device="cuda")
    out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    for _ in range(10):
        torch.matmul(a, b, out=out)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            torch.matmul(a, b, out=out)
        torch.cuda.synchronize()
    names = {}
    for e in prof.events():
        if e.device_type.name == "CUDA":
            names.setdefault(e.name, []).append(e.device_time)
    for name, times in names.items():
        times.sort()
        print(f"M={m} N={n} K={k}: {times[len(times) // 2]:7.1f} us x{len(times)} {name}")
