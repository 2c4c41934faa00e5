"""Timing of one launcher in the trial process: device events on GPUs, perf_counter on the CPU.

Runs in the trial process only; torch is imported inside the functions.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from workers.device import Backend
from workers.errors import RunnerConfigError

#: Bytes written before each timed rep to evict the previous rep's data from L2 (H200's L2 is
#: 50 MB, MI300X's Infinity Cache 256 MB).
L2_FLUSH_BYTES = 256 * 2**20


def l2_flush_buffer() -> Any:
    """A device buffer of L2_FLUSH_BYTES on the current GPU; ``buffer.zero_()`` flushes L2."""
    import torch

    return torch.empty(L2_FLUSH_BYTES, dtype=torch.int8, device="cuda")


def synchronize(backend: Backend) -> None:
    """Wait for the current GPU to finish its work; nothing to wait for in the interpreter."""
    if backend in (Backend.CUDA, Backend.ROCM):
        import torch

        torch.cuda.synchronize()


def time_launcher(
    launcher: Callable[[], None],
    backend: Backend,
    *,
    warmup: int,
    reps: int,
    graph: bool = False,
    flush: Any | None = None,
) -> list[float]:
    """Milliseconds of each of ``reps`` launches, after ``warmup`` untimed launches.

    On CUDA/ROCm each rep sits between two device events; ``flush`` (see l2_flush_buffer) is
    zeroed before each rep, outside the timed region. ``graph`` captures one launch into a CUDA
    graph and times its replays. The interpreter times each call with perf_counter.
    """
    if backend is Backend.INTERPRETER:
        for _ in range(warmup):
            launcher()
        samples = []
        for _ in range(reps):
            t0 = time.perf_counter()
            launcher()
            samples.append((time.perf_counter() - t0) * 1e3)
        return samples
    if backend not in (Backend.CUDA, Backend.ROCM):
        raise RunnerConfigError(
            f"backend {backend.value} has no timer; use cuda, rocm or interpreter"
        )
    import torch

    for _ in range(warmup):
        launcher()
    torch.cuda.synchronize()
    step = launcher
    if graph:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(max(warmup, 1)):
                launcher()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        cuda_graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(cuda_graph):
            launcher()
        torch.cuda.synchronize()
        step = cuda_graph.replay
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for start, end in zip(starts, ends, strict=True):
        if flush is not None:
            flush.zero_()
        start.record()
        step()
        end.record()
    torch.cuda.synchronize()
    return [float(s.elapsed_time(e)) for s, e in zip(starts, ends, strict=True)]
