"""The drop-in decorator's version handling: a bundle measured under other versions is named in a
warning once, then used, refused or replaced by the newest older one, as asked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from search_spaces.bundle import bundle_from_dict
from search_spaces.bundle_env import VersionPolicy, choose, differences
from tests.workers.test_capture import APP, ROOT

HERE = {"triton": "3.9.0", "torch": "2.13.0", "driver": None, "runtime": "interpreter"}


def _doc(triton: str, block: int, kernel_version: str = "") -> dict:
    return {
        "format": "tunefleet-bundle/1",
        "kernel": "app_kernels.scaled_add",
        "kernel_version": kernel_version,
        "device_class": "cpu",
        "environment": {**HERE, "triton": triton},
        "default": {"BLOCK": 64, "num_warps": 2, "num_stages": 3},
        "entries": [
            {
                "problem": {"n": 100, "dtypes": "float32,float32,float32"},
                "config": {"BLOCK": block, "num_warps": 4, "num_stages": 3},
            }
        ],
    }


def test_choose_by_policy() -> None:
    old, new = bundle_from_dict(_doc("3.6.0", 32)), bundle_from_dict(_doc("9.0.0", 128))
    assert differences(old.environment, HERE) == ["triton 3.6.0 -> 3.9.0"]
    assert choose([old, new], HERE, VersionPolicy.USE)[0] is new
    assert choose([old, new], HERE, VersionPolicy.REFUSE)[0] is None
    assert choose([old, new], HERE, VersionPolicy.OLDER)[0] is old
    assert choose([new], HERE, VersionPolicy.OLDER)[0] is None


def _source_hash() -> str:
    code = (
        "import app_kernels; from search_spaces.triton_capture import kernel_source, source_hash;"
        "print(source_hash(kernel_source(app_kernels.scaled_add.base_fn))[:8])"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1"}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=APP, env=env, capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.mark.parametrize("policy,timed", [("use", 0), ("refuse", 2)])
def test_version_mismatch_warned_once_and_refused_by_option(
    tmp_path: Path, policy: str, timed: int
) -> None:
    import torch
    import triton

    doc = _doc("3.0.0", 128, _source_hash() + "00000000")
    doc["environment"] = {
        "triton": "3.0.0",
        "torch": str(torch.__version__),
        "runtime": "interpreter",
        "driver": "",
    }
    (tmp_path / "b.json").write_text(json.dumps(doc))
    from tests.orchestrator.test_capture_tune import serve

    report = serve(tmp_path, 100, 100, APP_VERSIONS=policy)
    (warning,) = report["warnings"]
    assert f"triton 3.0.0 -> {triton.__version__}" in warning
    assert ("; using it" in warning) == (policy == "use")
    assert [k["timed"] for k in report["keys"]] == [timed, 0]


@pytest.mark.parametrize(
    "module",
    [
        "search_spaces.triton_autotune",
        "search_spaces.triton_capture",
        "search_spaces.bundle_env",
        "workers.capture_spec",
        "orchestrator.capture_jobs",
        "orchestrator.t4",
    ],
)
def test_importing_loads_no_gpu_library(module: str) -> None:
    from tests.test_imports import GPU_LIBS, _loaded_after

    assert _loaded_after(f"import {module}", GPU_LIBS) == []
