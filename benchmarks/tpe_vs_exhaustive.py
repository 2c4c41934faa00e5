"""Issue 3 check: a TPE job of 60 trials against an exhaustive run of the same space, one device call.

Usage (GPU machine, repo root): python benchmarks/tpe_vs_exhaustive.py --out-dir DIR
    [--problem M=4096,N=4096,K=4096,dtype=bfloat16] [--trials 60] [--seed 0]
1. `python -m orchestrator record matmul -p PROBLEM --out DIR/landscape.json.gz` times every valid
   config (compile pool on), the exhaustive run.
2. `python -m orchestrator tune matmul -p PROBLEM --trials 60 --sampler tpe --json --db
   sqlite:///DIR/tpe.db` runs the TPE job on local Ray with one GPU worker.
3. The TPE winner's time is looked up in the exhaustive landscape (same measurement method) and
   compared with the landscape's optimum. Writes DIR/tpe_vs_exhaustive.json; prints a table.
Note: step 1 fills Triton's disk cache, so the TPE job's compiles are cache hits; this benchmark
is about the quality of the config found, not tuning wall time.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from pathlib import Path


def run(cmd: list[str], timeout_s: float | None = None) -> tuple[str, float, int]:
    """Run ``cmd``; past ``timeout_s`` send it SIGTERM (record then writes what it finished)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate()
    wall = time.perf_counter() - start
    sys.stderr.write(err[-4000:])
    return out, wall, proc.returncode


def main() -> None:
    from search_spaces import config_key
    from workers.landscape import read_landscape
    from workers.measurement import Outcome

    parser = argparse.ArgumentParser()
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument("--problem", default="M=4096,N=4096,K=4096,dtype=bfloat16")
    parser.add_argument("--trials", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--record-timeout", type=float, default=None, help="seconds")
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    py = [sys.executable, "-m", "orchestrator"]
    landscape_path = args.out_dir / "landscape.json.gz"
    record_cmd = [*py, "record", "matmul", "-p", args.problem, "--out", str(landscape_path)]
    record_out, record_wall, rc = run(record_cmd, args.record_timeout)
    print(record_out[-1500:], flush=True)
    if not landscape_path.exists():
        raise SystemExit(f"record failed with exit code {rc}")
    tune_cmd = [
        *py,
        "tune",
        "matmul",
        "-p",
        args.problem,
        "--trials",
        str(args.trials),
        "--sampler",
        "tpe",
        "--seed",
        str(args.seed),
        "--json",
        "--db",
        f"sqlite:///{args.out_dir / 'tpe.db'}",
    ]
    tune_out, tune_wall, rc = run(tune_cmd)
    if rc != 0:
        raise SystemExit(f"tune failed with exit code {rc}: {tune_out[-2000:]}")
    job = json.loads(tune_out)
    landscape = read_landscape(landscape_path)
    by_key = landscape.by_config()
    best = landscape.best()
    if best is None or best.time_ms is None:
        raise SystemExit("the exhaustive run found no ok config")
    study = job["studies"][0]
    tpe_config = study["best"]["config"]
    tpe_in_landscape = by_key.get(config_key(tpe_config))
    tpe_time = tpe_in_landscape.time_ms if tpe_in_landscape else None
    ok = sum(r.outcome is Outcome.OK for r in landscape.results)
    within = sum(
        r.outcome is Outcome.OK and r.time_ms is not None and r.time_ms <= best.time_ms * 1.05
        for r in landscape.results
    )
    result = {
        "problem": args.problem,
        "exhaustive": {
            "command": " ".join(record_cmd[1:]),
            "wall_s": record_wall,
            "configs": len(landscape.results),
            "ok": ok,
            "within_5pct_of_best": within,
            "best_config": best.config,
            "best_ms": best.time_ms,
        },
        "tpe": {
            "command": " ".join(tune_cmd[1:]),
            "wall_s": tune_wall,
            "job": job,
            "best_config": tpe_config,
            "best_ms_retimed": study["best"]["time_ms"],
            "best_ms_in_exhaustive_run": tpe_time,
        },
        "ratio_tpe_over_exhaustive_best": tpe_time / best.time_ms if tpe_time else None,
    }
    (args.out_dir / "tpe_vs_exhaustive.json").write_text(json.dumps(result, indent=1))
    print(f"{'run':<12} {'configs':>8} {'wall s':>8} {'best ms':>9}  config")
    print(
        f"{'exhaustive':<12} {len(landscape.results):>8} {record_wall:>8.1f} "
        f"{best.time_ms:>9.4f}  {config_key(best.config)}"
    )
    print(
        f"{'tpe':<12} {args.trials:>8} {tune_wall:>8.1f} {tpe_time or float('nan'):>9.4f}  "
        f"{config_key(tpe_config)}"
    )
    print(
        f"TPE winner / exhaustive best (both from the exhaustive run's timings): "
        f"{result['ratio_tpe_over_exhaustive_best']}; configs within 5% of best: {within} of {ok}"
    )


if __name__ == "__main__":
    main()
