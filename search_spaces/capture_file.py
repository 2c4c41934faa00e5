"""Capture files: what ``TUNEFLEET_CAPTURE`` records of an app's ``@triton.autotune`` kernels.

A capture directory holds one ``capture-<pid>-<n>.jsonl`` file per recording process; each line is
one JSON record:

* ``{"record": "kernel", "name", "module", "qualname", "file", "root", "source_hash",
  "arg_names", "constexprs", "key", "configs", "reset_to_zero", "restore_value"}`` once per kernel;
* ``{"record": "launch", "name", "key": [...], "problem": {...}, "args": {...}, "grid": ...}``
  once per distinct tuning key: every argument's shape, dtype, strides and storage offset (tensors)
  or value (scalars, constexprs), never tensor data; ``grid`` is the launch grid as a list, or a
  table ``{"params": [...], "rows": [[values..., grid], ...]}`` of the grid function evaluated for
  the constexpr combinations a widened search may try (see :func:`widened_values`).

:func:`read_capture` merges the files of a directory (later processes add keys, never replace
them). Reading imports neither torch nor triton (stdlib only).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from search_spaces.errors import SpecError

CAPTURE_GLOB = "capture-*.jsonl"
#: Launch options of ``triton.Config`` next to its kwargs (constexprs) and their defaults.
CONFIG_OPTIONS: dict[str, int | None] = {
    "num_warps": 4,
    "num_stages": 3,
    "num_ctas": 1,
    "maxnreg": None,
}
#: Largest constexpr product whose grid a capture evaluates (beyond it, the config list only).
GRID_TABLE_LIMIT = 4096
MAX_WARPS = 32


class CaptureError(SpecError):
    """A capture directory is missing, empty or holds a malformed record."""


def kernel_name(module: str, qualname: str, file: str | None) -> str:
    """The name a captured kernel is stored under: ``module.qualname`` (a script's ``__main__``
    becomes its file's stem), restricted to ``[A-Za-z0-9._-]`` so it can name files."""
    if module == "__main__" and file:
        module = Path(file).stem
    return re.sub(r"[^A-Za-z0-9._-]+", "_", f"{module}.{qualname}")


def dtype_name(dtype: object) -> str:
    """``torch.float16`` -> ``float16``."""
    return str(dtype).removeprefix("torch.")


def problem_of(key_names: Sequence[str], key: Sequence[Any]) -> dict[str, int | bool | str]:
    """The problem of a Triton autotuner key: the key arguments' values by name (positive ints
    stay ints, bools stay bools, anything else becomes its ``str``) plus ``dtypes``, the dtypes of
    the tensor arguments as Triton appends them to the key."""
    problem: dict[str, int | bool | str] = {}
    for name, value in zip(key_names, key, strict=False):
        if isinstance(value, bool) or (isinstance(value, int) and value > 0):
            problem[name] = value
        else:
            problem[name] = str(value)
    problem["dtypes"] = ",".join(dtype_name(d) for d in key[len(key_names) :])
    return problem


def is_pow2(value: object) -> bool:
    """A positive power-of-two int (not a bool)."""
    return (
        isinstance(value, int)
        and not isinstance(value, bool)
        and value > 0
        and not value & (value - 1)
    )


def widened_values(name: str, observed: Iterable[Any]) -> tuple[Any, ...]:
    """The values a widened search tries for a parameter seen with ``observed`` values.

    Powers of two: every power of two from half the smallest to twice the largest (``num_warps``
    capped at 32); other integers: each value and its neighbours ±1 (at least 1); bools: both;
    anything else: the observed values only. Sorted, no repeats.
    """
    seen = list(dict.fromkeys(observed))
    if all(isinstance(v, bool) for v in seen):
        return (False, True)
    if all(is_pow2(v) for v in seen):
        low, high = max(1, min(seen) // 2), max(seen) * 2
        if name == "num_warps":
            high = min(high, MAX_WARPS)
        out = []
        v = 1
        while v <= high:
            if v >= low:
                out.append(v)
            v *= 2
        return tuple(sorted(set(out) | set(seen)))
    if all(isinstance(v, int) and not isinstance(v, bool) for v in seen):
        near = {n for v in seen for n in (v - 1, v, v + 1) if n >= 1}
        return tuple(sorted(near | set(seen)))
    return tuple(seen)


def grid_candidates(
    configs: Sequence[Mapping[str, Any]],
) -> tuple[list[str], list[tuple[Any, ...]]]:
    """(constexpr names, combinations) whose grid a capture evaluates: the widened product when
    it has at most GRID_TABLE_LIMIT combinations, else the config list's own combinations."""
    names = list(dict.fromkeys(k for c in configs for k in c["kwargs"]))
    own = list(dict.fromkeys(tuple(c["kwargs"].get(n) for n in names) for c in configs))
    values = [
        widened_values(n, [c["kwargs"][n] for c in configs if n in c["kwargs"]]) for n in names
    ]
    if math.prod(len(v) for v in values) > GRID_TABLE_LIMIT:
        return names, own
    combos: list[tuple[Any, ...]] = [()]
    for vals in values:
        combos = [(*c, v) for c in combos for v in vals]
    return names, list(dict.fromkeys([*own, *combos]))


@dataclass(frozen=True)
class CapturedLaunch:
    """One distinct tuning key of a kernel: its problem, arguments and launch grid."""

    key: list[Any]
    problem: dict[str, Any]
    args: dict[str, dict[str, Any]]
    grid: Any


@dataclass
class CapturedKernel:
    """A kernel an app launched through ``@triton.autotune``, with every key it was tuned for."""

    name: str
    module: str
    qualname: str
    file: str | None
    root: str | None
    source_hash: str
    arg_names: list[str]
    constexprs: list[str]
    key: list[str]
    configs: list[dict[str, Any]]
    reset_to_zero: list[str] = field(default_factory=list)
    restore_value: list[str] = field(default_factory=list)
    launches: list[CapturedLaunch] = field(default_factory=list)

    def launch_for(self, problem: Mapping[str, Any]) -> CapturedLaunch:
        for launch in self.launches:
            if launch.problem == dict(problem):
                return launch
        raise CaptureError(f"capture of {self.name} has no launch for problem {dict(problem)}")


_KERNEL_FIELDS = ("name", "module", "qualname", "source_hash", "arg_names", "key", "configs")


#: A captured kernel's name (:func:`kernel_name`): it names files, so never a path.
KERNEL_NAME_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")


def _kernel(raw: Mapping[str, Any], where: str) -> CapturedKernel:
    missing = [f for f in _KERNEL_FIELDS if f not in raw]
    if missing:
        raise CaptureError(f"{where}: kernel record lacks {', '.join(missing)}")
    if not KERNEL_NAME_PATTERN.fullmatch(str(raw["name"])):
        raise CaptureError(f"{where}: kernel name {raw['name']!r} is not [A-Za-z0-9._-]+")
    return CapturedKernel(
        name=str(raw["name"]),
        module=str(raw["module"]),
        qualname=str(raw["qualname"]),
        file=raw.get("file"),
        root=raw.get("root"),
        source_hash=str(raw["source_hash"]),
        arg_names=list(raw["arg_names"]),
        constexprs=list(raw.get("constexprs", [])),
        key=list(raw["key"]),
        configs=[dict(c) for c in raw["configs"]],
        reset_to_zero=list(raw.get("reset_to_zero", [])),
        restore_value=list(raw.get("restore_value", [])),
    )


def read_capture(directory: str | Path) -> list[CapturedKernel]:
    """The kernels recorded in ``directory`` (sorted by name), each with its distinct keys in the
    order first seen; raises CaptureError when the directory holds no capture."""
    folder = Path(directory)
    if not folder.is_dir():
        raise CaptureError(f"capture directory {folder} does not exist")
    files = sorted(folder.glob(CAPTURE_GLOB))
    if not files:
        raise CaptureError(
            f"{folder} holds no {CAPTURE_GLOB} file; record one with "
            f"`tunefleet capture --out {folder} -- python app.py`"
        )
    kernels: dict[str, CapturedKernel] = {}
    launches: list[tuple[str, CapturedLaunch, str]] = []
    for path in files:
        lines = path.read_text().splitlines()
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            where = f"{path}:{n}"
            try:
                raw = json.loads(line)
            except ValueError:
                if n == len(lines):
                    continue  # a process killed mid-line: its last record is lost, not the rest
                raise CaptureError(f"{where}: not a JSON record") from None
            if raw.get("record") == "kernel":
                kernel = _kernel(raw, where)
                kernels.setdefault(kernel.name, kernel)
            elif raw.get("record") == "launch":
                launch = CapturedLaunch(
                    list(raw["key"]), dict(raw["problem"]), dict(raw["args"]), raw.get("grid")
                )
                launches.append((str(raw["name"]), launch, where))
            else:
                raise CaptureError(f"{where}: unknown record {raw.get('record')!r}")
    for name, launch, where in launches:
        if name not in kernels:
            raise CaptureError(f"{where}: launch of {name!r}, whose kernel record is missing")
        kernel = kernels[name]
        if all(existing.problem != launch.problem for existing in kernel.launches):
            kernel.launches.append(launch)
    return [kernels[n] for n in sorted(kernels)]
