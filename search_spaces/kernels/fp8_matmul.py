"""Built-in ``fp8_matmul`` spec: block-scaled FP8 GEMM in the layout of vLLM's and DeepSeek-V3's
block-FP8 linears (``block_shape=[128, 128]``).

C[M, N] (bfloat16) = (A * a_scale) @ (B * b_scale)^T, where A is e4m3 [M, K] with one fp32 scale
per row and 128 columns (``a_scale``: [M, K/128], per-token groups), and B is e4m3 [N, K] (the
weight as a linear layer stores it) with one fp32 scale per 128x128 block (``b_scale``:
[ceil(N/128), K/128]; N is any size, the last block of rows may be partial, as in vLLM). K is a
multiple of 128. The Triton kernel scales each K step's product as it accumulates in fp32.
``GLUON`` (sm_90 only) picks a second kernel, written in Gluon in DeepGEMM's layout
(``_fp8_matmul_gluon``): a TMA producer warp and two 64-row consumer warpgroups, each scaling one
K step's product while the next runs on the tensor cores.

Importing this module loads neither torch nor triton; the kernels live in ``_fp8_matmul_kernels``
and ``_fp8_matmul_gluon``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from search_spaces.errors import ProblemError, SpecError
from search_spaces.kernels._common import (
    AMD_PARAMS,
    MAX_ACC_PER_THREAD,
    accumulator_rule,
    amd_stages_rule,
    gluon_arch_rule,
    gluon_param,
    int_param,
    listed_on_sm90,
    multiprocessors,
    nvidia_sm,
    persistent_param,
    persistent_rule,
    smem_rule,
    tensor_descriptor,
    tma_param,
    tma_rule,
    vendor_default,
    warp_spec_param,
    warp_spec_rule,
    warps_rule,
)
from search_spaces.problem import Field, Problem, ProblemSchema
from search_spaces.space import (
    Config,
    Constraint,
    DeviceLimits,
    Param,
    ParamKind,
    Space,
    Value,
    Vendor,
    pow2_range,
)
from search_spaces.spec import Inputs, KernelSpec, Launcher, MathRate, split_launch_options

#: Edge of the scale blocks: A has a scale per row and SCALE_BLOCK columns, B per SCALE_BLOCK x
#: SCALE_BLOCK block (vLLM's ``block_shape=[128, 128]``, DeepSeek-V3's checkpoints).
SCALE_BLOCK = 128
#: Largest finite float8_e4m3fn: quantization maps each group's or block's amax onto it.
E4M3_MAX = 448.0
#: Fewest outputs per warp: one 16x16 MMA tile.
MIN_OUT_PER_WARP = 256
#: Split-K serves small M (decode batches), where taller tiles only compute padding rows.
SPLIT_K_MAX_BLOCK_M = 64
#: Oldest NVIDIA compute capability with FP8 tensor cores (Ada; Hopper is sm_90).
FP8_MIN_SM = 89
#: AMD archs with FP8 matrix cores: CDNA3 (MI300X/MI325X; its native format is e4m3fnuz, the e4m3fn
#: operands here go through Triton's conversion), CDNA4 (MI350) and RDNA4.
FP8_AMD_ARCHS = ("gfx942", "gfx950", "gfx1200", "gfx1201")
#: Block size of the split-K reduction kernel (fixed: it is not tuned).
REDUCE_BLOCK = 1024
#: Element bytes: e4m3 operands, fp32 scales, bfloat16 output.
FP8_BYTES, SCALE_BYTES, OUT_BYTES = 1, 4, 2

VENDOR_SCALED_MM = "torch._scaled_mm"
VENDOR_DEQUANT = "dequant+torch.matmul"

#: GLUON's kernel: a 128-row tile (two consumer partitions of 64 rows, one warpgroup each:
#: num_warps is the first partition's), tiles inside one of B's scale blocks, and one scale group
#: per K step.
GLUON_BLOCK_M = 128
GLUON_BLOCK_N = (64, 128)
GLUON_WARPS = 4
#: Parameters GLUON's kernel has no counterpart of (it lags the scaling itself; WARP_SPEC's own
#: rule keeps it off GLUON's 128-row tiles).
GLUON_OFF = ("SCALE_LAG",)


def _gluon_tile(c: Mapping[str, Value]) -> bool:
    return (
        int_param(c, "BLOCK_SIZE_M") == GLUON_BLOCK_M
        and int_param(c, "BLOCK_SIZE_N") in GLUON_BLOCK_N
        and int_param(c, "BLOCK_SIZE_K") == SCALE_BLOCK
        and int_param(c, "SPLIT_K") == 1
        and int_param(c, "num_warps") == GLUON_WARPS
        and bool(c["TMA"])
        and not any(c[name] for name in GLUON_OFF)
    )


def _smem_bytes(c: Mapping[str, Value], _lim: DeviceLimits) -> int:
    rows = int_param(c, "BLOCK_SIZE_M") + int_param(c, "BLOCK_SIZE_N")
    return rows * int_param(c, "BLOCK_SIZE_K") * FP8_BYTES * int_param(c, "num_stages")


SPACE = Space(
    params=(
        Param("BLOCK_SIZE_M", pow2_range(16, 256), ParamKind.POW2, doc="rows of C per program"),
        Param("BLOCK_SIZE_N", pow2_range(32, 256), ParamKind.POW2, doc="columns of C per program"),
        Param(
            "BLOCK_SIZE_K",
            (64, 128),
            ParamKind.POW2,
            doc=f"K elements per loop step; every value divides the scale block ({SCALE_BLOCK}), "
            "so a step never spans two scale groups",
        ),
        Param(
            "GROUP_SIZE_M",
            (1, 8, 16, 32, 64),
            ParamKind.POW2,
            doc="tile rows per L2-sharing group (vLLM's 1/16/32/64 and Triton's usual 8)",
        ),
        Param(
            "SPLIT_K",
            (1, 2, 4, 8),
            ParamKind.POW2,
            doc="programs sharing one tile's K, their fp32 slices summed by a second kernel "
            "(not in vLLM's kernel: a vLLM file carries SPLIT_K == 1 configs only)",
        ),
        Param("num_warps", (4, 8), ParamKind.POW2, doc="warps per program"),
        Param("num_stages", (2, 3, 4, 5, 6), ParamKind.INT, doc="software pipeline stages"),
        tma_param("load A and B tiles through TMA descriptors (sm_90+; not in vLLM's kernel)"),
        persistent_param("; not in vLLM's kernel"),
        Param(
            "SCALE_LAG",
            (False, True),
            ParamKind.BOOL,
            doc="scale and add each K step's product one step later, overlapping the scaling "
            "with the next step's MMA (a third accumulator tile; not in vLLM's kernel)",
        ),
        warp_spec_param("; not in vLLM's kernel"),
        gluon_param(
            "the Gluon kernel: a TMA producer warp feeding two 64-row consumer warpgroups through "
            "a num_stages-deep ring, each scaling one K step's product while the next runs on the "
            "tensor cores (DeepGEMM's layout; sm_90; PERSISTENT: one program per SM; not in "
            "vLLM's kernel)"
        ),
        *AMD_PARAMS,
    ),
    constraints=(
        smem_rule(
            ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "num_stages"),
            "(BLOCK_SIZE_M + BLOCK_SIZE_N) * BLOCK_SIZE_K * 1 byte * num_stages <= shared memory "
            "per block",
            _smem_bytes,
        ),
        # The kernel holds two such tiles (the running sum and the step's product before it is
        # scaled); the shared cap still admits vLLM's tuned Hopper tiles (64x128 on 4 warps).
        accumulator_rule("BLOCK_SIZE_M", "BLOCK_SIZE_N"),
        Constraint(
            "work-per-warp",
            f"BLOCK_SIZE_M*BLOCK_SIZE_N >= num_warps * {MIN_OUT_PER_WARP} (one 16x16 MMA tile "
            "per warp)",
            ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "num_warps"),
            lambda c, _lim: (
                int_param(c, "BLOCK_SIZE_M") * int_param(c, "BLOCK_SIZE_N")
                >= int_param(c, "num_warps") * MIN_OUT_PER_WARP
            ),
        ),
        Constraint(
            "lagged-scale-registers",
            f"SCALE_LAG only where BLOCK_SIZE_M*BLOCK_SIZE_N / (num_warps * warp size) <= "
            f"{MAX_ACC_PER_THREAD // 2} (it holds the last step's product beside the two tiles)",
            ("SCALE_LAG", "BLOCK_SIZE_M", "BLOCK_SIZE_N", "num_warps"),
            lambda c, lim: (
                not c["SCALE_LAG"]
                or int_param(c, "BLOCK_SIZE_M") * int_param(c, "BLOCK_SIZE_N")
                <= MAX_ACC_PER_THREAD // 2 * int_param(c, "num_warps") * lim.warp_size
            ),
        ),
        persistent_rule(),
        Constraint(
            "split-k-small-m",
            f"SPLIT_K > 1 only with BLOCK_SIZE_M <= {SPLIT_K_MAX_BLOCK_M}",
            ("SPLIT_K", "BLOCK_SIZE_M"),
            lambda c, _lim: (
                int_param(c, "SPLIT_K") == 1 or int_param(c, "BLOCK_SIZE_M") <= SPLIT_K_MAX_BLOCK_M
            ),
        ),
        Constraint(
            "split-k-no-group",
            "GROUP_SIZE_M > 1 only with SPLIT_K == 1 (split-K problems have too few tile rows "
            "to group)",
            ("SPLIT_K", "GROUP_SIZE_M"),
            lambda c, _lim: int_param(c, "SPLIT_K") == 1 or int_param(c, "GROUP_SIZE_M") == 1,
        ),
        tma_rule(),
        warp_spec_rule("BLOCK_SIZE_M", "BLOCK_SIZE_N"),
        gluon_arch_rule(),
        Constraint(
            "gluon-tile",
            f"GLUON only with BLOCK_SIZE_M = {GLUON_BLOCK_M}, BLOCK_SIZE_N in {GLUON_BLOCK_N}, "
            f"BLOCK_SIZE_K = {SCALE_BLOCK}, SPLIT_K = 1, num_warps = {GLUON_WARPS}, TMA on and "
            f"{' and '.join(GLUON_OFF)} off",
            (
                "GLUON",
                "BLOCK_SIZE_M",
                "BLOCK_SIZE_N",
                "BLOCK_SIZE_K",
                "SPLIT_K",
                "num_warps",
                "TMA",
                *GLUON_OFF,
            ),
            lambda c, _lim: not c["GLUON"] or _gluon_tile(c),
        ),
        Constraint(
            "mfma-size",
            "matrix_instr_nonkdim <= min(BLOCK_SIZE_M, BLOCK_SIZE_N) (else ROCm falls back to "
            "FMA, no MFMA)",
            ("matrix_instr_nonkdim", "BLOCK_SIZE_M", "BLOCK_SIZE_N"),
            lambda c, _lim: (
                int_param(c, "matrix_instr_nonkdim")
                <= min(int_param(c, "BLOCK_SIZE_M"), int_param(c, "BLOCK_SIZE_N"))
            ),
        ),
        warps_rule(),
        amd_stages_rule(),
    ),
)

#: vLLM's config when no tuned file matches (``w8a8_block_fp8_matmul``'s fallback): what a
#: deployment runs untuned.
DEFAULT: Config = {
    "BLOCK_SIZE_M": 64,
    "BLOCK_SIZE_N": SCALE_BLOCK,
    "BLOCK_SIZE_K": SCALE_BLOCK,
    "GROUP_SIZE_M": 32,
    "SPLIT_K": 1,
    "num_warps": 4,
    "num_stages": 2,
    "TMA": False,
    "PERSISTENT": False,
    "SCALE_LAG": False,
    "WARP_SPEC": False,
    "GLUON": False,
}

#: Asked right after the default on sm_90+ (``listed_configs``): the tiles that won the issue
#: grid's fixed-candidate sweep on an H100 (benchmarks/results/fp8/2026-12-07-c52ffdf-h100-gluon/):
#: 64x128 with TMA up to a few hundred rows, 16-row split-K at small M, and the Gluon kernel's
#: 128x128 (4 and 5 stages) and 128x64 (6 stages) tiles from M=128 up.
SM90_LISTED: tuple[Config, ...] = (
    {**DEFAULT, "num_stages": 4, "TMA": True},
    {**DEFAULT, "BLOCK_SIZE_M": 16, "GROUP_SIZE_M": 1, "SPLIT_K": 4, "num_stages": 4},
    {**DEFAULT, "BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "GROUP_SIZE_M": 1, "SPLIT_K": 8,
     "num_stages": 5, "TMA": True},
    {**DEFAULT, "BLOCK_SIZE_M": 128, "GROUP_SIZE_M": 16, "num_stages": 4, "TMA": True,
     "GLUON": True},
    {**DEFAULT, "BLOCK_SIZE_M": 128, "GROUP_SIZE_M": 16, "num_stages": 5, "TMA": True,
     "GLUON": True},
    {**DEFAULT, "BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 64, "GROUP_SIZE_M": 16, "num_stages": 6,
     "TMA": True, "GLUON": True},
)  # fmt: skip


class Fp8MatmulSpec(KernelSpec):
    """Block-scaled FP8 C = A @ B^T (vLLM's ``w8a8_block_fp8_matmul`` layout), bfloat16 out."""

    name: ClassVar[str] = "fp8_matmul"
    description: ClassVar[str] = (
        "C = (A * a_scale) @ (B * b_scale)^T: A e4m3 [M, K] with per-token-group scales "
        "[M, K/128], B e4m3 [N, K] with 128x128 block scales [ceil(N/128), K/128], bfloat16 "
        "out, fp32 accumulation, optional split-K"
    )
    schema: ClassVar[ProblemSchema] = ProblemSchema(
        (
            Field("M", doc="rows of A and C (tokens)", batch=True),
            Field(
                "N",
                doc=f"rows of B, columns of C (any size: B's last {SCALE_BLOCK}-row scale block "
                "may be partial)",
            ),
            Field("K", doc=f"columns of A and B (a multiple of {SCALE_BLOCK})"),
        )
    )
    example: ClassVar[Problem] = {"M": 16, "N": 256, "K": 256}
    space: ClassVar[Space] = SPACE
    sources: ClassVar[tuple[str, ...]] = (
        "search_spaces.kernels._fp8_matmul_kernels",
        "search_spaces.kernels._fp8_matmul_gluon",
    )
    #: e4m3 operands: the FP8 tensor cores, at twice the bf16 rate.
    math_rate: ClassVar[MathRate] = MathRate.FP8

    def validate_problem(self, raw: Mapping[str, object]) -> Problem:
        """K must be a multiple of the scale block (A's per-token groups, as vLLM requires); N is
        free (B's last block of rows may be partial)."""
        problem = super().validate_problem(raw)
        if int(problem["K"]) % SCALE_BLOCK:
            raise ProblemError(
                f"K={problem['K']} is not a multiple of {SCALE_BLOCK}: fp8_matmul's scales cover "
                f"whole {SCALE_BLOCK}-wide groups of K (A's per-token groups, B's "
                f"{SCALE_BLOCK}x{SCALE_BLOCK} blocks)"
            )
        return problem

    def check_device(self, problem: Problem, limits: DeviceLimits) -> str | None:
        """FP8 needs FP8 tensor cores: NVIDIA sm_89+ or an AMD arch of FP8_AMD_ARCHS (the
        interpreter runs it on the CPU)."""
        if limits.vendor is Vendor.CPU:
            return None
        if limits.vendor is Vendor.NVIDIA and nvidia_sm(limits) >= FP8_MIN_SM:
            return None
        if limits.vendor is Vendor.AMD and limits.arch in FP8_AMD_ARCHS:
            return None
        return (
            f"{self.name} needs FP8 tensor cores (NVIDIA sm_{FP8_MIN_SM}+, AMD "
            f"{'/'.join(FP8_AMD_ARCHS)}) and {limits.name} is {limits.arch}"
        )

    def default_config(self, vendor: Vendor) -> Config:
        return vendor_default(DEFAULT, SPACE, vendor)

    def listed_configs(self, limits: DeviceLimits) -> list[Config]:
        """SM90_LISTED on NVIDIA classes of sm_90+, those their limits admit; none elsewhere."""
        return listed_on_sm90(SM90_LISTED, SPACE, limits)

    def flops(self, problem: Problem) -> float:
        return 2.0 * int(problem["M"]) * int(problem["N"]) * int(problem["K"])

    def bytes_moved(self, problem: Problem) -> float:
        """A, B, their scales (B's last block of rows counted whole) and C."""
        m, n, k = int(problem["M"]), int(problem["N"]), int(problem["K"])
        groups = k // SCALE_BLOCK
        scales = (m + -(-n // SCALE_BLOCK)) * groups * SCALE_BYTES
        return float((m * k + n * k) * FP8_BYTES + scales + m * n * OUT_BYTES)

    def features(self, problem: Problem, config: Config) -> dict[str, float]:
        """log2 of the programs (tiles x split-K) and of the K steps per program, and the share of
        the tiles' area inside C (the rest is padding)."""
        m, n, k = int(problem["M"]), int(problem["N"]), int(problem["K"])
        bm, bn = int(config["BLOCK_SIZE_M"]), int(config["BLOCK_SIZE_N"])
        split = int(config["SPLIT_K"])
        rows, cols = -(-m // bm), -(-n // bn)
        return {
            "log2_programs": math.log2(rows * cols * split),
            "log2_k_steps": math.log2(-(-k // (split * int(config["BLOCK_SIZE_K"])))),
            "tile_fill": m * n / (rows * bm * cols * bn),
        }

    def equivalence(self, problem: Problem) -> Callable[[Config], Config]:
        """GROUP_SIZE_M at or above the tile rows puts every tile in one group: all such values
        visit the tiles in the same order, so the smallest of them represents the others."""
        m = int(problem["M"])
        groups = sorted(int(v) for v in SPACE.param("GROUP_SIZE_M").values)

        def same_order(config: Config) -> Config:
            rows = -(-m // int_param(config, "BLOCK_SIZE_M"))
            if int_param(config, "GROUP_SIZE_M") < rows:
                return config
            return {**config, "GROUP_SIZE_M": next(g for g in groups if g >= rows)}

        return same_order

    def tolerance(self, problem: Problem) -> float:
        """2e-2 max-norm relative. The quantized inputs are exact in fp32 after dequantization, so
        the error is the bfloat16 rounding of C (2**-9 of an element) plus the order and precision
        of the fp32 sums: Hopper's FP8 tensor cores keep fewer mantissa bits while they sum
        (DeepSeek-V3 measured ~2% at K=4096 when nothing else sums); the kernel (and the vendor
        paths) take each 128-wide group's partial into fp32 on its own, leaving the bfloat16
        rounding the bulk. A scale applied to the wrong group or block is off by up to 2**8
        (``build_inputs`` spreads the scales over that range), far outside."""
        return 2e-2

    def build_inputs(self, problem: Problem, device: str) -> Inputs:
        """Fresh normal data whose 128-groups of A and 128x128 blocks of B get magnitudes from
        2**-4 to 2**4, quantized as vLLM does: each group's (block's) amax maps to 448; a partial
        last block of B takes its scale from the rows it has."""
        import torch

        m, n, k = int(problem["M"]), int(problem["N"]), int(problem["K"])
        g, nb = k // SCALE_BLOCK, -(-n // SCALE_BLOCK)
        a_mag = torch.exp2(torch.randint(-4, 5, (m, g, 1), device=device).float())
        a = torch.randn(m, g, SCALE_BLOCK, device=device) * a_mag
        a_scale = a.abs().amax(dim=2).clamp(min=1e-12) / E4M3_MAX
        a_q = (a / a_scale[:, :, None]).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
        b_mag = torch.exp2(torch.randint(-4, 5, (nb, 1, g, 1), device=device).float())
        b = torch.randn(nb, SCALE_BLOCK, g, SCALE_BLOCK, device=device) * b_mag
        b.view(nb * SCALE_BLOCK, k)[n:] = 0  # rows past N pad the last block: no part of B
        b_scale = b.abs().amax(dim=(1, 3)).clamp(min=1e-12) / E4M3_MAX
        b_q = (b / b_scale[:, None, :, None]).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
        return {
            "a": a_q.reshape(m, k),
            "a_scale": a_scale,
            "b": b_q.reshape(nb * SCALE_BLOCK, k)[:n],
            "b_scale": b_scale,
            "out": torch.empty(m, n, dtype=torch.bfloat16, device=device),
        }

    def vendor_paths(self, problem: Problem) -> tuple[str, ...]:
        """cuBLASLt's DeepSeek-style blockwise FP8 GEMM through ``torch._scaled_mm`` (sm_90 with
        cuBLASLt >= 12.9 only: elsewhere its launcher raises), and what a deployment without an
        FP8 GEMM runs: B dequantized to bfloat16 once (as weights at load), A per call, and a
        bfloat16 ``torch.matmul`` (runs everywhere)."""
        return (VENDOR_SCALED_MM, VENDOR_DEQUANT)

    def make_vendor_launcher(self, inputs: Inputs, name: str) -> Launcher:
        if name == VENDOR_SCALED_MM:
            return _scaled_mm_launcher(inputs)
        if name == VENDOR_DEQUANT:
            return _dequant_matmul_launcher(inputs)
        return super().make_vendor_launcher(inputs, name)

    def make_launcher(self, inputs: Inputs, config: Config) -> Launcher:
        if config.get("GLUON", False):
            return _gluon_launcher(inputs, config)
        import torch
        import triton

        from search_spaces.kernels._fp8_matmul_kernels import (
            fp8_matmul_kernel,
            fp8_matmul_persistent_kernel,
            fp8_splitk_reduce_kernel,
        )

        a, b, a_scale, b_scale, out = _checked(inputs)
        m, k = a.shape
        n = b.shape[0]
        meta, options = split_launch_options(config)
        meta.pop("GLUON", None)
        tma = bool(meta.pop("TMA", False)) and tensor_descriptor() is not None
        persistent = bool(meta.pop("PERSISTENT", False)) and tma
        kernel_ws = bool(meta.pop("WARP_SPEC", False)) and tma
        split_k = int(config["SPLIT_K"])
        bm, bn, bk = (int(config[p]) for p in ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K"))
        if tma:
            TensorDescriptor = tensor_descriptor()
            operands: tuple[Any, ...] = (
                TensorDescriptor.from_tensor(a, [bm, bk]),
                TensorDescriptor.from_tensor(b, [bn, bk]),
            )
        else:
            operands = (a, b)
        target = out
        if split_k > 1:
            target = torch.empty(split_k, m, n, dtype=torch.float32, device=a.device)
        args = (
            *operands, a_scale, b_scale, target, m, n, k, a.stride(0), b.stride(0),
            *a_scale.stride(), *b_scale.stride(), m * n, n,
        )  # fmt: skip
        kernel_args = {**meta, **options, "SCALE_BLOCK": SCALE_BLOCK}
        tiles = triton.cdiv(m, bm) * triton.cdiv(n, bn)
        if persistent:
            programs = min(tiles, multiprocessors(a.device))
            persistent_args = (
                *operands, a_scale, b_scale, out, m, n, k, *a_scale.stride(), *b_scale.stride(),
                n, programs,
            )  # fmt: skip
            del kernel_args["SPLIT_K"]

            def launch_persistent() -> None:
                fp8_matmul_persistent_kernel[(programs,)](*persistent_args, **kernel_args)

            return launch_persistent
        kernel_args.update(TMA=tma, WARP_SPEC=kernel_ws)
        grid = (tiles, split_k)
        if split_k == 1:

            def launch() -> None:
                fp8_matmul_kernel[grid](*args, **kernel_args)

            return launch
        reduce_grid = (triton.cdiv(m * n, REDUCE_BLOCK),)

        def launch_and_reduce() -> None:
            fp8_matmul_kernel[grid](*args, **kernel_args)
            fp8_splitk_reduce_kernel[reduce_grid](
                target, out, m * n, SPLIT_K=split_k, BLOCK=REDUCE_BLOCK
            )

        return launch_and_reduce

    def reference(self, inputs: Inputs) -> Any:
        """C from the dequantized inputs, in float64 on the CPU (float32 on a GPU)."""
        import torch

        wide = torch.float64 if inputs["a"].device.type == "cpu" else torch.float32
        a, b = dequantize(inputs, wide)
        return a @ b.T


def dequantize(inputs: Inputs, dtype: Any) -> tuple[Any, Any]:
    """(A * a_scale, B * b_scale) in ``dtype``: each scale broadcast over its 128 columns of a row
    of A, its 128x128 block of B (the last block's rows past N dropped)."""
    a, b = inputs["a"], inputs["b"]
    a_scale = inputs["a_scale"].to(dtype).repeat_interleave(SCALE_BLOCK, dim=1)
    b_scale = inputs["b_scale"].to(dtype)
    b_scale = b_scale.repeat_interleave(SCALE_BLOCK, dim=0).repeat_interleave(SCALE_BLOCK, dim=1)
    return a.to(dtype) * a_scale, b.to(dtype) * b_scale[: b.shape[0]]


def _checked(inputs: Inputs) -> tuple[Any, Any, Any, Any, Any]:
    """(a, b, a_scale, b_scale, out) of ``inputs`` after checking the layout the kernels assume:
    K a multiple of 128, unit stride along K for A and B, scales of the right shapes (B's:
    [ceil(N/128), K/128]), ``out`` contiguous [M, N]."""
    a, b, out = inputs["a"], inputs["b"], inputs["out"]
    a_scale, b_scale = inputs["a_scale"], inputs["b_scale"]
    m, k = a.shape
    n = b.shape[0]
    groups, blocks = k // SCALE_BLOCK, -(-n // SCALE_BLOCK)
    if (
        k % SCALE_BLOCK
        or a.stride(1) != 1
        or b.stride(1) != 1
        or tuple(b.shape) != (n, k)
        or tuple(a_scale.shape) != (m, groups)
        or tuple(b_scale.shape) != (blocks, groups)
        or not out.is_contiguous()
        or tuple(out.shape) != (m, n)
    ):
        raise SpecError(
            f"fp8_matmul: expected K={k} a multiple of {SCALE_BLOCK}, a [{m}, {k}] and b "
            f"[{n}, {k}] with unit K stride, a_scale [{m}, {groups}], b_scale [{blocks}, "
            f"{groups}] and a contiguous out [{m}, {n}]"
        )
    return a, b, a_scale, b_scale, out


def _gluon_launcher(inputs: Inputs, config: Config) -> Launcher:
    """Launch GLUON's kernel (``_fp8_matmul_gluon``) over ``inputs`` with ``config``'s tile
    columns (BLOCK_SIZE_N), ring depth (num_stages), tile grouping and persistence (one program
    per SM); SpecError off an NVIDIA GPU (torch's meta device passes: benchmarks/aot_compile.py
    compiles the kernel through this launcher without one)."""
    a, b, a_scale, b_scale, out = _checked(inputs)
    if a.device.type not in ("cuda", "meta"):
        raise SpecError("fp8_matmul: GLUON runs on sm_90 GPUs only; use GLUON=False here")
    import triton
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from search_spaces.kernels._fp8_matmul_gluon import (
        PART_ROWS,
        PART_WARPS,
        fp8_matmul_gluon_kernel,
    )

    m, k = a.shape
    n = b.shape[0]
    block_n = int(config["BLOCK_SIZE_N"])

    def descriptor(t: Any, rows: int) -> Any:
        block = [rows, SCALE_BLOCK]
        layout = gl.NVMMASharedLayout.get_default_for(block, gl.float8e4nv)
        return TensorDescriptor.from_tensor(t, block, layout)

    operands = (descriptor(a, int(PART_ROWS.value)), descriptor(b, block_n))
    tiles = triton.cdiv(m, GLUON_BLOCK_M) * triton.cdiv(n, block_n)
    persistent = bool(config.get("PERSISTENT", False))
    programs = min(tiles, multiprocessors(a.device)) if persistent else tiles
    args = (*operands, a_scale, b_scale, out, m, n, k, *a_scale.stride(), *b_scale.stride(), n)
    kernel_args: dict[str, Any] = {
        "GROUP_SIZE_M": int(config["GROUP_SIZE_M"]),
        "BLOCK_N": block_n,
        "STAGES": int(config["num_stages"]),
        "PERSISTENT": persistent,
        "num_warps": int(PART_WARPS.value),
    }

    def launch() -> None:
        fp8_matmul_gluon_kernel[(programs,)](*args, **kernel_args)

    return launch


def _scaled_mm_launcher(inputs: Inputs) -> Launcher:
    """cuBLASLt's blockwise FP8 GEMM: A row-major with its scales outer-dim-major (1x128), B as
    the column-major [K, N] view of its [N, K] storage with the [K/128, ceil(N/128)] view of its
    scales (128x128). Raises SpecError, naming the problem and torch's reason, where it cannot run:
    torch runs this mode on sm_90 only and wants N a multiple of 16, and cuBLASLt has no kernel for
    some shapes there (on torch 2.11+cu130 an H100 ran M=16, 128 and 1000 with N=7168, K=2048 but
    refused M=1 with CUBLAS_STATUS_NOT_SUPPORTED). A is not padded to a shape it takes."""
    import torch

    a, b, a_scale, b_scale, out = _checked(inputs)
    where = "the CPU" if a.device.type != "cuda" else None
    if where is None and (torch.version.hip or torch.cuda.get_device_capability(a.device)[0] != 9):
        where = f"{torch.cuda.get_device_name(a.device)}"
    if where is not None:
        raise SpecError(
            f"{VENDOR_SCALED_MM}: blockwise 1x128/128x128 FP8 scaling runs on CUDA sm_90 only "
            f"(cuBLASLt >= 12.9), not on {where}"
        )
    scale_a = a_scale.t().contiguous().t()
    scale_b = b_scale.t()
    b_t = b.t()

    def launch() -> None:
        torch._scaled_mm(a, b_t, scale_a, scale_b, out_dtype=torch.bfloat16, out=out)

    try:
        launch()
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SpecError(
            f"{VENDOR_SCALED_MM} does not run blockwise scaling for M={a.shape[0]}, "
            f"N={b.shape[0]}, K={a.shape[1]} here: {first}"
        ) from None
    return launch


def _dequant_matmul_launcher(inputs: Inputs) -> Launcher:
    """B dequantized to bfloat16 here (a deployment does it once, at load); each launch
    dequantizes A to bfloat16 and runs ``torch.matmul`` into ``out``."""
    import torch

    a, _, a_scale, _, out = _checked(inputs)
    m, k = a.shape
    _, b_float = dequantize(inputs, torch.float32)
    b_t = b_float.to(torch.bfloat16).t()

    def launch() -> None:
        grouped = a.view(m, k // SCALE_BLOCK, SCALE_BLOCK).to(torch.float32)
        a_bf16 = (grouped * a_scale[:, :, None]).to(torch.bfloat16).view(m, k)
        torch.matmul(a_bf16, b_t, out=out)

    return launch


SPEC = Fp8MatmulSpec()
