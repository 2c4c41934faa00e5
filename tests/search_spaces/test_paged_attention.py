"""paged_attention: interpreter correctness (single-pass and split-KV, GQA, ragged), inputs, spaces,
vendor paths."""

import importlib.util
import math
import pathlib
import sys
from collections.abc import Callable, Iterator

import pytest
import torch

from search_spaces import Config, DeviceLimits, Problem, ProblemError, SpecError, Vendor
from search_spaces.accuracy import max_rel_error
from search_spaces.kernels._common import AMD_MAX_STAGES, AMD_PARAMS
from search_spaces.kernels.paged_attention import SPEC
from search_spaces.problem import ProblemValue
from tests.gpu import needs_gpu
from tests.search_spaces.kernel_check import checked_launch, vendor_launch

AMD_NAMES = {p.name for p in AMD_PARAMS}


def cfg(partition: int, bn: int, warps: int = 4, stages: int = 2) -> Config:
    return {"PARTITION_SIZE": partition, "BLOCK_N": bn, "num_warps": warps, "num_stages": stages}


def problem(**changes: ProblemValue) -> Problem:
    return {**SPEC.example, **changes}


CASES: list[tuple[Problem, Config]] = [
    (SPEC.example, SPEC.default_config(Vendor.CPU)),
    (SPEC.example, cfg(0, 32)),
    # Lengths 300, 95, 88 with 256-token partitions: two partitions, the short sequences' second
    # one is empty and must not disturb the reduction.
    (problem(context_len=300), cfg(256, 64)),
    # A contiguous cache: each sequence's pages in order, the whole context's worth.
    (problem(context_len=300, cache="contiguous"), cfg(256, 64)),
    (problem(context_len=300, kv_heads=4, page_size=8), cfg(256, 16, warps=1)),
    # BLOCK_N below the page size: several tiles per page.
    (problem(context_len=100, page_size=32, pattern="uniform"), cfg(0, 16, stages=1)),
    (problem(head_dim=128, q_heads=8, kv_heads=1, context_len=600), cfg(512, 128)),
    (problem(dtype="bfloat16", context_len=300), cfg(256, 32)),
    (problem(dtype="bfloat16", kv_heads=4, batch=2), cfg(0, 64, warps=8)),
]


@pytest.mark.parametrize(
    ("prob", "config"),
    CASES,
    ids=[
        f"{p['pattern']}-ctx{p['context_len']}-h{p['q_heads']}/{p['kv_heads']}-d{p['head_dim']}-"
        f"pg{p['page_size']}-{p['dtype']}-part{c['PARTITION_SIZE']}-n{c['BLOCK_N']}"
        for p, c in CASES
    ],
)
def test_correct_in_interpreter(prob: Problem, config: Config, cpu_limits: DeviceLimits) -> None:
    err, inputs = checked_launch(SPEC, prob, config, cpu_limits)
    assert err <= SPEC.tolerance(SPEC.validate_problem(prob))
    assert inputs["out"].dtype == inputs["q"].dtype


