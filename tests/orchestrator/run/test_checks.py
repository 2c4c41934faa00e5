"""Cluster-free checks: a replay landscape that answers only part of the space is reported with
how much (a landscape of every valid config, and the same cut to a quarter of them); a problem
too big for a named class; what no local worker could serve, and a done job, refused by the CLI
before Ray is imported."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from db import Database, JobStatus, repository
from orchestrator.app.jobs import submit_job
from orchestrator.errors import JobSpecError
from orchestrator.run.checks import check_local_workers, check_memory, local_gpus, replay_coverage
from orchestrator.run.jobs import JobSpec
from orchestrator.study.encoding import valid_configs
from search_spaces.registry import get_spec
from tests.gpu import has_gpu
from tests.orchestrator.conftest import H200
from workers.replay import ReplayRunner


def _job(path: Path, problem: dict[str, object]) -> JobSpec:
    return JobSpec.from_mapping(
        {"kernel": "matmul", "problems": [problem], "devices": [f"replay:{path}"]}
    )


def test_partial_landscape_is_reported_with_its_share(
    landscapes: dict[str, list[Path]], tmp_path: Path
) -> None:
    data = json.loads(gzip.decompress(landscapes[H200][0].read_bytes()))
    problem = data["problem"]
    limits = ReplayRunner([landscapes[H200][0]]).limits
    valid = valid_configs(get_spec("matmul").space, limits)
    data["results"] = [{"config": c, "outcome": "ok", "time_ms": 1.0} for c in valid]
    full = tmp_path / "full.json"
    full.write_text(json.dumps(data))
    job = _job(full, problem)
    (whole,) = replay_coverage(job, job.kernel_spec())
    assert whole.complete and whole.answered == whole.valid == len(valid) > 8

    kept = len(valid) // 4
    data["results"] = data["results"][:kept]
    part = tmp_path / "quarter.json"
    part.write_text(json.dumps(data))
    job = _job(part, problem)
    (cut,) = replay_coverage(job, job.kernel_spec())
    assert not cut.complete and cut.answered == kept and cut.valid == len(valid)
    text = cut.warning("matmul")
    assert f"answers {kept} of the {whole.valid} valid matmul configs" in text
    assert f"({100 * kept / whole.valid:.0f}%)" in text and "\n" not in text


def test_problems_without_a_landscape_and_other_devices_are_not_counted(
    landscapes: dict[str, list[Path]],
) -> None:
    job = JobSpec.from_mapping(
        {
            "kernel": "matmul",
            "problems": ["M=8,N=8,K=8,dtype=float16"],
            "devices": ["interpreter", f"replay:{landscapes[H200][0]}"],
        }
    )
    assert replay_coverage(job, job.kernel_spec()) == []


def test_a_problem_too_big_for_a_named_class_is_refused_without_a_cluster() -> None:
    huge = "M=262144,N=262144,K=262144,dtype=float16"
    job = JobSpec.from_mapping({"kernel": "matmul", "problems": [huge], "device_classes": ["H200"]})
    with pytest.raises(JobSpecError, match=r"NVIDIA H200: problem .* needs 384 GiB .* 131 GiB"):
        check_memory(job, job.kernel_spec())
    b200 = JobSpec.from_mapping(
        {"kernel": "matmul", "problems": [huge], "device_classes": ["B200"]}
    )
    with pytest.raises(JobSpecError, match="B200"):
        check_memory(b200, b200.kernel_spec())
    small = JobSpec.from_mapping(
        {
            "kernel": "matmul",
            "problems": ["M=64,N=64,K=64,dtype=float16"],
            "device_classes": ["H200"],
        }
    )
    check_memory(small, small.kernel_spec())
    anywhere = JobSpec.from_mapping({"kernel": "matmul", "problems": [huge]})
    check_memory(anywhere, anywhere.kernel_spec())  # classes unknown until the cluster answers


def test_local_gpus_reads_device_files_and_says_when_it_cannot_tell(tmp_path: Path) -> None:
    assert local_gpus(tmp_path, {}) == set()
    (tmp_path / "nvidiactl").touch()  # the driver's control file: no GPU by itself
    assert local_gpus(tmp_path, {}) == set()
    (tmp_path / "nvidia0").touch()
    assert local_gpus(tmp_path, {}) == {"cuda"}
    assert local_gpus(tmp_path, {"CUDA_VISIBLE_DEVICES": ""}) == set()
    (tmp_path / "kfd").touch()
    assert local_gpus(tmp_path, {}) == {"cuda", "rocm"}
    (tmp_path / "dxg").touch()  # WSL: GPUs of either vendor, behind one file
    assert local_gpus(tmp_path, {}) is None


def _spec(**fields: object) -> JobSpec:
    return JobSpec.from_mapping(
        {"kernel": "matmul", "problems": ["M=64,N=64,K=64,dtype=float16"], **fields}
    )


def test_what_local_workers_cannot_serve_is_refused_before_ray(
    landscapes: dict[str, list[Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(JobSpecError, match=r"^--device cuda: this machine shows no cuda GPU"):
        check_local_workers(_spec(devices=["cuda"]), None, set())
    with pytest.raises(JobSpecError, match="--device rocm"):
        check_local_workers(_spec(devices=["rocm"]), None, {"cuda"})
    with pytest.raises(JobSpecError, match=r"--device-class H200: .* \(they would be cpu; this"):
        check_local_workers(_spec(device_classes=["H200"]), None, set())
    replay = f"replay:{landscapes[H200][0]}"
    with pytest.raises(JobSpecError, match=rf"they would be replay:{H200}\)"):
        check_local_workers(_spec(devices=[replay], device_classes=["cpu"]), None, set())
    served = [
        (_spec(devices=["cuda"]), None, {"cuda"}),
        (_spec(devices=["cuda"]), "ray://cluster:10001", set()),  # the cluster's GPUs
        (_spec(devices=["cuda"]), None, None),  # cannot tell: Ray decides
        (_spec(device_classes=["H200"]), None, {"cuda"}),  # its class shows once it runs
        (_spec(device_classes=["cpu"]), None, set()),
        (
            _spec(devices=[replay, "interpreter"], device_classes=["replay:H200", "cpu"]),
            None,
            set(),
        ),
        (_spec(), None, set()),
    ]
    for spec, address, gpus in served:
        check_local_workers(spec, address, gpus)
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    check_local_workers(_spec(devices=["cuda"]), None, set())


PROBE = """
import sys
from orchestrator.commands.cli import main
try:
    main(sys.argv[1:])
