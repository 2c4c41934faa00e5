"""flash_attention: interpreter correctness (ragged, causal, GQA), problem checks, space counts,
the SDPA vendor paths."""

import math
from collections.abc import Callable

import pytest
import torch

from search_spaces import Config, DeviceLimits, Problem, ProblemError, Vendor
from search_spaces.accuracy import max_rel_error
from search_spaces.errors import SpecError
from search_spaces.kernels._common import AMD_MAX_STAGES, AMD_PARAMS, sdpa
from search_spaces.kernels._flash_attention_kernels import flash_attention_fwd_kernel
from search_spaces.kernels._seqlens import seq_lengths
from search_spaces.kernels.flash_attention import SPEC, study_subspace
from search_spaces.problem import ProblemValue
from tests.gpu import needs_gpu
from tests.search_spaces.kernel_check import checked_launch, vendor_launch

AMD_NAMES = {p.name for p in AMD_PARAMS}
# No device limits: huge shared memory, and a warp so wide that no register rule binds.
UNLIMITED = DeviceLimits(Vendor.NVIDIA, "unlimited", "sm_90", 1 << 40, 1 << 20, 1 << 10, 1, 1 << 20)


def cfg(
    bm: int,
    bn: int,
    pre_load_v: bool = False,
    warps: int = 4,
    stages: int = 2,
    tma: bool = False,
    heavy_first: bool = False,
    split: bool = False,
) -> Config:
    return {
        "BLOCK_M": bm,
        "BLOCK_N": bn,
        "PRE_LOAD_V": pre_load_v,
        "num_warps": warps,
        "num_stages": stages,
        "TMA": tma,
        "HEAVY_FIRST": heavy_first,
        "SPLIT_M": split,
    }


def gluon(bn: int, stages: int = 2, **flags: bool) -> Config:
    """A GLUON config: 128 x ``bn`` tiles on 4 warps through TMA, a ``stages``-deep ring, and
    ``flags`` (GLUON_* options) on."""
    return {**cfg(128, bn, stages=stages, tma=True), "GLUON": True, **flags}


def problem(**changes: ProblemValue) -> Problem:
    return {**SPEC.example, **changes}


CASES: list[tuple[Problem, Config]] = [
    (SPEC.example, SPEC.default_config(Vendor.CPU)),
    (SPEC.example, cfg(32, 16, pre_load_v=True)),
    # 40 = 2.5 blocks of 16: partial key blocks in both the unmasked and the diagonal loops.
    (problem(max_seqlen=40, kv_heads=4), cfg(16, 16)),
    (problem(causal=False, pattern="uniform"), cfg(32, 32, pre_load_v=True)),
    (problem(causal=False, batch=3, q_heads=4, kv_heads=1), cfg(16, 16)),
    (problem(head_dim=128, batch=3), cfg(32, 16)),
    (problem(dtype="bfloat16", max_seqlen=24), cfg(16, 16, pre_load_v=True)),
    (problem(dtype="bfloat16", causal=False, pattern="uniform", max_seqlen=20), cfg(64, 32)),
    # TMA: ragged sequences whose last blocks read the next sequence's rows (and, for the last
    # sequence, rows past the tensor, which read 0), in both loops, with and without GQA.
    (problem(max_seqlen=40), cfg(16, 16, tma=True)),
    (problem(max_seqlen=40, batch=3), cfg(32, 16, pre_load_v=True, tma=True, heavy_first=True)),
    (problem(causal=False, kv_heads=4, head_dim=128), cfg(32, 32, tma=True)),
    (problem(dtype="bfloat16", max_seqlen=24, batch=3), cfg(16, 16, tma=True)),
    (problem(max_seqlen=40, batch=3), cfg(16, 16, heavy_first=True)),
    # Key blocks wider than row blocks: the diagonal band spans one or two key blocks.
    (problem(max_seqlen=40, batch=3), cfg(16, 32)),
    (problem(max_seqlen=72, batch=2), cfg(16, 64, tma=True)),
    (problem(causal=False, max_seqlen=40), cfg(16, 32, pre_load_v=True)),
    # Row blocks split in two halves: the second half starts past a sequence's end, the halves
    # straddle the diagonal, with pointers and tensor descriptors.
    (problem(max_seqlen=40, batch=3), cfg(32, 16, split=True)),
    (problem(max_seqlen=72, batch=3), cfg(64, 32, tma=True, heavy_first=True, split=True)),
    (problem(causal=False, kv_heads=4, head_dim=128), cfg(32, 32, True, tma=True, split=True)),
    (problem(dtype="bfloat16", max_seqlen=24, batch=3), cfg(32, 64, split=True)),
]


