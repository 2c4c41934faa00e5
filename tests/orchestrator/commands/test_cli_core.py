"""The core commands (kernels, space, devices, trial, db upgrade): output shapes, and every bad input
gives one `error:` line, exit code 2 and writes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.commands.cli import main

TINY = "M=32,N=32,K=32,dtype=float16"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as done:
        main(list(args))
    out, err = capsys.readouterr()
    code = done.value.code
    return (code if isinstance(code, int) else 0), out, err


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["space", "nokernel"], "unknown kernel 'nokernel'"),
        (["trial", "nokernel", "-p", TINY], "unknown kernel"),
        (["trial", "matmul", "-p", "M=32,N=32,dtype=float16"], "problem lacks 'K'"),
        (["trial", "matmul", "-p", "M=0,N=32,K=32,dtype=float16"], "M=0 must be a positive"),
        (["trial", "matmul", "-p", "M=-4,N=32,K=32,dtype=float16"], "M=-4 must be a positive"),
        (["trial", "matmul", "-p", "M=3.5,N=32,K=32,dtype=float16"], "M=3.5 must be a positive"),
        (["trial", "matmul", "-p", "M=32,N=32,K=32,dtype=int7"], "dtype=int7 is not supported"),
        (["trial", "matmul", "-p", TINY, "-c", "BLOCK_Q=16"], "unknown parameter 'BLOCK_Q'"),
        (["trial", "matmul", "-p", TINY, "-c", "BLOCK_M=48"], "BLOCK_M=48 is not allowed"),
        (["trial", "matmul", "-p", TINY, "-c", "BLOCK_M=256,BLOCK_N=16"], "tile-aspect"),
        (["trial", "matmul", "-p", TINY, "-c", "waves_per_eu=2"], "does not exist on cpu"),
        (
            ["trial", "matmul", "-p", TINY, "--device", "tpu"],
            "unknown device 'tpu'; use auto, cuda",
        ),
        (["space", "nosuchmodule:SPEC"], "cannot import 'nosuchmodule'"),
        (["space", "json:dumps"], "not a tunefleet KernelSpec"),
        (["space", "matmul", "--device-class", "Z80"], "Z80"),
        (["db", "upgrade", "--db", "nonsense"], "nonsense"),
        (["db", "upgrade", "--db", "mysql://x"], "mysql"),
        (
            ["db", "upgrade", "--db", "postgresql+psycopg://postgres@127.0.0.1:5999/test"],
            "cannot reach PostgreSQL at 127.0.0.1:5999",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], args: list[str], says: str
) -> None:
    code, out, err = run(capsys, *args)
    assert code == 2, (args, out, err)
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert says in err, err


def test_bad_database_url_writes_no_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    missing_dir = tmp_path / "no" / "such" / "dir" / "x.db"
    code, _, err = run(capsys, "db", "upgrade", "--db", f"sqlite:///{missing_dir}")
    assert code == 2, err
    assert not missing_dir.exists()


def test_db_upgrade_creates_a_fresh_database(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "fresh.db"
    code, out, _ = run(capsys, "db", "upgrade", "--db", f"sqlite:///{path}")
    assert code == 0 and path.exists() and "newest schema" in out


def test_space_json_has_counts_and_default(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "space", "matmul", "--device-class", "H200", "--json")
    data = json.loads(out)
    assert code == 0
    assert {"parameters", "default", "total", "valid"} <= set(data)
    assert data["valid"] >= 400 and data["total"] > data["valid"]
    assert "waves_per_eu" not in data["parameters"]
    code, out, _ = run(capsys, "space", "matmul", "--device-class", "MI300X", "--json")
    assert "waves_per_eu" in json.loads(out)["parameters"]


def test_kernels_lists_every_builtin_with_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "kernels", "--json")
    names = {k["name"]: k for k in json.loads(out)["kernels"]}
    assert code == 0
    assert {"matmul", "rmsnorm", "flash_attention", "paged_attention", "fused_moe"} <= set(names)
    assert all(k["example"] for k in names.values())


def test_devices_shows_the_interpreter_here(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "devices", "--json")
    devices = json.loads(out)["devices"]
    assert code == 0 and devices[0]["device_class"] in ("cpu", devices[0]["name"])


def test_trial_runs_in_the_interpreter(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        capsys, "trial", "matmul", "-p", TINY, "-c", "BLOCK_M=32,BLOCK_N=16,num_warps=2", "--json"
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["outcome"] == "ok" and data["median_ms"] > 0 and data["max_rel_error"] < 1e-2
    assert data["config"]["BLOCK_N"] == 16 and data["config"]["BLOCK_K"] == 32


def test_record_times_a_given_config_list(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from workers.landscape import read_landscape

    listed = tmp_path / "configs.txt"
    listed.write_text(
        "# two tiles\nBLOCK_M=32,BLOCK_N=16,num_warps=2\n\nBLOCK_M=16,BLOCK_N=32,num_warps=2\n"
    )
    out = tmp_path / "land.json"
    code, _, err = run(
        capsys, "record", "matmul", "-p", TINY, "--configs", str(listed), "--out", str(out)
    )
    assert code == 0, err
    landscape = read_landscape(out)
    assert [(r.config["BLOCK_M"], r.config["BLOCK_N"]) for r in landscape.results] == [
        (32, 16),
        (16, 32),
    ]
    assert all(r.outcome.value == "ok" and r.time_ms for r in landscape.results)


def test_record_rejects_a_bad_config_line_and_writes_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    listed = tmp_path / "configs.txt"
    listed.write_text("BLOCK_M=32,BLOCK_N=16,num_warps=2\nBLOCK_M=48\n")
    out = tmp_path / "land.json"
    code, _, err = run(
        capsys, "record", "matmul", "-p", TINY, "--configs", str(listed), "--out", str(out)
    )
    assert code == 2
    assert err.startswith("error: ") and "configs.txt:2" in err and "BLOCK_M=48" in err, err
    assert not out.exists()
