"""The CLI end to end in subprocesses (each starts its own local Ray): tune on the interpreter,
query/pull/plot the result, bad input exits 2, and resume after the driver was killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import sqlalchemy as sa

from db import Database
from db.models import Trial
from search_spaces.bundle import load_bundle
from tests.orchestrator.conftest import H200

ROOT = Path(__file__).resolve().parents[3]
CLI = [sys.executable, "-c", "from orchestrator.commands.cli import main; main()"]
TINY = "M=16,N=16,K=16,dtype=float16"


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_bad_input_exits_2_with_one_line(db_url: str) -> None:
    for args in (
        ["tune", "matmul", "-p", "M=0,N=16,K=16,dtype=float16"],
        ["tune", "matmul", "-p", TINY, "--sampler", "annealing"],
        ["tune", "nokernel", "-p", TINY],
        ["tune", "matmul"],
        ["tune", "matmul", "-p", TINY, "--objective", "graph", "--device", "interpreter"],
        ["resume", "99"],
    ):
        done = cli(*args, "--db", db_url)
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr


def test_tune_on_the_interpreter_then_query_pull_plot(db_url: str, tmp_path: Path) -> None:
    started = time.monotonic()
    done = cli(
        "tune",
        "matmul",
        "-p",
        TINY,
        "--trials",
        "4",
        "--device",
        "interpreter",
        "--db",
        db_url,
        "--json",
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert set(out) >= {"job", "status", "studies"} and out["status"] == "done"
    (study,) = out["studies"]
    assert study["problem"] == {"M": 16, "N": 16, "K": 16, "dtype": "float16"}
    assert study["device_class"] == "cpu"
    assert study["measured"] + study["reused"] == 4
    assert sum(v for k, v in study["trials"].items() if k != "infra") == 4
    assert set(study["best"]) >= {"config", "time_ms"} and study["best"]["time_ms"] > 0
    assert time.monotonic() - started < 240

    # torch.matmul (the CPU's BLAS here) was measured beside the trials and decided against.
    assert study["backend"] in ("triton", "vendor") and study["best"]["vendor_ms"] > 0
    assert study["speedup_vs_vendor"] > 0 and study["retimed"]["vendor"] == "torch.matmul"
    best = json.loads(cli("best", "matmul", "-p", TINY, "--db", db_url, "--json").stdout)
    (row,) = best["best"]
    assert row["config"] == study["best"]["config"] and row["backend"] == study["backend"]
    assert row["vendor_ms"] == study["best"]["vendor_ms"] and row["speedup_vs_vendor"] > 0
    assert "speedup_vs_default" in row
    jobs = json.loads(cli("jobs", "--db", db_url, "--json").stdout)
    assert jobs["jobs"][0]["job"] == out["job"] and jobs["jobs"][0]["status"] == "done"
    assert jobs["jobs"][0]["objective"] == out["objective"] == "kernel"

    pulled = cli(
        "pull", "matmul", "--device-class", "cpu", "--out", str(tmp_path / "b"), "--db", db_url
    )
    assert pulled.returncode == 0, pulled.stderr
    bundle = load_bundle(pulled.stdout.strip())
    assert bundle.lookup({"M": 16, "N": 16, "K": 16, "dtype": "float16"}) == study["best"]["config"]

    plotted = cli("plot", str(out["job"]), "--out", str(tmp_path / "p"), "--db", db_url)
    assert plotted.returncode == 0, plotted.stderr
    files = [Path(p) for p in plotted.stdout.split()]
    assert {p.suffix for p in files} == {".png", ".html"} and all(
        p.stat().st_size > 0 for p in files
    )
    assert "data:image/png;base64," in files[-1].read_text()


#: Seconds the killed driver's lease lives: until then ``resume`` refuses the job. The refused
#: ``resume`` must start and read the lease inside it after the last renewal (ttl / 3 before the
#: kill at best, later when the busy driver's renewal thread lags): 4 s was too short for a CLI
#: start on two loaded cores.
LEASE_S = 10.0
DRIVER = textwrap.dedent(
    """
    import sys
    from db import Database
    from orchestrator.app.jobs import submit_job
    from orchestrator.app.running import drive
    from orchestrator.run.dispatch import PoolOptions, WorkerPool, ensure_ray, plans_for
    from orchestrator.run.jobs import JobSpec
    from orchestrator.run.lease import LeaseKeeper

    url, landscapes, lease_s = sys.argv[1], sys.argv[2], float(sys.argv[3])
    ensure_ray(None, 2)
    database = Database(url)
    database.ensure_schema()
    spec = JobSpec.from_mapping({"kernel": "matmul", "problems": ["M=256,N=256,K=256,dtype=float16"],
                                 "devices": ["replay:" + landscapes], "trials": 40})
    options = PoolOptions(replay_delay_s=0.2)
    pool = WorkerPool(plans_for(spec.devices, options), options)
    job = submit_job(database, spec)
    print(job, flush=True)
    with LeaseKeeper(database, job, "killed-driver", ttl_s=lease_s) as keeper:
        drive(database, pool, job, keeper)
    """
)


def _rows(db_url: str) -> list[Trial]:
    database = Database(db_url)
    with database.session(readonly=True) as s:
        found = list(s.scalars(sa.select(Trial).order_by(Trial.id)))
        s.expunge_all()
    database.close()
    return found


def test_resume_after_the_driver_is_killed(db_url: str, landscapes: dict[str, list[Path]]) -> None:
    replay = str(landscapes[H200][0])
    proc = subprocess.Popen(
        [sys.executable, "-c", DRIVER, db_url, replay, str(LEASE_S)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,  # its own process group: the kill takes its local Ray along
    )
    try:
        job = int((proc.stdout.readline() if proc.stdout else "").strip())
        deadline = time.monotonic() + 120
        while len(_rows(db_url)) < 8:
            assert time.monotonic() < deadline and proc.poll() is None, "driver made no progress"
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    killed = time.monotonic()  # its lease was last renewed before this
    before = _rows(db_url)
    assert 8 <= len(before) < 40

    refused = cli("resume", str(job), "--db", db_url)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "is being run by killed-driver" in refused.stderr
    # The dead driver's lease expires (LEASE_S after its last renewal at the latest): the job
    # can be taken over.
    time.sleep(max(0.0, killed + LEASE_S - time.monotonic()))
    done = cli("resume", str(job), "--db", db_url, "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["status"] == "done"
    after = _rows(db_url)
    assert {t.id for t in before} <= {t.id for t in after}
    counted = [t for t in after if t.outcome.value != "infra"]
    assert len(counted) == 40
    measured = Counter(t.config_key for t in counted if not t.reused)
    assert max(measured.values()) == 1  # nothing finished before the kill was measured again
