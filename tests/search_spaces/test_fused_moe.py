"""The ``fused_moe`` spec: problems, space, cost model, inputs, alignment, the kernel's result
(each GEMM, the activation and top-k sum epilogues), the SiLU-and-mul kernel, an expert block
sharing one alignment, and the vendor paths."""

import importlib.util
import math
import pathlib
import sys
from collections.abc import Iterator

import pytest
import torch

from search_spaces.accuracy import max_rel_error
from search_spaces.errors import ProblemError, SpecError
from search_spaces.kernels.fused_moe import SPEC, launch_plan, per_expert_loop, silu_and_mul
from search_spaces.problem import Problem
from search_spaces.space import Config, DeviceLimits, Vendor
from tests.gpu import needs_gpu
from tests.search_spaces.kernel_check import vendor_launch
from workers.device_table import lookup

#: A Qwen3-30B-A3B-like block's gate and up GEMM with the activation in the epilogue.
QWEN_UP_SILU: Problem = {
    "M": 512, "E": 128, "topk": 8, "N": 1536, "K": 2048, "dtype": "bfloat16", "gemm": "up_silu",
}  # fmt: skip
#: The same block's down GEMM with the top-k sum in the epilogue.
QWEN_DOWN_SUM: Problem = {
    "M": 512, "E": 128, "topk": 8, "N": 2048, "K": 768, "dtype": "bfloat16", "gemm": "down_sum",
}  # fmt: skip
MIXTRAL_TP2: Problem = {"M": 64, "E": 8, "topk": 2, "N": 14336, "K": 4096, "dtype": "float16"}


def _config(bm: int, bn: int = 32, bk: int = 64, group: int = 1, tma: bool = False) -> Config:
    return {
        "BLOCK_SIZE_M": bm,
        "BLOCK_SIZE_N": bn,
        "BLOCK_SIZE_K": bk,
        "GROUP_SIZE_M": group,
        "num_warps": 4,
        "num_stages": 2,
        "TMA": tma,
    }


def test_example_validates() -> None:
    assert SPEC.validate_problem(SPEC.example) == SPEC.example


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"topk": 5}, "must not exceed E=4"),
        ({"dtype": "float32"}, "float16, bfloat16"),
        ({"E": 0}, "positive integer"),
        ({"gemm": "up_silu", "N": 33}, "up_silu needs an even N"),
        ({"gemm": "gate"}, "up, down, up_silu"),
    ],
)
def test_bad_problems_are_refused(change: dict[str, object], words: str) -> None:
    with pytest.raises(ProblemError, match=words):
        SPEC.validate_problem({**SPEC.example, **change})


def test_space_sizes(h200_limits: DeviceLimits, mi300x_limits: DeviceLimits) -> None:
    assert SPEC.space.total(Vendor.NVIDIA) == 5 * 4 * 3 * 4 * 2 * 4 * 2
    assert SPEC.space.count(h200_limits) == 2400
    assert SPEC.space.count(mi300x_limits) == 2560


def test_space_rules(h200_limits: DeviceLimits) -> None:
    too_deep = {**_config(256, 256, 256), "num_warps": 8, "num_stages": 2}
    violation = SPEC.space.violation(too_deep, h200_limits)
    assert violation is not None and violation.rule == "shared-memory"
    many_acc = {**_config(256, 128, 64), "num_warps": 4}
    violation = SPEC.space.violation(many_acc, h200_limits)
    assert violation is not None and violation.rule == "accumulator-registers"


def test_default_is_vllms_fallback_moved_onto_the_space(
    h200_limits: DeviceLimits, mi300x_limits: DeviceLimits, cpu_limits: DeviceLimits
) -> None:
    nvidia = SPEC.default_config(Vendor.NVIDIA)
    assert nvidia == {
        "BLOCK_SIZE_M": 64,
        "BLOCK_SIZE_N": 64,
        "BLOCK_SIZE_K": 64,
        "GROUP_SIZE_M": 16,
        "num_warps": 4,
        "num_stages": 3,
        "TMA": False,
    }
    assert "TMA" not in SPEC.default_config(Vendor.AMD)
    for limits in (h200_limits, mi300x_limits, cpu_limits):
        SPEC.space.validate(SPEC.default_for(limits), limits)


