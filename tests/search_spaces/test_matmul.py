"""matmul in Triton's interpreter: every element written, within tolerance, split-K deterministic;
on a GPU, split-K's in-launch reduction under real concurrency."""

import pytest
import torch
import triton
import triton.language as tl

from search_spaces import Config, DeviceLimits, Problem, SpecError, Vendor
from search_spaces.accuracy import max_rel_error
from search_spaces.kernels._matmul_kernels import _tile
from search_spaces.kernels.matmul import SPEC
from tests.gpu import needs_gpu
from tests.search_spaces.kernel_check import checked_launch, vendor_launch


def cfg(
    bm: int,
    bn: int,
    bk: int = 32,
    group: int = 1,
    split: int = 1,
    fused: bool = False,
    warps: int = 2,
    tma: bool = False,
    persistent: bool = False,
    stream_k: bool = False,
    wide: bool = False,
) -> Config:
    return {
        "WIDE_N": wide,
        "TMA": tma,
        "PERSISTENT": persistent,
        "STREAM_K": stream_k,
        "BLOCK_M": bm,
        "BLOCK_N": bn,
        "BLOCK_K": bk,
        "GROUP_M": group,
        "SPLIT_K": split,
        "FUSED_REDUCE": fused,
        "num_warps": warps,
        "num_stages": 2,
    }


CASES: list[tuple[Problem, Config]] = [
    (SPEC.example, SPEC.default_config(Vendor.CPU)),
    ({"M": 64, "N": 64, "K": 64, "dtype": "float16"}, cfg(16, 32, split=2)),
    ({"M": 1, "N": 100, "K": 72, "dtype": "float16"}, cfg(16, 64)),
    # K=72 has three 32-wide K blocks: with SPLIT_K=4 one slice gets none and must still write zeros.
    ({"M": 1, "N": 100, "K": 72, "dtype": "bfloat16"}, cfg(16, 32, split=4, fused=True)),
    ({"M": 50, "N": 40, "K": 40, "dtype": "bfloat16"}, cfg(16, 32, group=4)),
    ({"M": 33, "N": 47, "K": 130, "dtype": "float32"}, cfg(32, 32, group=8, warps=4)),
    ({"M": 20, "N": 24, "K": 100, "dtype": "float32"}, cfg(32, 16, bk=64, split=8, fused=True)),
    # Slice counts that are not powers of two: 5 K blocks over 3 slices (2, 2, 1); 3 over 6.
    ({"M": 24, "N": 40, "K": 160, "dtype": "float16"}, cfg(16, 32, split=3)),
    ({"M": 24, "N": 40, "K": 160, "dtype": "bfloat16"}, cfg(16, 32, split=3, fused=True, tma=True)),
    ({"M": 8, "N": 32, "K": 96, "dtype": "float32"}, cfg(16, 32, split=6, fused=True)),
    # TMA: tiles past the edges of A and B come back zero-filled, no load is masked.
    ({"M": 33, "N": 48, "K": 80, "dtype": "float16"}, cfg(32, 32, group=4, tma=True)),
    ({"M": 1, "N": 64, "K": 72, "dtype": "bfloat16"}, cfg(16, 32, split=4, tma=True)),
    ({"M": 128, "N": 64, "K": 96, "dtype": "float32"}, cfg(64, 32, split=2, fused=True, tma=True)),
    # Persistent: 4 programs in the interpreter walk 12 and 3 tiles, edges included.
    (
        {"M": 90, "N": 100, "K": 80, "dtype": "float16"},
        cfg(32, 32, group=4, tma=True, persistent=True),
    ),
    ({"M": 33, "N": 64, "K": 64, "dtype": "bfloat16"}, cfg(16, 64, tma=True, persistent=True)),
    # Stream-K, 4 programs in the interpreter: 6 tiles x 5 K steps = 30 split 8, 8, 7, 7, so
    # tiles are shared by two programs, and one tile by three (program 1 holds its middle).
    ({"M": 32, "N": 96, "K": 160, "dtype": "float16"}, cfg(16, 32, stream_k=True)),
    ({"M": 20, "N": 40, "K": 100, "dtype": "float32"}, cfg(16, 32, group=4, stream_k=True)),
    # 1 tile x 3 K steps: fewer steps than programs, so 3 programs share it.
    ({"M": 1, "N": 64, "K": 72, "dtype": "bfloat16"}, cfg(16, 64, tma=True, stream_k=True)),
    # Rows of B (N=20 float16: 40 bytes) break TMA's 16-byte alignment: the pointer loads run.
    ({"M": 16, "N": 20, "K": 32, "dtype": "float16"}, cfg(16, 32, tma=True)),
    # WIDE_N: tiles of 80 columns (64 + 16); N=200 ends inside the third tile's main block, N=72
    # inside the first tile's extra block; the K tail is zero-filled.
    ({"M": 33, "N": 200, "K": 80, "dtype": "float16"}, cfg(32, 64, group=4, tma=True, wide=True)),
    ({"M": 20, "N": 72, "K": 40, "dtype": "bfloat16"}, cfg(32, 64, tma=True, wide=True)),
    # Without TMA (rows of B not 16-byte aligned) WIDE_N runs the plain tiles.
    ({"M": 16, "N": 100, "K": 32, "dtype": "float16"}, cfg(16, 64, tma=True, wide=True)),
]


