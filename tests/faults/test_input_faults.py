"""Hostile input files: a job file whose YAML tags would run code is refused and runs nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.errors import JobSpecError
from orchestrator.jobs import load_job_file


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