def test_cost_model_counts_only_used_experts() -> None:
    assert SPEC.flops(MIXTRAL_TP2) == 2 * 64 * 2 * 14336 * 4096
    weights = 14336 * 4096
    assert SPEC.bytes_moved(MIXTRAL_TP2) == 2 * (64 * 4096 + 8 * weights + 64 * 2 * 14336)
    one_token: Problem = {**MIXTRAL_TP2, "M": 1}
    assert SPEC.bytes_moved(one_token) == 2 * (4096 + 2 * weights + 2 * 14336)


def test_inputs_route_each_token_to_distinct_experts_and_are_fresh() -> None:
    problem: Problem = {"M": 16, "E": 6, "topk": 3, "N": 8, "K": 8, "dtype": "bfloat16"}
    first, second = SPEC.build_inputs(problem, "cpu"), SPEC.build_inputs(problem, "cpu")
    ids = first["topk_ids"]
    assert ids.dtype == torch.int32 and tuple(ids.shape) == (16, 3)
    assert int(ids.min()) >= 0 and int(ids.max()) < 6
    assert all(len(set(row.tolist())) == 3 for row in ids)
    assert torch.allclose(first["topk_weights"].sum(dim=1), torch.ones(16))
    assert first["x"].dtype == torch.bfloat16 and tuple(first["w"].shape) == (6, 8, 8)
    assert tuple(first["out"].shape) == (16, 3, 8)
    assert not torch.equal(first["x"], second["x"])
    assert not torch.equal(first["topk_ids"], second["topk_ids"])


def _check_alignment(
    ids: list[int], n_experts: int, block_m: int, chunk: int = 16, scan: int = 256
) -> None:
    from search_spaces.kernels._fused_moe_kernels import launch_align

    slots = len(ids)
    max_padded = slots + n_experts * (block_m - 1)
    sorted_ids = torch.full((max_padded,), -7, dtype=torch.int32)
    expert_ids = torch.full((math.ceil(max_padded / block_m),), -7, dtype=torch.int32)
    num_post = torch.zeros(1, dtype=torch.int32)
    e_p2 = 1 << (n_experts - 1).bit_length()
    workspace = torch.full((math.ceil(slots / chunk), e_p2), -7, dtype=torch.int32)
    counts = torch.full((e_p2,), -7, dtype=torch.int32)
    launch_align(
        torch.tensor(ids, dtype=torch.int32), sorted_ids, expert_ids, num_post, workspace, counts,
        slots, n_experts, max_padded, block_m, e_p2, chunk, scan,
    )  # fmt: skip

    start = 0
    for expert in range(n_experts):
        mine = [s for s, e in enumerate(ids) if e == expert]
        end = start + math.ceil(len(mine) / block_m) * block_m
        assert sorted_ids[start : start + len(mine)].tolist() == mine
        assert sorted_ids[start + len(mine) : end].tolist() == [slots] * (end - start - len(mine))
        assert expert_ids[start // block_m : end // block_m].tolist() == [expert] * (
            (end - start) // block_m
        )
        start = end
    assert int(num_post) == start
    assert int(expert_ids.min()) >= 0 and int(expert_ids.max()) < n_experts


@pytest.mark.parametrize("block_m", [16, 32])
def test_alignment_sorts_slots_by_expert_and_pads_groups(block_m: int) -> None:
    # 40 slots over 5 experts (more than one CHUNK of 16); expert 3 gets none, expert 1 gets 17.
    ids = [1] * 17 + [0, 2, 4] * 6 + [4, 2, 0, 1, 1]
    _check_alignment(ids, n_experts=5, block_m=block_m)


def test_alignment_scales_to_many_experts_and_chunks() -> None:
    # 600 slots over 70 experts in 38 chunks of 16, vector steps of 16: the per-expert scan over
    # chunks, one expert's blocks (300 slots: 19) and the blocks past the total each take several.
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(0, 70, (600,), generator=gen)
    ids[:300] = 7
    _check_alignment(ids.tolist(), n_experts=70, block_m=16, scan=16)


