"""The fleet simulation's steady trial rate (benchmarks/fleet_sim.py)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from benchmarks.fleet.sim_pool import busy_share, search_only_landscapes, wanted_busy_share
from benchmarks.fleet.speed import SpeedProbe, idle_us
from benchmarks.fleet_sim import phases, steady_series
from workers.replay import ReplayRunner

ROOT = Path(__file__).resolve().parents[2]


def test_seconds_without_a_trial_count_zero() -> None:
    # Long trials finish in waves: two busy seconds in a ten-second window are 30 trials/s on
    # average, not the 150 a mean over the seconds with rows gives.
    rows = [(100.0, 7), (103.0, 200), (107.0, 100), (110.0, 9)]
    series = steady_series(rows, 100.5, 110.0)
    assert series == [0, 0, 200, 0, 0, 0, 100, 0, 0]
    assert sum(series) / len(series) == 300 / 9


def test_whole_seconds_from_start_to_end() -> None:
    rows = [("5", 1), ("6", 2), ("7", 3)]
    assert steady_series(rows, 5.0, 7.0) == [1, 2]
    assert steady_series(rows, 5.2, 7.5) == [2, 3]
    assert steady_series(rows, 7.0, 7.0) == []


def test_phases_split_the_window_with_the_cpu_each_span_spent() -> None:
    # Five seconds of trials from the meter's clock 100.0; the meter read cumulative CPU
    # seconds every second (the machine one core busy, each server a quarter of a core).
    cpu = [
        (100.0 + k, {"machine busy": 1.0 * k, "server0": 0.25 * k, "server1": 0.25 * k,
                     "server0 drivers": 0.2 * k})
        for k in range(6)
    ]  # fmt: skip
    out = phases([100, 100, 200, 200, 50], [1, 1, 3, 3, 4], cpu, 100.0, 2)
    assert [p["from_s"] for p in out] == [0, 2, 4]
    assert [p["trials_per_s"] for p in out] == [100.0, 200.0, 50.0]
    assert [p["jobs_running"] for p in out] == [1.0, 3.0, 4.0]
    assert [p["machine_cores"] for p in out] == [1.0, 1.0, 1.0]
    # 2 CPU seconds over 200 trials, then over 400, then 1 over 50; the servers half of it
    # (the drivers are a role inside server0, not counted twice).
    assert [p["machine_ms_per_trial"] for p in out] == [10.0, 5.0, 20.0]
    assert [p["servers_ms_per_trial"] for p in out] == [5.0, 2.5, 10.0]


def test_busy_share_counts_only_the_seconds_a_class_had_a_job() -> None:
    # Two classes of two workers over [0, 10]: "a" had jobs in [0, 4] and [3, 6] (one span,
    # 0-6), "b" none. a's workers were busy 0-6, 2-5 and 6-7 (that second is past its jobs).
    classes = [
        {"class": "a", "workers": 2, "intervals": [(0.0, 6.0), (2.0, 5.0), (6.0, 7.0)]},
        {"class": "b", "workers": 2, "intervals": []},
    ]
    share = wanted_busy_share(classes, {"a": [(0.0, 4.0), (3.0, 6.0)]}, 0.0, 10.0)
    assert share == (6.0 + 3.0) / (2 * 6.0)
    assert busy_share(classes, 0.0, 10.0) == (6.0 + 3.0 + 1.0) / (4 * 10.0)
    assert wanted_busy_share(classes, {}, 0.0, 10.0) is None
    # The window cuts the job spans too.
    assert wanted_busy_share(classes, {"a": [(0.0, 6.0)]}, 4.0, 10.0) == (2.0 + 1.0) / (2 * 2.0)


def test_the_speed_probe_times_the_same_work_by_cpu_time() -> None:
    # CPU time, not wall time: a thread that holds the probe back (the GIL) adds none.
    probe = SpeedProbe(interval_s=0.01)
    probe.start()
    deadline = time.monotonic() + 5.0
    while len(probe.samples) < 3 and time.monotonic() < deadline:
        sum(i * i for i in range(20_000))  # this thread keeps the GIL busy meanwhile
    probe.stop()
    assert len(probe.samples) >= 3 and all(s > 0 for s in probe.samples)
    median = probe.median_us()
    assert median is not None and median < 20 * idle_us(samples=3)
    assert SpeedProbe().median_us() is None


def test_the_simulation_can_search_only_what_its_landscapes_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from orchestrator.run import planning
    from orchestrator.study import encoding, search
    from search_spaces import get_spec

    for module in (encoding, planning, search):  # restored after the test
        monkeypatch.setattr(module, "valid_configs", module.valid_configs)
    paths = sorted((ROOT / "benchmarks" / "landscapes" / "h200").glob("matmul_*.json.gz"))
    limits = ReplayRunner(paths[:1]).limits
    space = get_spec("matmul").space
    whole = len(encoding.valid_configs(space, limits))
    assert search_only_landscapes(paths) == 1176
    answered = planning.valid_configs(space, limits)
    assert len(answered) == 1176 < whole
    assert search.valid_configs(space, limits) == answered == encoding.valid_configs(space, limits)
