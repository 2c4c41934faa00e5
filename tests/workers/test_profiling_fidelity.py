"""workers.profiling.fidelity: a study's vendor time against the model's own op, per call."""

from __future__ import annotations

import dataclasses
from typing import Any

from search_spaces.bundle import BundleEntry
from workers.profiling.fidelity import TOLERANCE, vendor_vs_model

PAGED = {"batch": 64, "context_len": 513, "q_heads": 32, "kv_heads": 8, "head_dim": 128}


def _entry(
    problem: dict[str, Any], vendor_ms: float | None, backend: str = "triton"
) -> BundleEntry:
    return BundleEntry(
        problem, {}, backend=backend, vendor="sdpa_gathered", triton_ms=0.053, vendor_ms=vendor_ms
    )


def test_a_study_vendor_far_from_the_models_op_is_flagged() -> None:
    """Paged attention's study timed the gathered path at 0.163 ms; the model's SDPA over its
    contiguous rows takes 8 calls x 0.029 ms per forward: flagged. An rmsnorm entry within 25%
    is not; shapes without an exact entry or a vendor time give nothing."""
    rms = {"M": 64, "N": 4096}
    entries = {
        ("paged_attention", 64): _entry(PAGED, 0.163),
        ("rmsnorm", 64): _entry(rms, 0.0046, backend="vendor"),
        ("rmsnorm", 1): _entry({**rms, "M": 1}, None),
    }

    def entry_of(kernel: str, problem: dict[str, Any]) -> BundleEntry | None:
        return entries.get((kernel, problem.get("batch", problem.get("M"))))

    shapes = [
        ("paged_attention", PAGED, 8 * 29.0, 8.0),
        ("rmsnorm", rms, 17 * 4.0, 17.0),
        ("rmsnorm", {**rms, "M": 1}, 17 * 4.0, 17.0),  # entry without a vendor time
        ("matmul", {"M": 64}, 100.0, 1.0),  # no entry
    ]
    paged, norm = vendor_vs_model(shapes, entry_of)
    assert (paged.kernel, paged.study_ms, paged.differs) == ("paged_attention", 0.163, True)
    assert paged.model_ms == 0.029
    assert (norm.kernel, norm.model_ms, norm.differs) == ("rmsnorm", 0.004, False)
    assert abs(norm.model_ms / norm.study_ms - 1) <= TOLERANCE
    assert dataclasses.asdict(paged)["problem"] == PAGED


def test_profile_prints_the_aa_column_and_the_flagged_comparisons(capsys: Any) -> None:
    from orchestrator.commands.profile import render_swap

    row = {
        "phase": "decode", "batch": 64, "mode": "graph", "baseline_ms": 2.688, "tuned_ms": 2.722,
        "change": 0.013, "aa_change": -0.004, "amdahl": None, "baseline_error": 0.02,
        "swapped_error": 0.02, "refused": None, "policy": None,
        "vendor_vs_model": [
            {"kernel": "paged_attention", "problem": {"batch": 64}, "vendor": "sdpa_gathered",
             "study_ms": 0.163, "model_ms": 0.029, "differs": True},
        ],
    }  # fmt: skip
    render_swap({"used": {}, "lookups": {}, "rows": [row], "error_rule": "refused where ..."})
    out = " ".join(capsys.readouterr().out.split())
    assert "A/A: the baseline timed again, last in each round" in out  # the column's meaning
    assert (
        "note: study vendor time far from the model's own op: decode b64 paged_attention "
        "batch=64: sdpa_gathered 0.163 ms in its study, the model's op 0.029 ms (0.18x)" in out
    )


def test_profile_prints_the_ceiling_beside_the_bound(capsys: Any, monkeypatch: Any) -> None:
    from orchestrator.commands.profile import render_swap

    monkeypatch.setenv("COLUMNS", "200")  # one line per row

    row = {
        "phase": "decode", "batch": 64, "mode": "graph", "baseline_ms": 3.071, "tuned_ms": 2.584,
        "change": -0.159, "aa_change": 0.007, "baseline_error": 0.03, "swapped_error": 0.03,
        "amdahl": {"swapped_share": 0.69, "measured_share": 1.0, "change": -0.171,
                   "ceiling": -0.252},
        "refused": None, "policy": None, "vendor_vs_model": [],
    }  # fmt: skip
    render_swap({"used": {}, "lookups": {}, "rows": [row], "error_rule": "refused where ..."})
    out = capsys.readouterr().out
    assert "-17.1%" in out and "-25.2%" in out
    assert "ceiling: the same kernels at the device's roofline" in " ".join(out.split())
