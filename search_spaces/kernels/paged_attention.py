"""Built-in ``paged_attention`` spec: decode attention (one query token) over a paged KV cache.

Importing this module loads neither torch nor triton; the kernels live in
``_paged_attention_kernels``. One space parameter chooses single-pass or split-KV (partitions plus
a reduction kernel) and the partition size.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from search_spaces.errors import SpecError
from search_spaces.kernels._common import (
    AMD_PARAMS,
    ELEMENT_BYTES,
    amd_stages_rule,
    int_param,
    pdl_param,
    pdl_rule,
    pop_pdl,
    sdpa,
    smem_rule,
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
    DeviceLimits,
    Param,
    ParamKind,
    Space,
    Value,
    Vendor,
    pow2_range,
)
from search_spaces.spec import Inputs, KernelSpec, Launcher, split_launch_options

#: The shared-memory rule assumes the largest supported head size.
SMEM_HEAD_DIM = max(HEAD_DIMS)
#: tl.dot needs at least 16 rows: a KV head's query group is padded up to this.
MIN_GROUP_ROWS = 16


def _smem_bytes(c: Mapping[str, Value], lim: DeviceLimits) -> int:
    # Fitted to Triton 3.9 compiles at head_dim 128: on sm_90 the gathered (page-indexed) K/V
    # tiles are not multi-buffered, so stages barely matter; gfx942 buffers them per stage.
    bn, stages = int_param(c, "BLOCK_N"), max(1, int_param(c, "num_stages"))
    row = 2 * SMEM_HEAD_DIM
    if lim.vendor is Vendor.AMD:
        return row * bn * stages
    return row * (2 * bn + MIN_GROUP_ROWS)


SPACE = Space(
    params=(
        Param(
            "PARTITION_SIZE",
            (0, 256, 512, 1024, 2048),
            ParamKind.INT,
            doc="0 = single pass over the context; else split-KV partition length (tokens)",
        ),
        Param("BLOCK_N", pow2_range(16, 256), ParamKind.POW2, doc="keys per loop step"),
        Param("num_warps", (1, 2, 4, 8), ParamKind.POW2, doc="warps per program"),
        Param("num_stages", (1, 2, 3, 4), ParamKind.INT, doc="software pipeline stages"),
        pdl_param(),
        *AMD_PARAMS,
    ),
    constraints=(
        smem_rule(
            ("BLOCK_N", "num_stages"),
            f"shared memory at head_dim {SMEM_HEAD_DIM}, 2-byte elements, <= shared memory per "
            f"block: NVIDIA 2*128*(2*BLOCK_N + {MIN_GROUP_ROWS}) (K, V and the query group); AMD "
            "2*128*BLOCK_N*max(1, num_stages) (fitted to Triton 3.9 compiles; configs that still "
            "do not fit at run time are recorded invalid)",
            _smem_bytes,
        ),
        warps_rule(),
        amd_stages_rule(),
        pdl_rule(),
    ),
)

DEFAULT: Config = {
    "PARTITION_SIZE": 512,
    "BLOCK_N": 64,
    "num_warps": 4,
    "num_stages": 2,
    "PDL": False,
}


#: How the deployment lays out its KV cache: ``paged``, pages anywhere (vLLM's block tables);
#: ``contiguous``, each sequence's pages consecutive, in batch order, a whole context's worth
#: each (a static cache, ``profile``'s built-in decoders).
CACHES = ("paged", "contiguous")
CACHE_DOC = (
    "KV-cache layout: paged (pages anywhere, through the block table) or contiguous (each "
    "sequence's pages consecutive, context_len's worth each): it decides the vendor path"
)


def _next_pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


class PagedAttentionSpec(KernelSpec):
    """Decode attention: out[b, h] = softmax(q[b, h] . K_b / sqrt(d)) V_b over b's paged context.

    Inputs (vLLM's FlashAttention-backend cache layout): q [batch, q_heads, head_dim];
    k_cache, v_cache [num_pages, page_size, kv_heads, head_dim]; block_tables [batch, max_pages]
    int32 (``cache=paged``: a random permutation of the pages, entries past a sequence's last page
    pointing at a NaN-filled spare page, so a kernel that reads past the context gives NaN;
    ``cache=contiguous``: sequence b owns pages b * max_pages onward, in order); context_lens
    [batch] int32; out [batch, q_heads, head_dim]. Query head h reads KV head
    h // (q_heads / kv_heads).
    """

    name: ClassVar[str] = "paged_attention"
    description: ClassVar[str] = (
        "decode attention over a paged KV cache (block tables), MHA/GQA, single-pass or split-KV"
    )
    schema: ClassVar[ProblemSchema] = ProblemSchema(
        (
            Field("batch", doc="sequences, one query token each", batch=True),
            Field("context_len", doc="longest context (tokens in the KV cache)", batch=True),
            Field("pattern", FieldKind.CHOICE, PATTERNS, default="uniform", doc=PATTERN_DOC),
            Field("q_heads", doc="query heads"),
            Field("kv_heads", doc="key/value heads (divides q_heads)"),
            Field("head_dim", doc="head size: 64 or 128"),
            Field("page_size", default=16, doc="tokens per KV-cache page"),
            Field("dtype", FieldKind.DTYPE, doc="float16 or bfloat16"),
            Field("cache", FieldKind.CHOICE, CACHES, default="paged", doc=CACHE_DOC),
        )
    )
    example: ClassVar[Problem] = {
        "batch": 3,
        "context_len": 80,
        "pattern": "mixed",
        "q_heads": 4,
        "kv_heads": 2,
        "head_dim": 64,
        "page_size": 16,
        "dtype": "float16",
    }
    space: ClassVar[Space] = SPACE
    sources: ClassVar[tuple[str, ...]] = ("search_spaces.kernels._paged_attention_kernels",)

    def validate_problem(self, raw: Mapping[str, object]) -> Problem:
        """The schema's checks, plus: q_heads % kv_heads == 0, head_dim 64|128, float16|bfloat16."""
        problem = super().validate_problem(raw)
        check_attention_problem(problem)
        return problem

    def default_config(self, vendor: Vendor) -> Config:
        return vendor_default(DEFAULT, SPACE, vendor)

    def lengths(self, problem: Problem) -> list[int]:
        """Per-sequence context lengths of ``problem`` (fixed by pattern, batch, context_len)."""
        return seq_lengths(
            str(problem["pattern"]), int(problem["batch"]), int(problem["context_len"])
        )

    def flops(self, problem: Problem) -> float:
        """4 * q_heads * head_dim per context token (q.k and p.v, multiply-add = 2)."""
        tokens = sum(self.lengths(problem))
        return 4.0 * tokens * int(problem["q_heads"]) * int(problem["head_dim"])

    def bytes_moved(self, problem: Problem) -> float:
        """K and V of every context token read once (dominant), q read, out written, plus the
        block-table entries and context lengths."""
        lens = self.lengths(problem)
        batch, d = int(problem["batch"]), int(problem["head_dim"])
        elem = ELEMENT_BYTES[str(problem["dtype"])]
        kv = 2 * sum(lens) * int(problem["kv_heads"]) * d * elem
        q_out = 2 * batch * int(problem["q_heads"]) * d * elem
        page_size = int(problem["page_size"])
        tables = 4 * sum(-(-n // page_size) for n in lens) + 4 * batch
        return float(kv + q_out + tables)

    def build_inputs(self, problem: Problem, device: str) -> Inputs:
        import torch

        lens = self.lengths(problem)
        batch, page_size = int(problem["batch"]), int(problem["page_size"])
        qh, kvh, d = int(problem["q_heads"]), int(problem["kv_heads"]), int(problem["head_dim"])
        dtype = torch_dtype(str(problem["dtype"]))
        pages_per_seq = [-(-n // page_size) for n in lens]
        max_pages = -(-int(problem["context_len"]) // page_size)
        if problem.get("cache", "paged") == "contiguous":
            pages = batch * max_pages
            k_cache = torch.randn(pages, page_size, kvh, d, dtype=dtype, device=device)
            v_cache = torch.randn(pages, page_size, kvh, d, dtype=dtype, device=device)
            tables = torch.arange(pages, dtype=torch.int32).view(batch, max_pages)
        else:
            used = sum(pages_per_seq)
            # Page `used` is the NaN-filled spare; the used pages are handed out in random order.
            k_cache = torch.randn(used + 1, page_size, kvh, d, dtype=dtype, device=device)
            v_cache = torch.randn(used + 1, page_size, kvh, d, dtype=dtype, device=device)
            k_cache[used] = float("nan")
            v_cache[used] = float("nan")
            order = torch.randperm(used, dtype=torch.int32)
            tables = torch.full((batch, max_pages), used, dtype=torch.int32)
            first = 0
            for b, n in enumerate(pages_per_seq):
                tables[b, :n] = order[first : first + n]
                first += n
        return {
            "q": torch.randn(batch, qh, d, dtype=dtype, device=device),
            "k_cache": k_cache,
            "v_cache": v_cache,
            "block_tables": tables.to(device),
            "context_lens": torch.tensor(lens, dtype=torch.int32, device=device),
            "out": torch.empty(batch, qh, d, dtype=dtype, device=device),
        }

    def vendor_paths(self, problem: Problem) -> tuple[str, ...]:
        """What a deployment with the problem's cache runs instead. ``cache=paged``:
        ``sdpa_gathered``, plain torch, the context's pages gathered into contiguous K and V, then
        SDPA with the backend torch picks, and ``flash_attn.flash_attn_with_kvcache`` (reads the
        pages through the block table itself) where ``flash_attn`` is importable.
        ``cache=contiguous``: ``sdpa_contiguous``, the same SDPA over each sequence's rows as they
        lie (no gather: the deployment never pays one)."""
        if problem.get("cache", "paged") == "contiguous":
            return ("sdpa_contiguous",)
        if importlib.util.find_spec("flash_attn") is None:
            return ("sdpa_gathered",)
        return ("sdpa_gathered", "flash_attn.flash_attn_with_kvcache")

    def make_vendor_launcher(self, inputs: Inputs, name: str) -> Launcher:
        """``sdpa_gathered``: per launch, each sequence's token slots computed from its block
        table up to the longest context, the K and V rows gathered (slots past a context read
        token 0 of the cache and are masked out; a mask only when lengths differ, so that
        flash SDPA can run on uniform contexts), then one batched SDPA (GQA through
        ``enable_gqa``); the launch rebinds ``inputs["out"]`` to its result.
        ``sdpa_contiguous``: the same SDPA over a view of the cache (no copy: its rows as they
        are at each launch, over the context lengths as they were when the launcher was made);
        SpecError unless the block table is the contiguous layout (sequence b's pages
        b * max_pages onward, in order). It rebinds.
        ``flash_attn.flash_attn_with_kvcache`` on the cache as built (flash-attn 2 takes pages
        of a multiple of 256 tokens only: it raises on smaller pages); it rebinds too."""
        if name == "sdpa_gathered":
            return _gathered_sdpa_launcher(inputs)
        if name == "sdpa_contiguous":
            return _contiguous_sdpa_launcher(inputs)
        if name == "flash_attn.flash_attn_with_kvcache":
            return _flash_attn_launcher(inputs)
        return super().make_vendor_launcher(inputs, name)

    def make_launcher(self, inputs: Inputs, config: Config) -> Launcher:
        import torch
        import triton

        from search_spaces.kernels._paged_attention_kernels import (
            paged_attention_kernel,
            paged_attention_reduce_kernel,
        )

        q, out = inputs["q"], inputs["out"]
        k_cache, v_cache = inputs["k_cache"], inputs["v_cache"]
        tables, context_lens = inputs["block_tables"], inputs["context_lens"]
        batch, qh, d = q.shape
        page_size, kvh = k_cache.shape[1], k_cache.shape[2]
        if qh % kvh or d not in HEAD_DIMS or out.shape != q.shape or tables.stride(1) != 1:
            raise SpecError(
                f"paged_attention: bad inputs q{tuple(q.shape)} k_cache{tuple(k_cache.shape)} "
                f"out{tuple(out.shape)}"
            )
        if any(t.stride(-1) != 1 for t in (q, k_cache, v_cache, out)):
            raise SpecError("paged_attention: tensors need a contiguous last (head_dim) axis")
        meta, options = split_launch_options(config)
        pdl = pop_pdl(meta)
        partition = int(config["PARTITION_SIZE"])
        group = qh // kvh
        # Triton's interpreter multiplies bfloat16 bit patterns in tl.dot (triton #11584).
        dot_in_fp32 = q.device.type == "cpu" and q.dtype == torch.bfloat16
        kernel_args: dict[str, Any] = {
            **meta,
            **options,
            **pdl,
            "GROUP": group,
            "GROUP_PAD": max(MIN_GROUP_ROWS, _next_pow2(group)),
            "HEAD_DIM": d,
            "PAGE_SIZE": page_size,
            "DOT_IN_FP32": dot_in_fp32,
        }
        qk_scale = math.log2(math.e) / math.sqrt(d)
        strides = (
            q.stride(0), q.stride(1),
            k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
            v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
            tables.stride(0), out.stride(0), out.stride(1),
        )  # fmt: skip

        if partition == 0:

            def launch_single() -> None:
                paged_attention_kernel[(batch, kvh, 1)](
                    q, k_cache, v_cache, tables, context_lens, out, out, out, out,
                    *strides, qk_scale, 1,
                    **kernel_args,
                )  # fmt: skip

            return launch_single

        num_partitions = triton.cdiv(int(context_lens.max()), partition)
        ws_m = torch.empty(batch, qh, num_partitions, dtype=torch.float32, device=q.device)
        ws_l = torch.empty_like(ws_m)
        ws_o = torch.empty(batch, qh, num_partitions, d, dtype=torch.float32, device=q.device)

        def launch_split() -> None:
            paged_attention_kernel[(batch, kvh, num_partitions)](
                q, k_cache, v_cache, tables, context_lens, out, ws_m, ws_l, ws_o,
                *strides, qk_scale, num_partitions,
                **kernel_args,
            )  # fmt: skip
            paged_attention_reduce_kernel[(batch, qh)](
                ws_m, ws_l, ws_o, out, num_partitions, out.stride(0), out.stride(1),
                HEAD_DIM=d, PARTITIONS_PAD=_next_pow2(num_partitions), **pdl,
            )  # fmt: skip

        return launch_split

    def reference(self, inputs: Inputs) -> Any:
        """Gather each sequence's pages through its block table, then float32 attention."""
        import torch

        q, k_cache, v_cache = inputs["q"], inputs["k_cache"], inputs["v_cache"]
        tables, lens = inputs["block_tables"], inputs["context_lens"].tolist()
        page_size, kvh, d = k_cache.shape[1], k_cache.shape[2], k_cache.shape[3]
        group = q.shape[1] // kvh
        out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
        for b, n in enumerate(lens):
            pages = tables[b, : -(-n // page_size)].long()
            k = k_cache[pages].reshape(-1, kvh, d)[:n].float().transpose(0, 1)
            v = v_cache[pages].reshape(-1, kvh, d)[:n].float().transpose(0, 1)
            k = k.repeat_interleave(group, dim=0)
            v = v.repeat_interleave(group, dim=0)
            scores = (k @ q[b].float().unsqueeze(-1)).squeeze(-1) / math.sqrt(d)
            out[b] = (scores.softmax(-1).unsqueeze(1) @ v).squeeze(1)
        return out


@dataclass(frozen=True)
class _Step:
    """One decode step's inputs as both SDPA vendor paths read them: ``queries`` (q as [batch,
    q_heads, 1, head_dim]) and the context lengths' extremes."""

    inputs: Inputs
    queries: Any
    batch: int
    qh: int
    d: int
    page_size: int
    kvh: int
    longest: int
    shortest: int

    @classmethod
    def of(cls, inputs: Inputs) -> _Step:
        q, k_cache, lens = inputs["q"], inputs["k_cache"], inputs["context_lens"]
        batch, qh, d = (int(n) for n in q.shape)
        page_size, kvh = int(k_cache.shape[1]), int(k_cache.shape[2])
        queries = q.view(batch, qh, 1, d)
        return cls(inputs, queries, batch, qh, d, page_size, kvh, int(lens.max()), int(lens.min()))

    def valid(self, positions: Any) -> Any:
        """[batch, longest]: whether each of ``positions`` lies inside its sequence's context."""
        return positions < self.inputs["context_lens"][:, None]

    def mask(self, valid: Any) -> Any:
        """``valid`` as SDPA's attention mask."""
        return valid.view(self.batch, 1, 1, self.longest)

    def attend(self, k: Any, v: Any, mask: Any | None) -> None:
        """SDPA of the queries over K and V [batch, kv_heads, longest, head_dim], rebinding
        ``inputs["out"]`` to the result."""
        out = sdpa(self.queries, k, v, attn_mask=mask)
        self.inputs["out"] = out.reshape(self.batch, self.qh, self.d)


def _gathered_sdpa_launcher(inputs: Inputs) -> Launcher:
    import torch

    step = _Step.of(inputs)
    tables, page_size = inputs["block_tables"], step.page_size
    positions = torch.arange(step.longest, device=inputs["q"].device)
    k_rows = inputs["k_cache"].view(-1, step.kvh, step.d)
    v_rows = inputs["v_cache"].view(-1, step.kvh, step.d)

    def launch() -> None:
        slots = tables[:, positions // page_size] * page_size + positions % page_size
        mask = None
        if step.shortest < step.longest:
            valid = step.valid(positions)
            slots = slots.where(valid, 0)
            mask = step.mask(valid)
        step.attend(k_rows[slots].transpose(1, 2), v_rows[slots].transpose(1, 2), mask)

    return launch


def _contiguous_sdpa_launcher(inputs: Inputs) -> Launcher:
    import torch

    step = _Step.of(inputs)
    tables = inputs["block_tables"]
    batch, max_pages = step.batch, int(tables.shape[1])
    own = torch.arange(batch * max_pages, dtype=tables.dtype, device=tables.device)
    if inputs["k_cache"].shape[0] != batch * max_pages or not torch.equal(
        tables, own.view(batch, -1)
    ):
        raise SpecError(
            "paged_attention: sdpa_contiguous needs the contiguous cache (sequence b's pages "
            "b * max_pages onward, in order): use sdpa_gathered for a paged one"
        )
    rows = (batch, max_pages * step.page_size, step.kvh, step.d)
    k = inputs["k_cache"].view(rows)[:, : step.longest].transpose(1, 2)
    v = inputs["v_cache"].view(rows)[:, : step.longest].transpose(1, 2)
    mask = None
    if step.shortest < step.longest:
        mask = step.mask(step.valid(torch.arange(step.longest, device=inputs["q"].device)))

    def launch() -> None:
        step.attend(k, v, mask)

    return launch


def _flash_attn_launcher(inputs: Inputs) -> Launcher:
    try:
        from flash_attn import flash_attn_with_kvcache
    except ImportError as err:
        raise SpecError(
            f"paged_attention: flash_attn_with_kvcache is not importable ({err})"
        ) from err
    q, k_cache, v_cache = inputs["q"], inputs["k_cache"], inputs["v_cache"]
    tables, context_lens = inputs["block_tables"], inputs["context_lens"]
    batch, qh, d = (int(n) for n in q.shape)
    queries = q.view(batch, 1, qh, d)

    def launch() -> None:
        result = flash_attn_with_kvcache(
            queries, k_cache, v_cache, cache_seqlens=context_lens, block_table=tables
        )
        inputs["out"] = result.reshape(batch, qh, d)

    return launch


SPEC = PagedAttentionSpec()
