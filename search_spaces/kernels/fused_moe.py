"""Built-in ``fused_moe`` spec: the top-k routed grouped GEMM of a Mixture-of-Experts layer.

Follows vLLM's fused-MoE Triton kernel and the space of its tuner; a problem is one GEMM of the
layer: ``gemm=up`` (gate and up projections: one x row per token), ``gemm=up_silu`` (the same with
SiLU(gate) * up taken in the epilogue, so the layer's activation needs no pass of its own),
``gemm=down`` (the down projection: one activation row per routed slot) or ``gemm=down_sum`` (the
same with each token's slots summed in the epilogue, so the layer's output needs no pass of its
own). :func:`launch_plan` prepares any GEMM's launch; :func:`silu_and_mul` is the activation
between ``up`` and ``down`` in a swapped expert block. Importing this module loads neither torch
nor triton; the kernels live in ``_fused_moe_kernels``.
"""

from __future__ import annotations

import importlib.util
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from search_spaces.errors import ProblemError, SpecError
from search_spaces.kernels._common import (
    AMD_PARAMS,
    ELEMENT_BYTES,
    accumulator_rule,
    amd_stages_rule,
    int_param,
    listed_on_sm90,
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
    DeviceLimits,
    Param,
    ParamKind,
    Space,
    Value,
    Vendor,
    pow2_range,
)
from search_spaces.spec import Inputs, KernelSpec, Launcher, split_launch_options

#: Elements of the alignment kernels' one-hot [chunk, experts] tiles; bounds their registers.
ALIGN_TILE = 4096

#: Columns per program of :func:`silu_and_mul`, and its elements per program (rows: the quotient).
SILU_BLOCK_F = 256
SILU_TILE = 4096

#: The layer's GEMMs (see FusedMoeSpec); ``up_silu`` is ``up`` with the activation in its epilogue,
#: ``down_sum`` is ``down`` with the top-k sum in its epilogue.
GEMMS = ("up", "down", "up_silu", "down_sum")
GATED = "up_silu"
SUMMED = "down_sum"
#: GEMMs whose x holds one row per routed slot.
PER_SLOT_GEMMS = ("down", SUMMED)


def out_columns(n: int, gated: bool) -> int:
    """Output columns for ``n`` weight rows: ``n``, or ``n // 2`` where ``gated`` (``up_silu``:
    half the rows gate, half up, one SiLU(gate) * up column per pair)."""
    return n // 2 if gated else n


def _smem_bytes(c: Mapping[str, Value], _lim: DeviceLimits) -> int:
    bk = int_param(c, "BLOCK_SIZE_K")
    return (
        (int_param(c, "BLOCK_SIZE_M") * bk + bk * int_param(c, "BLOCK_SIZE_N"))
        * 2
        * int_param(c, "num_stages")
    )


SPACE = Space(
    params=(
        Param(
            "BLOCK_SIZE_M", pow2_range(16, 256), ParamKind.POW2, doc="padded token rows per program"
        ),
        Param(
            "BLOCK_SIZE_N", pow2_range(32, 256), ParamKind.POW2, doc="output columns per program"
        ),
        Param("BLOCK_SIZE_K", (64, 128, 256), ParamKind.POW2, doc="K elements per loop step"),
        Param("GROUP_SIZE_M", (1, 16, 32, 64), ParamKind.INT, doc="M-blocks per L2-sharing group"),
        Param("num_warps", (4, 8), ParamKind.POW2, doc="warps per program"),
        Param("num_stages", (2, 3, 4, 5), ParamKind.INT, doc="software pipeline stages"),
        tma_param(
            "load the expert weights' tiles through a TMA descriptor (sm_90+; the token rows "
            "are gathered, so they stay pointer loads; not in vLLM's kernel)"
        ),
        *AMD_PARAMS,
    ),
    constraints=(
        smem_rule(
            ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "num_stages"),
            "(BLOCK_SIZE_M*BLOCK_SIZE_K + BLOCK_SIZE_K*BLOCK_SIZE_N) * 2 bytes * num_stages "
            "<= shared memory per block",
            _smem_bytes,
        ),
        accumulator_rule("BLOCK_SIZE_M", "BLOCK_SIZE_N"),
        warps_rule(),
        amd_stages_rule(),
        tma_rule(),
    ),
)

