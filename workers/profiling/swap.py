"""Tuned tunefleet kernels swapped into a model in place of torch's ops, behind one switch.

:func:`install` wraps, in place, every ``nn.Linear`` (matmul bundle, on a K x N copy of the
weight, plus the bias if any), every ``RMSNorm`` of workers.profiling.models (rmsnorm bundle, with
the module's own eps and weight), every ``Attention`` (flash_attention bundle for prefill: causal,
GQA, softmax scale 1/sqrt(head_dim) as the model's SDPA; paged_attention for decode over the
model's paged cache) and every ``MoE`` expert block (fused_moe bundle: per token count, where the
bundle's ``up_silu`` results are as near as its ``up`` ones (:meth:`Swap.first_gemm`), the gate+up
GEMM with SiLU(gate) * up in its epilogue, else the gate+up GEMM and fused_moe's silu_and_mul
kernel; then the down GEMM with the routing weights applied in the kernel
and, where both configs share BLOCK_SIZE_M, the first GEMM's expert alignment; slots summed per
token, as the model's grouped_mm path: in the down GEMM's epilogue where the bundle holds
``down_sum`` results, else by torch after it). ``Swap.on`` chooses per call, so one model and one
set of inputs serve the baseline and the tuned run, interleaved.

A call runs the tuned kernel only where the bundle's decision for its problem is ``triton``
(:meth:`Bundle.decision_table`); where it is ``vendor`` the model's own op runs ("kept vendor").
An expert block follows the decision of each of its GEMMs: where one is ``vendor``, that GEMM runs
the model's ``torch._grouped_mm`` half (:func:`~workers.profiling.models.grouped_mm_gate_up`,
:func:`~workers.profiling.models.grouped_mm_down`: the vendor path its study timed) and the other
fused_moe; both ``vendor``: the model's path. A model on the per-expert loop (no grouped GEMM for
its device and dtype) cannot split its block: there one ``vendor`` GEMM keeps both on the loop.
:attr:`Swap.used` counts the distinct problems of each kernel by outcome, :attr:`Swap.lookups` by
how the bundle answered (exact / nearest / default).

The launch path is the deployment's: a module's fixed dims (N and K of a weight, a norm's width)
and dtype are known at install, so a call reads only its row count and indexes the module's plans
by it (one dict access); a miss looks the problem up in the kernel's decision table and turns the
config into launch arguments (grid, keyword arguments, workspaces) once. Matmul configs that need
a TMA descriptor, a persistent grid or a split-K workspace go through the spec's ``make_launcher``
per call instead (their preparation is per call in any case). Paged attention is launched with the
spec's argument recipe rather than through ``make_launcher``, which reads sequence lengths back
from the device (a sync that a CUDA graph capture refuses); the lengths are known on the host here.
"""

from __future__ import annotations

import math
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from search_spaces import stack
from search_spaces.bundle import Bundle, BundleError, BundleTable, Decision, load_bundle
from search_spaces.device_identity import DeviceClass, same_class
from search_spaces.kernels.fused_moe import (
    GATED,
    SUMMED,
    PlannedLaunch,
    launch_plan,
    silu_and_mul,
)
from search_spaces.problem import problem_distance
from search_spaces.registry import get_spec
from search_spaces.spec import split_launch_options
from workers.profiling.errors import ProfileError
from workers.profiling.models import (
    PAGE_SIZE,
    Attention,
    KVCache,
    MoE,
    RMSNorm,
    grouped_mm_down,
    grouped_mm_gate_up,
)

SWAPPABLE = ("matmul", "rmsnorm", "flash_attention", "paged_attention", "fused_moe")
#: Problem fields of each swappable kernel, in the order its table is keyed.
FIELDS = {
    "matmul": ("M", "N", "K", "dtype"),
    "rmsnorm": ("M", "N", "dtype"),
    "flash_attention": (
        "batch", "max_seqlen", "pattern", "q_heads", "kv_heads", "head_dim", "causal", "dtype",
    ),
    "paged_attention": (
        "batch", "context_len", "pattern", "q_heads", "kv_heads", "head_dim", "page_size", "dtype",
        "cache",
    ),
    "fused_moe": ("M", "E", "topk", "N", "K", "dtype", "gemm"),
}  # fmt: skip
#: What :attr:`Swap.used` calls a problem whose decision keeps the model's own op.
KEPT = "kept vendor"
#: fused_moe's first GEMM of an expert block: plain (then silu_and_mul), or with the activation.
FIRST_GEMMS = ("up", GATED)
#: fused_moe's last GEMM of an expert block: plain (then torch's sum), or with the top-k sum.
LAST_GEMMS = ("down", SUMMED)
DTYPE_NAMES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}


