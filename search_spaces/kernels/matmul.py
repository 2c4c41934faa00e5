"""Built-in ``matmul`` spec: C = A @ B with a grouped-tile Triton GEMM, optional split-K (reduced in
the same launch or by a second kernel), tiles a quarter wider than a power of two (``WIDE_N``), a
persistent TMA variant and a stream-K variant (for shapes of few tiles: every SM gets the same
share of the K steps).

Importing this module loads neither torch nor triton; the kernels live in ``_matmul_kernels``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from search_spaces.errors import SpecError
from search_spaces.kernels._common import (
    AMD_PARAMS,
    ELEMENT_BYTES,
    NVIDIA_ONLY,
    accumulator_rule,
    amd_stages_rule,
    int_param,
    multiprocessors,
    pdl_param,
    pdl_rule,
    persistent_param,
    persistent_rule,
    pop_pdl,
    smem_rule,
    tensor_descriptor,
    tma_param,
    tma_rule,
    torch_dtype,
    vendor_default,
    warps_rule,
)
from search_spaces.problem import Field, FieldKind, Problem, ProblemSchema
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
from search_spaces.spec import Inputs, KernelSpec, Launcher, split_launch_options

#: Fewest outputs per warp: one 16x16 MMA tile (NVIDIA mma m16n8 x2, AMD MFMA 16x16).
MIN_OUT_PER_WARP = 256
#: Most K elements in flight (BLOCK_K x num_stages): thirteen stages of 64, cuBLAS's pipeline on the
#: H200's few-tile shapes. Unsplit 64- and 128-row tiles with 512-832 in flight won 12 of the 24
#: few-tile shapes of benchmarks/matmul_sweep.py's narrow grid (M=128 N=6144 K=4096: 0.914 -> 1.018x
#: cuBLAS): the weights of a small-M GEMM stream from HBM, and a wave of such tiles keeps the most
#: bytes in flight without split-K's partial sums.
MAX_K_IN_FLIGHT = 832
#: Pipeline depths: 2-6, then the depths of the narrow grid's winners (8, 10, 13).
STAGES = (2, 3, 4, 5, 6, 8, 10, 13)
#: Largest tile edge ratio; thinner tiles reload one operand for little reuse.
MAX_ASPECT = 4
#: Split-K serves small M, where a BLOCK_M above this only computes padding rows.
SPLIT_K_MAX_BLOCK_M = 128
#: Split-K slice counts of the space.
SPLIT_K_VALUES = (1, 2, 3, 4, 6, 8)
#: Block size of the split-K reduction kernel (fixed: it is not tuned).
REDUCE_BLOCK = 1024
#: WIDE_N's extra columns: BLOCK_N / WIDE_N_PART more (a quarter), at least 16 (one MMA tile).
WIDE_N_PART = 4
WIDE_N_MIN_BLOCK_N = 64


def tile_columns(c: Mapping[str, Value]) -> int:
    """Columns of C per program: BLOCK_N, a quarter more with WIDE_N."""
    bn = int_param(c, "BLOCK_N")
    return bn + bn // WIDE_N_PART if c.get("WIDE_N") else bn


def _ring_bytes(c: Mapping[str, Value], columns: int) -> int:
    """Shared memory of the pipeline: num_stages blocks of A (BLOCK_M rows) and B (``columns``)."""
    tile = (int_param(c, "BLOCK_M") + columns) * int_param(c, "BLOCK_K")
    return tile * 2 * int_param(c, "num_stages")


def _smem_bytes(c: Mapping[str, Value], _lim: DeviceLimits) -> int:
    return _ring_bytes(c, int_param(c, "BLOCK_N"))


def _wide_ok(c: Mapping[str, Value], lim: DeviceLimits) -> bool:
    return (
        bool(c["TMA"])
        and int_param(c, "SPLIT_K") == 1
        and not c["PERSISTENT"]
        and not c["STREAM_K"]
        and int_param(c, "BLOCK_N") >= WIDE_N_MIN_BLOCK_N
        and _ring_bytes(c, tile_columns(c)) <= lim.shared_mem_per_block
    )


def _aspect_ok(c: Mapping[str, Value], _lim: DeviceLimits) -> bool:
    bm, bn = int_param(c, "BLOCK_M"), int_param(c, "BLOCK_N")
    return max(bm, bn) <= MAX_ASPECT * min(bm, bn)


SPACE = Space(
    params=(
        Param("BLOCK_M", pow2_range(16, 256), ParamKind.POW2, doc="rows of C per program"),
        Param("BLOCK_N", pow2_range(16, 256), ParamKind.POW2, doc="columns of C per program"),
        Param("BLOCK_K", (32, 64, 128), ParamKind.POW2, doc="K elements per loop step"),
        Param("GROUP_M", (1, 4, 8), ParamKind.POW2, doc="tile rows per L2-sharing group"),
        Param(
            "SPLIT_K",
            SPLIT_K_VALUES,
            ParamKind.INT,
            doc="programs sharing one tile's K (3 and 6 between the powers of two: the slice "
            "count of 6 of the 36 suite winners on the H200, all at M <= 128)",
        ),
        Param(
            "FUSED_REDUCE",
            (False, True),
            ParamKind.BOOL,
            doc="with split-K: the last program at each tile sums the slices in the same launch "
            "(else a second kernel does)",
        ),
        Param("num_warps", (2, 4, 8), ParamKind.POW2, doc="warps per program"),
        Param("num_stages", STAGES, ParamKind.INT, doc="software pipeline stages"),
        tma_param(
            "load A and B tiles through TMA descriptors (sm_90+, triton >= 3.4; rows of A and "
            "B must be 16-byte aligned, else the pointer loads run)"
        ),
        persistent_param(),
        Param(
            "STREAM_K",
            (False, True),
            ParamKind.BOOL,
            vendors=NVIDIA_ONLY,
            doc="one program per SM, each running the same number of K steps of the tiles laid "
            "end to end; tiles shared by programs are summed by the last to finish (fp32 "
            "partials, program order: deterministic)",
        ),
        pdl_param(),
        Param(
            "WIDE_N",
            (False, True),
            ParamKind.BOOL,
            vendors=NVIDIA_ONLY,
            doc="tiles of BLOCK_N + BLOCK_N/4 columns (a second, quarter-wide B block and "
            "accumulator): tile counts between the powers of two, e.g. 128 programs of 64x320 "
            "at M=256 N=10240 (where TMA cannot run, the plain tiles)",
        ),
        *AMD_PARAMS,
    ),
    constraints=(
        smem_rule(
            ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_stages"),
            "(BLOCK_M*BLOCK_K + BLOCK_K*BLOCK_N) * 2 bytes * num_stages <= shared memory per "
            "block (2-byte inputs; float32 problems may still run out and are recorded invalid)",
            _smem_bytes,
        ),
        accumulator_rule("BLOCK_M", "BLOCK_N"),
        Constraint(
            "work-per-warp",
            f"BLOCK_M*BLOCK_N >= num_warps * {MIN_OUT_PER_WARP} (one 16x16 MMA tile per warp)",
            ("BLOCK_M", "BLOCK_N", "num_warps"),
            lambda c, _lim: (
                int_param(c, "BLOCK_M") * int_param(c, "BLOCK_N")
                >= int_param(c, "num_warps") * MIN_OUT_PER_WARP
            ),
        ),
        Constraint(
            "tile-aspect",
            f"max(BLOCK_M, BLOCK_N) <= {MAX_ASPECT} * min(BLOCK_M, BLOCK_N)",
            ("BLOCK_M", "BLOCK_N"),
            _aspect_ok,
        ),
        Constraint(
            "pipeline-depth",
            f"BLOCK_K * num_stages <= {MAX_K_IN_FLIGHT}",
            ("BLOCK_K", "num_stages"),
            lambda c, _lim: int_param(c, "BLOCK_K") * int_param(c, "num_stages") <= MAX_K_IN_FLIGHT,
        ),
        Constraint(
            "split-k-small-m",
            f"SPLIT_K > 1 only with BLOCK_M <= {SPLIT_K_MAX_BLOCK_M}",
            ("SPLIT_K", "BLOCK_M"),
            lambda c, _lim: (
                int_param(c, "SPLIT_K") == 1 or int_param(c, "BLOCK_M") <= SPLIT_K_MAX_BLOCK_M
            ),
        ),
        Constraint(
            "split-k-no-group",
            "GROUP_M > 1 only with SPLIT_K == 1 (split-K problems have too few tile rows to group)",
            ("SPLIT_K", "GROUP_M"),
            lambda c, _lim: int_param(c, "SPLIT_K") == 1 or int_param(c, "GROUP_M") == 1,
        ),
        Constraint(
            "mfma-size",
            "matrix_instr_nonkdim <= min(BLOCK_M, BLOCK_N) (else ROCm falls back to FMA, no MFMA)",
            ("matrix_instr_nonkdim", "BLOCK_M", "BLOCK_N"),
            lambda c, _lim: (
                int_param(c, "matrix_instr_nonkdim")
                <= min(int_param(c, "BLOCK_M"), int_param(c, "BLOCK_N"))
            ),
        ),
        tma_rule(),
        Constraint(
            "fused-reduce-split-k",
            "FUSED_REDUCE only with SPLIT_K > 1",
            ("FUSED_REDUCE", "SPLIT_K"),
            lambda c, _lim: not c["FUSED_REDUCE"] or int_param(c, "SPLIT_K") > 1,
        ),
        persistent_rule(),
        Constraint(
            "stream-k-alone",
            "STREAM_K only with SPLIT_K == 1 and PERSISTENT off (it splits K itself)",
            ("STREAM_K", "SPLIT_K", "PERSISTENT"),
            lambda c, _lim: (
                not c["STREAM_K"] or (int_param(c, "SPLIT_K") == 1 and not c["PERSISTENT"])
            ),
        ),
        Constraint(
            "stream-k-small-m",
            f"STREAM_K only with BLOCK_M <= {SPLIT_K_MAX_BLOCK_M} (it serves few-tile shapes)",
            ("STREAM_K", "BLOCK_M"),
            lambda c, _lim: not c["STREAM_K"] or int_param(c, "BLOCK_M") <= SPLIT_K_MAX_BLOCK_M,
        ),
        Constraint(
            "pdl-split-k",
            "PDL only with SPLIT_K > 1 reduced by the second kernel (FUSED_REDUCE off), neither "
            "PERSISTENT nor STREAM_K: the reduction starts while the main kernel drains (H200, "
            "M <= 128: 1.01-1.03x there, 1.00x on the fused reduction)",
            ("PDL", "SPLIT_K", "FUSED_REDUCE", "PERSISTENT", "STREAM_K"),
            lambda c, _lim: (
                not c["PDL"]
                or (
                    int_param(c, "SPLIT_K") > 1
                    and not c["FUSED_REDUCE"]
                    and not c["PERSISTENT"]
                    and not c["STREAM_K"]
                )
            ),
        ),
        Constraint(
            "wide-n",
            f"WIDE_N only with TMA, SPLIT_K == 1, PERSISTENT and STREAM_K off, BLOCK_N >= "
            f"{WIDE_N_MIN_BLOCK_N} and (BLOCK_M + 5/4 BLOCK_N) * BLOCK_K * 2 bytes * num_stages "
            "<= shared memory per block (the accumulators, 5/4 of the plain tile's, may pass its "
            "cap by a quarter: 64x320 on 4 warps, 160 per thread, ran M=256 N=10240 K=8192 at "
            "1.01x cuBLAS on the H200, on 8 warps 0.80x)",
            (
                "WIDE_N",
                "TMA",
                "SPLIT_K",
                "PERSISTENT",
                "STREAM_K",
                "BLOCK_M",
                "BLOCK_N",
                "BLOCK_K",
                "num_stages",
            ),
            lambda c, lim: not c["WIDE_N"] or _wide_ok(c, lim),
        ),
        pdl_rule(),
        warps_rule(),
        amd_stages_rule(),
    ),
)

DEFAULT: Config = {
    "BLOCK_M": 64,
    "BLOCK_N": 64,
    "BLOCK_K": 32,
    "GROUP_M": 8,
    "SPLIT_K": 1,
    "FUSED_REDUCE": False,
    "num_warps": 4,
    "num_stages": 3,
    "TMA": False,
    "PERSISTENT": False,
    "STREAM_K": False,
    "PDL": False,
    "WIDE_N": False,
}


class MatmulSpec(KernelSpec):
    """C = A @ B for row-major A (MxK), B (KxN); C (MxN) in the inputs' dtype, fp32 accumulation."""

    name: ClassVar[str] = "matmul"
    description: ClassVar[str] = (
        "C = A @ B (A: MxK, B: KxN, row-major), grouped tiles, fp32 accumulation, optional split-K "
        "or stream-K"
    )
    schema: ClassVar[ProblemSchema] = ProblemSchema(
        (
            Field("M", doc="rows of A and C", batch=True),
            Field("N", doc="columns of B and C"),
            Field("K", doc="columns of A, rows of B"),
            Field("dtype", FieldKind.DTYPE, doc="dtype of A, B and C"),
        )
    )
    example: ClassVar[Problem] = {"M": 64, "N": 64, "K": 64, "dtype": "float16"}
    space: ClassVar[Space] = SPACE
    sources: ClassVar[tuple[str, ...]] = ("search_spaces.kernels._matmul_kernels",)

    def default_config(self, vendor: Vendor) -> Config:
        return vendor_default(DEFAULT, SPACE, vendor)

    def flops(self, problem: Problem) -> float:
        return 2.0 * int(problem["M"]) * int(problem["N"]) * int(problem["K"])

    def bytes_moved(self, problem: Problem) -> float:
        m, n, k = int(problem["M"]), int(problem["N"]), int(problem["K"])
        return float((m * k + k * n + m * n) * ELEMENT_BYTES[str(problem["dtype"])])

    def features(self, problem: Problem, config: Config) -> dict[str, float]:
        """log2 of the programs (tiles x split-K), of the K steps per program and of the bytes one
        pipeline stage loads, and the share of the tiles' area inside C (the rest is padding)."""
        m, n, k = int(problem["M"]), int(problem["N"]), int(problem["K"])
        bm, bk = int(config["BLOCK_M"]), int(config["BLOCK_K"])
        split = int(config.get("SPLIT_K", 1))
        cols_per_tile = tile_columns(config)
        rows, cols = -(-m // bm), -(-n // cols_per_tile)
        return {
            "log2_programs": math.log2(rows * cols * split),
            "log2_k_steps": math.log2(-(-k // (split * bk))),
            "log2_stage_bytes": math.log2(
                (bm + cols_per_tile) * bk * ELEMENT_BYTES[str(problem["dtype"])]
            ),
            "tile_fill": m * n / (rows * bm * cols * cols_per_tile),
        }

    def equivalence(self, problem: Problem) -> Callable[[Config], Config]:
        """GROUP_M at or above the tile rows (M / BLOCK_M, rounded up) puts every tile in one
        group, so all such values visit the tiles in the same order (``_tile``): the smallest of
        them in the space represents the others: fewer classes than configs at small M only (none
        fewer from M = 2048 on the H200 space). In the recorded H200
        landscapes such pairs ran a median 0.1-0.4% apart (p90 1.3% at most), GROUP_M pairs of
        two classes 1.3-16% (benchmarks/results/search/2026-12-02-8c3225b-cpu-equivalence/)."""
        m = int(problem["M"])
        groups = sorted(int(v) for v in SPACE.param("GROUP_M").values)

        def same_order(config: Config) -> Config:
            rows = -(-m // int_param(config, "BLOCK_M"))
            if int_param(config, "GROUP_M") < rows:
                return config
            return {**config, "GROUP_M": next(g for g in groups if g >= rows)}

        return same_order

    def tolerance(self, problem: Problem) -> float:
        """float32 inputs go through tl.dot as TF32 (10-bit mantissa, possibly truncated): a single
        product may be off by 2**-9 relative, so float32 gets 4e-3; half types use the defaults."""
        if problem["dtype"] == "float32":
            return 4e-3
        return super().tolerance(problem)

    def build_inputs(self, problem: Problem, device: str) -> Inputs:
        import torch

        m, n, k = int(problem["M"]), int(problem["N"]), int(problem["K"])
        dtype = torch_dtype(str(problem["dtype"]))
        return {
            "a": torch.randn(m, k, dtype=dtype, device=device),
            "b": torch.randn(k, n, dtype=dtype, device=device),
            "out": torch.empty(m, n, dtype=dtype, device=device),
        }

    def vendor_paths(self, problem: Problem) -> tuple[str, ...]:
        """cuBLAS (hipBLASLt on ROCm, the CPU's BLAS under the interpreter) through torch."""
        return ("torch.matmul",)

    def make_vendor_launcher(self, inputs: Inputs, name: str) -> Launcher:
        import torch

        if name != "torch.matmul":
            return super().make_vendor_launcher(inputs, name)
        a, b, out = inputs["a"], inputs["b"], inputs["out"]

        def launch() -> None:
            torch.matmul(a, b, out=out)

        return launch

    def make_launcher(self, inputs: Inputs, config: Config) -> Launcher:
        import torch
        import triton

        from search_spaces.kernels._matmul_kernels import (
            matmul_kernel,
            matmul_streamk_kernel,
            matmul_tma_kernel,
            matmul_tma_persistent_kernel,
            matmul_tma_wide_kernel,
            splitk_reduce_kernel,
        )

        a, b, out = inputs["a"], inputs["b"], inputs["out"]
        m, k = a.shape
        n = b.shape[1]
        if not out.is_contiguous() or tuple(out.shape) != (m, n):
            raise SpecError(f"matmul: out must be a contiguous {m}x{n} tensor")
        meta, options = split_launch_options(config)
        tma = bool(meta.pop("TMA", False)) and _tma_ready(a, b) and tensor_descriptor() is not None
        persistent = bool(meta.pop("PERSISTENT", False)) and tma
        wide = bool(meta.pop("WIDE_N", False))
        stream_k = bool(meta.pop("STREAM_K", False))
        pdl = pop_pdl(meta)
        split_k = int(config["SPLIT_K"])
        tiles = triton.cdiv(m, int(config["BLOCK_M"])) * triton.cdiv(n, int(config["BLOCK_N"]))
        # Triton's interpreter multiplies bfloat16 bit patterns in tl.dot (triton #11584).
        dot_in_fp32 = a.device.type == "cpu" and a.dtype == torch.bfloat16
        fused = bool(meta.pop("FUSED_REDUCE", False))
        kernel_args: dict[str, Any] = {
            **meta,
            **options,
            **pdl,
            "FUSED_REDUCE": fused,
            "DOT_IN_FP32": dot_in_fp32,
        }

        kernel: Any = matmul_tma_kernel if tma else matmul_kernel
        if tma:
            TensorDescriptor = tensor_descriptor()
            bm, bn, bk = (int(config[p]) for p in ("BLOCK_M", "BLOCK_N", "BLOCK_K"))
            operands: tuple[Any, ...] = (
                TensorDescriptor.from_tensor(a, [bm, bk]),
                TensorDescriptor.from_tensor(b, [bk, bn]),
            )
            sizes_and_strides: tuple[int, ...] = (m, n, k)
        else:
            operands = (a, b)
            sizes_and_strides = (m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1))
        if persistent or stream_k:
            del kernel_args["PDL"]
        if wide and tma:
            for name in ("SPLIT_K", "FUSED_REDUCE", "PDL"):
                del kernel_args[name]
            bn, bk = int(config["BLOCK_N"]), int(config["BLOCK_K"])
            extra = TensorDescriptor.from_tensor(b, [bk, bn // WIDE_N_PART])
            wide_grid = (
                triton.cdiv(m, int(config["BLOCK_M"])) * triton.cdiv(n, tile_columns(config)),
            )
            wide_args = (*operands, extra, out, m, n, k, *out.stride())

            def launch_wide() -> None:
                matmul_tma_wide_kernel[wide_grid](*wide_args, **kernel_args)

            return launch_wide
        if persistent:
            del kernel_args["SPLIT_K"], kernel_args["FUSED_REDUCE"]
            programs = min(tiles, multiprocessors(a.device))
            persistent_args = (*operands, out, *sizes_and_strides, *out.stride(), programs)

            def launch_persistent() -> None:
                matmul_tma_persistent_kernel[(programs,)](*persistent_args, **kernel_args)

            return launch_persistent
        if stream_k:
            return _stream_k_launcher(
                matmul_streamk_kernel, operands, out, sizes_and_strides, tma, tiles, config,
                kernel_args,
            )  # fmt: skip
        workspace, arrivals = out, out  # read only with SPLIT_K > 1, and with FUSED_REDUCE
        if split_k > 1:
            workspace = torch.empty(split_k, m, n, dtype=torch.float32, device=a.device)
            if fused:
                arrivals = torch.zeros(tiles, dtype=torch.int32, device=a.device)
        args = (*operands, out, workspace, arrivals, *sizes_and_strides, *out.stride(), m * n)
        grid = (tiles, split_k)
        if split_k == 1 or fused:

            def launch() -> None:
                kernel[grid](*args, **kernel_args)

            return launch
        reduce_grid = (triton.cdiv(m * n, REDUCE_BLOCK),)

        def launch_and_reduce() -> None:
            kernel[grid](*args, **kernel_args)
            splitk_reduce_kernel[reduce_grid](
                workspace, out, m * n, SPLIT_K=split_k, BLOCK=REDUCE_BLOCK, **pdl
            )

        return launch_and_reduce

    def reference(self, inputs: Inputs) -> Any:
        import torch

        a, b = inputs["a"], inputs["b"]
        wide = torch.float64 if a.device.type == "cpu" else torch.float32
        return a.to(wide) @ b.to(wide)


def _stream_k_launcher(
    kernel: Any,
    operands: tuple[Any, ...],
    out: Any,
    sizes_and_strides: tuple[int, ...],
    tma: bool,
    tiles: int,
    config: Config,
    kernel_args: dict[str, Any],
) -> Launcher:
    """The stream-K launch: one program per SM (fewer if there are fewer K steps in all), its
    fp32 workspace (two tile slots per program) and the tiles' arrival counts (zeroed here; the
    kernel leaves them zero)."""
    import torch

    m, n, k = sizes_and_strides[:3]
    bm, bn, bk = (int(config[p]) for p in ("BLOCK_M", "BLOCK_N", "BLOCK_K"))
    programs = max(1, min(multiprocessors(out.device), tiles * -(-k // bk)))
    workspace = torch.empty(programs * 2 * bm * bn, dtype=torch.float32, device=out.device)
    arrivals = torch.zeros(tiles, dtype=torch.int32, device=out.device)
    strides = (0, 0, 0, 0) if tma else sizes_and_strides[3:]
    args = (*operands, out, workspace, arrivals, m, n, k, *strides, *out.stride(), programs)
    del kernel_args["SPLIT_K"], kernel_args["FUSED_REDUCE"]
    kernel_args["TMA"] = tma

    def launch() -> None:
        kernel[(programs,)](*args, **kernel_args)

    return launch


def _tma_ready(a: Any, b: Any) -> bool:
    """Whether A and B meet TMA's layout rules: unit last stride, 16-byte aligned rows and base."""
    return all(
        t.stride(1) == 1 and (t.stride(0) * t.element_size()) % 16 == 0 and t.data_ptr() % 16 == 0
        for t in (a, b)
    )


SPEC = MatmulSpec()
