"""Param/Space behaviour on the built-in matmul and rmsnorm spaces and on small hand-made spaces."""

import dataclasses
import itertools
from collections.abc import Callable, Mapping

import pytest

from search_spaces import (
    ConfigError,
    Constraint,
    DeviceLimits,
    KernelSpec,
    Param,
    ParamKind,
    Space,
    Vendor,
)
from search_spaces.kernels._common import AMD_PARAMS
from search_spaces.kernels.matmul import SPEC as MATMUL
from search_spaces.kernels.rmsnorm import SPEC as RMSNORM
from search_spaces.space import Value

AMD_NAMES = {p.name for p in AMD_PARAMS}

# Other device classes the defaults must run on (CUDA C++ Programming Guide compute-capability table;
# ROCm "AMD GPU specifications" table for the MI250X, one GCD).
A100 = DeviceLimits(Vendor.NVIDIA, "NVIDIA A100-SXM4-80GB", "sm_80", 166912, 65536, 32, 108)
H100 = DeviceLimits(Vendor.NVIDIA, "NVIDIA H100 80GB HBM3", "sm_90", 232448, 65536, 32, 132)
B200 = DeviceLimits(Vendor.NVIDIA, "NVIDIA B200", "sm_100", 232448, 65536, 32, 148)
MI250X = DeviceLimits(Vendor.AMD, "AMD Instinct MI250X", "gfx90a", 65536, 65536, 64, 110)