#: vLLM's fallback config for M > E (BLOCK_SIZE_M 64, BLOCK_SIZE_N 64, BLOCK_SIZE_K 32,
#: GROUP_SIZE_M 8, Triton's default 4 warps and 3 stages) moved onto this space: BLOCK_SIZE_K 32 is
#: not in it, so 64; GROUP_SIZE_M 8 is not in it, so 16 (the next grouped value, which keeps the
#: grouped order that 8 asks for; 1 would turn grouping off).
DEFAULT: Config = {
    "BLOCK_SIZE_M": 64,
    "BLOCK_SIZE_N": 64,
    "BLOCK_SIZE_K": 64,
    "GROUP_SIZE_M": 16,
    "num_warps": 4,
    "num_stages": 3,
    "TMA": False,
}


#: sm_90: the winners of moe_sweep's candidates on the H100 (Qwen3-30B-A3B's four GEMMs, each
#: size's winner for all four: 128x256 tiles with TMA at 8192 tokens, 64x256 with TMA at 512,
#: 16x128 at 64; benchmarks/results/moe_sweep/2026-12-07-ab2a496-h100-qwen/) and on the H200
#: (30 problems, E 8-256, top 2-8: 128x128 won 13, 16x64 won 8;
#: benchmarks/results/moe_sweep/2026-12-01-h200/), largest tiles first. A study with few trials
#: (a deployment's tune stage reached 7 at 8192 tokens) asks them before the sampler's own.
SM90_LISTED: tuple[Config, ...] = (
    {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 16,
     "num_warps": 8, "num_stages": 3, "TMA": True},
    {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 16,
     "num_warps": 8, "num_stages": 3, "TMA": False},
    {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 16,
     "num_warps": 8, "num_stages": 4, "TMA": True},
    {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1,
     "num_warps": 4, "num_stages": 4, "TMA": False},
    {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1,
     "num_warps": 4, "num_stages": 4, "TMA": False},
)  # fmt: skip


