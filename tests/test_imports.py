"""Importing orchestrator, db, search_spaces (and workers) loads no GPU library; bundles need no server stack."""

import subprocess
import sys

import pytest

GPU_LIBS = ("torch", "triton")
HEAVY = ("ray", "optuna", "sqlalchemy")


def _loaded_after(code: str, names: tuple[str, ...]) -> list[str]:
    probe = f"{code}\nimport sys\nprint(','.join(n for n in {names!r} if n in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return [n for n in out.stdout.strip().split(",") if n]


@pytest.mark.parametrize(
    "module",
    [
        "search_spaces",
        "search_spaces.registry",
        "db",
        "workers",
        "workers.runner",
        "orchestrator",
        "orchestrator.commands.cli",
    ],
)
def test_import_loads_no_gpu_library(module: str) -> None:
    assert _loaded_after(f"import {module}", GPU_LIBS) == []


def test_loading_builtin_specs_loads_no_gpu_library() -> None:
    code = "from search_spaces.registry import all_specs\nall_specs()"
    assert _loaded_after(code, GPU_LIBS) == []


def test_vendor_paths_of_builtin_specs_load_no_gpu_library() -> None:
    """The orchestrator asks each spec for its vendor paths: stdlib only."""
    code = (
        "from search_spaces.registry import all_specs\n"
        "for spec in all_specs():\n"
        "    assert spec.vendor_paths(spec.example), spec.name"
    )
    assert _loaded_after(code, GPU_LIBS) == []


@pytest.mark.parametrize("module", ["search_spaces.bundle", "search_spaces.dispatch"])
def test_bundle_lookup_imports_no_server_stack(module: str) -> None:
    assert _loaded_after(f"import {module}", GPU_LIBS + HEAVY) == []
