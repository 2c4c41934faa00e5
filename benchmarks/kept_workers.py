"""Start-up of a tuning job with workers kept warm between jobs (`tune --keep-workers`) against
fresh ones, on one Ray head started here on 127.0.0.1.

Usage (repo root): python benchmarks/kept_workers.py [--problem P] [--trials 12] [--jobs 3]
Starts `ray start --head` (loopback, token auth off, its own temp dir), then runs `tunefleet
tune matmul` --jobs times with --keep-workers (the first creates the worker actor, the others find
it: its trial process, compile pool and device context are already up), then the same number of
times without (each job starts and ends its own actor). Every job gets its own SQLite database, so
nothing is answered from an earlier job's trials. Between the two, a job on a kept worker that had
started but not yet run a trial (see ``idle_kept_job``). Per job: the command's wall seconds and the
seconds from its start to its first stored trial. Ends the kept workers and the Ray head. On a GPU
machine it measures the GPU worker; without one, Triton's interpreter.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from _bench import ray_head, stop_kept_workers  # this folder (run as a script)


def first_trial_epoch(db: Path) -> float:
    with sqlite3.connect(db) as c:
        (first,) = c.execute("SELECT min(created_at) FROM tf_trials").fetchone()
    return datetime.fromisoformat(first).replace(tzinfo=timezone.utc).timestamp()


def one_job(
    env: dict[str, str], problem: str, trials: int, keep: bool, db: Path
) -> tuple[float, float]:
    """(wall seconds, seconds to the first stored trial) of one `tunefleet tune` job."""
    cmd = [sys.executable, "-m", "orchestrator", "tune", "matmul", "-p", problem, "--trials",
           str(trials), "--db", f"sqlite:///{db}", *(["--keep-workers"] if keep else [])]  # fmt: skip
    started = time.time()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.time() - started
    if done.returncode != 0:
        raise SystemExit(f"tune failed ({done.returncode}): {done.stderr[-2000:]}")
    return wall, first_trial_epoch(db) - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--problem", default="M=64,N=64,K=64,dtype=float16")
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--jobs", type=int, default=3)
    args = parser.parse_args()
    if args.jobs < 2:
        parser.error("--jobs must be at least 2: the first kept job starts the kept worker")
    with tempfile.TemporaryDirectory() as tmp, ray_head() as env:
        rows = []
        for keep in (True, False):
            for i in range(args.jobs):
                db = Path(tmp) / f"{keep}{i}.db"
                wall, first = one_job(env, args.problem, args.trials, keep, db)
                rows.append((keep, i, wall, first))
                label = "kept " if keep else "fresh"
                print(
                    f"{label} job {i + 1}: wall {wall:5.1f} s, first trial after {first:5.1f} s",
                    flush=True,
                )
            if keep:
                idle = idle_kept_job(env, args.problem, args.trials, Path(tmp))
                print(f"idle kept worker (started, no trial yet): first trial after {idle:5.1f} s")
                stop_kept_workers(env)  # the fresh jobs' actors need the GPU the kept one holds
    warm = [first for keep, i, _, first in rows if keep and i > 0]
    fresh = [first for keep, _, _, first in rows if not keep]
    print(f"first trial: kept workers (jobs 2+) median {statistics.median(warm):.1f} s, "
          f"fresh workers median {statistics.median(fresh):.1f} s")  # fmt: skip


def idle_kept_job(env: dict[str, str], problem: str, trials: int, tmp: Path) -> float:
    """Seconds to the first trial of a job whose kept worker had started but run no trial: the
    kept workers are stopped, the first kept job is run again on its own database (every trial
    answered from it, so its new kept actor runs none), then a job on a fresh database."""
    stop_kept_workers(env)
    one_job(env, problem, trials, True, tmp / "True0.db")
    return one_job(env, problem, trials, True, tmp / "idle.db")[1]


if __name__ == "__main__":
    main()
