"""Record a landscape: every valid config of a kernel's space timed on one device for one problem."""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.output import OutputError, write_atomically
from search_spaces import Config, KernelSpec, Problem
from workers.device import Fingerprint
from workers.landscape import Landscape, LandscapeResult, write_landscape
from workers.measurement import Measurement
from workers.runner import TrialRequest, TrialRunner

Progress = Callable[[int, int, Measurement], None]


def record_landscape(
    spec: KernelSpec,
    kernel: str,
    problem: Problem,
    runner: TrialRunner,
    fingerprint: Fingerprint,
    limit: int | None = None,
    progress: Progress | None = None,
    configs: Sequence[Config] | None = None,
) -> tuple[Landscape, bool]:
    """Run every valid config, or ``configs`` in their order (the first ``limit`` of either, if
    given); (landscape, complete).

    All configs are handed to the runner's compile pool first, so compiling runs ahead of timing.
    On KeyboardInterrupt the landscape of the configs finished so far comes back with
    ``complete`` False, so the caller can still write it.
    """
    chosen = spec.space.enumerate(fingerprint.limits()) if configs is None else list(configs)
    requests = [TrialRequest(kernel, problem, c) for c in chosen[:limit]]
    for request in requests:
        runner.prefetch(request)
    landscape = Landscape(
        kernel=spec.name,
        kernel_version=spec.version_hash(),
        problem=dict(problem),
        device=fingerprint.to_dict(),
    )
    try:
        for i, request in enumerate(requests, 1):
            m = runner.run(request)
            landscape.results.append(LandscapeResult(dict(request.config), m.outcome, m.median_ms))
            if progress is not None:
                progress(i, len(requests), m)
    except KeyboardInterrupt:
        return landscape, False
    return landscape, True


def save_landscape(path: Path, landscape: Landscape) -> Path:
    """Write ``landscape`` to ``path`` whole (a temporary file next to it, then renamed).

    If ``path`` cannot be written, the landscape goes to a new file in the system's temporary
    folder and OutputError names both, so configs timed for minutes are never lost.
    """
    try:
        return write_atomically(path, lambda temp: write_landscape(temp, landscape))
    except OutputError as exc:
        kept = Path(tempfile.mkdtemp(prefix="tunefleet-record-")) / path.name
        write_landscape(kept, landscape)
        raise OutputError(f"{exc}; the results were saved to {kept} instead") from None


@dataclass
class RecordPace:
    """Where a recording's wall time went: start-up until the first result, then per config.

    ``add`` each measurement as it arrives; ``summary`` is one line for the log.
    """

    start: float
    arrivals: list[float] = field(default_factory=list)
    first_launch_s: list[float] = field(default_factory=list)
    check_and_time_s: list[float] = field(default_factory=list)

    def add(self, m: Measurement) -> None:
        self.arrivals.append(time.perf_counter())
        if m.compile_s is not None:
            self.first_launch_s.append(m.compile_s)
        if m.run_s is not None:
            self.check_and_time_s.append(m.run_s)

    def summary(self) -> str:
        if not self.arrivals:
            return "no config finished"
        first = self.arrivals[0] - self.start
        text = f"first result after {first:.1f} s"
        if len(self.arrivals) > 1:
            gaps = [b - a for a, b in zip(self.arrivals, self.arrivals[1:], strict=False)]
            text += (
                f"; then {1e3 * statistics.mean(gaps):.1f} ms per config "
                f"(median {1e3 * statistics.median(gaps):.1f})"
            )
        if self.first_launch_s:
            text += (
                f"; in the trial process, median first launch "
                f"{1e3 * statistics.median(self.first_launch_s):.1f} ms"
            )
        if self.check_and_time_s:
            text += f", check + timing {1e3 * statistics.median(self.check_and_time_s):.1f} ms"
        return text