@pytest.mark.parametrize(
    ("problem", "config"),
    [
        (SPEC.example, _config(16)),
        (SPEC.example, _config(32, group=16)),
        # ragged N and K, E not a power of two, every expert on every token
        ({"M": 5, "E": 3, "topk": 3, "N": 40, "K": 72, "dtype": "bfloat16"}, _config(16, 32, 64)),
        # one expert per token: some experts get no tokens at all
        ({"M": 3, "E": 8, "topk": 1, "N": 32, "K": 64, "dtype": "float16"}, _config(16, 32, 128)),
        # the down projection: one activation row per routed slot
        ({**SPEC.example, "gemm": "down"}, _config(16)),
        (
            {"M": 7, "E": 5, "topk": 2, "N": 40, "K": 48, "dtype": "bfloat16", "gemm": "down"},
            _config(32, 32, 64, group=16),
        ),
        # TMA weight tiles: the last N-block reads the next expert's rows (N=40, BLOCK 32), K
        # ragged (72: the descriptor zero-fills past K), up and down
        ({"M": 5, "E": 3, "topk": 3, "N": 40, "K": 72, "dtype": "bfloat16"}, _config(16, tma=True)),
        (
            {"M": 7, "E": 5, "topk": 2, "N": 40, "K": 64, "dtype": "float16", "gemm": "down"},
            _config(16, 32, 32, group=16, tma=True),
        ),
        # SiLU(gate) * up in the epilogue: F = 20 is not a multiple of the 16 output columns per
        # program (BLOCK_SIZE_N 32: 16 gate rows and 16 up rows), K ragged; pointers and TMA
        (
            {"M": 5, "E": 3, "topk": 3, "N": 40, "K": 72, "dtype": "bfloat16", "gemm": "up_silu"},
            _config(16, 32, 64),
        ),
        (
            {"M": 9, "E": 4, "topk": 2, "N": 64, "K": 64, "dtype": "float16", "gemm": "up_silu"},
            _config(32, 64, 32, group=16, tma=True),
        ),
        (
            {"M": 5, "E": 3, "topk": 3, "N": 40, "K": 72, "dtype": "bfloat16", "gemm": "up_silu"},
            _config(16, tma=True),
        ),
        # the top-k sum in the epilogue: float16 atomics; bfloat16 (through float32 on the
        # interpreter); TMA; a token's slots spread over M-blocks of several experts
        (
            {"M": 9, "E": 4, "topk": 3, "N": 40, "K": 48, "dtype": "float16", "gemm": "down_sum"},
            _config(16, 32, 32),
        ),
        (
            {"M": 7, "E": 5, "topk": 2, "N": 40, "K": 48, "dtype": "bfloat16", "gemm": "down_sum"},
            _config(32, 32, 64, group=16),
        ),
        (
            {"M": 7, "E": 5, "topk": 2, "N": 40, "K": 64, "dtype": "float16", "gemm": "down_sum"},
            _config(16, 32, 32, group=16, tma=True),
        ),
    ],
)
def test_kernel_matches_reference(problem: Problem, config: Config) -> None:
    inputs = SPEC.build_inputs(problem, "cpu")
    inputs["out"].fill_(float("nan"))
    SPEC.make_launcher(inputs, config)()
    assert bool(torch.isfinite(inputs["out"]).all()), "launch left elements unwritten"
    assert max_rel_error(inputs["out"], SPEC.reference(inputs)) <= SPEC.tolerance(problem)


def test_reference_applies_routed_weights() -> None:
    inputs = SPEC.build_inputs(SPEC.example, "cpu")
    ref = SPEC.reference(inputs)
    m, j = 3, 1
    expert = int(inputs["topk_ids"][m, j])
    row = inputs["x"][m].float() @ inputs["w"][expert].float().T
    assert torch.allclose(ref[m, j], row * inputs["topk_weights"][m, j], rtol=1e-5, atol=1e-5)
    baseline = per_expert_loop(inputs, compute_dtype="float16")
    assert baseline.dtype == torch.float16
    assert max_rel_error(baseline, ref) <= SPEC.tolerance(SPEC.example)


