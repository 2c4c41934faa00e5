"""PostgreSQL stopped and started under a running job (issue 45): run it alone, as root.

``python benchmarks/faults_postgres.py [--stop-s S] [--out DIR]`` creates a fresh database on the
PostgreSQL cluster of 127.0.0.1:5432, starts a real ``tunefleet tune`` on it (replay device,
its own local Ray), stops the cluster for ``S`` seconds (``pg_ctlcluster``) once the job has
trial rows, starts it again (always, in a ``finally``) and waits for the tune. The job must
either end ``done`` or exit with one ``error:`` line; then ``tunefleet resume`` (tried again
while the dead driver's lease lives) must finish it. Checks (tests/faults/checker.py): every
trial one final row, 0 lost, 0 run twice, no study over budget, the job not falsely done.
Prints a JSON summary, also written to ``DIR/postgres.json``. Stopping the shared server breaks
whatever else uses it, which is why this is not a pytest test; ``--stop-s 0`` runs it without
the stop.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "orchestrator" / "landscapes")]

from make_landscapes import write_all  # noqa: E402

from db import Database, JobStatus, repository  # noqa: E402
from tests.faults.checker import check  # noqa: E402

SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"
CLUSTER = ("15", "main")
CLI = [sys.executable, "-c", "from orchestrator.commands.cli import main; main()"]
#: The lease a driver takes (orchestrator/run/lease.py) plus slack: how long resume is tried again.
RESUME_WAIT_S = 60.0


def _cluster(action: str) -> None:
    subprocess.run(["pg_ctlcluster", *CLUSTER, action], check=True, timeout=60)


def _online() -> bool:
    out = subprocess.run(["pg_lsclusters", "-h"], capture_output=True, text=True).stdout
    return any(line.split()[:2] == list(CLUSTER) and "online" in line for line in out.splitlines())


def _trial_rows(database: Database) -> int:
    with database.session(readonly=True) as s:
        return sum(
            len(repository.trials_for_study(s, study.id))
            for job in repository.list_jobs(s)
            for study in repository.studies_for_job(s, job.id)
        )


def _one_job(database: Database) -> tuple[int, JobStatus]:
    with database.session(readonly=True) as s:
        (job,) = repository.list_jobs(s)
        return job.id, job.status


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def scenario(url: str, landscape: Path, stop_s: float, trials: int) -> dict[str, Any]:
    """The tune, the stop and start, the resume if needed, and the checker's counts."""
    database = Database(url)
    database.upgrade()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    tune = [*CLI, "tune", "matmul", "-p", "M=256,N=256,K=256,dtype=float16",
            "--device", f"replay:{landscape}", "--trials", str(trials), "--db", url]  # fmt: skip
    out: dict[str, Any] = {"stop_s": stop_s, "trials": trials}
    t0 = time.monotonic()
    proc = subprocess.Popen(
        tune, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        while _trial_rows(database) < 10:
            if proc.poll() is not None or time.monotonic() - t0 > 300:
                raise RuntimeError(f"the tune made no progress: {proc.communicate()[1][-2000:]}")
            time.sleep(0.1)
        database.close()  # its connections die with the server: open fresh ones after
        out["rows_before_stop"] = _trial_rows(database)
        if stop_s > 0:
            stopped = time.monotonic()
            try:
                _cluster("stop")
                time.sleep(stop_s)
            finally:
                _cluster("start")
            out["down_s"] = round(time.monotonic() - stopped, 1)
        _stdout, stderr = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        with contextlib.suppress(ProcessLookupError):  # its local Ray, if any is left
            os.killpg(proc.pid, signal.SIGKILL)
    database.close()
    job_id, status = _one_job(database)
    out.update(
        tune_exit=proc.returncode,
        tune_s=round(time.monotonic() - t0, 1),
        tune_status=status.value,
        tune_errors=_error_lines(stderr),
        tune_tracebacks=stderr.count("Traceback"),
        rows_after_tune=_trial_rows(database),
    )
    if status is not JobStatus.DONE:
        out["tune_check"] = _counts(database, job_id)
        deadline = time.monotonic() + RESUME_WAIT_S
        attempts = 0
        while True:
            attempts += 1
            done = subprocess.run(
                [*CLI, "resume", str(job_id), "--db", url, "--json"],
                cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
            )  # fmt: skip
            if done.returncode == 0 or "is being run by" not in done.stderr:
                break
            if time.monotonic() > deadline:
                break
            time.sleep(2.0)
        out.update(
            resume_attempts=attempts,
            resume_exit=done.returncode,
            resume_errors=_error_lines(done.stderr),
        )
    out["status"] = _one_job(database)[1].value
    out["check"] = _counts(database, job_id)
    out["held"] = (
        out["status"] == "done"
        and out["check"]["held"]
        and out["tune_tracebacks"] == 0
        and (out["tune_status"] == "done" or len(out["tune_errors"]) == 1)
    )
    database.close()
    return out


def _counts(database: Database, job_id: int) -> dict[str, Any]:
    report = check(database, [job_id])
    return {
        "final": report.final,
        "lost": report.lost,
        "duplicated": report.duplicated,
        "over_budget": report.over_budget,
        "wrong_best": report.wrong_best,
        "held": report.held,
        "problems": report.problems[:10],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stop-s", type=float, default=8.0, help="Seconds PostgreSQL is down.")
    parser.add_argument("--trials", type=int, default=2000, help="The job's budget.")
    parser.add_argument("--out", type=Path, default=None, help="Folder for postgres.json.")
    args = parser.parse_args()
    name = f"tf_faults_pg_{os.getpid()}"
    with psycopg.connect(SERVER, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    landscape = write_all(Path(tempfile.mkdtemp(prefix="faults-pg-")))["NVIDIA H200"][0]
    try:
        result = scenario(
            f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}", landscape, args.stop_s,
            args.trials,
        )  # fmt: skip
    finally:
        if not _online():
            _cluster("start")
        with psycopg.connect(SERVER, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "postgres.json").write_text(text + "\n")
    sys.exit(0 if result["held"] else 1)


if __name__ == "__main__":
    main()
