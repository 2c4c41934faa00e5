"""Landscape files: every config of a space timed on one device for one (kernel, problem).

Format (JSON, optionally gzip-compressed when the name ends in ``.gz``)::

    {"format": "tunefleet-landscape/1", "kernel": "matmul", "kernel_version": "...",
     "problem": {"M": 4096, ...}, "device": {fingerprint fields, at least "name"},
     "results": [{"config": {...}, "outcome": "ok" | "invalid" | ..., "time_ms": float | null}]}

``time_ms`` is set exactly when ``outcome`` is ``ok``. An optional ``"vendor"`` list holds the
spec's vendor paths timed on the same device, ``[{"name": "torch.matmul", "outcome": "ok",
"time_ms": float | null}]`` (read into :attr:`Landscape.vendor`). Reading never imports torch or
triton.

:func:`read_landscape` also reads Kernel Tuner's T4 results JSON (``schema_version`` and
``results``, see :func:`landscape_from_t4`), as ``tunefleet record --format t4`` writes it.
"""

from __future__ import annotations

import gzip
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from search_spaces.problem import problem_key
from search_spaces.space import Config, config_key
from workers.errors import WorkerError
from workers.measurement import Outcome

LANDSCAPE_FORMAT = "tunefleet-landscape/1"


class LandscapeError(WorkerError):
    """A landscape file is missing, unreadable, or not in the ``tunefleet-landscape/1`` format."""


@dataclass(frozen=True)
class LandscapeResult:
    """One recorded config: its outcome and, for ``ok``, its time in milliseconds."""

    config: Config
    outcome: Outcome
    time_ms: float | None = None


@dataclass
class Landscape:
    """All recorded results of one kernel on one problem and one device."""

    kernel: str
    kernel_version: str
    problem: dict[str, Any]
    device: dict[str, Any]
    results: list[LandscapeResult] = field(default_factory=list)
    #: Vendor path name -> its recorded result (``config`` empty).
    vendor: dict[str, LandscapeResult] = field(default_factory=dict)

    @property
    def device_name(self) -> str:
        return str(self.device.get("name", "unknown"))

    @property
    def problem_key(self) -> str:
        return problem_key(self.problem)

    def by_config(self) -> dict[str, LandscapeResult]:
        """Results keyed by the canonical config key (a later duplicate wins)."""
        return {config_key(r.config): r for r in self.results}

    def best(self) -> LandscapeResult | None:
        """The fastest ``ok`` result, or None when no config ran."""
        ok = [r for r in self.results if r.outcome is Outcome.OK and r.time_ms is not None]
        return min(ok, key=lambda r: float(r.time_ms or 0.0)) if ok else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": LANDSCAPE_FORMAT,
            "kernel": self.kernel,
            "kernel_version": self.kernel_version,
            "problem": dict(self.problem),
            "device": dict(self.device),
            "results": [
                {"config": dict(r.config), "outcome": r.outcome.value, "time_ms": r.time_ms}
                for r in self.results
            ],
            **(
                {
                    "vendor": [
                        {"name": name, "outcome": r.outcome.value, "time_ms": r.time_ms}
                        for name, r in self.vendor.items()
                    ]
                }
                if self.vendor
                else {}
            ),
        }


def _result(raw: object, where: str) -> LandscapeResult:
    if not isinstance(raw, Mapping) or not isinstance(raw.get("config"), Mapping):
        raise LandscapeError(f"{where}: each result needs a 'config' object")
    try:
        outcome = Outcome(raw.get("outcome"))
    except ValueError:
        raise LandscapeError(
            f"{where}: unknown outcome {raw.get('outcome')!r}; use one of "
            f"{', '.join(o.value for o in Outcome)}"
        ) from None
    time = raw.get("time_ms")
    if outcome is not Outcome.OK:
        return LandscapeResult(dict(raw["config"]), outcome, None)
    if not isinstance(time, int | float) or isinstance(time, bool) or not math.isfinite(time):
        raise LandscapeError(f"{where}: an ok result needs a finite time_ms, got {time!r}")
    if time <= 0:
        raise LandscapeError(f"{where}: time_ms must be positive, got {time!r}")
    return LandscapeResult(dict(raw["config"]), outcome, float(time))


