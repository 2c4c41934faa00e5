"""workers/profiling/bound.py: the in-model figure from two traces' GPU kernel time."""

from __future__ import annotations

import pytest

from workers.profiling.bound import in_model


def test_the_in_model_change_is_the_gpu_time_saved_over_the_latency() -> None:
    # 300 µs of kernels per forward became 200 µs, in a forward of 1 ms: -10%.
    figure = in_model(300.0, 200.0, 1000.0)
    assert figure is not None
    assert (figure.base_kernel_ms, figure.swapped_kernel_ms) == (0.3, 0.2)
    assert figure.change == pytest.approx(-0.1)
    # Slower kernels in the model show as a positive change.
    slower = in_model(300.0, 450.0, 1000.0)
    assert slower is not None and slower.change == pytest.approx(0.15)
    assert figure.to_dict() == {"base_kernel_ms": 0.3, "swapped_kernel_ms": 0.2, "change": -0.1}


def test_no_in_model_figure_without_both_gpu_times_or_a_latency() -> None:
    assert in_model(None, 200.0, 1000.0) is None  # no baseline trace
    assert in_model(300.0, None, 1000.0) is None  # swapped forward not traced (refused, untimed)
    assert in_model(0.0, 0.0, 1000.0) is None  # CPU traces: no GPU kernels
    assert in_model(300.0, 200.0, 0.0) is None