def matmul_rules(c: Mapping[str, Value], lim: DeviceLimits) -> bool:
    """The matmul constraints, written out again independently of the spec module."""
    bm, bn, bk = int(c["BLOCK_M"]), int(c["BLOCK_N"]), int(c["BLOCK_K"])
    warps, stages = int(c["num_warps"]), int(c["num_stages"])
    return (
        (bm * bk + bk * bn) * 2 * stages <= lim.shared_mem_per_block
        and bm * bn / (warps * lim.warp_size) <= 128
        and bm * bn >= warps * 256
        and max(bm, bn) / min(bm, bn) <= 4
        and bk * stages <= 832
        and (c["SPLIT_K"] == 1 or bm <= 128)
        and (c["SPLIT_K"] == 1 or c["GROUP_M"] == 1)
        and warps * lim.warp_size <= lim.max_threads_per_block
        and (lim.vendor is not Vendor.AMD or stages <= 2)
        and int(c.get("matrix_instr_nonkdim", 0)) <= min(bm, bn)
        and (not c.get("FUSED_REDUCE") or c["SPLIT_K"] > 1)
        and (not c.get("PERSISTENT") or (bool(c["TMA"]) and c["SPLIT_K"] == 1))
        and (not c.get("STREAM_K") or (c["SPLIT_K"] == 1 and not c["PERSISTENT"] and bm <= 128))
        and (
            not c.get("PDL")
            or (
                c["SPLIT_K"] > 1
                and not c["FUSED_REDUCE"]
                and not c["PERSISTENT"]
                and not c["STREAM_K"]
            )
        )
        and (
            not c.get("WIDE_N")
            or (
                bool(c["TMA"])
                and c["SPLIT_K"] == 1
                and not (c["PERSISTENT"] or c["STREAM_K"])
                and bn >= 64
                and (bm + bn + bn // 4) * bk * 2 * stages <= lim.shared_mem_per_block
            )
        )
    )


def rmsnorm_rules(c: Mapping[str, Value], lim: DeviceLimits) -> bool:
    threads = int(c["num_warps"]) * lim.warp_size
    elements = int(c["BLOCK_N"]) * int(c["ROWS_PER_PROGRAM"])
    return threads <= lim.max_threads_per_block and threads <= elements <= 64 * threads


def brute_force(space: Space, lim: DeviceLimits, rules: Callable[..., bool]) -> tuple[int, int]:
    """(count by the independent rules, count by Space.violation) over the full product."""
    params = space.params_for(lim.vendor)
    by_rules = by_violation = 0
    for combo in itertools.product(*(p.values for p in params)):
        config = dict(zip((p.name for p in params), combo, strict=True))
        by_rules += rules(config, lim)
        by_violation += space.violation(config, lim) is None
    return by_rules, by_violation


@pytest.mark.parametrize(
    ("space", "rules"), [(MATMUL.space, matmul_rules), (RMSNORM.space, rmsnorm_rules)]
)
@pytest.mark.parametrize("limits_name", ["h200_limits", "mi300x_limits"])
def test_count_equals_brute_force(
    space: Space, rules: Callable[..., bool], limits_name: str, request: pytest.FixtureRequest
) -> None:
    lim = request.getfixturevalue(limits_name)
    count = space.count(lim)
    assert brute_force(space, lim, rules) == (count, count)
    assert 0 < count < space.total(lim.vendor)
    assert len(space.enumerate(lim)) == count


def test_matmul_space_size_on_h200(h200_limits: DeviceLimits) -> None:
    assert 400 <= MATMUL.space.count(h200_limits) <= 40000


@pytest.mark.parametrize("spec", [MATMUL, RMSNORM])
@pytest.mark.parametrize("lim", [A100, H100, B200, MI250X], ids=lambda lim: lim.arch)
def test_default_config_valid_everywhere(spec: KernelSpec, lim: DeviceLimits) -> None:
    assert spec.space.violation(spec.default_for(lim), lim) is None


@pytest.mark.parametrize("spec", [MATMUL, RMSNORM])
def test_default_config_valid_on_fixtures(
    spec: KernelSpec,
    h200_limits: DeviceLimits,
    mi300x_limits: DeviceLimits,
    cpu_limits: DeviceLimits,
) -> None:
    for lim in (h200_limits, mi300x_limits, cpu_limits):
        assert spec.space.violation(spec.default_for(lim), lim) is None


@pytest.mark.parametrize(
    ("spec", "amd_names"),
    [(MATMUL, AMD_NAMES), (RMSNORM, {"waves_per_eu"})],
    ids=["matmul", "rmsnorm"],
)
def test_amd_params_only_on_amd(
    spec: KernelSpec,
    amd_names: set[str],
    h200_limits: DeviceLimits,
    mi300x_limits: DeviceLimits,
    cpu_limits: DeviceLimits,
) -> None:
    space = spec.space
    assert {p.name for p in space.params_for(Vendor.AMD)} & AMD_NAMES == amd_names
    for lim in (h200_limits, cpu_limits):
        assert not AMD_NAMES & {p.name for p in space.params_for(lim.vendor)}
        assert not AMD_NAMES & set(spec.default_for(lim))
        assert not AMD_NAMES & set(next(space.iter_valid(lim)))
    assert set(spec.default_for(mi300x_limits)) & AMD_NAMES == amd_names
    assert set(next(space.iter_valid(mi300x_limits))) & AMD_NAMES == amd_names
    extra = 1
    for p in AMD_PARAMS:
        extra *= len(p.values) if p.name in amd_names else 1
    nvidia_only = 1
    for p in space.params_for(Vendor.NVIDIA):
        nvidia_only *= 1 if p.applies_to(Vendor.AMD) else len(p.values)
    assert space.total(Vendor.AMD) * nvidia_only == space.total(Vendor.NVIDIA) * extra


def test_default_on_amd_caps_stages(mi300x_limits: DeviceLimits) -> None:
    assert MATMUL.default_config(Vendor.NVIDIA)["num_stages"] == 3
    assert MATMUL.default_for(mi300x_limits)["num_stages"] == 2


def _matmul(**overrides: Value) -> dict[str, Value]:
    return {**MATMUL.default_config(Vendor.NVIDIA), **overrides}


@pytest.mark.parametrize(
    ("config", "rule", "words"),
    [
        (_matmul(BLOCK_Q=16), "unknown-parameter", "'BLOCK_Q' is not a parameter"),
        (_matmul(kpack=1), "unknown-parameter", "on nvidia"),
        (_matmul(BLOCK_M=48), "value-not-allowed", "BLOCK_M=48"),
        (_matmul(BLOCK_M="64"), "value-not-allowed", "BLOCK_M='64'"),
        ({"BLOCK_M": 64}, "missing-parameter", "lacks 'BLOCK_N'"),
        (
            _matmul(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, num_stages=5),
            "shared-memory",
            "shared memory",
        ),
        (
            _matmul(BLOCK_M=256, BLOCK_N=256, num_warps=8, num_stages=2),
            "accumulator-registers",
            "num_warps=8",
        ),
        (_matmul(BLOCK_M=16, BLOCK_N=16, num_warps=2), "work-per-warp", "BLOCK_M=16"),
        (_matmul(BLOCK_M=16, BLOCK_N=128), "tile-aspect", "BLOCK_N=128"),
        (
            _matmul(BLOCK_M=16, BLOCK_N=32, BLOCK_K=128, num_warps=2, num_stages=8),
            "pipeline-depth",
            "num_stages=8",
        ),
        (_matmul(BLOCK_M=256, SPLIT_K=2, GROUP_M=1), "split-k-small-m", "BLOCK_M=256"),
        (_matmul(BLOCK_M=32, SPLIT_K=2, GROUP_M=8), "split-k-no-group", "GROUP_M=8"),
    ],
)
def test_violation_names_the_rule(
    config: dict[str, Value], rule: str, words: str, h200_limits: DeviceLimits
) -> None:
    v = MATMUL.space.violation(config, h200_limits)
    assert v is not None
    assert v.rule == rule
    assert words in v.message
    assert "\n" not in str(v)
    with pytest.raises(ConfigError, match=rule):
        MATMUL.space.validate(config, h200_limits)


def test_violation_depends_on_device(
    h200_limits: DeviceLimits, mi300x_limits: DeviceLimits
) -> None:
    big_tiles: dict[str, Value] = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128, "num_stages": 2}
    assert MATMUL.space.violation(_matmul(**big_tiles), h200_limits) is None
    v = MATMUL.space.violation({**MATMUL.default_for(mi300x_limits), **big_tiles}, mi300x_limits)
    assert v is not None and v.rule == "shared-memory"
    assert "AMD Instinct MI300X" in v.message

    small_mfma = {**MATMUL.default_for(mi300x_limits), "BLOCK_M": 16, "matrix_instr_nonkdim": 32}
    v = MATMUL.space.violation(small_mfma, mi300x_limits)
    assert v is not None and v.rule == "mfma-size"

    three_stages = {**MATMUL.default_for(mi300x_limits), "num_stages": 3}
    v = MATMUL.space.violation(three_stages, mi300x_limits)
    assert v is not None and v.rule == "amd-num-stages"


