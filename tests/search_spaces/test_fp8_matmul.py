"""fp8_matmul: FP8 loads and tl.dot on e4m3 run in Triton's interpreter, so configs are checked for
correctness there (N that ends inside a 128-row block of B included); inputs are quantized per
group/block, the reference dequantizes them, problems and device classes without FP8 are refused;
on an sm_90 GPU the vendor paths, DeepSeek-V3 shapes and the Gluon kernel (which the interpreter
cannot run)."""

from dataclasses import replace

import pytest
import torch

from search_spaces import Config, DeviceLimits, Problem, SpecError, Vendor
from search_spaces.accuracy import max_rel_error
from search_spaces.errors import ProblemError
from search_spaces.kernels.fp8_matmul import (
    DEFAULT,
    E4M3_MAX,
    SCALE_BLOCK,
    SPEC,
    VENDOR_DEQUANT,
    VENDOR_SCALED_MM,
)
from tests.gpu import needs_gpu
from tests.search_spaces.kernel_check import checked_launch
from workers.device_table import lookup


def cfg(
    bm: int = 64,
    bn: int = 128,
    bk: int = 128,
    group: int = 1,
    split: int = 1,
    tma: bool = False,
    warps: int = 4,
    stages: int = 2,
    lag: bool = False,
    persistent: bool = False,
    ws: bool = False,
) -> Config:
    return {
        "BLOCK_SIZE_M": bm,
        "BLOCK_SIZE_N": bn,
        "BLOCK_SIZE_K": bk,
        "GROUP_SIZE_M": group,
        "SPLIT_K": split,
        "TMA": tma,
        "PERSISTENT": persistent,
        "SCALE_LAG": lag,
        "WARP_SPEC": ws,
        "num_warps": warps,
        "num_stages": stages,
    }


def gluon(bn: int = 128, stages: int = 4, persistent: bool = False) -> Config:
    """A GLUON config: 128 x ``bn`` tiles on 4 warps through TMA, a ``stages``-deep ring."""
    config = cfg(128, bn, group=16, tma=True, stages=stages, persistent=persistent)
    return {**config, "GLUON": True}


CASES: list[tuple[Problem, Config]] = [
    ({"M": 16, "N": 256, "K": 256}, SPEC.default_config(Vendor.CPU)),
    ({"M": 33, "N": 256, "K": 256}, SPEC.default_config(Vendor.CPU)),
    # BLOCK_SIZE_K 64: two steps per scale group; 256-wide tiles span two of B's scale blocks.
    ({"M": 33, "N": 256, "K": 256}, cfg(32, 256, bk=64)),
    # N=384 ends inside the second 256-wide tile; M=130 inside the third row of 64 (wrapped reads).
    ({"M": 130, "N": 384, "K": 256}, cfg(64, 256, group=8)),
    ({"M": 130, "N": 256, "K": 384}, cfg(64, 64, group=8)),
    # Split-K: 2 and 4 slices of K=512 (four groups), 8 slices leave four slices with no step.
    ({"M": 16, "N": 256, "K": 512}, cfg(16, 64, split=2)),
    ({"M": 33, "N": 256, "K": 512}, cfg(64, 128, bk=64, split=4)),
    ({"M": 1, "N": 128, "K": 512}, cfg(16, 64, split=8)),
    # TMA: rows past M come back zero-filled.
    ({"M": 33, "N": 256, "K": 256}, cfg(32, 128, tma=True)),
    ({"M": 16, "N": 256, "K": 512}, cfg(16, 128, bk=64, split=2, tma=True)),
    # N past the last whole 128-row block of B: its partial block has its own scales. N=200 ends
    # inside the second 128-wide tile, inside one 256-wide tile, and (TMA) zero-filled rows.
    ({"M": 5, "N": 200, "K": 256}, SPEC.default_config(Vendor.CPU)),
    ({"M": 5, "N": 200, "K": 256}, cfg(16, 256, bk=64)),
    ({"M": 5, "N": 200, "K": 256}, cfg(16, 64, split=2, tma=True)),
    # DeepSeek-V3's fused q_a/kv_a projection: 2112 = 16 * 128 + 64.
    ({"M": 3, "N": 2112, "K": 256}, cfg(16, 128, split=2)),
    ({"M": 3, "N": 2112, "K": 256}, cfg(32, 256, bk=64, tma=True)),
    # SCALE_LAG: one step (the held product is added after the loop), several, split-K, TMA.
    ({"M": 33, "N": 256, "K": 128}, cfg(32, 128, lag=True)),
    ({"M": 130, "N": 200, "K": 512}, cfg(64, 64, bk=64, group=8, lag=True)),
    ({"M": 16, "N": 256, "K": 512}, cfg(16, 64, split=2, lag=True)),
    ({"M": 33, "N": 2112, "K": 384}, cfg(32, 128, tma=True, lag=True)),
    # PERSISTENT: more tiles (5 x 4) than the interpreter's 4 programs, a partial last tile row.
    ({"M": 130, "N": 200, "K": 256}, cfg(32, 64, group=8, tma=True, persistent=True)),
    ({"M": 33, "N": 512, "K": 384}, cfg(16, 128, tma=True, persistent=True, lag=True)),
    # WARP_SPEC: the interpreter runs the loops as written (the partitions are the compiler's).
    ({"M": 33, "N": 200, "K": 384}, cfg(64, 128, tma=True, ws=True)),
    ({"M": 16, "N": 256, "K": 512}, cfg(64, 64, split=2, tma=True, lag=True, ws=True)),
    ({"M": 130, "N": 200, "K": 256}, cfg(64, 64, group=8, tma=True, ws=True)),
]


