"""The trial runner on Triton's interpreter: every outcome, and the runner goes on after each."""

from __future__ import annotations

import math
import socket
import statistics
import time
from collections.abc import Iterator

import pytest

from search_spaces import ProblemError, RegistryError, get_spec
from tests.gpu import needs_gpu
from workers.device import Backend
from workers.errors import RunnerConfigError
from workers.measurement import Outcome
from workers.runner import RunnerOptions, TrialRequest, TrialRunner
from workers.timing import time_launcher
from workers.trial import Phase, classify, describe

from .fake_specs import ref

PROBLEM = {"N": 40}
GOOD = TrialRequest(ref("DoubleSpec"), PROBLEM, {"BLOCK": 16})
TIMEOUT_S = 2.0


@pytest.fixture(scope="module")
def runner() -> Iterator[TrialRunner]:
    options = RunnerOptions.for_backend(
        Backend.INTERPRETER, compile_timeout_s=TIMEOUT_S, run_timeout_s=TIMEOUT_S
    )
    with TrialRunner(options) as r:
        yield r


def assert_good(runner: TrialRunner) -> None:
    m = runner.run(GOOD)
    assert m.outcome is Outcome.OK, m.error


def test_good_trial_is_timed_and_checked(runner: TrialRunner) -> None:
    m = runner.run(GOOD)
    assert m.outcome is Outcome.OK, m.error
    assert len(m.samples_ms) == runner.options.reps == 3
    assert all(s > 0 for s in m.samples_ms)
    assert m.median_ms is not None and m.median_ms > 0
    assert m.iqr_ms is not None and m.iqr_ms >= 0
    assert m.max_rel_error is not None and m.max_rel_error <= 1e-3
    assert m.compile_s is not None and m.run_s is not None
    assert m.host == socket.gethostname()
    assert m.worker == f"{m.host}:{runner.child_pid}"


def test_child_is_reused_across_trials(runner: TrialRunner) -> None:
    assert_good(runner)
    pid, spawns = runner.child_pid, runner.spawn_count
    assert_good(runner)
    assert (runner.child_pid, runner.spawn_count) == (pid, spawns)


@pytest.mark.parametrize(
    ("spec", "outcome", "says", "replaced"),
    [
        ("WrongSpec", Outcome.WRONG, "1 of 40 output elements are NaN", False),
        ("RaiseSpec", Outcome.COMPILE_ERROR, "ValueError: BLOCK must divide N", False),
        ("OutOfResourcesSpec", Outcome.INVALID, "out of resource: shared memory", False),
        ("RaiseLaterSpec", Outcome.CRASH, "while running: RuntimeError: boom", True),
        ("ExitSpec", Outcome.CRASH, "exit code 3", True),
        ("SegfaultSpec", Outcome.CRASH, "SIGSEGV", True),
        ("SleepSpec", Outcome.COMPILE_TIMEOUT, "compiling took longer than 2 s", True),
        ("SleepLaterSpec", Outcome.RUN_TIMEOUT, "running took longer than 2 s", True),
    ],
)
def test_failure_is_classified_and_runner_goes_on(
    runner: TrialRunner, spec: str, outcome: Outcome, says: str, replaced: bool
) -> None:
    assert_good(runner)
    pid = runner.child_pid
    start = time.monotonic()
    m = runner.run(TrialRequest(ref(spec), PROBLEM, {"BLOCK": 16}))
    assert m.outcome is outcome
    assert m.error is not None and says in m.error
    assert not m.samples_ms
    if outcome is Outcome.WRONG:
        assert m.max_rel_error == math.inf
    if outcome is Outcome.RUN_TIMEOUT:
        assert m.compile_s is not None
    assert m.worker == f"{socket.gethostname()}:{pid}"
    assert time.monotonic() - start < TIMEOUT_S + 10
    assert (runner.child_pid is None) is replaced
    assert_good(runner)
    assert (runner.child_pid != pid) is replaced


def test_constraint_breaking_config_never_reaches_a_child() -> None:
    with TrialRunner(RunnerOptions.for_backend("interpreter")) as fresh:
        m = fresh.run(TrialRequest(ref("DoubleSpec"), PROBLEM, {"BLOCK": 32}))
        assert m.outcome is Outcome.INVALID
        assert m.error is not None and m.error.startswith("shared-memory:")
        extra = fresh.run(TrialRequest(ref("DoubleSpec"), PROBLEM, {"BLOCK": 16, "X": 1}))
        assert extra.outcome is Outcome.INVALID and "unknown-parameter" in (extra.error or "")
        assert fresh.spawn_count == 0 and fresh.child_pid is None


def test_problem_larger_than_memory_is_invalid_without_a_child() -> None:
    spec = get_spec("matmul")
    with TrialRunner(RunnerOptions.for_backend("interpreter")) as fresh:
        huge = {"M": 10**12, "N": 4096, "K": 4096, "dtype": "float16"}
        m = fresh.run(TrialRequest("matmul", huge, spec.default_for(fresh.limits)))
        assert m.outcome is Outcome.INVALID, m.error
        assert m.error is not None and "GiB, more than the" in m.error
        assert fresh.spawn_count == 0


