"""The views the use cases return: frozen dataclasses of JSON-ready values.

The CLI renders them and the HTTP API serializes them: ``to_dict()`` is the wire format (through
:func:`_dump`: datetimes leave as ISO 8601 strings, enums as their values) and ``from_dict()``
reads it back in the client (through :func:`_load`, led by the fields' type hints). Nothing here
touches the database, Ray, torch or triton.
"""

from __future__ import annotations

import dataclasses
import enum
import types
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

from db.states import JobStatus, Objective, StudyStatus, TrialOutcome
from orchestrator.app.study_best import BestSource
from orchestrator.run.speedup import speedup

_V = TypeVar("_V", bound="View")


def _dump(value: Any) -> Any:
    """``value`` as JSON-ready data: views as their ``to_dict()``, enums as their values,
    datetimes as ISO 8601 strings (UTC where naive), tuples as lists, mapping keys as strings."""
    if isinstance(value, View):
        return value.to_dict()
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, datetime):
        return aware(value).isoformat()
    if isinstance(value, tuple | list):
        return [_dump(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _dump(v) for k, v in value.items()}
    return value


def _load(hint: Any, value: Any) -> Any:
    """``value`` (what :func:`_dump` made) read back as the type ``hint`` names: views, enums,
    datetimes, floats and tuples of them; None stays None, anything else is kept as it is."""
    origin, args = get_origin(hint), get_args(hint)
    if value is None:
        return None
    if origin in (Union, types.UnionType):
        (inner,) = [a for a in args if a is not type(None)]
        return _load(inner, value)
    if origin is tuple:
        return tuple(_load(args[0], v) for v in value)
    if origin is dict or hint is Any:
        return value
    if hint is datetime:
        return datetime.fromisoformat(value)
    if hint is float:
        return float(value)
    if isinstance(hint, type) and issubclass(hint, View):
        return hint.from_dict(value)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint(value)
    return value


class View:
    """Base of the frozen view dataclasses: ``to_dict()`` (JSON-ready) and ``from_dict()``."""

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _dump(getattr(self, f.name)) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls: type[_V], data: Mapping[str, Any]) -> _V:
        """The view ``to_dict()`` made (unknown keys are ignored, missing ones raise KeyError)."""
        hints = get_type_hints(cls)
        values = {
            f.name: _load(hints[f.name], data[f.name])
            for f in dataclasses.fields(cls)  # type: ignore[arg-type]
            if f.name in data or f.default is dataclasses.MISSING  # a newer field: its default
        }
        return cls(**values)


@dataclasses.dataclass(frozen=True)
class JobView(View):
    """One job as listings show it; ``trials_done`` of ``trials_budget`` counts every study's
    trials that are not ``infra`` (reused ones too), ``best_ms`` is the fastest of its studies'
    bests (each as :func:`orchestrator.app.study_best.study_best` decides: a decided key's
    re-timed winner, else the fastest ``ok`` trial so far)."""

    id: int
    kernel: str
    kernel_version: str
    status: JobStatus
    team: str | None
    priority: int
    problems: tuple[dict[str, Any], ...]
    classes: tuple[str, ...]
    objective: Objective
    sampler: str
    trials_done: int
    trials_budget: int
    best_ms: float | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    error: str | None
    cancel_requested: bool
    #: ``tune``, or ``revalidate`` for a job a server scheduled after a stack change.
    kind: str = "tune"


@dataclasses.dataclass(frozen=True)
class StudyProgress(View):
    """One study of a job: ``done`` of ``budget`` trials, trials by outcome, and its best as
    :func:`orchestrator.app.study_best.study_best` decides it for every view: ``best_source``
    ``decided`` (the key's best row: ``best_ms`` its re-timed winner's time, ``best_job`` the job
    that wrote it, ``cancelled_job`` if that job was cancelled, which backend holds the key and
    the speedups over the default config and the vendor path, times of one re-timing; None: not
    measured) or ``so_far`` (the fastest ``ok`` trial of a study that still runs or whose key no
    row decides: not re-timed, no speedups); None: no ``ok`` trial yet."""

    id: int
    label: str
    problem: dict[str, Any]
    device_class: str
    status: StudyStatus
    budget: int
    done: int
    outcomes: dict[str, int]
    measured: int
    reused: int
    best_ms: float | None
    best_config: dict[str, Any] | None
    backend: str | None = None
    vendor: str | None = None
    speedup_vs_default: float | None = None
    speedup_vs_vendor: float | None = None
    best_source: BestSource | None = None
    best_job: int | None = None
    cancelled_job: bool = False
    triton_ms: float | None = None
    vendor_ms: float | None = None
    default_ms: float | None = None
    noise: float | None = None