@pytest.mark.parametrize(
    ("problem", "config"),
    CASES,
    ids=[
        f"{p['M']}x{p['N']}x{p['K']}-{c['BLOCK_SIZE_M']}x{c['BLOCK_SIZE_N']}x{c['BLOCK_SIZE_K']}"
        f"-g{c['GROUP_SIZE_M']}-split{c['SPLIT_K']}"
        + ("-tma" if c["TMA"] else "")
        + ("-persistent" if c["PERSISTENT"] else "")
        + ("-lag" if c["SCALE_LAG"] else "")
        + ("-ws" if c["WARP_SPEC"] else "")
        for p, c in CASES
    ],
)
def test_correct_in_interpreter(problem: Problem, config: Config, cpu_limits: DeviceLimits) -> None:
    err, inputs = checked_launch(SPEC, problem, config, cpu_limits)
    assert err <= SPEC.tolerance(problem)
    assert inputs["out"].dtype == torch.bfloat16


@pytest.mark.parametrize("n", [512, 200])
def test_a_scale_applied_to_the_wrong_block_is_caught(n: int, cpu_limits: DeviceLimits) -> None:
    """The scales spread over 2**-4..2**4 (times the data's own amax), so a kernel that reads B's
    scales by the wrong block (the partial last one included), or A's by the wrong group, misses
    by far more than the tolerance. Seeded: on a fresh draw the groups that dominate the output
    can share a magnitude (nine powers of two), and a swap of equal scales is no error."""
    torch.manual_seed(n)
    problem: Problem = {"M": 33, "N": n, "K": 512}
    err, inputs = checked_launch(SPEC, problem, SPEC.default_config(Vendor.CPU), cpu_limits)
    assert err <= SPEC.tolerance(problem)
    for name, flipped in (("b_scale", (0,)), ("b_scale", (1,)), ("a_scale", (1,))):
        wrong = {**inputs, name: inputs[name].flip(flipped)}
        assert max_rel_error(inputs["out"], SPEC.reference(wrong)) > 10 * SPEC.tolerance(problem)


