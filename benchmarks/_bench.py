"""Pieces the GPU benchmark scripts share: run a `tunefleet tune` job, read the stored winners,
time a callable the way the workers do."""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import math
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any


def tune_job(
    kernel: str,
    problems: Sequence[str],
    db_path: Path,
    trials: int,
    in_flight: int,
    seed: int,
    sampler: str | None = None,
    objective: str = "kernel",
    ray: bool = True,
    minutes: float | None = None,
) -> dict[str, Any]:
    """Run `python -m orchestrator tune JOB.json --json` for ``problems`` (``sampler`` None: the
    product's default; ``ray`` False: the same command in this folder's in-process pool, see
    tune_without_ray; ``minutes``: the job's wall-clock budget); its JSON plus the command, the
    job file and the wall time."""
    job: dict[str, Any] = {
        "kernel": kernel,
        "problems": list(problems),
        "trials": trials,
        "seed": seed,
        "in_flight": in_flight,
        "objective": objective,
    }
    if sampler is not None:
        job["sampler"] = sampler
    if minutes is not None:
        job["minutes"] = minutes
    job_path = db_path.parent / f"{kernel}_job.json"
    job_path.write_text(json.dumps(job, indent=1))
    tune = [str(job_path), "--json", "--db", f"sqlite:///{db_path}"]
    head = ["-m", "orchestrator", "tune"] if ray else [str(Path(__file__).resolve()), "tune"]
    cmd = [sys.executable, *head, *tune]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{kernel}: tune failed ({proc.returncode}): {proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout)
    result["command"] = " ".join(cmd[1:])
    result["job_file"] = job
    result["wall_s"] = wall
    return result


def best_from(
    kernel: str,
    databases: Sequence[Path],
    landscapes: Sequence[Path] = (),
    objective: str = "kernel",
) -> dict[str, dict[str, Any]]:
    """Problem key -> best config of ``kernel``: the fastest stored time of ``objective`` over the
    databases (best configs and ok trials) and the landscape files (a folder stands for its
    ``*.json.gz`` files; they hold kernel-objective times)."""
    from workers.landscape import read_landscape

    best: dict[str, tuple[float, dict[str, Any]]] = {}
    files = [f for p in landscapes for f in (sorted(p.glob("*.json.gz")) if p.is_dir() else [p])]
    for path in files:
        landscape = read_landscape(path)
        top = landscape.best()
        key = landscape.problem_key
        if (
            landscape.kernel == kernel
            and top is not None
            and top.time_ms is not None
            and (key not in best or top.time_ms < best[key][0])
        ):
            best[key] = (top.time_ms, top.config)
    for path in databases:
        if not path.exists():
            continue
        for key, ms, config in _stored_times(path, kernel, objective):
            if key not in best or ms < best[key][0]:
                best[key] = (ms, config)
    return {key: config for key, (_, config) in best.items()}


def pulled_winners(kernel: str, db_path: Path, objective: str = "kernel") -> dict[str, dict]:
    """Problem key -> the config `tunefleet pull` exports for ``kernel`` from the SQLite file
    ``db_path`` (the deployment path: `pull --format native`, then each bundle's exact lookup)."""
    from search_spaces import problem_key
    from search_spaces.bundle import load_bundle

    with tempfile.TemporaryDirectory(prefix="tunefleet-pull-") as out:
        cmd = [sys.executable, "-m", "orchestrator", "pull", kernel, "--out", out,
               "--db", f"sqlite:///{db_path}", "--objective", objective]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"{kernel}: pull failed ({proc.returncode}): {proc.stderr[-2000:]}")
        winners: dict[str, dict] = {}
        for path in sorted(Path(out).glob("*.json")):
            bundle = load_bundle(path)
            for entry in bundle.entries:
                winners[problem_key(entry.problem)] = bundle.lookup(entry.problem)
    return winners


def interleaved_ms(
    sets: list[Any], makers: dict[str, Maker], backend: Any, objective: str, rounds: int
) -> dict[str, float]:
    """Median over ``rounds`` of each maker's time_on ``sets``, all makers timed in each round in
    an order rotated by one per round (so drift and warm-up hit every entry alike)."""
    names = list(makers)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append(time_on(sets, makers[name], backend, objective))
    return {name: statistics.median(ts) for name, ts in times.items()}


@contextlib.contextmanager
def upgraded_copy(path: Path) -> Iterator[Any]:
    """A ``db.Database`` on a temporary copy of the SQLite file ``path`` (``.gz``: gzipped),
    brought to the current schema; the file stays as it was written."""
    from db import Database

    with tempfile.TemporaryDirectory(prefix="tunefleet-best-") as tmp:
        copy = Path(tmp) / path.name.removesuffix(".gz")
        with (
            (gzip.open if path.suffix == ".gz" else open)(path, "rb") as src,
            copy.open("wb") as dst,
        ):
            shutil.copyfileobj(src, dst)
        database = Database(f"sqlite:///{copy}")
        try:
            database.upgrade()
            yield database
        finally:
            database.close()


