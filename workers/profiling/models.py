"""Workloads to profile: a small Llama-style decoder with built-in configs, or a user's callable.

The decoder is our own torch module (RMSNorm, rotary embeddings, GQA attention through
``scaled_dot_product_attention``, SwiGLU MLP, a KV cache for decode) with random weights drawn from
the config: no download, no ``transformers``. Prefill logits are computed for the last position only
(as serving engines do). Decode runs one token per sequence at position ``seq`` over a KV cache of
``seq`` tokens whose layout is paged (``[batch * pages, PAGE_SIZE, kv_heads, head_dim]``, sequence b
owning pages ``b * pages ...``), so tuned paged attention reads the same cache.

``MODULE:CALLABLE`` imports and runs user code: the callable takes no arguments and returns
``(model, build)`` where ``build(batch, seq)`` returns the positional arguments of one forward.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from workers.profiling.errors import ProfileError
from workers.profiling.trace import Phase

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

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


#: ``tiny`` is for CPU tests (head_dim 64, as the attention kernels need); the Llama entries follow
#: the published configs of meta-llama/Llama-3.2-1B and Meta-Llama-3-8B.
CONFIGS: dict[str, DecoderConfig] = {
    c.name: c
    for c in (
        DecoderConfig("tiny", 256, 2, 4, 2, 512, 512, 10000.0),
        DecoderConfig("llama-3.2-1b", 2048, 16, 32, 8, 8192, 128256),
        DecoderConfig("llama-3-8b", 4096, 32, 32, 8, 14336, 128256),
    )
}


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
        context [B, S, H, D] through SDPA."""
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2),
            k.transpose(1, 2),
            v.transpose(1, 2),
            is_causal=cache is None,
            enable_gqa=True,
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
        self, batch: int, seq: int, kv_heads: int, head_dim: int, device: str, dtype: torch.dtype
    ) -> None:
        self.batch, self.seq = batch, seq
        self.pages = -(-(seq + 1) // PAGE_SIZE)
        shape = (batch * self.pages, PAGE_SIZE, kv_heads, head_dim)
        self.k = torch.randn(shape, device=device, dtype=dtype)
        self.v = torch.randn(shape, device=device, dtype=dtype)

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


class Layer(nn.Module):
    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.input_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.attn = Attention(config)
        self.post_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MLP(config)

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


@dataclass
class Workload:
    """A model on a device and a way to make one forward over static inputs for (phase, batch,
    seq); ``forward_for`` returns a zero-argument callable (what eager runs and a graph captures)."""

    name: str
    model: nn.Module
    device: str
    build: Callable[[Phase, int, int], Forward]
    phases: tuple[Phase, ...]

    def forward_for(self, phase: Phase, batch: int, seq: int) -> Forward:
        if phase not in self.phases:
            raise ProfileError(
                f"model {self.name} supports --phase {'|'.join(p.value for p in self.phases)}, "
                f"not {phase.value}"
            )
        return self.build(phase, batch, seq)


def _decoder_workload(config: DecoderConfig, device: str, dtype: torch.dtype) -> Workload:
    torch.manual_seed(0)
    with torch.device(device):  # drawn on the device: a CPU init of 8B weights takes minutes
        model = Decoder(config)
        for module in model.modules():
            if isinstance(module, nn.Linear | nn.Embedding):
                nn.init.normal_(module.weight, std=1.0 / math.sqrt(config.hidden_size))
    model = model.to(dtype=dtype).eval()

    def build(phase: Phase, batch: int, seq: int) -> Forward:
        dev = torch.device(device)
        if phase is Phase.PREFILL:
            tokens = torch.randint(0, config.vocab_size, (batch, seq), device=dev)
            cos, sin = model.rotary(0, seq, dev)

            def prefill() -> Any:
                with torch.inference_mode():
                    return model(tokens, cos, sin)

            return prefill
        tokens = torch.randint(0, config.vocab_size, (batch, 1), device=dev)
        cos, sin = model.rotary(seq, 1, dev)
        caches = [
            KVCache(batch, seq, config.num_kv_heads, config.head_dim, device, dtype)
            for _ in range(config.num_layers)
        ]

        def decode() -> Any:
            with torch.inference_mode():
                return model(tokens, cos, sin, caches)

        return decode

    return Workload(config.name, model, device, build, (Phase.PREFILL, Phase.DECODE))


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

    def build(_phase: Phase, batch: int, seq: int) -> Forward:
        args = tuple(
            a.to(device) if isinstance(a, torch.Tensor) else a for a in make_args(batch, seq)
        )

        def forward() -> Any:
            with torch.inference_mode():
                return model(*args)

        return forward

    return Workload(ref, model, device, build, (Phase.PREFILL,))


def load_workload(name: str, device: str, dtype: str = "bfloat16") -> Workload:
    """A built-in config by name, or ``MODULE:CALLABLE`` (imports and runs that code)."""
    if ":" in name:
        return _user_workload(name, device)
    if name not in CONFIGS:
        raise ProfileError(
            f"unknown model {name!r}; use one of {', '.join(CONFIGS)} or MODULE:CALLABLE"
        )
    dtypes = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
    if dtype not in dtypes:
        raise ProfileError(f"--dtype {dtype!r} is not one of {', '.join(dtypes)}")
    return _decoder_workload(CONFIGS[name], device, dtypes[dtype])