def test_checker_needs_the_block_table(cpu_limits: DeviceLimits) -> None:
    """Reading pages in table order rather than through a shuffled table gives a wrong answer."""
    _, inputs = checked_launch(SPEC, SPEC.example, SPEC.default_config(Vendor.CPU), cpu_limits)
    tables = inputs["block_tables"].clone()
    lens = inputs["context_lens"].tolist()
    page_size = inputs["k_cache"].shape[1]
    first = 0
    for b, n in enumerate(lens):
        pages = -(-n // page_size)
        tables[b, :pages] = torch.arange(first, first + pages, dtype=torch.int32)
        first += pages
    in_order = SPEC.reference({**inputs, "block_tables": tables})
    assert max_rel_error(inputs["out"], in_order) > 10 * SPEC.tolerance(SPEC.example)


def test_inputs_are_paged_through_a_random_permutation() -> None:
    prob = SPEC.validate_problem(problem(batch=4, context_len=100, page_size=16))
    lens = SPEC.lengths(prob)
    pages = [-(-n // 16) for n in lens]
    a, b = SPEC.build_inputs(prob, "cpu"), SPEC.build_inputs(prob, "cpu")
    used = sum(pages)
    assert tuple(a["k_cache"].shape) == tuple(a["v_cache"].shape) == (used + 1, 16, 2, 64)
    assert tuple(a["block_tables"].shape) == (4, 7)
    assert a["block_tables"].dtype == a["context_lens"].dtype == torch.int32
    assert a["context_lens"].tolist() == lens
    handed_out = torch.cat([a["block_tables"][i, :n] for i, n in enumerate(pages)])
    assert sorted(handed_out.tolist()) == list(range(used))
    # Entries past each sequence's pages point at the NaN spare page.
    for i, n in enumerate(pages):
        assert set(a["block_tables"][i, n:].tolist()) <= {used}
    assert bool(a["k_cache"][used].isnan().all()) and bool(a["v_cache"][used].isnan().all())
    assert not torch.equal(a["k_cache"][:used], b["k_cache"][:used])


def test_block_tables_are_shuffled() -> None:
    """With ~60 pages, an unshuffled (ascending) hand-out would be a 1-in-60! accident."""
    prob = SPEC.validate_problem(problem(batch=4, context_len=160, page_size=8))
    inputs = SPEC.build_inputs(prob, "cpu")
    pages = [-(-n // 8) for n in SPEC.lengths(prob)]
    handed_out = torch.cat([inputs["block_tables"][i, :n] for i, n in enumerate(pages)]).tolist()
    assert handed_out != sorted(handed_out)


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"q_heads": 6, "kv_heads": 4}, "multiple of kv_heads"),
        ({"head_dim": 80}, "head_dim=80"),
        ({"dtype": "float32"}, "float32"),
        ({"pattern": "zipf"}, "pattern"),
        ({"page_size": 0}, "page_size"),
    ],
)
def test_bad_problems_are_refused(changes: dict[str, ProblemValue], match: str) -> None:
    with pytest.raises(ProblemError, match=match):
        SPEC.validate_problem({**SPEC.example, **changes})


def test_page_size_defaults_to_16() -> None:
    raw = {k: v for k, v in SPEC.example.items() if k != "page_size"}
    assert SPEC.validate_problem(raw)["page_size"] == 16


def test_flops_and_bytes() -> None:
    prob = SPEC.validate_problem(problem(pattern="uniform", batch=2, context_len=40))
    assert SPEC.flops(prob) == 4 * 80 * 4 * 64
    kv = 2 * 80 * 2 * 64 * 2
    q_out = 2 * 2 * 4 * 64 * 2
    tables = 4 * (3 + 3) + 4 * 2
    assert SPEC.bytes_moved(prob) == kv + q_out + tables


def test_space_counts(h200_limits: DeviceLimits, mi300x_limits: DeviceLimits) -> None:
    assert SPEC.space.total(Vendor.NVIDIA) == 5 * 5 * 4 * 4 * 2  # with PDL
    # NVIDIA: 2 B * 128 * (2 * BLOCK_N + 16) <= 232448 holds for every BLOCK_N up to 256.
    assert SPEC.space.count(h200_limits) == 400 * 2
    amd = SPEC.space.enumerate(mi300x_limits)
    assert all(set(c) >= AMD_NAMES for c in amd)
    assert max(int(c["num_stages"]) for c in amd) <= AMD_MAX_STAGES
    # AMD: 2 B * 128 * BLOCK_N * stages <= 64 KiB: BLOCK_N * stages <= 256 -> 9 of 10 pairs.
    pairs = {(c["BLOCK_N"], c["num_stages"]) for c in amd}
    assert len(pairs) == 9 and (256, 2) not in pairs
    assert len(amd) == 9 * 5 * 4 * 16
    assert {c["PARTITION_SIZE"] for c in amd} == {0, 256, 512, 1024, 2048}


def test_defaults_are_valid(
    h200_limits: DeviceLimits, mi300x_limits: DeviceLimits, cpu_limits: DeviceLimits
) -> None:
    for limits in (h200_limits, mi300x_limits, cpu_limits):
        SPEC.space.validate(SPEC.default_for(limits), limits)


def test_reference_matches_torch_sdpa() -> None:
    """The gather reference agrees with torch's SDPA on the gathered, GQA-expanded context."""
    prob = SPEC.validate_problem(problem(pattern="uniform", context_len=40))
    inputs = SPEC.build_inputs(prob, "cpu")
    ref = SPEC.reference(inputs)
    k_cache, v_cache = inputs["k_cache"], inputs["v_cache"]
    for b in range(int(prob["batch"])):
        pages = inputs["block_tables"][b, :3].long()
        k = k_cache[pages].flatten(0, 1)[:40].float().transpose(0, 1).repeat_interleave(2, dim=0)
        v = v_cache[pages].flatten(0, 1)[:40].float().transpose(0, 1).repeat_interleave(2, dim=0)
        q = inputs["q"][b].float().unsqueeze(1)
        sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=1 / math.sqrt(64))
        torch.testing.assert_close(ref[b], sdpa.squeeze(1), atol=1e-5, rtol=1e-5)


