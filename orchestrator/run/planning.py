"""Planning a job: which studies it runs on a pool's device classes, checked before any row is
written."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from db import Objective
from orchestrator.errors import JobSpecError, NoWorkersError
from orchestrator.run.jobs import JobSpec
from orchestrator.run.pool import Pool, WorkerInfo
from orchestrator.study import samplers
from orchestrator.study.encoding import valid_configs
from search_spaces.device_identity import same_class
from search_spaces.problem import Problem, problem_key
from search_spaces.spec import KernelSpec
from workers.device import Backend
from workers.device_table import find

GPU_BACKENDS = (Backend.CUDA, Backend.ROCM)


@dataclass(frozen=True)
class StudyPlan:
    """One study to run: a problem on a device class, with the class's limits and space size."""

    problem: Problem
    class_key: str
    info: WorkerInfo
    valid: int

    @cached_property
    def problem_key(self) -> str:
        """The problem's canonical JSON, computed once (every trial row of the study carries it)."""
        return problem_key(self.problem)

    @property
    def label(self) -> str:
        dims = ",".join(f"{k}={v}" for k, v in self.problem.items())
        return f"{dims} @ {self.class_key}"


def _match_class(wanted: str, present: Sequence[str]) -> str | None:
    return next((p for p in present if same_class(wanted, p)), None)


def device_memory(info: WorkerInfo) -> int:
    """The worker's device memory in bytes: as it reports it, else (a replay landscape that did
    not record it) the device table's figure for its class name, else 0 (unknown)."""
    if info.fingerprint.memory_bytes > 0:
        return info.fingerprint.memory_bytes
    known = find(info.fingerprint.name)
    return known.memory_bytes if known is not None else 0


def oversized(kernel: KernelSpec, problem: Problem, memory_bytes: int) -> str | None:
    """Why ``problem``'s inputs and outputs (``bytes_moved``) cannot fit ``memory_bytes`` of
    device memory, or None (also when the memory is unknown, 0)."""
    needed = kernel.bytes_moved(problem)
    if memory_bytes <= 0 or needed <= memory_bytes:
        return None
    return (
        f"problem {problem_key(problem)} needs {needed / 2**30:.3g} GiB for its inputs and "
        f"outputs, more than the {memory_bytes / 2**30:.3g} GiB of device memory"
    )


def plan_job(spec: JobSpec, kernel: KernelSpec, pool: Pool) -> list[StudyPlan]:
    """The studies of ``spec`` on ``pool``'s classes; raises before anything is written when a
    class is missing, the kernel refuses a problem on a class (``KernelSpec.check_device``: no
    FP8 hardware, say), a problem's inputs exceed a class's memory, a space is empty on a class or
    the sampler does not fit it, a replay device
    lacks a problem, the graph objective meets a class without a GPU, or there is no study to
    run (no live worker of any class: a job never ends ``done`` with nothing measured)."""
    present = pool.classes()
    names = sorted(present)
    if spec.all_classes:
        chosen = names
    else:
        chosen = []
        for wanted in spec.device_classes:
            match = _match_class(wanted, names)
            if match is None:
                raise NoWorkersError(
                    f"no worker of device class {wanted!r}; classes present: {', '.join(names)}"
                )
            chosen.append(match)
    sampler = samplers.get(spec.sampler)
    plans = []
    for class_key in dict.fromkeys(chosen):
        info = present[class_key]
        if spec.objective is Objective.GRAPH and info.fingerprint.backend not in GPU_BACKENDS:
            raise JobSpecError(
                f"objective graph times launches inside CUDA graphs, and {class_key} is "
                f"{info.fingerprint.backend.value}, not a GPU: use objective kernel there"
            )
        valid = len(valid_configs(kernel.space, info.limits))
        if valid == 0:
            raise JobSpecError(
                f"the {kernel.name} space has no valid config on {class_key}; "
                "check the space's constraints against this device"
            )
        unfit = sampler.fits(kernel.space, info.limits)
        if unfit is not None:
            raise JobSpecError(
                f"sampler {sampler.name} does not fit the {kernel.name} space on {class_key}: "
                f"{unfit}; choose another sampler"
            )
        for problem in spec.problems:
            refused = kernel.check_device(problem, info.limits)
            if refused is not None:
                raise JobSpecError(f"{class_key}: {refused}")
            too_big = oversized(kernel, problem, device_memory(info))
            if too_big is not None:
                raise JobSpecError(f"{class_key}: {too_big}; give a smaller problem")
            if info.replay_keys is not None and (spec.kernel, problem_key(problem)) not in set(
                info.replay_keys
            ):
                raise JobSpecError(
                    f"replay device {class_key} has no landscape for {spec.kernel} on "
                    f"{problem_key(problem)}; record one with `tunefleet record`"
                )
            plans.append(StudyPlan(problem, class_key, info, valid))
    if not plans:
        raise NoWorkersError(
            f"job of {spec.kernel} would run no study: "
            + ("the pool has no live worker of any class" if not names else "it names no problem")
        )
    return plans
