"""AMD-aware spaces of every built-in spec, checked for an MI300X (gfx942) without AMD hardware.

On ``amd`` classes the spaces add ``waves_per_eu`` and, where the kernel uses ``tl.dot`` (MFMA),
``matrix_instr_nonkdim`` and ``kpack``; they keep ``num_stages`` within what ROCm's Triton takes.
Those keys must reach Triton as launch options.
What reaches Triton is checked against Triton's own HIP backend (``HIPBackend.parse_options`` for a
gfx942 target, the call ``JITFunction`` makes on every launch), not against a GPU.
"""

import importlib.util
from typing import Any

import pytest
import torch

from search_spaces.accuracy import max_rel_error
from search_spaces.errors import ConfigError
from search_spaces.kernels._common import AMD_MAX_STAGES
from search_spaces.registry import BUILTINS, get_spec
from search_spaces.space import Config, DeviceLimits, Vendor
from search_spaces.spec import KernelSpec, split_launch_options

AMD_KEYS = {"waves_per_eu", "matrix_instr_nonkdim", "kpack"}
MFMA_KEYS = {"matrix_instr_nonkdim", "kpack"}


def _builtin(name: str) -> KernelSpec:
    module = BUILTINS[name].partition(":")[0]
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not written yet")
    return get_spec(name)


@pytest.fixture(params=sorted(BUILTINS))
def spec(request: pytest.FixtureRequest) -> KernelSpec:
    return _builtin(request.param)


def _amd_keys(spec: KernelSpec) -> set[str]:
    """The AMD options a spec's configs must carry: the MFMA ones only for kernels with tl.dot."""
    return AMD_KEYS if "tl.dot(" in spec.source_text() else AMD_KEYS - MFMA_KEYS


def test_mi300x_configs_carry_amd_options_and_few_stages(
    spec: KernelSpec, mi300x_limits: DeviceLimits
) -> None:
    configs = spec.space.enumerate(mi300x_limits)
    assert configs, f"{spec.name} has no valid config on the MI300X"
    for config in configs:
        assert set(config) & AMD_KEYS == _amd_keys(spec)
        assert "num_stages" not in config or int(config["num_stages"]) <= AMD_MAX_STAGES


def test_h200_configs_have_no_amd_options(spec: KernelSpec, h200_limits: DeviceLimits) -> None:
    configs = spec.space.enumerate(h200_limits)
    assert configs, f"{spec.name} has no valid config on the H200"
    assert all(not AMD_KEYS & set(config) for config in configs)


def test_defaults_fit_their_vendor(
    spec: KernelSpec, mi300x_limits: DeviceLimits, h200_limits: DeviceLimits
) -> None:
    amd = spec.space.validate(spec.default_for(mi300x_limits), mi300x_limits)
    assert set(amd) & AMD_KEYS == _amd_keys(spec)
    nvidia = spec.space.validate(spec.default_for(h200_limits), h200_limits)
    assert not AMD_KEYS & set(nvidia)


def test_amd_options_are_launch_options_not_constexprs(
    spec: KernelSpec, mi300x_limits: DeviceLimits
) -> None:
    meta, options = split_launch_options(spec.default_for(mi300x_limits))
    assert _amd_keys(spec) <= set(options)
    assert not AMD_KEYS & set(meta)


def test_amd_options_are_refused_on_nvidia(spec: KernelSpec) -> None:
    with pytest.raises(ConfigError, match="does not exist on nvidia"):
        spec.space.parse("waves_per_eu=2", Vendor.NVIDIA)


# fused_moe: what its launcher hands to Triton for an AMD config.

AMD_CONFIG: Config = {
    "BLOCK_SIZE_M": 16,
    "BLOCK_SIZE_N": 32,
    "BLOCK_SIZE_K": 64,
    "GROUP_SIZE_M": 1,
    "num_warps": 8,
    "num_stages": 2,
    "waves_per_eu": 2,
    "matrix_instr_nonkdim": 32,
    "kpack": 2,
}


class _Recorder:
    """Stands in for a Triton kernel: records the keyword arguments of each launch."""

    def __init__(self) -> None:
        self.launches: list[dict[str, Any]] = []

    def __getitem__(self, grid: object) -> Any:
        def launch(*args: object, **kwargs: object) -> None:
            self.launches.append(kwargs)

        return launch


@pytest.mark.filterwarnings("ignore:TRITON_DEFAULT_FP_FUSION")
def test_fused_moe_amd_config_reaches_triton_as_hip_options(
    monkeypatch: pytest.MonkeyPatch, mi300x_limits: DeviceLimits
) -> None:
    from triton.backends.amd.compiler import HIPBackend
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import CUDABackend

    import search_spaces.kernels._fused_moe_kernels as kernels

    spec = _builtin("fused_moe")
    spec.space.validate(AMD_CONFIG, mi300x_limits)
    params = set(kernels.fused_moe_kernel.arg_names)
    gemm = _Recorder()
    align = {name: _Recorder() for name in ("moe_count_kernel", "moe_offsets_kernel",
                                            "moe_scatter_kernel")}  # fmt: skip
    monkeypatch.setattr(kernels, "fused_moe_kernel", gemm)
    for name, recorder in align.items():
        monkeypatch.setattr(kernels, name, recorder)
    spec.make_launcher(spec.build_inputs(spec.example, "cpu"), AMD_CONFIG)()

    (kwargs,) = gemm.launches
    options = {k: v for k, v in kwargs.items() if k not in params}
    assert options == {k: AMD_CONFIG[k] for k in ("num_warps", "num_stages", *sorted(AMD_KEYS))}
    assert {"BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M"} <= set(kwargs)
    for recorder in align.values():
        (align_kwargs,) = recorder.launches
        assert not AMD_KEYS & set(align_kwargs)

    # JITFunction keeps a keyword that is neither a kernel parameter nor a backend option only to
    # raise "specified but unrecognised"; on gfx942 every option is taken with its value.
    hip = HIPBackend(GPUTarget("hip", "gfx942", 64)).parse_options(dict(options))
    assert {k: getattr(hip, k) for k in options} == options
    # The CUDA backend has no such options: an AMD config must never be routed to an NVIDIA GPU.
    cuda = CUDABackend(GPUTarget("cuda", 90, 32)).parse_options(dict(options))
    assert not AMD_KEYS & set(vars(cuda))


def test_fused_moe_amd_config_runs_in_the_interpreter() -> None:
    # The interpreter drops launch keywords its kernel does not declare, AMD ones included.
    spec = _builtin("fused_moe")
    inputs = spec.build_inputs(spec.example, "cpu")
    inputs["out"].fill_(float("nan"))
    spec.make_launcher(inputs, AMD_CONFIG)()
    assert max_rel_error(inputs["out"], spec.reference(inputs)) <= spec.tolerance(spec.example)
    assert bool(torch.isfinite(inputs["out"]).all())
