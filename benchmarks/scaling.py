"""Issue 4 item 7: the same tuning job on 1 and on 2 GPUs of one host (nvidia-h200-x2).

Usage (GPU machine with 2 GPUs, repo root):
    python benchmarks/scaling.py --out-dir DIR [--gpus 1 2] [--trials 40] [--in-flight N]
        [--problems P ...] [--warm-workers]
(--in-flight: trials queued per worker; default tune's own, one per compile process + 1; the
session-2/3 rows used 12.)
Runs `tunefleet tune JOB.json` (matmul, the Llama-3-8B shapes at M = 1024 and 4096: 8 studies,
default sampler, same seed) once per GPU count, each with a fresh SQLite database and
CUDA_VISIBLE_DEVICES set to the first N GPUs. A first run on all GPUs fills the Triton cache
(reported as `cold`); the measured runs share that warm cache, so both counts time the same
compiled kernels. Per run, from the database: trials measured, when every worker had returned its
first trial (worker start-up: Ray actors, compile pool, trial process, CUDA context), and over the
steady window after it and over the whole job: trials per minute and the share of GPU time spent
outside the GPU process, 1 - sum(trial load + check + time seconds, as the trial process reports
them) / (GPUs x window), i.e. the time each GPU's process sat waiting on Ray, Optuna, the
database or the compile pool.
`--warm-workers` runs each measured job (`warm_N`; `cold` stays as it is) with `--keep-workers` on a
Ray head started here on 127.0.0.1 for that GPU count (CUDA_VISIBLE_DEVICES = the first N GPUs,
TRITON_CACHE_DIR = the shared cache, so Ray sees N GPUs), after a `--keep-workers` warm-up job of
one trial per GPU (each lands on another worker) from the same job file on the first problem in
another dtype (so none of the measured kernels is compiled by it): the same head, in-flight and
options give the same worker plans, hence the same kept actors (trial process, compile pool, CUDA
context already up), and worker start-up is taken out of the measured job. The head and its kept
workers are stopped after each measured job. Writes DIR/scaling.json (with whether warm workers were
used, each warm-up's command and whether the measured job ran on the warm-up's actors); prints a
table. Dry run without a GPU: TRITON_INTERPRET=1 with --gpus 1, a few --trials and a tiny
--problems.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from _bench import ray_head  # this folder (run as a script)

LLAMA3_8B = ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336))
PROBLEMS = [f"M={m},N={n},K={k},dtype=bfloat16" for m in (1024, 4096) for n, k in LLAMA3_8B]
#: Dtypes the --warm-workers warm-up problem may take: the first not used by a measured problem.
WARMUP_DTYPES = ("float16", "bfloat16", "float32")


def job_stats(db_path: Path, gpus: int) -> dict[str, Any]:
    """Trials, windows and GPU-process busy shares of the one job in ``db_path``.

    ``*_total`` counts from the job's start, so it includes starting the workers (Ray actors,
    compile pool, trial process, CUDA context); ``steady`` counts from the moment every worker has
    returned its first trial to the last trial, over the trials finished in between.
    """
    import sqlalchemy as sa

    from db import Database
    from db.models import Job, Trial

    database = Database(f"sqlite:///{db_path}")
    with database.session(readonly=True) as s:
        job = s.scalars(sa.select(Job)).one()
        trials = sorted(
            (t for t in s.scalars(sa.select(Trial)) if not t.reused), key=lambda t: t.created_at
        )
        if job.started_at is None or not trials:
            raise SystemExit(f"{db_path}: the job ran no trial")
        first: dict[str, Any] = {}
        for t in trials:
            first.setdefault(t.worker or "", t)
        ready = max(t.created_at for t in first.values())
        steady = [t for t in trials if t.created_at > ready]
        last = trials[-1].created_at
        total_s = (last - job.started_at).total_seconds()
        steady_s = (last - ready).total_seconds()

        def busy(ts: list[Trial]) -> float:
            return sum((t.compile_s or 0.0) + (t.run_s or 0.0) for t in ts)

        stats = {
            "status": job.status.value,
            "trials": len(trials),
            "ok": sum(t.outcome.value == "ok" for t in trials),
            "workers": sorted(first),
            "startup_s": (ready - job.started_at).total_seconds(),
            "window_total_s": total_s,
            "trials_per_min_total": 60 * len(trials) / total_s,
            "outside_share_total": 1 - busy(trials) / (gpus * total_s),
            "window_steady_s": steady_s,
            "trials_steady": len(steady),
            "trials_per_min_steady": 60 * len(steady) / steady_s if steady_s > 0 else None,
            "outside_share_steady": 1 - busy(steady) / (gpus * steady_s) if steady_s > 0 else None,
        }
    database.close()
    return stats


def gpu_env(gpus: int, cache: Path) -> dict[str, str]:
    """CUDA_VISIBLE_DEVICES = the first ``gpus`` GPUs, TRITON_CACHE_DIR = ``cache``."""
    return {
        "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(gpus)),
        "TRITON_CACHE_DIR": str(cache),
    }


def tune(
    out: Path, name: str, job_path: Path, env: dict[str, str], extra: list[str]
) -> tuple[list[str], Path, float]:
    """Run `tunefleet tune JOB --json --db DIR/NAME.db EXTRA` with ``env`` (stdout to NAME.log,
    stderr to NAME.err); its command, database and wall seconds."""
    db_path = out / f"{name}.db"
    db_path.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "orchestrator", "tune", str(job_path), "--json"]
    cmd += ["--db", f"sqlite:///{db_path}", *extra]
    start = time.perf_counter()
    with (out / f"{name}.log").open("w") as log, (out / f"{name}.err").open("w") as err:
        proc = subprocess.run(cmd, env=env, stdout=log, stderr=err)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{name}: tune failed ({proc.returncode}); see {out / name}.err")
    return cmd, db_path, wall


def run_job(
    out: Path,
    name: str,
    gpus: int,
    job_path: Path,
    cache: Path,
    base_env: dict[str, str] | None = None,
    extra: list[str] | None = None,
) -> dict[str, Any]:
    env = {**(base_env or os.environ), **gpu_env(gpus, cache)}
    cmd, db_path, wall = tune(out, name, job_path, env, extra or [])
    stats = {"gpus": gpus, "command": " ".join(cmd[1:]), "wall_s": wall, **job_stats(db_path, gpus)}
    print(
        f"{name:<8} {gpus} GPU  wall {wall:5.1f} s  workers ready after {stats['startup_s']:4.1f} s  "
        f"{stats['trials']} trials; steady: {stats['trials_steady']} trials in "
        f"{stats['window_steady_s']:5.1f} s = {stats['trials_per_min_steady'] or 0:6.0f}/min, "
        f"outside the GPU process {100 * (stats['outside_share_steady'] or 0):4.1f}%; from job "
        f"start: {stats['trials_per_min_total']:5.0f}/min, outside "
        f"{100 * stats['outside_share_total']:4.1f}%",
        flush=True,
    )
    return stats


def warmup_problem(problems: list[str]) -> str:
    """The first problem in the first of WARMUP_DTYPES that no problem uses."""
    fields = [dict(kv.split("=", 1) for kv in p.split(",")) for p in problems]
    used = {f.get("dtype") for f in fields}
    dtype = next((d for d in WARMUP_DTYPES if d not in used), None)
    if dtype is None:
        raise SystemExit(f"--warm-workers: the problems use every dtype of {WARMUP_DTYPES}")
    return ",".join(f"{k}={v}" for k, v in {**fields[0], "dtype": dtype}.items())


def probe(env: dict[str, str], code: str) -> Any:
    """What ``code``, run by a fresh Python with ``env``, prints as JSON on its last line."""
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def head_resources(env: dict[str, str]) -> tuple[dict[str, float], int]:
    """The resources the Ray cluster at env's RAY_ADDRESS offers (CPU, GPU, ...) and the number of
    GPUs torch sees in ``env``."""
    code = ("import json, ray, torch; ray.init(); "
            "print(json.dumps([ray.cluster_resources(), torch.cuda.device_count()]))")  # fmt: skip
    resources, visible = probe(env, code)
    return resources, int(visible)


def kept_workers(env: dict[str, str]) -> list[str]:
    """The kept worker actors ("<node id>/<pid>") on the Ray cluster at env's RAY_ADDRESS."""
    code = ("import json, ray; from orchestrator.run.dispatch import KEPT_NAMESPACE as NS; ray.init(); "
            "names = [a['name'] for a in ray.util.list_named_actors(all_namespaces=True) "
            "if a.get('namespace') == NS]; print(json.dumps(sorted(ray.get("
            "ray.get_actor(n, namespace=NS).info.remote()).worker for n in names)))")  # fmt: skip
    return list(probe(env, code))


