"""The README's "Using it" listings at 80 columns, on a database holding a real finished job (the
in-process replay pool, so no Ray): kernels, space, devices [--known], jobs, job ID, best. No line is
wider than 80, no header is cut or split, no cell ends in "…"; best shows dtype=float16 whole."""

from __future__ import annotations

import pytest

from db import Database, JobStatus
from orchestrator.run.driver import Driver, submit_job
from orchestrator.run.jobs import JobSpec
from orchestrator.run.local_pool import LocalPool
from tests.orchestrator.commands.test_cli_tables import assert_fits, headers, run


@pytest.fixture
def job_id(h200_pool: LocalPool, database: Database) -> int:
    spec = JobSpec.from_mapping(
        {"kernel": "matmul", "problems": ["M=256,N=256,K=256,dtype=float16"], "trials": 4}
    )
    result = Driver(database, h200_pool, retime_rounds=1, poll_s=0.0).run(
        submit_job(database, spec, h200_pool)
    )
    assert result.status is JobStatus.DONE
    return result.job_id


def test_using_it_listings_fit_80_columns(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    db_url: str,
    job_id: int,
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    tables = {
        "kernels": (["kernels"], ["kernel", "description", "example"]),
        "devices": (["devices"], None),
        "known": (
            ["devices", "--known"],
            ["name", "arch", "SMs/CUs", "GB/s", "TFLOP/s", "FP8 TF/s"],
        ),
        "jobs": (
            ["jobs", "--db", db_url],
            ["job", "kernel", "status", "trials", "best ms", "team", "age"],
        ),
        "best": (
            ["best", "matmul", "--db", db_url],
            ["problem", "class", "config", "time (ms)", "job"],
        ),
    }
    for name, (args, expected) in tables.items():
        out = run(capsys, args)
        assert_fits(out)
        if expected is not None:
            assert headers(out) == expected, (name, out)
    best = run(capsys, ["best", "matmul", "--db", db_url])
    assert "dtype=float16" in best.replace("│", " ")
    for args in (
        ["space", "matmul", "--device-class", "H200"],
        ["job", str(job_id), "--db", db_url],
    ):
        assert_fits(run(capsys, args))
