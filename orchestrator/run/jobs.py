"""Job specs: what to tune, where, with which search and budget; checked before anything is written.

A spec comes from a YAML/JSON file (:func:`load_job_file`), from CLI flags, or from a stored job row
(:meth:`JobSpec.from_mapping` of :meth:`JobSpec.to_dict`). Every check that does not need the
cluster happens here and raises :class:`JobSpecError` with one line; the checks that need the
cluster's device classes (class present, space not empty) happen in the driver's planning step,
still before any row is written.
"""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from db import Objective
from orchestrator.errors import JobSpecError
from orchestrator.study import samplers
from search_spaces.device_identity import DeviceIdentityError, canonical_key
from search_spaces.errors import SpecError
from search_spaces.problem import Problem
from search_spaces.registry import get_spec
from search_spaces.spec import KernelSpec

ALL_CLASSES = "all"


class SourceKind(str, enum.Enum):
    """Where workers come from: the cluster's GPUs (else the interpreter), only its CUDA or ROCm
    GPUs, the interpreter, a replay."""

    AUTO = "auto"
    CUDA = "cuda"
    ROCM = "rocm"
    INTERPRETER = "interpreter"
    REPLAY = "replay"


#: Kinds whose workers are GPUs (auto: where the cluster has any).
GPU_KINDS = frozenset({SourceKind.AUTO, SourceKind.CUDA, SourceKind.ROCM})
#: What ``--device`` takes, for help and messages.
DEVICE_VALUES = "auto, cuda, rocm, interpreter or replay:FILE"


@dataclass(frozen=True)
class DeviceSource:
    """One ``--device`` value: ``auto``, ``cuda``, ``rocm``, ``interpreter`` or
    ``replay:FILE[,FILE...]``."""

    kind: SourceKind
    paths: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str) -> DeviceSource:
        value = text.strip()
        if value in {k.value for k in SourceKind if k is not SourceKind.REPLAY}:
            return cls(SourceKind(value))
        if value.startswith("replay:"):
            paths = tuple(p for p in value.removeprefix("replay:").split(",") if p)
            if not paths:
                raise JobSpecError(
                    "--device replay: needs a landscape file, e.g. replay:run.json.gz"
                )
            missing = [p for p in paths if not Path(p).is_file()]
            if missing:
                raise JobSpecError(f"landscape file {missing[0]} does not exist")
            return cls(SourceKind.REPLAY, tuple(str(Path(p).resolve()) for p in paths))
        raise JobSpecError(f"unknown device {text!r}; use {DEVICE_VALUES}")

    def __str__(self) -> str:
        return (
            f"replay:{','.join(self.paths)}" if self.kind is SourceKind.REPLAY else self.kind.value
        )


def _int(data: Mapping[str, Any], name: str, default: int | None, low: int) -> int | None:
    value = data.get(name, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            value = int(str(value))
        except ValueError:
            raise JobSpecError(f"{name} must be an integer, got {value!r}") from None
    if value < low:
        raise JobSpecError(f"{name} must be at least {low}, got {value}")
    return value


def _seconds(data: Mapping[str, Any], name: str, default: float) -> float:
    value = data.get(name, default)
    if isinstance(value, bool):
        raise JobSpecError(f"{name} must be a number of seconds, got {value!r}")
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise JobSpecError(f"{name} must be a number of seconds, got {value!r}") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise JobSpecError(f"{name} must be a positive number of seconds, got {value!r}")
    return seconds


def _strings(value: object, name: str) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, Sequence) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise JobSpecError(f"{name} must be a string or a list of strings, got {value!r}")


def _class_name(name: str) -> None:
    """JobSpecError unless ``name`` can name a device class (a key, name or alias)."""
    try:
        canonical_key(name)
    except DeviceIdentityError as exc:
        raise JobSpecError(f"device_classes: {exc}") from None


FIELDS = (
    "kernel",
    "problems",
    "device_classes",
    "devices",
    "trials",
    "minutes",
    "sampler",
    "seed",
    "objective",
    "team",
    "top_k",
    "in_flight",
    "compile_timeout_s",
    "run_timeout_s",
)


