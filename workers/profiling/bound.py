"""The Amdahl bound of a swap: how much faster a forward can get from the kernels swapped in.

For one (phase, batch, mode): each problem the swap ran on a tuned kernel has its baseline GPU
time per forward ``w`` (from the eager trace's hot shapes) and, where its bundle entry holds both
times of the final re-timing, a kernel speed-up ``s = vendor_ms / triton_ms``. Over a baseline
latency ``T``, the measured speed-ups allow at most ``saved = sum(w * (1 - 1/s))``, so the best
end-to-end change is ``-saved / T``. Problems without both times count as ``s = 1`` (no gain
claimed), as do those the bundle decided by a nearest entry (no entry of their own);
``measured_share`` says what part of the swapped time the bound covers.

The bound uses the studies' kernel ratios; :func:`in_model` gives the same kind of figure from the
model itself: the change in the eager traces' GPU kernel time per forward (all-swapped minus
baseline) over the latency, the end-to-end change the kernels' in-model time allows if nothing
else changed. A bound that claims more gain than the in-model figure says the kernels ran slower in
the model than in their studies.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

from search_spaces.bundle import Bundle, BundleEntry


@dataclass(frozen=True)
class Bound:
    #: Swapped problems' baseline GPU time over the forward's latency.
    swapped_share: float
    #: Part of the swapped time whose kernel speed-up the bundle measured.
    measured_share: float
    #: The best end-to-end change the measured speed-ups allow (negative: faster).
    change: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def exact_entry(
    bundle: Bundle, fields: tuple[str, ...], problem: dict[str, Any]
) -> BundleEntry | None:
    """The bundle entry for exactly ``problem`` (compared on ``fields``), or None."""
    want = tuple(problem.get(f) for f in fields)
    return next(
        (e for e in bundle.entries if tuple(e.problem.get(f) for f in fields) == want), None
    )


def speedup(bundle: Bundle, fields: tuple[str, ...], problem: dict[str, Any]) -> float | None:
    """vendor_ms / triton_ms of the bundle entry for exactly ``problem`` (on ``fields``), if both
    were measured."""
    entry = exact_entry(bundle, fields, problem)
    if entry is not None and entry.triton_ms and entry.vendor_ms:
        return entry.vendor_ms / entry.triton_ms
    return None


def amdahl(
    shapes: Iterable[tuple[str, dict[str, Any], float]],
    swapped: Callable[[str, dict[str, Any]], bool],
    speedup_of: Callable[[str, dict[str, Any]], float | None],
    latency_us: float,
) -> Bound | None:
    """The bound over ``shapes`` ((kernel, problem, GPU µs per forward)), of which ``swapped``
    ran tuned kernels; None without a latency or a swapped shape."""
    total = measured = saved = 0.0
    for kernel, problem, weight in shapes:
        if not swapped(kernel, problem):
            continue
        total += weight
        s = speedup_of(kernel, problem)
        if s is not None:
            measured += weight
            saved += weight * (1.0 - 1.0 / s)
    if latency_us <= 0 or total <= 0:
        return None
    return Bound(
        swapped_share=total / latency_us,
        measured_share=measured / total,
        change=-saved / latency_us if measured else None,
    )


@dataclass(frozen=True)
class InModel:
    #: GPU kernel time per forward of the baseline and the all-swapped eager traces.
    base_kernel_ms: float
    swapped_kernel_ms: float
    #: (swapped - base) / latency: the end-to-end change that GPU time allows (negative: faster).
    change: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def in_model(
    base_kernel_us: float | None, swapped_kernel_us: float | None, latency_us: float
) -> InModel | None:
    """The in-model figure (see module) from the two traces' GPU kernel µs per forward; None
    without either time or any GPU kernel in it (no trace; a CPU trace), or without a latency."""
    if not base_kernel_us or not swapped_kernel_us or latency_us <= 0:
        return None
    return InModel(
        base_kernel_ms=base_kernel_us / 1e3,
        swapped_kernel_ms=swapped_kernel_us / 1e3,
        change=(swapped_kernel_us - base_kernel_us) / latency_us,
    )
