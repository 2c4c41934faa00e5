"""Trace analysis against a hand-written Kineto trace with known answers (pure Python, no torch).

The fixture holds two forwards. The first is eager: a runtime launch inside aten::linear/aten::mm
(kernel starts 8 µs after its call on an idle GPU), a driver launch (cuLaunchKernelEx) inside
aten::rms_norm that queues behind the first kernel (16 µs), a runtime launch outside any operator
(20 µs), a kernel with no launch event, a memcpy (not a kernel) and two SDPA calls (prefill, decode)
that launch nothing. The second is one cudaGraphLaunch whose three kernels carry its correlation id.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from workers.profiling.emit import PointShapes, hot_shapes, job_documents
from workers.profiling.errors import ProfileError
from workers.profiling.trace import (
    LaunchKind,
    Trace,
    analyze,
    load_trace,
    parse_trace,
    step_stats,
    transition_batch,
)

FIXTURE = Path(__file__).parent / "fixtures" / "profiling_trace.json"


@pytest.fixture
def trace() -> Trace:
    return parse_trace(load_trace(FIXTURE))


def test_kernels_are_matched_to_runtime_driver_and_graph_launches(trace: Trace) -> None:
    kinds = [k.launch.kind if k.launch else None for k in trace.kernels]
    assert (
        kinds
        == [LaunchKind.RUNTIME, LaunchKind.DRIVER, LaunchKind.RUNTIME, None]
        + [LaunchKind.GRAPH] * 3
    )
    assert [k.delay for k in trace.kernels if k.launch] == [8, 16, 20, 10, 20, 30]
    assert list(trace.unmatched.values()) == [1]
    assert "correlation id" in next(iter(trace.unmatched))


def test_per_forward_tklqt_idle_share_and_counts(trace: Trace) -> None:
    eager, graph = step_stats(trace)
    assert (eager.kernels, eager.matched, eager.tklqt_us, eager.kernel_us) == (4, 3, 44, 49)
    assert eager.window_us == 100 and eager.idle_share == pytest.approx(0.51)
    # The graph replay has no TKLQT (one launch issued all three kernels): its launch is reported.
    assert (graph.kernels, graph.matched, graph.tklqt_us, graph.kernel_us) == (3, 3, None, 40)
    assert (graph.graph_launches, graph.graph_launch_us, graph.graph_first_kernel_us) == (1, 8, 10)
    assert graph.window_us == 55 and graph.idle_share == pytest.approx(1 - 40 / 55)


def test_analysis_takes_medians_and_finds_the_idle_launch_latency(trace: Trace) -> None:
    stats = analyze(trace)
    assert stats.forwards == 2
    # TKLQT over the eager forward only (44 µs over its 3 launched kernels).
    assert stats.tklqt_us == 44 and stats.kernels == 3.5 and stats.matched == 3
    assert stats.launch_to_start_us == pytest.approx(44 / 3)
    # Only the first kernel was launched onto an idle GPU; the others queued.
    assert stats.idle_launch_us == 8
    assert stats.launch_kinds == {"runtime": 2, "driver": 1, "graph": 3}
    top = stats.top[0]
    assert (top.name, top.op, top.leaf_op, top.gpu_us) == (
        "gemm_kernel",
        "aten::linear",
        "aten::mm",
        15,
    )
    assert top.share == pytest.approx(30 / 89)
    assert {t.op for t in stats.top} >= {"(graph replay)", "(no operator)", "(no launch event)"}


def test_hot_shapes_map_recorded_inputs_to_kernel_problems(trace: Trace) -> None:
    shapes, skipped = hot_shapes(trace)
    found = {(s.kernel, s.weight_us) for s in shapes}
    assert found == {("matmul", 15), ("rmsnorm", 5), ("flash_attention", 0), ("paged_attention", 0)}
    by_kernel = {s.kernel: s.problem for s in shapes}
    assert by_kernel["matmul"] == {"M": 16, "N": 128, "K": 64, "dtype": "bfloat16"}
    assert by_kernel["rmsnorm"] == {"M": 16, "N": 64, "dtype": "bfloat16"}
    assert by_kernel["flash_attention"]["causal"] is True
    assert (by_kernel["flash_attention"]["q_heads"], by_kernel["flash_attention"]["kv_heads"]) == (
        4,
        2,
    )
    assert by_kernel["paged_attention"]["context_len"] == 33
    assert skipped == []
    docs = job_documents([PointShapes("prefill", 2, "graph", 89 / 2, shapes)], problems=1, trials=5)
    assert [(k, o, len(j["problems"])) for k, o, j, _ in docs][:2] == [
        ("matmul", "graph", 1),
        ("rmsnorm", "graph", 1),
    ]
    assert docs[0][3][0]["share"] == pytest.approx(15 / 44.5)


def _event(cat: str, name: str, ts: float, dur: float, corr: int | None = None) -> dict:
    args = {} if corr is None else {"correlation": corr}
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": 1,
        "tid": 1,
        "ts": ts,
        "dur": dur,
        "args": args,
    }


def test_a_graph_replay_reports_its_one_launch_and_the_gpu_gaps_not_tklqt() -> None:
    """Two forwards, each one cudaGraphLaunch (CPU 100-112 and 300-309) replaying four kernels
    with gaps of 5, 0 and 10 µs between them; a kernel's offset in the replay is no launch delay."""
    events = []
    for start, launch_dur, corr in ((100, 12, 1), (300, 9, 2)):
        events.append(_event("user_annotation", "tunefleet.forward", start, 100))
        events.append(_event("cuda_runtime", "cudaGraphLaunch", start, launch_dur, corr))
        first = start + 20  # the first kernel starts 20 µs after the launch call
        for offset, dur in ((0, 10), (15, 5), (20, 10), (40, 5)):
            events.append(_event("kernel", "k", first + offset, dur, corr))
    stats = analyze(parse_trace({"traceEvents": events}))
    assert stats.tklqt_us is None and stats.launch_to_start_us is None
    assert "TKLQT is undefined" in (stats.note or "")
    assert stats.graph_launches == 1 and stats.graph_first_kernel_us == 20
    assert stats.graph_launch_us == pytest.approx((12 + 9) / 2)
    assert stats.gap_us == 15 and stats.kernel_us == 30  # span 45 - busy 30
    eager = [
        _event("user_annotation", "tunefleet.forward", 0, 50),
        _event("cuda_runtime", "cudaLaunchKernel", 1, 3, 5),
        _event("cuda_runtime", "cudaLaunchKernel", 6, 3, 6),
        _event("kernel", "k", 10, 4, 5),
        _event("kernel", "k", 20, 4, 6),
    ]
    stats = analyze(parse_trace({"traceEvents": eager}))
    assert stats.tklqt_us == 9 + 14 and stats.gap_us == 6 and stats.graph_launches is None


