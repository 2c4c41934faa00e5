"""The Amdahl bound of a swap: how much faster a forward can get from the kernels swapped in.

For one (phase, batch, mode): each problem the swap ran on a tuned kernel has its baseline GPU
time per forward ``w`` (from the eager trace's hot shapes) and, where its bundle entry holds both
times of the final re-timing, a kernel speed-up ``s = vendor_ms / triton_ms``. Over a baseline
latency ``T``, the measured speed-ups allow at most ``saved = sum(w * (1 - 1/s))``, so the best
end-to-end change is ``-saved / T``. Problems without both times count as ``s = 1`` (no gain
claimed), as do those the bundle decided by a nearest entry (no entry of their own);
``measured_share`` says what part of the swapped time the bound covers.

The *ceiling* is the same sum at the device's roofline: with the problem's floor time ``f``
(:func:`workers.device_table.roofline_floor_s`, from the kernel spec's FLOPs, bytes and math rate
and the bundle's device class) and ``s = vendor_ms / f``, the change the swapped problems would
allow if each ran at the vendor's peak numbers: what no kernel can beat. Problems without a vendor
time or a floor count as ``s = 1``; it is None where the device class has no peaks in the table
(``cpu``).
Where each swapped problem with a vendor time has a floor that neither of its times beats
(``vendor_ms, triton_ms >= f``), the ceiling claims at least the bound's gain; the gap between the
two is what tuning those problems could still pay.

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
from search_spaces.registry import get_spec
from workers.device_table import find, roofline_floor_s


@dataclass(frozen=True)
class Bound:
    #: Swapped problems' baseline GPU time over the forward's latency.
    swapped_share: float
    #: Part of the swapped time whose kernel speed-up the bundle measured.
    measured_share: float
    #: The best end-to-end change the measured speed-ups allow (negative: faster).
    change: float | None
    #: The end-to-end change the swapped problems allow at the device's roofline (see module);
    #: None where no swapped problem has both a vendor time and a floor.
    ceiling: float | None

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


def floor_ms(bundle: Bundle, problem: dict[str, Any]) -> float | None:
    """The roofline floor of ``problem`` in ms for the bundle's kernel on its device class, at
    the peak of the kernel's math rate; None where the table has no peaks for that class
    (``cpu``, a replay, an unknown class) or none at that rate (FP8 on an A100)."""
    known = find(bundle.device_class)
    if known is None:
        return None
    spec = get_spec(bundle.kernel)
    floor_s = roofline_floor_s(
        spec.flops(problem), spec.bytes_moved(problem), known, spec.math_rate
    )
    return None if floor_s is None else floor_s * 1e3


def amdahl(
    shapes: Iterable[tuple[str, dict[str, Any], float]],
    swapped: Callable[[str, dict[str, Any]], bool],
    entry_of: Callable[[str, dict[str, Any]], BundleEntry | None],
    floor_of: Callable[[str, dict[str, Any]], float | None],
    latency_us: float,
) -> Bound | None:
    """The bound and ceiling over ``shapes`` ((kernel, problem, GPU µs per forward)), of which
    ``swapped`` ran tuned kernels, from each problem's exact bundle entry (``entry_of``) and
    roofline floor in ms (``floor_of``); None without a latency or a swapped shape."""
    total = measured = saved = roofed = roof_saved = 0.0
    for kernel, problem, weight in shapes:
        if not swapped(kernel, problem):
            continue
        total += weight
        entry = entry_of(kernel, problem)
        if entry is None or not entry.vendor_ms:
            continue
        if entry.triton_ms:
            measured += weight
            saved += weight * (1.0 - entry.triton_ms / entry.vendor_ms)
        floor = floor_of(kernel, problem)
        if floor:
            roofed += weight
            roof_saved += weight * (1.0 - floor / entry.vendor_ms)
    if latency_us <= 0 or total <= 0:
        return None
    return Bound(
        swapped_share=total / latency_us,
        measured_share=measured / total,
        change=-saved / latency_us if measured else None,
        ceiling=-roof_saved / latency_us if roofed else None,
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
