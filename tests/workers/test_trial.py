"""The trial process's job loop, run in this process on CPU tensors: kept input sets."""

from __future__ import annotations

from typing import Any

from search_spaces import Problem
from workers.device import Backend
from workers.measurement import Outcome
from workers.trial import ChildSettings, TrialRequest, _State, run_job

from .fake_specs import ref

WRITER = ref("InputWriterSpec")
SETTINGS = ChildSettings(Backend.INTERPRETER, 0, 2, False, False, None)


class Sink:
    """Stands in for the pipe to the parent: keeps what the job loop sends."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    def send(self, msg: Any) -> None:
        self.sent.append(msg)


def run(state: _State, write: int, n: int = 40) -> Outcome:
    problem: Problem = {"N": n, "dtype": "float32"}
    return run_job(
        Sink(), TrialRequest(WRITER, problem, {"WRITE": write}), state
    ).measurement.outcome  # type: ignore[arg-type]


def test_a_second_trial_of_the_problem_reuses_the_inputs_and_reference() -> None:
    state = _State(SETTINGS, "cpu")
    assert run(state, 0) is Outcome.OK
    assert state.sets is not None
    timed = state.sets[1]
    assert timed.reference is not None
    reference = timed.reference
    assert run(state, 0) is Outcome.OK
    assert state.sets[1] is timed and timed.reference is reference


def test_another_problem_gets_fresh_inputs() -> None:
    state = _State(SETTINGS, "cpu")
    run(state, 0)
    assert state.sets is not None
    first = state.sets[1]
    assert run(state, 0, n=64) is Outcome.OK
    assert state.sets is not None and state.sets[1] is not first


def test_a_kernel_that_writes_its_inputs_is_judged_as_on_fresh_inputs() -> None:
    # Without kept sets, the reference is computed after the launch from the overwritten x and
    # the trial is wrong; the kept reference (from the untouched x) must not make it look right.
    state = _State(SETTINGS, "cpu")
    assert run(state, 0) is Outcome.OK
    assert run(state, 1) is Outcome.WRONG
    assert state.sets is None  # the overwritten sets are not reused
    assert run(state, 0) is Outcome.OK
