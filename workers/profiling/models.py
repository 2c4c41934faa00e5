"""Workloads to profile: a Llama-style decoder (dense or MoE) with built-in configs, or a user's
callable.

The decoder is our own torch module (RMSNorm, rotary embeddings, GQA attention through
``scaled_dot_product_attention``, SwiGLU MLP or top-k routed SwiGLU experts, a KV cache for decode)
with random weights drawn from the config: no download, no ``transformers``. Prefill logits are
computed for the last position only (as serving engines do). Decode runs one token per sequence at
position ``seq`` over a KV cache of ``seq`` tokens whose layout is paged
(``[batch * pages, PAGE_SIZE, kv_heads, head_dim]``, sequence b owning pages ``b * pages ...``), so
tuned paged attention reads the same cache.

MoE layers (:class:`MoE`) route each token to ``top_k`` of ``num_experts`` experts (softmax over
the router's logits, the top k renormalized, as Mixtral and Qwen3-MoE do) and run the experts
through ``torch._grouped_mm`` where it runs for the device and dtype, else one matmul per expert
(:attr:`Workload.notes` says which). Each expert block runs inside a ``record_function`` named
:func:`moe_annotation` (its problem), so a trace names the MoE problems the way recorded input
shapes name the others. Routing is discontinuous: a rounding change moves a token whose k-th and
(k+1)-th experts nearly tie to another expert, so :meth:`Workload.routed` records a forward's
expert choices and :meth:`Workload.pinned` runs the float32 twin with them (its own routing
weights over those experts).

Inputs are drawn from a generator seeded per (batch, seq), so a model and its float32 twin
(:meth:`Workload.fp32_twin`) see the same tokens and the same KV cache.

``MODULE:CALLABLE`` imports and runs user code: the callable takes no arguments and returns
``(model, build)`` where ``build(batch, seq)`` returns the positional arguments of one forward
(called after ``torch.manual_seed(0)``, so a build that draws with torch gives the same inputs
each time).
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from workers.profiling.errors import ProfileError
from workers.profiling.trace import MOE_ANNOTATION, Phase

#: Tokens per KV-cache page (paged_attention's default page size).
PAGE_SIZE = 16


@dataclass(frozen=True)
class DecoderConfig:
    """Dimensions of a Llama-style decoder (names as in Hugging Face's LlamaConfig)."""

    name: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    vocab_size: int
    rope_theta: float = 500000.0
    rms_norm_eps: float = 1e-5
    #: Width of an attention head; 0: hidden_size // num_heads.
    head_size: int = 0
    #: MoE layers (num_experts > 0): experts, experts per token, each expert's MLP width.
    num_experts: int = 0
    top_k: int = 0
    moe_intermediate_size: int = 0

    @property
    def head_dim(self) -> int:
        return self.head_size or self.hidden_size // self.num_heads


#: ``tiny`` and ``tiny-moe`` are for CPU tests (head_dim 64, as the attention kernels need). The
#: others take the dims of published configs (random weights): meta-llama/Llama-3.2-1B and
#: Meta-Llama-3-8B; mistralai/Mixtral-8x7B-v0.1 (8 experts, top 2); Qwen/Qwen3-30B-A3B (128
#: experts, top 8, head_dim 128; without Qwen3's per-head q/k norms).
CONFIGS: dict[str, DecoderConfig] = {
    c.name: c
    for c in (
        DecoderConfig("tiny", 256, 2, 4, 2, 512, 512, 10000.0),
        DecoderConfig(
            "tiny-moe", 256, 2, 4, 2, 512, 512, 10000.0,
            num_experts=8, top_k=2, moe_intermediate_size=128,
        ),
        DecoderConfig("llama-3.2-1b", 2048, 16, 32, 8, 8192, 128256),
        DecoderConfig("llama-3-8b", 4096, 32, 32, 8, 14336, 128256),
        DecoderConfig(
            "mixtral-8x7b", 4096, 32, 32, 8, 14336, 32000, 1e6,
            num_experts=8, top_k=2, moe_intermediate_size=14336,
        ),
        DecoderConfig(
            "qwen3-30b-a3b", 2048, 48, 32, 4, 6144, 151936, 1e6, 1e-6, head_size=128,
            num_experts=128, top_k=8, moe_intermediate_size=768,
        ),
    )
}  # fmt: skip


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of x [batch, seq, heads, head_dim] with cos/sin [seq, head_dim]."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]


class Attention(nn.Module):
    """GQA self-attention; ``attend`` is the swappable part (q, k, v -> context)."""

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        d, h, kvh = config.head_dim, config.num_heads, config.num_kv_heads
        self.heads, self.kv_heads, self.head_dim = h, kvh, d
        self.q_proj = nn.Linear(config.hidden_size, h * d, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, kvh * d, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, kvh * d, bias=False)
        self.o_proj = nn.Linear(h * d, config.hidden_size, bias=False)

    def attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cache: KVCache | None
    ) -> torch.Tensor:
        """q [B, S, H, D], k/v [B, S, Hkv, D] (prefill) or the cache's whole context (decode):
        context [B, S, H, D] through SDPA. In float32 (the twin) K and V are repeated per head
        group instead of ``enable_gqa``, which SDPA's memory-efficient kernel does not take: the
        math path it would fall back to holds every [S, S] score (8 GiB at S=16384)."""
        gqa = q.dtype != torch.float32 or self.heads == self.kv_heads
        if not gqa:
            group = self.heads // self.kv_heads
            k, v = k.repeat_interleave(group, dim=2), v.repeat_interleave(group, dim=2)
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2),
            k.transpose(1, 2),
            v.transpose(1, 2),
            is_causal=cache is None,
            enable_gqa=gqa,
        )
        return out.transpose(1, 2)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: KVCache | None
    ) -> torch.Tensor:
        b, s, _ = x.shape
        q = _rotate(self.q_proj(x).view(b, s, self.heads, self.head_dim), cos, sin)
        k = _rotate(self.k_proj(x).view(b, s, self.kv_heads, self.head_dim), cos, sin)
        v = self.v_proj(x).view(b, s, self.kv_heads, self.head_dim)
        if cache is not None:
            k, v = cache.append(k, v)
        context = self.attend(q, k, v, cache)
        return self.o_proj(context.reshape(b, s, self.heads * self.head_dim))