def test_up_silu_takes_the_activation_of_the_up_products() -> None:
    """out = silu(gate) * up * routed weight, gate and up the products with the expert's first
    and last N/2 rows; half the up GEMM's output, from the same reads."""
    problem = SPEC.validate_problem({**SPEC.example, "gemm": "up_silu"})
    inputs = SPEC.build_inputs(problem, "cpu")
    m, topk = (int(d) for d in inputs["topk_ids"].shape)
    f = int(problem["N"]) // 2
    assert tuple(inputs["out"].shape) == (m, topk, f)
    ref = SPEC.reference(inputs)
    expert = int(inputs["topk_ids"][4, 1])
    row = inputs["x"][4].float() @ inputs["w"][expert].float().T
    want = torch.nn.functional.silu(row[:f]) * row[f:] * inputs["topk_weights"][4, 1]
    assert torch.allclose(ref[4, 1], want, rtol=1e-5, atol=1e-5)
    up = SPEC.validate_problem(SPEC.example)
    assert SPEC.flops(problem) == SPEC.flops(up)
    assert SPEC.bytes_moved(up) - SPEC.bytes_moved(problem) == 2 * m * topk * f
    assert SPEC.vendor_paths(problem) == ("torch._grouped_mm",)


def test_down_sum_is_the_down_projection_summed_per_token() -> None:
    """out[m] = sum over j of down's out[m, j]: [M, N], one write per token instead of topk."""
    problem = SPEC.validate_problem({**SPEC.example, "gemm": "down_sum"})
    inputs = SPEC.build_inputs(problem, "cpu")
    m, topk = (int(d) for d in inputs["topk_ids"].shape)
    n = int(problem["N"])
    assert tuple(inputs["out"].shape) == (m, n)
    assert tuple(inputs["x"].shape) == (m * topk, int(problem["K"]))
    slots = per_expert_loop({**inputs, "out": inputs["out"].new_empty(m, topk, n)}, "float32")
    assert torch.allclose(SPEC.reference(inputs), slots.sum(dim=1), rtol=1e-6, atol=1e-6)
    down = SPEC.validate_problem({**problem, "gemm": "down"})
    assert SPEC.flops(problem) == SPEC.flops(down)
    assert SPEC.bytes_moved(down) - SPEC.bytes_moved(problem) == 2 * m * (topk - 1) * n
    assert SPEC.vendor_paths(problem) == ("torch._grouped_mm",)


def test_down_sum_launches_again_from_zero() -> None:
    """The launch zeroes out before adding into it: a second launch gives the same sum."""
    problem = SPEC.validate_problem({"M": 9, "E": 4, "topk": 2, "N": 32, "K": 32,
                                     "dtype": "float16", "gemm": "down_sum"})  # fmt: skip
    inputs = SPEC.build_inputs(problem, "cpu")
    launch = SPEC.make_launcher(inputs, _config(16, 32, 32))
    launch()
    first = inputs["out"].clone()
    launch()
    assert max_rel_error(inputs["out"], first) < 1e-3


def test_down_projection_reads_a_row_per_slot() -> None:
    problem = SPEC.validate_problem({**SPEC.example, "gemm": "down"})
    inputs = SPEC.build_inputs(problem, "cpu")
    m, topk = (int(d) for d in inputs["topk_ids"].shape)
    assert tuple(inputs["x"].shape) == (m * topk, int(problem["K"]))
    ref = SPEC.reference(inputs)
    expert = int(inputs["topk_ids"][2, 1])
    row = inputs["x"][2 * topk + 1].float() @ inputs["w"][expert].float().T
    assert torch.allclose(ref[2, 1], row * inputs["topk_weights"][2, 1], rtol=1e-5, atol=1e-5)
    up = SPEC.validate_problem(SPEC.example)
    assert SPEC.bytes_moved(problem) - SPEC.bytes_moved(up) == 2 * m * (topk - 1) * problem["K"]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize(("rows", "f"), [(1, 1), (37, 100), (70, 520)])
