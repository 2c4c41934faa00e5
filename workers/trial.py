"""The trial process: loads a spec, compiles, checks and times one config per request.

``child_main`` is the entry point of the process TrialRunner spawns. Messages to the parent:
``Ready`` once torch/triton are loaded, then per job ``PhaseMsg(COMPILING)``,
``PhaseMsg(RUNNING)`` once the first launch finished, and a ``Result``. torch and triton are
imported only inside the functions, after the backend's environment is set.
"""

from __future__ import annotations

import enum
import math
import os
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from search_spaces import Config, Inputs, KernelSpec, Problem, SpecError, get_spec
from workers.device import Backend
from workers.errors import DeviceError
from workers.measurement import Measurement, Outcome
from workers.timing import l2_flush_buffer, synchronize, time_launcher

#: Exception class names (anywhere in the MRO) that mean the config does not fit the device.
RESOURCE_ERRORS = frozenset({"OutOfResources", "OutOfMemoryError"})
#: Triton's compiler errors across 3.x (triton.compiler.errors, triton.runtime.errors).
COMPILE_ERRORS = frozenset(
    {
        "CompilationError",
        "CompileTimeAssertionFailure",
        "UnsupportedLanguageConstruct",
        "PTXASError",
    }
)
#: Exception class names raised by torch (>= 2.8) for a failed device call; the context is lost.
DEVICE_ERRORS = frozenset({"AcceleratorError"})
MAX_ERROR_CHARS = 500


class Phase(str, enum.Enum):
    """Where a trial is: compiling (up to the end of the first launch) or running (check + timing)."""

    COMPILING = "compiling"
    RUNNING = "running"


@dataclass(frozen=True)
class ChildSettings:
    """What the trial process needs from RunnerOptions."""

    backend: Backend
    warmup: int
    reps: int
    graph: bool
    flush_l2: bool
    device_index: int | None


@dataclass(frozen=True)
class Job:
    """One trial: a kernel reference, a validated problem and a config."""

    kernel: str
    problem: Problem
    config: Config


@dataclass(frozen=True)
class Ready:
    pid: int


@dataclass(frozen=True)
class Fatal:
    """The process could not start (e.g. no GPU); ``error`` says why."""

    error: str


@dataclass(frozen=True)
class PhaseMsg:
    phase: Phase
    compile_s: float | None = None


@dataclass(frozen=True)
class Result:
    """A finished trial; ``replace`` asks the parent to replace this process (context poisoned)."""

    measurement: Measurement
    replace: bool = False


@dataclass
class _State:
    settings: ChildSettings
    device: str
    specs: dict[str, KernelSpec] = field(default_factory=dict)
    flush: Any | None = None


def classify(exc: BaseException, phase: Phase) -> Outcome:
    """The outcome of an exception raised by a trial in ``phase``.

    Out of resources (Triton) or out of memory (torch) -> INVALID; a device error -> CRASH; a
    Triton compile error, or any exception before the first launch returned -> COMPILE_ERROR; any
    other exception -> CRASH.
    """
    names = {cls.__name__ for cls in type(exc).__mro__}
    if names & RESOURCE_ERRORS:
        return Outcome.INVALID
    if names & DEVICE_ERRORS:
        return Outcome.CRASH
    if names & COMPILE_ERRORS or phase is Phase.COMPILING:
        return Outcome.COMPILE_ERROR
    return Outcome.CRASH


def describe(exc: BaseException) -> str:
    """``Type: last non-empty line of the message``, cut to MAX_ERROR_CHARS."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = f"{type(exc).__name__}: {lines[-1]}" if lines else type(exc).__name__
    return text[:MAX_ERROR_CHARS]


def _prepare(settings: ChildSettings) -> str:
    """Set the backend's environment, load torch and triton, pin the GPU; return the device."""
    if settings.backend is Backend.INTERPRETER:
        os.environ["TRITON_INTERPRET"] = "1"
    else:
        os.environ.pop("TRITON_INTERPRET", None)
    import torch
    import triton  # noqa: F401  (loaded now so the first trial's compile phase does not pay it)

    if settings.backend is Backend.INTERPRETER:
        return "cpu"
    if not torch.cuda.is_available():
        raise DeviceError(f"no {settings.backend.value} GPU is visible to the trial process")
    index = settings.device_index or 0
    if index >= torch.cuda.device_count():
        raise DeviceError(
            f"device_index {index} is out of range: {torch.cuda.device_count()} GPUs are visible"
        )
    torch.cuda.set_device(index)
    torch.cuda.init()
    return "cuda"