@dataclasses.dataclass(frozen=True)
class JobDetail(View):
    """A job with per-study progress; on the wire the job's fields plus ``studies``."""

    job: JobView
    studies: tuple[StudyProgress, ...]

    def to_dict(self) -> dict[str, Any]:
        return {**self.job.to_dict(), "studies": [s.to_dict() for s in self.studies]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobDetail:
        return cls(
            JobView.from_dict(data), tuple(StudyProgress.from_dict(s) for s in data["studies"])
        )

    @property
    def finished(self) -> bool:
        return self.job.status in FINISHED


@dataclasses.dataclass(frozen=True)
class JobPage(View):
    """One page of a job listing, newest first; ``total`` matches the filters (``before``
    aside); ``next_before``: the ``before`` of the next page, None on the last."""

    items: tuple[JobView, ...]
    total: int
    limit: int
    offset: int
    before: int | None = None
    next_before: int | None = None


@dataclasses.dataclass(frozen=True)
class TrialView(View):
    """One trial row of a study."""

    id: int
    config: dict[str, Any]
    outcome: TrialOutcome
    median_ms: float | None
    iqr_ms: float | None
    max_rel_error: float | None
    compile_s: float | None
    error: str | None
    worker: str | None
    reused: bool
    created_at: datetime


@dataclasses.dataclass(frozen=True)
class TrialPage(View):
    """One page of a study's trials, ordered by ``sort`` (``orchestrator.app.insights.trial_page``)."""

    study_id: int
    items: tuple[TrialView, ...]
    total: int
    limit: int
    offset: int
    sort: str


@dataclasses.dataclass(frozen=True)
class BestView(View):
    """A stored best config with its rates and its provenance (the team and job that made it;
    ``cancelled_job``: that job was cancelled, so its config is its fastest trial so far, not
    re-timed, until a ``resume`` finishes the job)."""

    kernel: str
    kernel_version: str
    problem: dict[str, Any]
    device_class: str
    triton: str
    objective: Objective
    config: dict[str, Any]
    time_ms: float
    tflops: float | None
    gbs: float | None
    roofline_pct: float | None
    team: str | None
    job_id: int | None
    updated_at: datetime
    #: The last ``tunefleet revalidate`` of it (state, at, ms, ratio); None: never, or tuned since.
    revalidation: dict[str, Any] | None = None
    cancelled_job: bool = False
    #: Which backend holds the key (``triton``: ``config``; ``vendor``: the path ``vendor``,
    #: ``time_ms`` its time), the vendor path's and the default config's times in the re-timing
    #: that decided it, and its relative noise floor (None: not measured).
    backend: str = "triton"
    vendor: str | None = None
    vendor_ms: float | None = None
    default_ms: float | None = None
    noise: float | None = None

    @property
    def speedup_vs_default(self) -> float | None:
        return speedup(self.default_ms, self.time_ms)

    @property
    def speedup_vs_vendor(self) -> float | None:
        return speedup(self.vendor_ms, self.time_ms)

    def to_dict(self) -> dict[str, Any]:
        """The fields, and the two speedups (read back from the times by ``from_dict``)."""
        return {
            **super().to_dict(),
            "speedup_vs_default": self.speedup_vs_default,
            "speedup_vs_vendor": self.speedup_vs_vendor,
        }


@dataclasses.dataclass(frozen=True)
class BundleFile:
    """A file ``pull`` writes: its name (no folder part), bytes and media type."""

    filename: str
    content: bytes
    media_type: str


@dataclasses.dataclass(frozen=True)
class KernelView(View):
    """A kernel that can be tuned: its problem schema (and usage line) and an example problem."""

    name: str
    description: str
    problem: tuple[dict[str, Any], ...]
    usage: str
    example: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class SpaceView(View):
    """A kernel's space on a device class: parameters present there, rules, default, counts."""

    kernel: str
    device_class: str
    parameters: dict[str, Any]
    constraints: tuple[dict[str, Any], ...]
    default: dict[str, Any]
    total: int
    valid: int
    space_hash: str
    version: str


@dataclasses.dataclass(frozen=True)
class JobSummaryView(View):
    """A job's results as ``orchestrator.app.summary.collect`` gives them; ``to_dict()`` is that
    summary (best config per study, rates, speedups, trials by outcome)."""

    job_id: int
    status: JobStatus
    summary: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return dict(self.summary)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobSummaryView:
        return cls(int(data["job"]), JobStatus(data["status"]), dict(data))


@dataclasses.dataclass(frozen=True)
class DeviceClassView(View):
    """A device class a scheduler's workers measure: how many workers, how many run a job."""

    key: str
    workers: int
    busy: int
    idle: int


FINISHED: frozenset[JobStatus] = frozenset({JobStatus.DONE, JobStatus.FAILED, JobStatus.CANCELLED})


def aware(at: datetime) -> datetime:
    """``at`` with its time zone (SQLite returns naive datetimes; every stored time is UTC)."""
    return at if at.tzinfo is not None else at.replace(tzinfo=timezone.utc)


__all__ = [
    "FINISHED",
    "BestView",
    "BundleFile",
    "DeviceClassView",
    "JobDetail",
    "JobPage",
    "JobSummaryView",
    "JobView",
    "KernelView",
    "SpaceView",
    "StudyProgress",
    "TrialPage",
    "TrialView",
    "View",
    "aware",
]
