"""How far a kernel's output is from its reference: the measure the correctness check, the
kernels' tests and the benchmarks share (imports torch when called: trial processes only)."""

from __future__ import annotations

from typing import Any


def max_rel_error(out: Any, ref: Any) -> float:
    """max|out - ref| / max|ref| in float64; NaN or inf anywhere in ``out`` gives inf."""
    import torch

    o = out.detach().to(torch.float64)
    r = ref.detach().to(device=o.device, dtype=torch.float64)
    if not bool(torch.isfinite(o).all()):
        return float("inf")
    scale = float(r.abs().max()) or 1.0
    return float((o - r).abs().max()) / scale