def run_warm(
    out: Path, name: str, gpus: int, job_path: Path, cache: Path, warmup: str
) -> dict[str, Any]:
    """``run_job`` with --keep-workers on a Ray head of its own that sees the first ``gpus`` GPUs,
    after a --keep-workers job of one trial per GPU on ``warmup`` started the same worker actors
    there and ran a trial on each (a trial goes to the least busy worker); the head
    (kept workers included) is stopped afterwards."""
    with ray_head(gpu_env(gpus, cache)) as env:
        resources, visible = head_resources(env)
        seen = int(resources.get("GPU", 0))
        if seen != visible or visible not in (0, gpus):  # 0: no GPU, the interpreter dry run
            raise SystemExit(f"{name}: the Ray head sees {seen} GPUs, torch {visible}, not {gpus}")
        extra = ["-p", warmup, "--trials", str(max(1, gpus)), "--keep-workers"]
        cmd, _, wall = tune(out, f"warmup_{gpus}", job_path, env, extra)
        kept = kept_workers(env)
        stats = run_job(out, name, gpus, job_path, cache, env, ["--keep-workers"])
    stats.update(
        warm_workers=True,
        head_resources=resources,
        warmup_command=" ".join(cmd[1:]),
        warmup_wall_s=wall,
        kept_workers=kept,
        on_kept_workers=set(stats["workers"]) <= set(kept),
    )
    print(
        f"{name}: warm-up ({warmup}, {max(1, gpus)} trials) {wall:.1f} s left {len(kept)} kept "
        f"worker(s); the measured job ran on them only: "
        f"{'yes' if stats['on_kept_workers'] else 'NO'}",
        flush=True,
    )
    return stats