def _stored_times(path: Path, kernel: str, objective: str) -> list[tuple[str, float, Any]]:
    """(problem key, ms, config) of ``kernel``'s best configs and ok trials of ``objective`` in the
    SQLite file ``path`` (see :func:`upgraded_copy`)."""
    from db import Objective, repository

    with upgraded_copy(path) as database, database.session(readonly=True) as s:
        found = [
            (r.problem_key, r.time_ms, r.config)
            for r in repository.get_best(s, kernel, objective=Objective(objective))
        ]
        # Trials too: a job cut short stored its trials but not yet its best configs.
        for job in repository.list_jobs(s, limit=10_000):
            if job.kernel_name != kernel:
                continue
            for study in repository.studies_for_job(s, job.id):
                found += [
                    (study.problem_key, t.median_ms, t.config)
                    for t in repository.trials_for_study(s, study.id)
                    if t.outcome.value == "ok"
                    and t.median_ms is not None
                    and t.objective.value == objective
                ]
    return found


def timed(fn: Callable[[], Any], backend: Any) -> float:
    """Median ms of ``fn``: events, L2 flushed before each rep, 5 warm-ups, 25 reps (on a GPU)."""
    from workers.device import Backend
    from workers.timing import l2_flush_buffer, time_launcher

    gpu = backend is not Backend.INTERPRETER
    flush = l2_flush_buffer() if gpu else None
    return statistics.median(
        time_launcher(fn, backend, warmup=5 if gpu else 1, reps=25 if gpu else 2, flush=flush)
    )


def ceilings(backend: Any) -> dict[str, float]:
    """Copy bandwidth (GB/s, read + written) and bf16 GEMM rate (TFLOP/s) measured here."""
    import torch

    device = "cuda" if backend.value != "interpreter" else "cpu"
    n = (1 << 31) if device == "cuda" else (1 << 22)
    src = torch.randn(n, dtype=torch.bfloat16, device=device)
    dst = torch.empty_like(src)
    copy_ms = timed(lambda: dst.copy_(src), backend)
    size = 8192 if device == "cuda" else 256
    a = torch.randn(size, size, dtype=torch.bfloat16, device=device)
    b = torch.randn(size, size, dtype=torch.bfloat16, device=device)
    gemm_ms = timed(lambda: torch.matmul(a, b), backend)
    return {
        "copy_gbps": 2 * src.numel() * src.element_size() / copy_ms / 1e6,
        "gemm_tflops": 2 * size**3 / gemm_ms / 1e9,
    }


Maker = Callable[[dict[str, Any]], Callable[[], Any]]


def input_sets(spec: Any, problem: dict[str, Any], device: str, objective: str) -> list[Any]:
    """Fresh input sets of ``problem`` for ``objective``'s timer (see time_on): one for kernel, as
    many as workers.timing.graph_sets rotates over for graph."""
    from workers.timing import graph_sets

    count = graph_sets(int(spec.bytes_moved(problem))) if objective == "graph" else 1
    return [spec.build_inputs(problem, device) for _ in range(count)]


def time_on(sets: list[dict[str, Any]], make: Maker, backend: Any, objective: str) -> float:
    """Median ms of ``make(inputs)``'s launcher by the objective's timer: alone on the first input
    set (kernel; see timed) or back to back over all of them (graph; workers.timing.time_graph)."""
    from workers.timing import time_graph

    if objective == "kernel":
        return timed(make(sets[0]), backend)
    return statistics.median(time_graph([make(s) for s in sets], backend, reps=25))


def local_target() -> tuple[Any, Any, str]:
    """(device limits, backend, torch device) of this machine's first device."""
    from workers.device import detect

    fingerprint = detect("auto")[0]
    backend = fingerprint.backend
    return fingerprint.limits(), backend, "cpu" if backend.value == "interpreter" else "cuda"