@pytest.mark.parametrize(
    ("problem", "config"),
    CASES,
    ids=[
        f"{p['M']}x{p['N']}x{p['K']}-{p['dtype']}-bm{c['BLOCK_M']}-split{c['SPLIT_K']}"
        + ("-fused" if c.get("FUSED_REDUCE") else "")
        + ("-tma" if c.get("TMA") else "")
        + ("-persistent" if c.get("PERSISTENT") else "")
        + ("-streamk" if c.get("STREAM_K") else "")
        + ("-wide" if c.get("WIDE_N") else "")
        for p, c in CASES
    ],
)
def test_correct_in_interpreter(problem: Problem, config: Config, cpu_limits: DeviceLimits) -> None:
    err, inputs = checked_launch(SPEC, problem, config, cpu_limits)
    assert err <= SPEC.tolerance(problem)
    assert inputs["out"].dtype == inputs["a"].dtype


def test_checker_catches_a_wrong_result(cpu_limits: DeviceLimits) -> None:
    problem: Problem = {"M": 16, "N": 32, "K": 32, "dtype": "float16"}
    err, inputs = checked_launch(SPEC, problem, cfg(16, 32), cpu_limits)
    assert err <= SPEC.tolerance(problem)
    ref = SPEC.reference(inputs)
    inputs["out"][3, 5] += 0.05 * float(ref.abs().max())
    assert max_rel_error(inputs["out"], ref) > SPEC.tolerance(problem)
    inputs["out"][0, 0] = float("nan")
    assert max_rel_error(inputs["out"], ref) == float("inf")


def test_stream_k_gives_the_same_bits_on_every_launch(cpu_limits: DeviceLimits) -> None:
    problem: Problem = {"M": 16, "N": 32, "K": 224, "dtype": "float32"}
    config = cfg(16, 32, stream_k=True)
    _, inputs = checked_launch(SPEC, problem, config, cpu_limits)
    first = inputs["out"].clone()
    launcher = SPEC.make_launcher(inputs, config)
    for _ in range(2):  # a second launch needs the first to reset its arrival counts
        inputs["out"].fill_(float("nan"))
        launcher()
        assert torch.equal(inputs["out"], first)


def test_split_k_reductions_give_the_same_bits_on_every_launch(cpu_limits: DeviceLimits) -> None:
    problem: Problem = {"M": 8, "N": 32, "K": 128, "dtype": "float32"}
    _, inputs = checked_launch(SPEC, problem, cfg(16, 32, split=4), cpu_limits)
    first = inputs["out"].clone()
    for fused in (False, True):
        launcher = SPEC.make_launcher(inputs, cfg(16, 32, split=4, fused=fused))
        for _ in range(2):  # a second fused launch needs the first to reset its arrival counts
            inputs["out"].fill_(float("nan"))
            launcher()
            assert torch.equal(inputs["out"], first)


