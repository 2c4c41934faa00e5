"""Rates: TFLOP/s, GB/s and the roofline share of a measured time (summary and `run` share them)."""

from __future__ import annotations

import math

from orchestrator.app.rates import rates
from search_spaces import MathRate
from search_spaces.registry import get_spec
from workers.device_table import lookup, roofline_floor_s

MATMUL = get_spec("matmul")
PROBLEM = {"M": 4096, "N": 4096, "K": 4096, "dtype": "bfloat16"}
FP8_MATMUL = get_spec("fp8_matmul")
FP8_PROBLEM = FP8_MATMUL.validate_problem({"M": 4096, "N": 4096, "K": 4096})


def test_rates_of_a_matmul_and_its_roofline_share_on_a_known_device() -> None:
    r = rates(MATMUL, PROBLEM, 1.0, "NVIDIA H200")
    assert r.tflops is not None and math.isclose(r.tflops, 2 * 4096**3 / 1e-3 / 1e12)
    assert r.gbs is not None and math.isclose(r.gbs, MATMUL.bytes_moved(PROBLEM) / 1e-3 / 1e9)
    peak = lookup("NVIDIA H200")
    assert r.roofline_pct is not None
    assert math.isclose(r.roofline_pct, 100 * r.tflops / peak.bf16_tflops)  # compute-bound


def test_no_time_no_rates_and_no_roofline_without_a_known_device() -> None:
    assert rates(MATMUL, PROBLEM, None) == rates(MATMUL, PROBLEM, 0.0)
    assert rates(MATMUL, PROBLEM, None).tflops is None
    assert rates(MATMUL, PROBLEM, 1.0, "cpu").roofline_pct is None
    assert rates(MATMUL, PROBLEM, 1.0).roofline_pct is None


def test_an_fp8_kernels_roofline_share_takes_the_fp8_peak() -> None:
    assert FP8_MATMUL.math_rate is MathRate.FP8 and MATMUL.math_rate is MathRate.BF16
    h100 = lookup("NVIDIA H100 80GB HBM3")
    assert h100.fp8_tflops is not None and h100.bf16_tflops is not None
    r = rates(FP8_MATMUL, FP8_PROBLEM, 1.0, h100.name)
    assert r.tflops is not None and math.isclose(r.tflops, 2 * 4096**3 / 1e-3 / 1e12)
    assert r.roofline_pct is not None
    assert math.isclose(r.roofline_pct, 100 * r.tflops / h100.fp8_tflops)  # compute-bound
    flops, nbytes = FP8_MATMUL.flops(FP8_PROBLEM), FP8_MATMUL.bytes_moved(FP8_PROBLEM)
    at_bf16 = roofline_floor_s(flops, nbytes, h100, MathRate.BF16)
    assert at_bf16 is not None  # the bf16 peak would claim about twice the share (989 vs 1,979)
    assert math.isclose(r.roofline_pct, 100 * at_bf16 / 1e-3 / 2, rel_tol=1e-3)


def test_no_fp8_roofline_on_a_class_without_an_fp8_peak() -> None:
    a100 = "NVIDIA A100-SXM4-80GB"
    assert lookup(a100).fp8_tflops is None
    r = rates(FP8_MATMUL, FP8_PROBLEM, 1.0, a100)
    assert r.tflops is not None and r.roofline_pct is None
    assert rates(MATMUL, PROBLEM, 1.0, a100).roofline_pct is not None
