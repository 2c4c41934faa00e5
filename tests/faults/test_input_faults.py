"""Hostile input files: a job file whose YAML tags would run code is refused and runs nothing; a
malformed replay landscape (wrong types, missing keys, a bad device name or version, JSON nested
too deeply) is one LandscapeError, and one ``error:`` line with exit 2 from ``tune``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from db import Database, repository
from orchestrator.errors import JobSpecError
from orchestrator.run.jobs import load_job_file
from workers.landscape import LandscapeError, read_landscape

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "from orchestrator.commands.cli import main; main()"]


@pytest.mark.parametrize(
    "tag", ["!!python/object/apply:os.system", "!!python/object/new:os.system"]
)
def test_a_job_file_with_a_code_running_yaml_tag_is_refused(tmp_path: Path, tag: str) -> None:
    planted = tmp_path / "ran"
    job = tmp_path / "job.yaml"
    job.write_text(f'kernel: matmul\nproblems: {tag} ["touch {planted}"]\n')
    with pytest.raises(JobSpecError):
        load_job_file(job)
    assert not planted.exists()


def _landscape(**changes: object) -> dict[str, object]:
    doc: dict[str, object] = {
        "format": "tunefleet-landscape/1",
        "kernel": "matmul",
        "kernel_version": "v",
        "problem": {"M": 16, "N": 16, "K": 16, "dtype": "float16"},
        "device": {"name": "NVIDIA H200", "arch": "sm_90", "vendor": "nvidia"},
        "results": [{"config": {"BLOCK_M": 16}, "outcome": "ok", "time_ms": 1.0}],
    }
    return doc | changes


def _t4(result: dict[str, object]) -> dict[str, object]:
    context = {"kernel": "matmul", "problem": {"M": 16}, "device": {"name": "NVIDIA H200"}}
    return {"schema_version": "1.0", "tunefleet": context, "results": [result]}


MALFORMED_LANDSCAPES = {
    "memory_bytes_text": (_landscape(device={"name": "X", "memory_bytes": "lots"}), "memory"),
    "limits_wrong_type": (_landscape(device={"name": "X", "warp_size": [32]}), "warp_size"),
    "name_not_text": (_landscape(device={"name": {"a": 1}}), "name"),
    "name_with_nul": (_landscape(device={"name": "GPU\x00X"}), "name"),
    "name_too_long": (_landscape(device={"name": "G" * 201}), "name"),
    "triton_too_long": (_landscape(device={"name": "NVIDIA H200", "triton": "3" * 65}), "triton"),
    "t4_times_a_list": (_t4({"configuration": {}, "invalidity": "correct", "times": [1]}), "times"),
    "t4_measurement_not_object": (
        _t4({"configuration": {}, "invalidity": "correct", "measurements": [5]}),
        "measurements",
    ),
    "t4_runtimes_mixed": (
        _t4({"configuration": {}, "invalidity": "correct", "times": {"runtimes": [1, "a"]}}),
        "runtimes",
    ),
    "missing_results": ({k: v for k, v in _landscape().items() if k != "results"}, "results"),
}


@pytest.mark.parametrize("shape", sorted(MALFORMED_LANDSCAPES))
def test_a_malformed_landscape_is_one_landscape_error(tmp_path: Path, shape: str) -> None:
    doc, says = MALFORMED_LANDSCAPES[shape]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(LandscapeError, match=says):
        read_landscape(path)


def test_a_landscape_nested_too_deeply_is_one_landscape_error(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(LandscapeError, match="nested too deeply"):
        read_landscape(path)


@pytest.mark.parametrize("shape", ["memory_bytes_text", "name_with_nul", "triton_too_long"])
def test_tune_on_a_malformed_landscape_is_one_error_line_and_no_job(
    tmp_path: Path, shape: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(MALFORMED_LANDSCAPES[shape][0]))
    database = tmp_path / "t.db"
    done = subprocess.run(
        [*CLI, "tune", "matmul", "-p", "M=16,N=16,K=16,dtype=float16", "--trials", "2",
         "--device", f"replay:{path}", "--db", f"sqlite:///{database}"],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    if database.exists():  # the job is refused before its row is written
        with Database(f"sqlite:///{database}").session(readonly=True) as s:
            assert repository.count_jobs(s) == 0