def test_an_moe_block_becomes_both_fused_moe_gemms_weighted_by_their_flops() -> None:
    name = "tunefleet.moe M=16 E=8 topk=2 hidden=256 ffn=128 dtype=bfloat16"
    events = [
        _event("user_annotation", "tunefleet.forward", 0, 100),
        _event("user_annotation", name, 10, 50),
        _event("cpu_op", "aten::_grouped_mm", 20, 10),
        _event("cuda_runtime", "cudaLaunchKernel", 22, 3, 1),
        _event("kernel", "grouped_gemm", 30, 30, 1),
    ]
    shapes, skipped = hot_shapes(parse_trace({"traceEvents": events}))
    assert skipped == []
    common = {"M": 16, "E": 8, "topk": 2, "dtype": "bfloat16"}
    assert [(s.kernel, s.problem, s.weight_us) for s in shapes] == [
        ("fused_moe", {**common, "N": 256, "K": 256, "gemm": "up"}, 20),
        ("fused_moe", {**common, "N": 256, "K": 128, "gemm": "down_sum"}, 10),
    ]
    docs = job_documents([PointShapes("prefill", 1, "kernel", 30, shapes)], problems=4, trials=5)
    ((kernel, objective, job, _),) = docs
    assert (kernel, objective) == ("fused_moe", "kernel")
    assert [p["gemm"] for p in job["problems"]] == ["up", "down_sum"]


def test_an_moe_block_of_many_tokens_emits_the_gated_first_gemm() -> None:
    """From GATED_MIN_TOKENS tokens the gate+up GEMM is ``up_silu`` (the activation in its
    epilogue); one token fewer, ``up``."""
    from workers.profiling.emit import GATED_MIN_TOKENS, moe_problems

    for m, gemm in ((GATED_MIN_TOKENS, "up_silu"), (GATED_MIN_TOKENS - 1, "up")):
        mapped = moe_problems(f"tunefleet.moe M={m} E=8 topk=2 hidden=256 ffn=128 dtype=bfloat16")
        assert not isinstance(mapped, str)
        assert [(p["gemm"], p["N"], share) for _, p, share in mapped] == [
            (gemm, 256, 2 / 3), ("down_sum", 256, 1 / 3),
        ]  # fmt: skip


