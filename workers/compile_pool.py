"""The compile pool: JIT-compiles upcoming trials on a node's CPU cores while the GPU times others.

Each pool process imports the spec, builds inputs once per problem on the GPU (no kernel of the
spec runs: Triton's ``JITFunction.run`` is switched to its ``warmup`` path, which compiles and
stores the binary in Triton's disk cache without launching), and calls the launcher. The trial
process then finds every kernel in the shared disk cache and only loads it. The pool never decides
an outcome: a config whose compile fails, hangs or crashes a pool process is left to the trial
process, which classifies it as usual. What is measured does not change, only when compiling
happens. A vendor path (``TrialRequest.vendor``) has nothing of ours to compile: the runner
never submits one.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from search_spaces import KernelSpec, get_spec
from search_spaces.problem import Problem, problem_key
from search_spaces.space import Config, config_key
from workers.device import Backend

#: Largest inputs a pool process keeps between compiles (all pool processes share one GPU).
CACHED_INPUT_BYTES = 256 * 2**20

#: Per pool process: the spec by name, and the inputs of the last problem it compiled for.
_specs: dict[str, KernelSpec] = {}
_inputs: dict[str, Any] = {}


def _init_process(device_index: int | None) -> None:
    os.environ.pop("TRITON_INTERPRET", None)
    import torch
    from triton.runtime.jit import JITFunction

    if device_index is not None:
        torch.cuda.set_device(device_index)
    # The GPU context now, while the pool waits for work: its first compile then only compiles
    # (a fresh kept worker's processes would otherwise create 15 contexts on its first trials).
    torch.zeros(1, device="cuda")
    launch = JITFunction.run

    def compile_only(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
        return launch(self, *args, grid=grid, warmup=True, **kwargs)

    JITFunction.run = compile_only


def _nothing() -> None:
    """A task that only makes the pool start a process (its initializer does the work)."""


def _nbytes(inputs: Any) -> int:
    return sum(t.numel() * t.element_size() for t in inputs.values() if hasattr(t, "element_size"))


def _compile(kernel: str, problem: Problem, config: Config) -> float:
    """Compile ``config`` for ``problem`` in this pool process; seconds taken.

    Inputs stay cached for the next config of the same problem only while they are small: the
    trial process must find the GPU's memory free, so large inputs (and the caching allocator's
    blocks) are released after each compile.
    """
    import torch

    spec = _specs.get(kernel) or _specs.setdefault(kernel, get_spec(kernel))
    key = f"{kernel}|{problem_key(problem)}"
    if key not in _inputs:
        _inputs.clear()
        torch.cuda.empty_cache()
        _inputs[key] = spec.build_inputs(problem, "cuda")
    start = time.perf_counter()
    spec.make_launcher(_inputs[key], config)()
    seconds = time.perf_counter() - start
    if _nbytes(_inputs[key]) > CACHED_INPUT_BYTES:
        _inputs.clear()
    torch.cuda.empty_cache()
    return seconds


class CompilePool:
    """Compiles trials ahead in ``processes`` spawned processes on the GPU ``device_index``.

    ``submit`` starts compiling (once per kernel, problem and config); ``wait`` blocks until that
    compile ended, returning its seconds, or None when it failed, hung past ``timeout_s`` (the
    pool's processes are then replaced) or was never submitted. Thread-safe.
    """

    def __init__(
        self, backend: Backend, processes: int, device_index: int | None, timeout_s: float
    ) -> None:
        if backend not in (Backend.CUDA, Backend.ROCM):
            raise ValueError(f"a compile pool needs a GPU backend, not {backend.value}")
        self._processes = max(1, processes)
        self._device_index = device_index
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._futures: dict[str, Future[float]] = {}
        self._executor: ProcessPoolExecutor | None = None
        self._warm = False

    def _started(self) -> ProcessPoolExecutor:
        if self._executor is None:
            self._executor = self._new_executor()
        return self._executor

    def _new_executor(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(
            max_workers=self._processes,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_init_process,
            initargs=(self._device_index,),
        )

    def start(self) -> None:
        """Start all the pool's processes now (each loads torch and a GPU context) rather than
        one per submit; once until the pool is stopped."""
        with self._lock:
            if self._warm:
                return
            executor = self._started()
            for _ in range(self._processes):
                executor.submit(_nothing)
            self._warm = True

    @staticmethod
    def _key(kernel: str, problem: Problem, config: Config) -> str:
        return f"{kernel}|{problem_key(problem)}|{config_key(config)}"

    def submit(self, kernel: str, problem: Problem, config: Config) -> None:
        key = self._key(kernel, problem, config)
        with self._lock:
            if key in self._futures:
                return
            try:
                future = self._started().submit(_compile, kernel, problem, config)
            except BrokenProcessPool:
                self._stop()
                future = self._started().submit(_compile, kernel, problem, config)
            self._futures[key] = future

    def wait(self, kernel: str, problem: Problem, config: Config) -> float | None:
        with self._lock:
            future = self._futures.pop(self._key(kernel, problem, config), None)
        if future is None:
            return None
        try:
            return future.result(timeout=self._timeout_s)
        except FutureTimeout:
            with self._lock:
                self._stop()
            return None
        except Exception:  # the trial process reproduces and classifies any compile failure
            return None

    def _stop(self) -> None:
        """Kill every pool process (one may hang in a compile); the next submit starts afresh."""
        executor, self._executor = self._executor, None
        self._warm = False
        if executor is not None:
            processes = getattr(executor, "_processes", None) or {}
            for process in list(processes.values()):
                process.kill()
            executor.shutdown(wait=False, cancel_futures=True)
        for future in self._futures.values():
            future.cancel()
        self._futures.clear()

    def close(self) -> None:
        """Stop the pool's processes; the pool starts again on the next submit."""
        with self._lock:
            self._stop()