def test_threads_per_block_rule() -> None:
    small = DeviceLimits(Vendor.NVIDIA, "tiny", "sm_00", 49152, 65536, 32, 1, 128)
    v = RMSNORM.space.violation({**RMSNORM.default_config(Vendor.NVIDIA)}, small)
    assert v is not None and v.rule == "threads-per-block"
    assert all(int(c["num_warps"]) <= 4 for c in RMSNORM.space.iter_valid(small))


def test_parse() -> None:
    space = MATMUL.space
    assert space.parse(" BLOCK_M=64, num_warps = 4,", Vendor.NVIDIA) == {
        "BLOCK_M": 64,
        "num_warps": 4,
    }
    assert space.parse("kpack=2,waves_per_eu=0", Vendor.AMD) == {"kpack": 2, "waves_per_eu": 0}
    assert space.parse("", Vendor.NVIDIA) == {}


@pytest.mark.parametrize(
    ("text", "vendor", "words"),
    [
        ("BLOCK_M", Vendor.NVIDIA, "is not NAME=VALUE"),
        ("BLOCK_Q=16", Vendor.NVIDIA, "unknown parameter 'BLOCK_Q'"),
        ("BLOCK_M=48", Vendor.NVIDIA, "BLOCK_M=48 is not allowed; choose one of 16, 32"),
        ("BLOCK_M=sixty", Vendor.NVIDIA, "choose one of"),
        ("kpack=2", Vendor.NVIDIA, "does not exist on nvidia"),
    ],
)
def test_parse_errors(text: str, vendor: Vendor, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        MATMUL.space.parse(text, vendor)
    assert words in str(err.value)
    assert "\n" not in str(err.value)


def _tiny_space(values: tuple[int, ...] = (1, 2, 4), text: str = "A*B <= 8") -> Space:
    return Space(
        (Param("A", values, ParamKind.POW2), Param("B", (1, 2, 4), ParamKind.POW2)),
        (Constraint("product", text, ("A", "B"), lambda c, _l: int(c["A"]) * int(c["B"]) <= 8),),
    )


def test_hash_stable_and_sensitive() -> None:
    base = _tiny_space()
    assert base.hash() == base.hash() == _tiny_space().hash()
    assert len(base.hash()) == 16
    assert _tiny_space(values=(1, 2, 8)).hash() != base.hash()
    assert _tiny_space(text="A*B <= 16").hash() != base.hash()
    as_int = Space((dataclasses.replace(base.params[0], kind=ParamKind.INT), base.params[1]))
    assert as_int.hash() != Space(base.params).hash()
    assert MATMUL.space.hash() == MATMUL.space.hash() != RMSNORM.space.hash()


def test_matmul_hash_changes_with_a_constraint_text() -> None:
    space = MATMUL.space
    edited = dataclasses.replace(space.constraints[0], text=space.constraints[0].text + " ")
    changed = Space(space.params, (edited, *space.constraints[1:]))
    assert changed.hash() != space.hash()


def test_param_definition_errors() -> None:
    with pytest.raises(ValueError, match="pow2"):
        Param("X", (3,), ParamKind.POW2)
    with pytest.raises(ValueError, match="repeats"):
        Param("X", (1, 1))
    with pytest.raises(ValueError, match="no values"):
        Param("X", ())
    with pytest.raises(ValueError, match="unknown parameters"):
        Space((Param("A", (1,)),), (Constraint("c", "t", ("Z",), lambda c, _l: True),))


def test_pow2_params_are_ordered() -> None:
    kinds = {p.name: p.kind for p in MATMUL.space.params}
    for name in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps"):
        assert kinds[name] is ParamKind.POW2
    assert kinds["SPLIT_K"] is ParamKind.INT  # 3 and 6 fill waves; still ordered
    assert all(
        p.kind.ordered
        for p in MATMUL.space.params
        if p.name not in AMD_NAMES and p.kind is not ParamKind.BOOL
    )


def test_config_key_is_the_canonical_json_whatever_the_order_type_or_hashability() -> None:
    from search_spaces.space import config_key

    assert config_key({"b": 2, "a": 1}) == config_key({"a": 1, "b": 2}) == '{"a":1,"b":2}'
    # Equal as Python values (and hashed alike), not as configs: the memo keeps them apart.
    assert [config_key({"x": v}) for v in (1, True, 1.0)] == ['{"x":1}', '{"x":true}', '{"x":1.0}']
    assert [config_key({"x": v}) for v in (True, 1.0, 1)] == ['{"x":true}', '{"x":1.0}', '{"x":1}']
    assert config_key({"x": [1, 2]}) == '{"x":[1,2]}'  # unhashable: not memoised
