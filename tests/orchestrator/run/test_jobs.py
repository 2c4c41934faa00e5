"""JobSpec validation: every bad input is one line, raised before anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.errors import JobSpecError
from orchestrator.run.jobs import ALL_CLASSES, DeviceSource, JobSpec, SourceKind, load_job_file

GOOD = {"kernel": "matmul", "problems": ["M=64,N=64,K=64,dtype=float16"]}


def test_defaults_and_round_trip() -> None:
    spec = JobSpec.from_mapping(GOOD)
    assert spec.problems == ({"M": 64, "N": 64, "K": 64, "dtype": "float16"},)
    assert spec.device_classes == (ALL_CLASSES,) and spec.all_classes
    assert (spec.sampler, spec.trials, spec.top_k, spec.in_flight) == ("learned", 30, 3, None)
    assert JobSpec.from_mapping(spec.to_dict()) == spec


def test_duplicate_problems_collapse_and_mappings_accepted() -> None:
    spec = JobSpec.from_mapping(
        {
            "kernel": "matmul",
            "problems": [{"M": 64, "N": 64, "K": 64, "dtype": "float16"}, GOOD["problems"][0]],
        }
    )
    assert len(spec.problems) == 1


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"kernel": "nope"}, "unknown kernel 'nope'"),
        ({"problems": []}, "needs a list of problems"),
        ({"problems": ["M=64,N=64,dtype=float16"]}, "problem 1: problem lacks 'K'"),
        ({"problems": ["M=-1,N=64,K=64,dtype=float16"]}, "positive integer"),
        ({"trials": 0}, "trials must be at least 1"),
        ({"trials": "many"}, "trials must be an integer"),
        ({"minutes": -2}, "minutes must be a positive number"),
        ({"sampler": "annealing"}, "unknown sampler 'annealing'"),
        ({"objective": "power"}, "unknown objective"),
        ({"device_classes": ["all", "H200"]}, "device_classes must be 'all'"),
        ({"devices": ["tpu"]}, "unknown device 'tpu'"),
        ({"devices": ["replay:/no/such/file.json"]}, "does not exist"),
        ({"budget": 3}, "unknown job field 'budget'"),
    ],
)
def test_bad_specs_raise_one_line(change: dict[str, object], message: str) -> None:
    with pytest.raises(JobSpecError) as info:
        JobSpec.from_mapping({**GOOD, **change})
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_cmaes_needs_its_package() -> None:
    import importlib.util

    if importlib.util.find_spec("cmaes") is not None:
        assert JobSpec.from_mapping({**GOOD, "sampler": "cmaes"}).sampler == "cmaes"
    else:
        with pytest.raises(JobSpecError, match="pip install cmaes"):
            JobSpec.from_mapping({**GOOD, "sampler": "cmaes"})


def test_yaml_file_with_overrides(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(
        "kernel: matmul\nproblems:\n  - {M: 64, N: 64, K: 64, dtype: float16}\n"
        "device_classes: [H200]\ntrials: 5\nsampler: random\nteam: infra\n"
    )
    spec = load_job_file(path, {"trials": 7})
    assert (spec.trials, spec.sampler, spec.team, spec.device_classes) == (
        7,
        "random",
        "infra",
        ("H200",),
    )


def test_bad_files(tmp_path: Path) -> None:
    with pytest.raises(JobSpecError, match="cannot read job file"):
        load_job_file(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.json"
    broken.write_text("{nope")
    with pytest.raises(JobSpecError, match="is not valid"):
        load_job_file(broken)
    listed = tmp_path / "list.yaml"
    listed.write_text("- 1\n- 2\n")
    with pytest.raises(JobSpecError, match="must hold a mapping"):
        load_job_file(listed)


def test_device_source_parse(tmp_path: Path) -> None:
    f = tmp_path / "x.json"
    f.write_text("{}")
    assert DeviceSource.parse("interpreter").kind is SourceKind.INTERPRETER
    replay = DeviceSource.parse(f"replay:{f}")
    assert replay.kind is SourceKind.REPLAY and replay.paths == (str(f.resolve()),)
    assert DeviceSource.parse(str(replay)) == replay
    with pytest.raises(JobSpecError, match="needs a landscape file"):
        DeviceSource.parse("replay:")


def test_in_flight_defaults_to_one_per_compile_process_plus_one() -> None:
    from orchestrator.run.dispatch import PoolOptions, WorkerPlan, compile_workers_for

    gpu = WorkerPlan("auto", num_gpus=1.0, compile_workers=compile_workers_for(16, 1))
    replay = WorkerPlan("replay", replay_paths=("l.json",))
    assert PoolOptions().slots(gpu) == 16  # 15 compiling ahead, one on the GPU
    assert PoolOptions().slots(replay) == 2
    assert PoolOptions(in_flight=5).slots(gpu) == PoolOptions(in_flight=5).slots(replay) == 5
