"""Pieces every built-in kernel spec shares: AMD-only parameters, device-limit rules, dtype names."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from search_spaces.space import (
    Config,
    Constraint,
    DeviceLimits,
    Param,
    ParamKind,
    Space,
    Value,
    Vendor,
)

AMD = frozenset({Vendor.AMD})
#: Where NVIDIA-only parameters exist: NVIDIA GPUs and the interpreter, which stands in for them
#: (see device_table) so that CPU tests run both settings.
NVIDIA_ONLY = frozenset({Vendor.NVIDIA, Vendor.CPU})
#: Where parameters exist that Triton's interpreter cannot run (inline PTX): NVIDIA GPUs only.
NVIDIA_GPU = frozenset({Vendor.NVIDIA})


def flag_param(name: str, vendors: frozenset[Vendor], doc: str) -> Param:
    """An on/off parameter that exists on ``vendors`` only."""
    return Param(name, (False, True), ParamKind.BOOL, vendors=vendors, doc=doc)


def gluon_param(doc: str) -> Param:
    """``GLUON``: the spec's Gluon kernel (NVIDIA GPUs only: the interpreter cannot run Gluon)."""
    return flag_param("GLUON", NVIDIA_GPU, doc)


#: The compute capabilities with Hopper's warpgroup MMA, which the Gluon kernels issue (Blackwell
#: has other tensor-core instructions).
GLUON_SM = range(90, 100)


def gluon_arch_rule() -> Constraint:
    """GLUON only where its kernels' warpgroup MMA exists (GLUON_SM)."""
    return Constraint(
        "gluon-arch",
        "GLUON only on sm_90 (Hopper's warpgroup MMA)",
        ("GLUON",),
        lambda c, lim: not c["GLUON"] or nvidia_sm(lim) in GLUON_SM,
    )


#: Oldest NVIDIA compute capability with programmatic dependent launch.
PDL_MIN_SM = 90


def nvidia_sm(lim: DeviceLimits) -> int:
    """The compute capability of an NVIDIA arch such as ``sm_90`` as 90 (0 if not of that form)."""
    digits = lim.arch.removeprefix("sm_").rstrip("a")
    return int(digits) if digits.isdigit() else 0


def pdl_param() -> Param:
    """``PDL``: launch with programmatic dependent launch (Triton's ``launch_pdl``). The kernel
    must start with ``gdc_wait`` before any load, then may call ``gdc_launch_dependents``."""
    return flag_param(
        "PDL",
        NVIDIA_GPU,
        "programmatic dependent launch: the launch may start while the previous kernel drains; "
        "it waits for that kernel's writes before reading",
    )


def pdl_rule() -> Constraint:
    """PDL needs sm_90+."""
    return Constraint(
        "pdl-arch",
        f"PDL only on sm_{PDL_MIN_SM}+ (Hopper and later)",
        ("PDL",),
        lambda c, lim: not c["PDL"] or nvidia_sm(lim) >= PDL_MIN_SM,
    )


def pop_pdl(meta: dict[str, object]) -> dict[str, object]:
    """Take ``PDL`` out of a config's kernel arguments; what every PDL-capable kernel's launch
    adds instead: the ``PDL`` constexpr and, when on, ``launch_pdl``."""
    on = bool(meta.pop("PDL", False))
    return {"PDL": on, **({"launch_pdl": True} if on else {})}


#: Oldest NVIDIA compute capability with TMA loads.
TMA_MIN_SM = 90


def tma_param(doc: str) -> Param:
    """``TMA``: load tiles through tensor descriptors (NVIDIA and the interpreter; with
    :func:`tma_rule`, sm_90+). ``doc`` says which tiles."""
    return flag_param("TMA", NVIDIA_ONLY, doc)


def persistent_param(note: str = "") -> Param:
    """``PERSISTENT``: with TMA, one program per SM walks its tiles in one software pipeline
    (NVIDIA and the interpreter; with :func:`persistent_rule`). ``note`` ends the doc."""
    return flag_param(
        "PERSISTENT",
        NVIDIA_ONLY,
        "with TMA: one program per SM walks its tiles in one software pipeline (the next tile's "
        f"loads overlap this tile's epilogue{note})",
    )


def persistent_rule() -> Constraint:
    """A persistent program needs TMA and walks whole tiles (SPLIT_K == 1)."""
    return Constraint(
        "persistent-tma",
        "PERSISTENT only with TMA and SPLIT_K == 1",
        ("PERSISTENT", "TMA", "SPLIT_K"),
        lambda c, _lim: not c["PERSISTENT"] or (bool(c["TMA"]) and int_param(c, "SPLIT_K") == 1),
    )