def test_inputs_are_fresh_and_quantized_per_group_and_block() -> None:
    problem = SPEC.validate_problem({"M": 5, "N": 256, "K": 384})
    inputs = SPEC.build_inputs(problem, "cpu")
    again = SPEC.build_inputs(problem, "cpu")
    assert not torch.equal(inputs["a"].float(), again["a"].float())
    assert not torch.equal(inputs["b_scale"], again["b_scale"])
    a, b = inputs["a"], inputs["b"]
    assert a.dtype == b.dtype == torch.float8_e4m3fn
    assert tuple(a.shape) == (5, 384) and tuple(b.shape) == (256, 384)
    assert tuple(inputs["a_scale"].shape) == (5, 3) and tuple(inputs["b_scale"].shape) == (2, 3)
    assert inputs["a_scale"].dtype == inputs["b_scale"].dtype == torch.float32
    assert tuple(inputs["out"].shape) == (5, 256) and inputs["out"].dtype == torch.bfloat16
    # Each group's (block's) amax was mapped onto the largest e4m3 value.
    a_amax = a.float().view(5, 3, SCALE_BLOCK).abs().amax(dim=2)
    b_amax = b.float().view(2, SCALE_BLOCK, 3, SCALE_BLOCK).abs().amax(dim=(1, 3))
    assert bool((a_amax == E4M3_MAX).all()) and bool((b_amax == E4M3_MAX).all())
    # Scales differ from group to group by up to 2**8, so a misplaced one shows.
    big = SPEC.build_inputs({"M": 64, "N": 512, "K": 1024}, "cpu")
    for name in ("a_scale", "b_scale"):
        assert float(big[name].max() / big[name].min()) > 2**5


def test_a_partial_last_block_is_quantized_from_its_own_rows() -> None:
    inputs = SPEC.build_inputs(SPEC.validate_problem({"M": 2, "N": 200, "K": 256}), "cpu")
    b, b_scale = inputs["b"], inputs["b_scale"]
    assert tuple(b.shape) == (200, 256) and b.is_contiguous()
    assert tuple(b_scale.shape) == (2, 2)  # ceil(200 / 128) blocks of rows
    padded = torch.zeros(256, 256)
    padded[:200] = b.float()
    b_amax = padded.view(2, SCALE_BLOCK, 2, SCALE_BLOCK).abs().amax(dim=(1, 3))
    assert bool((b_amax == E4M3_MAX).all())


@pytest.mark.parametrize("n", [256, 200, 72])
def test_reference_sums_the_scaled_products_of_each_group(n: int) -> None:
    """Per 128-group of K and 128-row block of B (the last one partial unless 128 divides N)."""
    inputs = SPEC.build_inputs({"M": 3, "N": n, "K": 256}, "cpu")
    a = inputs["a"].double().view(3, 2, SCALE_BLOCK)
    b = inputs["b"].double().view(n, 2, SCALE_BLOCK)
    expected = torch.zeros(3, n, dtype=torch.float64)
    for g in range(2):
        for nb in range(-(-n // SCALE_BLOCK)):
            cols = slice(nb * SCALE_BLOCK, min(n, (nb + 1) * SCALE_BLOCK))
            part = a[:, g] @ b[cols, g].T * float(inputs["b_scale"][nb, g])
            expected[:, cols] += part * inputs["a_scale"][:, g, None].double()
    # float64 in another summation order: equal to rounding, relative to the output's scale (an
    # element that cancels to near zero carries the absolute rounding of its terms).
    scale = float(expected.abs().max())
    assert torch.allclose(SPEC.reference(inputs), expected, rtol=1e-12, atol=1e-12 * scale)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"M": 16, "N": 256, "K": 1000}, "K=1000 is not a multiple of 128"),
        ({"M": 16, "N": 200, "K": 64}, "K=64 is not a multiple of 128"),
        ({"M": 0, "N": 256, "K": 256}, "M=0 must be a positive integer"),
        ({"M": 16, "N": 256, "K": 256, "dtype": "float16"}, "unknown problem field 'dtype'"),
    ],
)
def test_problems_off_the_block_layout_are_refused(raw: dict[str, int], message: str) -> None:
    with pytest.raises(ProblemError, match=message) as err:
        SPEC.validate_problem(raw)
    assert "\n" not in str(err.value)


def test_any_m_and_n_are_accepted() -> None:
    assert SPEC.parse_problem("M=33,N=7168,K=18432") == {"M": 33, "N": 7168, "K": 18432}
    assert SPEC.parse_problem("M=1,N=2112,K=7168") == {"M": 1, "N": 2112, "K": 7168}
    assert SPEC.parse_problem("M=5,N=1,K=128") == {"M": 5, "N": 1, "K": 128}


