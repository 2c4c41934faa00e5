"""Built-in ``rmsnorm`` spec: y = x / sqrt(mean(x**2, -1) + eps) * weight over the last dim.

Importing this module loads neither torch nor triton; the kernel lives in ``_rmsnorm_kernels``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

from search_spaces.errors import SpecError
from search_spaces.kernels._common import (
    AMD_PARAMS,
    ELEMENT_BYTES,
    NVIDIA_ONLY,
    pdl_param,
    pdl_rule,
    pop_pdl,
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

EPS = 1e-6
#: Most tile elements per thread. The chunked path holds x and the sum-of-squares accumulator in
#: fp32 (two registers per element), so 64 elements take 128 of a thread's 255 registers.
MAX_ELEMENTS_PER_THREAD = 64
#: Of the AMD launch options only the occupancy hint applies: the kernel has no tl.dot for MFMA.
AMD_ROW_PARAMS = tuple(p for p in AMD_PARAMS if p.name == "waves_per_eu")


def _elements_per_tile(c: Mapping[str, Value]) -> int:
    return int(c["BLOCK_N"]) * int(c["ROWS_PER_PROGRAM"])


def _threads(c: Mapping[str, Value], lim: DeviceLimits) -> int:
    return int(c["num_warps"]) * lim.warp_size


SPACE = Space(
    params=(
        Param("BLOCK_N", pow2_range(256, 16384), ParamKind.POW2, doc="columns per chunk"),
        Param("num_warps", (1, 2, 4, 8, 16), ParamKind.POW2, doc="warps per program"),
        Param("ROWS_PER_PROGRAM", (1, 2, 4, 8), ParamKind.POW2, doc="rows per program"),
        Param(
            "STREAMING",
            (False, True),
            ParamKind.BOOL,
            vendors=NVIDIA_ONLY,
            doc="x's last read evict-first, w evict-last, y stored streaming (.cs)",
        ),
        pdl_param(),
        *AMD_ROW_PARAMS,
    ),
    constraints=(
        warps_rule(),
        Constraint(
            "tile-registers",
            f"BLOCK_N*ROWS_PER_PROGRAM / (num_warps * warp size) <= {MAX_ELEMENTS_PER_THREAD} "
            "elements per thread",
            ("BLOCK_N", "ROWS_PER_PROGRAM", "num_warps"),
            lambda c, lim: _elements_per_tile(c) <= MAX_ELEMENTS_PER_THREAD * _threads(c, lim),
        ),
        Constraint(
            "idle-threads",
            "BLOCK_N*ROWS_PER_PROGRAM >= num_warps * warp size (every thread owns an element)",
            ("BLOCK_N", "ROWS_PER_PROGRAM", "num_warps"),
            lambda c, lim: _elements_per_tile(c) >= _threads(c, lim),
        ),
        pdl_rule(),
    ),
)

DEFAULT: Config = {
    "BLOCK_N": 4096,
    "num_warps": 8,
    "ROWS_PER_PROGRAM": 1,
    "STREAMING": False,
    "PDL": False,
}
#: The kernel's cache hints for STREAMING off / on: x's last read, w's read, y's store.
CACHE_HINTS = {
    False: {"X_EVICT": "", "W_EVICT": "", "Y_CACHE": ""},
    True: {"X_EVICT": "evict_first", "W_EVICT": "evict_last", "Y_CACHE": ".cs"},
}


class RmsnormSpec(KernelSpec):
    """RMSNorm of each row of x (MxN) with a weight of length N; y in the input dtype."""

    name: ClassVar[str] = "rmsnorm"
    description: ClassVar[str] = (
        f"y = x / sqrt(mean(x^2, -1) + {EPS:g}) * weight over rows of x (MxN), fp32 math"
    )
    schema: ClassVar[ProblemSchema] = ProblemSchema(
        (
            Field("M", doc="rows (tokens)", batch=True),
            Field("N", doc="row length (hidden size)"),
            Field("dtype", FieldKind.DTYPE, doc="dtype of x, weight and y"),
        )
    )
    example: ClassVar[Problem] = {"M": 32, "N": 512, "dtype": "float16"}
    space: ClassVar[Space] = SPACE
    sources: ClassVar[tuple[str, ...]] = ("search_spaces.kernels._rmsnorm_kernels",)

    def default_config(self, vendor: Vendor) -> Config:
        return vendor_default(DEFAULT, SPACE, vendor)

    def features(self, problem: Problem, config: Config) -> dict[str, float]:
        """log2 of the programs and of the chunks per row, and the share of the chunks' width
        inside a row (the rest is masked)."""
        m, n = int(problem["M"]), int(problem["N"])
        block, rows = int(config["BLOCK_N"]), int(config["ROWS_PER_PROGRAM"])
        chunks = -(-n // block)
        return {
            "log2_programs": math.log2(-(-m // rows)),
            "log2_chunks": math.log2(chunks),
            "chunk_fill": n / (chunks * block),
        }

    def flops(self, problem: Problem) -> float:
        return 4.0 * int(problem["M"]) * int(problem["N"])

    def bytes_moved(self, problem: Problem) -> float:
        m, n = int(problem["M"]), int(problem["N"])
        return float((2 * m * n + n) * ELEMENT_BYTES[str(problem["dtype"])])

    def build_inputs(self, problem: Problem, device: str) -> Inputs:
        import torch

        m, n = int(problem["M"]), int(problem["N"])
        dtype = torch_dtype(str(problem["dtype"]))
        return {
            "x": torch.randn(m, n, dtype=dtype, device=device),
            "weight": torch.rand(n, dtype=dtype, device=device) + 0.5,
            "out": torch.empty(m, n, dtype=dtype, device=device),
        }

    def vendor_paths(self, problem: Problem) -> tuple[str, ...]:
        """torch's fused RMSNorm over the last dim, with this spec's eps and weight."""
        return ("torch.rms_norm",)

    def make_vendor_launcher(self, inputs: Inputs, name: str) -> Launcher:
        """``torch.rms_norm`` has no ``out=``: the launch rebinds ``inputs["out"]`` to its result."""
        import torch

        if name != "torch.rms_norm":
            return super().make_vendor_launcher(inputs, name)
        x, weight = inputs["x"], inputs["weight"]
        shape = (int(x.shape[-1]),)

        def launch() -> None:
            inputs["out"] = torch.rms_norm(x, shape, weight, EPS)

        return launch

    def make_launcher(self, inputs: Inputs, config: Config) -> Launcher:
        import triton

        from search_spaces.kernels._rmsnorm_kernels import rmsnorm_kernel

        x, weight, out = inputs["x"], inputs["weight"], inputs["out"]
        m, n = x.shape
        if x.stride(1) != 1 or out.stride(1) != 1 or not weight.is_contiguous():
            raise SpecError("rmsnorm: x, weight and out must be contiguous along the last dim")
        meta, options = split_launch_options(config)
        block_n = int(config["BLOCK_N"])
        grid = (triton.cdiv(m, int(config["ROWS_PER_PROGRAM"])),)
        streaming = bool(meta.pop("STREAMING", False))
        pdl = pop_pdl(meta)
        kernel_args: dict[str, Any] = {
            **meta,
            **options,
            **CACHE_HINTS[streaming],
            **pdl,
            "ONE_PASS": block_n >= n,
        }
        x_stride, out_stride = x.stride(0), out.stride(0)

        def launch() -> None:
            rmsnorm_kernel[grid](x, weight, out, m, n, x_stride, out_stride, EPS, **kernel_args)

        return launch

    def reference(self, inputs: Inputs) -> Any:
        import torch

        x = inputs["x"].float()
        rstd = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + EPS)
        return x * rstd * inputs["weight"].float()


SPEC = RmsnormSpec()
