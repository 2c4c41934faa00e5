"""The trial process: loads a spec, compiles, checks and times one config (or one of the spec's
vendor paths) per request.

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
from search_spaces.problem import problem_key
from workers.device import Backend
from workers.errors import DeviceError
from workers.measurement import Measurement, Outcome
from workers.timing import graph_sets, l2_flush_buffer, synchronize, time_graph, time_launcher

#: Exception class names (anywhere in the MRO) that mean the config does not fit the device.
RESOURCE_ERRORS = frozenset({"OutOfResources", "OutOfMemoryError", "MemoryError"})
#: What torch's CPU allocator says (in a plain RuntimeError) when host memory runs out.
CPU_OUT_OF_MEMORY = ("can't allocate memory", "not enough memory")
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
#: Largest input set (bytes of its tensors) the trial process keeps, with a pristine copy and its
#: reference, for the next trial of the same problem; larger sets are built afresh for every trial.
CACHED_SET_BYTES = 512 * 2**20


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
class TrialRequest:
    """One trial: a kernel (registry name or ``module:attribute``), a problem and a config; the
    one type that carries them from the driver to the worker, the runner and its child (the
    runner validates the problem before it reaches the child). With ``vendor`` set it measures
    the spec's vendor path of that name instead (``config`` is then empty and ignored)."""

    kernel: str
    problem: Problem
    config: Config
    vendor: str | None = None


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
class _InputSet:
    """Random inputs of one problem and, once computed before its first launch, their reference
    output; a kept
    set also holds copies of its tensors other than ``out`` to tell whether a kernel wrote them,
    and ``out`` as built (a vendor launcher may rebind ``inputs["out"]`` to its own result)."""

    inputs: Inputs
    reference: Any | None = None
    pristine: dict[str, Any] = field(default_factory=dict)
    out: Any = None

    def __post_init__(self) -> None:
        self.out = self.inputs.get("out")

    def restore_out(self) -> None:
        """Put the ``out`` tensor built with the set back in place of a rebound one."""
        self.inputs["out"] = self.out

    def keep(self) -> None:
        self.pristine = {
            name: t.clone()
            for name, t in self.inputs.items()
            if name != "out" and hasattr(t, "clone")
        }

    def written(self) -> bool:
        """Whether a launch changed any input tensor other than ``out`` since ``keep``."""
        import torch

        return not all(torch.equal(self.inputs[name], t) for name, t in self.pristine.items())


@dataclass
class _State:
    settings: ChildSettings
    device: str
    specs: dict[str, KernelSpec] = field(default_factory=dict)
    flush: Any | None = None
    #: The timed and the second-check input sets of the last problem, keyed by kernel and problem.
    sets: tuple[str, _InputSet, _InputSet] | None = None


def classify(exc: BaseException, phase: Phase) -> Outcome:
    """The outcome of an exception raised by a trial in ``phase``.

    Out of resources (Triton) or out of memory (torch on a GPU or the CPU, Python) -> INVALID;
    a device error -> CRASH; a Triton compile error, or any exception before the first launch
    returned -> COMPILE_ERROR; any other exception -> CRASH.
    """
    names = {cls.__name__ for cls in type(exc).__mro__}
    if names & RESOURCE_ERRORS:
        return Outcome.INVALID
    if isinstance(exc, RuntimeError) and any(text in str(exc) for text in CPU_OUT_OF_MEMORY):
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
    torch.zeros(1, device="cuda")  # creates the GPU context before the first trial arrives
    return "cuda"


def _device_healthy(backend: Backend) -> bool:
    """False when the GPU context is broken (a sticky error such as an illegal address)."""
    try:
        synchronize(backend)
    except Exception:
        return False
    return True


def _nbytes(inputs: Inputs) -> int:
    return sum(t.numel() * t.element_size() for t in inputs.values() if hasattr(t, "element_size"))


def _fresh(spec: KernelSpec, problem: Problem, device: str) -> _InputSet:
    inputs = spec.build_inputs(problem, device)
    if inputs.get("out") is None:
        raise SpecError(f"kernel {spec.name!r}: build_inputs returned no 'out' tensor")
    return _InputSet(inputs)


def _set_key(job: TrialRequest) -> str:
    return f"{job.kernel}|{problem_key(job.problem)}"


def _input_sets(
    state: _State, job: TrialRequest, spec: KernelSpec, reuse: bool
) -> tuple[_InputSet, ...]:
    """The timed and the second-check input sets for ``job``: those of the previous trial of the
    same problem when ``reuse`` and they were kept, else two fresh ones (kept when small)."""
    key = _set_key(job)
    if reuse and state.sets is not None and state.sets[0] == key:
        return state.sets[1:]
    state.sets = None
    sets = (_fresh(spec, job.problem, state.device), _fresh(spec, job.problem, state.device))
    if _nbytes(sets[0].inputs) <= CACHED_SET_BYTES:
        for kept in sets:
            kept.keep()
        state.sets = (key, *sets)
    return sets


def _restore_outs(state: _State) -> None:
    """The kept sets' ``out`` tensors as built, whatever a vendor launcher rebound."""
    if state.sets is not None:
        for kept in state.sets[1:]:
            kept.restore_out()