@pytest.mark.parametrize(
    ("prob", "config"),
    CASES,
    ids=[
        f"{p['pattern']}-s{p['max_seqlen']}-h{p['q_heads']}/{p['kv_heads']}-d{p['head_dim']}-"
        f"{'causal' if p['causal'] else 'full'}-{p['dtype']}-m{c['BLOCK_M']}n{c['BLOCK_N']}"
        f"{'-plv' if c['PRE_LOAD_V'] else ''}{'-tma' if c['TMA'] else ''}"
        f"{'-heavy' if c['HEAVY_FIRST'] else ''}{'-split' if c['SPLIT_M'] else ''}"
        for p, c in CASES
    ],
)
def test_correct_in_interpreter(prob: Problem, config: Config, cpu_limits: DeviceLimits) -> None:
    err, inputs = checked_launch(SPEC, prob, config, cpu_limits)
    assert err <= SPEC.tolerance(SPEC.validate_problem(prob))
    assert inputs["out"].dtype == inputs["q"].dtype


def test_checker_tells_causal_from_full(cpu_limits: DeviceLimits) -> None:
    """The causal output is far from the full-attention reference: the mask really matters."""
    _, inputs = checked_launch(SPEC, SPEC.example, SPEC.default_config(Vendor.CPU), cpu_limits)
    full = SPEC.reference({**inputs, "causal": False})
    assert max_rel_error(inputs["out"], full) > 10 * SPEC.tolerance(SPEC.example)


def test_inputs_are_packed_ragged_and_fresh() -> None:
    prob = SPEC.validate_problem(problem(batch=4, max_seqlen=64))
    a, b = SPEC.build_inputs(prob, "cpu"), SPEC.build_inputs(prob, "cpu")
    lens = SPEC.lengths(prob)
    assert a["cu_seqlens"].tolist() == [sum(lens[:i]) for i in range(len(lens) + 1)]
    assert a["cu_seqlens"].dtype == torch.int32
    assert tuple(a["q"].shape) == (sum(lens), 4, 64)
    assert tuple(a["k"].shape) == tuple(a["v"].shape) == (sum(lens), 2, 64)
    assert tuple(a["out"].shape) == tuple(a["q"].shape)
    assert torch.equal(a["cu_seqlens"], b["cu_seqlens"])
    assert not torch.equal(a["q"], b["q"])


def test_seq_length_patterns() -> None:
    assert seq_lengths("uniform", 3, 50) == [50, 50, 50]
    mixed = seq_lengths("mixed", 16, 512)
    assert mixed == seq_lengths("mixed", 16, 512)
    assert mixed[0] == 512
    assert all(64 <= n <= 512 for n in mixed)
    assert len(set(mixed)) > 4
    assert seq_lengths("mixed", 3, 1) == [1, 1, 1]
    with pytest.raises(ProblemError, match="pattern"):
        seq_lengths("zipf", 3, 50)


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"q_heads": 6, "kv_heads": 4}, "multiple of kv_heads"),
        ({"head_dim": 96}, "head_dim=96"),
        ({"dtype": "float32"}, "float32"),
        ({"pattern": "zipf"}, "pattern"),
        ({"causal": "maybe"}, "causal"),
        ({"batch": 0}, "batch"),
    ],
)
def test_bad_problems_are_refused(changes: dict[str, object], match: str) -> None:
    with pytest.raises(ProblemError, match=match):
        SPEC.validate_problem({**SPEC.example, **changes})


def test_pattern_defaults_to_uniform() -> None:
    raw = {k: v for k, v in SPEC.example.items() if k != "pattern"}
    assert SPEC.validate_problem(raw)["pattern"] == "uniform"


