"""benchmarks/through_pull.py end to end on the interpreter: the smoke matmul grid tuned (2 trials
a key), pulled, decided, checked against the reference and timed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.benchmark_script import load

through_pull = load("through_pull")


def test_the_smoke_grid_is_tuned_pulled_decided_checked_and_timed(tmp_path: Path) -> None:
    argv = ["--kernel", "matmul", "--grid", "smoke", "--out", str(tmp_path), "--trials", "2",
            "--rounds", "1", "--interpreter"]  # fmt: skip
    assert through_pull.main(argv) == 0
    result = json.loads((tmp_path / "through_pull.json").read_text())
    rows, summary = result["rows"], result["summary"]
    grid = through_pull.MATMUL_GRIDS["smoke"]
    assert [r["problem"] for r in rows] == grid
    assert json.loads((tmp_path / "job.json").read_text())["problems"] == grid
    for row in rows:
        assert row["decision"]["how"] == "exact"  # every problem was a key of the tuned job
        # The decision, the Triton config and cuBLAS's stand-in all ran, checked and timed.
        checked = {"decision", "torch.matmul"} | (
            {"triton"} if row["decision"]["vendor"] else set()
        )
        assert set(row["max_rel_error"]) == checked == set(row["ms"])
        assert all(err <= row["tolerance"] for err in row["max_rel_error"].values())
        assert row["triton_ms"] > 0 and row["vendor_over_decision"] > 0
    assert summary["problems"] == len(grid) and summary["all_checked_within_tolerance"]
    assert summary["timing"] == "device"  # as the studies time, host launch cost hidden
    assert summary["compared_vendor_over_triton"] == len(grid)
    assert sum(summary["decisions"].values()) == len(grid)
    # one vendor path here: its own ratios are the overall ones
    alone = summary["per_vendor"]["torch.matmul"]
    assert alone["problems"] == len(grid)
    assert alone["geomean_over_decision"] == pytest.approx(summary["geomean_vendor_over_decision"])


def test_a_stored_run_is_summarized_again_from_its_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stored = (
        Path(__file__).resolve().parents[1]
        / "benchmarks/results/fp8/2026-12-07-55df01f-h100-through-pull/fp8_through_pull.json"
    )
    assert through_pull.main(["--summarize", str(stored)]) == 0
    summary = json.loads(capsys.readouterr().out)
    scaled_mm = summary["per_vendor"]["torch._scaled_mm"]
    assert scaled_mm["problems"] == 30  # cuBLASLt refused the five M=1 problems
    assert summary["problems"] == 35
    assert scaled_mm["geomean_over_decision"] < summary["geomean_vendor_over_decision"]
    # 21 vendor decisions: torch._scaled_mm timed twice in the same rounds, the run's noise
    assert summary["aa"]["problems"] == 21
    assert summary["aa"]["min"] < 1 < summary["aa"]["max"]
    (tmp_path / "bad.json").write_text("{}")
    for argv in (["--summarize", str(tmp_path / "bad.json")], ["--summarize"]):
        assert through_pull.main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1


def test_the_issue_grid_has_every_m_of_every_linear() -> None:
    grid = through_pull.MATMUL_GRIDS["issue46"]
    shapes = {(p["N"], p["K"]) for p in grid}
    assert len(grid) == len(shapes) * len(through_pull.MATMUL_M) == 140
    assert (256, 8192) in shapes and (8, 4096) in shapes  # 70B's TP8 kv, Mixtral's router
    assert through_pull.group("matmul", {"M": 200}) == "M<=1024"
    assert through_pull.group("matmul", {"M": 2500}) == "M>1024"


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--kernel", "matmul", "--grid", "nope", "--out", "x"], "no grid 'nope' for matmul"),
        (["--kernel", "conv", "--grid", "smoke", "--out", "x"], "invalid choice: 'conv'"),
        (["--kernel", "matmul", "--grid", "smoke", "--out", "x", "--trials", "0"], "at least 1"),
        (["--kernel", "matmul", "--grid", "smoke", "--out", "x", "--shard", "3/2"], "K/N"),
        (
            ["--kernel", "matmul", "--grid", "smoke", "--out", "x", "--timing", "wall"],
            "invalid choice: 'wall'",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert through_pull.main(argv) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1


def test_without_a_gpu_it_asks_for_the_interpreter(capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    assert through_pull.main(["--kernel", "matmul", "--grid", "smoke", "--out", "x"]) == 2
    assert capsys.readouterr().err == "error: no GPU here; pass --interpreter to run on the CPU\n"


def test_fp8_vllm_files_are_pulled_and_read_back_as_vllm_reads_them(tmp_path: Path) -> None:
    from tests.orchestrator.export.test_pull_vllm import seeded_fp8

    url = seeded_fp8(tmp_path / "db")
    found = through_pull.vllm_files("fp8_matmul", tmp_path, url)
    assert found is not None
    device = "device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8,block_shape=[128,128].json"
    assert found["files"] == {
        f"N=3072,K=1536,{device}": [1, 4096],
        f"N=7168,K=2048,{device}": [16, 1024],  # M=1 (split-K) and M=64 (TMA) have no fallback
    }
    assert any("left out M=1 (SPLIT_K=4)" in note for note in found["notes"])
    refused = through_pull.vllm_files(
        "fp8_matmul", tmp_path / "cpu", seeded_fp8(tmp_path / "cpu", name="cpu", vendor="cpu")
    )
    assert refused is not None and "Triton interpreter timings" in refused["refused"]
    assert through_pull.vllm_files("matmul", tmp_path, url) is None