@pytest.mark.parametrize(("name", "arch"), [("A100", "sm_80"), ("MI250X", "gfx90a")])
def test_classes_without_fp8_hardware_are_refused_in_one_line(name: str, arch: str) -> None:
    limits = lookup(name).limits
    why = SPEC.check_device(SPEC.example, limits)
    assert why is not None and "\n" not in why
    assert "FP8 tensor cores" in why and limits.name in why and arch in why


def test_classes_with_fp8_hardware_and_the_interpreter_are_accepted(
    h200_limits: DeviceLimits, cpu_limits: DeviceLimits
) -> None:
    ada = DeviceLimits(Vendor.NVIDIA, "NVIDIA L40S", "sm_89", 101376, 65536, 32, 142)
    rdna3 = DeviceLimits(Vendor.AMD, "AMD Radeon RX 7900 XTX", "gfx1100", 65536, 65536, 32, 96)
    for limits in (h200_limits, cpu_limits, ada, *(lookup(n).limits for n in ("B200", "MI300X"))):
        assert SPEC.check_device(SPEC.example, limits) is None
    assert SPEC.check_device(SPEC.example, rdna3) is not None  # gfx11 has no FP8 WMMA


def test_matmul_runs_on_every_class() -> None:
    from search_spaces.registry import get_spec

    assert get_spec("matmul").check_device(SPEC.example, lookup("A100").limits) is None


def test_space_on_the_h200(h200_limits: DeviceLimits) -> None:
    configs = SPEC.space.enumerate(h200_limits)
    assert len(configs) == 11602
    # GLUON: both tile widths x 5 group sizes x 5 ring depths x PERSISTENT, every ring fitting.
    assert sum(bool(c["GLUON"]) for c in configs) == 2 * 5 * 5 * 2
    assert gluon() in configs and gluon(64, stages=6, persistent=True) in configs
    for c in configs:
        stage = (int(c["BLOCK_SIZE_M"]) + int(c["BLOCK_SIZE_N"])) * int(c["BLOCK_SIZE_K"])
        assert stage * int(c["num_stages"]) <= h200_limits.shared_mem_per_block
        assert int(c["SPLIT_K"]) == 1 or (
            int(c["BLOCK_SIZE_M"]) <= 64 and int(c["GROUP_SIZE_M"]) == 1
        )
    # Every K step lies inside one scale group: the kernel reads one scale per row per step.
    assert all(SCALE_BLOCK % int(v) == 0 for v in SPEC.space.param("BLOCK_SIZE_K").values)
    # vLLM's tuner's grid (BLOCK_SIZE_K = the scale block) is inside the space, where it fits.
    vllm = [
        c
        for c in configs
        if c["BLOCK_SIZE_K"] == 128 and c["SPLIT_K"] == 1 and not c["TMA"] and not c["SCALE_LAG"]
    ]
    assert {c["BLOCK_SIZE_M"] for c in vllm} == {16, 32, 64, 128, 256}
    assert {c["BLOCK_SIZE_N"] for c in vllm} == {32, 64, 128, 256}
    assert {c["GROUP_SIZE_M"] for c in vllm} >= {1, 16, 32, 64}
    assert {c["num_stages"] for c in vllm} >= {2, 3, 4, 5}


def test_listed_configs_are_the_measured_tiles_on_sm90_only(
    h200_limits: DeviceLimits, mi300x_limits: DeviceLimits, cpu_limits: DeviceLimits
) -> None:
    listed = SPEC.listed_configs(h200_limits)
    assert len(listed) == 6
    assert all(SPEC.space.violation(c, h200_limits) is None for c in listed)
    assert DEFAULT not in listed
    assert sum(bool(c["GLUON"]) for c in listed) == 3  # the Gluon kernel's sweep winners
    for limits in (mi300x_limits, cpu_limits, lookup("A100").limits):
        assert SPEC.listed_configs(limits) == []


