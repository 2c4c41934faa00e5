"""The one door to tunefleet's use cases: :class:`Door`, met by :class:`orchestrator.app.local.
LocalDoor` (over a database, in this process) and by :class:`orchestrator.app.client.Client`
(a tunefleet server over HTTP). The CLI picks one per command (``--server`` /
``$TUNEFLEET_SERVER`` / ``--db``) and never asks which it holds; the server's routes call the
same use-case functions as the local door.

Where the two differ, it is in what happens, never in what is asked:

* ``resume``: a local door runs the job here, now (on a local Ray or ``RunHere.ray_address``)
  and returns its summary; a server re-queues it for its schedulers (``POST
  /v1/jobs/{id}/resume``) and returns it queued. ``RunHere`` options go with a job run here: a
  server refuses them (InvalidRequest), it runs jobs on its own workers.
* ``revalidate``: re-times stored bests on this machine's device and marks their rows. A local
  door does it. A server refuses (NotRemote): it stores only times its own workers measured, and
  a re-timing posted by a client could not be checked (any team could mark any other team's
  shared best as regressed with numbers of its own making); a server's workers revalidate on
  its side.

Every error is one of ours (``orchestrator.errors``): the same NotFound for a missing job and for
another team's, Conflict for a state that forbids the request, InvalidRequest for bad input.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Protocol

from db.states import JobStatus, Objective, TokenScope
from orchestrator.app.tokens import NewToken, TokenView
from orchestrator.app.views import BestView, BundleFile, JobDetail, JobPage, JobSummaryView, JobView
from orchestrator.run.revalidate import DEFAULT_THRESHOLD

if TYPE_CHECKING:
    from orchestrator.app.plot import JobPlot
    from orchestrator.app.revalidation import RevalidationReport
    from orchestrator.run.jobs import JobSpec
    from orchestrator.run.progress import Reporter


@dataclasses.dataclass(frozen=True)
class RunHere:
    """How a job runs on this machine: the Ray cluster (None: $RAY_ADDRESS, else a local Ray),
    worker actors kept for the next job, and the ``module:attribute`` kernels allowed."""

    ray_address: str | None = None
    keep_workers: bool = False
    kernel_modules: tuple[str, ...] = ()

    @property
    def given(self) -> bool:
        """Whether any option differs from its default."""
        return self != RunHere()


@dataclasses.dataclass(frozen=True)
class Resumed:
    """What ``resume`` did: the job as it is now, and the summary of its run when it ran here
    (None: a server's scheduler runs it; the job is queued)."""

    job: JobDetail
    summary: JobSummaryView | None = None


@dataclasses.dataclass(frozen=True)
class BestList:
    """The best configs of one kernel version for one objective (``kernel_version`` None: a
    server that does not say and stores none)."""

    kernel: str
    kernel_version: str | None
    objective: Objective
    items: tuple[BestView, ...]


class Door(Protocol):
    """tunefleet's use cases, wherever they run (see the module doc). A door is a context
    manager; ``where`` names it in messages (``on URL`` or ``in DATABASE``)."""

    @property
    def where(self) -> str: ...

    def __enter__(self) -> Door: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

    def close(self) -> None: ...

    # ----- jobs
    def submit(self, spec: JobSpec, *, priority: int = 0) -> JobDetail:
        """Queue ``spec`` with ``priority`` (a scheduler runs it); the queued job."""
        ...

    def jobs(
        self,
        *,
        team: str | None = None,
        status: JobStatus | None = None,
        kernel: str | None = None,
        limit: int = 50,
        offset: int = 0,
        before: int | None = None,
    ) -> JobPage:
        """The jobs matching every filter given, newest first (``before``: ids below it)."""
        ...

    def job(self, job_id: int) -> JobDetail:
        """The job with its per-study progress."""
        ...

    def cancel(self, job_id: int) -> JobView:
        """Cancel the job (a running one is asked to stop); Conflict if it already finished."""
        ...

    def resume(
        self, job_id: int, *, here: RunHere | None = None, reporter: Reporter | None = None
    ) -> Resumed:
        """Continue a failed, cancelled or stalled job up to its budget (see the module doc);
        Conflict (or JobStateError) for a done job or one another owner runs."""
        ...

    def plot_data(self, job_id: int) -> JobPlot:
        """The job's studies with their trials, as ``tunefleet plot`` draws them."""
        ...

    # ----- shared results
    def best(
        self,
        kernel: str,
        *,
        device_class: str | None = None,
        objective: Objective = Objective.KERNEL,
        problem: str | None = None,
    ) -> BestList:
        """The stored best configs of ``kernel``'s installed version (every team's)."""
        ...

    def bundle_files(
        self,
        kernel: str,
        *,
        device_classes: Sequence[str] = (),
        objective: Objective = Objective.KERNEL,
        fmt: str = "native",
    ) -> list[BundleFile]:
        """The files ``pull`` writes for ``kernel`` in format ``fmt`` (no classes: every one)."""
        ...

    def revalidate(
        self,
        kernel: str,
        device_class: str,
        *,
        device: str = "auto",
        threshold: float = DEFAULT_THRESHOLD,
    ) -> RevalidationReport:
        """Re-time the stored bests of ``kernel`` on ``device_class`` on this machine's device
        and mark them (a server refuses: see the module doc)."""
        ...

    # ----- tokens (admin)
    def create_token(
        self,
        team: str,
        scope: TokenScope,
        *,
        expires_days: float | None = None,
        name: str | None = None,
    ) -> NewToken:
        """A new token; its secret is in this answer only."""
        ...

    def tokens(self) -> list[TokenView]:
        """Every token, never its secret."""
        ...

    def revoke_token(self, token_id: int) -> None:
        """Revoke a token; NotFound if there is no active token ``token_id``."""
        ...
