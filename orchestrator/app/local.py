"""The local door: :class:`orchestrator.app.protocol.Door` over a database, in this process.

Each method calls the use-case function the server's routes call (orchestrator.app.jobs,
.results, .running, .plot, .tokens, .revalidation), with no team filter: whoever holds the database sees every
team's jobs. The database is opened (and its schema created or upgraded) on first use, so a
command that fails its own checks first writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING

from db.states import JobStatus, Objective, TokenScope
from orchestrator.app import tokens as token_cases
from orchestrator.app.jobs import cancel_job, job_detail, list_jobs, submit_job
from orchestrator.app.protocol import DEFAULT_THRESHOLD, BestList, Resumed, RunHere
from orchestrator.app.results import best_configs, bundle_files
from orchestrator.app.running import resume_job
from orchestrator.app.tokens import NewToken, TokenView
from orchestrator.app.views import BundleFile, JobDetail, JobPage, JobView
from search_spaces.registry import get_spec

if TYPE_CHECKING:
    from db import Database
    from orchestrator.app.plot import JobPlot
    from orchestrator.app.revalidation import RevalidationReport
    from orchestrator.run.jobs import JobSpec
    from orchestrator.run.progress import Reporter


class LocalDoor:
    """The use cases on the database that ``open_database()`` gives (called once, on first use)."""

    def __init__(self, open_database: Callable[[], Database]) -> None:
        self._open = open_database
        self._database: Database | None = None

    @property
    def database(self) -> Database:
        if self._database is None:
            self._database = self._open()
        return self._database

    @property
    def where(self) -> str:
        """``in URL`` of the database (no password)."""
        return f"in {self.database.url}"

    def __enter__(self) -> LocalDoor:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        if self._database is not None:
            self._database.close()
            self._database = None

    # ----- jobs
    def submit(self, spec: JobSpec, *, priority: int = 0) -> JobDetail:
        job_id = submit_job(self.database, spec, priority=priority)
        return job_detail(self.database, job_id)

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
        return list_jobs(
            self.database,
            team=team,
            status=status,
            kernel=kernel,
            limit=limit,
            offset=offset,
            before=before,
        )

    def job(self, job_id: int) -> JobDetail:
        return job_detail(self.database, job_id)

    def cancel(self, job_id: int) -> JobView:
        return cancel_job(self.database, job_id)

    def resume(
        self, job_id: int, *, here: RunHere | None = None, reporter: Reporter | None = None
    ) -> Resumed:
        """Run the job here to its end (orchestrator.app.running.resume_job); its summary."""
        here = here or RunHere()
        summary = resume_job(
            self.database,
            job_id,
            ray_address=here.ray_address,
            keep_workers=here.keep_workers,
            reporter=reporter,
            kernel_modules=here.kernel_modules,
        )
        return Resumed(job_detail(self.database, job_id), summary)

    def plot_data(self, job_id: int) -> JobPlot:
        from orchestrator.app.plot import plot_data

        return plot_data(self.database, job_id)

    # ----- shared results
    def best(
        self,
        kernel: str,
        *,
        device_class: str | None = None,
        objective: Objective = Objective.KERNEL,
        problem: str | None = None,
    ) -> BestList:
        spec = get_spec(kernel)
        found = best_configs(
            self.database,
            kernel=kernel,
            device_class=device_class,
            objective=objective,
            problem=problem,
        )
        return BestList(spec.name, spec.version_hash(), Objective(objective), tuple(found))

    def bundle_files(
        self,
        kernel: str,
        *,
        device_classes: Sequence[str] = (),
        objective: Objective = Objective.KERNEL,
        fmt: str = "native",
    ) -> list[BundleFile]:
        return bundle_files(
            self.database, kernel, device_classes=device_classes, objective=objective, fmt=fmt
        )

    def revalidate(
        self,
        kernel: str,
        device_class: str,
        *,
        device: str = "auto",
        threshold: float = DEFAULT_THRESHOLD,
    ) -> RevalidationReport:
        from orchestrator.app.revalidation import revalidate_here

        return revalidate_here(
            self.database, kernel, device_class, device=device, threshold=threshold
        )

    # ----- tokens
    def create_token(
        self,
        team: str,
        scope: TokenScope,
        *,
        expires_days: float | None = None,
        name: str | None = None,
    ) -> NewToken:
        return token_cases.create_token(
            self.database, team, scope, expires_days=expires_days, name=name
        )

    def tokens(self) -> list[TokenView]:
        return token_cases.list_tokens(self.database)

    def revoke_token(self, token_id: int) -> None:
        token_cases.revoke_token(self.database, token_id)
