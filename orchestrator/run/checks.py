"""Checks of a job spec that need no cluster (run before Ray starts): problems too big for a
named device class (from the device table), how much of the search space each replay landscape
answers, and, when the job's Ray is a local one started for it, whether this machine's workers
can be what the job asks for (a GPU device or class on a machine that shows no GPU)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import JobSpecError
from orchestrator.run.jobs import JobSpec, SourceKind
from search_spaces.problem import Problem, problem_key
from search_spaces.spec import KernelSpec


@dataclass(frozen=True)
class Coverage:
    """How many of the space's valid configs on a replay device its landscapes answer."""

    device_class: str
    problem: Problem
    answered: int
    valid: int

    @property
    def complete(self) -> bool:
        return self.answered >= self.valid

    def warning(self, kernel: str) -> str:
        share = 100.0 * self.answered / self.valid if self.valid else 0.0
        return (
            f"warning: {self.device_class} answers {self.answered} of the {self.valid} valid "
            f"{kernel} configs on {problem_key(self.problem)} ({share:.0f}%); trials of the "
            "others are recorded invalid: record a fuller landscape with `tunefleet record`"
        )


def replay_coverage(spec: JobSpec, kernel: KernelSpec) -> list[Coverage]:
    """Per replay device of ``spec`` and problem it has a landscape for: the configs answered
    (problems without a landscape are refused later, by planning)."""
    from orchestrator.study.encoding import (
        valid_configs,  # Optuna: only when a replay device is named
    )
    from workers.replay import ReplayRunner
    from workers.trial import TrialRequest

    found = []
    for source in spec.devices:
        if source.kind is not SourceKind.REPLAY:
            continue
        runner = ReplayRunner(source.paths)
        configs = valid_configs(kernel.space, runner.limits)
        for problem in spec.problems:
            if not runner.covers(spec.kernel, problem):
                continue
            answered = sum(
                runner.answers(TrialRequest(spec.kernel, dict(problem), dict(c))) for c in configs
            )
            found.append(Coverage(runner.device_class.key, problem, answered, len(configs)))
    return found


def check_memory(spec: JobSpec, kernel: KernelSpec) -> None:
    """JobSpecError if a problem's inputs and outputs exceed the memory of a device class the
    job names and the device table knows (classes found only on the cluster: see planning)."""
    from orchestrator.run.planning import oversized
    from search_spaces.device_identity import DeviceClass
    from workers.device_table import find

    if spec.all_classes:
        return
    for name in spec.device_classes:
        known = find(DeviceClass.parse(name).name)
        if known is None:
            continue
        for problem in spec.problems:
            too_big = oversized(kernel, problem, known.memory_bytes)
            if too_big is not None:
                raise JobSpecError(f"{known.name}: {too_big}; give a smaller problem")


#: Device files that show a GPU to processes here, without importing a GPU library.
_NVIDIA_DEVICE = re.compile(r"nvidia\d+")


def local_gpus(dev: Path = Path("/dev"), env: Mapping[str, str] | None = None) -> set[str] | None:
    """The GPU backends (``cuda``, ``rocm``) this machine shows in ``dev``: NVIDIA's numbered
    device files (hidden by an empty CUDA_VISIBLE_DEVICES), AMD's ``kfd``; None when it cannot
    tell (WSL's ``dxg`` shows GPUs of either kind)."""
    env = os.environ if env is None else env
    if (dev / "dxg").exists():
        return None
    found = set()
    hidden = env.get("CUDA_VISIBLE_DEVICES") in ("", "-1")
    if not hidden and dev.is_dir() and any(_NVIDIA_DEVICE.fullmatch(p.name) for p in dev.iterdir()):
        found.add(SourceKind.CUDA.value)
    if (dev / "kfd").exists():
        found.add(SourceKind.ROCM.value)
    return found


def check_local_workers(spec: JobSpec, ray_address: str | None, gpus: set[str] | None) -> None:
    """JobSpecError (one line) if the job runs on a local Ray (no ``ray_address``, no
    RAY_ADDRESS) and no worker this machine starts could serve it: ``--device cuda``/``rocm``
    with no such GPU in ``gpus`` (:func:`local_gpus`; None: unknown, nothing refused), or a
    named device class that none of its workers is: with no GPU worker, they are class ``cpu``
    (the interpreter) and the replayed devices' classes."""
    from orchestrator.run.jobs import GPU_KINDS
    from search_spaces.device_identity import same_class

    if ray_address or os.environ.get("RAY_ADDRESS") or gpus is None:
        return
    for source in spec.devices:
        if source.kind in (SourceKind.CUDA, SourceKind.ROCM) and source.kind.value not in gpus:
            raise JobSpecError(
                f"--device {source.kind.value}: this machine shows no {source.kind.value} GPU "
                "and no cluster is named; use --device interpreter (or auto), or give "
                "--ray-address of a cluster with one"
            )
    kinds = {source.kind for source in spec.devices}
    if spec.all_classes or (gpus and kinds & GPU_KINDS):
        return
    served = {_replay_class(source.paths) for source in spec.devices if source.paths}
    if kinds & {SourceKind.AUTO, SourceKind.INTERPRETER}:
        served.add("cpu")
    for name in spec.device_classes:
        if not any(same_class(name, key) for key in served):
            why = "; this machine shows no GPU" if SourceKind.AUTO in kinds else ""
            raise JobSpecError(
                f"--device-class {name}: none of this job's workers here is of that class "
                f"(they would be {', '.join(sorted(served))}{why}); give --ray-address of a "
                "cluster that has it, or name one of those"
            )


def _replay_class(paths: tuple[str, ...]) -> str:
    from workers.replay import ReplayRunner

    return ReplayRunner(paths).device_class.key
