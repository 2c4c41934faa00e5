"""Cluster-free checks: a replay landscape that answers only part of the space is reported with
how much (a landscape of every valid config, and the same cut to a quarter of them)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from orchestrator.checks import check_memory, replay_coverage
from orchestrator.encoding import valid_configs
from orchestrator.errors import JobSpecError
from orchestrator.jobs import JobSpec
from search_spaces.registry import get_spec
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
