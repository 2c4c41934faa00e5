"""Load a script of ``benchmarks/`` (not a package) as a module for its tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` as the module ``tunefleet_bench_<name>`` (registered in
    ``sys.modules``, so dataclasses and pickling inside it work)."""
    spec = importlib.util.spec_from_file_location(
        f"tunefleet_bench_{name}", BENCHMARKS / f"{name}.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