class KVCache:
    """One layer's paged K and V for ``batch`` sequences of ``seq`` cached tokens; ``append``
    writes the new token at position ``seq`` (always the same slot, so repeated decode steps have
    static shapes and can be captured in a CUDA graph)."""

    def __init__(
        self,
        batch: int,
        seq: int,
        kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        drawn: Callable[[tuple[int, ...]], torch.Tensor],
    ) -> None:
        """``drawn(shape)`` gives the cache's random contents (cast here to ``dtype``)."""
        self.batch, self.seq = batch, seq
        self.pages = -(-(seq + 1) // PAGE_SIZE)
        shape = (batch * self.pages, PAGE_SIZE, kv_heads, head_dim)
        self.k = drawn(shape).to(dtype)
        self.v = drawn(shape).to(dtype)

    def view(self, paged: torch.Tensor) -> torch.Tensor:
        """[B, seq + 1, Hkv, D]: the context of each sequence, the new token included."""
        b = self.batch
        return paged.view(b, self.pages * PAGE_SIZE, *paged.shape[2:])[:, : self.seq + 1]

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        kc, vc = self.view(self.k), self.view(self.v)
        kc[:, self.seq] = k[:, 0]
        vc[:, self.seq] = v[:, 0]
        return kc, vc


class MLP(nn.Module):
    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def moe_annotation(m: int, experts: int, top_k: int, hidden: int, ffn: int, dtype: str) -> str:
    """The name of the ``record_function`` around an expert block of ``m`` tokens (parsed back by
    workers.profiling.emit): ``tunefleet.moe M=.. E=.. topk=.. hidden=.. ffn=.. dtype=..``."""
    return (
        f"{MOE_ANNOTATION} M={m} E={experts} topk={top_k} hidden={hidden} ffn={ffn} dtype={dtype}"
    )


def expert_order(ids: torch.Tensor, experts: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The token slots of ids [M, k] sorted by expert (a stable sort of the flattened ids) and
    each expert's end offset in that order (int32), on the device: no host sync."""
    flat = ids.flatten().long()
    order = flat.argsort(stable=True)
    counts = torch.zeros(experts, dtype=torch.int32, device=ids.device)
    counts.scatter_add_(0, flat, torch.ones_like(flat, dtype=torch.int32))
    return order, counts.cumsum(0).to(torch.int32)


def grouped_mm_experts(
    x: torch.Tensor,
    w_up: torch.Tensor,
    w_down: torch.Tensor,
    ids: torch.Tensor,
    weights: torch.Tensor,
) -> torch.Tensor:
    """Experts through ``torch._grouped_mm`` (no host sync: capturable): the token slots sorted by
    expert, gate+up GEMM, SiLU(gate) * up, down GEMM, each slot scaled by its routing weight,
    slots summed per token. x [M, H], w_up [E, 2F, H], w_down [E, H, F], ids [M, k] int32,
    weights [M, k] float32 -> [M, H]."""
    m, k = ids.shape
    ffn = w_down.shape[2]
    order, offs = expert_order(ids, w_up.shape[0])
    h = torch._grouped_mm(x[order // k], w_up.transpose(1, 2), offs=offs)
    y = torch._grouped_mm(F.silu(h[:, :ffn]) * h[:, ffn:], w_down.transpose(1, 2), offs=offs)
    return _scatter_summed(y, order, weights, m, k)


def grouped_mm_gate_up(x: torch.Tensor, w_up: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """The first half of :func:`grouped_mm_experts`: SiLU(gate) * up of each token slot, in slot
    order (row j * k + i: token j's i-th expert), [M * k, F]."""
    k, ffn = ids.shape[1], w_up.shape[1] // 2
    order, offs = expert_order(ids, w_up.shape[0])
    h = torch._grouped_mm(x[order // k], w_up.transpose(1, 2), offs=offs)
    return torch.empty_like(h[:, :ffn]).index_copy_(0, order, F.silu(h[:, :ffn]) * h[:, ffn:])


def grouped_mm_down(
    act: torch.Tensor, w_down: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor
) -> torch.Tensor:
    """The second half of :func:`grouped_mm_experts` on activations in slot order [M * k, F]:
    the down GEMM, each slot scaled by its routing weight, slots summed per token -> [M, H]."""
    m, k = ids.shape
    order, offs = expert_order(ids, w_down.shape[0])
    y = torch._grouped_mm(act[order], w_down.transpose(1, 2), offs=offs)
    return _scatter_summed(y, order, weights, m, k)


def _scatter_summed(
    y: torch.Tensor, order: torch.Tensor, weights: torch.Tensor, m: int, k: int
) -> torch.Tensor:
    """Rows y (slots in ``order``) scaled by their routing weights, put back in slot order and
    summed per token -> [M, H]."""
    y = y * weights.flatten()[order, None].to(y.dtype)
    return torch.empty_like(y).index_copy_(0, order, y).view(m, k, -1).sum(dim=1)


def looped_experts(
    x: torch.Tensor,
    w_up: torch.Tensor,
    w_down: torch.Tensor,
    ids: torch.Tensor,
    weights: torch.Tensor,
) -> torch.Tensor:
    """The same function as :func:`grouped_mm_experts`, one matmul pair per expert (syncs with
    the host: not capturable)."""
    m, k = ids.shape
    ffn = w_down.shape[2]
    slots = torch.zeros(m, k, w_down.shape[1], dtype=x.dtype, device=x.device)
    for expert in range(w_up.shape[0]):
        tokens, js = torch.nonzero(ids == expert, as_tuple=True)
        if tokens.numel():
            h = x[tokens] @ w_up[expert].T
            y = (F.silu(h[:, :ffn]) * h[:, ffn:]) @ w_down[expert].T
            slots[tokens, js] = y * weights[tokens, js, None].to(y.dtype)
    return slots.sum(dim=1)


class MoE(nn.Module):
    """Top-k routed SwiGLU experts; ``experts`` is the swappable part (x [M, H], ids, weights ->
    [M, H]). ``w_up`` holds each expert's gate rows then its up rows (vLLM's w13 layout)."""

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        e, h, f = config.num_experts, config.hidden_size, config.moe_intermediate_size
        self.router = nn.Linear(h, e, bias=False)
        self.w_up = nn.Parameter(torch.empty(e, 2 * f, h))
        self.w_down = nn.Parameter(torch.empty(e, h, f))
        self.top_k = config.top_k
        #: torch._grouped_mm (True) or the per-expert loop (set by the workload after a probe).
        self.grouped = True
        self._names: dict[int, str] = {}
        #: Set by :class:`Workload`: keep each forward's ids in ``recorded``; take ids from
        #: ``pin`` instead of choosing (``rerouted`` counts the tokens whose own top-k differs).
        self.recording = False
        self.recorded: torch.Tensor | None = None
        self.pin: torch.Tensor | None = None
        self.rerouted = 0

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """ids [M, k] int32 and weights [M, k] float32 (top-k of the softmax, renormalized; over
        ``pin``'s experts where one is set)."""
        probs = F.softmax(self.router(x), dim=-1, dtype=torch.float32)
        weights, ids = probs.topk(self.top_k, dim=-1)
        ids = ids.to(torch.int32)
        if self.pin is not None:
            if self.pin.shape != ids.shape:
                raise ProfileError(f"pinned routing {tuple(self.pin.shape)} for {tuple(ids.shape)}")
            moved = ids.sort(dim=-1).values != self.pin.sort(dim=-1).values
            self.rerouted += int(moved.any(dim=-1).sum())
            ids = self.pin
            weights = probs.gather(-1, ids.long())
        if self.recording:
            self.recorded = ids
        return ids, weights / weights.sum(dim=-1, keepdim=True)

    def experts(self, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        run = grouped_mm_experts if self.grouped else looped_experts
        return run(x, self.w_up, self.w_down, ids, weights)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        m = flat.shape[0]
        name = self._names.get(m)
        if name is None:
            e, f2, h = self.w_up.shape
            dtype = str(self.w_up.dtype).removeprefix("torch.")
            name = self._names[m] = moe_annotation(m, e, self.top_k, h, f2 // 2, dtype)
        ids, weights = self.route(flat)
        with torch.profiler.record_function(name):
            out = self.experts(flat, ids, weights)
        return out.view(x.shape)


#: One forward's expert ids per MoE layer, in module order.
Routes = tuple[torch.Tensor, ...]


def moe_layers(model: nn.Module) -> list[MoE]:
    """The model's MoE layers in module order."""
    return [m for m in model.modules() if isinstance(m, MoE)]


def same_routes(a: Routes, b: Routes) -> bool:
    """Whether two forwards chose the same experts everywhere."""
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def grouped_mm_runs(device: str, dtype: torch.dtype) -> str | None:
    """None where ``torch._grouped_mm`` runs for ``device`` and ``dtype``, else why not."""
    if not hasattr(torch, "_grouped_mm"):
        return "this torch has no torch._grouped_mm"
    x = torch.ones(16, 16, device=device, dtype=dtype)
    w = torch.ones(2, 16, 16, device=device, dtype=dtype)
    try:
        torch._grouped_mm(x, w, offs=torch.tensor([8, 16], dtype=torch.int32, device=device))
    except (RuntimeError, NotImplementedError) as exc:
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return None


def use_grouped_mm(model: nn.Module, device: str, dtype: torch.dtype) -> list[str]:
    """Point the model's MoE layers at torch._grouped_mm where it runs, else at the per-expert
    loop; a note saying so when it does not run."""
    layers = moe_layers(model)
    why = grouped_mm_runs(device, dtype) if layers else None
    for layer in layers:
        layer.grouped = why is None
    if why is None:
        return []
    return [
        f"MoE experts ({dtype}) ran one matmul per expert: torch._grouped_mm does not run ({why})"
    ]


class Layer(nn.Module):
    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.input_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.attn = Attention(config)
        self.post_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp: nn.Module = MoE(config) if config.num_experts else MLP(config)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: KVCache | None
    ) -> torch.Tensor:
        h = x + self.attn(self.input_norm(x), cos, sin, cache)
        return h + self.mlp(self.post_norm(h))


class Decoder(nn.Module):
    """The decoder: ``forward(tokens, caches=None)`` gives the last position's logits."""

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(Layer(config) for _ in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def rotary(self, start: int, length: int, device: torch.device) -> tuple[torch.Tensor, ...]:
        d = self.config.head_dim
        inv = 1.0 / self.config.rope_theta ** (
            torch.arange(0, d, 2, device=device, dtype=torch.float32) / d
        )
        angles = torch.arange(start, start + length, device=device).float()[:, None] * inv
        angles = torch.cat((angles, angles), dim=-1)
        dtype = self.embed.weight.dtype
        return angles.cos().to(dtype), angles.sin().to(dtype)

    def forward(
        self,
        tokens: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        caches: list[KVCache] | None = None,
    ) -> torch.Tensor:
        x = self.embed(tokens)
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, None if caches is None else caches[i])
        return self.lm_head(self.norm(x[:, -1]))


Forward = Callable[[], Any]
#: (model, phase, batch, seq) -> one forward of that model over the point's static inputs.
Build = Callable[[nn.Module, Phase, int, int], Forward]


@dataclass
class Workload:
    """A model on a device and a way to make one forward over static inputs for (phase, batch,
    seq); ``forward_for`` returns a zero-argument callable (what eager runs and a graph captures).
    ``notes`` say how the model runs here (an MoE layer's fallback, say)."""

    name: str
    model: nn.Module
    device: str
    build: Build
    phases: tuple[Phase, ...]
    notes: list[str] = dataclasses.field(default_factory=list)

    def _check(self, phase: Phase) -> None:
        if phase not in self.phases:
            raise ProfileError(
                f"model {self.name} supports --phase {'|'.join(p.value for p in self.phases)}, "
                f"not {phase.value}"
            )

    def forward_for(self, phase: Phase, batch: int, seq: int) -> Forward:
        self._check(phase)
        return self.build(self.model, phase, batch, seq)

    def fp32_twin(self) -> nn.Module:
        """A float32 copy of the model as it is now (the same weights, cast): take it before
        tuned kernels are swapped in. Its MoE layers use the per-expert loop where grouped_mm
        does not run in float32 (a reference need not be capturable)."""
        twin = copy.deepcopy(self.model).float().eval()
        use_grouped_mm(twin, self.device, torch.float32)
        return twin

    def reference_for(self, twin: nn.Module, phase: Phase, batch: int, seq: int) -> Forward:
        """One forward of ``twin`` (from :meth:`fp32_twin`) over the same inputs as
        ``forward_for``'s (float tensors in float32)."""
        self._check(phase)
        return self.build(twin, phase, batch, seq)

    def routed(self, forward: Forward) -> tuple[Any, Routes]:
        """``forward()``'s output and the expert ids each MoE layer of the model chose in it
        (empty for a model without MoE layers)."""
        layers = moe_layers(self.model)
        for layer in layers:
            layer.recording, layer.recorded = True, None
        try:
            out = forward()
        finally:
            for layer in layers:
                layer.recording = False
        routes = []
        for layer in layers:
            if layer.recorded is None:
                raise ProfileError("an MoE layer did not run in the recorded forward")
            routes.append(layer.recorded)
            layer.recorded = None
        return out, tuple(routes)

    def pinned(self, twin: nn.Module, reference: Forward, routes: Routes) -> tuple[Any, int]:
        """``reference()`` (a forward of ``twin``) with its MoE layers taking ``routes`` (from
        :meth:`routed`), and how many (layer, token) pairs the twin would have routed to another
        set of experts."""
        layers = moe_layers(twin)
        if len(layers) != len(routes):
            raise ProfileError(f"{len(routes)} recorded routings for {len(layers)} MoE layers")
        for layer, ids in zip(layers, routes, strict=True):
            layer.pin, layer.rerouted = ids, 0
        try:
            out = reference()
        finally:
            for layer in layers:
                layer.pin = None
        return out, sum(layer.rerouted for layer in layers)


def _inference(model: nn.Module, *args: Any) -> Forward:
    def forward() -> Any:
        with torch.inference_mode():
            return model(*args)

    return forward


def _decoder_workload(config: DecoderConfig, device: str, dtype: torch.dtype) -> Workload:
    torch.manual_seed(0)
    with torch.device(device):  # drawn on the device: a CPU init of 8B weights takes minutes
        model = Decoder(config)
        for module in model.modules():
            if isinstance(module, nn.Linear | nn.Embedding):
                nn.init.normal_(module.weight, std=1.0 / math.sqrt(config.hidden_size))
            elif isinstance(module, MoE):
                nn.init.normal_(module.w_up, std=1.0 / math.sqrt(config.hidden_size))
                nn.init.normal_(module.w_down, std=1.0 / math.sqrt(config.moe_intermediate_size))
    model = model.to(dtype=dtype).eval()
    notes = use_grouped_mm(model, device, dtype)

    def build(net: nn.Module, phase: Phase, batch: int, seq: int) -> Forward:
        dev = torch.device(device)
        g = torch.Generator(device=dev).manual_seed(1000003 * batch + seq)
        decoder: Decoder = net  # type: ignore[assignment]
        if phase is Phase.PREFILL:
            tokens = torch.randint(0, config.vocab_size, (batch, seq), device=dev, generator=g)
            return _inference(decoder, tokens, *decoder.rotary(0, seq, dev))
        tokens = torch.randint(0, config.vocab_size, (batch, 1), device=dev, generator=g)
        net_dtype = decoder.embed.weight.dtype

        def drawn(shape: tuple[int, ...]) -> torch.Tensor:  # the deployment's values, any twin
            return torch.randn(shape, device=dev, generator=g).to(dtype)

        caches = [
            KVCache(batch, seq, config.num_kv_heads, config.head_dim, net_dtype, drawn)
            for _ in range(config.num_layers)
        ]
        return _inference(decoder, tokens, *decoder.rotary(seq, 1, dev), caches)

    return Workload(config.name, model, device, build, (Phase.PREFILL, Phase.DECODE), notes)


def _user_workload(ref: str, device: str) -> Workload:
    module_name, _, attr = ref.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ProfileError(f"cannot load {ref}: {exc}") from None
    made = factory()
    if not (isinstance(made, tuple) and len(made) == 2 and callable(made[1])):
        raise ProfileError(f"{ref} must return (model, build) where build(batch, seq) gives args")
    model, make_args = made
    model = model.to(device).eval()

    def build(net: nn.Module, _phase: Phase, batch: int, seq: int) -> Forward:
        torch.manual_seed(0)
        args = tuple(
            a.to(device) if isinstance(a, torch.Tensor) else a for a in make_args(batch, seq)
        )
        if net is not model:  # the float32 twin: float inputs in float32 too
            args = tuple(
                a.float() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                for a in args
            )
        return _inference(net, *args)

    return Workload(ref, model, device, build, (Phase.PREFILL,))


def load_workload(
    name: str, device: str, dtype: str = "bfloat16", layers: int | None = None
) -> Workload:
    """A built-in config by name (``layers``: its first N layers only), or ``MODULE:CALLABLE``
    (imports and runs that code)."""
    if ":" in name:
        if layers is not None:
            raise ProfileError(f"--layers applies to the built-in models, not {name}")
        return _user_workload(name, device)
    if name not in CONFIGS:
        raise ProfileError(
            f"unknown model {name!r}; use one of {', '.join(CONFIGS)} or MODULE:CALLABLE"
        )
    dtypes = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
    if dtype not in dtypes:
        raise ProfileError(f"--dtype {dtype!r} is not one of {', '.join(dtypes)}")
    config = CONFIGS[name]
    if layers is not None:
        if not 1 <= layers <= config.num_layers:
            raise ProfileError(f"--layers {layers}: {name} has 1 to {config.num_layers} layers")
        config = dataclasses.replace(config, num_layers=layers)
    return _decoder_workload(config, device, dtypes[dtype])