class FusedMoeSpec(KernelSpec):
    """out[m, j] = (a @ w[topk_ids[m, j]].T) * topk_weights[m, j], one of vLLM's fused-MoE GEMMs:
    a = x[m] (``gemm=up``, x [M, K]) or a = x[m * topk + j] (``gemm=down``, x [M * topk, K]).
    ``gemm=up_silu``: a = x[m] and out[m, j] = silu(g) * u * topk_weights[m, j] with g and u the
    products with the expert's first and last N/2 weight rows (vLLM's w13 layout: gate, then up).
    ``gemm=down_sum``: ``down``'s rows summed per token, out[m] = sum over j of out[m, j]; the
    kernel adds each slot's row atomically into its token's row (out's dtype), so the order of
    the additions, and the last bits of a sum, vary from run to run.

    Inputs: ``x`` as above, expert weights ``w`` [E, N, K], router output
    ``topk_ids`` [M, topk] (int32, distinct experts per token) and ``topk_weights`` [M, topk]
    (float32); ``out`` is [M, topk, N] (``up_silu``: [M, topk, N/2]; ``down_sum``: [M, N]) in the
    problem's dtype. The routed weight is applied inside the kernel (vLLM's MUL_ROUTED_WEIGHT=True).

    One launch is a zero fill (``down_sum``: two, out's too) and four Triton kernels, with no host
    synchronization: the alignment step (vLLM's moe_align_block_size: sort the M*topk token slots
    by expert and pad each expert's group to a multiple of BLOCK_SIZE_M, into buffers sized for
    the bound M*topk + E*(BLOCK_SIZE_M-1); three kernels parallel over slot chunks and over
    experts), then the grouped GEMM over the padded M-blocks (one expert per block) x N-blocks.
    """

    name: ClassVar[str] = "fused_moe"
    description: ClassVar[str] = (
        "top-k routed grouped GEMM of a MoE layer (x: MxK, w: ExNxK, out: Mx topk xN), "
        "with the token alignment by expert; like vLLM's fused_moe"
    )
    schema: ClassVar[ProblemSchema] = ProblemSchema(
        (
            Field("M", doc="tokens (batch size)", batch=True),
            Field("E", doc="experts"),
            Field("topk", doc="experts per token (<= E)"),
            Field("N", doc="output columns per expert (rows of each expert's weight)"),
            Field("K", doc="reduction size (columns of x and of each expert's weight)"),
            Field(
                "dtype",
                FieldKind.CHOICE,
                choices=("float16", "bfloat16"),
                doc="dtype of x, w and out",
            ),
            Field(
                "gemm",
                FieldKind.CHOICE,
                choices=GEMMS,
                default="up",
                doc="up: x holds one row per token; down: one row per routed slot; up_silu: "
                "up with SiLU(gate) * up in the epilogue (out N/2 columns); down_sum: down with "
                "each token's slots summed in the epilogue (out M x N)",
            ),
        )
    )
    example: ClassVar[Problem] = {
        "M": 8,
        "E": 4,
        "topk": 2,
        "N": 32,
        "K": 32,
        "dtype": "float16",
        "gemm": "up",
    }
    space: ClassVar[Space] = SPACE
    sources: ClassVar[tuple[str, ...]] = ("search_spaces.kernels._fused_moe_kernels",)

    def validate_problem(self, raw: Mapping[str, object]) -> Problem:
        problem = super().validate_problem(raw)
        if int(problem["topk"]) > int(problem["E"]):
            raise ProblemError(
                f"topk={problem['topk']} must not exceed E={problem['E']} (distinct experts)"
            )
        if problem.get("gemm") == GATED and int(problem["N"]) % 2:
            raise ProblemError(
                f"gemm=up_silu needs an even N (gate rows then as many up rows), not N={problem['N']}"
            )
        return problem

    def default_config(self, vendor: Vendor) -> Config:
        return vendor_default(DEFAULT, SPACE, vendor)

    def listed_configs(self, limits: DeviceLimits) -> list[Config]:
        """SM90_LISTED on NVIDIA classes of sm_90+, those their limits admit; none elsewhere."""
        return listed_on_sm90(SM90_LISTED, SPACE, limits)

    def flops(self, problem: Problem) -> float:
        m, topk, n, k = (int(problem[f]) for f in ("M", "topk", "N", "K"))
        return 2.0 * m * topk * n * k

    def bytes_moved(self, problem: Problem) -> float:
        """x, the weights of the experts used (at most min(E, M*topk)), and out."""
        m, e, topk, n, k = (int(problem[f]) for f in ("M", "E", "topk", "N", "K"))
        gemm = problem.get("gemm")
        rows = m * topk if gemm in PER_SLOT_GEMMS else m
        cols = out_columns(n, gemm == GATED)
        elements = rows * k + min(e, m * topk) * n * k + (m if gemm == SUMMED else m * topk) * cols
        return float(elements * ELEMENT_BYTES[str(problem["dtype"])])

    def build_inputs(self, problem: Problem, device: str) -> Inputs:
        import torch

        m, e, topk, n, k = (int(problem[f]) for f in ("M", "E", "topk", "N", "K"))
        dtype = torch_dtype(str(problem["dtype"]))
        topk_ids = torch.rand(m, e, device=device).argsort(dim=1)[:, :topk]
        topk_weights = torch.rand(m, topk, device=device) + 0.1
        gemm = problem.get("gemm")
        rows = m * topk if gemm in PER_SLOT_GEMMS else m
        out_shape = (m, n) if gemm == SUMMED else (m, topk, out_columns(n, gemm == GATED))
        return {
            "x": torch.randn(rows, k, dtype=dtype, device=device),
            "w": torch.randn(e, n, k, dtype=dtype, device=device),
            "topk_ids": topk_ids.to(torch.int32).contiguous(),
            "topk_weights": topk_weights / topk_weights.sum(dim=1, keepdim=True),
            "out": torch.empty(*out_shape, dtype=dtype, device=device),
        }

    def vendor_paths(self, problem: Problem) -> tuple[str, ...]:
        """``torch._grouped_mm`` (CUTLASS's grouped GEMM for bfloat16 on sm_90+, torch's
        fallback elsewhere) with the routing around it in the launch, as this kernel's launch
        has its alignment, and for ``down_sum`` torch's sum over the slots after it;
        ``vllm.fused_moe`` (vLLM's fused-MoE Triton kernel with its own alignment and its config
        for the shape) only where ``vllm`` is importable and never for ``up_silu`` or
        ``down_sum`` (vLLM's kernel has neither epilogue)."""
        if problem.get("gemm") in (GATED, SUMMED) or importlib.util.find_spec("vllm") is None:
            return ("torch._grouped_mm",)
        return ("torch._grouped_mm", "vllm.fused_moe")

    def make_vendor_launcher(self, inputs: Inputs, name: str) -> Launcher:
        """``torch._grouped_mm``: per launch, the slots sorted by expert (a stable sort of
        ``topk_ids``), each expert's end offset (a search in the sorted ids), the rows gathered
        in that order, the grouped GEMM, for ``up_silu`` SiLU(gate) * up as torch ops, the routed
        weights multiplied in (in the output dtype) and the rows scattered back into
        ``inputs["out"]`` (``down_sum``: into a [M, topk, N] buffer, then summed over the slots
        into ``inputs["out"]``, as the model's path); no host synchronization.
        ``vllm.fused_moe``: vLLM's ``moe_align_block_size`` and ``invoke_fused_moe_kernel`` with
        the routed weight applied in the kernel, writing ``inputs["out"]``; SpecError where the
        installed vLLM lacks them."""
        if name == "torch._grouped_mm":
            return _grouped_mm_launcher(inputs)
        if name == "vllm.fused_moe":
            return _vllm_launcher(inputs)
        return super().make_vendor_launcher(inputs, name)

    def make_launcher(self, inputs: Inputs, config: Config) -> Launcher:
        x, w, out = inputs["x"], inputs["w"], inputs["out"]
        topk_ids, topk_weights = inputs["topk_ids"], inputs["topk_weights"]
        m, topk = (int(d) for d in topk_ids.shape)
        k = int(x.shape[1])
        e, n = int(w.shape[0]), int(w.shape[1])
        if int(x.shape[0]) not in (m, m * topk):
            raise SpecError(f"fused_moe: x has {x.shape[0]} rows; want M={m} or M*topk={m * topk}")
        if tuple(w.shape) != (e, n, k) or tuple(topk_weights.shape) != (m, topk):
            raise SpecError("fused_moe: x, w, topk_ids and topk_weights do not fit each other")
        gated, summed = _gated(inputs), _summed(inputs)
        cols = out_columns(n, gated)
        if not out.is_contiguous() or tuple(out.shape) not in ((m, topk, cols), (m, n)):
            raise SpecError(
                f"fused_moe: out must be a contiguous {m}x{topk}x{n} tensor "
                f"(up_silu: {m}x{topk}x{n // 2}; down_sum: {m}x{n})"
            )
        if not (topk_ids.is_contiguous() and topk_weights.is_contiguous()):
            raise SpecError("fused_moe: topk_ids and topk_weights must be contiguous")
        per_slot = int(x.shape[0]) == m * topk and topk > 1
        run = launch_plan(config, m, e, topk, n, k, per_slot, x, gated=gated, summed=summed)

        def launch() -> None:
            if summed:
                out.zero_()
            run(x, w, topk_ids, topk_weights, out)

        return launch

    def reference(self, inputs: Inputs) -> Any:
        """The torch per-expert loop in float32: [M, topk, N] (``up_silu``: [M, topk, N/2];
        ``down_sum``: [M, N])."""
        return per_expert_loop(inputs, compute_dtype="float32")