def test_silu_and_mul_matches_torch_in_float32(dtype: torch.dtype, rows: int, f: int) -> None:
    """Ragged F (one column block, several, a partial last one), rows strided past 2F."""
    gen = torch.Generator().manual_seed(rows)
    hidden = (4 * torch.randn(rows, 2 * f + 8, generator=gen)).to(dtype)[:, : 2 * f]
    out = torch.full((rows, f), float("nan"), dtype=dtype)
    silu_and_mul(hidden, out)
    want = torch.nn.functional.silu(hidden[:, :f].float()) * hidden[:, f:].float()
    torch.testing.assert_close(out.float(), want, rtol=torch.finfo(dtype).eps, atol=1e-5)


def test_silu_and_mul_offsets_past_2_31_elements() -> None:
    """Row 2048 of a row stride of 2**20 starts at element 2**31 past hidden's first; wrapped to
    32 bits, that offset would read 2**31 elements before it, still inside the (untouched) storage.
    Only the rows' pages of the 8 GiB storage are touched."""
    rows, f, stride = 2049, 4, 1 << 20
    storage = torch.empty((1 << 31) + rows * stride, dtype=torch.float16)
    hidden = storage.as_strided((rows, 2 * f), (stride, 1), storage_offset=1 << 31)
    hidden.copy_(torch.randn(rows, 2 * f, generator=torch.Generator().manual_seed(0)))
    out = torch.full((rows, f), float("nan"), dtype=torch.float16)
    silu_and_mul(hidden, out)
    want = torch.nn.functional.silu(hidden[:, :f].float()) * hidden[:, f:].float()
    torch.testing.assert_close(out.float(), want, rtol=torch.finfo(torch.float16).eps, atol=1e-5)


def test_silu_and_mul_refuses_mismatched_shapes() -> None:
    with pytest.raises(SpecError, match=r"must be \[R, 2F\]"):
        silu_and_mul(torch.zeros(4, 10), torch.zeros(4, 4))


@pytest.mark.parametrize(("up_m", "down_m"), [(16, 16), (16, 32)])
def test_an_expert_block_shares_the_alignment_only_at_equal_block_m(up_m: int, down_m: int) -> None:
    """The swapped block (up GEMM, silu_and_mul, down GEMM, slots summed) with the down GEMM
    reading the up launch's alignment gives the very output of the block aligning twice."""
    m, e, topk, h, f = 9, 5, 2, 48, 40
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(m, h, generator=gen).half()
    w_up = (torch.randn(e, 2 * f, h, generator=gen) / h**0.5).half()
    w_down = (torch.randn(e, h, f, generator=gen) / f**0.5).half()
    ids = torch.rand(m, e, generator=gen).argsort(dim=1)[:, :topk].to(torch.int32).contiguous()
    weights = torch.rand(m, topk, generator=gen).softmax(dim=1)

    def block(share: bool) -> torch.Tensor:
        up = launch_plan(_config(up_m), m, e, topk, 2 * f, h, False, x)
        down = launch_plan(_config(down_m), m, e, topk, h, f, True, x, share=up if share else None)
        assert (down.aligned is up.aligned) == (share and up_m == down_m)
        hidden = torch.full((m * topk, 2 * f), float("nan"), dtype=torch.float16)
        up(x, w_up, ids, torch.ones(m, topk), hidden.view(m, topk, 2 * f))
        act = torch.empty(m * topk, f, dtype=torch.float16)
        silu_and_mul(hidden, act)
        out = torch.full((m, topk, h), float("nan"), dtype=torch.float16)
        down(act, w_down, ids, weights, out)
        return out.sum(dim=1)

    shared = block(share=True)
    assert torch.equal(shared, block(share=False))
    hidden = torch.einsum("mh,mjfh->mjf", x.float(), w_up.float()[ids.long()])
    act = torch.nn.functional.silu(hidden[..., :f]) * hidden[..., f:]
    want = torch.einsum("mjf,mjhf->mjh", act, w_down.float()[ids.long()])
    want = (want * weights[..., None]).sum(dim=1)
    assert max_rel_error(shared, want) <= SPEC.tolerance({**SPEC.example, "dtype": "float16"})


def test_version_hash_reads_the_kernel_source() -> None:
    assert "moe_scatter_kernel" in SPEC.source_text()
    assert len(SPEC.version_hash()) == 16