def landscape_from_dict(data: object, where: str = "landscape") -> Landscape:
    """Check and convert a decoded landscape document; raises LandscapeError naming the fault."""
    if not isinstance(data, Mapping):
        raise LandscapeError(f"{where}: expected a JSON object")
    if data.get("format") != LANDSCAPE_FORMAT:
        raise LandscapeError(
            f"{where}: format is {data.get('format')!r}, expected {LANDSCAPE_FORMAT!r}"
        )
    for name, kind in _HEAD_FIELDS:
        if not isinstance(data.get(name), kind):
            raise LandscapeError(f"{where}: field {name!r} is missing or has the wrong type")
    landscape = _landscape(data, data.get("results"), _result, where)
    landscape.vendor = _vendor(data.get("vendor", []), where)
    return landscape


def _vendor(raw: object, where: str) -> dict[str, LandscapeResult]:
    """The optional ``vendor`` list: name -> recorded result."""
    if not isinstance(raw, list):
        raise LandscapeError(f"{where}: field 'vendor' must be a list")
    out: dict[str, LandscapeResult] = {}
    for i, item in enumerate(raw):
        name = item.get("name") if isinstance(item, Mapping) else None
        if not isinstance(name, str) or not name:
            raise LandscapeError(f"{where}: vendor[{i}] needs a 'name' string")
        out[name] = _result({**item, "config": {}}, f"{where}: vendor[{i}]")
    return out


_HEAD_FIELDS: tuple[tuple[str, type], ...] = (
    ("kernel", str),
    ("problem", Mapping),
    ("device", Mapping),
)


#: The longest device name and software version a landscape may give (the database's columns).
MAX_DEVICE_NAME = 200
MAX_VERSION = 64
#: Device fields that must be whole numbers (>= 0), and those that must be version strings.
_DEVICE_COUNTS = (
    "memory_bytes",
    "multiprocessors",
    "shared_mem_per_block",
    "registers_per_block",
    "warp_size",
    "max_threads_per_block",
    "index",
)
_DEVICE_VERSIONS = ("driver", "runtime", "triton", "torch")
_PRINTABLE = re.compile(r"[^\x00-\x1f\x7f\ud800-\udfff]+")