def _gated(inputs: Inputs) -> bool:
    """Whether ``inputs`` are an ``up_silu`` problem's: out has half the weights' rows."""
    return 2 * int(inputs["out"].shape[-1]) == int(inputs["w"].shape[1])


def _summed(inputs: Inputs) -> bool:
    """Whether ``inputs`` are a ``down_sum`` problem's: out has one row per token ([M, N])."""
    return int(inputs["out"].dim()) == 2


@dataclass(frozen=True)
class PlannedLaunch:
    """One GEMM of the layer prepared for a token count: :attr:`align` (ids) sorts the slots by
    expert into the alignment buffers :attr:`aligned` (sorted_ids, expert_ids, num_post_padded),
    :attr:`gemm` (x, w, weights, out) runs the grouped GEMM over them; a call
    (x, w, ids, weights, out) does both."""

    #: Slots, experts and BLOCK_SIZE_M: plans equal in these align the same ids alike.
    align_key: tuple[int, int, int]
    aligned: tuple[Any, Any, Any]
    align: Callable[[Any], None]
    gemm: Callable[[Any, Any, Any, Any], None]

    def __call__(self, x: Any, w: Any, ids: Any, weights: Any, out: Any) -> None:
        self.align(ids)
        self.gemm(x, w, weights, out)