def test_flops_and_bytes() -> None:
    prob = SPEC.validate_problem(problem(pattern="uniform", batch=2, max_seqlen=32))
    full = SPEC.validate_problem({**prob, "causal": False})
    assert SPEC.flops(full) == 4 * (2 * 32 * 32) * 4 * 64
    assert SPEC.flops(prob) == 4 * (2 * 32 * 33 // 2) * 4 * 64
    # q and out: 4 heads each, k and v: 2 heads each; 64 tokens, 2 bytes; cu_seqlens 3 int32.
    assert SPEC.bytes_moved(prob) == 64 * (4 + 4 + 2 + 2) * 64 * 2 + 3 * 4


def test_space_holds_the_studys_450_configs() -> None:
    # The study's 5 x 5 x 2 x 3 x 5, with a third stage value and nine Hopper booleans.
    assert SPEC.space.total(Vendor.NVIDIA) == 5 * 5 * 2 * 3 * 6 * 2**9
    configs = SPEC.space.enumerate(UNLIMITED)
    study = study_subspace(configs)
    assert len(study) == 450
    assert all(int(c["BLOCK_M"]) >= int(c["BLOCK_N"]) for c in study)
    assert {int(c["num_stages"]) for c in study} == {1, 2, 4, 6, 8}
    # The vendor default is one of the study's; sm_90's (3 stages, TMA) is not.
    assert SPEC.default_config(Vendor.NVIDIA) in study
    assert SPEC.default_for(UNLIMITED) not in study
    # 25 (BLOCK_M, BLOCK_N) pairs instead of the study's 15, the 20 with BLOCK_M >= 32 with
    # SPLIT_M both ways, 6 stage values instead of 5, TMA and HEAVY_FIRST both ways,
    # WARP_SPECIALIZE on only at 8 warps (of 2, 4, 8); and GLUON's 128 x (64 or 128) tiles on 4
    # warps at the 5 stage values >= 2, GLUON_OVERLAP (with GLUON_PINGPONG both ways) and
    # GLUON_PERSISTENT both ways, and the 128-key tiles doubled (GLUON_WIDE_KEYS) without the
    # overlap.
    assert len(configs) == 450 * (25 + 20) // 15 * 6 // 5 * 4 * 4 // 3 + 2 * 5 * 3 * 2 + 5 * 2


def test_hopper_parameters_exist_where_they_run(
    h200_limits: DeviceLimits, cpu_limits: DeviceLimits, mi300x_limits: DeviceLimits
) -> None:
    """TMA, HEAVY_FIRST and SPLIT_M on NVIDIA and in the interpreter (which runs tensor
    descriptors); WARP_SPECIALIZE on NVIDIA GPUs only; none on AMD; TMA and warp specialization
    need sm_90; SPLIT_M needs row blocks of 32 or more."""
    from workers.device_table import lookup

    hopper = {"TMA", "HEAVY_FIRST", "WARP_SPECIALIZE", "SPLIT_M"}
    assert hopper <= set(SPEC.default_for(h200_limits))
    assert not {"WARP_SPECIALIZE"} & set(SPEC.default_for(cpu_limits))
    assert {"TMA", "HEAVY_FIRST", "SPLIT_M"} <= set(SPEC.default_for(cpu_limits))
    small_split = {**SPEC.default_for(cpu_limits), "SPLIT_M": True, "BLOCK_M": 16}
    violation = SPEC.space.violation(small_split, cpu_limits)
    assert violation is not None and violation.rule == "split-m-rows"
    assert SPEC.space.violation({**small_split, "BLOCK_M": 32}, cpu_limits) is None
    assert not hopper & set(SPEC.default_for(mi300x_limits))
    a100 = lookup("A100").limits
    default_8w = {**SPEC.default_for(h200_limits), "num_warps": 8}
    for name in ("TMA", "WARP_SPECIALIZE"):
        on = {**SPEC.default_for(a100), name: True}
        violation = SPEC.space.violation(on, a100)
        assert violation is not None and violation.rule.endswith("-arch")
        assert SPEC.space.violation({**default_8w, name: True}, h200_limits) is None
    assert SPEC.space.violation({**SPEC.default_for(cpu_limits), "TMA": True}, cpu_limits) is None
    # Warp specialization with 4 warps does not compile (Triton 3.6, sm_90): outside the space.
    four = {**SPEC.default_for(h200_limits), "WARP_SPECIALIZE": True, "num_warps": 4}
    violation = SPEC.space.violation(four, h200_limits)
    assert violation is not None and violation.rule == "warp-specialize-arch"
    assert SPEC.space.violation({**four, "num_warps": 8}, h200_limits) is None


def test_gluon_is_an_sm_90_kernel_with_its_own_tiles(
    h200_limits: DeviceLimits, cpu_limits: DeviceLimits, mi300x_limits: DeviceLimits
) -> None:
    """GLUON on sm_90 only (not sm_80, not Blackwell, not AMD or the interpreter), with its one
    row block, 64- or 128-key tiles on 4 warps, TMA on and the Triton kernel's own options off;
    GLUON_OVERLAP and GLUON_PERSISTENT only with it; GLUON_WIDE_KEYS only on its 128-key tiles,
    without the overlap, where two 256-key tiles per stage fit at head_dim 64; GLUON_PINGPONG only
    with the overlap."""
    from dataclasses import replace

    from workers.device_table import lookup

    gluon = {**SPEC.default_for(h200_limits), "BLOCK_M": 128, "num_stages": 2, "GLUON": True}
    assert SPEC.space.violation(gluon, h200_limits) is None
    assert SPEC.space.violation({**gluon, "GLUON_OVERLAP": True}, h200_limits) is None
    assert SPEC.space.violation({**gluon, "GLUON_PERSISTENT": True}, h200_limits) is None
    for limits in (lookup("A100").limits, replace(h200_limits, arch="sm_100")):
        violation = SPEC.space.violation({**gluon, "TMA": False}, limits)
        assert violation is not None and violation.rule == "gluon-arch"
    for change in (
        {"BLOCK_M": 64},
        {"BLOCK_N": 32},
        {"num_warps": 8},
        {"num_stages": 1},
        {"TMA": False},
        {"SPLIT_M": True},
        {"HEAVY_FIRST": True},
        {"PRE_LOAD_V": True},
    ):
        violation = SPEC.space.violation({**gluon, **change}, h200_limits)
        assert violation is not None and violation.rule == "gluon-tile", change
    lone = {**SPEC.default_for(h200_limits), "GLUON_OVERLAP": True}
    violation = SPEC.space.violation(lone, h200_limits)
    assert violation is not None and violation.rule == "gluon-overlap"
    lone = {**SPEC.default_for(h200_limits), "GLUON_PERSISTENT": True}
    violation = SPEC.space.violation(lone, h200_limits)
    assert violation is not None and violation.rule == "gluon-persistent"
    wide = {**gluon, "BLOCK_N": 128, "num_stages": 3, "GLUON_WIDE_KEYS": True}
    assert SPEC.space.violation(wide, h200_limits) is None
    assert SPEC.space.violation({**wide, "GLUON_PERSISTENT": True}, h200_limits) is None
    for change in (
        {"GLUON": False, "TMA": True},
        {"BLOCK_N": 64},
        {"GLUON_OVERLAP": True},
    ):
        violation = SPEC.space.violation({**wide, **change}, h200_limits)
        assert violation is not None and violation.rule == "gluon-wide-keys", change
    overlap = {**gluon, "GLUON_OVERLAP": True}
    assert SPEC.space.violation({**overlap, "GLUON_PINGPONG": True}, h200_limits) is None
    violation = SPEC.space.violation({**gluon, "GLUON_PINGPONG": True}, h200_limits)
    assert violation is not None and violation.rule == "gluon-pingpong"
    gluon_names = {
        "GLUON",
        "GLUON_OVERLAP",
        "GLUON_PERSISTENT",
        "GLUON_WIDE_KEYS",
        "GLUON_PINGPONG",
    }
    for limits in (cpu_limits, mi300x_limits):
        assert not gluon_names & set(SPEC.default_for(limits))
    assert not any(c.get("GLUON") for c in study_subspace(SPEC.space.enumerate(h200_limits)))


def test_gluon_off_the_gpu_is_a_spec_error() -> None:
    inputs = SPEC.build_inputs(SPEC.validate_problem(problem(head_dim=128)), "cpu")
    config = gluon(64, stages=2)
    with pytest.raises(SpecError, match="GLUON runs on sm_90"):
        SPEC.make_launcher(inputs, config)


def test_tma_refuses_a_layout_it_cannot_describe() -> None:
    prob = SPEC.validate_problem(problem(kv_heads=4))
    inputs = SPEC.build_inputs(prob, "cpu")
    # Heads interleaved with another tensor: a token's heads are not contiguous.
    wide = torch.randn(inputs["k"].shape[0], 4, 2, 64, dtype=inputs["k"].dtype)
    inputs["k"] = wide[:, :, 0]
    with pytest.raises(SpecError, match="TMA"):
        SPEC.make_launcher(inputs, cfg(16, 16, tma=True))


def test_h200_count_follows_the_shared_memory_and_register_rules(
    h200_limits: DeviceLimits,
) -> None:
    # Written out again: 2 B * 128 * (Q rows + K/V rows per stage; one stage shares one buffer),
    # and at most 256 fp32 score + accumulator values per thread at head_dim 128.
    def fits(bm: int, bn: int, stages: int, warps: int) -> bool:
        smem = 256 * (bm + (bn if stages == 1 else 2 * bn * stages)) <= 232448
        return smem and (bm * bn + bm * 128) <= 256 * warps * 32

    blocks = (16, 32, 64, 128, 256)
    # x 2 for PRE_LOAD_V, x 4 for TMA and HEAVY_FIRST, x 2 for WARP_SPECIALIZE at 8 warps, x 2
    # for SPLIT_M at BLOCK_M >= 32.
    expected = 8 * sum(
        fits(bm, bn, s, w) * (2 if w == 8 else 1) * (2 if bm >= 32 else 1)
        for bm in blocks
        for bn in blocks
        for s in (1, 2, 3, 4, 6, 8)
        for w in (2, 4, 8)
    )
    # GLUON: 128 x (64 or 128) on 4 warps at stages >= 2 where they fit, GLUON_OVERLAP (with
    # GLUON_PINGPONG both ways) and GLUON_PERSISTENT both ways.
    gluon = 6 * sum(fits(128, bn, s, 4) for bn in (64, 128) for s in (2, 3, 4, 6, 8))
    # GLUON_WIDE_KEYS: 256-key tiles without the overlap, persistent or not, where two K and V
    # tiles per stage fit at head_dim 64: 2*64*(128 + 2*256*s) bytes.
    wide = 2 * sum(
        128 * (128 + 512 * s) <= h200_limits.shared_mem_per_block for s in (2, 3, 4, 6, 8)
    )
    assert SPEC.space.count(h200_limits) == expected + gluon + wide == 4912 + 36 + 4
    # The study's configs on the H200, as before the Hopper parameters came.
    assert len(study_subspace(SPEC.space.enumerate(h200_limits))) == 268
    assert {"BLOCK_M": 128, "BLOCK_N": 64, "num_stages": 8} not in [
        {k: c[k] for k in ("BLOCK_M", "BLOCK_N", "num_stages")}
        for c in SPEC.space.iter_valid(h200_limits)
    ]


def test_mi300x_enumeration(mi300x_limits: DeviceLimits) -> None:
    configs = SPEC.space.enumerate(mi300x_limits)
    assert all(set(c) >= AMD_NAMES for c in configs)
    assert max(int(c["num_stages"]) for c in configs) <= AMD_MAX_STAGES
    assert {c["waves_per_eu"] for c in configs} == {0, 1, 2, 4}
    shapes = {(c["BLOCK_M"], c["BLOCK_N"], c["num_stages"]) for c in configs}
    # 64 KiB LDS: every (BLOCK_M >= BLOCK_N) pair at 1 and 2 stages but 256x256 double-buffered
    # (K and V alone need 128 KiB); ROCm's 256x64 and 128x128 tiles fit.
    assert len(shapes) == 15 * 2 - 1
    assert (256, 256, 2) not in shapes
    assert {(256, 64, 1), (128, 128, 2)} <= shapes
    # Registers: at most 256 fp32 score + accumulator values per thread of a 64-wide wavefront.
    warps = {
        shape: sum((shape[0] * shape[1] + shape[0] * 128) <= 256 * w * 64 for w in (2, 4, 8))
        for shape in shapes
    }
    assert len(configs) == sum(warps.values()) * 2 * 16 == 2464


def test_defaults_are_valid(
    h200_limits: DeviceLimits, mi300x_limits: DeviceLimits, cpu_limits: DeviceLimits
) -> None:
    for limits in (h200_limits, mi300x_limits, cpu_limits):
        SPEC.space.validate(SPEC.default_for(limits), limits)
    assert SPEC.default_config(Vendor.AMD)["waves_per_eu"] == 2


def test_hopper_classes_default_to_the_tma_tile(
    h200_limits: DeviceLimits, mi300x_limits: DeviceLimits, cpu_limits: DeviceLimits
) -> None:
    """sm_90+ with room for it: 64x64, 4 warps, 3 stages, TMA; sm_80, a class whose shared memory
    cannot hold it, AMD and the interpreter: the vendor's default."""
    from dataclasses import replace

    from workers.device_table import lookup

    hopper = SPEC.default_for(h200_limits)
    assert hopper == {**SPEC.default_config(Vendor.NVIDIA), "num_stages": 3, "TMA": True}
    assert SPEC.default_for(lookup("A100").limits) == SPEC.default_config(Vendor.NVIDIA)
    small = replace(h200_limits, arch="sm_120", shared_mem_per_block=101376)
    assert SPEC.space.violation(hopper, small) is not None
    assert SPEC.default_for(small) == SPEC.default_config(Vendor.NVIDIA)
    assert SPEC.default_for(mi300x_limits) == SPEC.default_config(Vendor.AMD)
    assert SPEC.default_for(cpu_limits) == SPEC.default_config(Vendor.CPU)


def test_hopper_classes_list_the_split_tiles(
    h200_limits: DeviceLimits, mi300x_limits: DeviceLimits, cpu_limits: DeviceLimits
) -> None:
    """A new study on sm_90+ asks three split 128-row tiles after the default, then on sm_90
    five GLUON configs (the first two with the ping-pong, the last two with 256-key tiles, the
    second and the fifth persistent); other classes none."""
    from dataclasses import replace

    from workers.device_table import lookup

    listed = SPEC.listed_configs(h200_limits)
    assert len(listed) == 8
    for config in listed:
        SPEC.space.validate(config, h200_limits)
        assert config["TMA"] and config["BLOCK_M"] == 128
    assert [c["SPLIT_M"] for c in listed] == [True] * 3 + [False] * 5
    assert [c["GLUON"] for c in listed] == [False] * 3 + [True] * 5
    assert [c["GLUON_PINGPONG"] for c in listed] == [False] * 3 + [True] * 2 + [False] * 3
    assert [c["GLUON_PERSISTENT"] for c in listed] == [False] * 4 + [True, False, False, True]
    assert [c["GLUON_WIDE_KEYS"] for c in listed] == [False] * 6 + [True] * 2
    assert SPEC.default_for(h200_limits) not in listed
    blackwell = replace(h200_limits, arch="sm_100")
    assert [c for c in SPEC.listed_configs(blackwell) if c["GLUON"]] == []
    assert len(SPEC.listed_configs(blackwell)) == 3
    for limits in (lookup("A100").limits, mi300x_limits, cpu_limits):
        assert SPEC.listed_configs(limits) == []


def test_reference_matches_torch_sdpa() -> None:
    """The hand-written reference agrees with torch's SDPA on one uniform causal GQA batch."""
    prob = SPEC.validate_problem(problem(pattern="uniform", q_heads=4, kv_heads=2))
    inputs = SPEC.build_inputs(prob, "cpu")
    ref = SPEC.reference(inputs)
    n, d = int(prob["max_seqlen"]), int(prob["head_dim"])
    for s in range(int(prob["batch"])):
        rows = slice(s * n, (s + 1) * n)
        q = inputs["q"][rows].float().transpose(0, 1)
        k = inputs["k"][rows].float().transpose(0, 1).repeat_interleave(2, dim=0)
        v = inputs["v"][rows].float().transpose(0, 1).repeat_interleave(2, dim=0)
        sdpa = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=True, scale=1 / math.sqrt(d)
        )
        torch.testing.assert_close(ref[rows], sdpa.transpose(0, 1), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("causal", [True, False])
def test_reference_in_blocks_of_query_rows_is_the_same_function(causal: bool) -> None:
    """Blocks of one query row and blocks of seven (not dividing the lengths) give the one-block
    result on a mixed-length GQA batch: the mask follows each block's rows."""
    prob = SPEC.validate_problem(problem(pattern="mixed", q_heads=4, kv_heads=2, causal=causal))
    inputs = SPEC.build_inputs(prob, "cpu")
    whole = SPEC.reference(inputs)
    for rows in (1, 7):
        blocked = SPEC.reference(inputs, chunk=rows * 4 * int(prob["max_seqlen"]))
        torch.testing.assert_close(blocked, whole, atol=1e-6, rtol=1e-6)


@pytest.fixture
def triton_launches(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, object]]:
    """The keywords of every launch of the Triton kernel from here on (the kernel is not run)."""
    import search_spaces.kernels._flash_attention_kernels as kernels

    launches: list[dict[str, object]] = []

    class Recorder:
        def __getitem__(self, grid: object) -> Callable[..., None]:
            return lambda *args, **kwargs: launches.append(kwargs)

    monkeypatch.setattr(kernels, "flash_attention_fwd_kernel", Recorder())
    return launches


