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
    from tests.orchestrator.commands.test_capture_tune import serve

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
        "orchestrator.app.capture_jobs",
        "orchestrator.export.t4",
    ],
)
def test_importing_loads_no_gpu_library(module: str) -> None:
    from tests.test_imports import GPU_LIBS, _loaded_after

    assert _loaded_after(f"import {module}", GPU_LIBS) == []


def noop_kernel(x_ptr, n, BLOCK):  # type: ignore[no-untyped-def]
    """The source the drop-in hashes for the kernel below."""


class _NoLaunch:
    arg_names = ("x_ptr", "n", "BLOCK")
    fn = staticmethod(noop_kernel)

    def run(self, *args: object, **kwargs: object) -> None:
        return None


def test_a_served_config_is_never_timed_even_where_triton_times_a_single_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Triton 3.6 times a key's only pruned config (3.9 does not): the drop-in's ``_bench``
    answers for the served one without launching, and counts the configs it really times."""
    import torch
    from triton import Config

    from search_spaces.bundle_env import current_environment
    from search_spaces.triton_autotune import autotune
    from search_spaces.triton_capture import kernel_source, source_hash

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    doc = _doc("", 256, source_hash(kernel_source(noop_kernel))[:8] + "00000000")
    doc.update(kernel=f"{__name__}.noop_kernel", environment=current_environment())
    doc["entries"][0]["problem"] = {"n": 64, "dtypes": "float32"}
    (tmp_path / "b.json").write_text(json.dumps(doc))
    benched: list[object] = []

    def bench(fn: object, quantiles: object) -> list[float]:
        benched.append(fn)
        return [1.0, 1.0, 1.0]

    configs = [Config({"BLOCK": 64}, num_warps=2), Config({"BLOCK": 128}, num_warps=4)]
    tuner = autotune(configs=configs, key=["n"], bundle=tmp_path, do_bench=bench)(_NoLaunch())
    x = torch.empty(64)
    tuner.nargs = {"x_ptr": x, "n": 64}
    (served,) = tuner.prune_configs({})
    assert served.kwargs == {"BLOCK": 256}
    assert tuner._bench(x, 64, config=served) == [0.0, 0.0, 0.0]
    assert (benched, tuner.timed) == ([], 0)
    tuner._bench(x, 64, config=configs[0])  # a config of an unserved key: timed as Triton does
    assert (len(benched), tuner.timed) == (1, 1)
