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
    """fused_moe's ``torch._grouped_mm`` vendor launch (the spec's, as a study times it) writing
    an output of its own, as a callable returning that output ([M, topk, N]; ``gemm=up_silu``:
    [M, topk, N/2]; ``gemm=down_sum``: [M, N]); and one running its grouped GEMM alone on rows
    sorted here once."""
    import torch

    from search_spaces import get_spec
    from search_spaces.kernels.fused_moe import PER_SLOT_GEMMS
    from workers.profiling.models import expert_order

    own = {**inputs, "out": torch.empty_like(inputs["out"])}
    launch = get_spec("fused_moe").make_vendor_launcher(own, "torch._grouped_mm")

    def run() -> Any:
        launch()
        return own["out"]

    x, w, ids = inputs["x"], inputs["w"], inputs["topk_ids"]
    topk = int(ids.shape[1])
    order, offs = expert_order(ids, int(w.shape[0]))
    rows = x[order] if problem["gemm"] in PER_SLOT_GEMMS and topk > 1 else x[order // topk]
    w_t = w.transpose(1, 2)
    return run, lambda: torch._grouped_mm(rows, w_t, offs=offs)