def _drop_written_sets(state: _State) -> bool:
    """Forget the kept sets when a launch wrote into their inputs (or they cannot be compared);
    True if it did."""
    if state.sets is None:
        return False
    try:
        written = any(kept.written() for kept in state.sets[1:])
    except Exception:
        written = True
    if written:
        state.sets = None
    return written


def _make(spec: KernelSpec, inputs: Inputs, job: TrialRequest) -> Any:
    """The launcher of ``job`` on ``inputs``: its vendor path's when it names one, else its
    config's."""
    if job.vendor is not None:
        return spec.make_vendor_launcher(inputs, job.vendor)
    return spec.make_launcher(inputs, job.config)


def _launch_on(spec: KernelSpec, chosen: _InputSet, job: TrialRequest, backend: Backend) -> Any:
    """Fill the set's output with NaN (so unwritten elements fail the check), launch ``job``
    once and wait; the launcher. The check reads ``inputs["out"]`` again afterwards: a vendor
    launcher may rebind it to its result."""
    out = chosen.inputs["out"]
    if out.is_floating_point():
        out.fill_(float("nan"))
    launcher = _make(spec, chosen.inputs, job)
    launcher()
    synchronize(backend)
    return launcher


def _more_launchers(
    spec: KernelSpec, job: TrialRequest, timed: _InputSet, device: str
) -> list[Any]:
    """Launchers of ``job`` on fresh input sets, one fewer than ``graph_sets`` asks for."""
    return [
        _make(spec, _fresh(spec, job.problem, device).inputs, job)
        for _ in range(graph_sets(_nbytes(timed.inputs)) - 1)
    ]


def _reference(spec: KernelSpec, chosen: _InputSet) -> None:
    """Compute the set's reference output once, before any launch on the set: from inputs as
    built, so a kernel that writes its inputs cannot move the reference along with its output."""
    if chosen.reference is None:
        chosen.reference = spec.reference(chosen.inputs)


def _check(spec: KernelSpec, problem: Problem, chosen: _InputSet) -> tuple[float, str | None]:
    """(max_rel_error, why the output is wrong or None) against the set's reference."""
    import torch

    from search_spaces.accuracy import max_rel_error

    out, ref = chosen.inputs["out"], chosen.reference
    assert ref is not None  # computed by _reference before the set's first launch
    if tuple(out.shape) != tuple(ref.shape):
        return math.inf, (
            f"the output has shape {tuple(out.shape)}, the reference {tuple(ref.shape)}"
        )
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


def run_job(conn: Connection, job: TrialRequest, state: _State) -> Result:
    """Compile, check (on two input sets: the timed one and a second one) and time one config,
    or the vendor path ``job.vendor`` the same way.

    The two sets and their references are kept for the next trial of the same problem (see
    CACHED_SET_BYTES), so a trial on kept sets sees exactly what fresh sets of the same values
    would show. References are computed from the inputs as built, before the first launch on a
    set. A trial that wrote into its inputs, or was wrong or out of memory on kept sets, runs
    again on fresh ones.
    """
    kept = state.sets is not None and state.sets[0] == _set_key(job)
    result = _run_job(conn, job, state, reuse=True)
    _restore_outs(state)
    if result.replace:  # the GPU context is broken: this process ends, nothing more runs in it
        return result
    written = _drop_written_sets(state)
    if kept and (written or result.measurement.outcome in (Outcome.WRONG, Outcome.INVALID)):
        state.sets = None  # also frees the kept sets' memory before an out-of-memory retry
        again = _run_job(conn, job, state, reuse=False)
        _restore_outs(state)
        _drop_written_sets(state)
        again.measurement.compile_s = result.measurement.compile_s
        return again
    return result


def _run_job(conn: Connection, job: TrialRequest, state: _State, reuse: bool) -> Result:
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
        timed, second = _input_sets(state, job, spec, reuse)
        _reference(spec, timed)
        _reference(spec, second)
        start = time.perf_counter()
        launcher = _launch_on(spec, timed, job, backend)
        compile_s = time.perf_counter() - start
        phase = Phase.RUNNING
        conn.send(PhaseMsg(phase, compile_s))
        run_start = time.perf_counter()
        err, wrong = _check(spec, job.problem, timed)
        if wrong is None:
            _launch_on(spec, second, job, backend)
            err_second, wrong_second = _check(spec, job.problem, second)
            err = max(err, err_second)
            wrong = None if wrong_second is None else f"on other inputs: {wrong_second}"
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
        if settings.graph:
            samples = time_graph(
                [launcher, *_more_launchers(spec, job, timed, state.device)],
                backend,
                reps=settings.reps,
            )
        else:
            gpu = backend in (Backend.CUDA, Backend.ROCM)
            if gpu and settings.flush_l2 and state.flush is None:
                state.flush = l2_flush_buffer()
            samples = time_launcher(
                launcher,
                backend,
                warmup=settings.warmup,
                reps=settings.reps,
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
    try:
        conn.send(Ready(os.getpid()))
    except (BrokenPipeError, ConnectionResetError):
        return  # started ahead, and the runner closed before it needed this process
    while True:
        try:
            job = conn.recv()
            if job is None:
                return
            conn.send(run_job(conn, job, state))
        except (EOFError, BrokenPipeError, ConnectionResetError):
            return  # the parent went away (closed, killed or interrupted): nothing to report to