def test_configs_breaking_a_rule_are_refused_before_the_gpu(h200_limits: DeviceLimits) -> None:
    a100 = lookup("A100").limits
    cases = [
        (cfg(256, 256, warps=8), h200_limits, "accumulator-registers"),
        (cfg(256, 256, warps=8, stages=6), h200_limits, "shared-memory"),
        (cfg(128, 128, split=2), h200_limits, "split-k-small-m"),
        (cfg(16, 64, group=8, split=2), h200_limits, "split-k-no-group"),
        (cfg(16, 32, warps=8), h200_limits, "work-per-warp"),
        (cfg(tma=True), a100, "tma-arch"),
        (cfg(128, 128, lag=True), h200_limits, "lagged-scale-registers"),
        (cfg(persistent=True), h200_limits, "persistent-tma"),
        (cfg(16, 64, split=2, tma=True, persistent=True), h200_limits, "persistent-tma"),
        (cfg(ws=True), h200_limits, "warp-spec"),
        (cfg(128, 128, warps=8, tma=True, ws=True), h200_limits, "warp-spec"),
        (cfg(128, 128, tma=True, ws=True), h200_limits, "warp-spec"),
        (cfg(64, 256, tma=True, ws=True), h200_limits, "warp-spec"),
        (cfg(16, 64, tma=True, ws=True), h200_limits, "warp-spec"),
        (cfg(tma=True, persistent=True, ws=True), h200_limits, "warp-spec"),
        ({**gluon(), "TMA": False}, a100, "gluon-arch"),
        (gluon(), replace(h200_limits, arch="sm_100"), "gluon-arch"),
        ({**gluon(), "BLOCK_SIZE_M": 64}, h200_limits, "gluon-tile"),
        ({**gluon(), "BLOCK_SIZE_N": 32}, h200_limits, "gluon-tile"),
        ({**gluon(), "BLOCK_SIZE_K": 64}, h200_limits, "gluon-tile"),
        ({**gluon(), "num_warps": 8}, h200_limits, "gluon-tile"),
        ({**gluon(), "TMA": False}, h200_limits, "gluon-tile"),
        ({**gluon(64), "SCALE_LAG": True}, h200_limits, "gluon-tile"),
        ({**gluon(), "WARP_SPEC": True}, h200_limits, "warp-spec"),
    ]
    for config, limits, rule in cases:
        # GLUON exists on NVIDIA GPUs, where every case here is checked.
        violation = SPEC.space.violation({"GLUON": False, **config}, limits)
        assert violation is not None and violation.rule == rule, (config, violation)


def test_defaults_are_vllms_fallback_and_valid(
    h200_limits: DeviceLimits, mi300x_limits: DeviceLimits, cpu_limits: DeviceLimits
) -> None:
    nvidia = SPEC.default_for(h200_limits)
    assert nvidia == DEFAULT
    assert {k: nvidia[k] for k in ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K")} == {
        "BLOCK_SIZE_M": 64,
        "BLOCK_SIZE_N": 128,
        "BLOCK_SIZE_K": 128,
    }
    for limits in (h200_limits, mi300x_limits, cpu_limits):
        SPEC.space.validate(SPEC.default_for(limits), limits)
    assert "TMA" not in SPEC.default_for(mi300x_limits)
    assert "PERSISTENT" not in SPEC.default_for(mi300x_limits)
    for limits in (mi300x_limits, cpu_limits):
        assert "GLUON" not in SPEC.default_for(limits)


def test_group_sizes_past_the_tile_rows_are_one_class() -> None:
    same = SPEC.equivalence({"M": 16, "N": 7168, "K": 7168})
    for group in (1, 8, 16, 32, 64):
        assert same(cfg(64, 128, group=group))["GROUP_SIZE_M"] == 1
    wide = SPEC.equivalence({"M": 4096, "N": 7168, "K": 7168})
    assert wide(cfg(64, 128, group=32))["GROUP_SIZE_M"] == 32


def test_cost_model_counts_fp8_bytes_and_scales() -> None:
    problem: Problem = {"M": 128, "N": 256, "K": 512}
    assert SPEC.flops(problem) == 2 * 128 * 256 * 512
    scales = (128 + 2) * 4 * 4
    assert SPEC.bytes_moved(problem) == 128 * 512 + 256 * 512 + scales + 128 * 256 * 2
    features = SPEC.features(problem, cfg(64, 128, split=2))
    assert features == {"log2_programs": 3.0, "log2_k_steps": 1.0, "tile_fill": 1.0}
    # N=200: two blocks of B's scales (the last partial), B's 200 rows, 200 columns of C.
    partial: Problem = {"M": 128, "N": 200, "K": 512}
    assert SPEC.bytes_moved(partial) == 128 * 512 + 200 * 512 + scales + 128 * 200 * 2
    assert SPEC.features(partial, cfg(64, 128))["tile_fill"] == 200 / 256


