"""A job's compile and run timeouts: set in the job file, checked like every other field."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.errors import JobSpecError
from orchestrator.run.jobs import JobSpec, load_job_file

GOOD = {"kernel": "matmul", "problems": ["M=64,N=64,K=64,dtype=float16"]}


def test_timeouts_default_round_trip_and_come_from_the_file(tmp_path: Path) -> None:
    spec = JobSpec.from_mapping(GOOD)
    assert (spec.compile_timeout_s, spec.run_timeout_s) == (120.0, 60.0)
    path = tmp_path / "job.yaml"
    path.write_text(
        "kernel: matmul\nproblems: ['M=64,N=64,K=64,dtype=float16']\n"
        "compile_timeout_s: 30\nrun_timeout_s: 7.5\n"
    )
    spec = load_job_file(path)
    assert (spec.compile_timeout_s, spec.run_timeout_s) == (30.0, 7.5)
    assert JobSpec.from_mapping(spec.to_dict()) == spec
    assert load_job_file(path, {"run_timeout_s": 2}).run_timeout_s == 2.0


@pytest.mark.parametrize("name", ["compile_timeout_s", "run_timeout_s"])
@pytest.mark.parametrize("value", [0, -5, "soon", float("nan"), float("inf"), True, None])
def test_bad_timeouts_raise_one_line(name: str, value: object) -> None:
    with pytest.raises(JobSpecError, match=f"{name} must be a") as info:
        JobSpec.from_mapping({**GOOD, name: value})
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("flag", "field"),
    [("--compile-timeout", "compile_timeout_s"), ("--run-timeout", "run_timeout_s")],
)
def test_tune_flags_set_the_timeouts(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, flag: str, field: str
) -> None:
    from orchestrator.commands.cli import main

    db = f"sqlite:///{tmp_path / 't.db'}"
    with pytest.raises(SystemExit) as done:
        main(["tune", "matmul", "-p", GOOD["problems"][0], flag, "-1", "--db", db])
    err = capsys.readouterr().err
    assert done.value.code == 2
    assert err == f"error: {field} must be a positive number of seconds, got -1.0\n"
    assert not (tmp_path / "t.db").exists()  # refused before the database is opened
