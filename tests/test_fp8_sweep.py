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