def main() -> None:
    parser = ArgumentParser()
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument("--gpus", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--in-flight", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--problems", nargs="*", default=PROBLEMS)
    parser.add_argument(
        "--warm-workers",
        action="store_true",
        help="run each measured job with --keep-workers on a Ray head started here for its GPU "
        "count, its workers kept warm by a job of one trial per GPU on another dtype first",
    )
    args = parser.parse_args()
    out = args.out_dir
    out.mkdir(parents=True, exist_ok=True)
    job: dict[str, Any] = {
        "kernel": "matmul",
        "problems": args.problems,
        "trials": args.trials,
        "seed": args.seed,
    }
    if args.in_flight is not None:
        job["in_flight"] = args.in_flight
    job_path = out / "scaling_job.json"
    job_path.write_text(json.dumps(job, indent=1))
    cache = out / "triton_cache"
    runs = {"cold": run_job(out, "cold", max(args.gpus), job_path, cache)}
    warmup = warmup_problem(args.problems) if args.warm_workers else None
    for n in args.gpus:
        if warmup is not None:
            runs[f"warm_{n}"] = run_warm(out, f"warm_{n}", n, job_path, cache, warmup)
        else:
            runs[f"warm_{n}"] = run_job(out, f"warm_{n}", n, job_path, cache)
    report: dict[str, Any] = {
        "job": job,
        "warm_workers": args.warm_workers,
        "warmup_problem": warmup,
        "runs": runs,
    }
    one = runs[f"warm_{min(args.gpus)}"]
    report["speedup"] = {
        f"{n}_gpus_{kind}": runs[f"warm_{n}"][f"trials_per_min_{kind}"]
        / one[f"trials_per_min_{kind}"]
        for n in args.gpus
        if n != min(args.gpus)
        for kind in ("steady", "total")
    }
    (out / "scaling.json").write_text(json.dumps(report, indent=1))
    for name, x in report["speedup"].items():
        print(f"{name}: {x:.2f}x the trials per minute of {min(args.gpus)} GPU")


if __name__ == "__main__":
    main()
