"""Record an app's ``@triton.autotune`` kernels without changing its code (``TUNEFLEET_CAPTURE``).

:func:`install` wraps ``triton.runtime.autotuner.Autotuner.run`` (now if triton is loaded, else
the moment it is imported): a launch whose key Triton has not tuned yet adds one ``launch`` record
(and, first time, the kernel's record) to the capture directory; see
:mod:`search_spaces.capture_file` for the format. A launch of a key already seen costs two
``len()`` calls more than Triton's own cached path. Nothing is installed unless asked: importing
this module does nothing.

Ways in (none edits the app): ``tunefleet capture --out DIR -- python app.py`` (puts a bootstrap
``sitecustomize`` on ``PYTHONPATH``), ``PYTHONPATH=$(tunefleet capture --bootstrap) TUNEFLEET_CAPTURE=DIR
python app.py``, or ``TUNEFLEET_CAPTURE=DIR`` alone when the app imports
:mod:`search_spaces.triton_autotune`.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import json
import os
import sys
import textwrap
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from search_spaces.capture_file import (
    CONFIG_OPTIONS,
    dtype_name,
    grid_candidates,
    kernel_name,
    problem_of,
)

ENV_VAR = "TUNEFLEET_CAPTURE"
AUTOTUNER_MODULE = "triton.runtime.autotuner"
#: Keyword arguments of a launch that are not kernel arguments.
LAUNCH_KWARGS = ("grid", "warmup")


def kernel_source(fn: Any) -> str:
    """The source of a kernel's Python function from its ``def`` line (decorators left out, so
    swapping ``@triton.autotune`` for the drop-in keeps the hash)."""
    lines = textwrap.dedent(inspect.getsource(fn)).splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.startswith(("def ", "async def "))), 0)
    return "".join(lines[start:])


def constexpr_names(fn: Any) -> list[str]:
    """Parameters of ``fn`` annotated ``tl.constexpr``."""
    return [
        p.name
        for p in inspect.signature(fn).parameters.values()
        if "constexpr" in str(getattr(p.annotation, "__name__", p.annotation))
    ]


def triton_key(tuner: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[Any, ...]:
    """The key ``Autotuner.run`` computes for this launch: the key arguments' values, then the
    dtype of every tensor argument."""
    named = {**dict(zip(tuner.arg_names, args, strict=False)), **kwargs}
    present = {k: v for k, v in named.items() if k in tuner.arg_names}
    key = [present[k] for k in tuner.keys if k in present]
    key.extend(str(v.dtype) for v in present.values() if hasattr(v, "dtype"))
    return tuple(key)


def config_dict(config: Any) -> dict[str, Any]:
    """A ``triton.Config`` as JSON data: ``kwargs`` plus the launch options."""
    out: dict[str, Any] = {"kwargs": dict(config.kwargs)}
    for name in CONFIG_OPTIONS:
        out[name] = getattr(config, name, CONFIG_OPTIONS[name])
    return out


def describe_value(value: Any) -> dict[str, Any]:
    """An argument as data: a tensor's shape, dtype, strides and offset (no data), else a value."""
    if hasattr(value, "data_ptr") and hasattr(value, "stride") and hasattr(value, "dtype"):
        return {
            "tensor": True,
            "shape": list(value.shape),
            "dtype": dtype_name(value.dtype),
            "stride": list(value.stride()),
            "offset": int(value.storage_offset()),
        }
    if value is None or isinstance(value, bool | int | float | str):
        return {"value": value}
    if type(value).__module__.startswith("triton") and type(value).__name__ == "dtype":
        return {"tl_dtype": str(value)}
    return {"unsupported": type(value).__name__, "repr": repr(value)[:200]}


def _root(module: str, file: str | None) -> str | None:
    """The folder to put on ``sys.path`` to import ``module`` from ``file``."""
    if not file:
        return None
    path = Path(file).resolve()
    if module == "__main__":
        return str(path.parent)
    depth = module.count(".") + (1 if path.name == "__init__.py" else 0)
    return str(path.parents[depth])


def describe_kernel(tuner: Any) -> dict[str, Any]:
    """The ``kernel`` record of an Autotuner."""
    base = tuner.base_fn
    try:
        file: str | None = inspect.getsourcefile(base)
    except TypeError:
        file = None
    module, qualname = str(base.__module__), str(base.__qualname__)
    return {
        "record": "kernel",
        "name": kernel_name(module, qualname, file),
        "module": module,
        "qualname": qualname,
        "file": str(Path(file).resolve()) if file else None,
        "root": _root(module, file),
        "source_hash": source_hash(kernel_source(base)),
        "arg_names": list(tuner.arg_names),
        "constexprs": constexpr_names(base),
        "key": list(tuner.keys),
        "configs": [config_dict(c) for c in tuner.configs],
        "reset_to_zero": list(tuner.reset_to_zero),
        "restore_value": list(tuner.restore_value),
    }


def source_hash(src: str) -> str:
    return hashlib.sha256(src.encode()).hexdigest()[:16]