def launch_plan(
    config: Config,
    m: int,
    e: int,
    topk: int,
    n: int,
    k: int,
    per_slot: bool,
    like: Any,
    share: PlannedLaunch | None = None,
    gated: bool = False,
    summed: bool = False,
) -> PlannedLaunch:
    """The alignment and the grouped GEMM for ``m`` tokens under ``config``, with the alignment
    buffers allocated once (on ``like``'s device): the launch :meth:`FusedMoeSpec.make_launcher`
    times and a model's swapped expert block runs. ``per_slot``: x holds one row per routed slot
    (the down GEMM). TMA runs where the weights' rows are 16-byte aligned (else pointer loads).

    ``share``: a plan whose launch runs first on the same ids (the block's up GEMM); where it has
    this plan's align key, this plan reads its alignment and its :attr:`~PlannedLaunch.align`
    does nothing. ``gated``: the ``up_silu`` GEMM (out has n // 2 columns). ``summed``: the
    ``down_sum`` GEMM (out [m, n], which the caller zeroes before each launch: the kernel adds
    into it)."""
    import torch
    import triton

    from search_spaces.kernels._fused_moe_kernels import fused_moe_kernel, launch_align

    meta, options = split_launch_options(config)
    block_m, block_n = int_param(config, "BLOCK_SIZE_M"), int_param(config, "BLOCK_SIZE_N")
    block_k = int_param(config, "BLOCK_SIZE_K")
    # Output columns per program: a gated program's weight rows are half gate, half up.
    cols = out_columns(block_n, gated)
    descriptor = tensor_descriptor()
    tma = (
        bool(meta.pop("TMA", False))
        and descriptor is not None
        and (k * like.element_size()) % 16 == 0
    )
    slots = m * topk
    max_padded = slots + e * (block_m - 1)
    align_key = (slots, e, block_m)

    def buffer(*shape: int) -> Any:
        return torch.empty(*shape, dtype=torch.int32, device=like.device)

    if share is not None and share.align_key == align_key:
        aligned = share.aligned

        def align(ids: Any) -> None:
            """Nothing: ``share``'s launch aligned these ids."""

    else:
        e_p2 = triton.next_power_of_2(e)
        chunk = max(16, min(triton.next_power_of_2(slots), ALIGN_TILE // e_p2))
        aligned = (buffer(max_padded), buffer(triton.cdiv(max_padded, block_m)), buffer(1))
        workspace, counts = buffer(triton.cdiv(slots, chunk), e_p2), buffer(e_p2)

        def align(ids: Any) -> None:
            launch_align(
                ids, *aligned, workspace, counts, slots, e, max_padded, block_m, e_p2, chunk
            )

    sorted_ids, expert_ids, post = aligned
    grid = (triton.cdiv(max_padded, block_m) * triton.cdiv(out_columns(n, gated), cols),)
    constants = {
        **meta,
        **options,
        "TOP_K": topk,
        "A_PER_SLOT": per_slot,
        "GATED": gated,
        "SUM_SLOTS": summed,
        "COLS": cols,
        "EVEN_K": k % block_k == 0,
        "TMA": tma,
        # Triton's interpreter multiplies bfloat16 bit patterns in tl.dot (triton #11584).
        "DOT_IN_FP32": like.device.type == "cpu" and like.dtype == torch.bfloat16,
    }

    # The weights' descriptor, made on a launch with new weights (a model's are always the same).
    made: dict[tuple[int, ...], Any] = {}

    def weights_source(w: Any) -> Any:
        if not tma:
            return w
        key = (w.data_ptr(), *w.shape, *w.stride())
        if key not in made:
            if not w.is_contiguous():
                raise SpecError("fused_moe: TMA needs the expert weights contiguous")
            made.clear()
            made[key] = descriptor.from_tensor(w.view(e * n, k), [cols, block_k])
        return made[key]

    # Triton's interpreter has no bfloat16 atomic add: there a sum goes through float32.
    through_fp32 = summed and like.device.type == "cpu" and like.dtype == torch.bfloat16

    def gemm(x: Any, w: Any, weights: Any, out: Any) -> None:
        dest = torch.zeros(out.shape, dtype=torch.float32) if through_fp32 else out
        fused_moe_kernel[grid](
            x, weights_source(w), dest, weights, sorted_ids, expert_ids, post, n, k, max_padded,
            slots, x.stride(0), x.stride(1), w.stride(0), w.stride(1), w.stride(2),
            dest.stride(-2), dest.stride(-1), **constants,
        )  # fmt: skip
        if through_fp32:
            out.add_(dest)

    return PlannedLaunch(align_key, aligned, align, gemm)


def silu_and_mul(hidden: Any, out: Any) -> None:
    """out[r] = silu(hidden[r, :F]) * hidden[r, F:] for hidden [R, 2F] (gate columns then up
    columns: the up GEMM's output, vLLM's w13 layout) and out [R, F], computed in float32 and
    stored in out's dtype: one Triton launch (one read of hidden, one write of out), no host
    synchronization. SpecError where the shapes disagree or a row is not contiguous."""
    import triton

    from search_spaces.kernels._fused_moe_kernels import silu_and_mul_kernel

    if hidden.dim() != 2 or out.dim() != 2 or hidden.shape != (out.shape[0], 2 * out.shape[1]):
        raise SpecError(
            f"silu_and_mul: hidden {tuple(hidden.shape)} must be [R, 2F] for out "
            f"{tuple(out.shape)} [R, F]"
        )
    if hidden.stride(1) != 1 or out.stride(1) != 1:
        raise SpecError("silu_and_mul: the rows of hidden and out must be contiguous")
    r, f = (int(d) for d in out.shape)
    block_f = min(SILU_BLOCK_F, triton.next_power_of_2(f))
    block_r = SILU_TILE // block_f
    silu_and_mul_kernel[(triton.cdiv(r, block_r), triton.cdiv(f, block_f))](
        hidden, out, r, f, hidden.stride(0), out.stride(0), BLOCK_R=block_r, BLOCK_F=block_f
    )


def _grouped_mm_launcher(inputs: Inputs) -> Launcher:
    import torch
    import torch.nn.functional as F

    if not hasattr(torch, "_grouped_mm"):
        raise SpecError(f"fused_moe: torch._grouped_mm needs torch 2.8+, not {torch.__version__}")
    x, w, out = inputs["x"], inputs["w"], inputs["out"]
    topk_ids, topk_weights = inputs["topk_ids"], inputs["topk_weights"]
    m, topk = (int(d) for d in topk_ids.shape)
    per_slot = int(x.shape[0]) == m * topk and topk > 1
    ids, weights = topk_ids.view(-1), topk_weights.view(-1)
    experts = torch.arange(int(w.shape[0]), dtype=ids.dtype, device=x.device)
    gated, half = _gated(inputs), int(w.shape[1]) // 2
    summed = _summed(inputs)
    cols = int(out.shape[-1])
    slots_out = torch.empty(m, topk, cols, dtype=out.dtype, device=out.device) if summed else out
    w_t, rows_out = w.transpose(1, 2), slots_out.view(m * topk, cols)

    def launch() -> None:
        sorted_ids, order = ids.sort(stable=True)
        offsets = torch.searchsorted(sorted_ids, experts, right=True, out_int32=True)
        rows = x[order] if per_slot else x[order // topk]
        y = torch._grouped_mm(rows, w_t, offs=offsets)
        if gated:  # the model's torch path (workers.profiling.models.grouped_mm_experts)
            y = F.silu(y[:, :half]) * y[:, half:]
        y.mul_(weights[order, None].to(y.dtype))
        rows_out.index_copy_(0, order, y)
        if summed:
            torch.sum(slots_out, dim=1, out=out)

    return launch


def _vllm_launcher(inputs: Inputs) -> Launcher:
    import torch

    try:
        from vllm.model_executor.layers.fused_moe.fused_moe import (
            invoke_fused_moe_kernel,
            moe_align_block_size,
            try_get_optimal_moe_config,
        )
        from vllm.triton_utils import tl
    except ImportError as err:
        raise SpecError(f"fused_moe: vllm.fused_moe does not run with this vLLM ({err})") from err
    x, w, out = inputs["x"], inputs["w"], inputs["out"]
    topk_ids, topk_weights = inputs["topk_ids"], inputs["topk_weights"]
    m, topk = (int(d) for d in topk_ids.shape)
    e = int(w.shape[0])
    # vLLM's second GEMM reads a row per slot by calling the kernel with top_k = 1.
    top_k = 1 if int(x.shape[0]) == m * topk else topk
    config = try_get_optimal_moe_config(tuple(w.shape), tuple(w.shape), topk, None, m)
    arguments = {
        "A": x,
        "B": w,
        "C": out,
        "A_scale": None,
        "B_scale": None,
        "B_zp": None,
        "topk_weights": topk_weights,
        "mul_routed_weight": True,
        "top_k": top_k,
        "config": config,
        "compute_type": tl.bfloat16 if x.dtype == torch.bfloat16 else tl.float16,
        "use_fp8_w8a8": False,
        "use_int8_w8a8": False,
        "use_int8_w8a16": False,
        "use_int4_w4a16": False,
        "per_channel_quant": False,
    }
    aligned = ("sorted_token_ids", "expert_ids", "num_tokens_post_padded")
    try:
        inspect.signature(invoke_fused_moe_kernel).bind(**arguments, **dict.fromkeys(aligned))
    except TypeError as err:
        raise SpecError(f"fused_moe: this vLLM's invoke_fused_moe_kernel differs ({err})") from err

    def launch() -> None:
        alignment = moe_align_block_size(topk_ids, config["BLOCK_SIZE_M"], e)
        invoke_fused_moe_kernel(**arguments, **dict(zip(aligned, alignment, strict=False)))

    return launch


def per_expert_loop(inputs: Inputs, compute_dtype: str) -> Any:
    """out[m, j] = (a @ w[topk_ids[m, j]].T) * topk_weights[m, j] (a = x[m], or x[m * topk + j]
    when x has a row per slot; ``up_silu`` inputs: silu(gate) * up of that product's halves, then
    the weight) with one torch matmul per expert in ``compute_dtype`` (the spec's reference in
    float32; a baseline in the inputs' dtype); ``down_sum`` inputs: summed over j, [M, N].
    """
    import torch

    x, w = inputs["x"], inputs["w"]
    topk_ids, topk_weights = inputs["topk_ids"], inputs["topk_weights"]
    dtype = torch_dtype(compute_dtype)
    m, topk = topk_ids.shape
    gated, half = _gated(inputs), w.shape[1] // 2
    out = torch.zeros(m, topk, inputs["out"].shape[-1], dtype=dtype, device=x.device)
    for expert in range(w.shape[0]):
        tokens, js = torch.nonzero(topk_ids == expert, as_tuple=True)
        if tokens.numel() == 0:
            continue
        a = x[tokens * topk + js] if x.shape[0] == m * topk and topk > 1 else x[tokens]
        rows = a.to(dtype) @ w[expert].to(dtype).T
        if gated:
            rows = torch.nn.functional.silu(rows[:, :half]) * rows[:, half:]
        out[tokens, js] = rows * topk_weights[tokens, js].to(dtype)[:, None]
    return out.sum(dim=1) if _summed(inputs) else out


SPEC = FusedMoeSpec()
