"""The tiny decoders (dense and MoE) profiled on the CPU end to end (the profiler's CPU trace: no GPU
kernels), the emitted jobs accepted by `tune` on the interpreter, and tuned kernels swapped in on the interpreter."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.commands.cli import main
from orchestrator.run.jobs import load_job_file


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


def test_tune_jobs_past_its_budget_measures_the_vendor_paths_alone(
    profiled: tuple[Path, dict], tmp_path: Path
) -> None:
    """A job the budget has no time for runs no trial, yet each of its keys is decided for the
    vendor path (torch's rms_norm) measured past the budget."""
    import subprocess
    import sys

    _, report = profiled
    rmsnorm = next(p for p in report["emitted_jobs"] if ".rmsnorm." in p)
    root = Path(__file__).resolve().parents[2]
    script = str(root / "benchmarks" / "profile" / "tune_jobs.py")
    db = f"sqlite:///{tmp_path / 'db.sqlite'}"
    spent = subprocess.run(
        [sys.executable, script, rmsnorm, "--db", db, "--budget-s", "0.001", "--device",
         "interpreter", "--json"],
        cwd=root, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert spent.returncode == 0, spent.stderr
    assert "the budget is spent, vendor paths only" in spent.stderr
    assert "time budget spent" in spent.stderr  # the driver's notes reach stderr under --json
    summary = json.loads(spent.stdout.splitlines()[-1])
    assert summary["status"] == "done" and summary["studies"]
    for study in summary["studies"]:
        assert study["measured"] == 0 and study["backend"] == "vendor", study
    bad = subprocess.run(
        [sys.executable, script, rmsnorm, "--budget-s", "0"],
        cwd=root, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr


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
        (["profile", "tiny", "--layers", "0"], "--layers"),
        (["profile", "tiny", "--device", "cpu", "--layers", "3", "--out", str(tmp_path)], "1 to 2"),
        (["profile", "tiny", "--max-error-ratio", "0.5"], "--max-error-ratio"),
    ):
        code, _, err = run_cli(args, capsys)
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def _bundle(kernel: str, entries: list[dict]) -> Any:
    from search_spaces.bundle import bundle_from_dict
    from search_spaces.registry import get_spec
    from search_spaces.space import Vendor

    default = get_spec(kernel).default_config(Vendor.CPU)
    return bundle_from_dict(
        {
            "format": "tunefleet-bundle/1",
            "kernel": kernel,
            "default": default,
            "entries": [{"config": default, **e} for e in entries],
        }
    )


def _vendor(problem: dict) -> dict:
    return {"problem": problem, "backend": "vendor", "vendor": "torch"}


def test_swaps_follow_the_decisions_and_compute_the_same_model() -> None:
    """tiny in float16 (the interpreter rounds float32 to bfloat16 by truncation, so bfloat16
    Triton kernels carry about twice torch's rounding error on the CPU; float16 rounds as GPUs
    do). The matmul bundle keeps torch's op for the MLP's gate/up GEMMs of a 16-token prefill
    (vendor) and decides Triton for the square ones."""
    import torch

    from workers.profiling.check import max_rel_error, refusal
    from workers.profiling.models import load_workload
    from workers.profiling.swap import KEPT, install
    from workers.profiling.trace import Phase

    gate_up = {"M": 16, "N": 512, "K": 256, "dtype": "float16"}
    bundles = {
        "matmul": _bundle(
            "matmul",
            [_vendor(gate_up), {"problem": {**gate_up, "N": 256}, "backend": "triton"}],
        ),
        **{k: _bundle(k, []) for k in ("rmsnorm", "flash_attention", "paged_attention")},
    }
    workload = load_workload("tiny", "cpu", "float16")
    twin = workload.fp32_twin()
    swap = install(workload.model, bundles)
    for phase in Phase:
        forward = workload.forward_for(phase, 1, 16)
        ref = workload.reference_for(twin, phase, 1, 16)()
        base = forward()
        swap.on = True
        tuned = forward()
        swap.on = False
        base_err, tuned_err = max_rel_error(base, ref), max_rel_error(tuned, ref)
        assert refusal(base_err, tuned_err) is None, (phase, base_err, tuned_err)
        assert not torch.equal(tuned, base)  # the tuned kernels ran
        assert torch.equal(forward(), base)
    assert not swap.tables["matmul"][(16, 512, 256, "float16")].triton
    assert swap.used["matmul"][KEPT] >= 1 and swap.used["matmul"]["triton"] >= 1
    assert swap.lookups["matmul"]["exact"] == 2  # the two entries; the rest by nearest
    assert {k: v["triton"] for k, v in swap.used.items() if k != "matmul"} == {
        "rmsnorm": 2, "flash_attention": 1, "paged_attention": 1,
    }  # fmt: skip


def _swapped_tiny_moe(bundle: Any) -> Any:
    """The Swap of ``bundle`` (fused_moe) in one layer of tiny-moe in float16, after checking an
    8-token prefill: the swap changes the output and passes the same-function check."""
    import torch

    from workers.profiling.check import max_rel_error, refusal
    from workers.profiling.models import load_workload
    from workers.profiling.swap import install
    from workers.profiling.trace import Phase

    workload = load_workload("tiny-moe", "cpu", "float16", layers=1)
    twin = workload.fp32_twin()
    swap = install(workload.model, {"fused_moe": bundle})
    forward = workload.forward_for(Phase.PREFILL, 1, 8)
    base = forward()
    swap.on = True
    tuned = forward()
    ref = workload.reference_for(twin, Phase.PREFILL, 1, 8)()
    assert not torch.equal(tuned, base)
    assert refusal(max_rel_error(base, ref), max_rel_error(tuned, ref)) is None
    return swap


def test_vendor_decisions_keep_every_op_and_fused_moe_swaps_the_experts() -> None:
    import torch

    from workers.profiling.models import load_workload
    from workers.profiling.swap import KEPT, install
    from workers.profiling.trace import Phase

    experts = {"M": 8, "E": 8, "topk": 2, "dtype": "float16"}
    vendor_everywhere = {
        "matmul": _bundle("matmul", [_vendor({"M": 8, "N": 256, "K": 256, "dtype": "float16"})]),
        "rmsnorm": _bundle("rmsnorm", [_vendor({"M": 8, "N": 256, "dtype": "float16"})]),
        "flash_attention": _bundle("flash_attention", [_vendor({
            "batch": 1, "max_seqlen": 8, "pattern": "uniform", "q_heads": 4, "kv_heads": 2,
            "head_dim": 64, "causal": True, "dtype": "float16",
        })]),
        "fused_moe": _bundle("fused_moe", [
            _vendor({**experts, "N": 256, "K": 256, "gemm": "up"}),
            _vendor({**experts, "N": 256, "K": 128, "gemm": "down"}),
        ]),
    }  # fmt: skip
    workload = load_workload("tiny-moe", "cpu", "float16", layers=1)
    forward = workload.forward_for(Phase.PREFILL, 1, 8)
    base = forward()
    swap = install(workload.model, vendor_everywhere)
    swap.on = True
    assert torch.equal(forward(), base)  # every op kept: the very same computation
    # Both GEMMs of the expert block keep the vendor path: the block runs the model's experts.
    assert all(counts["triton"] == 0 and counts[KEPT] > 0 for counts in swap.used.values())
    assert swap.used["fused_moe"] == {"triton": 0, KEPT: 2}
    assert set(swap.used) == set(vendor_everywhere)

    swap = _swapped_tiny_moe(_bundle("fused_moe", []))
    assert swap.used == {"fused_moe": {"triton": 2, KEPT: 0}}  # both GEMMs of the block
    up = {**experts, "N": 256, "K": 256, "gemm": "up"}
    assert swap.runs_triton("fused_moe", up)
    assert swap.runs_triton("fused_moe", {**up, "K": 128, "gemm": "down"})


@pytest.mark.parametrize("vendor_gemm", ["up", "down"])
def test_an_expert_block_runs_each_gemm_as_its_decision_says(
    vendor_gemm: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One GEMM of the block decided ``vendor``: it runs the model's torch._grouped_mm half (the
    path its study timed), the other fused_moe, and the block computes the same function."""
    from search_spaces.kernels import fused_moe
    from workers.profiling import models
    from workers.profiling import swap as swap_module
    from workers.profiling.swap import KEPT

    experts = {"M": 8, "E": 8, "topk": 2, "dtype": "float16"}
    shapes = {"up": {"N": 256, "K": 256}, "down": {"N": 256, "K": 128}}
    ran: list[str] = []

    def counted(half: str) -> Any:
        real = getattr(models, half)

        def run(*args: Any) -> Any:
            ran.append(half)
            return real(*args)

        return run

    for half in ("grouped_mm_gate_up", "grouped_mm_down"):
        monkeypatch.setattr(swap_module, half, counted(half))
    real_plan = fused_moe.launch_plan
    planned: list[tuple[int, int]] = []

    def counted_plan(config: Any, m: int, e: int, topk: int, n: int, k: int, *a: Any,
                     **kw: Any) -> Any:  # fmt: skip
        planned.append((n, k))
        return real_plan(config, m, e, topk, n, k, *a, **kw)

    monkeypatch.setattr(swap_module, "launch_plan", counted_plan)
    bundle = _bundle(
        "fused_moe", [_vendor({**experts, **shapes[vendor_gemm], "gemm": vendor_gemm})]
    )
    swap = _swapped_tiny_moe(bundle)
    triton_gemm = "down" if vendor_gemm == "up" else "up"
    assert ran == [f"grouped_mm_{'gate_up' if vendor_gemm == 'up' else 'down'}"]
    assert planned == [(shapes[triton_gemm]["N"], shapes[triton_gemm]["K"])]
    assert swap.used == {"fused_moe": {"triton": 1, KEPT: 1}}
    assert swap.kept == set()
    assert not swap.runs_triton(
        "fused_moe", {**experts, **shapes[vendor_gemm], "gemm": vendor_gemm}
    )
    assert swap.runs_triton("fused_moe", {**experts, **shapes[triton_gemm], "gemm": triton_gemm})


def test_a_block_on_the_per_expert_loop_keeps_both_gemms_where_one_is_vendor() -> None:
    """Without a grouped GEMM the model's experts are one loop: a ``vendor`` decision for one GEMM
    keeps the whole block on it, and the other GEMM counts as kept."""
    import torch

    from workers.profiling.models import load_workload, moe_layers
    from workers.profiling.swap import KEPT, install
    from workers.profiling.trace import Phase

    experts = {"M": 8, "E": 8, "topk": 2, "dtype": "float16"}
    workload = load_workload("tiny-moe", "cpu", "float16", layers=1)
    for layer in moe_layers(workload.model):
        layer.grouped = False
    bundle = _bundle("fused_moe", [_vendor({**experts, "N": 256, "K": 128, "gemm": "down"})])
    swap = install(workload.model, {"fused_moe": bundle})
    forward = workload.forward_for(Phase.PREFILL, 1, 8)
    base = forward()
    swap.on = True
    assert torch.equal(forward(), base)
    up = {**experts, "N": 256, "K": 256, "gemm": "up"}
    assert swap.kept == {("fused_moe", (8, 8, 2, 256, 256, "float16", "up"))}
    assert swap.used == {"fused_moe": {"triton": 0, KEPT: 2}}
    assert not swap.runs_triton("fused_moe", up)


def test_a_bundle_of_up_silu_results_swaps_the_gated_first_gemm(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With ``up_silu`` entries the block's first GEMM takes the activation in its epilogue (no
    silu_and_mul pass); the bound and the pairing read the problem the swap runs."""
    from workers.profiling import swap as swap_module

    experts = {"M": 8, "E": 8, "topk": 2, "dtype": "float16"}
    gated = {**experts, "N": 256, "K": 256, "gemm": "up_silu"}
    monkeypatch.setattr(swap_module, "silu_and_mul", None)  # the activation runs in the GEMM
    swap = _swapped_tiny_moe(_bundle("fused_moe", [{"problem": gated, "backend": "triton"}]))
    assert set(swap.tables["fused_moe"]) == {
        (8, 8, 2, 256, 256, "float16", "up_silu"), (8, 8, 2, 256, 128, "float16", "down"),
    }  # fmt: skip
    up = {**experts, "N": 256, "K": 256, "gemm": "up"}
    assert swap.ran("fused_moe", up) == gated and swap.runs_triton("fused_moe", up)
    assert swap.runs_triton("fused_moe", {**up, "K": 128, "gemm": "down"})


def test_the_first_gemm_form_follows_the_nearer_entry_per_token_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bundle of ``up`` results at 8 tokens and ``up_silu`` results at 512 (what the emitted
    jobs of a prefill and a decode point hold): 8 tokens run the plain GEMM and silu_and_mul,
    512 the gated GEMM; of equally near forms (64 tokens: 3 doublings from each) ``up_silu``."""
    from workers.profiling import swap as swap_module

    experts = {"E": 8, "topk": 2, "dtype": "float16", "N": 256, "K": 256}
    up, gated = {**experts, "M": 8, "gemm": "up"}, {**experts, "M": 512, "gemm": "up_silu"}
    passes: list[int] = []
    real = swap_module.silu_and_mul

    def counted(hidden: Any, out: Any) -> None:
        passes.append(int(out.shape[0]))
        real(hidden, out)

    monkeypatch.setattr(swap_module, "silu_and_mul", counted)
    entries = [{"problem": p, "backend": "triton"} for p in (up, gated)]
    swap = _swapped_tiny_moe(_bundle("fused_moe", entries))
    assert passes == [8 * 2]  # the swapped forward's 8 tokens x top 2 slots
    assert [swap.ran("fused_moe", {**up, "M": m})["gemm"] for m in (1, 8, 64, 512, 8192)] == [
        "up", "up", "up_silu", "up_silu", "up_silu",
    ]  # fmt: skip
    assert swap.ran("fused_moe", {**gated, "M": 4}) == up | {"M": 4}


def test_a_bundle_of_down_sum_results_sums_the_slots_in_the_down_gemm(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With ``down_sum`` entries the block's down GEMM adds each slot into its token's row: the
    swapped forward sums no [M, topk, H] buffer after it (only the baseline's path does), and both
    names of the down GEMM map to what the swap runs."""
    import torch

    experts = {"M": 8, "E": 8, "topk": 2, "dtype": "float16"}
    summed = {**experts, "N": 256, "K": 128, "gemm": "down_sum"}
    gated = {**experts, "N": 256, "K": 256, "gemm": "up_silu"}
    sums: list[tuple[tuple[int, ...], torch.dtype]] = []
    real_sum = torch.Tensor.sum

    def counted_sum(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        sums.append((tuple(self.shape), self.dtype))
        return real_sum(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "sum", counted_sum)
    entries = [{"problem": p, "backend": "triton"} for p in (summed, gated)]
    swap = _swapped_tiny_moe(_bundle("fused_moe", entries))
    # The baseline forward's sum of the slots; the swapped forward's would be a second.
    assert sums.count(((8, 2, 256), torch.float16)) == 1
    assert swap.moe_last == "down_sum"
    assert set(swap.tables["fused_moe"]) == {
        (8, 8, 2, 256, 256, "float16", "up_silu"), (8, 8, 2, 256, 128, "float16", "down_sum"),
    }  # fmt: skip
    down = {**summed, "gemm": "down"}
    assert swap.ran("fused_moe", down) == summed and swap.runs_triton("fused_moe", down)
    assert swap.runs_triton("fused_moe", {**gated, "gemm": "up"})


def test_the_twin_is_routed_as_the_checked_forward_was() -> None:
    """tiny-moe in bfloat16: some of 256 tokens' second and third experts lie within a rounding of
    each other, so the twin routes them elsewhere; pinned to the forward's experts, the error is
    rounding alone. Pinned to its own choices the twin is itself; pinned to other experts its first
    layer says every token moved."""
    import dataclasses

    import torch

    from workers.profiling.check import max_rel_error
    from workers.profiling.models import load_workload, moe_layers
    from workers.profiling.trace import Phase

    workload = load_workload("tiny-moe", "cpu", "bfloat16")
    twin = workload.fp32_twin()
    out, routes = workload.routed(workload.forward_for(Phase.PREFILL, 4, 64))
    assert [tuple(r.shape) for r in routes] == [(256, 2), (256, 2)]
    reference = workload.reference_for(twin, Phase.PREFILL, 4, 64)
    own = reference()
    pinned, moved = workload.pinned(twin, reference, routes)
    assert moved > 0
    assert max_rel_error(out, pinned) < 0.5 * max_rel_error(out, own)

    twin_out, twin_routes = dataclasses.replace(workload, model=twin).routed(reference)
    assert torch.equal(twin_out, own)
    again, moved = workload.pinned(twin, reference, twin_routes)
    assert torch.equal(again, own) and moved == 0
    elsewhere = tuple((r + 1) % 8 for r in routes)
    moved = workload.pinned(twin, reference, elsewhere)[1]
    first = moe_layers(twin)[0].rerouted  # the later layer's own choice sees other inputs
    assert first == 256 and first <= moved <= 2 * 256
    assert workload.routed(workload.forward_for(Phase.PREFILL, 1, 8))[1][0].shape == (8, 2)


def test_the_swapped_rmsnorm_uses_the_modules_own_eps() -> None:
    """eps 0.5 against rows of mean square 0.01: the spec's eps (1e-6) would give ~7x the output."""
    import torch
    import torch.nn.functional as F

    from workers.profiling.models import RMSNorm
    from workers.profiling.swap import install

    norm = RMSNorm(64, eps=0.5).half()
    x = (0.1 * torch.randn(4, 64)).half()
    swap = install(norm, {"rmsnorm": _bundle("rmsnorm", [])})
    swap.on = True
    out = norm(x)
    want = F.rms_norm(x.float(), (64,), norm.weight.float(), 0.5)
    assert swap.used == {"rmsnorm": {"triton": 1, "kept vendor": 0}}
    torch.testing.assert_close(out.float(), want, rtol=2e-3, atol=2e-3)


def test_the_error_rule_refuses_a_swap_beyond_the_stated_factor() -> None:
    from workers.profiling.check import refusal

    assert refusal(0.01, 0.02) is None  # 2 x 0.01 + 0.001 = 0.021
    assert refusal(0.01, 0.0215) == (
        "swapped error vs float32 0.0215 exceeds 2 x the baseline's 0.01 + 0.001 = 0.021"
    )
    assert refusal(0.0, 0.0009) is None and refusal(0.0, 0.002) is not None  # the floor
    assert refusal(0.01, 0.04, ratio=4.0, floor=0.0) is None
    assert refusal(0.01, float("inf")) is not None


def test_a_launch_bound_eager_forward_keeps_the_vendor_path() -> None:
    from workers.profiling.run import launch_bound
    from workers.profiling.trace import GRAPH_PAYS_RATIO, Mode

    # An eager forward whose graph runs in 20% of its time is set by launches: nothing swaps.
    assert launch_bound(Mode.EAGER, 0.2)
    assert launch_bound(Mode.EAGER, GRAPH_PAYS_RATIO - 0.01)
    # A GPU-bound eager forward, any graph forward, and an eager one with no graph timed swap.
    assert not launch_bound(Mode.EAGER, GRAPH_PAYS_RATIO)
    assert not launch_bound(Mode.EAGER, 0.97)
    assert not launch_bound(Mode.GRAPH, 0.2)
    assert not launch_bound(Mode.EAGER, None)


def rmsnorm_bundle(folder: Path) -> Path:
    """A CPU bundle of rmsnorm's default config only: the interpreter's matmuls would make each
    tuned forward take seconds."""
    from search_spaces.registry import get_spec
    from search_spaces.space import Vendor

    folder.mkdir()
    (folder / "rmsnorm-cpu.json").write_text(
        json.dumps(
            {
                "format": "tunefleet-bundle/1",
                "kernel": "rmsnorm",
                "device_class": "cpu",
                "default": get_spec("rmsnorm").default_config(Vendor.CPU),
                "entries": [],
            }
        )
    )
    return folder


def test_with_bundle_reports_the_end_to_end_change(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = rmsnorm_bundle(tmp_path / "bundle")
    args = ["profile", "tiny", "--batch", "1", "--seq", "8", "--device", "cpu", "--runs", "10"]
    args += ["--trace-forwards", "1", "--out", str(tmp_path / "out"), "--with-bundle", str(folder)]
    code, out, err = run_cli([*args, "--dtype", "float16", "--json"], capsys)
    assert code == 0, err
    tuned = json.loads(out)["with_bundle"]
    (row,) = tuned["rows"]
    assert (row["phase"], row["batch"], row["mode"]) == ("prefill", 1, "eager")
    assert row["tuned_ms"] > 0 and row["refused"] is None
    assert 0 < row["baseline_error"] < 1e-2 and 0 < row["swapped_error"] < 1e-2
    assert row["baseline_rerouted"] == row["swapped_rerouted"] == 0  # no MoE layers

    # Where the swapped time goes: the all-swapped eager forward's own trace (its RMSNorms ran
    # the Triton kernel, not torch's op) and its top kernels (none in a CPU trace).
    def ops(trace: str) -> set[str]:
        with gzip.open(tmp_path / "out" / trace) as f:
            return {e.get("name") for e in json.load(f)["traceEvents"]}

    base_trace = json.loads(out)["rows"][0]["trace"]
    assert "aten::rms_norm" in ops(base_trace) - ops(row["swapped_trace"])
    assert row["swapped_top"] == []
    assert row["change"] == pytest.approx(row["tuned_ms"] / row["baseline_ms"] - 1)
    # No entry holds a vendor time: the bound covers none of the swapped time.
    assert row["amdahl"]["measured_share"] == 0 and row["amdahl"]["change"] is None
    assert row["amdahl"]["swapped_share"] > 0
    assert row["amdahl"]["ceiling"] is None  # a cpu bundle: no roofline peaks
    assert row["in_model"] is None  # CPU traces: no GPU kernel time to compare
    assert row["vendor_vs_model"] == []  # CPU traces: host times, nothing compared
    assert tuned["used"] == {"rmsnorm": {"triton": 2, "kept vendor": 0}}  # M = 8 and 1 (last)
    assert "2 x baseline" in tuned["error_rule"]


def test_with_bundle_gives_the_in_model_change_from_the_traces_gpu_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.benchmark_script import load
    from workers.profiling import capture
    from workers.profiling.trace import STEP

    record = capture.record_trace

    def with_kernels(fn: Any, device: str, path: Path, steps: int) -> Path:
        """The CPU trace, each forward given two GPU kernels: 2 x 150 µs in the baseline's
        trace, 2 x 100 µs in the all-swapped forward's."""
        record(fn, device, path, steps)
        doc = json.loads(path.read_text())
        dur = 100.0 if path.name.endswith("-swapped.json") else 150.0
        forwards = [e for e in doc["traceEvents"] if e.get("name") == STEP]
        assert len(forwards) == steps == 2
        doc["traceEvents"] += [
            {"ph": "X", "cat": "kernel", "name": "k", "ts": e["ts"] + i, "dur": dur, "args": {}}
            for e in forwards
            for i in (0, 1)
        ]
        path.write_text(json.dumps(doc))
        return path

    monkeypatch.setattr(capture, "record_trace", with_kernels)
    folder = rmsnorm_bundle(tmp_path / "bundle")
    out = tmp_path / "res" / "tiny" / "prefill-tuned"
    args = ["profile", "tiny", "--batch", "1", "--seq", "8", "--device", "cpu", "--runs", "10"]
    args += ["--trace-forwards", "2", "--out", str(out), "--with-bundle", str(folder)]
    code, stdout, err = run_cli([*args, "--dtype", "float16", "--json"], capsys)
    assert code == 0, err
    (row,) = json.loads(stdout)["with_bundle"]["rows"]
    # Per forward (two forwards per trace), not per trace: 300 and 200 µs.
    gpu = row["in_model"]
    assert (gpu["base_kernel_ms"], gpu["swapped_kernel_ms"]) == (0.3, 0.2)
    assert gpu["change"] == pytest.approx((0.2 - 0.3) / row["baseline_ms"])

    # The deployment table shows it after the study bound and its ceiling ("-": a cpu bundle has
    # no roofline), with the share the swap reached.
    table = load("deployment/table")
    (line,) = [x for x in table.model_table(out.parent) if x.startswith("| prefill | 8 | 1 |")]
    cells = [c.strip() for c in line.split("|")[1:-1]]
    reached = table._of_bound(row["swapped_all_ms"] / row["baseline_ms"] - 1, gpu["change"])
    reached_cell = "-" if reached is None else f"{reached:.0%}"
    assert cells[10] == "-"
    assert cells[12] == f"{gpu['change']:+.1%} ({reached_cell})"
    # the A/A column: the baseline timed again, last in each round
    assert isinstance(row["aa_change"], float) and cells[7] == f"{row['aa_change']:+.1%}"
    assert (
        table._in_model({"baseline_ms": 10.0, "swapped_all_ms": 9.0, "in_model": {"change": -0.2}})
        == "-20.0% (50%)"
    )
    assert (
        table._in_model({"baseline_ms": 10.0, "swapped_all_ms": 9.0, "in_model": None}) == "- (-)"
    )


def test_moe_models_emit_fused_moe_jobs_with_both_gemms(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["profile", "tiny-moe", "--layers", "1", "--batch", "2", "--seq", "8", "--device"]
    args += ["cpu", "--runs", "10", "--trace-forwards", "1", "--phase", "both", "--out"]
    args += [str(tmp_path), "--emit-job", str(tmp_path / "job.yaml"), "--emit-problems", "4"]
    code, out, err = run_cli([*args, "--json"], capsys)
    assert code == 0, err
    emitted = [Path(p) for p in json.loads(out)["emitted_jobs"]]
    (moe,) = [load_job_file(f) for f in emitted if ".fused_moe." in f.name]
    # tiny-moe: hidden 256, 8 experts, top 2, expert MLP 128; prefill M = 2 x 8, decode M = 2.
    got = {(p["M"], p["gemm"], p["N"], p["K"]) for p in moe.problems}
    assert got == {
        (m, g, n, k) for m in (16, 2) for g, n, k in (("up", 256, 256), ("down_sum", 256, 128))
    }
    assert all((p["E"], p["topk"]) == (8, 2) for p in moe.problems)


def test_max_rel_error_is_the_same_in_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from workers.profiling import check

    gen = torch.Generator().manual_seed(0)
    ref = torch.randn(7, 33, generator=gen)
    out = ref + 1e-3 * torch.randn(7, 33, generator=gen)
    whole = check.max_rel_error(out, ref)
    monkeypatch.setattr(check, "ERROR_CHUNK", 10)
    assert check.max_rel_error(out, ref) == pytest.approx(whole, rel=1e-12)
    out[6, 32] = float("nan")  # in the last chunk
    assert check.max_rel_error(out, ref) == float("inf")


def test_the_float32_twins_attention_repeats_kv_heads_and_computes_the_same() -> None:
    import torch

    from workers.profiling.models import CONFIGS, Attention, DecoderConfig

    config: DecoderConfig = CONFIGS["tiny"]
    attention = Attention(config)
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(1, 8, config.num_heads, config.head_dim, generator=gen)
    kv = [torch.randn(1, 8, config.num_kv_heads, config.head_dim, generator=gen) for _ in "kv"]
    assert config.num_heads > config.num_kv_heads
    got = attention.attend(q, *kv, None)
    group = config.num_heads // config.num_kv_heads
    k, v = (t.repeat_interleave(group, dim=2).transpose(1, 2) for t in kv)
    want = (
        torch.softmax(
            (q.transpose(1, 2) @ k.transpose(-1, -2)) / config.head_dim**0.5
            + torch.full((8, 8), float("-inf")).triu(1),
            dim=-1,
        )
        @ v
    )
    assert torch.allclose(got, want.transpose(1, 2), atol=1e-5)


def test_a_launch_bound_forward_runs_only_the_launch_saving_kernels() -> None:
    """Empty bundles decide Triton (default config) for every problem; with ``only`` set, the
    other kernels' calls keep the model's op and never consult their bundle."""
    from workers.profiling.models import load_workload
    from workers.profiling.run import FEWER_LAUNCHES, _policy, _runs_under, _switched_on
    from workers.profiling.swap import install
    from workers.profiling.trace import Phase

    workload = load_workload("tiny-moe", "cpu", "float16", layers=1)
    swap = install(
        workload.model,
        {"matmul": _bundle("matmul", []), "fused_moe": _bundle("fused_moe", [])},
    )
    forward = workload.forward_for(Phase.PREFILL, 1, 8)
    _switched_on(swap, forward, FEWER_LAUNCHES)()
    assert set(swap.lookups) == {"fused_moe"} and swap.used["fused_moe"]["triton"] == 2
    assert not swap.on and swap.only is None  # switched off again
    _switched_on(swap, forward)()
    assert set(swap.lookups) == {"fused_moe", "matmul"}

    problem = {"M": 8, "N": 256, "K": 256, "dtype": "float16"}
    assert _runs_under(swap, kept=False, lean=False)("matmul", problem)
    assert not _runs_under(swap, kept=True, lean=True)("matmul", problem)
    assert not _runs_under(swap, kept=True, lean=False)("fused_moe", {})
    assert _policy(0.4, lean=True).startswith("kept vendor except fused_moe")
    assert "launch-bound (graph/eager 0.40)" in _policy(0.4, lean=False)


def test_the_direct_matmul_launch_takes_plain_tiles_only() -> None:
    """The swap's direct launch of ``matmul_kernel`` serves the plain tile configs; a config
    that sets any flag of the space (TMA, PERSISTENT, STREAM_K, WIDE_N, PDL, FUSED_REDUCE) or
    splits K goes to the spec's launcher (a stream-K config once reached the plain kernel)."""
    from search_spaces.kernels.matmul import DEFAULT, SPEC
    from search_spaces.space import ParamKind
    from workers.profiling.swap import _matmul_plan

    assert _matmul_plan(dict(DEFAULT), 16, 64, 64, False) is not None
    flags = [p.name for p in SPEC.space.params if p.kind is ParamKind.BOOL]
    assert {"TMA", "PERSISTENT", "STREAM_K", "WIDE_N", "PDL"} <= set(flags)
    for flag in flags:
        assert _matmul_plan({**DEFAULT, flag: True}, 16, 64, 64, False) is None, flag
    assert _matmul_plan({**DEFAULT, "SPLIT_K": 2}, 16, 64, 64, False) is None