def _device_healthy(backend: Backend) -> bool:
    """False when the GPU context is broken (a sticky error such as an illegal address)."""
    try:
        synchronize(backend)
    except Exception:
        return False
    return True


def _fresh(spec: KernelSpec, problem: Problem, device: str) -> Inputs:
    inputs = spec.build_inputs(problem, device)
    out = inputs.get("out")
    if out is None:
        raise SpecError(f"kernel {spec.name!r}: build_inputs returned no 'out' tensor")
    if out.is_floating_point():
        out.fill_(float("nan"))
    return inputs


def _check(spec: KernelSpec, problem: Problem, inputs: Inputs) -> tuple[float, str | None]:
    """(max_rel_error, why the output is wrong or None)."""
    import torch

    from search_spaces.kernels._common import max_rel_error

    out = inputs["out"]
    ref = spec.reference(inputs)
    if out.is_floating_point():
        nans = int(torch.isnan(out).sum())
        if nans:
            return math.inf, (
                f"{nans} of {out.numel()} output elements are NaN "
                "(not written by the kernel, or NaN computed)"
            )
    err = max_rel_error(out, ref)
    tol = spec.tolerance(problem)
    if err > tol:
        return err, f"max_rel_error {err:.3g} exceeds the tolerance {tol:.3g}"
    return err, None


def run_job(conn: Connection, job: Job, state: _State) -> Result:
    """Compile, check (twice, the second time on fresh inputs) and time one config."""
    settings = state.settings
    backend = settings.backend
    phase = Phase.COMPILING
    compile_s: float | None = None
    run_start = time.perf_counter()
    conn.send(PhaseMsg(phase))
    try:
        spec = state.specs.get(job.kernel)
        if spec is None:
            spec = state.specs.setdefault(job.kernel, get_spec(job.kernel))
        inputs = _fresh(spec, job.problem, state.device)
        launcher = spec.make_launcher(inputs, job.config)
        start = time.perf_counter()
        launcher()
        synchronize(backend)
        compile_s = time.perf_counter() - start
        phase = Phase.RUNNING
        conn.send(PhaseMsg(phase, compile_s))
        run_start = time.perf_counter()
        err, wrong = _check(spec, job.problem, inputs)
        if wrong is None:
            fresh = _fresh(spec, job.problem, state.device)
            spec.make_launcher(fresh, job.config)()
            synchronize(backend)
            err_fresh, wrong_fresh = _check(spec, job.problem, fresh)
            err = max(err, err_fresh)
            wrong = None if wrong_fresh is None else f"on fresh inputs: {wrong_fresh}"
            del fresh
        if wrong is not None:
            return Result(
                Measurement(
                    Outcome.WRONG,
                    compile_s=compile_s,
                    run_s=time.perf_counter() - run_start,
                    max_rel_error=err,
                    error=wrong,
                )
            )
        gpu = backend in (Backend.CUDA, Backend.ROCM)
        if gpu and settings.flush_l2 and state.flush is None:
            state.flush = l2_flush_buffer()
        samples = time_launcher(
            launcher,
            backend,
            warmup=settings.warmup,
            reps=settings.reps,
            graph=settings.graph,
            flush=state.flush if gpu and settings.flush_l2 else None,
        )
        return Result(
            Measurement(
                Outcome.OK,
                samples_ms=samples,
                compile_s=compile_s,
                run_s=time.perf_counter() - run_start,
                max_rel_error=err,
            )
        )
    except Exception as exc:
        outcome = classify(exc, phase)
        if outcome is not Outcome.CRASH and not _device_healthy(backend):
            outcome = Outcome.CRASH
        where = "" if outcome is not Outcome.CRASH else "while running: "
        return Result(
            Measurement(
                outcome,
                compile_s=compile_s,
                run_s=time.perf_counter() - run_start if phase is Phase.RUNNING else None,
                error=where + describe(exc),
            ),
            replace=outcome is Outcome.CRASH,
        )


def child_main(conn: Connection, settings: ChildSettings) -> None:
    """Entry point of the trial process: prepare, say Ready, then serve Jobs until None or EOF."""
    try:
        device = _prepare(settings)
    except Exception as exc:
        conn.send(Fatal(describe(exc)))
        return
    state = _State(settings, device)
    conn.send(Ready(os.getpid()))
    while True:
        try:
            job = conn.recv()
            if job is None:
                return
            conn.send(run_job(conn, job, state))
        except (EOFError, BrokenPipeError, ConnectionResetError):
            return  # the parent went away (closed, killed or interrupted): nothing to report to