class _Recorder:
    """Stands in for a Triton kernel: records the keyword arguments of each launch."""

    def __init__(self) -> None:
        self.launches: list[dict[str, object]] = []

    def __getitem__(self, grid: object) -> Callable[..., None]:
        def launch(*args: object, **kwargs: object) -> None:
            self.launches.append(kwargs)

        return launch


def test_amd_options_reach_the_attention_kernel_only(
    monkeypatch: pytest.MonkeyPatch, mi300x_limits: DeviceLimits
) -> None:
    import search_spaces.kernels._paged_attention_kernels as kernels

    config = {**SPEC.default_for(mi300x_limits), "PARTITION_SIZE": 256}
    SPEC.space.validate(config, mi300x_limits)
    params = set(kernels.paged_attention_kernel.arg_names)
    attend, reduce = _Recorder(), _Recorder()
    monkeypatch.setattr(kernels, "paged_attention_kernel", attend)
    monkeypatch.setattr(kernels, "paged_attention_reduce_kernel", reduce)
    prob = SPEC.validate_problem(problem(context_len=300))
    SPEC.make_launcher(SPEC.build_inputs(prob, "cpu"), config)()
    (kwargs,) = attend.launches
    options = {k: v for k, v in kwargs.items() if k not in params}
    assert options == {k: config[k] for k in ("num_warps", "num_stages", *AMD_NAMES)}
    assert kwargs["PARTITION_SIZE"] == 256
    (reduce_kwargs,) = reduce.launches
    assert not (AMD_NAMES | {"num_warps", "num_stages"}) & set(reduce_kwargs)


def test_amd_default_runs_in_the_interpreter(mi300x_limits: DeviceLimits) -> None:
    err, _ = checked_launch(SPEC, SPEC.example, SPEC.default_for(mi300x_limits), mi300x_limits)
    assert err <= SPEC.tolerance(SPEC.example)


@pytest.mark.parametrize("pdl", [False, True])
def test_pdl_reaches_both_kernels(
    monkeypatch: pytest.MonkeyPatch, h200_limits: DeviceLimits, pdl: bool
) -> None:
    """With PDL the partition kernel and the reduction both launch with launch_pdl and wait."""
    import search_spaces.kernels._paged_attention_kernels as kernels

    config = {**SPEC.default_for(h200_limits), "PARTITION_SIZE": 256, "PDL": pdl}
    SPEC.space.validate(config, h200_limits)
    attend, reduce = _Recorder(), _Recorder()
    monkeypatch.setattr(kernels, "paged_attention_kernel", attend)
    monkeypatch.setattr(kernels, "paged_attention_reduce_kernel", reduce)
    prob = SPEC.validate_problem(problem(context_len=300))
    SPEC.make_launcher(SPEC.build_inputs(prob, "cpu"), config)()
    for (kwargs,) in (attend.launches, reduce.launches):
        assert kwargs["PDL"] is pdl and kwargs.get("launch_pdl", False) is pdl


VENDOR_CASES = [
    SPEC.example,
    problem(pattern="uniform", kv_heads=4),
    problem(context_len=300, q_heads=8, kv_heads=1, page_size=8, head_dim=128),
    problem(dtype="bfloat16", batch=5, context_len=200, page_size=32),
]


def test_vendor_paths_without_flash_attn() -> None:
    assert importlib.util.find_spec("flash_attn") is None, "for a machine without flash-attn"
    assert SPEC.vendor_paths(SPEC.example) == ("sdpa_gathered",)
    contiguous = SPEC.validate_problem({**SPEC.example, "cache": "contiguous"})
    assert SPEC.vendor_paths(contiguous) == ("sdpa_contiguous",)