@needs_gpu
@pytest.mark.parametrize("tma", [False, True])
@pytest.mark.parametrize(
    ("split", "stream_k", "pdl"),
    [(2, False, False), (3, False, False), (8, False, False), (1, True, False), (4, False, True)],
)
def test_split_k_reduction_is_race_free_on_gpu(
    split: int, stream_k: bool, pdl: bool, tma: bool
) -> None:
    """200 launches on the same inputs give the same bits each time, within tolerance: a program
    summing the slices (or stream-K partials) before every partial is visible would change them.
    With PDL (two kernels, each launched early): the main kernel waits for the NaN fill before
    it, the reduction for the main kernel's partials."""
    problem: Problem = {"M": 128, "N": 4096, "K": 4096, "dtype": "bfloat16"}
    fused = not stream_k and not pdl
    config = {
        **cfg(64, 64, bk=64, split=split, fused=fused, warps=4, tma=tma, stream_k=stream_k),
        "num_stages": 3,
        "PDL": pdl,
    }
    inputs = SPEC.build_inputs(problem, "cuda")
    launcher = SPEC.make_launcher(inputs, config)
    launcher()
    first = inputs["out"].clone()
    assert max_rel_error(first, SPEC.reference(inputs)) <= SPEC.tolerance(problem)
    mismatches = 0
    for _ in range(200):
        inputs["out"].fill_(float("nan"))
        launcher()
        mismatches += not torch.equal(inputs["out"], first)
    assert mismatches == 0


def test_pdl_is_a_hopper_split_k_parameter(
    h200_limits: DeviceLimits, cpu_limits: DeviceLimits
) -> None:
    from workers.device_table import lookup

    split = {**SPEC.default_for(h200_limits), "SPLIT_K": 4, "GROUP_M": 1, "PDL": True}
    assert SPEC.space.violation(split, h200_limits) is None
    for other in ({"SPLIT_K": 1}, {"FUSED_REDUCE": True}):
        violation = SPEC.space.violation({**split, **other}, h200_limits)
        assert violation is not None and violation.rule == "pdl-split-k"
    a100 = lookup("A100").limits
    old = SPEC.space.violation(
        {**SPEC.default_for(a100), "SPLIT_K": 4, "GROUP_M": 1, "PDL": True}, a100
    )
    assert old is not None and old.rule == "pdl-arch"
    # The interpreter cannot run griddepcontrol (inline PTX): no PDL on CPU.
    assert "PDL" not in SPEC.default_for(cpu_limits)


def test_fresh_inputs_every_call() -> None:
    a = SPEC.build_inputs(SPEC.example, "cpu")
    b = SPEC.build_inputs(SPEC.example, "cpu")
    assert not torch.equal(a["a"], b["a"])
    assert a["out"].shape == (64, 64) and a["out"].dtype == torch.float16


def test_rejects_a_non_contiguous_out() -> None:
    inputs = SPEC.build_inputs({"M": 16, "N": 16, "K": 16, "dtype": "float32"}, "cpu")
    inputs["out"] = inputs["out"].t()
    with pytest.raises(SpecError, match="contiguous 16x16"):
        SPEC.make_launcher(inputs, cfg(16, 32))


def test_tma_is_a_hopper_parameter(h200_limits: DeviceLimits) -> None:
    from workers.device_table import lookup

    a100, mi300x = lookup("A100").limits, lookup("MI300X").limits
    tma = {**SPEC.default_for(h200_limits), "TMA": True}
    assert SPEC.space.violation(tma, h200_limits) is None
    violation = SPEC.space.violation(tma, a100)
    assert violation is not None and violation.rule == "tma-arch"
    assert "TMA" not in SPEC.default_for(mi300x)


def test_wide_tiles_need_tma_and_whole_k(h200_limits: DeviceLimits) -> None:
    """WIDE_N with TMA, one K slice, neither persistent nor stream-K, BLOCK_N >= 64, and its
    wider B blocks within shared memory; its accumulators may pass the plain tiles' cap by a
    quarter (64x320 on 4 warps: 160 per thread)."""
    wide = {
        **SPEC.default_for(h200_limits),
        **cfg(64, 256, bk=64, warps=8, tma=True, wide=True),
        "num_stages": 4,
    }
    assert SPEC.space.violation(wide, h200_limits) is None
    assert SPEC.space.violation({**wide, "num_warps": 4}, h200_limits) is None
    for change in (
        {"TMA": False},
        {"SPLIT_K": 2},
        {"PERSISTENT": True},
        {"STREAM_K": True},
        {"BLOCK_N": 32, "BLOCK_M": 32, "num_warps": 4},
        {"num_stages": 5},
    ):
        violation = SPEC.space.violation({**wide, **change}, h200_limits)
        assert violation is not None and violation.rule == "wide-n", change
    # Five stages of the plain 64x256 tile fit (200 KiB); of the wide one, 240 KiB do not.
    assert SPEC.space.violation({**wide, "num_stages": 5, "WIDE_N": False}, h200_limits) is None