@needs_gpu
@pytest.mark.parametrize(
    "problem",
    [
        {"M": 512, "E": 256, "topk": 8, "N": 256, "K": 512, "dtype": "bfloat16", "gemm": "up"},
        {"M": 333, "E": 64, "topk": 8, "N": 384, "K": 256, "dtype": "bfloat16", "gemm": "down"},
        {"M": 4096, "E": 8, "topk": 2, "N": 256, "K": 256, "dtype": "float16", "gemm": "up"},
    ],
)
def test_parallel_alignment_on_the_gpu(problem: Problem) -> None:
    """The alignment's atomics and per-expert programs on a GPU, with many experts and many
    chunks, launched twice on one set of buffers (the counts are zeroed each launch)."""
    inputs = SPEC.build_inputs(SPEC.validate_problem(problem), "cuda")
    launch = SPEC.make_launcher(inputs, _config(64, 64, 64, group=16))
    for _ in range(2):
        inputs["out"].fill_(float("nan"))
        launch()
        assert max_rel_error(inputs["out"], SPEC.reference(inputs)) <= SPEC.tolerance(problem)


@needs_gpu
@pytest.mark.parametrize("tma", [False, True])
def test_down_sum_on_the_gpu(tma: bool) -> None:
    """The top-k sum's bfloat16 atomic adds compiled for a GPU at a Qwen3-30B-A3B-like block's
    down GEMM, launched twice into one output (zeroed by each launch)."""
    problem = SPEC.validate_problem(QWEN_DOWN_SUM)
    inputs = SPEC.build_inputs(problem, "cuda")
    launch = SPEC.make_launcher(inputs, _config(64, 128, 64, group=16, tma=tma))
    for _ in range(2):
        inputs["out"].fill_(float("nan"))
        launch()
        assert max_rel_error(inputs["out"], SPEC.reference(inputs)) <= SPEC.tolerance(problem)


@needs_gpu
@pytest.mark.parametrize("tma", [False, True])
def test_up_silu_on_the_gpu(tma: bool) -> None:
    """The gated epilogue compiled for a GPU (two accumulators; TMA: two descriptor loads per
    step) at a Qwen3-30B-A3B-like block's gate and up GEMM."""
    problem = SPEC.validate_problem(QWEN_UP_SILU)
    inputs = SPEC.build_inputs(problem, "cuda")
    inputs["out"].fill_(float("nan"))
    SPEC.make_launcher(inputs, _config(64, 128, 64, group=16, tma=tma))()
    assert max_rel_error(inputs["out"], SPEC.reference(inputs)) <= SPEC.tolerance(problem)


VENDOR_CASES: list[Problem] = [
    SPEC.example,
    {"M": 33, "E": 8, "topk": 3, "N": 48, "K": 64, "dtype": "bfloat16"},
    {"M": 5, "E": 16, "topk": 1, "N": 32, "K": 32, "dtype": "float16"},
    {**SPEC.example, "gemm": "down"},
    {"M": 7, "E": 5, "topk": 2, "N": 40, "K": 48, "dtype": "bfloat16", "gemm": "down"},
    {"M": 7, "E": 5, "topk": 2, "N": 40, "K": 48, "dtype": "bfloat16", "gemm": "up_silu"},
    {"M": 7, "E": 5, "topk": 3, "N": 40, "K": 48, "dtype": "bfloat16", "gemm": "down_sum"},
]


def test_vendor_paths_without_vllm() -> None:
    assert importlib.util.find_spec("vllm") is None, "this test is for a machine without vLLM"
    assert SPEC.vendor_paths(SPEC.example) == ("torch._grouped_mm",)


@pytest.mark.parametrize(
    "problem", VENDOR_CASES, ids=lambda p: f"{p['M']}x{p['E']}x{p['topk']}-{p.get('gemm', 'up')}"
)
def test_grouped_mm_path_on_the_cpu(problem: Problem) -> None:
    err, _ = vendor_launch(SPEC, problem, "torch._grouped_mm")
    assert err <= SPEC.tolerance(problem)