#: The Triton kernel's own arguments (read at import, before a test swaps the kernel out).
TRITON_PARAMS = frozenset(flash_attention_fwd_kernel.arg_names)


def test_amd_options_reach_the_kernel_as_launch_options(
    triton_launches: list[dict[str, object]], mi300x_limits: DeviceLimits
) -> None:
    config = SPEC.default_for(mi300x_limits)
    SPEC.make_launcher(SPEC.build_inputs(SPEC.example, "cpu"), config)()
    (kwargs,) = triton_launches
    options = {k: v for k, v in kwargs.items() if k not in TRITON_PARAMS}
    assert options == {k: config[k] for k in ("num_warps", "num_stages", *AMD_NAMES)}
    assert {"BLOCK_M", "BLOCK_N", "PRE_LOAD_V"} <= set(kwargs)


def test_triton_kernel_gets_only_its_arguments_and_launch_options(
    triton_launches: list[dict[str, object]], h200_limits: DeviceLimits
) -> None:
    """The H200's configs carry GLUON and GLUON_OVERLAP (off): they are not the Triton kernel's
    arguments, and a GPU launch refuses unknown keywords (the interpreter drops them)."""
    from search_spaces.spec import LAUNCH_OPTIONS

    inputs = SPEC.build_inputs(SPEC.validate_problem(problem(head_dim=128)), "cpu")
    for config in (SPEC.default_for(h200_limits), *SPEC.listed_configs(h200_limits)[:3]):
        assert "GLUON" in config
        SPEC.make_launcher(inputs, config)()
    assert len(triton_launches) == 4
    for kwargs in triton_launches:
        assert set(kwargs) - TRITON_PARAMS <= set(LAUNCH_OPTIONS)