@needs_gpu
@pytest.mark.parametrize(
    ("problem", "config"),
    [
        ({"M": 256, "N": 10240, "K": 512, "dtype": "bfloat16"}, cfg(64, 256, bk=64, warps=8)),
        ({"M": 300, "N": 1000, "K": 200, "dtype": "float16"}, cfg(128, 128, bk=64, warps=8)),
        ({"M": 256, "N": 10240, "K": 1000, "dtype": "bfloat16"}, cfg(64, 256, bk=64, warps=4)),
    ],
)
def test_wide_tiles_on_the_gpu(problem: Problem, config: Config) -> None:
    """WIDE_N compiled for the GPU agrees with the reference (edges in M, N and K included)."""
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("WIDE_N needs TMA (sm_90+)")
    from workers.device import detect

    limits = detect("auto")[0].limits()
    config = {**SPEC.default_for(limits), **config, "TMA": True, "WIDE_N": True, "num_stages": 4}
    SPEC.space.validate(config, limits)
    inputs = SPEC.build_inputs(SPEC.validate_problem(problem), "cuda")
    inputs["out"].fill_(float("nan"))
    SPEC.make_launcher(inputs, config)()
    assert max_rel_error(inputs["out"], SPEC.reference(inputs)) <= SPEC.tolerance(problem)


@triton.jit
def _order(out, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    pid_m, pid_n = _tile(pid, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    tl.store(out + 2 * pid, pid_m)
    tl.store(out + 2 * pid + 1, pid_n)


def _tile_order(m: int, n: int, block_m: int, block_n: int, group: int) -> list[tuple[int, int]]:
    """(tile row, tile column) of each program, from the kernel's own ``_tile`` (interpreter)."""
    programs = -(-m // block_m) * -(-n // block_n)
    out = torch.full((programs, 2), -1, dtype=torch.int32)
    _order[(programs,)](out, m, n, block_m, block_n, group)
    return [(int(r), int(c)) for r, c in out.tolist()]


@pytest.mark.parametrize("m", [1, 20, 128, 300])
def test_equivalent_configs_visit_the_same_tiles_in_the_same_order(m: int) -> None:
    representative = SPEC.equivalence({"M": m, "N": 100, "K": 64, "dtype": "float16"})
    orders = {}
    for block_m in (16, 64, 128):
        for group in (1, 4, 8):
            config = cfg(block_m, 32, group=group)
            rep = representative(config)
            assert rep["GROUP_M"] <= group and rep == {**config, "GROUP_M": rep["GROUP_M"]}
            order = _tile_order(m, 100, block_m, 32, group)
            assert order == _tile_order(m, 100, block_m, 32, int(rep["GROUP_M"]))
            orders[block_m, group] = order
    if m == 300:  # 19 tile rows at BLOCK_M 16: GROUP_M 4 and 8 are kept apart, and differ
        assert representative(cfg(16, 32, group=8))["GROUP_M"] == 8
        assert orders[16, 4] != orders[16, 8]


def test_every_representative_is_valid_and_only_small_m_has_fewer_classes(
    h200_limits: DeviceLimits,
) -> None:
    valid = list(SPEC.space.iter_valid(h200_limits))
    classes = {}
    for m in (1, 4096):
        representative = SPEC.equivalence({"M": m, "N": 4096, "K": 4096, "dtype": "bfloat16"})
        reps = [representative(c) for c in valid]
        assert all(SPEC.space.violation(r, h200_limits) is None for r in reps)
        classes[m] = len({tuple(sorted(r.items())) for r in reps})
    assert classes[1] < 0.8 * len(valid) and classes[4096] == len(valid)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_vendor_path_is_torch_matmul(dtype: str) -> None:
    problem: Problem = {"M": 33, "N": 48, "K": 40, "dtype": dtype}
    assert SPEC.vendor_paths(problem) == ("torch.matmul",)
    err, _ = vendor_launch(SPEC, problem, "torch.matmul")
    assert err <= SPEC.tolerance(problem)


def test_unknown_vendor_path_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match="no vendor path 'cublas'"):
        SPEC.make_vendor_launcher(SPEC.build_inputs(SPEC.example, "cpu"), "cublas")
