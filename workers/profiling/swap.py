"""Tuned tunefleet kernels swapped into a model in place of torch's ops, behind one switch.

:func:`install` wraps, in place, every ``nn.Linear`` (matmul bundle: lookup, then the spec's
launcher, on a K x N copy of the weight), every ``RMSNorm`` of workers.profiling.models (rmsnorm
bundle, the spec's launcher; the spec's eps is 1e-6 where Llama's is 1e-5) and every ``Attention``
(flash_attention bundle for prefill, paged_attention for decode over the model's paged cache).
``Swap.on`` chooses per call, so one model and one set of inputs serve the baseline and the tuned
run, interleaved. The attention kernels are launched here with the spec's argument recipe rather
than through ``make_launcher``, which reads sequence lengths back from the device (a sync that a
CUDA graph capture refuses); the lengths are known on the host here.
"""

from __future__ import annotations

import math
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from search_spaces.bundle import Bundle, BundleError, load_bundle
from search_spaces.registry import get_spec
from search_spaces.spec import split_launch_options
from workers.profiling.errors import ProfileError
from workers.profiling.models import PAGE_SIZE, Attention, KVCache, RMSNorm

SWAPPABLE = ("matmul", "rmsnorm", "flash_attention", "paged_attention")
DTYPE_NAMES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}


def load_bundles(folder: str | Path, device_name: str) -> dict[str, Bundle]:
    """The bundles in ``folder`` whose device class is part of ``device_name`` (``NVIDIA H200`` for
    a card named so), first file by name per kernel; ProfileError if none fits."""
    path = Path(folder)
    if not path.is_dir():
        raise ProfileError(f"--with-bundle {path} is not a folder; write one with `tunefleet pull`")
    found: dict[str, Bundle] = {}
    for file in sorted(path.glob("*.json")):
        try:
            bundle = load_bundle(file)
        except BundleError:
            continue
        theirs = bundle.device_class.lower()
        if bundle.kernel in SWAPPABLE and (theirs in device_name.lower() or not theirs):
            found.setdefault(bundle.kernel, bundle)
    if not found:
        raise ProfileError(
            f"no {'/'.join(SWAPPABLE)} bundle for {device_name} in {path}; "
            "use `tunefleet pull KERNEL --out DIR`"
        )
    return found


@dataclass
class Swap:
    """The switch and what it swapped: ``on`` sends calls to tuned kernels; ``used`` counts lookups
    by kernel and how the config was found (exact / nearest / default)."""

    bundles: dict[str, Bundle]
    on: bool = False
    used: dict[str, dict[str, int]] = field(default_factory=dict)
    _plans: dict[tuple[Any, ...], Any] = field(default_factory=dict)

    def config(self, kernel: str, problem: dict[str, Any]) -> dict[str, Any]:
        how, config = self.bundles[kernel].resolve(problem)
        counts = self.used.setdefault(kernel, {})
        counts[how] = counts.get(how, 0) + 1
        return config


def _linear(swap: Swap, module: nn.Linear) -> None:
    original = module.forward
    weight_kn = module.weight.detach().t().contiguous()
    spec = get_spec("matmul")

    def forward(self: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        if not swap.on:
            return original(x)
        k = x.shape[-1]
        a = x.reshape(-1, k)
        n = weight_kn.shape[1]
        out = torch.empty(a.shape[0], n, dtype=x.dtype, device=x.device)
        problem = {"M": a.shape[0], "N": n, "K": k, "dtype": DTYPE_NAMES[x.dtype]}
        spec.make_launcher({"a": a, "b": weight_kn, "out": out}, swap.config("matmul", problem))()
        if self.bias is not None:
            out += self.bias
        return out.view(*x.shape[:-1], n)

    module.forward = types.MethodType(forward, module)  # type: ignore[method-assign]


def _rmsnorm(swap: Swap, module: RMSNorm) -> None:
    original = module.forward
    spec = get_spec("rmsnorm")

    def forward(self: RMSNorm, x: torch.Tensor) -> torch.Tensor:
        if not swap.on:
            return original(x)
        n = x.shape[-1]
        rows = x.reshape(-1, n)
        out = torch.empty_like(rows)
        problem = {"M": rows.shape[0], "N": n, "dtype": DTYPE_NAMES[x.dtype]}
        inputs = {"x": rows, "weight": self.weight, "out": out}
        spec.make_launcher(inputs, swap.config("rmsnorm", problem))()
        return out.view(x.shape)

    module.forward = types.MethodType(forward, module)  # type: ignore[method-assign]


def _flash(swap: Swap, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    b, s, qh, d = q.shape
    kvh = k.shape[2]
    problem = {
        "batch": b, "max_seqlen": s, "pattern": "uniform", "q_heads": qh, "kv_heads": kvh,
        "head_dim": d, "causal": True, "dtype": DTYPE_NAMES[q.dtype],
    }  # fmt: skip
    config = swap.config("flash_attention", problem)
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


def _paged(swap: Swap, q: torch.Tensor, cache: KVCache) -> torch.Tensor:
    from search_spaces.kernels._common import pop_pdl
    from search_spaces.kernels._paged_attention_kernels import (
        paged_attention_kernel,
        paged_attention_reduce_kernel,
    )
    from search_spaces.kernels.paged_attention import MIN_GROUP_ROWS

    b, _, qh, d = q.shape
    kvh, context = cache.k.shape[2], cache.seq + 1
    problem = {
        "batch": b, "context_len": context, "pattern": "uniform", "q_heads": qh,
        "kv_heads": kvh, "head_dim": d, "page_size": PAGE_SIZE, "dtype": DTYPE_NAMES[q.dtype],
    }  # fmt: skip
    config = swap.config("paged_attention", problem)
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
        if not swap.on:
            return original(q, k, v, cache)
        if cache is None and "flash_attention" in swap.bundles:
            return _flash(swap, q, k, v)
        if cache is not None and "paged_attention" in swap.bundles:
            return _paged(swap, q, cache)
        return original(q, k, v, cache)

    module.attend = types.MethodType(attend, module)  # type: ignore[method-assign]


def install(model: nn.Module, bundles: dict[str, Bundle]) -> Swap:
    """Wrap the model's linear, RMSNorm and attention modules (those with a bundle); off at first."""
    swap = Swap(bundles)
    for module in model.modules():
        if isinstance(module, nn.Linear) and "matmul" in bundles:
            _linear(swap, module)
        elif isinstance(module, RMSNorm) and "rmsnorm" in bundles:
            _rmsnorm(swap, module)
        elif isinstance(module, Attention):
            _attention(swap, module)
    return swap
