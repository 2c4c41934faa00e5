"""Built-in ``flash_attention`` spec: variable-length (packed) flash-attention forward for prefill.

Importing this module loads neither torch nor triton; the kernel lives in
``_flash_attention_kernels``. The space is the portability study's 450-config space (Ringlein et al.,
2025), plus the AMD-only launch options, plus Hopper-class parameters (NVIDIA and the interpreter:
TMA tensor-descriptor loads, heavy-first row-block order, row blocks split in two halves; NVIDIA
GPUs only: warp specialization; sm_90 only: ``GLUON``, a second kernel in FlashAttention-3's layout,
written in Gluon, ``_flash_attention_gluon``, optionally persistent, with FlashAttention-3's
warpgroup ping-pong), three pipeline stages, and key blocks wider than the
row block (the study required BLOCK_M >= BLOCK_N). ``study_subspace`` picks the study's configs back out.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from typing import Any, ClassVar

from search_spaces.errors import SpecError
from search_spaces.kernels._common import (
    AMD_PARAMS,
    ELEMENT_BYTES,
    NVIDIA_GPU,
    NVIDIA_ONLY,
    SDPA_BACKENDS,
    TMA_MIN_SM,
    amd_stages_rule,
    gluon_arch_rule,
    gluon_param,
    int_param,
    listed_on_sm90,
    nvidia_sm,
    sdpa,
    smem_rule,
    tma_param,
    torch_dtype,
    vendor_default,
    warps_rule,
)
from search_spaces.kernels._seqlens import (
    HEAD_DIMS,
    PATTERN_DOC,
    PATTERNS,
    check_attention_problem,
    seq_lengths,
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

#: Most score elements the float32 reference holds at once (1 GiB): it takes query rows in blocks.
REFERENCE_CHUNK = 1 << 28

#: The shared-memory rule assumes the largest supported head size.
SMEM_HEAD_DIM = max(HEAD_DIMS)


def _smem_bytes(c: Mapping[str, Value], lim: DeviceLimits) -> int:
    # Fitted to the shared memory Triton 3.9 allocates for this kernel at head_dim 128 (sm_90 and
    # gfx942 compiles of 10+ configs each, exact on all but one AMD config).
    bm, bn, stages = int_param(c, "BLOCK_M"), int_param(c, "BLOCK_N"), int_param(c, "num_stages")
    row = 2 * SMEM_HEAD_DIM
    if lim.vendor is Vendor.AMD:
        return row * max(bm, 2 * bn * (stages - 1))
    return row * (bm + (bn if stages == 1 else 2 * bn * stages))


#: Most fp32 values per thread in registers for the score tile plus the output accumulator; past
#: this, compiles of e.g. BLOCK_M=BLOCK_N=256 on 2 warps ran over 120 s on the H200 (spilling).
MAX_FP32_PER_THREAD = 256


def _regs_fit(c: Mapping[str, Value], lim: DeviceLimits) -> bool:
    bm, bn = int_param(c, "BLOCK_M"), int_param(c, "BLOCK_N")
    per_thread = (bm * bn + bm * SMEM_HEAD_DIM) / (int_param(c, "num_warps") * lim.warp_size)
    return per_thread <= MAX_FP32_PER_THREAD


#: Fewest warps with which warp specialization compiled for this kernel on the H200 (Triton 3.6:
#: every 4-warp config failed its NVGPUWarpSpecialization pass, 8-warp ones compiled).
WS_MIN_WARPS = 8

#: Smallest row block SPLIT_M halves: tl.dot needs 16 rows.
SPLIT_MIN_BLOCK_M = 32

#: GLUON's kernel (on GLUON_SM, see _common): its row block (two consumer partitions of 64 rows,
#: one warpgroup each: num_warps is the first partition's) and the key tiles it was measured with.
GLUON_BLOCK_M = 128
GLUON_WARPS = 4
GLUON_BLOCK_N = (64, 128)
#: GLUON_WIDE_KEYS doubles GLUON's 128-key tile; with 256 keys a stage of K and V takes 64 KiB at
#: head_dim 64 (the only head size it fits at: at 128 such configs are recorded invalid) and the
#: overlap spills (Triton 3.6, sm_90a).
GLUON_WIDE_HEAD_DIM = 64
#: The key tile GLUON_WIDE_KEYS gives: twice GLUON's widest.
GLUON_WIDE_BLOCK_N = 2 * GLUON_BLOCK_N[-1]
#: Parameters GLUON's kernel has no counterpart of (it loads through TMA, runs causal row blocks
#: heaviest first and overlaps by its own partitions).
GLUON_OFF = ("PRE_LOAD_V", "HEAVY_FIRST", "WARP_SPECIALIZE", "SPLIT_M")

#: The portability study's num_stages values (this spec added 3); see ``study_subspace``.
STUDY_STAGES = (1, 2, 4, 6, 8)


def _gluon_wide_fits(c: Mapping[str, Value], lim: DeviceLimits) -> bool:
    bm, stages = int_param(c, "BLOCK_M"), int_param(c, "num_stages")
    return (
        2 * GLUON_WIDE_HEAD_DIM * (bm + 2 * GLUON_WIDE_BLOCK_N * stages) <= lim.shared_mem_per_block
    )


def _gluon_tile(c: Mapping[str, Value]) -> bool:
    return (
        int_param(c, "BLOCK_M") == GLUON_BLOCK_M
        and int_param(c, "BLOCK_N") in GLUON_BLOCK_N
        and int_param(c, "num_warps") == GLUON_WARPS
        and int_param(c, "num_stages") >= 2
        and bool(c["TMA"])
        and not any(c[name] for name in GLUON_OFF)
    )


SPACE = Space(
    params=(
        Param("BLOCK_M", pow2_range(16, 256), ParamKind.POW2, doc="query rows per program"),
        Param("BLOCK_N", pow2_range(16, 256), ParamKind.POW2, doc="keys per inner-loop step"),
        Param(
            "PRE_LOAD_V",
            (False, True),
            ParamKind.BOOL,
            doc="load the V tile before the block's softmax instead of after",
        ),
        Param("num_warps", (2, 4, 8), ParamKind.POW2, doc="warps per program"),
        Param("num_stages", (1, 2, 3, 4, 6, 8), ParamKind.INT, doc="software pipeline stages"),
        tma_param("load Q, K and V through tensor descriptors (Hopper's bulk tensor copy engine)"),
        Param(
            "HEAVY_FIRST",
            (False, True),
            ParamKind.BOOL,
            vendors=NVIDIA_ONLY,
            doc="launch the last row blocks first (causal: the ones with the most keys)",
        ),
        Param(
            "WARP_SPECIALIZE",
            (False, True),
            ParamKind.BOOL,
            vendors=NVIDIA_GPU,
            doc="producer/consumer warps for the unmasked key loop (Triton's warp_specialize)",
        ),
        Param(
            "SPLIT_M",
            (False, True),
            ParamKind.BOOL,
            vendors=NVIDIA_ONLY,
            doc="the row block as two halves sharing each K/V tile: both q k^T products first, "
            "then one half's softmax beside the other's P @ V",
        ),
        gluon_param(
            "the Gluon kernel: a TMA producer warp feeding two 64-row consumer warpgroups through "
            "a num_stages-deep K/V ring (FlashAttention-3's layout; sm_90)"
        ),
        Param(
            "GLUON_OVERLAP",
            (False, True),
            ParamKind.BOOL,
            vendors=NVIDIA_GPU,
            doc="with GLUON: the next tile's q k^T and this tile's P @ V issued before the "
            "softmax, so the softmax runs beside the tensor cores",
        ),
        Param(
            "GLUON_PERSISTENT",
            (False, True),
            ParamKind.BOOL,
            vendors=NVIDIA_GPU,
            doc="with GLUON: one program per SM taking row blocks in rounds (causal: heaviest "
            "first, every other round reversed), loading the next block's queries and keys "
            "while the current one finishes",
        ),
        Param(
            "GLUON_WIDE_KEYS",
            (False, True),
            ParamKind.BOOL,
            vendors=NVIDIA_GPU,
            doc="with GLUON and BLOCK_N = 128: key tiles of 256 (head_dim 64 only)",
        ),
        Param(
            "GLUON_PINGPONG",
            (False, True),
            ParamKind.BOOL,
            vendors=NVIDIA_GPU,
            doc="with GLUON_OVERLAP: the two consumer warpgroups take turns issuing their "
            "tensor-core products (named barriers), one's softmax beside the other's products",
        ),
        *AMD_PARAMS,
    ),
    constraints=(
        Constraint(
            "block-m-ge-block-n",
            "on AMD BLOCK_M >= BLOCK_N (the study's rule; key blocks wider than the row block "
            "are an NVIDIA addition)",
            ("BLOCK_M", "BLOCK_N"),
            lambda c, lim: (
                lim.vendor is not Vendor.AMD or int_param(c, "BLOCK_M") >= int_param(c, "BLOCK_N")
            ),
        ),
        smem_rule(
            ("BLOCK_M", "BLOCK_N", "num_stages"),
            f"shared memory at head_dim {SMEM_HEAD_DIM}, 2-byte elements, <= shared memory per "
            "block: NVIDIA Q + K and V per stage, 2*128*(BLOCK_M + (BLOCK_N if num_stages == 1 "
            "else 2*BLOCK_N*num_stages)); AMD 2*128*max(BLOCK_M, 2*BLOCK_N*(num_stages-1)) "
            "(fitted to Triton 3.9 compiles; configs that still do not fit at run time are "
            "recorded invalid)",
            _smem_bytes,
        ),
        Constraint(
            "registers",
            f"(BLOCK_M*BLOCK_N + BLOCK_M*{SMEM_HEAD_DIM}) / (num_warps * warp size) <= "
            f"{MAX_FP32_PER_THREAD} fp32 values per thread (score tile + output accumulator at "
            f"head_dim {SMEM_HEAD_DIM})",
            ("BLOCK_M", "BLOCK_N", "num_warps"),
            _regs_fit,
        ),
        warps_rule(),
        amd_stages_rule(),
        Constraint(
            "tma-arch",
            f"TMA only on the interpreter or sm_{TMA_MIN_SM}+ (Hopper and later)",
            ("TMA",),
            lambda c, lim: not c["TMA"] or lim.vendor is Vendor.CPU or nvidia_sm(lim) >= TMA_MIN_SM,
        ),
        Constraint(
            "warp-specialize-arch",
            f"WARP_SPECIALIZE only on sm_{TMA_MIN_SM}+ (Hopper and later) and with "
            f"num_warps >= {WS_MIN_WARPS} (Triton 3.6's warp-specialization pass fails on sm_90 "
            "with 4 warps)",
            ("WARP_SPECIALIZE", "num_warps"),
            lambda c, lim: (
                not c["WARP_SPECIALIZE"]
                or (nvidia_sm(lim) >= TMA_MIN_SM and int_param(c, "num_warps") >= WS_MIN_WARPS)
            ),
        ),
        Constraint(
            "split-m-rows",
            f"SPLIT_M only with BLOCK_M >= {SPLIT_MIN_BLOCK_M} (each half a tl.dot of >= 16 rows)",
            ("SPLIT_M", "BLOCK_M"),
            lambda c, lim: not c["SPLIT_M"] or int_param(c, "BLOCK_M") >= SPLIT_MIN_BLOCK_M,
        ),
        gluon_arch_rule(),
        Constraint(
            "gluon-tile",
            f"GLUON only with BLOCK_M = {GLUON_BLOCK_M}, BLOCK_N in {GLUON_BLOCK_N}, num_warps = "
            f"{GLUON_WARPS}, num_stages >= 2, TMA on and {', '.join(GLUON_OFF)} off",
            ("GLUON", "BLOCK_M", "BLOCK_N", "num_warps", "num_stages", "TMA", *GLUON_OFF),
            lambda c, lim: not c["GLUON"] or _gluon_tile(c),
        ),
        Constraint(
            "gluon-overlap",
            "GLUON_OVERLAP only with GLUON",
            ("GLUON_OVERLAP", "GLUON"),
            lambda c, lim: not c["GLUON_OVERLAP"] or bool(c["GLUON"]),
        ),
        Constraint(
            "gluon-persistent",
            "GLUON_PERSISTENT only with GLUON",
            ("GLUON_PERSISTENT", "GLUON"),
            lambda c, lim: not c["GLUON_PERSISTENT"] or bool(c["GLUON"]),
        ),
        Constraint(
            "gluon-wide-keys",
            f"GLUON_WIDE_KEYS only with GLUON, BLOCK_N = 128 and GLUON_OVERLAP off, where two "
            f"{GLUON_WIDE_BLOCK_N}-key K and V tiles per stage fit at head_dim "
            f"{GLUON_WIDE_HEAD_DIM}: 2*{GLUON_WIDE_HEAD_DIM}*(BLOCK_M + 2*{GLUON_WIDE_BLOCK_N}"
            "*num_stages) bytes <= shared memory per block",
            ("GLUON_WIDE_KEYS", "GLUON", "BLOCK_M", "BLOCK_N", "num_stages", "GLUON_OVERLAP"),
            lambda c, lim: (
                not c["GLUON_WIDE_KEYS"]
                or (
                    bool(c["GLUON"])
                    and int_param(c, "BLOCK_N") == 128
                    and not c["GLUON_OVERLAP"]
                    and _gluon_wide_fits(c, lim)
                )
            ),
        ),
        Constraint(
            "gluon-pingpong",
            "GLUON_PINGPONG only with GLUON_OVERLAP (the turns order its issued products)",
            ("GLUON_PINGPONG", "GLUON_OVERLAP"),
            lambda c, lim: not c["GLUON_PINGPONG"] or bool(c["GLUON_OVERLAP"]),
        ),
    ),
)

#: NVIDIA (and the interpreter): 80 KiB of shared memory at head_dim 128, within every NVIDIA class
#: (what default_for gives where TMA_DEFAULT does not apply).
DEFAULT: Config = {
    "BLOCK_M": 64,
    "BLOCK_N": 64,
    "PRE_LOAD_V": False,
    "num_warps": 4,
    "num_stages": 2,
    "TMA": False,
    "HEAVY_FIRST": False,
    "WARP_SPECIALIZE": False,
    "SPLIT_M": False,
    "GLUON": False,
    "GLUON_OVERLAP": False,
    "GLUON_PERSISTENT": False,
    "GLUON_WIDE_KEYS": False,
    "GLUON_PINGPONG": False,
}
#: NVIDIA sm_90+ (Hopper and later) where it fits: the H200 sweep's most frequent winner over the
#: issue's 192 problems (88 of 192, and 29 of the 48 fp16 d=128 ones; 112 KiB of shared memory at
#: head_dim 128): TMA loads 1.095x and a third stage 1.07x over DEFAULT there
#: (benchmarks/results/attention_sweep/2026-12-01-h200/). Measured on the H200 only.
TMA_DEFAULT: Config = {**DEFAULT, "num_stages": 3, "TMA": True}
#: NVIDIA sm_90+: what a new study asks right after the default. 128-row blocks split in two
#: halves (SPLIT_M), two stages (96 KiB of shared memory at head_dim 128: two programs per SM):
#: over the issue's 96 d=128 problems on the H200, these three won 58 (26, 16 and 16) of 9
#: candidates, mostly batch 8-32 at seq >= 4096 (up to 1.26x over TMA_DEFAULT there); with
#: TMA_DEFAULT, the best of the four is 0.903x cuDNN against 0.858x for TMA_DEFAULT alone
#: (benchmarks/results/attention_sweep/2026-12-02-d3cceef-h200-split/).
SPLIT_LISTED: tuple[Config, ...] = tuple(
    {**TMA_DEFAULT, "BLOCK_M": 128, "num_stages": 2, "SPLIT_M": True, **flags}
    for flags in ({}, {"HEAVY_FIRST": True}, {"PRE_LOAD_V": True})
)


def _gluon(block_n: int, stages: int, **flags: bool) -> Config:
    """A GLUON config on the sm_90 default: ``block_n``-key tiles, a ``stages``-deep ring."""
    tile = {"BLOCK_M": 128, "BLOCK_N": block_n, "num_stages": stages}
    return {**TMA_DEFAULT, **tile, "GLUON": True, **flags}


#: sm_90: the five GLUON configs that won most often among 15 candidates over the issue's 192
#: problems on the H200 (benchmarks/results/attention_sweep/2026-12-04-c93fd3e-h200-pingpong-all/),
#: in this order: 128-key tiles with a 3-deep ring, the overlap and the ping-pong (12 wins), the
#: same persistent (38), without the ping-pong (19); 256-key tiles (head_dim 64 only; at 128 a
#: study records them invalid) with a 3-deep ring (12) and with a 2-deep ring, persistent (11).
#: GLUON's configs listed before them (128x128 with a 2-deep ring, persistent or not, and 128x64
#: with a 4-deep ring and the overlap) won 5 there.
GLUON_LISTED: tuple[Config, ...] = (
    _gluon(128, 3, GLUON_OVERLAP=True, GLUON_PINGPONG=True),
    _gluon(128, 3, GLUON_OVERLAP=True, GLUON_PINGPONG=True, GLUON_PERSISTENT=True),
    _gluon(128, 3, GLUON_OVERLAP=True),
    _gluon(128, 3, GLUON_WIDE_KEYS=True),
    _gluon(128, 2, GLUON_WIDE_KEYS=True, GLUON_PERSISTENT=True),
)
#: AMD: a config of the kind ROCm's Triton flash-attention tutorial tunes with on CDNA (one stage,
#: occupancy hint 2 waves per EU); the other AMD-only options take _common's defaults.
AMD_DEFAULT: Config = {
    "BLOCK_M": 128,
    "BLOCK_N": 64,
    "PRE_LOAD_V": False,
    "num_warps": 4,
    "num_stages": 1,
}
AMD_WAVES_PER_EU = 2


def study_subspace(configs: list[Config]) -> list[Config]:
    """The configs of the portability study's 450-config space: its stage values, its rule
    BLOCK_M >= BLOCK_N, and every parameter added since at its default (off)."""
    return [
        c
        for c in configs
        if int_param(c, "num_stages") in STUDY_STAGES
        and int_param(c, "BLOCK_M") >= int_param(c, "BLOCK_N")
        and not any(
            c.get(name, False)
            for name in ("TMA", "HEAVY_FIRST", "WARP_SPECIALIZE", "SPLIT_M", "GLUON")
        )
    ]


class FlashAttentionSpec(KernelSpec):
    """Prefill attention over a packed variable-length batch, MHA or GQA, causal or not.

    Inputs: q [total_tokens, q_heads, head_dim], k and v [total_tokens, kv_heads, head_dim],
    cu_seqlens [batch + 1] int32 (sequence s is tokens cu_seqlens[s]..cu_seqlens[s+1]), out like q,
    and ``causal`` (a Python bool).
    Softmax scale 1/sqrt(head_dim); causal masks key j > query i within a sequence (q_len == k_len,
    so top-left and bottom-right alignment coincide).
    """

    name: ClassVar[str] = "flash_attention"
    description: ClassVar[str] = (
        "variable-length flash-attention forward (prefill): packed batch, causal or not, MHA/GQA"
    )
    schema: ClassVar[ProblemSchema] = ProblemSchema(
        (
            Field("batch", doc="sequences in the batch", batch=True),
            Field("max_seqlen", doc="longest sequence (tokens)", batch=True),
            Field("pattern", FieldKind.CHOICE, PATTERNS, default="uniform", doc=PATTERN_DOC),
            Field("q_heads", doc="query heads"),
            Field("kv_heads", doc="key/value heads (divides q_heads)"),
            Field("head_dim", doc="head size: 64 or 128"),
            Field("causal", FieldKind.BOOL, doc="mask keys after the query"),
            Field("dtype", FieldKind.DTYPE, doc="float16 or bfloat16"),
        )
    )
    example: ClassVar[Problem] = {
        "batch": 2,
        "max_seqlen": 32,
        "pattern": "mixed",
        "q_heads": 4,
        "kv_heads": 2,
        "head_dim": 64,
        "causal": True,
        "dtype": "float16",
    }
    space: ClassVar[Space] = SPACE
    sources: ClassVar[tuple[str, ...]] = (
        "search_spaces.kernels._flash_attention_kernels",
        "search_spaces.kernels._flash_attention_gluon",
    )

    def validate_problem(self, raw: Mapping[str, object]) -> Problem:
        """The schema's checks, plus: q_heads % kv_heads == 0, head_dim 64|128, float16|bfloat16."""
        problem = super().validate_problem(raw)
        check_attention_problem(problem)
        return problem

    def default_config(self, vendor: Vendor) -> Config:
        if vendor is Vendor.AMD:
            return {**vendor_default(AMD_DEFAULT, SPACE, vendor), "waves_per_eu": AMD_WAVES_PER_EU}
        return vendor_default(DEFAULT, SPACE, vendor)

    def default_for(self, limits: DeviceLimits) -> Config:
        """TMA_DEFAULT on NVIDIA classes of sm_90+ whose limits admit it; elsewhere (older NVIDIA
        classes, a class whose shared memory does not hold it, AMD, the interpreter) the vendor's
        default_config."""
        if limits.vendor is Vendor.NVIDIA and nvidia_sm(limits) >= TMA_MIN_SM:
            config = vendor_default(TMA_DEFAULT, SPACE, limits.vendor)
            if SPACE.violation(config, limits) is None:
                return config
        return self.default_config(limits.vendor)

    def listed_configs(self, limits: DeviceLimits) -> list[Config]:
        """SPLIT_LISTED, then GLUON_LISTED, on NVIDIA classes of sm_90+, those whose limits admit
        them (GLUON: sm_90 only); none elsewhere."""
        return listed_on_sm90(SPLIT_LISTED + GLUON_LISTED, SPACE, limits)

    def lengths(self, problem: Problem) -> list[int]:
        """Per-sequence lengths of ``problem`` (fixed by its pattern, batch and max_seqlen)."""
        return seq_lengths(
            str(problem["pattern"]), int(problem["batch"]), int(problem["max_seqlen"])
        )

    def flops(self, problem: Problem) -> float:
        """4 * heads * head_dim per (query, key) pair attended: sum L^2 pairs, or the exact causal
        count sum L(L+1)/2 (masked work inside diagonal blocks is not counted)."""
        lens = self.lengths(problem)
        pairs = (
            sum(n * (n + 1) // 2 for n in lens) if problem["causal"] else sum(n * n for n in lens)
        )
        return 4.0 * pairs * int(problem["q_heads"]) * int(problem["head_dim"])

    def bytes_moved(self, problem: Problem) -> float:
        """q, k, v read once and out written once, plus cu_seqlens."""
        tokens = sum(self.lengths(problem))
        heads = 2 * int(problem["q_heads"]) + 2 * int(problem["kv_heads"])
        elem = ELEMENT_BYTES[str(problem["dtype"])]
        return float(
            tokens * heads * int(problem["head_dim"]) * elem + 4 * (int(problem["batch"]) + 1)
        )

    def build_inputs(self, problem: Problem, device: str) -> Inputs:
        import torch

        lens = self.lengths(problem)
        total = sum(lens)
        qh, kvh, d = int(problem["q_heads"]), int(problem["kv_heads"]), int(problem["head_dim"])
        dtype = torch_dtype(str(problem["dtype"]))
        offsets = [0]
        for n in lens:
            offsets.append(offsets[-1] + n)
        return {
            "q": torch.randn(total, qh, d, dtype=dtype, device=device),
            "k": torch.randn(total, kvh, d, dtype=dtype, device=device),
            "v": torch.randn(total, kvh, d, dtype=dtype, device=device),
            "cu_seqlens": torch.tensor(offsets, dtype=torch.int32, device=device),
            "causal": bool(problem["causal"]),
            "out": torch.empty(total, qh, d, dtype=dtype, device=device),
        }

    def vendor_paths(self, problem: Problem) -> tuple[str, ...]:
        """torch's SDPA with one backend forced, one name each: ``sdpa_cudnn``, ``sdpa_flash``,
        ``sdpa_efficient``, ``sdpa_math``. A backend that does not support the inputs (or the
        device: cuDNN and efficient run on GPUs only) raises at launch; the study keeps the
        fastest of those that run."""
        return tuple(f"sdpa_{backend}" for backend in SDPA_BACKENDS)

    def make_vendor_launcher(self, inputs: Inputs, name: str) -> Launcher:
        """SDPA under ``torch.nn.attention.sdpa_kernel([backend])``, causal as ``inputs`` say,
        GQA through ``enable_gqa`` (``_common.sdpa``), default scale 1/sqrt(head_dim).

        Uniform lengths: one call over the packed q, k, v viewed as [batch, heads, seq,
        head_dim] (no copy); the launch rebinds ``inputs["out"]`` to the result viewed back as
        packed tokens (a copy only where the backend's output is not token-major, as math's).
        Ragged lengths: one call per sequence over views of the packed buffers, each writing its
        rows of ``inputs["out"]``: the same function with no padding, what plain SDPA offers a
        packed ragged batch (nested-tensor SDPA takes neither GQA in its fused kernels nor a
        causal mask on the CPU); the ``batch`` launches count against it on short sequences."""
        from torch.nn.attention import SDPBackend, sdpa_kernel

        backend = (
            SDPA_BACKENDS.get(name.removeprefix("sdpa_")) if name.startswith("sdpa_") else None
        )
        if backend is None:
            return super().make_vendor_launcher(inputs, name)
        chosen = [getattr(SDPBackend, backend)]
        q, k, v, causal = inputs["q"], inputs["k"], inputs["v"], bool(inputs["causal"])
        total, qh, d = (int(n) for n in q.shape)
        bounds = list(itertools.pairwise(inputs["cu_seqlens"].tolist()))
        if len({end - start for start, end in bounds}) == 1:
            batch = len(bounds)

            def heads_first(t: Any) -> Any:
                return t.view(batch, total // batch, t.shape[1], d).transpose(1, 2)

            qb, kb, vb = heads_first(q), heads_first(k), heads_first(v)

            def launch_batched() -> None:
                with sdpa_kernel(chosen):
                    result = sdpa(qb, kb, vb, is_causal=causal)
                inputs["out"] = result.transpose(1, 2).reshape(total, qh, d)

            return launch_batched
        out = inputs["out"]
        sequences = [
            tuple(t[start:end].transpose(0, 1) for t in (q, k, v, out)) for start, end in bounds
        ]

        def launch_ragged() -> None:
            with sdpa_kernel(chosen):
                for qs, ks, vs, rows in sequences:
                    rows.copy_(sdpa(qs[None], ks[None], vs[None], is_causal=causal)[0])

        return launch_ragged

    def make_launcher(self, inputs: Inputs, config: Config) -> Launcher:
        """Launch over ``inputs`` (as built); an optional host-side ``max_seqlen`` input spares
        the read of the sequence lengths back from the device."""
        import torch
        import triton

        from search_spaces.kernels._flash_attention_kernels import flash_attention_fwd_kernel

        q, k, v, out = inputs["q"], inputs["k"], inputs["v"], inputs["out"]
        cu = inputs["cu_seqlens"]
        _, qh, d = q.shape
        kvh = k.shape[1]
        if qh % kvh or d not in HEAD_DIMS or out.shape != q.shape or out.stride(2) != 1:
            raise SpecError(
                f"flash_attention: bad inputs q{tuple(q.shape)} k{tuple(k.shape)} out{tuple(out.shape)}"
            )
        if q.stride(2) != 1 or k.stride(2) != 1 or v.stride(2) != 1:
            raise SpecError("flash_attention: q, k, v need a contiguous last (head_dim) axis")
        if "max_seqlen" in inputs:  # given by the caller: no device read (CUDA-graph capture)
            batch, max_len = cu.shape[0] - 1, int(inputs["max_seqlen"])
        else:
            lens = (cu[1:] - cu[:-1]).cpu()
            batch, max_len = len(lens), int(lens.max())
        meta, options = split_launch_options(config)
        qk_scale = math.log2(math.e) / math.sqrt(d)
        if meta.get("GLUON"):
            return _gluon_launcher(inputs, config, (batch, max_len), qk_scale)
        block_m, block_n = int(config["BLOCK_M"]), int(config["BLOCK_N"])
        tma = bool(meta.setdefault("TMA", False))
        meta.setdefault("HEAVY_FIRST", False)
        meta.setdefault("WARP_SPECIALIZE", False)
        split = bool(meta.setdefault("SPLIT_M", False))
        meta.pop("GLUON", None)
        meta.pop("GLUON_OVERLAP", None)
        meta.pop("GLUON_PERSISTENT", None)
        meta.pop("GLUON_WIDE_KEYS", None)
        meta.pop("GLUON_PINGPONG", None)
        grid = (triton.cdiv(max_len, block_m), qh, batch)
        sources: tuple[Any, Any, Any] = (q, k, v)
        if tma:
            sources = (
                _descriptor(q, block_m // 2 if split else block_m),
                _descriptor(k, block_n),
                _descriptor(v, block_n),
            )
        # Triton's interpreter multiplies bfloat16 bit patterns in tl.dot (triton #11584).
        dot_in_fp32 = q.device.type == "cpu" and q.dtype == torch.bfloat16
        kernel_args: dict[str, Any] = {
            **meta,
            **options,
            "GROUP": qh // kvh,
            "HEAD_DIM": d,
            "CAUSAL": bool(inputs["causal"]),
            "DOT_IN_FP32": dot_in_fp32,
        }

        def launch() -> None:
            flash_attention_fwd_kernel[grid](
                *sources, out, cu,
                q.stride(0), q.stride(1), k.stride(0), k.stride(1),
                v.stride(0), v.stride(1), out.stride(0), out.stride(1),
                qk_scale,
                **kernel_args,
            )  # fmt: skip

        return launch

    def reference(self, inputs: Inputs, chunk: int = REFERENCE_CHUNK) -> Any:
        """Per sequence, explicit float32 softmax(q k^T / sqrt(d) [causal]) v, over blocks of
        query rows whose scores (all heads) hold at most ``chunk`` elements (at least one row):
        one sequence's whole score matrix at 16384 tokens and 32 heads is 32 GiB."""
        import torch

        q, k, v, cu = inputs["q"], inputs["k"], inputs["v"], inputs["cu_seqlens"].tolist()
        causal = bool(inputs["causal"])
        heads, group = q.shape[1], q.shape[1] // k.shape[1]
        scale = 1.0 / math.sqrt(q.shape[2])
        out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
        for start, end in itertools.pairwise(cu):
            n = end - start
            ks = k[start:end].float().transpose(0, 1).repeat_interleave(group, dim=0)
            vs = v[start:end].float().transpose(0, 1).repeat_interleave(group, dim=0)
            keys = torch.arange(n, device=q.device)
            rows = max(1, chunk // max(1, heads * n))
            for first in range(0, n, rows):
                last = min(n, first + rows)
                qs = q[start + first : start + last].float().transpose(0, 1)
                scores = (qs @ ks.transpose(1, 2)) * scale
                if causal:
                    above = keys[None, :] > torch.arange(first, last, device=q.device)[:, None]
                    scores.masked_fill_(above, float("-inf"))
                out[start + first : start + last] = (scores.softmax(-1) @ vs).transpose(0, 1)
        return out


def _gluon_launcher(
    inputs: Inputs, config: Config, batch_max_len: tuple[int, int], qk_scale: float
) -> Launcher:
    """Launch GLUON's kernel (``_flash_attention_gluon``) over ``inputs`` with ``config``'s key
    tile (doubled by GLUON_WIDE_KEYS), ring depth (num_stages), overlap, ping-pong and persistence
    (one program per SM); SpecError off an NVIDIA GPU."""
    q, k, v, out, cu = inputs["q"], inputs["k"], inputs["v"], inputs["out"], inputs["cu_seqlens"]
    if q.device.type != "cuda":
        raise SpecError("flash_attention: GLUON runs on sm_90 GPUs only; use GLUON=False here")
    import torch
    import triton

    from search_spaces.kernels._flash_attention_gluon import (
        PART_ROWS,
        PART_WARPS,
        flash_attention_gluon_kernel,
    )

    batch, max_len = batch_max_len
    rows, block_n = int(PART_ROWS.value), int(config["BLOCK_N"])
    if config.get("GLUON_WIDE_KEYS", False):
        block_n *= 2
    items = (triton.cdiv(max_len, 2 * rows), q.shape[1], batch)
    persistent = bool(config.get("GLUON_PERSISTENT", False))
    programs = math.prod(items)
    if persistent:
        programs = min(programs, torch.cuda.get_device_properties(q.device).multi_processor_count)
    sources = (
        _descriptor(q, rows, gluon=True),
        _descriptor(k, block_n, gluon=True),
        _descriptor(v, block_n, gluon=True),
    )
    kernel_args: dict[str, Any] = {
        "GROUP": q.shape[1] // k.shape[1],
        "HEAD_DIM": q.shape[2],
        "BLOCK_N": block_n,
        "STAGES": int(config["num_stages"]),
        "CAUSAL": bool(inputs["causal"]),
        "OVERLAP": bool(config.get("GLUON_OVERLAP", False)),
        "PERSISTENT": persistent,
        "PINGPONG": bool(config.get("GLUON_PINGPONG", False)),
        "num_warps": int(PART_WARPS.value),
    }

    def launch() -> None:
        flash_attention_gluon_kernel[(programs,)](
            *sources, out, cu, out.stride(0), out.stride(1), qk_scale, *items, **kernel_args
        )

    return launch


def _descriptor(t: Any, rows: int, *, gluon: bool = False) -> Any:
    """A host tensor descriptor over packed ``t`` [tokens, heads, head_dim] viewed as
    [tokens, heads * head_dim], blocks of ``rows`` tokens x one head (``gluon``: Gluon's, with
    the default NVMMA shared layout of the block); SpecError if ``t``'s layout cannot be described
    (TMA needs unit stride on the last axis and 16-byte aligned rows)."""
    tokens, heads, d = (int(n) for n in t.shape)
    row_stride = int(t.stride(0))
    elem = t.element_size()
    if t.stride(1) != d or (row_stride * elem) % 16 or t.data_ptr() % 16:
        raise SpecError(
            "flash_attention: TMA needs each token's heads contiguous and 16-byte aligned rows; "
            "use a config with TMA=False for this layout"
        )
    if gluon:
        from triton.experimental.gluon import language as gl
        from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as GluonDescriptor

        element = getattr(gl, str(t.dtype).removeprefix("torch."))
        layout = gl.NVMMASharedLayout.get_default_for([rows, d], element)
        return GluonDescriptor(t, [tokens, heads * d], [row_stride, 1], [rows, d], layout)
    from triton.tools.tensor_descriptor import TensorDescriptor

    return TensorDescriptor(t, [tokens, heads * d], [row_stride, 1], [rows, d])


SPEC = FlashAttentionSpec()
