"""Bundles: export from the database, and the deployment-side lookup (exact, nearest, default)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from db import Database, Objective, repository
from orchestrator.bundle_export import BundleFormat, export
from orchestrator.errors import BundleExportError
from search_spaces.bundle import BUNDLE_FORMAT, BundleError, bundle_from_dict, load_bundle, tuned
from search_spaces.problem import problem_key
from search_spaces.registry import get_spec

DEFAULT = {"BLOCK_M": 64}


def _bundle() -> dict[str, object]:
    def entry(m: int, dtype: str, block: int) -> dict[str, object]:
        return {
            "problem": {"M": m, "N": 4096, "dtype": dtype},
            "config": {"BLOCK_M": block},
            "time_ms": 1.0,
            "job": 1,
        }

    return {
        "format": BUNDLE_FORMAT,
        "kernel": "matmul",
        "kernel_version": "v",
        "device_class": "NVIDIA H200",
        "default": DEFAULT,
        "entries": [
            entry(16, "float16", 16),
            entry(1024, "float16", 128),
            entry(4096, "bfloat16", 256),
        ],
    }


def test_lookup_exact_nearest_default() -> None:
    b = bundle_from_dict(_bundle())
    assert b.resolve({"M": 1024, "N": 4096, "dtype": "float16"}) == ("exact", {"BLOCK_M": 128})
    # log2 distance: 128 is 3 from 16 and 3 from 1024 -> tie, the first entry wins
    assert b.resolve({"M": 128, "N": 4096, "dtype": "float16"}) == ("nearest", {"BLOCK_M": 16})
    assert b.resolve({"M": 256, "N": 4096, "dtype": "float16"}) == ("nearest", {"BLOCK_M": 128})
    # dtype must match: the only bfloat16 entry is used however far its M is
    assert b.resolve({"M": 1, "N": 4096, "dtype": "bfloat16"}) == ("nearest", {"BLOCK_M": 256})
    # no entry with this dtype, or different fields -> the default
    assert b.resolve({"M": 16, "N": 4096, "dtype": "float32"}) == ("default", DEFAULT)
    assert b.resolve({"M": 16, "dtype": "float16"}) == ("default", DEFAULT)
    looked = b.lookup({"M": 16, "N": 4096, "dtype": "float16"})
    looked["BLOCK_M"] = 0  # a copy: the bundle is not changed
    assert b.lookup({"M": 16, "N": 4096, "dtype": "float16"}) == {"BLOCK_M": 16}


def test_decorator_passes_config_and_caller_wins(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    path.write_text(json.dumps(_bundle()))

    @tuned(path, key=lambda m, n, dtype="float16", **_: {"M": m, "N": n, "dtype": dtype})
    def launch(m: int, n: int, dtype: str = "float16", BLOCK_M: int = 0) -> int:
        return BLOCK_M

    assert launch(1024, 4096) == 128
    assert launch(16, 4096, BLOCK_M=32) == 32
    assert launch(8, 8, dtype="float32") == 64


def test_lookup_is_fast_and_imports_nothing_heavy(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    path.write_text(json.dumps(_bundle()))
    code = (
        "import sys, time; from search_spaces.bundle import load_bundle\n"
        f"b = load_bundle({str(path)!r}); p = {{'M': 1024, 'N': 4096, 'dtype': 'float16'}}\n"
        "b.lookup(p); t = time.perf_counter()\n"
        "for _ in range(10000): b.lookup(p)\n"
        "print((time.perf_counter() - t) / 10000 * 1e6)\n"
        "print(sorted(m for m in ('torch', 'triton', 'ray', 'optuna', 'sqlalchemy') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert float(out[0]) < 50.0  # microseconds per cached lookup
    assert out[1] == "[]"


def test_bad_bundles(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="does not exist"):
        load_bundle(tmp_path / "none.json")
    with pytest.raises(BundleError, match="format"):
        bundle_from_dict({**_bundle(), "format": "other/9"})
    with pytest.raises(BundleError, match=r"entries\[0\]"):
        bundle_from_dict({**_bundle(), "entries": [{"problem": {}}]})


def _store_one(
    database: Database,
    class_key: str,
    config: Mapping[str, Any],
    problem: Mapping[str, Any] | None = None,
) -> None:
    """A best config of the installed matmul for ``problem`` (default 64^3 float16) on a class."""
    problem = problem or {"M": 64, "N": 64, "K": 64, "dtype": "float16"}
    with database.session() as s:
        repository.upsert_best(
            s,
            "matmul",
            get_spec("matmul").version_hash(),
            problem_key(problem),
            class_key,
            "3.9",
            config,
            1.0,
            None,
            None,
            None,
        )


def _store(database: Database) -> tuple[dict[str, Any], dict[str, Any]]:
    small = {"M": 256, "N": 256, "K": 256, "dtype": "float16"}
    big = {"M": 2048, "N": 2048, "K": 2048, "dtype": "float16"}
    cfg = {
        "BLOCK_M": 128,
        "BLOCK_N": 128,
        "BLOCK_K": 64,
        "GROUP_M": 8,
        "SPLIT_K": 1,
        "num_warps": 8,
        "num_stages": 4,
    }
    for problem, config in ((small, {**cfg, "BLOCK_M": 64}), (big, cfg)):
        _store_one(database, "NVIDIA H200", config, problem)
    return small, big


def test_export_native_round_trips_to_lookup(database: Database, tmp_path: Path) -> None:
    _, big = _store(database)
    (path,) = export(database, "matmul", tmp_path / "out", ["NVIDIA H200"])
    b = load_bundle(path)
    assert (b.kernel, b.device_class, b.meta["triton_minor"]) == ("matmul", "NVIDIA H200", "3.9")
    assert b.kernel_version == get_spec("matmul").version_hash()
    assert b.resolve(big)[0] == "exact" and b.lookup(big)["BLOCK_M"] == 128
    assert (
        b.resolve({**big, "M": 1024})[0] == "nearest"
        and b.lookup({**big, "M": 1024, "N": 1024, "K": 1024})["BLOCK_M"] == 128
    )
    assert b.default == get_spec("matmul").default_config(__import__("search_spaces").Vendor.NVIDIA)


def test_export_takes_one_objective(database: Database, tmp_path: Path) -> None:
    small, big = _store(database)
    graph_cfg = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 4, "num_warps": 4}
    with database.session() as s:
        repository.upsert_best(
            s,
            "matmul",
            get_spec("matmul").version_hash(),
            problem_key(big),
            "NVIDIA H200",
            "3.9",
            graph_cfg,
            0.9,
            None,
            None,
            None,
            Objective.GRAPH,
        )
    (kernel_path,) = export(database, "matmul", tmp_path / "out")
    (graph_path,) = export(database, "matmul", tmp_path / "out", objective=Objective.GRAPH)
    assert graph_path.name == kernel_path.name.replace(".json", "-graph.json")
    graph = load_bundle(graph_path)
    assert graph.meta["objective"] == "graph" and len(graph.entries) == 1
    assert graph.lookup(big) == graph_cfg
    assert load_bundle(kernel_path).lookup(big)["GROUP_M"] == 8
    assert load_bundle(kernel_path).resolve(small)[0] == "exact"


def test_export_triton_format_is_loadable(database: Database, tmp_path: Path) -> None:
    _store(database)
    (path,) = export(database, "matmul", tmp_path / "out", fmt=BundleFormat.TRITON)
    namespace: dict[str, object] = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    configs, best = namespace["CONFIGS"], namespace["BEST"]
    assert namespace["KEY"] == ["M", "N", "K", "dtype"]
    chosen = configs[best[(2048, 2048, 2048, "float16")]]  # type: ignore[index]
    assert chosen.kwargs["BLOCK_M"] == 128 and chosen.num_warps == 8 and chosen.num_stages == 4


HOSTILE_CLASS = 'H200"""\n__import__("os").system("touch PWNED")\n"""'


def test_export_triton_writes_database_text_as_literals_only(
    database: Database, tmp_path: Path
) -> None:
    # A device class name (from a replay landscape or anyone who writes to a shared database)
    # and config keys and values built to break out of the docstring or a string literal.
    config = {
        "BLOCK_M": 64,
        "x'): __import__('os').system('touch PWNED') #": 1,
        "num_warps": "'); __import__('os').system('touch PWNED'); ('",
    }
    _store_one(database, HOSTILE_CLASS, config)
    out = tmp_path / "out"
    (path,) = export(database, "matmul", out, fmt=BundleFormat.TRITON)
    assert path.parent == out
    code = (
        "import runpy, sys; ns = runpy.run_path(sys.argv[1]); "
        "print(repr(ns['DEVICE_CLASS'])); print(sorted(ns['CONFIGS'][0].kwargs))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert not (tmp_path / "PWNED").exists()  # importing the file ran nothing
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == repr(HOSTILE_CLASS)
    assert "x'): __import__('os').system('touch PWNED') #" in done.stdout


def test_export_triton_refuses_values_that_are_not_plain_data(
    database: Database, tmp_path: Path
) -> None:
    _store_one(database, "NVIDIA H200", {"BLOCK_M": float("nan")})
    with pytest.raises(BundleExportError, match="cannot write nan into a Python file"):
        export(database, "matmul", tmp_path / "out", fmt=BundleFormat.TRITON)
    assert list((tmp_path / "out").glob("*.py")) == []


def test_export_nothing_is_an_error(database: Database, tmp_path: Path) -> None:
    with pytest.raises(BundleExportError, match="run `tunefleet tune` first"):
        export(database, "matmul", tmp_path, ["NVIDIA B200"])
