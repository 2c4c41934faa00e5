"""Whether a study's vendor time is the model's: the vendor path a study timed against the op the
model itself runs for the same problem.

A study decides ``triton`` or ``vendor`` against its spec's vendor path, timed on the study's own
inputs and layout. The model may run something else for that problem (paged attention's study
gathers the pages, the model attends over contiguous rows; SDPA on the model's transposed views
may pick another kernel than on packed buffers), and then the decision, and the Amdahl bound built
on the study's speed-up, need not hold in the model. For each hot shape of the baseline's eager
trace whose bundle entry (exact) holds a vendor time, :func:`vendor_vs_model` compares the model's
GPU time per call with that vendor time; a ratio outside ``1 +- tolerance`` is flagged.

The model's time is the trace's kernel time of the ops mapped to the problem, per call (for an
MoE block, the block's time split over its two GEMM problems by their vendor times where both
entries hold one, workers.profiling.emit.measured_split, so both halves show the block's ratio;
else by FLOPs as emitted: an estimate). ``profile`` compares on GPU traces only: a CPU trace holds the ops' host times
under the profiler, several times what the same ops take untraced.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from search_spaces.bundle import BundleEntry

#: A model time this far from the study's vendor time (relative) is flagged.
TOLERANCE = 0.25


@dataclass(frozen=True)
class VendorVsModel:
    kernel: str
    problem: dict[str, Any]
    #: The study's vendor path (where the entry names it) and its time per call (the final
    #: re-timing's).
    vendor: str | None
    study_ms: float
    #: The model's own op for the problem: its GPU time per call in the baseline's eager trace.
    model_ms: float
    #: model_ms / study_ms outside 1 +- TOLERANCE.
    differs: bool


def vendor_vs_model(
    shapes: Iterable[tuple[str, dict[str, Any], float, float]],
    entry_of: Callable[[str, dict[str, Any]], BundleEntry | None],
    tolerance: float = TOLERANCE,
) -> list[VendorVsModel]:
    """Over ``shapes`` ((kernel, problem, GPU µs per forward, calls per forward) of the baseline),
    one comparison per shape whose exact entry (``entry_of``) holds a vendor time."""
    out = []
    for kernel, problem, weight_us, calls in shapes:
        entry = entry_of(kernel, problem)
        if entry is None or not entry.vendor_ms or calls <= 0 or weight_us <= 0:
            continue
        model_ms = weight_us / calls / 1e3
        differs = abs(model_ms / entry.vendor_ms - 1.0) > tolerance
        out.append(VendorVsModel(kernel, problem, entry.vendor, entry.vendor_ms, model_ms, differs))
    return out


def describe(item: Mapping[str, Any]) -> str:
    """One line for a comparison as a report holds it (a :class:`VendorVsModel` as a dict): the
    kernel and problem, both times per call and their ratio."""
    shape = ",".join(f"{k}={v}" for k, v in item["problem"].items())
    return (
        f"{item['kernel']} {shape}: {item['vendor'] or 'vendor'} {item['study_ms']:.4g} ms in its "
        f"study, the model's op {item['model_ms']:.4g} ms "
        f"({item['model_ms'] / item['study_ms']:.2f}x)"
    )
