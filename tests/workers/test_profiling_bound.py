"""workers/profiling/bound.py: the Amdahl bound's ceiling at the device's roofline, and the
in-model figure from two traces' GPU kernel time."""

from __future__ import annotations

import random

import pytest

from search_spaces.bundle import Bundle, BundleEntry
from search_spaces.registry import get_spec
from workers.device_table import lookup
from workers.profiling.bound import Bound, amdahl, exact_entry, floor_ms, in_model

MATMUL = get_spec("matmul")
FIELDS = ("M", "N", "K", "dtype")
BIG = {"M": 4096, "N": 4096, "K": 4096, "dtype": "bfloat16"}  # compute-bound on an H200
SMALL = {"M": 16, "N": 4096, "K": 4096, "dtype": "bfloat16"}


def matmul_bound(device_class: str) -> Bound | None:
    """The bound of a 1 ms forward of two swapped matmuls: BIG (300 µs, both times measured) and
    SMALL (100 µs, no vendor time), from a matmul bundle of ``device_class``."""
    entries = [
        BundleEntry(BIG, {}, triton_ms=0.16, vendor_ms=0.2),
        BundleEntry(SMALL, {}, triton_ms=0.01),
    ]
    bundle = Bundle("matmul", "v1", device_class, {}, entries)
    return amdahl(
        [("matmul", BIG, 300.0), ("matmul", SMALL, 100.0)],
        lambda k, p: True,
        lambda k, p: exact_entry(bundle, FIELDS, p),
        lambda k, p: floor_ms(bundle, p),
        1000.0,
    )


def test_the_ceiling_is_the_bound_at_the_devices_roofline() -> None:
    h200 = lookup("NVIDIA H200")
    floor = MATMUL.flops(BIG) / (h200.bf16_tflops or 0) / 1e12 * 1e3  # ms, compute-bound
    assert floor > MATMUL.bytes_moved(BIG) / (h200.memory_bandwidth_gbs or 0) / 1e9 * 1e3
    bundle = Bundle("matmul", "v1", "NVIDIA H200", {}, [])
    assert floor_ms(bundle, BIG) == pytest.approx(floor, rel=1e-12)
    bound = matmul_bound("NVIDIA H200")
    assert bound is not None
    assert (bound.swapped_share, bound.measured_share) == (0.4, 0.75)
    assert bound.change == pytest.approx(-300 * (1 - 0.16 / 0.2) / 1000)  # SMALL: s = 1
    assert bound.ceiling == pytest.approx(-300 * (1 - floor / 0.2) / 1000, rel=1e-12)
    assert bound.to_dict()["ceiling"] == bound.ceiling


def test_an_fp8_kernels_floor_takes_the_fp8_peak() -> None:
    fp8 = get_spec("fp8_matmul")
    problem = {"M": 4096, "N": 4096, "K": 4096}
    h200 = lookup("NVIDIA H200")
    floor = fp8.flops(problem) / (h200.fp8_tflops or 0) / 1e12 * 1e3  # ms, compute-bound
    assert floor > fp8.bytes_moved(problem) / (h200.memory_bandwidth_gbs or 0) / 1e9 * 1e3
    bundle = Bundle("fp8_matmul", "v1", "NVIDIA H200", {}, [])
    assert floor_ms(bundle, problem) == pytest.approx(floor, rel=1e-12)
    a100 = Bundle("fp8_matmul", "v1", "NVIDIA A100-SXM4-80GB", {}, [])
    assert floor_ms(a100, problem) is None  # no FP8 peak


def test_no_ceiling_without_a_device_with_peaks_in_the_table() -> None:
    for device_class in ("cpu", "replay:NVIDIA H200", "Some Future GPU"):
        bound = matmul_bound(device_class)
        assert bound is not None and bound.ceiling is None
        assert bound.change == pytest.approx(-0.06)  # the bound does not need the table


def test_the_ceiling_claims_no_less_gain_than_the_bound_where_no_time_beats_the_floor() -> None:
    rng = random.Random(7)
    for _ in range(500):
        shapes = []
        for i in range(rng.randint(1, 6)):
            floor = rng.uniform(0.001, 1.0)
            times = [rng.choice([None, floor * rng.uniform(1.0, 5.0)]) for _ in range(2)]
            entry = BundleEntry({}, {}, triton_ms=times[0], vendor_ms=times[1])
            problem = {"swapped": i % 4 != 3, "entry": entry, "floor": floor}
            shapes.append(("k", problem, rng.uniform(1.0, 100.0)))
        bound = amdahl(
            shapes,
            lambda k, p: p["swapped"],
            lambda k, p: p["entry"],
            lambda k, p: p["floor"],
            1000.0,
        )
        if bound is not None and bound.change is not None:
            assert bound.ceiling is not None and bound.ceiling <= bound.change + 1e-12


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