@pytest.mark.parametrize("n", [256, 200])
def test_dequant_vendor_path_runs_on_the_cpu(n: int) -> None:
    problem: Problem = {"M": 33, "N": n, "K": 256}
    assert SPEC.vendor_paths(problem) == (VENDOR_SCALED_MM, VENDOR_DEQUANT)
    inputs = SPEC.build_inputs(problem, "cpu")
    inputs["out"].fill_(float("nan"))
    SPEC.make_vendor_launcher(inputs, VENDOR_DEQUANT)()
    assert max_rel_error(inputs["out"], SPEC.reference(inputs)) <= SPEC.tolerance(problem)


def test_scaled_mm_says_in_one_line_where_it_runs() -> None:
    inputs = SPEC.build_inputs(SPEC.example, "cpu")
    with pytest.raises(SpecError, match="runs on CUDA sm_90 only") as err:
        SPEC.make_vendor_launcher(inputs, VENDOR_SCALED_MM)
    assert "\n" not in str(err.value)
    with pytest.raises(SpecError, match="no vendor path 'cublas'"):
        SPEC.make_vendor_launcher(inputs, "cublas")


def test_gluon_off_the_gpu_is_a_spec_error_in_one_line() -> None:
    inputs = SPEC.build_inputs(SPEC.example, "cpu")
    with pytest.raises(SpecError, match="GLUON runs on sm_90") as err:
        SPEC.make_launcher(inputs, gluon())
    assert "\n" not in str(err.value)


def test_launchers_refuse_a_wrong_layout() -> None:
    inputs = SPEC.build_inputs(SPEC.example, "cpu")
    with pytest.raises(SpecError, match=r"b_scale \[2, 2\]"):
        SPEC.make_launcher({**inputs, "b_scale": inputs["b_scale"][:1]}, DEFAULT)
    partial = SPEC.build_inputs({"M": 16, "N": 200, "K": 256}, "cpu")
    with pytest.raises(SpecError, match=r"b_scale \[2, 2\]"):
        SPEC.make_launcher({**partial, "b_scale": partial["b_scale"][:1]}, DEFAULT)
    # K=192: every shape consistent with one scale group, but K is no whole number of groups.
    cut = {"a": inputs["a"][:, :192], "b": inputs["b"][:, :192]}
    cut |= {"a_scale": inputs["a_scale"][:, :1], "b_scale": inputs["b_scale"][:, :1]}
    with pytest.raises(SpecError, match="K=192 a multiple of 128"):
        SPEC.make_launcher({**inputs, **cut}, DEFAULT)
    with pytest.raises(SpecError, match=r"contiguous out \[16, 256\]"):
        SPEC.make_vendor_launcher({**inputs, "out": inputs["out"].t()}, VENDOR_DEQUANT)


# DeepSeek-V3's block-FP8 linears (N, K): fused q_a/kv_a, q_b, o_proj, MLP gate+up and down.
DEEPSEEK_V3 = [(2112, 7168), (24576, 1536), (7168, 16384), (36864, 7168), (7168, 18432)]
GPU_CONFIGS = [
    DEFAULT,
    cfg(64, 128, group=32, stages=4, tma=True),
    cfg(128, 128, group=16, warps=8, stages=4),
    cfg(16, 64, split=4, stages=4),
    cfg(16, 128, bk=64, split=8, stages=5, tma=True),
    cfg(128, 128, group=16, warps=8, stages=4, tma=True, lag=True),
    cfg(128, 256, group=16, warps=8, stages=3, tma=True, persistent=True),
    cfg(64, 128, group=32, warps=4, stages=4, tma=True, ws=True),
    cfg(64, 64, group=32, warps=4, stages=6, tma=True, lag=True, ws=True),
    gluon(),
    gluon(persistent=True),
]


