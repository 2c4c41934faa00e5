"""``tunefleet tune --from-capture DIR [--widen]``: one job per kernel of a capture.

The capture is indexed first (:func:`search_spaces.capture_refs.register_capture`); each job's
kernel is then the kernel's path-free reference (``captured:<name>@<hash>[+wide]``) and its
problems are every key the app launched. Without ``--widen`` the space is the kernel's own
config list and the default search is exhaustive over it (``grid``, one trial per config); with
``--widen`` the usual defaults apply. Building the jobs reads the capture only; the trial processes
import the app's module, which runs the app's code: tune captures you trust, from your own shell.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.errors import JobSpecError
from orchestrator.run.jobs import JobSpec
from search_spaces.capture_refs import register_capture
from search_spaces.errors import SpecError
from workers.capture_spec import CaptureSpec, capture_specs


@dataclass(frozen=True)
class CaptureJob:
    """A job built from one captured kernel, with the spec it tunes."""

    ref: str
    spec: CaptureSpec
    job: JobSpec

    def pull_command(self, out: str = "bundles") -> str:
        """The command that exports this kernel's tuned configs for the drop-in decorator."""
        return f"tunefleet pull '{self.ref}' --out {out}"


def capture_jobs(
    directory: str | Path, widen: bool, overrides: Mapping[str, Any] | None = None
) -> list[CaptureJob]:
    """The jobs of a capture; ``overrides`` are tune's flags (trials, devices, ...). Raises
    JobSpecError (one line) for a bad capture or an argument that needs an override."""
    try:
        register_capture(directory)
        specs = capture_specs(directory, widen)
    except SpecError as exc:
        raise JobSpecError(str(exc)) from None
    jobs = []
    for ref, spec in specs:
        fields: dict[str, Any] = {"kernel": ref, "problems": spec.problems(), **(overrides or {})}
        if not widen:
            fields.setdefault("sampler", "grid")
            fields.setdefault("trials", len(spec.kernel.configs))
        jobs.append(CaptureJob(ref, spec, JobSpec.from_mapping(fields)))
    return jobs


def run_capture(
    directory: str | Path,
    widen: bool,
    overrides: Mapping[str, Any],
    run_one: Callable[[JobSpec], int],
    ray_address: str | None = None,
) -> list[tuple[CaptureJob, int]]:
    """Build the capture's jobs (all checked before any runs), then run each with ``run_one``
    inside one Ray session; ``(job, job id)`` per kernel. Each kernel's pull command goes to
    stderr."""
    import ray

    from orchestrator.run.dispatch import ensure_ray

    jobs = capture_jobs(directory, widen, overrides)
    started = ensure_ray(ray_address)
    done = []
    try:
        for cj in jobs:
            job_id = run_one(cj.job)
            print(f"{cj.spec.name}: job {job_id}; bundle: {cj.pull_command()}", file=sys.stderr)
            done.append((cj, job_id))
    finally:
        if started:
            ray.shutdown()
    return done
