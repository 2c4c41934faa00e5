"""benchmarks/fp8_sweep.py on Triton's interpreter: the smoke grid runs end to end on the CPU,
every winner is checked, and the per-candidate summary accounts for every problem."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

TOOL = Path(__file__).resolve().parents[1] / "benchmarks" / "fp8_sweep.py"


def test_the_smoke_grid_runs_on_the_interpreter(tmp_path: Path) -> None:
    out = tmp_path / "fp8.json"
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    run = subprocess.run(
        [sys.executable, str(TOOL), "--grid", "smoke", "--rounds", "1", "--jobs", "2", "--out",
         str(out)],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    summary = json.loads(out.read_text())["summary"]
    assert summary["all_winners_within_tolerance"] is True
    assert summary["wrong"] == []
    per = summary["per_candidate"]
    assert sum(c["won"] for c in per.values()) == summary["problems"] == 3
    # No torch._scaled_mm on the CPU: no ratio against it, and the summary says why per problem.
    assert all(c["vs torch._scaled_mm, M < 512"] is None for c in per.values())
    assert len(summary["not_run"]["torch._scaled_mm"]) == 3
    assert summary["best_by_m"] == {}  # nothing to compare with torch._scaled_mm here


def test_a_stored_run_is_summarized_again(tmp_path: Path) -> None:
    """The H100 issue-grid run of c52ffdf: the best by M against torch._scaled_mm from its rows
    (M=1 has no cuBLASLt ratio, so 15 problems on each side of 512); a bad file is one line."""
    stored = TOOL.parent / "results/fp8/2026-12-07-c52ffdf-h100-gluon/fp8_issue.json"
    run = subprocess.run(
        [sys.executable, str(TOOL), "--summarize", str(stored)], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    small, large = summary["best_by_m"]["M < 512"], summary["best_by_m"]["M >= 512"]
    assert small["problems"] == large["problems"] == 15
    assert large["geomean_vs torch._scaled_mm"] < small["geomean_vs torch._scaled_mm"]
    assert (
        summary["geomean_vs torch._scaled_mm"]
        == json.loads(stored.read_text())["summary"]["geomean_vs torch._scaled_mm"]
    )
    (tmp_path / "bad.json").write_text("[]")
    bad = subprocess.run(
        [sys.executable, str(TOOL), "--summarize", str(tmp_path / "bad.json")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert bad.returncode == 2 and bad.stderr.startswith("error: ") and bad.stderr.count("\n") == 1
