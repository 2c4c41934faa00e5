"""The swap's same-function check: a model's logits against its float32 twin's (pure Python rule).

``profile --with-bundle`` runs each point's forward three ways on the same inputs: the baseline,
the baseline with tuned kernels swapped in, and the float32 twin (the same weights cast to
float32, workers.profiling.models), routed as the forward it is compared with was (MoE layers:
``Workload.pinned``). Each error is the max relative error of the logits against the twin's:
``max |out - ref| / max |ref|``. The swap is refused at a point when

    swapped_error > ratio * baseline_error + floor

(defaults :data:`MAX_ERROR_RATIO` 2 and :data:`ERROR_FLOOR` 1e-3): a swapped model may round
differently from the baseline, not be a different function. The floor keeps a float32 baseline
(error near 0) from refusing any rounding at all.
"""

from __future__ import annotations

import math
from typing import Any

MAX_ERROR_RATIO = 2.0
ERROR_FLOOR = 1e-3


#: Elements per step of :func:`max_rel_error` (long-prompt logits hold billions of them).
ERROR_CHUNK = 1 << 24


def max_rel_error(out: Any, ref: Any) -> float:
    """``max |out - ref| / max |ref|`` of two tensors of one shape (inf if ``out`` is not
    finite), in float64 over chunks of :data:`ERROR_CHUNK` elements."""
    o, r = out.detach().reshape(-1), ref.detach().reshape(-1)
    diff = scale = 0.0
    for start in range(0, o.numel(), ERROR_CHUNK):
        oc, rc = o[start : start + ERROR_CHUNK].double(), r[start : start + ERROR_CHUNK].double()
        if not bool(oc.isfinite().all()):
            return math.inf
        diff = max(diff, float((oc - rc).abs().max()))
        scale = max(scale, float(rc.abs().max()))
    return diff / max(scale, 1e-30)


def refusal(
    baseline_error: float,
    swapped_error: float,
    ratio: float = MAX_ERROR_RATIO,
    floor: float = ERROR_FLOOR,
) -> str | None:
    """Why the swap is refused under the module's rule, or None where it passes."""
    limit = ratio * baseline_error + floor
    if swapped_error <= limit:
        return None
    return (
        f"swapped error vs float32 {swapped_error:.3g} exceeds {ratio:g} x the baseline's "
        f"{baseline_error:.3g} + {floor:g} = {limit:.3g}"
    )