def test_an_moe_block_is_split_by_its_vendor_times_so_its_bound_is_the_layers() -> None:
    """Where both halves of a block have vendor times, the block's time is split by them (not
    2:1) and the bound over the halves is the block's share times (V_up + V_down) / (T_up +
    T_down); a block with one vendor time, and other kernels, keep their weights."""
    from search_spaces.bundle import BundleEntry
    from workers.profiling.bound import amdahl
    from workers.profiling.emit import HotShape, measured_split

    def block(m: int) -> tuple[str, dict, dict]:
        op = f"tunefleet.moe M={m} E=8 topk=2 hidden=256 ffn=128 dtype=bfloat16"
        common = {"M": m, "E": 8, "topk": 2, "dtype": "bfloat16"}
        up = {**common, "N": 256, "K": 256, "gemm": "up"}
        return op, up, {**common, "N": 256, "K": 128, "gemm": "down_sum"}

    (op, up, down), (op2, up2, down2) = block(16), block(32)
    mm = {"M": 16, "N": 64, "K": 64, "dtype": "bfloat16"}
    shapes = [
        HotShape("fused_moe", up, op, 200.0, 4), HotShape("fused_moe", down, op, 100.0, 4),
        HotShape("matmul", mm, "aten::mm", 50.0, 1),
        HotShape("fused_moe", up2, op2, 20.0, 4), HotShape("fused_moe", down2, op2, 10.0, 4),
    ]  # fmt: skip
    times = {  # (vendor_ms, triton_ms)
        str(up): (1.0, 0.5), str(down): (3.0, 1.0), str(mm): (1.0, 1.0), str(up2): (1.0, 0.5),
    }  # fmt: skip
    split = measured_split(shapes, lambda k, p: times.get(str(p), (None,))[0])
    assert [s.weight_us for s in split] == [75.0, 225.0, 50.0, 20.0, 10.0]
    assert [s.problem for s in split] == [s.problem for s in shapes]

    def entry(_k: str, p: dict) -> BundleEntry | None:
        if str(p) not in times:
            return None
        vendor_ms, triton_ms = times[str(p)]
        return BundleEntry(p, {}, vendor_ms=vendor_ms, triton_ms=triton_ms)

    bound = amdahl(
        [(s.kernel, s.problem, s.weight_us) for s in split[:2]],
        lambda k, p: True, entry, lambda k, p: None, 1000.0,
    )  # fmt: skip
    assert bound is not None and bound.change == pytest.approx(-300 * (1 - 1.5 / 4.0) / 1000)


def test_transition_is_the_batch_from_which_on_launches_queue() -> None:
    rising = transition_batch({1: 8.0, 2: 9.0, 4: 12.0, 8: 20.0, 16: 40.0}, 8.0)
    assert rising.batch == 8 and rising.ratios[8] == 2.5
    assert transition_batch({1: 8.0, 2: 20.0, 4: 9.0, 8: 30.0}, 8.0).batch == 8
    flat = transition_batch({1: 8.0, 2: 9.0}, 8.0)
    assert flat.batch is None and "CPU-bound at every batch" in flat.reason
    queued = transition_batch({1: 30.0, 2: 50.0}, 8.0)
    assert queued.batch == 1 and "GPU-bound at every batch" in queued.reason
    assert transition_batch({1: None}, None).batch is None


def test_a_file_that_is_not_a_trace_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "t.json"
    bad.write_text('{"events": []}')
    with pytest.raises(ProfileError, match="traceEvents"):
        load_trace(bad)
    with pytest.raises(ProfileError, match="cannot read"):
        load_trace(tmp_path / "missing.json")


def test_the_analysis_and_the_cli_with_profile_import_no_torch() -> None:
    import subprocess
    import sys

    code = (
        "import sys, workers.profiling.trace, workers.profiling.emit, workers.profiling.plots; "
        "from orchestrator.commands.cli import build_app; build_app(); "
        "sys.exit('torch' in sys.modules or 'triton' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


REAL = Path(__file__).parent / "fixtures"


def test_a_real_h200_trace_matches_every_kernel_runtime_and_driver() -> None:
    """Llama-3.2-1B dims, prefill batch 1 x 512 tokens, two eager forwards, recorded on the H200
    by benchmarks/profile/runs/h200.sh: cuBLAS launches through the driver API."""
    trace = parse_trace(load_trace(REAL / "prefill-b1-eager.json.gz"))
    stats = analyze(trace)
    assert stats.forwards == 2 and stats.kernels == stats.matched == 387 and not stats.unmatched
    assert stats.launch_kinds["driver"] > 0 and stats.launch_kinds["runtime"] > 0
    assert stats.idle_launch_us is not None and 1 < stats.idle_launch_us < 50
    shapes, _ = hot_shapes(trace)
    problems = {(s.kernel, s.problem.get("N")) for s in shapes}
    assert ("matmul", 8192) in problems and ("rmsnorm", 2048) in problems
    flash = next(s.problem for s in shapes if s.kernel == "flash_attention")
    assert (flash["max_seqlen"], flash["q_heads"], flash["kv_heads"]) == (512, 32, 8)


def test_a_real_graph_replay_trace_matches_every_kernel_to_its_graph_launch() -> None:
    trace = parse_trace(load_trace(REAL / "prefill-b1-graph.json.gz"))
    stats = analyze(trace)
    assert stats.kernels == stats.matched == 387
    assert set(stats.launch_kinds) == {"graph"}
    assert stats.top[0].op == "(graph replay)"
    assert stats.tklqt_us is None and stats.graph_launches == 1
    assert stats.graph_first_kernel_us is not None and stats.graph_first_kernel_us > 0
    assert stats.gap_us is not None and 0 <= stats.gap_us < stats.window_us