@dataclass(frozen=True)
class JobSpec:
    """A validated job: ``problems`` are canonical (schema-checked); ``trials`` is per study;
    ``sampler`` is a name of the sampler registry (:mod:`orchestrator.study.samplers`).

    ``device_classes`` is a tuple of class keys (as the user wrote them) or ``("all",)``: every
    class the cluster has. ``devices`` says where workers come from. ``in_flight`` is the number
    of trials queued per worker so its device never idles while the driver thinks (None: one per
    compile process plus one on GPU workers, 2 elsewhere). ``compile_timeout_s`` bounds a trial's
    compile phase and ``run_timeout_s`` its check and timing (seconds).
    """

    kernel: str
    problems: tuple[Problem, ...]
    device_classes: tuple[str, ...] = (ALL_CLASSES,)
    devices: tuple[DeviceSource, ...] = (DeviceSource(SourceKind.AUTO),)
    trials: int = 30
    minutes: float | None = None
    sampler: str = samplers.DEFAULT
    seed: int = 0
    objective: Objective = Objective.KERNEL
    team: str | None = None
    top_k: int = 3
    in_flight: int | None = None
    compile_timeout_s: float = 120.0
    run_timeout_s: float = 60.0

    @property
    def all_classes(self) -> bool:
        return self.device_classes == (ALL_CLASSES,)

    def kernel_spec(self) -> KernelSpec:
        """The kernel spec from the registry (raises RegistryError, a SpecError)."""
        return get_spec(self.kernel)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> JobSpec:
        """Build and check a spec from a decoded file, CLI values or a stored job row."""
        if not isinstance(data, Mapping):
            raise JobSpecError("a job spec must be a mapping of fields")
        unknown = sorted(set(data) - set(FIELDS))
        if unknown:
            raise JobSpecError(f"unknown job field {unknown[0]!r}; fields are {', '.join(FIELDS)}")
        kernel = data.get("kernel")
        if not isinstance(kernel, str) or not kernel:
            raise JobSpecError("the job needs a kernel name, e.g. kernel: matmul")
        try:
            spec = get_spec(kernel)
        except SpecError as exc:
            raise JobSpecError(str(exc)) from None
        raw_problems = data.get("problems")
        if isinstance(raw_problems, Mapping):
            raw_problems = [raw_problems]
        if not isinstance(raw_problems, list) or not raw_problems:
            raise JobSpecError(f"the job needs a list of problems, e.g. {spec.schema.usage()}")
        problems: list[Problem] = []
        for i, raw in enumerate(raw_problems):
            try:
                problem = (
                    spec.parse_problem(raw) if isinstance(raw, str) else spec.validate_problem(raw)
                )
            except SpecError as exc:
                raise JobSpecError(f"problem {i + 1}: {exc}") from None
            if problem not in problems:
                problems.append(problem)
        classes = _strings(data.get("device_classes", ALL_CLASSES), "device_classes")
        if not classes or (ALL_CLASSES in classes and len(classes) > 1):
            raise JobSpecError("device_classes must be 'all' or a list of class names")
        for name in classes:
            if name != ALL_CLASSES:
                _class_name(name)
        devices = tuple(
            DeviceSource.parse(d) for d in _strings(data.get("devices", "auto"), "devices")
        )
        if not devices:
            raise JobSpecError(f"devices must name at least one source: {DEVICE_VALUES}")
        trials = _int(data, "trials", 30, 1)
        minutes = data.get("minutes")
        if minutes is not None:
            try:
                minutes = float(minutes)
            except (TypeError, ValueError):
                raise JobSpecError(f"minutes must be a number, got {minutes!r}") from None
            if not math.isfinite(minutes) or minutes <= 0:
                raise JobSpecError(f"minutes must be a positive number, got {minutes}")
        sampler = samplers.get(str(data.get("sampler", samplers.DEFAULT)).lower()).name
        try:
            objective = Objective(str(data.get("objective", "kernel")).lower())
        except ValueError:
            raise JobSpecError(
                f"unknown objective {data.get('objective')!r}; choose kernel or graph"
            ) from None
        without_gpu = [d for d in devices if d.kind not in GPU_KINDS]
        if objective is Objective.GRAPH and without_gpu:
            raise JobSpecError(
                f"objective graph times launches inside CUDA graphs on a GPU; device "
                f"{without_gpu[0].kind.value} has none: use objective kernel or --device auto"
            )
        team = data.get("team")
        if team is not None and not isinstance(team, str):
            raise JobSpecError(f"team must be a string, got {team!r}")
        return cls(
            kernel=kernel,
            problems=tuple(problems),
            device_classes=classes,
            devices=devices,
            trials=trials or 30,
            minutes=minutes,
            sampler=sampler,
            seed=_int(data, "seed", 0, 0) or 0,
            objective=objective,
            team=team,
            top_k=_int(data, "top_k", 3, 1) or 3,
            in_flight=_int(data, "in_flight", None, 1),
            compile_timeout_s=_seconds(data, "compile_timeout_s", cls.compile_timeout_s),
            run_timeout_s=_seconds(data, "run_timeout_s", cls.run_timeout_s),
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form; ``from_mapping(to_dict())`` gives an equal spec (stored in the job row)."""
        return {
            "kernel": self.kernel,
            "problems": [dict(p) for p in self.problems],
            "device_classes": list(self.device_classes),
            "devices": [str(d) for d in self.devices],
            "trials": self.trials,
            "minutes": self.minutes,
            "sampler": self.sampler,
            "seed": self.seed,
            "objective": self.objective.value,
            "team": self.team,
            "top_k": self.top_k,
            "in_flight": self.in_flight,
            "compile_timeout_s": self.compile_timeout_s,
            "run_timeout_s": self.run_timeout_s,
        }


def load_job_file(path: str | Path, overrides: Mapping[str, Any] | None = None) -> JobSpec:
    """A spec from a ``.yaml``/``.yml``/``.json`` file; ``overrides`` (CLI flags) win over it."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise JobSpecError(f"cannot read job file {p}: {exc.strerror or exc}") from None
    try:
        if p.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except ValueError as exc:  # json.JSONDecodeError and yaml.YAMLError's subclasses
        raise JobSpecError(f"job file {p} is not valid: {str(exc).splitlines()[0]}") from None
    except Exception as exc:  # yaml.YAMLError does not derive from ValueError
        raise JobSpecError(f"job file {p} is not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, Mapping):
        raise JobSpecError(f"job file {p} must hold a mapping of fields (kernel, problems, ...)")
    return JobSpec.from_mapping({**data, **(overrides or {})})
