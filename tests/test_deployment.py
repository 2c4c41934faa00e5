"""benchmarks/deployment/: the jobs it tunes per phase, its tables (long sequences, nearest-entry
notes) and the per-kernel bundle it combines from both objectives, on a recorded H100 run's
reports and bundles."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.benchmark_script import BENCHMARKS, load

table = load("deployment/table")
pull = load("deployment/pull")
tune_jobs = load("profile/tune_jobs")
moe_ceiling = load("deployment/moe_ceiling")
RUN = BENCHMARKS / "results" / "deployment" / "2026-12-06-056eadc-h100"


def test_every_phase_tunes_the_hottest_job_of_each_kernel(
    capsys: pytest.CaptureFixture[str],
) -> None:
    jobs = table.hottest_jobs(RUN / "qwen3-30b-a3b", 2)
    names = [Path(p).name for p, _ in jobs]
    # Interleaved: each phase's hottest, then each phase's second; decode has its own fused_moe.
    assert names == [
        "prefill.fused_moe.kernel.yaml",
        "decode.fused_moe.graph.yaml",
        "prefill.matmul.kernel.yaml",
        "decode.matmul.graph.yaml",
    ]
    every = table.hottest_jobs(RUN / "qwen3-30b-a3b", 10)
    assert len(every) == 8 and sum(".fused_moe." in p for p, _ in every) == 2
    # Each job's weight is its problems' share of its phase's profiled time, hottest first.
    shares = [share for _, share in jobs]
    assert all(0 < w <= 1 for w in shares) and shares[0] > shares[2] and shares[1] > shares[3]
    assert table.main(["--weights", str(RUN / "qwen3-30b-a3b"), "2"]) == 0
    printed = [float(w) for w in capsys.readouterr().out.strip().split(",")]
    assert printed == pytest.approx(shares, rel=1e-5)


def test_the_tune_budget_goes_to_each_job_by_its_weight() -> None:
    assert tune_jobs.budget_part(100.0, [3.0, 1.0], 0) == 75.0
    assert tune_jobs.budget_part(20.0, [3.0, 1.0], 1) == 20.0  # the last job takes what is left
    assert tune_jobs.budget_part(60.0, [1.0, 1.0, 1.0], 0) == 20.0
    assert tune_jobs.budget_part(50.0, [1.0, 0.0], 1) == 0.0  # weight 0: its vendor paths alone
    for bad in ("1,x", "1", "1,-1", "1,nan"):
        with pytest.raises(ValueError, match="--weights"):
            tune_jobs._weights(bad, 2)


def test_each_long_sequence_is_a_phase_of_its_own(tmp_path: Path) -> None:
    model = tmp_path / "llama-3.2-1b"
    shutil.copytree(RUN / "llama-3.2-1b", model)
    for seq in (16384, 8192):
        for suffix in ("", "-tuned"):
            shutil.copytree(model / f"prefill-long{suffix}", model / f"prefill-long-{seq}{suffix}")
    assert table.phases(model) == [
        "prefill", "decode", "prefill-long", "prefill-long-8192", "prefill-long-16384"
    ]  # fmt: skip
    lines = table.model_table(model)
    assert sum(line.startswith("| prefill-long-8192 | 4096 |") for line in lines) == 2
    assert any(line.startswith("| prefill-long-16384: swapped") for line in lines)
    jobs = table.hottest_jobs(model, 1)
    assert len(jobs) == 5  # one per phase


def test_the_table_names_the_kernels_decided_by_a_nearest_entry() -> None:
    lines = table.model_table(RUN / "qwen3-30b-a3b")
    (note,) = [line for line in lines if "nearest" in line]
    # decode b64 graph: bound -0.6% over 1% measured; its fused_moe problems had no entry of their own.
    assert "decode fused_moe 4 of 4, matmul 8 of 10, paged_attention 2 of 2" in note
    assert "prefill flash_attention 1 of 2, fused_moe 2 of 4" in note
    assert "rmsnorm 2" not in note  # decode's rmsnorm problems were exact


def test_the_table_counts_the_tokens_the_twin_would_have_routed_otherwise(tmp_path: Path) -> None:
    model = tmp_path / "qwen3-30b-a3b"
    shutil.copytree(RUN / "qwen3-30b-a3b", model)
    report = model / "prefill-tuned" / "report.json"
    data = json.loads(report.read_text())
    for row in data["with_bundle"]["rows"]:  # both modes of a point share its check
        row["baseline_rerouted"], row["swapped_rerouted"] = (3, 5) if row["batch"] == 16 else (0, 0)
    report.write_text(json.dumps(data))
    (note,) = [line for line in table.model_table(model) if "routed otherwise" in line]
    assert note.endswith("baseline / swapped: prefill b16 3 / 5")


def test_the_table_gives_the_speed_up_and_the_share_of_the_bound_reached() -> None:
    lines = table.model_table(RUN.parent / "2026-12-06-a5d4b76-h100" / "qwen" / "qwen3-30b-a3b")
    # prefill b16 eager: 16.190 -> 12.832 ms (-20.7%) against a bound of -30.5%.
    (row,) = [line for line in lines if line.startswith("| prefill | 512 | 16 | eager |")]
    cells = [c.strip() for c in row.split("|")[1:-1]]
    # A/A and ceiling "-": the recorded reports are from before the baseline was timed twice and
    # before the ceiling
    assert cells[6:12] == ["-20.7%", "-", "1.262x", "-30.5% (100%)", "-", "68%"]
    # decode b1 eager kept the vendor path: no change, no bound, nothing reached.
    (row,) = [line for line in lines if line.startswith("| decode | 512 | 1 | eager |")]
    cells = [c.strip() for c in row.split("|")[1:-1]]
    assert cells[6:12] == ["+0.0%", "-", "1.000x", "- (-)", "-", "-"]


def test_bad_table_input_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--jobs", str(RUN / "nothing"), "2"], ["--jobs", str(RUN), "x"], []):
        assert table.main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: usage") and len(err.strip().splitlines()) == 1


def test_the_pull_combines_both_objectives_into_one_bundle_per_kernel(tmp_path: Path) -> None:
    from search_spaces.bundle import load_bundle

    name = "matmul-NVIDIA_H100_80GB_HBM3-triton3.6"
    for objective, suffix in (("kernel", ""), ("graph", "-graph")):
        (tmp_path / objective).mkdir()
        shutil.copy(RUN / "bundle" / f"{name}{suffix}.json", tmp_path / objective)
    shutil.copy(RUN / "bundle" / "graph" / "rmsnorm-NVIDIA_H100_80GB_HBM3-triton3.6-graph.json",
                tmp_path / "graph")  # fmt: skip
    files = dict(pull.combined(tmp_path))
    assert sorted(files) == [f"{name}.json", "rmsnorm-NVIDIA_H100_80GB_HBM3-triton3.6.json"]
    (tmp_path / f"{name}.json").write_text(files[f"{name}.json"])
    bundle = load_bundle(tmp_path / f"{name}.json")  # the digest checks out
    assert sorted(e.problem["M"] for e in bundle.entries) == [1, 64, 8192, 8192]
    assert json.loads(files[f"{name}.json"])["objective"] == "kernel"


def test_the_table_notes_a_study_vendor_time_far_from_the_models_op() -> None:
    row = {
        "batch": 64,
        "vendor_vs_model": [
            {"kernel": "paged_attention", "problem": {"batch": 64, "context_len": 513},
             "vendor": "sdpa_gathered", "study_ms": 0.163, "model_ms": 0.029, "differs": True},
            {"kernel": "rmsnorm", "problem": {"M": 64}, "vendor": None, "study_ms": 0.0046,
             "model_ms": 0.004, "differs": False},
        ],
    }  # fmt: skip
    assert table._versus("decode", row) == [
        "decode b64 paged_attention batch=64,context_len=513: sdpa_gathered 0.163 ms in its "
        "study, the model's op 0.029 ms (0.18x)"
    ]
    assert table._versus("decode", {"batch": 1}) == []  # reports from before the comparison


def test_the_moe_ceiling_recomputes_the_recorded_bound_and_claims_more() -> None:
    from search_spaces.bundle import load_bundle

    res = BENCHMARKS / "results" / "deployment" / "2026-12-07-05364a5-h100-qwen-llama16384"
    res = res / "qwen3-30b-a3b-4"
    recorded = {
        (r["phase"], r["batch"], r["mode"]): r["amdahl"]["change"]
        for path in sorted((res / "qwen3-30b-a3b").glob("*-tuned/report.json"))
        for r in json.loads(path.read_text())["with_bundle"]["rows"]
        if r["amdahl"] and r["amdahl"]["change"] is not None
    }
    rows = moe_ceiling.rows(res, "qwen3-30b-a3b")
    assert {(r["phase"], r["batch"], r["mode"]) for r in rows} == set(recorded)
    for r in rows:  # the MoE GEMMs are all these rows swapped: the same bound, and a ceiling
        assert r["bound"] == pytest.approx(recorded[(r["phase"], r["batch"], r["mode"])], abs=1e-3)
        assert r["ceiling"] is not None and r["ceiling"] < r["bound"] < 0
    for full, part in zip(rows, moe_ceiling.rows(res, "qwen3-30b-a3b", 0.95), strict=True):
        assert full["ceiling"] < part["ceiling"]  # 95% of the peaks allows less gain
    # The layer bound: each block's share times (V_up + V_down) / (T_up + T_down).
    (bundle_path,) = (res / "bundle").glob("fused_moe-*.json")
    entries = {tuple(sorted(e.problem.items())): e for e in load_bundle(bundle_path).entries}
    for path in sorted((res / "qwen3-30b-a3b").glob("*-tuned/report.json")):
        report = json.loads(path.read_text())
        for r in report["with_bundle"]["rows"]:
            halves = [v for v in r["vendor_vs_model"] if v["kernel"] == "fused_moe"]
            if len(halves) != 2:
                continue
            block_us = sum(v["model_ms"] for v in halves) * 1e3 * report["layers"]
            found = [entries[tuple(sorted(v["problem"].items()))] for v in halves]
            speedup = sum(e.vendor_ms for e in found) / sum(e.triton_ms for e in found)
            (row,) = (x for x in rows if (x["phase"], x["batch"], x["mode"]) == (
                r["phase"], r["batch"], r["mode"]))  # fmt: skip
            want = -block_us * (1 - 1 / speedup) / (r["baseline_ms"] * 1e3)
            assert row["layer_bound"] == pytest.approx(want, rel=1e-9)


def test_bad_moe_ceiling_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv in (
        [],
        [str(tmp_path), "qwen3-30b-a3b"],
        [str(RUN), "no-such-model"],
        [str(RUN), "qwen3-30b-a3b", "1.5"],
    ):
        assert moe_ceiling.main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and len(err.strip().splitlines()) == 1


def test_no_share_of_a_bound_inside_the_rows_own_noise() -> None:
    assert table._of_bound(-0.018, -0.0001, -0.010) is None  # a 0.01% bound under a 1% A/A
    assert table._of_bound(-0.018, -0.0001) == pytest.approx(180.0)  # no A/A: as before
    assert table._of_bound(-0.18, -0.18, 0.007) == pytest.approx(1.0)
    assert table._of_bound(0.01, -0.18, 0.007) is None  # the swap lost
