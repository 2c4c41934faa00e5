"""The vendor paths the kernel benchmarks time the tuned kernels against (torch only, imported
by the scripts in this folder): SDPA with one chosen backend on flash_attention's and
paged_attention's inputs, and torch._grouped_mm on fused_moe's routing."""

from __future__ import annotations

from typing import Any

from _sweep import on_gpu

#: SDPA backends tried on every attention problem (each may refuse a problem; MATH off the GPU).
BACKENDS = ("CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION")


def packed_sdpa(inputs: dict[str, Any], problem: dict[str, Any], backend: str) -> Any:
    """A callable running SDPA with ``backend`` on flash_attention's packed uniform-length q, k, v
    viewed as [batch, heads, seq, head_dim] (no copy; GQA through ``enable_gqa``); it returns
    [batch, q_heads, seq, head_dim]."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    b, s = int(problem["batch"]), int(problem["max_seqlen"])
    hq, hkv, d = int(problem["q_heads"]), int(problem["kv_heads"]), int(problem["head_dim"])
    q = inputs["q"].view(b, s, hq, d).transpose(1, 2)
    k = inputs["k"].view(b, s, hkv, d).transpose(1, 2)
    v = inputs["v"].view(b, s, hkv, d).transpose(1, 2)
    chosen = getattr(SDPBackend, backend) if on_gpu() else SDPBackend.MATH

    def run() -> Any:
        with sdpa_kernel([chosen]):
            return F.scaled_dot_product_attention(
                q, k, v, is_causal=bool(problem["causal"]), enable_gqa=hq != hkv
            )

    return run


def contiguous_sdpa(inputs: dict[str, Any], problem: dict[str, Any], backend: str) -> Any:
    """SDPA with ``backend`` over the same context gathered into contiguous K and V."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, kc, vc, tables = inputs["q"], inputs["k_cache"], inputs["v_cache"], inputs["block_tables"]
    b, hq, d = q.shape
    page, hkv = kc.shape[1], kc.shape[2]
    n = int(problem["context_len"])
    idx = tables[:, : -(-n // page)].long()
    k = kc[idx].reshape(b, -1, hkv, d)[:, :n].transpose(1, 2).contiguous()
    v = vc[idx].reshape(b, -1, hkv, d)[:, :n].transpose(1, 2).contiguous()
    q4 = q.unsqueeze(2)
    chosen = getattr(SDPBackend, backend) if on_gpu() else SDPBackend.MATH

    def run() -> Any:
        with sdpa_kernel([chosen]):
            return F.scaled_dot_product_attention(q4, k, v, enable_gqa=hq != hkv)

    return run


def grouped_mm_path(inputs: dict[str, Any], problem: dict[str, Any]) -> tuple[Any, Any]:
    """The torch path on the same routing (see the module docstring): a callable giving
    [M, topk, N] (``gemm=up_silu``: SiLU(gate) * up as torch ops after the grouped GEMM, as the
    model's path, [M, topk, N/2]; ``gemm=down_sum``: then summed over topk, [M, N]), and one
    running its grouped GEMM alone on rows sorted here."""
    import torch
    import torch.nn.functional as F

    from search_spaces.kernels.fused_moe import GATED, PER_SLOT_GEMMS, SUMMED, out_columns

    x, w, ids, weights = inputs["x"], inputs["w"], inputs["topk_ids"], inputs["topk_weights"]
    m, topk = ids.shape
    e, n = int(w.shape[0]), int(w.shape[1])
    per_slot = problem["gemm"] in PER_SLOT_GEMMS and topk > 1
    gated = problem["gemm"] == GATED
    cols = out_columns(n, gated)
    out = torch.empty(m * topk, cols, dtype=x.dtype, device=x.device)
    w_t = w.transpose(1, 2)

    ones = torch.ones(m * topk, dtype=torch.int32, device=x.device)

    def route() -> tuple[Any, Any, Any]:
        flat = ids.flatten()
        order = flat.argsort(stable=True)
        counts = torch.zeros(e, dtype=torch.int32, device=x.device).scatter_add_(0, flat, ones)
        a = x[order] if per_slot else x[order // topk]
        return order, a, counts.cumsum(0).to(torch.int32)

    def run() -> Any:
        order, a, offs = route()
        y = torch._grouped_mm(a, w_t, offs=offs)
        if gated:
            y = F.silu(y[:, :cols]) * y[:, cols:]
        y = y * weights.flatten()[order, None].to(y.dtype)
        out.index_copy_(0, order, y)
        slots = out.view(m, topk, cols)
        return slots.sum(dim=1) if problem["gemm"] == SUMMED else slots

    _, a_sorted, offs_sorted = route()
    return run, lambda: torch._grouped_mm(a_sorted, w_t, offs=offs_sorted)