def test_cpu_out_of_memory_in_the_trial_is_invalid(runner: TrialRunner) -> None:
    m = runner.run(TrialRequest(ref("HugeInputsSpec"), PROBLEM, {"BLOCK": 16}))
    assert m.outcome is Outcome.INVALID, m.error
    assert m.error is not None and "can't allocate memory" in m.error
    assert_good(runner)


def test_user_errors_raise_before_any_child() -> None:
    with TrialRunner(RunnerOptions.for_backend("interpreter")) as fresh:
        with pytest.raises(RegistryError, match="unknown kernel"):
            fresh.run(TrialRequest("no_such_kernel", PROBLEM, {"BLOCK": 16}))
        with pytest.raises(ProblemError, match="problem lacks 'N'"):
            fresh.run(TrialRequest(ref("DoubleSpec"), {}, {"BLOCK": 16}))
        assert fresh.spawn_count == 0


def test_child_sets_interpreter_itself_and_runner_reopens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    options = RunnerOptions.for_backend("interpreter", compile_timeout_s=30, run_timeout_s=30)
    with TrialRunner(options) as fresh:
        assert_good(fresh)
        fresh.close()
        assert fresh.child_pid is None
        assert_good(fresh)
        assert fresh.spawn_count == 2


@pytest.mark.parametrize(
    "kwargs",
    [
        {"backend": "replay"},
        {"backend": "interpreter", "graph": True},
        {"backend": "cuda", "reps": 0},
        {"backend": "cuda", "compile_timeout_s": 0},
        {"backend": "cuda", "device_index": -1},
    ],
)
def test_bad_options_raise(kwargs: dict[str, object]) -> None:
    backend = kwargs.pop("backend")
    with pytest.raises(RunnerConfigError):
        RunnerOptions.for_backend(str(backend), **kwargs)


def test_backend_defaults() -> None:
    interp = RunnerOptions.for_backend("interpreter")
    gpu = RunnerOptions.for_backend("cuda")
    assert (interp.warmup, interp.reps) == (1, 3)
    assert gpu.reps >= 20 and gpu.flush_l2 and not gpu.graph


def test_classify_by_class_name_and_phase() -> None:
    def named(name: str) -> Exception:
        return type(name, (RuntimeError,), {})("line one\nlast line")

    assert classify(named("OutOfMemoryError"), Phase.RUNNING) is Outcome.INVALID
    assert classify(named("PTXASError"), Phase.RUNNING) is Outcome.COMPILE_ERROR
    assert classify(named("AcceleratorError"), Phase.COMPILING) is Outcome.CRASH
    assert classify(ValueError("x"), Phase.COMPILING) is Outcome.COMPILE_ERROR
    assert classify(ValueError("x"), Phase.RUNNING) is Outcome.CRASH
    cpu_oom = RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 GB")
    assert classify(cpu_oom, Phase.COMPILING) is Outcome.INVALID
    assert classify(MemoryError(), Phase.RUNNING) is Outcome.INVALID
    assert describe(named("CompilationError")) == "CompilationError: last line"


def test_triton_compilation_error_is_a_compile_error() -> None:
    from triton.compiler.errors import CompilationError, CompileTimeAssertionFailure

    assert classify(CompileTimeAssertionFailure("", None, None), Phase.RUNNING) is (
        Outcome.COMPILE_ERROR
    )
    assert issubclass(CompileTimeAssertionFailure, CompilationError)


def test_interpreter_timer_counts_launches() -> None:
    calls = []
    samples = time_launcher(lambda: calls.append(1), Backend.INTERPRETER, warmup=2, reps=4)
    assert len(samples) == 4 and len(calls) == 6


@needs_gpu
@pytest.mark.parametrize(("graph", "flush"), [(False, True), (True, True), (False, False)])
def test_gpu_timing_modes(graph: bool, flush: bool) -> None:
    from workers.device import detect

    backend = detect("auto")[0].backend
    options = RunnerOptions(backend, graph=graph, flush_l2=flush, device_index=0)
    with TrialRunner(options) as gpu:
        m = gpu.run(GOOD)
        assert m.outcome is Outcome.OK, m.error
        assert len(m.samples_ms) == options.reps
        assert all(0 < s < 100 for s in m.samples_ms)
        wrong = gpu.run(TrialRequest(ref("WrongSpec"), PROBLEM, {"BLOCK": 16}))
        assert wrong.outcome is Outcome.WRONG
        crash = gpu.run(TrialRequest(ref("RaiseLaterSpec"), PROBLEM, {"BLOCK": 16}))
        assert crash.outcome is Outcome.CRASH
        assert gpu.run(GOOD).outcome is Outcome.OK


