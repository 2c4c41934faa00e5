"""A user's own kernel spec: ``out = a * scale + b``, tuned over BLOCK_SIZE and num_warps.

Tune it with ``tunefleet tune examples.user_kernel:SPEC -p N=4096,dtype=float16`` (any
``module:attribute`` that imports, also from the current folder, works). Keep torch and triton
imports inside the methods that run trials, and list the module that holds the Triton code in
``sources`` so that editing the kernel changes its version.
"""

from __future__ import annotations

from typing import Any, ClassVar

from search_spaces import (
    Config,
    Constraint,
    Field,
    FieldKind,
    Inputs,
    KernelSpec,
    Launcher,
    Param,
    ParamKind,
    Problem,
    ProblemSchema,
    Space,
    Vendor,
    pow2_range,
    split_launch_options,
)

SCALE = 0.5


class ScaleAddSpec(KernelSpec):
    """out = a * SCALE + b over N elements."""

    name: ClassVar[str] = "scale_add"
    description: ClassVar[str] = f"out = a * {SCALE} + b (elementwise, N elements)"
    schema: ClassVar[ProblemSchema] = ProblemSchema(
        (Field("N", doc="number of elements"), Field("dtype", FieldKind.DTYPE))
    )
    example: ClassVar[Problem] = {"N": 1000, "dtype": "float32"}
    space: ClassVar[Space] = Space(
        params=(
            Param("BLOCK_SIZE", pow2_range(128, 8192), ParamKind.POW2),
            Param("num_warps", (1, 2, 4, 8), ParamKind.POW2),
        ),
        constraints=(
            Constraint(
                "idle-threads",
                "BLOCK_SIZE >= num_warps * warp size (every thread owns an element)",
                ("BLOCK_SIZE", "num_warps"),
                lambda c, lim: int(c["BLOCK_SIZE"]) >= int(c["num_warps"]) * lim.warp_size,
            ),
        ),
    )
    sources: ClassVar[tuple[str, ...]] = ("examples._user_kernel_triton",)

    def default_config(self, vendor: Vendor) -> Config:
        return {"BLOCK_SIZE": 1024, "num_warps": 4}

    def flops(self, problem: Problem) -> float:
        return 2.0 * int(problem["N"])

    def bytes_moved(self, problem: Problem) -> float:
        size = 2 if problem["dtype"] in ("float16", "bfloat16") else 4
        return 3.0 * int(problem["N"]) * size

    def build_inputs(self, problem: Problem, device: str) -> Inputs:
        import torch

        n = int(problem["N"])
        dtype = getattr(torch, str(problem["dtype"]))
        return {
            "a": torch.randn(n, dtype=dtype, device=device),
            "b": torch.randn(n, dtype=dtype, device=device),
            "out": torch.empty(n, dtype=dtype, device=device),
        }

    def make_launcher(self, inputs: Inputs, config: Config) -> Launcher:
        import triton

        from examples._user_kernel_triton import scale_add_kernel

        a, b, out = inputs["a"], inputs["b"], inputs["out"]
        meta, options = split_launch_options(config)
        n = a.numel()
        grid = (triton.cdiv(n, int(config["BLOCK_SIZE"])),)
        kwargs: dict[str, Any] = {**meta, **options}

        def launch() -> None:
            scale_add_kernel[grid](a, b, out, n, SCALE, **kwargs)

        return launch

    def reference(self, inputs: Inputs) -> Any:
        return inputs["a"].double() * SCALE + inputs["b"].double()


SPEC = ScaleAddSpec()