def test_amd_default_runs_in_the_interpreter(mi300x_limits: DeviceLimits) -> None:
    err, _ = checked_launch(SPEC, SPEC.example, SPEC.default_for(mi300x_limits), mi300x_limits)
    assert err <= SPEC.tolerance(SPEC.example)


GPU_CASES: list[tuple[Problem, Config]] = [
    # Ragged (mixed) lengths: TMA tiles that run into the next sequence and past the tensor.
    (problem(batch=5, max_seqlen=700, q_heads=8, kv_heads=2, head_dim=128), cfg(64, 64, tma=True)),
    (problem(batch=5, max_seqlen=700, q_heads=8, kv_heads=2, head_dim=64), cfg(64, 128, tma=True)),
    (
        problem(batch=3, max_seqlen=1000, q_heads=8, kv_heads=8, head_dim=128, causal=False),
        cfg(64, 64, warps=4, stages=3, tma=True, heavy_first=True),
    ),
    (
        problem(batch=4, max_seqlen=900, q_heads=8, kv_heads=2, head_dim=128, dtype="bfloat16"),
        {**cfg(128, 128, warps=8, stages=3, tma=True), "WARP_SPECIALIZE": True},
    ),
    # Row blocks split in two halves, through tensor descriptors and through pointers.
    (
        problem(batch=5, max_seqlen=700, q_heads=8, kv_heads=2, head_dim=128),
        cfg(128, 64, tma=True, split=True),
    ),
    (
        problem(
            batch=3,
            max_seqlen=1000,
            q_heads=8,
            kv_heads=8,
            head_dim=128,
            causal=False,
            dtype="bfloat16",
        ),
        cfg(128, 64, pre_load_v=True, heavy_first=True, split=True),
    ),
    # GLUON (sm_90 only): ragged batches whose last row and key tiles run into the next sequence
    # and past the tensor, causal and not, GQA, both key tiles, with and without the overlap.
    (
        problem(batch=5, max_seqlen=700, q_heads=8, kv_heads=2, head_dim=128),
        gluon(128),
    ),
    (
        problem(batch=4, max_seqlen=900, q_heads=8, kv_heads=4, head_dim=128, causal=False),
        gluon(64, stages=4, GLUON_OVERLAP=True),
    ),
    (
        problem(batch=3, max_seqlen=1000, q_heads=8, kv_heads=8, head_dim=64, dtype="bfloat16"),
        gluon(64, stages=3, GLUON_OVERLAP=True),
    ),
    (
        problem(batch=2, max_seqlen=333, q_heads=4, kv_heads=1, head_dim=64, causal=False),
        gluon(128, stages=2),
    ),
    # GLUON_PERSISTENT: many rounds per program (ragged causal, GQA: the reversed rounds and the
    # ring and query buffers carried from item to item), non-causal with the overlap, and fewer
    # items than SMs.
    (
        problem(batch=37, max_seqlen=700, q_heads=8, kv_heads=2, head_dim=128),
        gluon(128, GLUON_PERSISTENT=True),
    ),
    (
        problem(
            batch=9,
            max_seqlen=1500,
            q_heads=16,
            kv_heads=4,
            head_dim=128,
            causal=False,
            dtype="bfloat16",
        ),
        gluon(64, stages=4, GLUON_OVERLAP=True, GLUON_PERSISTENT=True),
    ),
    (
        problem(batch=3, max_seqlen=300, q_heads=4, kv_heads=4, head_dim=64),
        gluon(128, stages=2, GLUON_OVERLAP=True, GLUON_PERSISTENT=True),
    ),
    # GLUON_PINGPONG: the consumers' turns over ragged causal GQA (the masked band's loop too),
    # persistent over many rounds, and 64-key tiles at head_dim 64.
    (
        problem(batch=5, max_seqlen=900, q_heads=8, kv_heads=2, head_dim=128),
        gluon(128, stages=3, GLUON_OVERLAP=True, GLUON_PINGPONG=True),
    ),
    (
        problem(
            batch=23,
            max_seqlen=1300,
            q_heads=8,
            kv_heads=4,
            head_dim=128,
            causal=False,
            dtype="bfloat16",
        ),
        gluon(128, stages=3, GLUON_OVERLAP=True, GLUON_PERSISTENT=True, GLUON_PINGPONG=True),
    ),
    (
        problem(batch=4, max_seqlen=700, q_heads=8, kv_heads=8, head_dim=64),
        gluon(64, stages=4, GLUON_OVERLAP=True, GLUON_PINGPONG=True),
    ),
    # GLUON_WIDE_KEYS (d=64): 256-key tiles, the causal band inside one tile or across two, the
    # last tile past the sequence; persistent over many rounds.
    (
        problem(batch=5, max_seqlen=900, q_heads=8, kv_heads=2, head_dim=64),
        gluon(128, stages=3, GLUON_WIDE_KEYS=True),
    ),
    (
        problem(batch=6, max_seqlen=1100, q_heads=8, kv_heads=8, head_dim=64, causal=False),
        gluon(128, stages=2, GLUON_WIDE_KEYS=True),
    ),
    (
        problem(batch=29, max_seqlen=700, q_heads=8, kv_heads=4, head_dim=64, dtype="bfloat16"),
        gluon(128, stages=3, GLUON_PERSISTENT=True, GLUON_WIDE_KEYS=True),
    ),
]


