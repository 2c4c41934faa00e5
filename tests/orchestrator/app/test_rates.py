"""Rates: TFLOP/s, GB/s and the roofline share of a measured time (summary and `run` share them)."""

from __future__ import annotations

import math

from orchestrator.app.rates import rates
from search_spaces.registry import get_spec
from workers.device_table import lookup

MATMUL = get_spec("matmul")
PROBLEM = {"M": 4096, "N": 4096, "K": 4096, "dtype": "bfloat16"}


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
