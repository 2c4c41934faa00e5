"""The fleet simulation's steady trial rate (benchmarks/fleet_sim.py)."""

from __future__ import annotations

from benchmarks.fleet_sim import steady_series


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
