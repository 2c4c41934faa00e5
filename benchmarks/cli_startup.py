"""Start-up cost of the light `tunefleet` commands: each command's wall time as a fresh
subprocess (`python -m orchestrator ...`), median of --runs runs, commands interleaved so that a
change in the machine's load touches all of them alike; also its CPU time (user + system of the
subprocess: less sensitive than wall time to other processes on a loaded machine) and which
heavy packages it imported (from `python -X importtime`).

Usage: python benchmarks/cli_startup.py [--runs 15] [--out DIR] [--bytecode] [--tune-kept N]
(times the checkout it lies in). Uses a fresh SQLite database in a temporary folder (`jobs` and
`best` read it; it is created once before timing). --bytecode lets Python write and use the
checkout's bytecode caches (as an installed package has them) even where PYTHONDONTWRITEBYTECODE
is set; without it the environment decides. --tune-kept N also times N `tune matmul --trials 1
--keep-workers` jobs on a Ray head started here (loopback, as benchmarks/kept_workers.py starts
it), after one job that starts the kept worker; each job on its own database, created (`db
upgrade`) before the timed command, so that its trial is measured, not answered from an earlier
job. Writes results.json and prints a table; --out also writes them to DIR.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

COMMANDS: dict[str, list[str]] = {
    "--help": ["--help"],
    "kernels": ["kernels"],
    "space": ["space", "matmul", "--device-class", "H200"],
    "jobs": ["jobs"],
    "best": ["best", "matmul"],
}
HEAVY = (
    "torch",
    "triton",
    "ray",
    "optuna",
    "numpy",
    "sqlalchemy",
    "alembic",
    "httpx",
    "pydantic",
    "rich",
    "typer",
)
GOAL_S = 0.5
#: The goal of `tune --trials 1` on a kept worker, seconds.
TUNE_GOAL_S = 3.0
#: The checkout whose code is timed (`python -m` puts the working directory first on sys.path).
REPO = Path(__file__).resolve().parents[1]


def _cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def run_once(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one ``python -m orchestrator ARGS``."""
    cpu, start = _cpu(), time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        env=env,
        cwd=REPO,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return time.perf_counter() - start, _cpu() - cpu


def heavy_imports(args: list[str], env: dict[str, str]) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "orchestrator", *args],
        env=env,
        cwd=REPO,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    names = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()}
    return [h for h in HEAVY if h in names]


def tune_kept(jobs: int, env: dict[str, str], tmp: Path) -> dict[str, Any]:
    """Wall and CPU seconds of ``jobs`` one-trial tune jobs on a kept worker (see the doc)."""
    sys.path.insert(0, str(Path(__file__).parent))
    from _bench import ray_head

    args = ["tune", "matmul", "-p", "M=64,N=64,K=64,dtype=float16", "--trials", "1"]
    walls, cpus = [], []
    with ray_head(env) as ray_env:
        for i in range(jobs + 1):
            db = f"sqlite:///{tmp}/kept{i}.db"
            run_once(["db", "upgrade", "--db", db], ray_env)
            wall, used = run_once([*args, "--keep-workers", "--db", db], ray_env)
            if i:  # the first one started the kept worker
                walls.append(wall)
                cpus.append(used)
    return {
        "jobs": jobs,
        "median_s": round(statistics.median(walls), 3),
        "min_s": round(min(walls), 3),
        "max_s": round(max(walls), 3),
        "cpu_median_s": round(statistics.median(cpus), 3),
        "under_goal": statistics.median(walls) < TUNE_GOAL_S,
        "walls_s": [round(w, 3) for w in walls],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--bytecode", action="store_true")
    parser.add_argument("--tune-kept", type=int, default=0, metavar="N")
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "TUNEFLEET_DB": f"sqlite:///{tmp}/startup.db", "COLUMNS": "120"}
        if opts.bytecode:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
        run_once(["db", "upgrade"], env)
        for args in COMMANDS.values():  # writes the bytecode caches where allowed
            run_once(args, env)
        baseline = [0.0] * opts.runs
        times: dict[str, list[float]] = {name: [] for name in COMMANDS}
        cpu: dict[str, list[float]] = {name: [] for name in COMMANDS}
        for i in range(opts.runs):
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", "pass"], check=True)
            baseline[i] = time.perf_counter() - start
            for name, args in COMMANDS.items():
                wall, used = run_once(args, env)
                times[name].append(wall)
                cpu[name].append(used)
        imported = {name: heavy_imports(args, env) for name, args in COMMANDS.items()}
        kept = tune_kept(opts.tune_kept, env, Path(tmp)) if opts.tune_kept else None
    rows: dict[str, dict[str, Any]] = {
        name: {
            "median_s": round(statistics.median(t), 3),
            "min_s": round(min(t), 3),
            "max_s": round(max(t), 3),
            "cpu_median_s": round(statistics.median(cpu[name]), 3),
            "under_goal": statistics.median(t) < GOAL_S,
            "heavy_imports": imported[name],
        }
        for name, t in times.items()
    }
    result = {
        "runs": opts.runs,
        "bytecode_written": "PYTHONDONTWRITEBYTECODE" not in env,
        "goal_s": GOAL_S,
        "python_startup_median_s": round(statistics.median(baseline), 3),
        "load_average_1_5_15": list(os.getloadavg()),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "commands": rows,
        "tune_trials1_kept_worker": kept,
    }
    text = json.dumps(result, indent=2)
    if opts.out is not None:
        opts.out.mkdir(parents=True, exist_ok=True)
        (opts.out / "results.json").write_text(text + "\n")
    print(f"python -c pass: {result['python_startup_median_s']:.3f} s (median)")
    print(f"load average: {' '.join(f'{x:.2f}' for x in result['load_average_1_5_15'])}")
    print(f"bytecode caches written: {'yes' if result['bytecode_written'] else 'no'}")
    print(
        f"{'command':<10} {'median s':>9} {'min s':>7} {'max s':>7} {'cpu s':>6}  <{GOAL_S}s  "
        "heavy imports"
    )
    for name, row in rows.items():
        print(
            f"{name:<10} {row['median_s']:>9.3f} {row['min_s']:>7.3f} {row['max_s']:>7.3f} "
            f"{row['cpu_median_s']:>6.3f}  {'yes' if row['under_goal'] else 'no':>5}  "
            f"{','.join(row['heavy_imports']) or '-'}"
        )
    if kept is not None:
        print(
            f"tune --trials 1 on a kept worker ({kept['jobs']} jobs): median {kept['median_s']:.3f} s"
            f", min {kept['min_s']:.3f}, max {kept['max_s']:.3f}, cpu {kept['cpu_median_s']:.3f} s; "
            f"under {TUNE_GOAL_S:.0f} s: {'yes' if kept['under_goal'] else 'no'}"
        )


if __name__ == "__main__":
    main()