def test_grouped_mm_path_routes_inside_the_launch() -> None:
    """New routing and routed weights written into the same inputs between two launches of
    one launcher give the new result: the sort, offsets and weighting are timed, as the
    kernel's alignment is."""
    problem = SPEC.validate_problem(
        {"M": 12, "E": 6, "topk": 2, "N": 32, "K": 32, "dtype": "float16"}
    )
    inputs = SPEC.build_inputs(problem, "cpu")
    launch = SPEC.make_vendor_launcher(inputs, "torch._grouped_mm")
    launch()
    before = inputs["out"].clone()
    fresh = SPEC.build_inputs(problem, "cpu")
    inputs["topk_ids"].copy_(fresh["topk_ids"])
    inputs["topk_weights"].copy_(fresh["topk_weights"])
    launch()
    ref = SPEC.reference(inputs)
    assert max_rel_error(inputs["out"], ref) <= SPEC.tolerance(problem)
    assert max_rel_error(before, ref) > SPEC.tolerance(problem)


def test_unknown_vendor_path_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match=r"no vendor path 'torch\.bmm'"):
        SPEC.make_vendor_launcher(SPEC.build_inputs(SPEC.example, "cpu"), "torch.bmm")


@pytest.fixture
def stand_in_vllm(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """An importable package named vllm without vLLM's fused-MoE modules."""
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for name in [n for n in sys.modules if n == "vllm" or n.startswith("vllm.")]:
        del sys.modules[name]


@pytest.mark.usefixtures("stand_in_vllm")
def test_vllm_is_listed_where_importable_and_refused_clearly_when_it_lacks_the_kernel() -> None:
    assert SPEC.vendor_paths(SPEC.example) == ("torch._grouped_mm", "vllm.fused_moe")
    with pytest.raises(SpecError, match=r"vllm\.fused_moe does not run with this vLLM"):
        SPEC.make_vendor_launcher(SPEC.build_inputs(SPEC.example, "cpu"), "vllm.fused_moe")


@needs_gpu
@pytest.mark.parametrize(
    "problem",
    [
        {"M": 512, "E": 64, "topk": 8, "N": 768, "K": 2048, "dtype": "bfloat16", "gemm": "up"},
        {"M": 333, "E": 64, "topk": 8, "N": 2048, "K": 768, "dtype": "bfloat16", "gemm": "down"},
        {"M": 64, "E": 8, "topk": 2, "N": 1024, "K": 512, "dtype": "float16", "gemm": "up"},
        QWEN_UP_SILU,
        QWEN_DOWN_SUM,
    ],
)
def test_grouped_mm_path_on_the_gpu(problem: Problem) -> None:
    """CUTLASS's grouped GEMM (bfloat16 on sm_90+) or torch's fallback, routing included."""
    err, _ = vendor_launch(SPEC, problem, "torch._grouped_mm", "cuda")
    assert err <= SPEC.tolerance(problem)


def test_tma_refuses_weights_that_are_not_contiguous() -> None:
    problem = SPEC.validate_problem(
        {"M": 5, "E": 3, "topk": 3, "N": 40, "K": 72, "dtype": "bfloat16"}
    )
    inputs = SPEC.build_inputs(problem, "cpu")
    inputs["w"] = inputs["w"].transpose(1, 2).contiguous().transpose(1, 2)
    with pytest.raises(SpecError, match="TMA needs the expert weights contiguous"):
        SPEC.make_launcher(inputs, _config(16, tma=True))()


def test_listed_configs_are_the_sweep_winners_on_sm90_only(
    h200_limits: DeviceLimits, mi300x_limits: DeviceLimits, cpu_limits: DeviceLimits
) -> None:
    """The sweeps' winning tiles, each one the H100's and H200's limits admit, none of them the
    default; no list off sm_90+."""
    for limits in (h200_limits, lookup("H100").limits):
        listed = SPEC.listed_configs(limits)
        assert len(listed) == 5 and len({tuple(sorted(c.items())) for c in listed}) == 5
        assert all(SPEC.space.violation(c, limits) is None for c in listed)
        assert SPEC.default_for(limits) not in listed
        assert [c["BLOCK_SIZE_M"] for c in listed] == [128, 128, 64, 16, 16]
    for limits in (mi300x_limits, cpu_limits, lookup("A100").limits):
        assert SPEC.listed_configs(limits) == []