@needs_gpu
@pytest.mark.parametrize(("prob", "config"), GPU_CASES)
def test_hopper_variants_on_the_gpu(prob: Problem, config: Config) -> None:
    """TMA, wide key blocks, heavy-first order, warp specialization, split row blocks and the
    GLUON kernel compiled for the GPU agree with the reference on ragged batches (fresh inputs, poisoned output)."""
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("TMA and warp specialization need sm_90+")
    if config.get("GLUON") and torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("GLUON needs sm_90")
    from workers.device import detect

    limits = detect("auto")[0].limits()
    config = {**SPEC.default_for(limits), **config}
    SPEC.space.validate(config, limits)
    inputs = SPEC.build_inputs(SPEC.validate_problem(prob), "cuda")
    inputs["out"].fill_(float("nan"))
    SPEC.make_launcher(inputs, config)()
    assert max_rel_error(inputs["out"], SPEC.reference(inputs)) <= SPEC.tolerance(prob)


SDPA_NAMES = ("sdpa_cudnn", "sdpa_flash", "sdpa_efficient", "sdpa_math")
VENDOR_CASES = [
    problem(pattern="uniform"),
    problem(pattern="uniform", causal=False, kv_heads=4, dtype="bfloat16"),
    problem(batch=4, pattern="mixed", q_heads=8, kv_heads=2),
    problem(batch=3, max_seqlen=40, pattern="mixed", causal=False, head_dim=128),
]


