"""How many trials per second the driver itself sustains: a job answered by replay devices (no GPU,
no trial time), so Ray dispatch, Optuna and the database set the pace.

Usage (repo root): python benchmarks/driver_throughput.py [--code DIR] [--trials 30]
    [--in-flight 12]
Runs `python -m orchestrator tune` over the eight matmul landscapes at M = 16 and 128 in
benchmarks/landscapes/h200 (one replay worker), with a fresh SQLite database, taking the
orchestrator's code from --code (default: this checkout; give a `git worktree` of an older
commit to compare). Prints the trials, the trial phase (first to last trial row) and trials/s.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHAPES = ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--code", type=Path, default=ROOT)
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--in-flight", type=int, default=12)
    args = parser.parse_args()
    land = ROOT / "benchmarks" / "landscapes" / "h200"
    files = [
        land / f"matmul_M{m}_N{n}_K{k}_dtypebfloat16.json.gz" for m in (16, 128) for n, k in SHAPES
    ]
    problems = [f"M={m},N={n},K={k},dtype=bfloat16" for m in (16, 128) for n, k in SHAPES]
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "t.db"
        cmd = [sys.executable, "-m", "orchestrator", "tune", "matmul"]
        for p in problems:
            cmd += ["-p", p]
        cmd += ["--trials", str(args.trials), "--in-flight", str(args.in_flight), "--json"]
        cmd += ["--device", "replay:" + ",".join(map(str, files)), "--db", f"sqlite:///{db}"]
        env = {**os.environ, "PYTHONPATH": str(args.code.resolve())}
        start = time.perf_counter()
        proc = subprocess.run(cmd, cwd=args.code, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            raise SystemExit(f"tune failed ({proc.returncode}): {proc.stderr[-2000:]}")
        with sqlite3.connect(db) as c:
            n, first, last = c.execute(
                "select count(*), min(created_at), max(created_at) from tf_trials"
            ).fetchone()
    phase = (datetime.fromisoformat(last) - datetime.fromisoformat(first)).total_seconds()
    print(f"code {args.code}: {n} trials, trial phase {phase:.2f} s = {n / phase:.0f} trials/s; "
          f"command wall {wall:.1f} s")  # fmt: skip


if __name__ == "__main__":
    main()
