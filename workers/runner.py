"""The trial runner: one warm child process per runner that compiles, checks and times trials.

The parent checks each request (kernel, problem, config against this device's limits) before
anything reaches the child, applies the compile and run timeouts, and replaces the child when it
dies, hangs or reports a broken device. Importing this module loads neither torch nor triton.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from types import TracebackType

from search_spaces import DeviceLimits, KernelSpec, Problem, get_spec
from workers.compile_pool import CompilePool
from workers.device import Backend, Fingerprint, detect
from workers.errors import RunnerConfigError
from workers.measurement import Measurement, Outcome
from workers.trial import (
    ChildSettings,
    Fatal,
    Phase,
    PhaseMsg,
    Ready,
    Result,
    TrialRequest,
    child_main,
)

#: Seconds a child gets to exit after being asked, before it is killed.
EXIT_GRACE_S = 5.0


@dataclass(frozen=True)
class RunnerOptions:
    """How trials run. Times are seconds; ``warmup``/``reps`` count launches.

    ``compile_timeout_s`` bounds the compile phase (loading the spec, building inputs, the first
    launch), ``run_timeout_s`` the rest (correctness checks and timing). ``graph`` times launches
    back to back in a CUDA graph over rotating input sets (workers.timing.time_graph); else each
    launch is timed alone, after ``flush_l2`` writes 256 MB, all reps queued before the first
    runs (workers.timing.time_launcher). ``device_index`` is the GPU ordinal as
    this process sees it (None: device 0). ``start_timeout_s`` bounds the child's start (importing
    torch and triton); a child that does not start gives INFRA. ``compile_workers`` > 0 (GPU
    backends only) compiles trials ahead in a CompilePool of that many processes. Use
    ``for_backend`` for the interpreter's smaller rep counts.
    """

    backend: Backend
    compile_timeout_s: float = 120.0
    run_timeout_s: float = 60.0
    warmup: int = 5
    reps: int = 25
    graph: bool = False
    flush_l2: bool = True
    device_index: int | None = None
    start_timeout_s: float = 300.0
    compile_workers: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "backend", Backend.parse(self.backend))
        if self.backend is Backend.REPLAY:
            raise RunnerConfigError(
                "TrialRunner runs cuda, rocm or interpreter trials; replay has its own backend"
            )
        for name in ("compile_timeout_s", "run_timeout_s", "start_timeout_s"):
            if not getattr(self, name) > 0:
                raise RunnerConfigError(f"{name}={getattr(self, name)} must be a positive number")
        if self.warmup < 0 or self.reps < 1:
            raise RunnerConfigError(
                f"warmup={self.warmup}, reps={self.reps}: need warmup >= 0 and reps >= 1"
            )
        if self.graph and self.backend is Backend.INTERPRETER:
            raise RunnerConfigError("graph timing needs a cuda or rocm backend; drop graph")
        if self.compile_workers < 0 or (
            self.compile_workers and self.backend is Backend.INTERPRETER
        ):
            raise RunnerConfigError(
                f"compile_workers={self.compile_workers}: need >= 0, and 0 for the interpreter"
            )
        if self.device_index is not None and self.device_index < 0:
            raise RunnerConfigError(f"device_index={self.device_index} must be >= 0")

    @classmethod
    def for_backend(cls, backend: Backend | str, **overrides: object) -> RunnerOptions:
        """Options with the backend's defaults: 1 warm-up and 3 reps in the interpreter (its times
        describe the CPU only), the class defaults on GPUs; ``overrides`` win."""
        chosen = Backend.parse(backend)
        base = cls(chosen)
        if chosen is Backend.INTERPRETER:
            base = replace(base, warmup=1, reps=3)
        return replace(base, **overrides)  # type: ignore[arg-type]

    def child_settings(self) -> ChildSettings:
        return ChildSettings(
            self.backend, self.warmup, self.reps, self.graph, self.flush_l2, self.device_index
        )


def _exit_text(code: int | None) -> str:
    if code is None:
        return "did not exit"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class TrialRunner:
    """Runs trials one at a time in a reused child process.

    ``run`` never raises for a trial's own failure: it returns a Measurement whose outcome says
    what happened, and the next ``run`` works. It raises RegistryError / ProblemError (from
    search_spaces) for an unknown kernel or a bad problem. A config that breaks the space's rules
    on this device, or a problem whose inputs and outputs exceed its memory, returns INVALID
    without reaching the child. A request for a vendor path (``TrialRequest.vendor``) has no
    config to check: only the memory check applies, and it skips the compile pool. Thread-safe: concurrent ``run``
    calls compile ahead in the compile pool (when ``compile_workers`` > 0) and take turns on the
    device, so what is measured never overlaps.
    """

    def __init__(self, options: RunnerOptions, fingerprint: Fingerprint | None = None) -> None:
        self.options = options
        self.fingerprint = fingerprint if fingerprint is not None else self._detect(options)
        if self.fingerprint.backend is not options.backend:
            raise RunnerConfigError(
                f"fingerprint is of backend {self.fingerprint.backend.value}, "
                f"options ask for {options.backend.value}; pass a matching fingerprint"
            )
        self.limits: DeviceLimits = self.fingerprint.limits()
        self.host = socket.gethostname()
        #: How many child processes this runner has started.
        self.spawn_count = 0
        self._ctx = multiprocessing.get_context("spawn")
        self._proc: BaseProcess | None = None
        self._conn: Connection | None = None
        self._ready = False
        self._spawned_at = 0.0
        self._specs: dict[str, KernelSpec] = {}
        self._device_lock = threading.Lock()
        self._pool = (
            CompilePool(
                options.backend,
                options.compile_workers,
                options.device_index,
                options.compile_timeout_s,
            )
            if options.compile_workers
            else None
        )

    @staticmethod
    def _detect(options: RunnerOptions) -> Fingerprint:
        found = detect(options.backend)
        index = options.device_index or 0
        for fp in found:
            if fp.index == index:
                return fp
        raise RunnerConfigError(
            f"device_index={index} is not visible; {len(found)} {options.backend.value} devices are"
        )

    @property
    def child_pid(self) -> int | None:
        """PID of the live child process, or None when none is running."""
        return self._proc.pid if self._proc is not None and self._proc.is_alive() else None

    def _spec(self, kernel: str) -> KernelSpec:
        spec = self._specs.get(kernel)
        if spec is None:
            spec = self._specs.setdefault(kernel, get_spec(kernel))
        return spec

    def check(self, request: TrialRequest) -> tuple[TrialRequest, Measurement | None]:
        """``request`` with its problem validated and, when the config breaks a rule here, its INVALID result.

        Raises RegistryError for an unknown kernel and ProblemError for a bad problem.
        """
        spec = self._spec(request.kernel)
        problem: Problem = spec.validate_problem(request.problem)
        if request.vendor is not None:
            job = TrialRequest(request.kernel, problem, {}, request.vendor)
            error = self._too_big(spec, problem)
        else:
            job = TrialRequest(request.kernel, problem, dict(request.config))
            violation = spec.space.violation(request.config, self.limits)
            error = str(violation) if violation is not None else self._too_big(spec, problem)
        if error is None:
            return job, None
        return job, self._stamp(Measurement(Outcome.INVALID, error=error), os.getpid())

    def _too_big(self, spec: KernelSpec, problem: Problem) -> str | None:
        """Why ``problem`` cannot fit this device's memory (its inputs and outputs alone, as
        ``bytes_moved`` counts them, exceed it), or None."""
        needed = spec.bytes_moved(problem)
        memory = self.fingerprint.memory_bytes
        if memory <= 0 or needed <= memory:
            return None
        return (
            f"the problem's inputs and outputs need {needed / 2**30:.3g} GiB, more than the "
            f"{memory / 2**30:.3g} GiB of {self.fingerprint.name}"
        )

    def prefetch(self, request: TrialRequest) -> None:
        """Start compiling ``request`` in the compile pool (no-op without one or when invalid),
        and the trial process if none runs."""
        self.start()
        if self._pool is None or request.vendor is not None:
            return
        job, invalid = self.check(request)
        if invalid is None:
            self._pool.submit(job.kernel, job.problem, job.config)

    def run(self, request: TrialRequest) -> Measurement:
        """Compile, check and time ``request`` in the child; see the class docstring."""
        job, invalid = self.check(request)
        if invalid is not None:
            return invalid
        if self._pool is not None and job.vendor is None:
            self._pool.submit(job.kernel, job.problem, job.config)
            self._pool.wait(job.kernel, job.problem, job.config)
        with self._device_lock:
            return self._run_child(job)

    def _run_child(self, job: TrialRequest) -> Measurement:
        conn = self._ensure_child()
        if isinstance(conn, Measurement):
            return conn
        pid = self.child_pid or 0
        try:
            conn.send(job)
        except (BrokenPipeError, EOFError, OSError):
            return self._stamp(self._crashed(Phase.COMPILING, None), pid)
        return self._stamp(self._wait(conn), pid)

    def _wait(self, conn: Connection) -> Measurement:
        phase = Phase.COMPILING
        compile_s: float | None = None
        deadline = time.monotonic() + self.options.compile_timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not conn.poll(remaining):
                self._kill()
                limit = (
                    self.options.compile_timeout_s
                    if phase is Phase.COMPILING
                    else self.options.run_timeout_s
                )
                outcome = (
                    Outcome.COMPILE_TIMEOUT if phase is Phase.COMPILING else Outcome.RUN_TIMEOUT
                )
                return Measurement(
                    outcome,
                    compile_s=compile_s,
                    error=f"{phase.value} took longer than {limit:g} s; trial process killed",
                )
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                return self._crashed(phase, compile_s)
            if isinstance(msg, PhaseMsg) and msg.phase is Phase.RUNNING:
                phase = Phase.RUNNING
                compile_s = msg.compile_s
                deadline = time.monotonic() + self.options.run_timeout_s
            elif isinstance(msg, Result):
                if msg.replace:
                    self._kill()
                return msg.measurement

    def _crashed(self, phase: Phase, compile_s: float | None) -> Measurement:
        code = self._reap()
        return Measurement(
            Outcome.CRASH,
            compile_s=compile_s,
            error=f"trial process died while {phase.value} ({_exit_text(code)})",
        )

    def _stamp(self, m: Measurement, pid: int) -> Measurement:
        m.worker = f"{self.host}:{pid}"
        m.host = self.host
        return m

    def start(self) -> None:
        """Start the compile pool's processes and the trial process now, without waiting for
        them (they load torch and triton meanwhile); the trial process only when none runs and
        no trial holds the device."""
        if self._pool is not None:
            self._pool.start()
        if self._device_lock.acquire(blocking=False):
            try:
                if self._proc is None:
                    self._spawn()
            finally:
                self._device_lock.release()

    def _spawn(self) -> None:
        self._reap()
        parent_conn, child_conn = self._ctx.Pipe(duplex=True)
        proc = self._ctx.Process(
            target=child_main,
            args=(child_conn, self.options.child_settings()),
            name="tunefleet-trial",
            daemon=True,
        )
        proc.start()
        child_conn.close()
        self.spawn_count += 1
        self._proc, self._conn = proc, parent_conn
        self._ready = False
        self._spawned_at = time.monotonic()

    def _ensure_child(self) -> Connection | Measurement:
        """The live child's pipe, starting a child if needed; INFRA if it cannot start."""
        if self._proc is None or self._conn is None or not self._proc.is_alive():
            self._spawn()
        assert self._proc is not None and self._conn is not None
        proc, parent_conn = self._proc, self._conn
        if self._ready:
            return parent_conn
        error: str
        left = self.options.start_timeout_s - (time.monotonic() - self._spawned_at)
        if not parent_conn.poll(max(left, 0.0)):
            error = f"trial process did not start within {self.options.start_timeout_s:g} s"
        else:
            try:
                msg = parent_conn.recv()
            except (EOFError, OSError):
                msg = None
            if isinstance(msg, Ready):
                self._ready = True
                return parent_conn
            error = (
                f"trial process could not start: {msg.error}"
                if isinstance(msg, Fatal)
                else "trial process died while starting"
            )
        pid = proc.pid or 0
        self._kill()
        return self._stamp(Measurement(Outcome.INFRA, error=error), pid)

    def _kill(self) -> None:
        """SIGKILL the child (it may be hung or its GPU context broken) and forget it."""
        if self._proc is not None and self._proc.is_alive():
            self._proc.kill()
        self._reap()

    def _reap(self) -> int | None:
        """Join the child (killing it after EXIT_GRACE_S) and drop it; its exit code or None."""
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if conn is not None:
            conn.close()
        if proc is None:
            return None
        proc.join(EXIT_GRACE_S)
        if proc.is_alive():
            proc.kill()
            proc.join(EXIT_GRACE_S)
        code = proc.exitcode
        if code is not None:
            proc.close()
        return code

    def close(self) -> None:
        """Stop the child process (politely, then by force) and the compile pool."""
        if self._pool is not None:
            self._pool.close()
        if self._conn is not None:
            with contextlib.suppress(BrokenPipeError, OSError):
                self._conn.send(None)
        self._reap()

    def __enter__(self) -> TrialRunner:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
