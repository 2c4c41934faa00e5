"""benchmarks/_sweep.py's compile step: each candidate in a process of its own, so one that hangs
or kills its process is recorded and the sweep goes on (with real misbehaving specs)."""

from __future__ import annotations

import time

import pytest

from tests.benchmark_script import load
from tests.workers.fake_specs import ref

sweep = load("_sweep")

SMALL = {"N": 40, "dtype": "float32"}


def _task(spec: str) -> tuple[str, dict[str, object], dict[str, object]]:
    return (ref(spec), SMALL, {"BLOCK": 16})


def test_a_candidate_that_hangs_is_killed_and_reported() -> None:
    start = time.monotonic()
    err = sweep.compile_in_process(_task("SleepSpec"), timeout_s=5)
    assert err is not None and err.startswith("Hung: no result in 5 s")
    assert time.monotonic() - start < 30  # SleepSpec sleeps 60 s


def test_a_candidate_that_kills_its_process_or_raises_is_reported() -> None:
    crashed = sweep.compile_in_process(_task("ExitSpec"), timeout_s=60)
    assert crashed is not None and crashed.startswith("Crashed: exit code 3")
    raised = sweep.compile_in_process(_task("RaiseSpec"), timeout_s=60)
    assert raised is not None and raised.startswith("ValueError: bad tile")
    assert sweep.compile_in_process(_task("DoubleSpec"), timeout_s=60) is None


def test_compile_all_records_the_broken_and_raises_when_none_ran(
    capsys: pytest.CaptureFixture[str],
) -> None:
    ok = sweep.compile_all(ref("DoubleSpec"), {"float32": SMALL}, [{"BLOCK": 16}], jobs=2)
    assert ok == {"float32": set()}
    with pytest.raises(SystemExit, match="no candidate config compiled and ran on float32"):
        sweep.compile_all(ref("ExitSpec"), {"float32": SMALL}, [{"BLOCK": 16}], jobs=2)
    assert "failed c0 on float32: Crashed: exit code 3" in capsys.readouterr().out
