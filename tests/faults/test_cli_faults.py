"""Signals on ``tunefleet tune`` as a user sends them (subprocesses, a local Ray each, a user
kernel that hangs under a 2 s run timeout on the interpreter): Ctrl-C cancels and exits 130,
SIGTERM leaves the job queued and ``resume`` finishes it. SIGKILL of the driver then resume is
tests/orchestrator/test_cli.py::test_resume_after_the_driver_is_killed."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from db import Database, JobStatus, repository
from tests.faults.checker import assert_held
from tests.workers.fake_specs import ref

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "from orchestrator.cli import main; main()"]
#: A kernel whose launches after the first hang: every trial is a run timeout (2 s here).
HANGING = ["tune", ref("SleepLaterSpec"), "-p", "N=40", "--device", "interpreter"]
HANGING += ["--run-timeout", "2", "--trials", "1"]


def _first_row(database: Database, proc: subprocess.Popen[str]) -> int:
    """Wait until the job has a trial row; its job id."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        with database.session(readonly=True) as s:
            jobs = repository.list_jobs(s)
            for job in jobs:
                for study in repository.studies_for_job(s, job.id):
                    if repository.trials_for_study(s, study.id):
                        return job.id
        time.sleep(0.2)
    if proc.poll() is not None and proc.stderr is not None:
        raise AssertionError(f"tune exited {proc.returncode}: {proc.stderr.read()[-2000:]}")
    raise AssertionError("no trial row within 120 s")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_on_tune_cancels_or_requeues_never_fails(
    tmp_path: Path, sig: signal.Signals
) -> None:
    db_url = f"sqlite:///{tmp_path / 'tf.db'}"
    database = Database(db_url)
    database.ensure_schema()
    proc = subprocess.Popen(
        [*CLI, *HANGING, "--db", db_url],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        job_id = _first_row(database, proc)  # the provisional run timeout: re-measuring now
        os.kill(proc.pid, sig)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        else:
            with contextlib.suppress(ProcessLookupError):  # its Ray, if any is left
                os.killpg(proc.pid, signal.SIGKILL)
    with database.session(readonly=True) as s:
        job = repository.get_job(s, job_id)
    if sig is signal.SIGINT:
        assert proc.returncode == 130, err
        assert job.status is JobStatus.CANCELLED and "Ctrl-C" in (job.error or "")
    else:
        assert proc.returncode == 143, err
        assert job.status is JobStatus.QUEUED and job.error is None
        assert "tunefleet resume" in err
        done = subprocess.run(
            [*CLI, "resume", str(job_id), "--db", db_url, "--json", "--kernel-module", HANGING[1]],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["status"] == "done"
    assert "Traceback" not in err
    assert_held(database, [job_id])
