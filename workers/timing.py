"""Timing of one launcher in the trial process: device events on GPUs, perf_counter on the CPU.

Runs in the trial process only; torch is imported inside the functions.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from workers.device import Backend
from workers.errors import RunnerConfigError

#: Bytes written before each timed rep to evict the previous rep's data from L2 (H200's L2 is
#: 50 MB, MI300X's Infinity Cache 256 MB).
L2_FLUSH_BYTES = 256 * 2**20
#: Graph objective: bytes of input sets a graph rotates over, the most sets, launches per replay.
GRAPH_BYTES = 256 * 2**20
GRAPH_MAX_SETS = 64
GRAPH_MIN_LAUNCHES = 32
#: Before the timed reps the GPU is held back for HOLD_MARGIN times the CPU time the reps take to
#: enqueue (measured on one untimed rep), at most MAX_HOLD_S, so that every rep is queued before
#: the first one runs.
HOLD_MARGIN = 2.0
MAX_HOLD_S = 0.5
#: Cycles of the sleep that measures how fast torch.cuda._sleep spins (see _sleep_cycles_per_s).
_CALIBRATION_CYCLES = 10_000_000


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
    flush: Any | None = None,
) -> list[float]:
    """Milliseconds of each of ``reps`` launches, after ``warmup`` untimed launches (and, on a
    GPU, one more untimed rep that measures a rep's CPU time).

    On CUDA/ROCm each rep sits between two device events; ``flush`` (see l2_flush_buffer) is
    zeroed before each rep, outside the timed region. Every rep is queued before the GPU starts
    the first (see hold_gpu), so a launcher's CPU cost (Python, tensor-descriptor encoding, a
    second kernel's launch) never leaves the GPU idle inside a timed region, however busy the CPU
    is: the time is the device's. The interpreter times each call with perf_counter.
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
    _check_gpu(backend)
    import torch

    for _ in range(warmup):
        launcher()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    t0 = time.perf_counter()
    if flush is not None:
        flush.zero_()
    launcher()
    rep_s = time.perf_counter() - t0
    torch.cuda.synchronize()
    hold_gpu(HOLD_MARGIN * reps * rep_s)
    for start, end in zip(starts, ends, strict=True):
        if flush is not None:
            flush.zero_()
        start.record()
        launcher()
        end.record()
    torch.cuda.synchronize()
    return [float(s.elapsed_time(e)) for s, e in zip(starts, ends, strict=True)]


def hold_gpu(seconds: float) -> None:
    """Queue a spin of about ``seconds`` (at most MAX_HOLD_S) on the current stream: what the CPU
    enqueues next waits behind it."""
    import torch

    seconds = min(seconds, MAX_HOLD_S)
    if seconds > 0:
        torch.cuda._sleep(int(seconds * _sleep_cycles_per_s(torch.cuda.current_device())))


@functools.cache
def _sleep_cycles_per_s(device: int) -> float:
    """How many cycles torch.cuda._sleep spins per second on GPU ``device``, timed once per
    process (its cycles are the SM clock's on NVIDIA, a fixed counter's on AMD)."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(_CALIBRATION_CYCLES // 10)
    start.record()
    torch.cuda._sleep(_CALIBRATION_CYCLES)
    end.record()
    end.synchronize()
    return _CALIBRATION_CYCLES / (start.elapsed_time(end) / 1e3)


def graph_sets(set_bytes: int) -> int:
    """Input sets a graph-objective trial rotates over: the fewest whose bytes together reach
    GRAPH_BYTES (more than L2 holds), at most GRAPH_MAX_SETS: the 64 sets of a problem under
    about 0.8 MB fit in H200's 50 MB L2 together, as a small kernel's inputs often do in a model."""
    return max(1, min(GRAPH_MAX_SETS, math.ceil(GRAPH_BYTES / max(set_bytes, 1))))


def time_graph(
    launchers: Sequence[Callable[[], None]], backend: Backend, *, reps: int
) -> list[float]:
    """Milliseconds per launch of each of ``reps`` replays of one CUDA graph that runs
    ``launchers`` in turn, back to back, at least GRAPH_MIN_LAUNCHES launches per replay.

    What a launch costs inside a CUDA-graphed forward pass: each launch's start and tail overlap
    its neighbours'; the launchers run on distinct input sets (see graph_sets) so that none finds
    its inputs left in L2 by the previous one. Each launcher runs once on a side stream before
    the capture (compiling it if need be).
    """
    _check_gpu(backend)
    import torch

    per_replay = len(launchers) * math.ceil(GRAPH_MIN_LAUNCHES / len(launchers))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for launch in launchers:
            launch()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(per_replay):
            launchers[i % len(launchers)]()
    graph.replay()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for start, end in zip(starts, ends, strict=True):
        start.record()
        graph.replay()
        end.record()
    torch.cuda.synchronize()
    return [float(s.elapsed_time(e)) / per_replay for s, e in zip(starts, ends, strict=True)]


def _check_gpu(backend: Backend) -> None:
    if backend not in (Backend.CUDA, Backend.ROCM):
        raise RunnerConfigError(
            f"backend {backend.value} has no device timer; use cuda, rocm or interpreter"
        )