def geomean(values: Sequence[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def add_job_args(parser: argparse.ArgumentParser, kernels: Sequence[str], trials: int) -> None:
    """The options every tuning benchmark takes: where to write, which kernels, the job's budget,
    which suite indices to tune, earlier winners to reuse, and a CPU dry run."""
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument("--kernels", nargs="*", default=list(kernels))
    parser.add_argument("--trials", type=int, default=trials)
    parser.add_argument("--in-flight", type=int, default=12)
    parser.add_argument("--minutes", type=float, help="wall-clock budget of each tune job")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", type=int, nargs="*", help="tune only these suite indices")
    parser.add_argument(
        "--best-db", type=Path, nargs="*", default=[], help="also take winners from these DBs"
    )
    parser.add_argument(
        "--best-landscape",
        type=Path,
        nargs="*",
        default=[],
        help="also take winners from these landscape files or folders",
    )
    parser.add_argument(
        "--no-tune", action="store_true", help="tune nothing: winners from --best-db/-landscape"
    )
    parser.add_argument("--smoke", action="store_true", help="tiny suites (dry run without a GPU)")
    parser.add_argument(
        "--no-ray",
        action="store_true",
        help="tune in one process (this GPU, no Ray; see _bench.py)",
    )


def tune_suite(
    args: argparse.Namespace,
    kernel: str,
    suite: Sequence[str],
    db_path: Path,
    objective: str = "kernel",
) -> tuple[dict[str, Any] | None, dict[str, dict[str, Any]]]:
    """Tune ``suite`` (or its --only indices; nothing with --no-tune) into ``db_path`` by
    ``objective``; the tune job's report (None if skipped) and the winners of that objective: what
    `pull` exports from ``db_path`` when neither --best-db nor --best-landscape is given, else the
    fastest stored times over it and those (see best_from)."""
    job = None
    if not args.no_tune:
        chosen = list(suite) if not args.only else [suite[i] for i in args.only]
        job = tune_job(
            kernel, chosen, db_path, args.trials, args.in_flight, args.seed,
            objective=objective, ray=not args.no_ray, minutes=args.minutes,
        )  # fmt: skip
        print(
            f"{kernel}: tuned {len(chosen)} problems x {args.trials} trials in {job['wall_s']:.0f} s",
            flush=True,
        )
    if not args.best_db and not args.best_landscape:
        return job, pulled_winners(kernel, db_path, objective)
    return job, best_from(kernel, [*args.best_db, db_path], args.best_landscape, objective)


@contextlib.contextmanager
def ray_head(extra_env: dict[str, str] | None = None) -> Iterator[dict[str, str]]:
    """A Ray head on 127.0.0.1 (token auth off, its files in a short-lived temp folder) for the
    duration; the environment of a process that talks to it. Worker actors inherit the head's
    environment, ``extra_env`` included (e.g. TRITON_CACHE_DIR). Kept workers end with the head."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    env = {**os.environ, **(extra_env or {}), "RAY_AUTH_MODE": "disabled",
           "RAY_ADDRESS": f"127.0.0.1:{port}"}  # fmt: skip
    ray = [sys.executable, "-m", "ray.scripts.scripts"]
    temp = tempfile.mkdtemp(prefix="tf-ray-")  # short: Ray's socket paths must fit 107 bytes
    start = [*ray, "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1",
             "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={temp}"]  # fmt: skip
    subprocess.run(start, env=env, check=True, capture_output=True)
    try:
        yield env
    finally:
        stop_kept_workers(env, check=False)
        subprocess.run([*ray, "stop", "--force"], env=env, capture_output=True)
        shutil.rmtree(temp, ignore_errors=True)


def stop_kept_workers(env: dict[str, str], check: bool = True) -> None:
    """`tunefleet workers stop` on the Ray cluster at env's RAY_ADDRESS."""
    cmd = [sys.executable, "-m", "orchestrator", "workers", "stop"]
    subprocess.run(cmd, env=env, check=check, capture_output=True)


def tune_without_ray(argv: list[str]) -> None:
    """`tunefleet tune ARGV` with the job's workers in this process instead of on Ray: one
    worker on this machine's first device (its compile pool sized as on a Ray node of one GPU),
    each trial handed to the compile pool when the driver submits it, so compiling runs ahead of
    timing as on a cluster. The rest (planning, sampler, database, re-timing, summary) is the
    command's own path."""
    from orchestrator.app import running
    from orchestrator.commands.cli import main as cli_main
    from orchestrator.run.local_pool import LocalPool
    from orchestrator.run.pool import RetimeJob, WorkerInfo
    from orchestrator.run.worker import PoolOptions, WorkerPlan
    from workers.trial import TrialRequest

    class AheadPool(LocalPool):
        """A LocalPool of one worker that starts compiling a trial when it is submitted and
        re-times all studies' top configs in one fresh trial process (LocalPool starts one per
        study)."""

        def submit(self, class_key: str, request: TrialRequest, tag: object) -> WorkerInfo:
            info = super().submit(class_key, request, tag)
            n = self._infos.index(info)
            self._workers[n]._runner.prefetch(request)  # the TrialRunner the worker holds
            return info

        def retime(
            self, jobs: Sequence[RetimeJob], rounds: int, timeout_s: float = 600.0
        ) -> list[list[list[float]] | None]:
            todo = [(kernel, problem, configs) for _, kernel, problem, configs in jobs if configs]
            done = iter(self._workers[0].retime(todo, rounds) if todo else [])
            return [next(done) if configs else None for *_, configs in jobs]

    @contextlib.contextmanager
    def local_pool(spec: Any, ray_address: str | None, keep: bool) -> Iterator[AheadPool]:
        options = PoolOptions(
            in_flight=spec.in_flight,
            graph=spec.objective.value == "graph",
            compile_timeout_s=spec.compile_timeout_s,
            run_timeout_s=spec.run_timeout_s,
        )
        compile_workers = max(1, min(16, (os.cpu_count() or 2) - 1))
        pool = AheadPool([WorkerPlan("auto", compile_workers=compile_workers)], options)
        try:
            yield pool
        finally:
            pool.shutdown()

    running._ray_pool = local_pool  # type: ignore[assignment]
    cli_main(["tune", *argv])


if __name__ == "__main__":
    if sys.argv[1:2] != ["tune"]:
        raise SystemExit("usage: python benchmarks/_bench.py tune JOB [tune options]")
    tune_without_ray(sys.argv[2:])
