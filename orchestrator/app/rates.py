"""What a measured time means in throughput: TFLOP/s, GB/s and the share of the device's roofline."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from search_spaces.spec import KernelSpec
from workers.device_table import find


@dataclass(frozen=True)
class Rates:
    """Throughput of one launch; None where the kernel counts no FLOPs (bytes), the time is
    unknown, or (``roofline_pct``) the device's peaks are not in the device table."""

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
    FLOP/s (bytes/s for kernels that do no math). Never for ``cpu``: it has no table row."""
    if not time_ms:
        return Rates(None, None)
    seconds = time_ms * 1e-3
    flops, nbytes = kernel.flops(dict(problem)), kernel.bytes_moved(dict(problem))
    tflops = flops / seconds / 1e12 if flops else None
    gbs = nbytes / seconds / 1e9 if nbytes else None
    known = find(device_name) if device_name is not None else None
    pct = None
    if known is not None and known.memory_bandwidth_gbs and known.bf16_tflops and nbytes:
        if flops:
            attainable = min(
                known.bf16_tflops * 1e12, flops / nbytes * known.memory_bandwidth_gbs * 1e9
            )
            pct = 100.0 * (flops / seconds) / attainable
        else:
            pct = 100.0 * (nbytes / seconds) / (known.memory_bandwidth_gbs * 1e9)
    return Rates(tflops, gbs, pct)