def _device(raw: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The ``device`` object checked before anything runs: a printable name of at most
    MAX_DEVICE_NAME characters, whole numbers where counts go, short version strings (or null)."""
    name = raw.get("name")
    if not isinstance(name, str) or not _PRINTABLE.fullmatch(name) or len(name) > MAX_DEVICE_NAME:
        raise LandscapeError(
            f"{where}: device 'name' must be 1 to {MAX_DEVICE_NAME} printable characters"
        )
    for key in ("vendor", "arch", "backend"):
        if key in raw and not isinstance(raw[key], str | None):
            raise LandscapeError(f"{where}: device {key!r} must be a string")
    for key in _DEVICE_COUNTS:
        value = raw.get(key)
        if value is not None and (
            not isinstance(value, int) or isinstance(value, bool) or value < 0
        ):
            raise LandscapeError(f"{where}: device {key!r} must be a whole number >= 0")
    for key in _DEVICE_VERSIONS:
        value = raw.get(key)
        if value is not None and (
            not isinstance(value, str)
            or not _PRINTABLE.fullmatch(value)
            or len(value) > MAX_VERSION
        ):
            raise LandscapeError(
                f"{where}: device {key!r} must be a version of 1 to {MAX_VERSION} printable "
                "characters, or null"
            )
    return dict(raw)


def _landscape(
    head: Mapping[str, Any],
    raw_results: object,
    read: Callable[[object, str], LandscapeResult],
    where: str,
) -> Landscape:
    """A landscape of ``head``'s kernel, problem and (checked) device with each result ``read``."""
    if not isinstance(raw_results, list):
        raise LandscapeError(f"{where}: field 'results' must be a list")
    return Landscape(
        kernel=str(head["kernel"]),
        kernel_version=str(head.get("kernel_version", "")),
        problem=dict(head["problem"]),
        device=_device(head["device"], where),
        results=[read(r, f"{where}: results[{i}]") for i, r in enumerate(raw_results)],
    )


#: Our outcomes as T4's ``invalidity`` values, and back (T4 has one "timeout" for both of ours).
T4_INVALIDITY: dict[Outcome, str] = {
    Outcome.OK: "correct",
    Outcome.INVALID: "constraints",
    Outcome.WRONG: "correctness",
    Outcome.COMPILE_ERROR: "compile",
    Outcome.COMPILE_TIMEOUT: "timeout",
    Outcome.RUN_TIMEOUT: "timeout",
    Outcome.CRASH: "runtime",
    Outcome.INFRA: "runtime",
}
_FROM_T4 = {
    "correct": Outcome.OK,
    "constraints": Outcome.INVALID,
    "correctness": Outcome.WRONG,
    "compile": Outcome.COMPILE_ERROR,
    "timeout": Outcome.RUN_TIMEOUT,
    "runtime": Outcome.CRASH,
}
#: Top-level field of a T4 file that says which kernel, problem and device its results are for.
T4_CONTEXT = "tunefleet"


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _t4_result(raw: object, where: str) -> LandscapeResult:
    if not isinstance(raw, Mapping) or not isinstance(raw.get("configuration"), Mapping):
        raise LandscapeError(f"{where}: each T4 result needs a 'configuration' object")
    ours = raw.get("tunefleet_outcome")
    try:
        outcome = Outcome(ours) if ours else _FROM_T4[str(raw.get("invalidity"))]
    except (ValueError, KeyError):
        raise LandscapeError(
            f"{where}: invalidity {raw.get('invalidity')!r} is not one of {', '.join(_FROM_T4)}"
        ) from None
    times = raw.get("times") or {}
    runtimes = (times.get("runtimes") or []) if isinstance(times, Mapping) else None
    measurements = raw.get("measurements", [])
    if (
        not isinstance(runtimes, list)
        or not all(_number(t) for t in runtimes)
        or not isinstance(measurements, list)
        or not all(isinstance(m, Mapping) for m in measurements)
    ):
        raise LandscapeError(
            f"{where}: 'times' must be an object whose 'runtimes' are numbers and "
            "'measurements' a list of objects"
        )
    time = next(
        (m.get("value") for m in measurements if m.get("name") == "time"),
        sorted(runtimes)[len(runtimes) // 2] if runtimes else None,
    )
    return _result(
        {"config": raw["configuration"], "outcome": outcome.value, "time_ms": time}, where
    )


def landscape_from_t4(data: Mapping[str, Any], where: str = "T4 file") -> Landscape:
    """A landscape from a T4 results document; its ``tunefleet`` field names the kernel, problem
    and device (a T4 file without it cannot say what it measured and is refused)."""
    context = data.get(T4_CONTEXT)
    if not isinstance(context, Mapping) or not all(
        isinstance(context.get(name), kind) for name, kind in _HEAD_FIELDS
    ):
        raise LandscapeError(
            f"{where}: a T4 file needs a '{T4_CONTEXT}' object with kernel, problem and device "
            "(as `tunefleet record --format t4` writes)"
        )
    return _landscape(context, data.get("results"), _t4_result, where)


def read_landscape(path: str | Path) -> Landscape:
    """Load a ``.json`` or ``.json.gz`` landscape file (ours or T4); raises LandscapeError."""
    p = Path(path)
    try:
        raw = p.read_bytes()
        if p.name.endswith(".gz"):
            raw = gzip.decompress(raw)
        data = json.loads(raw)
    except FileNotFoundError:
        raise LandscapeError(f"landscape file {p} does not exist") from None
    except (OSError, ValueError, EOFError) as exc:
        raise LandscapeError(f"cannot read landscape {p}: {exc}") from None
    except RecursionError:
        raise LandscapeError(f"cannot read landscape {p}: JSON nested too deeply") from None
    if isinstance(data, Mapping) and "schema_version" in data and "format" not in data:
        return landscape_from_t4(data, str(p))
    return landscape_from_dict(data, str(p))


def write_landscape(path: str | Path, landscape: Landscape) -> Path:
    """Write ``landscape`` as JSON (gzip-compressed when the name ends in ``.gz``)."""
    p = Path(path)
    text = json.dumps(landscape.to_dict(), sort_keys=True, separators=(",", ":")).encode()
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(gzip.compress(text, mtime=0) if p.name.endswith(".gz") else text)
    return p