def load_bundles(folder: str | Path, device: DeviceClass) -> dict[str, Bundle]:
    """The bundles in ``folder`` of ``device``'s class (:func:`same_class`; a bundle that names
    no class fits any device), first file by name per kernel; in a stack-laid tree (``pull --by-stack``),
    those of the installed Triton's folder (:func:`search_spaces.stack.resolve`). ProfileError if
    none fits."""
    path = Path(folder)
    if not path.is_dir():
        raise ProfileError(f"--with-bundle {path} is not a folder; write one with `tunefleet pull`")
    try:
        path = stack.resolve(path)
    except stack.StackError as exc:
        raise ProfileError(str(exc)) from None
    found: dict[str, Bundle] = {}
    for file in sorted(path.glob("*.json")):
        try:
            bundle = load_bundle(file)
        except BundleError:
            continue
        theirs = bundle.device_class
        if bundle.kernel in SWAPPABLE and (not theirs or same_class(theirs, device)):
            found.setdefault(bundle.kernel, bundle)
    if not found:
        raise ProfileError(
            f"no {'/'.join(SWAPPABLE)} bundle for {device.key} in {path}; "
            "use `tunefleet pull KERNEL --out DIR`"
        )
    return found


@dataclass
class Swap:
    """The switch and what it swapped: ``on`` sends calls to tuned kernels where the bundle
    decides ``triton``; :attr:`used` and :attr:`lookups` count the distinct problems seen."""

    bundles: dict[str, Bundle]
    on: bool = False
    #: While set, only these kernels' calls go to tuned kernels (None: every kernel's).
    only: frozenset[str] | None = None
    tables: dict[str, BundleTable[Decision]] = field(default_factory=dict)
    #: (kernel, key) decided ``triton`` but kept on the model's op (an expert block on the
    #: per-expert loop whose other GEMM decided ``vendor``: the loop does not split in two).
    kept: set[tuple[str, tuple[Any, ...]]] = field(default_factory=set)
    #: An expert block's down GEMM: ``down_sum`` where the fused_moe bundle holds results of it,
    #: else ``down`` (set from the bundles).
    moe_last: str = field(init=False, default="down")
    _plans: dict[tuple[Any, ...], Any] = field(default_factory=dict)
    #: :meth:`first_gemm`'s answers, by the problem's values but ``gemm``.
    _first: dict[tuple[Any, ...], str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.tables = {
            k: b.decision_table(FIELDS[k]) for k, b in self.bundles.items() if k in FIELDS
        }
        moe = self.bundles.get("fused_moe")
        gemms = {e.problem.get("gemm") for e in moe.entries} if moe is not None else set()
        if SUMMED in gemms:
            self.moe_last = SUMMED

    @property
    def used(self) -> dict[str, dict[str, int]]:
        """Per kernel: distinct problems run as ``triton`` and kept on the model's op (KEPT)."""
        counts: dict[str, dict[str, int]] = {}
        for kernel, table in self.tables.items():
            for key, decision in table.items():
                mine = counts.setdefault(kernel, {"triton": 0, KEPT: 0})
                mine["triton" if decision.triton and (kernel, key) not in self.kept else KEPT] += 1
        return counts

    @property
    def lookups(self) -> dict[str, dict[str, int]]:
        """Per kernel: distinct problems by how the bundle answered (exact / nearest / default)."""
        counts: dict[str, dict[str, int]] = {}
        for kernel, table in self.tables.items():
            for how in table.how.values():
                mine = counts.setdefault(kernel, {})
                mine[how] = mine.get(how, 0) + 1
        return counts

    def active(self, kernel: str) -> bool:
        """Whether calls of ``kernel`` go to tuned kernels now (``on``, and ``only`` allows it)."""
        return self.on and (self.only is None or kernel in self.only)

    def decision(self, kernel: str, key: tuple[Any, ...]) -> Decision:
        """The decision for the problem of values ``key`` (in FIELDS[kernel] order)."""
        return self.tables[kernel][key]

    def first_gemm(self, problem: dict[str, Any]) -> str:
        """An expert block's first GEMM for ``problem`` (its ``up`` or ``up_silu`` problem):
        the form with the nearer fused_moe entry (:func:`problem_distance`, so per token count
        where the bundle holds both), ``up_silu`` of equally near ones; ``up`` without either."""
        moe = self.bundles.get("fused_moe")
        key = tuple(problem[f] for f in FIELDS["fused_moe"] if f != "gemm")
        form = self._first.get(key)
        if form is None:
            near = dict.fromkeys((GATED, "up"), math.inf)
            for entry in moe.entries if moe is not None else ():
                for gemm, best in near.items():
                    asked = {**problem, "gemm": gemm}
                    near[gemm] = min(best, problem_distance(asked, entry.problem))
            form = GATED if near[GATED] < math.inf and near[GATED] <= near["up"] else "up"
            self._first[key] = form
        return form

    def ran(self, kernel: str, problem: dict[str, Any]) -> dict[str, Any]:
        """The problem the swap runs for ``problem``: an expert block's first GEMM is
        :meth:`first_gemm`'s; its last is ``down_sum`` where the bundle holds such results, else
        ``down``."""
        if kernel != "fused_moe":
            return problem
        gemm = problem.get("gemm")
        if gemm in FIRST_GEMMS:
            return {**problem, "gemm": self.first_gemm(problem)}
        if gemm in LAST_GEMMS:
            return {**problem, "gemm": self.moe_last}
        return problem

    def runs_triton(self, kernel: str, problem: dict[str, Any]) -> bool:
        """Whether calls of ``problem`` run the tuned kernel: its decision is ``triton`` and no
        forward kept it on the model's op (:attr:`kept`); read without recording a lookup."""
        if kernel not in self.tables:
            return False
        problem = self.ran(kernel, problem)
        key = tuple(problem[f] for f in FIELDS[kernel])
        if (kernel, key) in self.kept:
            return False
        table = self.tables[kernel]
        return (
            table.get(key) or table.bundle.decide(dict(zip(table.fields, key, strict=True)))
        ).triton


#: A prepared launch: called with the call's tensors and row count.
Launch = Callable[..., None]


#: The tile params ``matmul_kernel`` takes as they are: a config that sets any other flag (TMA,
#: PERSISTENT, STREAM_K, WIDE_N, PDL, ...) runs through the spec's launcher.
_PLAIN_MATMUL = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")


def _matmul_plan(config: dict[str, Any], m: int, n: int, k: int, cpu_bf16: bool) -> Launch | None:
    """The direct launch of ``config`` for an M x K by K x N product, or None where it needs the
    spec's launcher (any flag beyond the plain tile set: TMA descriptors, a persistent or
    stream-K grid, a split-K workspace, ...)."""
    from search_spaces.kernels._matmul_kernels import matmul_kernel

    meta, options = split_launch_options(config)
    flags = {p: v for p, v in meta.items() if p not in (*_PLAIN_MATMUL, "SPLIT_K")}
    if config["SPLIT_K"] != 1 or any(flags.values()):
        return None
    # DOT_IN_FP32: Triton's interpreter multiplies bfloat16 bit patterns in tl.dot (triton #11584).
    kwargs = {p: meta[p] for p in _PLAIN_MATMUL}
    kwargs.update(options, SPLIT_K=1, FUSED_REDUCE=False, DOT_IN_FP32=cpu_bf16)
    grid = (-(-m // int(config["BLOCK_M"])) * -(-n // int(config["BLOCK_N"])), 1)
    launcher = matmul_kernel[grid]
    mn = m * n

    def launch(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
        s0, s1 = a.stride()
        launcher(a, b, out, out, out, m, n, k, s0, s1, n, 1, n, 1, mn, **kwargs)

    return launch


def _generic_matmul(config: dict[str, Any]) -> Launch:
    """The spec's own launcher, prepared per call (TMA descriptors, persistent grid, split-K)."""
    spec = get_spec("matmul")

    def launch(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
        spec.make_launcher({"a": a, "b": b, "out": out}, config)()

    return launch


def _linear(swap: Swap, module: nn.Linear) -> None:
    original = module.forward
    weight_kn = module.weight.detach().t().contiguous()
    k, n = weight_kn.shape
    dtype = DTYPE_NAMES[weight_kn.dtype]
    cpu_bf16 = weight_kn.device.type == "cpu" and weight_kn.dtype == torch.bfloat16
    # Keyed by the call's shape, so a call that keeps torch's op costs one dict access.
    plans: dict[torch.Size, Launch | None] = {}  # None: the decision keeps torch's op

    def forward(self: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        if not swap.active("matmul"):
            return original(x)
        try:
            plan = plans[x.shape]
        except KeyError:
            m = x.numel() // k
            decision = swap.decision("matmul", (m, n, k, dtype))
            plan = plans[x.shape] = (
                (
                    _matmul_plan(decision.config, m, n, k, cpu_bf16)
                    or _generic_matmul(decision.config)
                )
                if decision.triton
                else None
            )
        if plan is None:
            return original(x)
        a = x.reshape(-1, k)
        m = a.shape[0]
        out = torch.empty(m, n, dtype=x.dtype, device=x.device)
        plan(a, weight_kn, out)
        if self.bias is not None:
            out += self.bias
        return out.view(*x.shape[:-1], n)

    module.forward = types.MethodType(forward, module)  # type: ignore[method-assign]


def _rmsnorm_plan(config: dict[str, Any], m: int, n: int, eps: float) -> Launch:
    from search_spaces.kernels._common import pop_pdl
    from search_spaces.kernels._rmsnorm_kernels import rmsnorm_kernel
    from search_spaces.kernels.rmsnorm import CACHE_HINTS

    meta, options = split_launch_options(config)
    streaming = bool(meta.pop("STREAMING", False))
    pdl = pop_pdl(meta)
    kwargs = {
        **meta,
        **options,
        **CACHE_HINTS[streaming],
        **pdl,
        "ONE_PASS": int(config["BLOCK_N"]) >= n,
    }
    launcher = rmsnorm_kernel[(-(-m // int(config["ROWS_PER_PROGRAM"])),)]

    def launch(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor) -> None:
        launcher(x, weight, out, m, n, x.stride(0), n, eps, **kwargs)

    return launch


def _rmsnorm(swap: Swap, module: RMSNorm) -> None:
    original = module.forward
    n = module.weight.shape[0]
    dtype = DTYPE_NAMES[module.weight.dtype]
    # Keyed by the call's shape, so a call that keeps torch's op costs one dict access.
    plans: dict[torch.Size, Launch | None] = {}  # None: the decision keeps torch's rms_norm

    def forward(self: RMSNorm, x: torch.Tensor) -> torch.Tensor:
        if not swap.active("rmsnorm"):
            return original(x)
        try:
            plan = plans[x.shape]
        except KeyError:
            m = x.numel() // n
            decision = swap.decision("rmsnorm", (m, n, dtype))
            plan = plans[x.shape] = (
                _rmsnorm_plan(decision.config, m, n, self.eps) if decision.triton else None
            )
        if plan is None:
            return original(x)
        rows = x.reshape(-1, n)
        out = torch.empty_like(rows)
        plan(rows, self.weight, out)
        return out.view(x.shape)

    module.forward = types.MethodType(forward, module)  # type: ignore[method-assign]


def _flash(swap: Swap, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor | None:
    """Causal GQA attention of q [B, S, H, D] over k/v [B, S, Hkv, D] by the bundle's config;
    None where the decision keeps SDPA."""
    b, s, qh, d = q.shape
    kvh = k.shape[2]
    decision = swap.decision(
        "flash_attention", (b, s, "uniform", qh, kvh, d, True, DTYPE_NAMES[q.dtype])
    )
    if not decision.triton:
        return None
    config = decision.config
    key = ("cu", b, s, q.device)
    if key not in swap._plans:
        swap._plans[key] = torch.arange(0, (b + 1) * s, s, dtype=torch.int32, device=q.device)
    q2, k2, v2 = q.reshape(b * s, qh, d), k.reshape(b * s, kvh, d), v.reshape(b * s, kvh, d)
    out = torch.empty_like(q2)
    inputs = {
        "q": q2, "k": k2, "v": v2, "out": out, "cu_seqlens": swap._plans[key],
        "causal": True, "max_seqlen": s,
    }  # fmt: skip
    get_spec("flash_attention").make_launcher(inputs, config)()
    return out.view(b, s, qh, d)


def _paged(swap: Swap, q: torch.Tensor, cache: KVCache) -> torch.Tensor | None:
    """Decode attention of q [B, 1, H, D] over the cache's whole context by the bundle's config;
    None where the decision keeps SDPA."""
    from search_spaces.kernels._common import pop_pdl
    from search_spaces.kernels._paged_attention_kernels import (
        paged_attention_kernel,
        paged_attention_reduce_kernel,
    )
    from search_spaces.kernels.paged_attention import MIN_GROUP_ROWS

    b, _, qh, d = q.shape
    kvh, context = cache.k.shape[2], cache.seq + 1
    decision = swap.decision(
        "paged_attention",
        (b, context, "uniform", qh, kvh, d, PAGE_SIZE, DTYPE_NAMES[q.dtype], "contiguous"),
    )
    if not decision.triton:
        return None
    config = decision.config
    partition = int(config["PARTITION_SIZE"])
    parts = -(-context // partition) if partition else 1
    key = ("paged", b, cache.pages, qh, d, parts, q.device)
    if key not in swap._plans:
        dev = q.device
        tables = torch.arange(b * cache.pages, dtype=torch.int32, device=dev).view(b, cache.pages)
        lens = torch.full((b,), context, dtype=torch.int32, device=dev)
        ws_m = torch.empty(b, qh, parts, dtype=torch.float32, device=dev)
        ws_o = torch.empty(b, qh, parts, d, dtype=torch.float32, device=dev)
        swap._plans[key] = (tables, lens, ws_m, torch.empty_like(ws_m), ws_o)
    tables, lens, ws_m, ws_l, ws_o = swap._plans[key]
    q3 = q.reshape(b, qh, d)
    out = torch.empty_like(q3)
    meta, options = split_launch_options(config)
    pdl = pop_pdl(meta)
    group = qh // kvh
    kc, vc = cache.k, cache.v
    pad = max(MIN_GROUP_ROWS, 1 << max(0, group - 1).bit_length())
    paged_attention_kernel[(b, kvh, parts)](
        q3, kc, vc, tables, lens, out, *((out, out, out) if partition == 0 else (ws_m, ws_l, ws_o)),
        q3.stride(0), q3.stride(1), kc.stride(0), kc.stride(1), kc.stride(2),
        vc.stride(0), vc.stride(1), vc.stride(2), tables.stride(0), out.stride(0), out.stride(1),
        math.log2(math.e) / math.sqrt(d), parts,
        **meta, **options, **pdl, GROUP=group, GROUP_PAD=pad,
        HEAD_DIM=d, PAGE_SIZE=PAGE_SIZE,
        DOT_IN_FP32=q.device.type == "cpu" and q.dtype == torch.bfloat16,
    )  # fmt: skip
    if partition:
        paged_attention_reduce_kernel[(b, qh)](
            ws_m, ws_l, ws_o, out, parts, out.stride(0), out.stride(1),
            HEAD_DIM=d, PARTITIONS_PAD=1 << max(0, parts - 1).bit_length(), **pdl,
        )  # fmt: skip
    return out.view(b, 1, qh, d)


def _attention(swap: Swap, module: Attention) -> None:
    original = module.attend

    def attend(
        self: Attention, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cache: KVCache | None
    ) -> torch.Tensor:
        out = None
        if cache is None and swap.active("flash_attention") and "flash_attention" in swap.bundles:
            out = _flash(swap, q, k, v)
        elif (
            cache is not None
            and swap.active("paged_attention")
            and "paged_attention" in swap.bundles
        ):
            out = _paged(swap, q, cache)
        return original(q, k, v, cache) if out is None else out

    module.attend = types.MethodType(attend, module)  # type: ignore[method-assign]


def _moe(swap: Swap, module: MoE) -> None:
    original = module.experts
    e, f2, h = module.w_up.shape
    f, topk = f2 // 2, module.top_k
    dtype = DTYPE_NAMES[module.w_up.dtype]
    last = swap.moe_last
    summed = last == SUMMED
    # Per token count: the first and the down GEMM's plans (None: the model's path for it), the
    # unit routing weights of the first GEMM and whether it is ``up_silu``.
    plans: dict[int, tuple[PlannedLaunch | None, PlannedLaunch | None, torch.Tensor, bool]] = {}

    def experts(
        self: MoE, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor
    ) -> torch.Tensor:
        if not swap.active("fused_moe"):
            return original(x, ids, weights)
        m = x.shape[0]
        try:
            up_plan, down_plan, ones, gated = plans[m]
        except KeyError:
            asked = {"M": m, "E": e, "topk": topk, "N": f2, "K": h, "dtype": dtype, "gemm": "up"}
            first = swap.first_gemm(asked)
            gated = first == GATED
            keys = (m, e, topk, f2, h, dtype, first), (m, e, topk, h, f, dtype, last)
            up, down = (swap.decision("fused_moe", key) for key in keys)
            run_up, run_down = up.triton, down.triton
            if not self.grouped and run_up != run_down:
                # The per-expert loop does not split in two: the block keeps the model's path.
                swap.kept.add(("fused_moe", keys[0] if run_up else keys[1]))
                run_up = run_down = False
            up_plan = (
                launch_plan(up.config, m, e, topk, f2, h, False, x, gated=gated) if run_up else None
            )
            # Equal BLOCK_SIZE_M: the down GEMM reads the first launch's alignment.
            down_plan = (
                launch_plan(
                    down.config, m, e, topk, h, f, topk > 1, x, share=up_plan, summed=summed
                )
                if run_down
                else None
            )
            ones = torch.ones(m, topk, dtype=torch.float32, device=x.device)
            plans[m] = up_plan, down_plan, ones, gated
        if up_plan is None and down_plan is None:
            return original(x, ids, weights)
        if up_plan is None:
            act = grouped_mm_gate_up(x, self.w_up, ids)
        else:
            act = torch.empty(m * topk, f, dtype=x.dtype, device=x.device)
            # Routing weights once, in the down GEMM.
            if gated:
                up_plan(x, self.w_up, ids, ones, act.view(m, topk, f))
            else:
                hidden = torch.empty(m, topk, f2, dtype=x.dtype, device=x.device)
                up_plan(x, self.w_up, ids, ones, hidden)
                silu_and_mul(hidden.view(m * topk, f2), act)
        if down_plan is None:
            return grouped_mm_down(act, self.w_down, ids, weights)
        if summed:
            out = torch.zeros(m, h, dtype=x.dtype, device=x.device)
            down_plan(act, self.w_down, ids, weights, out)
            return out
        slots = torch.empty(m, topk, h, dtype=x.dtype, device=x.device)
        down_plan(act, self.w_down, ids, weights, slots)
        return slots.sum(dim=1)

    module.experts = types.MethodType(experts, module)  # type: ignore[method-assign]


def install(model: nn.Module, bundles: dict[str, Bundle]) -> Swap:
    """Wrap the model's linear, RMSNorm, attention and MoE modules (those with a bundle); off at
    first."""
    swap = Swap(bundles)
    for module in model.modules():
        if isinstance(module, nn.Linear) and "matmul" in bundles:
            _linear(swap, module)
        elif isinstance(module, RMSNorm) and "rmsnorm" in bundles:
            _rmsnorm(swap, module)
        elif isinstance(module, Attention):
            _attention(swap, module)
        elif isinstance(module, MoE) and "fused_moe" in bundles:
            _moe(swap, module)
    return swap
