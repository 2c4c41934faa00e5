"""Running one (phase, batch) of a workload: eager and CUDA-graph forwards, latency, traces.

Latency is the median of ``runs`` forwards, each started on an idle device and timed with CUDA
events (``time.perf_counter`` on the CPU); eager and graph runs (and baseline and tuned runs) are
interleaved round by round so drift hits all alike. A trace is ``steps`` forwards under
torch.profiler (CPU and, on CUDA, Kineto's GPU activities, with recorded input shapes), each inside
a ``user_annotation`` named :data:`workers.profiling.trace.STEP`.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from workers.profiling.trace import STEP, Mode

Forward = Callable[[], Any]


def cuda(device: str) -> bool:
    return torch.device(device).type == "cuda"


def init_gpu_profiler(device: str) -> None:
    """Start CUPTI once before any graph is captured, so that kernels of graph replays are traced."""
    if cuda(device):
        with profile(activities=[ProfilerActivity.CUDA]):
            torch.cuda.synchronize()


def capture_graph(fn: Forward, warmup: int = 3) -> tuple[Forward, Any]:
    """A replay of ``fn`` captured in one CUDA graph (after warm-up on a side stream), and the graph."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    torch.cuda.synchronize()
    return graph.replay, graph


def _sync(device: str) -> None:
    if cuda(device):
        torch.cuda.synchronize()


def time_interleaved(
    fns: Sequence[Forward], device: str, runs: int, warmup: int = 3
) -> list[float]:
    """Median milliseconds of each of ``fns`` over ``runs`` rounds (one call of each per round)."""
    for fn in fns:
        for _ in range(warmup):
            fn()
    _sync(device)
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(runs):
        for i, fn in enumerate(fns):
            _sync(device)
            if cuda(device):
                start, end = (
                    torch.cuda.Event(enable_timing=True),
                    torch.cuda.Event(enable_timing=True),
                )
                start.record()
                fn()
                end.record()
                end.synchronize()
                samples[i].append(start.elapsed_time(end))
            else:
                t0 = time.perf_counter()
                fn()
                samples[i].append((time.perf_counter() - t0) * 1e3)
    return [statistics.median(s) for s in samples]


def record_trace(fn: Forward, device: str, path: Path, steps: int) -> Path:
    """Write a Chrome trace of ``steps`` forwards of ``fn`` to ``path``."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda(device) else [])
    _sync(device)
    with profile(activities=activities, record_shapes=True) as prof:
        for _ in range(steps):
            with record_function(STEP):
                fn()
                _sync(device)
    path.parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(path))
    return path


def forwards_for(
    fn: Forward, modes: Sequence[Mode], device: str
) -> tuple[dict[Mode, Forward], list[Any], list[str]]:
    """The callables to run for each mode (graph: captured now), the graphs to keep alive, and
    why a mode could not be had (a capture that failed: that mode is left out)."""
    out: dict[Mode, Forward] = {}
    keep: list[Any] = []
    failed: list[str] = []
    for mode in modes:
        if mode is Mode.EAGER:
            out[mode] = fn
            continue
        try:
            replay, graph = capture_graph(fn)
        except RuntimeError as exc:
            failed.append(f"graph capture failed: {str(exc).splitlines()[0]}")
            torch.cuda.synchronize()
            continue
        out[mode] = replay
        keep.append(graph)
    return out, keep, failed


def release(device: str) -> None:
    gc.collect()
    if cuda(device):
        torch.cuda.empty_cache()
