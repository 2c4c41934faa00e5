"""The trial process's job loop, run in this process on CPU tensors: kept input sets."""

from __future__ import annotations

from typing import Any

import pytest

from search_spaces import Problem
from workers import trial
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


def test_a_kernel_that_writes_its_inputs_is_judged_on_the_inputs_as_built() -> None:
    # out = 2 * x is right for the x it was given; the x it overwrote afterwards (a scratch
    # input, say) is not what the output is checked against.
    state = _State(SETTINGS, "cpu")
    assert run(state, 0) is Outcome.OK
    assert run(state, 1) is Outcome.OK
    assert state.sets is None  # the overwritten sets are not reused
    assert run(state, 0) is Outcome.OK


@pytest.mark.parametrize("kept", [True, False])
def test_a_kernel_computing_its_output_from_inputs_it_changed_is_wrong(
    kept: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # x is overwritten first and out = 2 * (new x): a reference computed from the inputs after
    # the launch agrees with it; the one from the inputs as built does not.
    if not kept:
        monkeypatch.setattr(trial, "CACHED_SET_BYTES", 0)  # sets too large to keep a copy of
    state = _State(SETTINGS, "cpu")
    assert run(state, 2) is Outcome.WRONG
    assert state.sets is None
    assert run(state, 0) is Outcome.OK