def warp_spec_param(note: str = "") -> Param:
    """``WARP_SPEC``: Triton's automatic warp specialization of a TMA kernel's main loop (NVIDIA
    and the interpreter, which runs the loop as is; with :func:`warp_spec_rule`). ``note`` ends
    the doc."""
    return flag_param(
        "WARP_SPEC",
        NVIDIA_ONLY,
        "with TMA: Triton splits the main loop's warps into a partition that issues the TMA loads "
        f"and partitions that run the MMAs and what follows them{note}",
    )


def warp_spec_rule(
    block_m: str, block_n: str, off: tuple[str, ...] = ("PERSISTENT",)
) -> Constraint:
    """Where Triton 3.6's Hopper pass gives a kernel that runs: descriptor loads, 4 warps (with
    8 the loop stays as it is), 64-row tiles (16-row ones run mma.sync and stay as they are; on
    an H200 every warp-specialized matmul tile of 128 or 256 rows hung the GPU:
    benchmarks/results/matmul_sweep/2026-12-04-bb06ace-h200-warp-specialize/), at most 128
    columns (64 x 256 fails to lower, an assertion in ConvertTritonGPUToLLVM), none of the kernel
    variants ``off`` (flags naming other kernels; fp8_matmul's persistent kernel spills)."""
    return Constraint(
        "warp-spec",
        f"WARP_SPEC only with TMA, num_warps == 4, {block_m} == 64, {block_n} <= 128 and "
        f"{', '.join(off)} off",
        ("WARP_SPEC", "TMA", "num_warps", block_m, block_n, *off),
        lambda c, _lim: (
            not c["WARP_SPEC"]
            or (
                bool(c["TMA"])
                and int_param(c, "num_warps") == 4
                and int_param(c, block_m) == 64
                and int_param(c, block_n) <= 128
                and not any(c[flag] for flag in off)
            )
        ),
    )


def tma_rule() -> Constraint:
    """TMA needs sm_90+ (the interpreter runs it too)."""
    return Constraint(
        "tma-arch",
        f"TMA only on sm_{TMA_MIN_SM}+ (Hopper and later) and in the interpreter",
        ("TMA",),
        lambda c, lim: not c["TMA"] or lim.vendor is Vendor.CPU or nvidia_sm(lim) >= TMA_MIN_SM,
    )


def listed_on_sm90(configs: Sequence[Config], space: Space, limits: DeviceLimits) -> list[Config]:
    """``configs`` completed for NVIDIA classes of sm_90+ (TMA_MIN_SM), those ``limits`` admit;
    none elsewhere: what a spec's ``listed_configs`` asks after the default."""
    if limits.vendor is not Vendor.NVIDIA or nvidia_sm(limits) < TMA_MIN_SM:
        return []
    listed = [vendor_default(c, space, limits.vendor) for c in configs]
    return [c for c in listed if space.violation(c, limits) is None]


def tensor_descriptor() -> Any:
    """Triton's host-side TensorDescriptor class, or None before triton 3.4 (no TMA there)."""
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor
    except ImportError:
        return None
    return TensorDescriptor


def int_param(config: Mapping[str, Value], name: str) -> int:
    """The config's value of parameter ``name`` as an int."""
    return int(config[name])


#: ROCm Triton's extra launch options; absent from configs on other vendors.
AMD_PARAMS: tuple[Param, ...] = (
    Param(
        "waves_per_eu",
        (0, 1, 2, 4),
        ParamKind.INT,
        AMD,
        "occupancy hint: waves per EU (0 = compiler)",
    ),
    Param(
        "matrix_instr_nonkdim",
        (16, 32),
        ParamKind.POW2,
        AMD,
        "MFMA instruction size (16x16 or 32x32)",
    ),
    Param("kpack", (1, 2), ParamKind.INT, AMD, "K elements packed per MFMA operand load"),
)

#: Defaults for the AMD-only parameters, merged into a spec's default config on AMD.
AMD_DEFAULTS: dict[str, Value] = {"waves_per_eu": 0, "matrix_instr_nonkdim": 16, "kpack": 1}

#: ROCm's Triton pipelines through its stream pipeliner with at most two stages of shared buffers.
AMD_MAX_STAGES = 2