except SystemExit as done:
    code = done.code
print(code, "ray" in sys.modules, file=sys.stderr)
"""


@pytest.mark.skipif(has_gpu(), reason="needs a machine without a GPU")
def test_cli_refuses_what_no_local_worker_serves_and_a_done_job_without_ray(
    tmp_path: Path,
) -> None:
    """One error line, exit 2, and Ray never imported (so never started)."""
    url = f"sqlite:///{tmp_path}/checks.db"
    database = Database(url)
    database.ensure_schema()
    done = submit_job(database, _spec())
    with database.session() as s:
        repository.set_job_status(s, done, JobStatus.RUNNING)
        repository.set_job_status(s, done, JobStatus.DONE)
    problem = ["-p", "M=64,N=64,K=64,dtype=float16"]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    for args, says in (
        (["tune", "matmul", *problem, "--device", "cuda"], "--device cuda: this machine"),
        (["tune", "matmul", *problem, "--device-class", "H200"], "--device-class H200: none"),
        (["resume", str(done)], f"job {done} is already done"),
    ):
        run = subprocess.run(
            [sys.executable, "-c", PROBE, *args, "--db", url],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        *lines, probe = run.stderr.strip().splitlines()
        assert probe == "2 False", run.stderr  # exit 2, Ray not imported
        (line,) = lines
        assert line.startswith("error: ") and says in line, line
