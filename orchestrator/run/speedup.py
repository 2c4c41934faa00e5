"""The one speedup computation: a reference's time over the winner's.

Every speedup tunefleet shows goes through :func:`speedup` (the end-of-job summary, ``job``,
``best``, the API and the page), with both times from the one paired re-timing that decided the
key (the default config's, the vendor path's or the median config's time as the reference; the
winner's time below it), so the CLI and the page print the same numbers for the same key.
"""

from __future__ import annotations


def speedup(reference_ms: float | None, time_ms: float | None) -> float | None:
    """``reference_ms / time_ms``; None when either time is missing or not positive (nothing
    measured, or a failed re-timing: no speedup rather than a made-up one)."""
    if reference_ms is None or time_ms is None or reference_ms <= 0 or time_ms <= 0:
        return None
    return reference_ms / time_ms