@pytest.mark.parametrize("name", ["sdpa_gathered", "sdpa_contiguous"])
@pytest.mark.parametrize(
    "prob", VENDOR_CASES, ids=lambda p: f"{p['pattern']}-ctx{p['context_len']}-{p['dtype']}"
)
def test_gathered_sdpa_on_the_cpu(prob: Problem, name: str) -> None:
    """Ragged contexts too: slots past a context (the NaN spare page of a paged cache) are never
    read; sdpa_contiguous on the contiguous layout of the same problem."""
    if name == "sdpa_contiguous":
        prob = {**prob, "cache": "contiguous"}
    err, _ = vendor_launch(SPEC, prob, name)
    assert err <= SPEC.tolerance(SPEC.validate_problem(prob))


def test_gathered_sdpa_reads_the_block_table_each_launch() -> None:
    """Two sequences' block tables swapped between launches of one launcher: the second launch
    attends over the swapped contexts (the gather is timed, as the kernel's table reads are)."""
    prob = SPEC.validate_problem(problem(pattern="uniform"))
    inputs = SPEC.build_inputs(prob, "cpu")
    launch = SPEC.make_vendor_launcher(inputs, "sdpa_gathered")
    launch()
    before = inputs["out"]
    inputs["block_tables"][[0, 1]] = inputs["block_tables"][[1, 0]]
    launch()
    ref = SPEC.reference(inputs)
    assert max_rel_error(inputs["out"], ref) <= SPEC.tolerance(prob)
    assert max_rel_error(before, ref) > SPEC.tolerance(prob)


def test_contiguous_sdpa_reads_the_cache_as_it_is_and_refuses_a_paged_one() -> None:
    """sdpa_contiguous attends over a view of the contiguous cache: contents written after the
    launcher was made are what the next launch reads. On a paged cache it refuses in one line."""
    prob = SPEC.validate_problem(problem(pattern="mixed", cache="contiguous"))
    inputs = SPEC.build_inputs(prob, "cpu")
    launch = SPEC.make_vendor_launcher(inputs, "sdpa_contiguous")
    inputs["k_cache"].copy_(torch.randn_like(inputs["k_cache"]))
    inputs["v_cache"].copy_(torch.randn_like(inputs["v_cache"]))
    launch()
    assert max_rel_error(inputs["out"], SPEC.reference(inputs)) <= SPEC.tolerance(prob)
    paged = SPEC.build_inputs(SPEC.validate_problem(problem(pattern="mixed")), "cpu")
    with pytest.raises(SpecError, match="sdpa_contiguous needs the contiguous cache") as info:
        SPEC.make_vendor_launcher(paged, "sdpa_contiguous")
    assert "\n" not in str(info.value)


def test_unknown_vendor_path_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match="no vendor path 'sdpa_flash'"):
        SPEC.make_vendor_launcher(SPEC.build_inputs(SPEC.example, "cpu"), "sdpa_flash")


@pytest.fixture
def stand_in_flash_attn(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """An importable package named flash_attn without flash_attn_with_kvcache."""
    (tmp_path / "flash_attn").mkdir()
    (tmp_path / "flash_attn" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    sys.modules.pop("flash_attn", None)


@pytest.mark.usefixtures("stand_in_flash_attn")
def test_flash_attn_is_listed_where_importable_and_refused_clearly_without_its_kernel() -> None:
    names = ("sdpa_gathered", "flash_attn.flash_attn_with_kvcache")
    assert SPEC.vendor_paths(SPEC.example) == names
    with pytest.raises(SpecError, match="flash_attn_with_kvcache is not importable"):
        SPEC.make_vendor_launcher(SPEC.build_inputs(SPEC.example, "cpu"), names[1])


@needs_gpu
@pytest.mark.parametrize(
    "prob",
    [
        problem(
            batch=64, context_len=4096, pattern="uniform", q_heads=32, kv_heads=8, head_dim=128
        ),
        problem(batch=33, context_len=2000, q_heads=16, kv_heads=16, dtype="bfloat16"),
    ],
    ids=["uniform-gqa", "mixed-mha"],
)
@pytest.mark.parametrize("name", ["sdpa_gathered", "sdpa_contiguous"])
def test_gathered_sdpa_on_the_gpu(prob: Problem, name: str) -> None:
    if name == "sdpa_contiguous":
        prob = {**prob, "cache": "contiguous"}
    err, _ = vendor_launch(SPEC, prob, name, "cuda")
    assert err <= SPEC.tolerance(SPEC.validate_problem(prob))