def _grid(
    grid: Any, named: Mapping[str, Any], configs: Sequence[dict[str, Any]]
) -> list[int] | dict[str, Any] | None:
    if grid is None:
        return None
    if not callable(grid):
        return [int(g) for g in (grid if isinstance(grid, tuple | list) else (grid,))]
    names, combos = grid_candidates(configs)
    options = {k: v for k, v in configs[0].items() if k != "kwargs" and v is not None}
    rows = []
    for combo in combos:
        try:
            value = grid({**named, **options, **dict(zip(names, combo, strict=True))})
            dims = value if isinstance(value, tuple | list) else (value,)
            rows.append([*combo, [int(d) for d in dims]])
        except Exception:
            continue
    return {"params": names, "rows": rows}


def describe_launch(
    name: str,
    tuner: Any,
    key: Sequence[Any],
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    configs: Sequence[dict[str, Any]],
) -> dict[str, Any]:
    """The ``launch`` record of one key: every argument described, the grid evaluated."""
    named = {**dict(zip(tuner.arg_names, args, strict=False)), **kwargs}
    passed = {k: v for k, v in named.items() if k not in LAUNCH_KWARGS}
    return {
        "record": "launch",
        "name": name,
        "key": [v if isinstance(v, bool | int | float | str) else str(v) for v in key],
        "problem": problem_of(tuner.keys, key),
        "args": {k: describe_value(v) for k, v in passed.items()},
        "grid": _grid(kwargs.get("grid"), passed, configs),
    }


class CaptureWriter:
    """Appends capture records to ``capture-<pid>-<n>.jsonl`` in ``directory`` (a new file after a
    fork); each record is one line, flushed at once, so a killed app loses at most the last one."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self._lock = threading.Lock()
        self._pid = -1
        self._file: Any = None
        self._kernels: dict[int, tuple[str, list[dict[str, Any]]]] = {}
        self._seen: dict[int, set[Any]] = {}

    def _write(self, record: Mapping[str, Any]) -> None:
        if self._pid != os.getpid():
            self.directory.mkdir(parents=True, exist_ok=True)
            n = 0
            while True:
                path = self.directory / f"capture-{os.getpid()}-{n}.jsonl"
                try:
                    self._file = path.open("x", encoding="utf-8")
                    break
                except FileExistsError:
                    n += 1
            self._pid = os.getpid()
            self._kernels.clear()
        self._file.write(json.dumps(record, default=str, separators=(",", ":")) + "\n")
        self._file.flush()

    def _kernel(self, tuner: Any) -> tuple[str, list[dict[str, Any]]]:
        known = self._kernels.get(id(tuner))
        if known is None:
            record = describe_kernel(tuner)
            self._write(record)
            known = self._kernels[id(tuner)] = (record["name"], record["configs"])
        return known

    def record(
        self, tuner: Any, key: tuple[Any, ...], args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> None:
        """Write ``key`` of ``tuner`` (and the kernel, first time) unless already written."""
        with self._lock:
            seen = self._seen.setdefault(id(tuner), set())
            if key in seen:
                return
            seen.add(key)
            name, configs = self._kernel(tuner)
            self._write(describe_launch(name, tuner, key, args, kwargs, configs))

    def record_new(self, tuner: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        """Record the keys Triton's cache gained in the launch that just ran."""
        seen = self._seen.get(id(tuner), set())
        for key in [k for k in tuner.cache if k not in seen]:
            self.record(tuner, key, args, kwargs)


def patch_autotuner(autotuner_cls: type, writer: CaptureWriter) -> None:
    """Wrap ``autotuner_cls.run`` so launches of new keys reach ``writer`` (once per class)."""
    if getattr(autotuner_cls, "_tunefleet_writer", None) is not None:
        return
    original = autotuner_cls.run  # type: ignore[attr-defined]

    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        before = len(self.cache)
        result = original(self, *args, **kwargs)
        if len(self.cache) != before:
            writer.record_new(self, args, kwargs)
        elif len(self.configs) == 1 and id(self) not in writer._seen:
            writer.record(self, triton_key(self, args, kwargs), args, kwargs)
        return result

    autotuner_cls.run = run  # type: ignore[attr-defined]
    autotuner_cls._tunefleet_writer = writer  # type: ignore[attr-defined]


class _AutotunerFinder(importlib.abc.MetaPathFinder):
    """Finds ``triton.runtime.autotuner`` through the other finders and patches it once loaded."""

    def __init__(self, writer: CaptureWriter) -> None:
        self.writer = writer

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != AUTOTUNER_MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module = loader.exec_module
        writer = self.writer

        def exec_and_patch(module: ModuleType) -> None:
            exec_module(module)
            patch_autotuner(module.Autotuner, writer)

        loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


def install(directory: str | Path) -> CaptureWriter:
    """Start recording into ``directory``: now if triton's autotuner is loaded, else on import."""
    writer = CaptureWriter(directory)
    loaded = sys.modules.get(AUTOTUNER_MODULE)
    if loaded is not None:
        patch_autotuner(loaded.Autotuner, writer)
        return getattr(loaded.Autotuner, "_tunefleet_writer", writer)
    for finder in sys.meta_path:
        if isinstance(finder, _AutotunerFinder):
            return finder.writer
    sys.meta_path.insert(0, _AutotunerFinder(writer))
    return writer


def install_from_env() -> CaptureWriter | None:
    """:func:`install` into ``$TUNEFLEET_CAPTURE`` when it is set; else nothing."""
    directory = os.environ.get(ENV_VAR)
    return install(directory) if directory else None


def bootstrap_dir() -> Path:
    """The folder whose ``sitecustomize.py`` calls :func:`install_from_env` at start-up."""
    return Path(__file__).with_name("_capture_boot")
