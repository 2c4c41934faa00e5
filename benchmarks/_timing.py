"""Timing for benchmark baselines measured beside tunefleet trials (same method as the workers)."""

from __future__ import annotations

import statistics
from collections.abc import Callable


def time_cuda(fn: Callable[[], object], warmup: int = 10, reps: int = 50) -> list[float]:
    """Per-launch milliseconds of ``fn`` with CUDA events, L2 flushed (256 MB write) before each."""
    import torch

    flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end))
    return samples


def median(samples: list[float]) -> float:
    return statistics.median(samples)
