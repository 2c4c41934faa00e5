"""Tune several job files in this process, without Ray (an in-process pool on this machine).

Usage: python benchmarks/profile/tune_jobs.py JOB.yaml [JOB.yaml ...] [--db URL] [--minutes M]
       [--trials N] [--in-flight N] [--device auto|interpreter] [--budget-s S] [--weights W,...]
       [--json]

Each file runs as `tunefleet tune FILE` would, with the options given over the file's own, on an
:class:`orchestrator.run.local_pool.LocalPool` of one worker (``auto``: this machine's GPU, else the
interpreter): the trials are measured one at a time in this process, and the best configs are
stored in the database for `tunefleet pull`. For a machine without Ray (the GPU image) and short
jobs; `tunefleet tune` is the tool for the cluster. ``--budget-s``: all files within about S
seconds from the start: each job's time budget is at most its part of what is left, by
``--weights`` (one number >= 0 per file, e.g. each job's share of the profiled forward, so
the time goes where tuning can pay most; equal parts without), the re-timing of a job's winners
coming after its budget; a job with no time left measures its vendor paths alone, so each of its
keys is still decided.
``--json``: one JSON summary per line on stdout; progress and the driver's notes (a vendor path
that failed and why, the time budget spent) go to stderr either way. Exits with status 1 if any
job did not finish ``done`` (after trying them all), 2 on bad input.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time

#: A job's time budget once ``--budget-s`` is spent: over before its first trial, so the job
#: measures its keys' vendor paths alone (the driver measures those past the budget) and decides
#: each key for the fastest that ran.
VENDOR_ONLY_MINUTES = 1e-9


def budget_part(left_s: float, weights: list[float], n: int) -> float:
    """Seconds of ``left_s`` for job ``n``: its weight's part of the weights of the jobs left
    (none where they all weigh 0)."""
    rest = sum(weights[n:])
    return left_s * weights[n] / rest if rest > 0 else 0.0


def _weights(text: str | None, files: int) -> list[float]:
    """``--weights`` as numbers, one per file (all 1 without); ValueError says what is wrong."""
    if text is None:
        return [1.0] * files
    try:
        weights = [float(w) for w in text.split(",")]
    except ValueError:
        raise ValueError(f"--weights must be numbers separated by commas, got {text!r}") from None
    if len(weights) != files or not all(w >= 0 and math.isfinite(w) for w in weights):
        raise ValueError(f"--weights needs {files} numbers >= 0 (one per file), got {text!r}")
    return weights


def main(argv: list[str]) -> int:
    start = time.monotonic()
    from db import JobStatus, Objective
    from orchestrator.app.jobs import check_spec, job_summary
    from orchestrator.commands import render
    from orchestrator.commands._common import open_database
    from orchestrator.commands.tune import build_spec
    from orchestrator.errors import OrchestratorError
    from orchestrator.run.driver import Driver, submit_job
    from orchestrator.run.jobs import SourceKind
    from orchestrator.run.local_pool import LocalPool
    from orchestrator.run.progress import reporter_for
    from orchestrator.run.worker import PoolOptions, WorkerPlan

    parser = argparse.ArgumentParser(prog="tune_jobs.py")
    parser.add_argument("files", nargs="+")
    parser.add_argument("--db")
    parser.add_argument("--minutes", type=float)
    parser.add_argument("--trials", type=int)
    parser.add_argument("--in-flight", type=int)
    parser.add_argument("--device", choices=("auto", "interpreter"), default="auto")
    parser.add_argument("--budget-s", type=float)
    parser.add_argument("--weights")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.budget_s is not None and not args.budget_s > 0:
        print(f"error: --budget-s must be positive, got {args.budget_s:g}", file=sys.stderr)
        return 2
    try:
        weights = _weights(args.weights, len(args.files))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    values = {
        "minutes": args.minutes,
        "trials": args.trials,
        "in_flight": args.in_flight,
        "device": [args.device],
    }
    database = open_database(args.db)
    failed = 0
    for n, file in enumerate(args.files):
        if args.budget_s is not None:
            share = budget_part(args.budget_s - (time.monotonic() - start), weights, n) / 60
            if share <= 0:
                print(f"== {file}: the budget is spent, vendor paths only", file=sys.stderr)
                share = VENDOR_ONLY_MINUTES
            values["minutes"] = min(args.minutes or share, share)
        print(f"== tune {file}", file=sys.stderr, flush=True)
        try:
            spec = build_spec(file, None, values)
            check_spec(spec)
        except OrchestratorError as exc:
            print(f"error: {file}: {exc}", file=sys.stderr)
            return 2
        gpu = spec.devices[0].kind is SourceKind.AUTO and _has_gpu()
        # orchestrator.app.running.pool_options's settings, built here: it imports the Ray pool's module.
        options = dataclasses.replace(
            PoolOptions(),
            in_flight=spec.in_flight,
            graph=spec.objective is Objective.GRAPH,
            compile_timeout_s=spec.compile_timeout_s,
            run_timeout_s=spec.run_timeout_s,
        )
        pool = LocalPool([WorkerPlan("auto" if gpu else "interpreter")], options)
        try:
            job_id = submit_job(database, spec, pool)
            result = Driver(database, pool, reporter=reporter_for(False)).run(job_id)
        finally:
            pool.shutdown()
        summary = job_summary(database, job_id, ())
        if args.json:
            print(json.dumps(summary.to_dict(), default=str), flush=True)
        else:
            render.show_summary(summary, False)
        failed += result.status is not JobStatus.DONE
    return 1 if failed else 0


def _has_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