def amd_stages_rule() -> Constraint:
    """On AMD, ``num_stages`` above AMD_MAX_STAGES is not taken by ROCm's Triton."""
    return Constraint(
        "amd-num-stages",
        f"on AMD num_stages <= {AMD_MAX_STAGES}",
        ("num_stages",),
        lambda c, lim: lim.vendor is not Vendor.AMD or int_param(c, "num_stages") <= AMD_MAX_STAGES,
    )


def warps_rule() -> Constraint:
    """num_warps × warp (or wavefront) size must fit the device's threads per block."""
    return Constraint(
        "threads-per-block",
        "num_warps x warp size <= max threads per block",
        ("num_warps",),
        lambda c, lim: int_param(c, "num_warps") * lim.warp_size <= lim.max_threads_per_block,
    )


#: Most fp32 accumulator registers per thread of a GEMM tile. NVIDIA caps a thread at 255 registers
#: and the A/B fragments, addresses and loop state need the rest; 128 still admits the usual Hopper
#: 128x256 tile on 8 warps.
MAX_ACC_PER_THREAD = 128


def accumulator_rule(block_m: str, block_n: str) -> Constraint:
    """A ``block_m`` x ``block_n`` fp32 accumulator spread over the program's threads fits
    MAX_ACC_PER_THREAD registers per thread."""

    def fits(c: Mapping[str, Value], lim: DeviceLimits) -> bool:
        threads = int_param(c, "num_warps") * lim.warp_size
        return int_param(c, block_m) * int_param(c, block_n) <= MAX_ACC_PER_THREAD * threads

    return Constraint(
        "accumulator-registers",
        f"{block_m}*{block_n} / (num_warps * warp size) <= {MAX_ACC_PER_THREAD} fp32 "
        "accumulators per thread",
        (block_m, block_n, "num_warps"),
        fits,
    )


def smem_rule(
    uses: tuple[str, ...], text: str, nbytes: Callable[[Mapping[str, Value], DeviceLimits], int]
) -> Constraint:
    """Shared memory (``nbytes`` of the config) must fit the device's shared memory per block."""
    return Constraint(
        "shared-memory",
        text,
        uses,
        lambda c, lim: nbytes(c, lim) <= lim.shared_mem_per_block,
    )


def with_vendor_defaults(config: dict[str, Value], vendor: Vendor) -> dict[str, Value]:
    """``config`` plus the AMD-only defaults on AMD (and AMD's stage cap applied)."""
    if vendor is not Vendor.AMD:
        return dict(config)
    out = {**config, **AMD_DEFAULTS}
    if "num_stages" in out:
        out["num_stages"] = min(int(out["num_stages"]), AMD_MAX_STAGES)
    return out


def vendor_default(defaults: dict[str, Value], space: Space, vendor: Vendor) -> dict[str, Value]:
    """``defaults`` with the vendor's defaults added (see with_vendor_defaults), keeping only the
    parameters ``space`` has on ``vendor``."""
    names = {p.name for p in space.params_for(vendor)}
    return {k: v for k, v in with_vendor_defaults(defaults, vendor).items() if k in names}


ELEMENT_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}


def torch_dtype(name: str) -> Any:
    """The torch dtype for a problem's dtype name (imports torch: trial process only)."""
    import torch

    return {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}[name]


def multiprocessors(device: Any) -> int:
    """SMs (CUs) of ``device``, the unit of a persistent grid; 4 in the interpreter."""
    import torch

    if device.type != "cuda":
        return 4
    return int(torch.cuda.get_device_properties(device).multi_processor_count)


#: The SDPA backends the attention specs name as vendor paths (``sdpa_<name>``), by the
#: ``torch.nn.attention.SDPBackend`` member each forces.
SDPA_BACKENDS = {
    "cudnn": "CUDNN_ATTENTION",
    "flash": "FLASH_ATTENTION",
    "efficient": "EFFICIENT_ATTENTION",
    "math": "MATH",
}


def sdpa(q: Any, k: Any, v: Any, *, gqa_native: bool | None = None, **kwargs: Any) -> Any:
    """``torch.nn.functional.scaled_dot_product_attention`` over [batch, heads, seq, head_dim]
    where K and V may have fewer heads than q (GQA): through ``enable_gqa`` where torch has it
    (2.5+; ``gqa_native`` None asks the installed torch), else with K and V repeated per group
    in the call, as a deployment on older torch does. ``kwargs`` go to SDPA."""
    import torch

    if gqa_native is None:
        gqa_native = torch.__version__ >= "2.5"
    group = q.shape[1] // k.shape[1]
    if group == 1:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, **kwargs)
    if gqa_native:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True, **kwargs)
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, **kwargs)