@needs_gpu
def test_gpu_event_timer_with_l2_flush() -> None:
    import torch

    from workers.timing import l2_flush_buffer

    x = torch.randn(1 << 20, device="cuda")
    backend = Backend.ROCM if torch.version.hip else Backend.CUDA
    flush = l2_flush_buffer()

    def scale() -> None:
        x.mul_(1.0)

    samples = time_launcher(scale, backend, warmup=3, reps=20, flush=flush)
    assert len(samples) == 20 and all(s > 0 for s in samples)


@needs_gpu
def test_gpu_timer_leaves_the_cpu_out_of_the_time() -> None:
    """A launcher that spends 1 ms on the CPU before a small kernel times as that kernel: every
    rep is queued before the GPU runs the first (without the hold, the GPU would wait ~1 ms
    inside each timed region)."""
    import torch

    from workers.timing import l2_flush_buffer

    x = torch.zeros(1 << 16, device="cuda")
    backend = Backend.ROCM if torch.version.hip else Backend.CUDA
    flush = l2_flush_buffer()

    def slow_launch() -> None:
        deadline = time.perf_counter() + 1e-3
        while time.perf_counter() < deadline:
            pass
        x.add_(1.0)

    fast = statistics.median(
        time_launcher(lambda: x.add_(1.0), backend, warmup=2, reps=20, flush=flush)
    )
    slow = statistics.median(time_launcher(slow_launch, backend, warmup=2, reps=20, flush=flush))
    assert slow < fast + 0.1, (fast, slow)


@needs_gpu
def test_graph_timer_replays_every_launcher_in_turn() -> None:
    import torch

    from workers.timing import GRAPH_MIN_LAUNCHES, time_graph

    counts = torch.zeros(3, device="cuda")
    launchers = [lambda i=i: counts[i].add_(1.0) for i in range(3)]
    for launch in launchers:
        launch()
    backend = Backend.ROCM if torch.version.hip else Backend.CUDA
    samples = time_graph(launchers, backend, reps=5)
    per_launcher = math.ceil(GRAPH_MIN_LAUNCHES / 3)
    # the run above, the warm-up on a side stream, then a first replay and the 5 timed ones
    assert counts.tolist() == [2 + per_launcher * 6] * 3
    assert len(samples) == 5 and all(0 < s < 1 for s in samples)


def test_graph_sets_exceed_l2_together_within_a_cap() -> None:
    from workers.timing import GRAPH_BYTES, GRAPH_MAX_SETS, graph_sets

    assert graph_sets(GRAPH_BYTES) == 1 and graph_sets(4 * GRAPH_BYTES) == 1
    # the fewest sets whose bytes together reach GRAPH_BYTES
    assert graph_sets(GRAPH_BYTES // 4) == 4 and graph_sets(GRAPH_BYTES // 4 - 1) == 5
    assert graph_sets(1024) == graph_sets(0) == GRAPH_MAX_SETS


VENDOR = ref("VendorSpec")


def vendor(name: str) -> TrialRequest:
    return TrialRequest(VENDOR, PROBLEM, {}, vendor=name)


@pytest.mark.parametrize("name", ["torch.mul", "rebind"])
def test_a_vendor_path_is_checked_and_timed_like_a_config(runner: TrialRunner, name: str) -> None:
    m = runner.run(vendor(name))
    assert m.outcome is Outcome.OK, m.error
    assert len(m.samples_ms) == runner.options.reps and m.median_ms and m.median_ms > 0
    assert m.max_rel_error is not None and m.max_rel_error <= 1e-6
    # The config after it, on the same kept inputs, writes the output tensor built for them.
    after = runner.run(TrialRequest(VENDOR, PROBLEM, {"BLOCK": 16}))
    assert after.outcome is Outcome.OK, after.error


def test_a_vendor_path_skips_the_space_check_but_not_the_memory_check(
    runner: TrialRunner,
) -> None:
    # BLOCK=32 breaks the space's rule: a vendor request's config is ignored.
    job, invalid = runner.check(TrialRequest(VENDOR, PROBLEM, {"BLOCK": 32}, vendor="torch.mul"))
    assert invalid is None and job.config == {} and job.vendor == "torch.mul"
    huge = {"N": 2**62}
    _, too_big = runner.check(TrialRequest(VENDOR, huge, {}, vendor="torch.mul"))
    assert too_big is not None and too_big.outcome is Outcome.INVALID


def test_a_failing_vendor_path_is_recorded_and_the_next_trial_works(runner: TrialRunner) -> None:
    raised = runner.run(vendor("raises"))
    assert raised.outcome is Outcome.COMPILE_ERROR
    assert raised.error == "RuntimeError: the library has no kernel for this problem"
    shaped = runner.run(vendor("wrong_shape"))
    assert shaped.outcome is Outcome.WRONG
    assert shaped.error is not None and "shape (80,)" in shaped.error
    unknown = runner.run(vendor("unlisted"))
    assert unknown.outcome is Outcome.COMPILE_ERROR and "no vendor path 'unlisted'" in (
        unknown.error or ""
    )
    after = runner.run(TrialRequest(VENDOR, PROBLEM, {"BLOCK": 16}))
    assert after.outcome is Outcome.OK, after.error
