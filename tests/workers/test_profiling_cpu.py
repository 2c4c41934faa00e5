"""The tiny decoder profiled on the CPU end to end (the profiler's CPU trace: no GPU kernels), the
emitted jobs accepted by `tune` on the interpreter, and tuned kernels swapped in on the interpreter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.jobs import load_job_file


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    captured = capsys.readouterr()
    return int(exit_info.value.code or 0), captured.out, captured.err


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    from workers.profiling.run import ProfileOptions, profile
    from workers.profiling.trace import Mode, Phase

    out = tmp_path_factory.mktemp("profile")
    report = profile(
        ProfileOptions(
            model="tiny",
            batches=(1, 2),
            seq=16,
            phases=(Phase.PREFILL, Phase.DECODE),
            modes=(Mode.EAGER, Mode.GRAPH),
            out=out,
            device="cpu",
            runs=10,
            steps=2,
            emit_job=out / "job.yaml",
            emit_problems=1,
            emit_trials=2,
        )
    )
    return out, report


def test_a_cpu_profile_says_it_has_no_gpu_kernels(profiled: tuple[Path, dict]) -> None:
    out, report = profiled
    assert [(r["phase"], r["batch"], r["mode"]) for r in report["rows"]] == [
        ("prefill", 1, "eager"), ("prefill", 2, "eager"), ("decode", 1, "eager"), ("decode", 2, "eager")
    ]  # fmt: skip
    assert any("graph mode needs a CUDA device" in n for n in report["notes"])
    for row in report["rows"]:
        assert row["stats"]["kernels"] == 0 and row["tklqt_ms"] is None
        assert "no GPU kernels" in row["stats"]["note"]
        assert row["latency_ms"] > 0 and (out / row["trace"]).is_file()
    assert report["transitions"]["prefill"]["batch"] is None
    assert [Path(p).name for p in report["plots"]] == ["tklqt.png", "latency.png", "idle.png"]
    assert json.loads((out / "report.json").read_text())["model"] == "tiny"


def test_the_emitted_jobs_validate_and_cover_gemm_attention_and_norm(
    profiled: tuple[Path, dict],
) -> None:
    _, report = profiled
    files = [Path(p) for p in report["emitted_jobs"]]
    specs = {load_job_file(f).kernel: load_job_file(f) for f in files}
    assert set(specs) == {"matmul", "rmsnorm", "flash_attention", "paged_attention"}
    # tiny: hidden 256, 4 heads of 64, 2 KV heads, MLP 512; prefill M = batch * 16 tokens.
    assert {(p["N"], p["K"]) for p in specs["matmul"].problems} <= {
        (256, 256), (128, 256), (512, 256), (256, 512), (512, 256)
    }  # fmt: skip
    flash = specs["flash_attention"].problems[0]
    assert (flash["q_heads"], flash["kv_heads"], flash["head_dim"], flash["causal"]) == (
        4,
        2,
        64,
        True,
    )
    assert specs["paged_attention"].problems[0]["context_len"] == 17
    assert all(s.objective.value == "kernel" and s.trials == 2 for s in specs.values())
    assert all(len(s.problems) == 1 for s in specs.values())  # --emit-problems caps each job


def test_tune_accepts_an_emitted_job_on_the_interpreter(
    profiled: tuple[Path, dict], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, report = profiled
    rmsnorm = next(p for p in report["emitted_jobs"] if ".rmsnorm." in p)
    db = f"sqlite:///{tmp_path / 'db.sqlite'}"
    code, out, err = run_cli(
        ["tune", rmsnorm, "--device", "interpreter", "--db", db, "--trials", "2", "--json"], capsys
    )
    assert code == 0, err
    summary = json.loads(out)
    assert summary["status"] == "done" and summary["kernel"] == "rmsnorm"
    assert all(s["best"] is not None for s in summary["studies"])


def test_tune_jobs_runs_an_emitted_job_without_ray(
    profiled: tuple[Path, dict], tmp_path: Path
) -> None:
    """benchmarks/profile/tune_jobs.py, as on the GPU image (no Ray), stores what `pull` reads."""
    import subprocess
    import sys

    _, report = profiled
    rmsnorm = next(p for p in report["emitted_jobs"] if ".rmsnorm." in p)
    db = f"sqlite:///{tmp_path / 'db.sqlite'}"
    root = Path(__file__).resolve().parents[2]
    script = root / "benchmarks" / "profile" / "tune_jobs.py"
    code = (
        "import sys, runpy; sys.modules['ray'] = None; "  # `import ray` fails, as there
        f"sys.argv = [{str(script)!r}, {rmsnorm!r}, '--device', 'interpreter', '--db', {db!r}, "
        "'--trials', '2', '--json']; runpy.run_path(sys.argv[0], run_name='__main__')"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.splitlines()[-1])
    assert summary["status"] == "done" and summary["kernel"] == "rmsnorm"
    assert all(s["best"] is not None for s in summary["studies"])


def test_bad_profile_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for args, message in (
        (["profile", "tiny", "--batch", "0"], "--batch"),
        (["profile", "tiny", "--phase", "train"], "--phase"),
        (["profile", "tiny", "--runs", "3"], "at least 10"),
        (["profile", "no-such-model", "--device", "cpu", "--out", str(tmp_path)], "unknown model"),
        (
            ["profile", "nosuchmodule:build", "--device", "cpu", "--out", str(tmp_path)],
            "cannot load",
        ),
    ):
        code, _, err = run_cli(args, capsys)
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_tuned_kernels_swapped_in_compute_the_same_model() -> None:
    import torch

    from search_spaces.bundle import bundle_from_dict
    from search_spaces.registry import get_spec
    from search_spaces.space import Vendor
    from workers.profiling.models import load_workload
    from workers.profiling.swap import install
    from workers.profiling.trace import Phase

    bundles = {
        name: bundle_from_dict(
            {
                "format": "tunefleet-bundle/1",
                "kernel": name,
                "default": get_spec(name).default_config(Vendor.CPU),
                "entries": [],
            }
        )
        for name in ("matmul", "rmsnorm", "flash_attention", "paged_attention")
    }
    workload = load_workload("tiny", "cpu")
    swap = install(workload.model, bundles)
    for phase in Phase:
        forward = workload.forward_for(phase, 1, 16)
        base = forward().double()
        swap.on = True
        tuned = forward().double()
        swap.on = False
        err = float((tuned - base).abs().max() / base.abs().max())
        assert err < 5e-2, (phase, err)
        assert torch.equal(forward().double(), base)
    assert set(swap.used) == {"matmul", "rmsnorm", "flash_attention", "paged_attention"}
    # One lookup per distinct problem: each linear layer's (N, K), at M = 16 (prefill of one
    # sequence of 16) and M = 1 (decode of one).
    dims = {
        (m.out_features, m.in_features)
        for m in workload.model.modules()
        if isinstance(m, torch.nn.Linear)
    }
    assert swap.used["matmul"] == {"default": 2 * len(dims)}
    keys = {(rows, n, k, "bfloat16") for rows in (1, 16) for n, k in dims}
    assert set(swap.tables["matmul"]) == keys


def test_with_bundle_reports_the_end_to_end_change(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from search_spaces.registry import get_spec
    from search_spaces.space import Vendor

    folder = tmp_path / "bundle"
    folder.mkdir()
    # Wide matmul tiles (a tuned bundle's kind for 8 rows): the interpreter runs a quarter of the
    # default's programs, each a quarter of its K steps (0.5 s a tuned forward instead of 2 s).
    wide = {"BLOCK_M": 16, "BLOCK_N": 256, "BLOCK_K": 128, "GROUP_M": 1}
    for name, config in (("matmul", wide), ("rmsnorm", {})):
        (folder / f"{name}-cpu.json").write_text(
            json.dumps(
                {
                    "format": "tunefleet-bundle/1",
                    "kernel": name,
                    "device_class": "cpu",
                    "default": {**get_spec(name).default_config(Vendor.CPU), **config},
                    "entries": [],
                }
            )
        )
    args = ["profile", "tiny", "--batch", "1", "--seq", "8", "--device", "cpu", "--runs", "10"]
    args += ["--trace-forwards", "0", "--out", str(tmp_path / "out"), "--with-bundle", str(folder)]
    code, out, err = run_cli([*args, "--json"], capsys)
    assert code == 0, err
    tuned = json.loads(out)["with_bundle"]
    (row,) = tuned["rows"]
    assert (row["phase"], row["batch"], row["mode"]) == ("prefill", 1, "eager")
    assert row["tuned_ms"] > 0 and row["max_rel_error"] < 5e-2
    assert row["change"] == pytest.approx(row["tuned_ms"] / row["baseline_ms"] - 1)
    assert set(tuned["lookups"]) == {"matmul", "rmsnorm"}