@needs_gpu
@pytest.mark.parametrize("m", [1, 33, 512])
@pytest.mark.parametrize(("n", "k"), DEEPSEEK_V3[:3])
def test_correct_on_gpu(m: int, n: int, k: int) -> None:
    problem = SPEC.validate_problem({"M": m, "N": n, "K": k})
    inputs = SPEC.build_inputs(problem, "cuda")
    ref = SPEC.reference(inputs)
    for config in GPU_CONFIGS:
        inputs["out"].fill_(float("nan"))
        SPEC.make_launcher(inputs, config)()
        assert max_rel_error(inputs["out"], ref) <= SPEC.tolerance(problem), config


@needs_gpu
@pytest.mark.parametrize(
    ("m", "n", "k"), [(1, 128, 128), (33, 200, 256), (130, 2112, 384), (300, 7168, 640)]
)
def test_gluon_correct_on_gpu_at_each_k_step_count(m: int, n: int, k: int) -> None:
    """One to five K steps (the consumers take them in pairs, an odd one last), rows and columns
    past the last whole tile, N inside a 128-row block of B, and (N=7168) more tiles than SMs, so
    persistent programs take several rounds."""
    problem = SPEC.validate_problem({"M": m, "N": n, "K": k})
    inputs = SPEC.build_inputs(problem, "cuda")
    ref = SPEC.reference(inputs)
    for config in (
        gluon(),
        gluon(64, stages=6),
        gluon(persistent=True),
        gluon(64, stages=2, persistent=True),
    ):
        inputs["out"].fill_(float("nan"))
        SPEC.make_launcher(inputs, config)()
        assert max_rel_error(inputs["out"], ref) <= SPEC.tolerance(problem), config


@needs_gpu
def test_split_k_gives_the_same_bits_on_every_launch_on_gpu() -> None:
    inputs = SPEC.build_inputs({"M": 16, "N": 7168, "K": 16384}, "cuda")
    launcher = SPEC.make_launcher(inputs, cfg(16, 64, split=8, stages=4))
    launcher()
    first = inputs["out"].clone()
    for _ in range(50):
        inputs["out"].fill_(float("nan"))
        launcher()
        assert torch.equal(inputs["out"], first)


#: (M, N, K) where torch._scaled_mm ran blockwise scaling on an H100 (sm_90), observed on torch
#: 2.11+cu130; M=1 at N=7168, K=2048 (and M=33, N=384, K=256) got CUBLAS_STATUS_NOT_SUPPORTED.
SCALED_MM_RAN_ON_SM90 = {(16, 7168, 2048), (128, 7168, 2048), (1000, 7168, 2048)}


@needs_gpu
@pytest.mark.parametrize(
    ("m", "n", "k"), [(1, 7168, 2048), (16, 7168, 2048), (128, 7168, 2048), (1000, 7168, 2048),
                      (16, 2112, 7168), (33, 200, 256)],
)  # fmt: skip
def test_vendor_paths_on_gpu(m: int, n: int, k: int) -> None:
    """The dequant path runs and is correct everywhere; torch._scaled_mm is correct or raises a
    one-line SpecError naming the problem and torch's reason, and runs where it was seen to."""
    problem = SPEC.validate_problem({"M": m, "N": n, "K": k})
    inputs = SPEC.build_inputs(problem, "cuda")
    ref = SPEC.reference(inputs)
    inputs["out"].fill_(float("nan"))
    SPEC.make_vendor_launcher(inputs, VENDOR_DEQUANT)()
    assert max_rel_error(inputs["out"], ref) <= SPEC.tolerance(problem)
    inputs["out"].fill_(float("nan"))
    try:
        launch = SPEC.make_vendor_launcher(inputs, VENDOR_SCALED_MM)
    except SpecError as exc:
        why = str(exc)
        assert "\n" not in why and why.startswith(VENDOR_SCALED_MM)
        sm90 = torch.cuda.get_device_capability()[0] == 9 and not torch.version.hip
        if sm90:
            assert f"M={m}, N={n}, K={k} here: " in why, why
            assert why.split(" here: ", 1)[1].strip(), why  # torch's reason follows
            assert (m, n, k) not in SCALED_MM_RAN_ON_SM90, why
        else:
            assert "runs on CUDA sm_90 only" in why
        return
    launch()
    assert max_rel_error(inputs["out"], ref) <= SPEC.tolerance(problem)