def test_vendor_paths_name_every_sdpa_backend() -> None:
    assert SPEC.vendor_paths(SPEC.example) == SDPA_NAMES


@pytest.mark.parametrize("name", ["sdpa_flash", "sdpa_math"])
@pytest.mark.parametrize("prob", VENDOR_CASES, ids=lambda p: f"{p['pattern']}-c{int(p['causal'])}")
def test_vendor_paths_on_the_cpu(prob: Problem, name: str) -> None:
    """The SDPA backends the CPU has compute the reference's function: one batched call on
    uniform lengths, one call per sequence on ragged ones, GQA, causal or not."""
    err, _ = vendor_launch(SPEC, prob, name)
    assert err <= SPEC.tolerance(prob)


def test_vendor_path_honours_the_causal_flag() -> None:
    prob = SPEC.validate_problem(problem(batch=3))
    err, inputs = vendor_launch(SPEC, prob, "sdpa_flash")
    assert err <= SPEC.tolerance(prob)
    full = SPEC.reference({**inputs, "causal": False})
    assert max_rel_error(inputs["out"], full) > SPEC.tolerance(prob)


@pytest.mark.parametrize("name", ["sdpa_cudnn", "sdpa_efficient"])
def test_gpu_only_backends_raise_on_the_cpu(name: str) -> None:
    inputs = SPEC.build_inputs(SPEC.example, "cpu")
    with pytest.raises(RuntimeError, match="No viable backend"):
        SPEC.make_vendor_launcher(inputs, name)()


