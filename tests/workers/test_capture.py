"""Capture of an app's @triton.autotune kernels (subprocess, interpreter) and the specs built from it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from search_spaces.capture_file import CaptureError, read_capture, widened_values
from tests.conftest import H200
from workers.capture_spec import CaptureSpec, _tile_rule, capture_spec, capture_specs, ref_for

ROOT = Path(__file__).resolve().parents[2]
APP = Path(__file__).parent / "capture_app"


def run_app(out: Path, *, env: dict[str, str] | None = None, via_cli: bool = True) -> None:
    base = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT), **(env or {})}
    command = [sys.executable, "app.py"]
    if via_cli:
        command = [
            sys.executable,
            "-m",
            "orchestrator",
            "capture",
            "--out",
            str(out),
            "--",
            *command,
        ]
    done = subprocess.run(command, cwd=APP, env=base, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    assert "app ok" in done.stderr


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("capture")
    run_app(out)
    return out


def test_capture_records_both_kernels_once_per_key_and_no_data(captured: Path) -> None:
    kernels = {k.name: k for k in read_capture(captured)}
    assert set(kernels) == {"app_kernels.scaled_add", "app_kernels.row_sum"}
    add, rows = kernels["app_kernels.scaled_add"], kernels["app_kernels.row_sum"]
    assert add.key == ["n"] and [c["kwargs"] for c in add.configs] == [
        {"BLOCK": 64},
        {"BLOCK": 128},
    ]
    assert add.constexprs == ["BLOCK"] and add.module == "app_kernels"
    assert [launch.problem["n"] for launch in add.launches] == [100, 300]  # repeated key: once
    (launch,) = rows.launches
    assert launch.problem == {"rows": 8, "cols": 40, "dtypes": "float32,float32"}
    assert launch.args["x_ptr"] == {
        "tensor": True,
        "shape": [8, 40],
        "dtype": "float32",
        "stride": [40, 1],
        "offset": 0,
    }
    assert launch.args["stride_r"] == {"value": 40}
    assert add.launches[0].args["alpha"] == {"value": 2.0}
    assert {tuple(r[:-1]): r[-1] for r in add.launches[1].grid["rows"]}[(128,)] == [3]
    text = "".join(p.read_text() for p in captured.glob("*.jsonl"))
    assert len(text) < 20000  # shapes and scalars only: 800 floats of data would not fit


def test_env_var_with_the_bootstrap_captures_and_nothing_without_it(tmp_path: Path) -> None:
    boot = ROOT / "search_spaces" / "_capture_boot"
    run_app(
        tmp_path / "a",
        env={"TUNEFLEET_CAPTURE": str(tmp_path / "a"), "PYTHONPATH": f"{boot}:{ROOT}"},
        via_cli=False,
    )
    assert {k.name for k in read_capture(tmp_path / "a")} == {
        "app_kernels.scaled_add",
        "app_kernels.row_sum",
    }
    run_app(tmp_path / "b", env={"PYTHONPATH": f"{boot}:{ROOT}"}, via_cli=False)
    assert not (tmp_path / "b").exists()


def test_spaces_list_and_widened(captured: Path) -> None:
    listed = capture_spec(captured, "app_kernels.row_sum", widen=False)
    assert listed.space.count(H200) == 2
    assert listed.default_config(H200.vendor) == {
        "BLOCK_R": 2,
        "BLOCK_C": 32,
        "num_warps": 1,
        "num_stages": 3,
    }
    wide = capture_spec(captured, "app_kernels.row_sum", widen=True)
    configs = wide.space.enumerate(H200)
    assert len(configs) > 2 and listed.default_config(H200.vendor) in configs
    assert {c["BLOCK_R"] for c in configs} <= {1, 2, 4, 8}
    assert widened_values("num_stages", [3]) == (2, 3, 4)
    assert widened_values("num_warps", [8, 16]) == (4, 8, 16, 32)


def test_inputs_outputs_and_every_config_against_the_first(captured: Path) -> None:
    import torch

    for _ref, spec in capture_specs(captured, widen=True):
        for problem in spec.problems():
            inputs = spec.build_inputs(problem, "cpu")
            expected_out = {"app_kernels.scaled_add": "out_ptr", "app_kernels.row_sum": "out_ptr"}
            assert inputs["out"] is inputs[expected_out[spec.name]]
            for config in spec.space.enumerate(H200)[:4]:
                inputs["out"].fill_(float("nan"))
                spec.make_launcher(inputs, config)()
                assert torch.allclose(inputs["out"], spec.reference(inputs), atol=1e-5)


def test_integer_tensor_needs_an_override_naming_the_argument(
    captured: Path, tmp_path: Path
) -> None:
    for path in captured.glob("*.jsonl"):
        text = path.read_text().replace(
            '"x_ptr":{"tensor":true,"shape":[8,40],"dtype":"float32"',
            '"x_ptr":{"tensor":true,"shape":[8,40],"dtype":"int32"',
        )
        (tmp_path / path.name).write_text(text)
    with pytest.raises(CaptureError, match="argument 'x_ptr' is an integer tensor"):
        capture_specs(tmp_path, widen=False)
    (tmp_path / "overrides.json").write_text(
        json.dumps({"app_kernels.row_sum": {"args": {"x_ptr": {"randint": [0, 5]}}}})
    )
    spec = capture_spec(tmp_path, "app_kernels.row_sum", widen=False)
    inputs = spec.build_inputs(spec.problems()[0], "cpu")
    assert inputs["x_ptr"].dtype.is_floating_point is False and int(inputs["x_ptr"].max()) < 5


def test_registry_reference_resolves_to_the_same_spec(captured: Path) -> None:
    from search_spaces.registry import get_spec

    ref = ref_for(captured, "app_kernels.scaled_add", True)
    spec = get_spec(ref)
    assert isinstance(spec, CaptureSpec) and spec.widen and spec.name == "app_kernels.scaled_add"
    assert spec.version_hash() == capture_spec(captured, spec.name, True).version_hash()
    with pytest.raises(CaptureError, match="no kernel"):
        capture_spec(captured, "nothing", False)


def test_kernel_of_a_script_updating_in_place(tmp_path: Path) -> None:
    import torch

    boot = ROOT / "search_spaces" / "_capture_boot"
    env = {
        **os.environ,
        "TRITON_INTERPRET": "1",
        "PYTHONPATH": f"{boot}:{ROOT}",
        "TUNEFLEET_CAPTURE": str(tmp_path),
    }
    done = subprocess.run(
        [sys.executable, "inplace_app.py"],
        cwd=APP,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    spec = capture_spec(tmp_path, "inplace_app.axpy_inplace", widen=False)
    assert spec.kernel.module == "__main__" and spec.kernel.restore_value == ["y_ptr"]
    inputs = spec.build_inputs(spec.problems()[0], "cpu")
    assert inputs["out"] is inputs["y_ptr"]
    for config in spec.space.enumerate(H200):
        for _ in range(2):  # the update starts from the same values each launch
            inputs["out"].fill_(float("nan"))
            spec.make_launcher(inputs, config)()
            assert torch.allclose(inputs["out"], spec.reference(inputs))


def test_widened_tiles_never_exceed_the_lists_largest_in_any_product() -> None:
    listed = [
        {"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, "num_warps": w}
        for m, n, k, w in ((128, 256, 64, 8), (64, 256, 32, 4), (64, 32, 32, 2))
    ]
    rule = _tile_rule(("BLOCK_M", "BLOCK_N", "BLOCK_K"), listed)
    assert all(rule.check(c, H200) for c in listed)

    def tile(m: int, n: int, k: int, w: int) -> dict[str, int]:
        return {"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, "num_warps": w}

    # The tile that compiled for over 120 s on the H200: a 64x512 accumulator on one warp (its
    # whole volume, 64x512x16 at one warp, was within the list's).
    assert not rule.check(tile(64, 512, 16, 1), H200)
    assert not rule.check(tile(128, 128, 16, 1), H200)  # 128x128 on one warp: 4x the list's
    assert not rule.check(tile(256, 256, 64, 16), H200)  # more in all than the list's largest
    assert rule.check(tile(64, 128, 16, 2), H200) and rule.check(
        tile(16, 16, 128, 4), H200
    )  # K alone grows


def test_a_widened_study_asks_the_kernels_own_list_first(captured: Path) -> None:
    from orchestrator.run.warm_start import warm_order
    from search_spaces.space import config_key

    wide = capture_spec(captured, "app_kernels.row_sum", widen=True)
    listed = capture_spec(captured, "app_kernels.row_sum", widen=False)
    asked = wide.listed_configs(H200)
    assert [config_key(c) for c in asked] == [config_key(c) for c in listed.space.enumerate(H200)]
    assert listed.listed_configs(H200) == []  # not widened: the grid search asks the list
    default = wide.default_for(H200)
    order = warm_order({"n": 1}, default, [], lambda _p: [], listed=asked)
    assert order[0] == default and len(order) == len(asked)  # the default is the list's first
