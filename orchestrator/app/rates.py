"""What a measured time means in throughput: TFLOP/s, GB/s and the share of the device's roofline."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from search_spaces.spec import KernelSpec
from workers.device_table import find, roofline_floor_s


@dataclass(frozen=True)
class Rates:
    """Throughput of one launch; None where the kernel counts no FLOPs (bytes), the time is
    unknown, or (``roofline_pct``) the device's peaks (at the kernel's math rate) are not in the
    device table."""

    tflops: float | None
    gbs: float | None
    roofline_pct: float | None = None


def rates(
    kernel: KernelSpec,
    problem: Mapping[str, Any],
    time_ms: float | None,
    device_name: str | None = None,
) -> Rates:
    """The rates of ``kernel`` on ``problem`` taking ``time_ms``; with ``device_name`` (a device
    class's name) also % of its roofline: the attainable rate at this arithmetic intensity, in
    FLOP/s at the peak of the kernel's ``math_rate`` (bf16 or FP8; bytes/s for kernels that do no
    math), i.e. the roofline floor (:func:`~workers.device_table.roofline_floor_s`) over
    ``time_ms``. Never for ``cpu`` (it has no peaks in the table), nor for an FP8 kernel on a
    class without an FP8 peak."""
    if not time_ms:
        return Rates(None, None)
    seconds = time_ms * 1e-3
    flops, nbytes = kernel.flops(dict(problem)), kernel.bytes_moved(dict(problem))
    tflops = flops / seconds / 1e12 if flops else None
    gbs = nbytes / seconds / 1e9 if nbytes else None
    known = find(device_name) if device_name is not None else None
    floor_s = roofline_floor_s(flops, nbytes, known, kernel.math_rate)
    pct = None if floor_s is None else 100.0 * floor_s / seconds
    return Rates(tflops, gbs, pct)