@pytest.mark.parametrize("name", ["sdpa", "sdpa_overrideable", "torch.matmul"])
def test_unknown_vendor_path_is_a_spec_error(name: str) -> None:
    with pytest.raises(SpecError, match="no vendor path"):
        SPEC.make_vendor_launcher(SPEC.build_inputs(SPEC.example, "cpu"), name)


def test_gqa_without_enable_gqa_repeats_kv_to_the_same_result() -> None:
    """torch before 2.5 has no enable_gqa: K and V repeated per group give the same attention."""
    q = torch.randn(2, 8, 16, 64)
    k, v = torch.randn(2, 2, 16, 64), torch.randn(2, 2, 16, 64)
    native = sdpa(q, k, v, gqa_native=True, is_causal=True)
    repeated = sdpa(q, k, v, gqa_native=False, is_causal=True)
    torch.testing.assert_close(native, repeated)


@needs_gpu
@pytest.mark.parametrize(
    "prob",
    [
        problem(batch=4, max_seqlen=1024, pattern="uniform", q_heads=32, kv_heads=8, head_dim=128),
        problem(batch=5, max_seqlen=700, pattern="mixed", q_heads=16, kv_heads=16, causal=False),
    ],
    ids=["uniform-gqa", "mixed-mha"],
)
def test_vendor_paths_on_the_gpu(prob: Problem) -> None:
    """Every SDPA backend that runs agrees with the reference; flash and math always run (on
    torch 2.11 / H100 the efficient backend refuses GQA and raises)."""
    ran = []
    for name in SDPA_NAMES:
        try:
            err, _ = vendor_launch(SPEC, prob, name, "cuda")
        except RuntimeError:
            continue
        assert err <= SPEC.tolerance(prob), name
        ran.append(name)
    assert {"sdpa_flash", "sdpa_math"} <= set(ran)
