"""Record a landscape: every valid config of a kernel's space timed on one device for one problem."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from search_spaces import Config, KernelSpec, Problem
from workers.device import Fingerprint
from workers.landscape import Landscape, LandscapeResult
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
