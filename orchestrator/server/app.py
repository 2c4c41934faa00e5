"""The HTTP API of tunefleet's team service: JSON over FastAPI, every use case from
the application layer (:mod:`orchestrator.app`).

Routes (all but ``/healthz`` need a bearer token, see :mod:`orchestrator.server.auth`):

* jobs: ``POST /v1/jobs`` (submit), ``GET /v1/jobs`` (the token's team's, paged),
  ``GET /v1/jobs/{id}``, ``GET /v1/jobs/{id}/studies/{sid}/trials`` (paged, from
  :mod:`orchestrator.server.views_api`),
  ``GET /v1/jobs/{id}/events`` (server-sent progress), ``GET /v1/jobs/{id}/plot`` (the trials
  ``tunefleet plot`` draws), ``POST /v1/jobs/{id}/cancel``, ``POST /v1/jobs/{id}/resume``
  (back to the queue);
* shared results: ``GET /v1/kernels``, ``GET /v1/kernels/{name}/space``, ``GET /v1/device-classes``,
  ``GET /v1/best``, ``GET /v1/bundles/{kernel}`` (exactly the file ``tunefleet pull`` writes);
* tokens (admin): ``POST /v1/tokens``, ``GET /v1/tokens``, ``POST /v1/tokens/{id}/revoke``;
* ``GET /healthz`` (no auth), ``GET /metrics`` (Prometheus text).

A team sees, cancels and resumes only its own jobs (an admin token: every team's); best configs and
bundles are shared by all teams. Submits, cancels, resumes and token changes are audited. Every
route calls the application layer's use cases (:mod:`orchestrator.app`), the same functions the
CLI's local door calls. The web page (issue 16)
mounts on this app under ``/`` with ``templates/`` and ``static/`` beside this module.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
from collections.abc import AsyncIterator, Callable, Collection, Hashable, Sequence
from typing import Annotated, Any

from fastapi import FastAPI, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt
from starlette.responses import Response, StreamingResponse

from db import Database, JobStatus, Objective, TokenScope, repository
from orchestrator.app import kernels as kernel_views
from orchestrator.app import plot, tokens
from orchestrator.app.jobs import (
    cancel_job,
    job_detail,
    list_jobs,
    no_job,
    requeue_job,
    submit_job,
)
from orchestrator.app.results import best_configs, build_bundle
from orchestrator.app.views import BundleFile
from orchestrator.errors import PermissionDenied
from orchestrator.export.bundle import BundleFormat
from orchestrator.run.jobs import JobSpec, SourceKind
from orchestrator.server import docs as api_docs
from orchestrator.server import names, pages
from orchestrator.server.auth import (
    AdminPrincipal,
    Authenticator,
    Principal,
    ReadPrincipal,
    SubmitPrincipal,
    audit,
)
from orchestrator.server.cache import BestCache, Recent
from orchestrator.server.errors import ApiError, install, status_of
from orchestrator.server.fields import Text
from orchestrator.server.guards import BodyLimit, PathGuard
from orchestrator.server.metrics import Metrics
from orchestrator.server.quotas import TeamCaps
from orchestrator.server.refusals import RefusalAudit
from orchestrator.study import samplers
from search_spaces.problem import problem_key
from search_spaces.registry import available, get_spec
from search_spaces.spec import KernelSpec

log = logging.getLogger("tunefleet.server")

API_VERSION = "1"
TERMINAL = frozenset({JobStatus.DONE, JobStatus.FAILED, JobStatus.CANCELLED})
MAX_PAGE = 500
EVENT_KEEPALIVE_S = 15.0
#: How long one job's detail is reused for the clients polling it (every server reads the database).
PROGRESS_TTL_S = 0.5
#: The oldest cached value served while a background refresh runs.
STALE_S = 5.0
_SAFE_FILENAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._,=+-]{0,200}")

ProblemValue = StrictInt | StrictFloat | Text | StrictBool
ProblemMapping = Annotated[dict[Text, ProblemValue], Field(max_length=32)]
Names = Text | Annotated[list[Text], Field(min_length=1, max_length=64)]


class JobRequest(BaseModel):
    """A job spec as a job file has it (see ``orchestrator/run/jobs.py``), plus a queue priority."""

    model_config = ConfigDict(extra="forbid")

    kernel: Text = Field(min_length=1, max_length=200)
    problems: (
        Annotated[list[Text | ProblemMapping], Field(min_length=1, max_length=256)]
        | ProblemMapping
        | Text
    )
    device_classes: Names = "all"
    devices: Names = "auto"
    trials: StrictInt = Field(30, ge=1, le=1_000_000)
    minutes: StrictFloat | StrictInt | None = Field(None, gt=0, le=60 * 24 * 30)
    sampler: Text = Field(samplers.DEFAULT, max_length=64)
    seed: StrictInt = Field(0, ge=0, le=2**31 - 1)
    objective: Objective = Objective.KERNEL
    team: Text | None = Field(None, max_length=64)
    top_k: StrictInt = Field(3, ge=1, le=1000)
    in_flight: StrictInt | None = Field(None, ge=1, le=1024)
    priority: StrictInt = Field(
        0, ge=-1000, le=1000, description="Higher runs first; equal priorities run oldest first."
    )


class TokenRequest(BaseModel):
    """A new token for ``team`` with ``scope``, valid for ``expires_days`` (None: until revoked)."""

    model_config = ConfigDict(extra="forbid")

    team: Text = Field(min_length=1, max_length=64)
    scope: TokenScope
    expires_days: StrictFloat | StrictInt | None = Field(None, gt=0, le=3650)
    name: Text | None = Field(None, max_length=200)


def _plain(value: Any) -> Any:
    """JSON-ready form of a service view (``to_dict``), or of lists and dicts holding them."""
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def json_response(value: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    body = json.dumps(_plain(value), default=str, separators=(",", ":"))
    return Response(body, status_code=status, media_type="application/json", headers=headers)


class _Api:
    """The handlers' shared state: the database, the scheduler and the operator's allow-lists."""

    def __init__(
        self,
        database: Database,
        scheduler: Any,
        allow_kernel_modules: Collection[str],
        served_devices: Collection[str],
        caps: TeamCaps,
    ) -> None:
        self.database = database
        self.caps = caps
        self.scheduler = scheduler
        self.modules = frozenset(allow_kernel_modules)
        self.served_devices = frozenset(served_devices)
        self.registered = frozenset(available())
        self._specs: dict[str, KernelSpec] = {}
        self.best = BestCache(database)
        self.progress = Recent(PROGRESS_TTL_S)
        self._refreshing: set[tuple[int, Hashable]] = set()
        self._tasks: set[asyncio.Task[Any]] = set()

    def kernel(self, name: str) -> str:
        return names.kernel(name, self.modules, self.registered)

    def scheduler_problem(self) -> str | None:
        """Why this server's scheduler cannot run jobs now (None: it can, or there is none)."""
        return None if self.scheduler is None else self.scheduler.problem()

    def spec(self, name: str) -> KernelSpec:
        """The kernel spec of a checked name (loaded once per server)."""
        if name not in self._specs:
            self._specs[name] = get_spec(self.kernel(name))
        return self._specs[name]

    async def _spec_name(self, kernel: str) -> str:
        spec = self._specs.get(kernel)
        if spec is None:
            spec = await run_in_threadpool(self.spec, kernel)
        return spec.name

    async def recent(self, cache: Recent, key: Hashable, compute: Callable[[], Any]) -> Any:
        """``cache``'s value of ``key``: fresh from memory; else, while one refresh runs in the
        background, the last value if it is at most STALE_S old; else computed in a worker thread
        (an error reaches the request)."""
        hit = cache.peek(key)
        if hit is not None:
            return hit
        old = cache.peek(key, STALE_S)
        if old is None:
            return await run_in_threadpool(cache.get, key, compute)
        mark = (id(cache), key)
        if mark not in self._refreshing:
            self._refreshing.add(mark)
            task = asyncio.get_running_loop().create_task(
                run_in_threadpool(cache.get, key, compute)
            )
            self._tasks.add(task)

            def done(finished: asyncio.Task[Any]) -> None:
                self._refreshing.discard(mark)
                self._tasks.discard(finished)
                if not finished.cancelled() and finished.exception() is not None:
                    log.info("refreshing %r failed: %s", key, finished.exception())

            task.add_done_callback(done)
        return old

    async def detail(self, job_id: int, principal: Principal) -> dict[str, Any]:
        """A job's detail (at most PROGRESS_TTL_S old, or STALE_S while it is refreshed); another
        team's job is the same 404 as a missing one."""
        view: dict[str, Any] = await self.recent(
            self.progress, job_id, lambda: _plain(job_detail(self.database, job_id))
        )
        team = principal.team_filter()
        if team is not None and view["team"] != team:
            raise no_job(job_id)
        return view

    async def _best_cached(self, kernel: str, key: tuple[Any, ...], compute: Any) -> Any:
        """``compute()``'s value for (``kernel``, ``key``): from memory when it still holds, else
        checked or computed in a worker thread."""
        name = await self._spec_name(kernel)
        version = await self.recent(self.best.versions, name, lambda: self.best.version(name))
        hit = self.best.peek(name, key, version)
        if hit is not None:
            return hit
        return await run_in_threadpool(self.best.get, name, key, version, compute)

    async def best_index(
        self, kernel: str, device_class: str | None, objective: Objective
    ) -> dict[str, list[dict[str, Any]]]:
        """The best configs of ``kernel`` by problem key (cached until they change)."""

        def compute() -> dict[str, list[dict[str, Any]]]:
            found = best_configs(
                self.database, kernel=kernel, device_class=device_class, objective=objective
            )
            index: dict[str, list[dict[str, Any]]] = {}
            for view in found:
                plain = _plain(view)
                index.setdefault(problem_key(plain["problem"]), []).append(plain)
            return index

        index: dict[str, list[dict[str, Any]]] = await self._best_cached(
            kernel, ("best", device_class, objective), compute
        )
        return index

    async def bundle(
        self, kernel: str, device_class: str | None, objective: Objective, fmt: BundleFormat
    ) -> tuple[BundleFile, str]:
        """The bundle file and its ETag (cached until the kernel's best configs change)."""

        def compute() -> tuple[BundleFile, str]:
            file = build_bundle(
                self.database, kernel, device_class=device_class, objective=objective, fmt=fmt.value
            )
            return file, f'"{hashlib.sha256(file.content).hexdigest()[:32]}"'

        found: tuple[BundleFile, str] = await self._best_cached(
            kernel, ("bundle", device_class, objective, fmt), compute
        )
        return found

    def job_mapping(self, body: JobRequest, principal: Principal) -> dict[str, Any]:
        """The job file mapping of ``body`` with its names checked and its team the token's."""
        data = body.model_dump(mode="json", exclude_unset=True, exclude={"priority"})
        self.kernel(body.kernel)
        devices = [body.devices] if isinstance(body.devices, str) else body.devices
        for device in devices:
            plain = device in (SourceKind.AUTO.value, SourceKind.INTERPRETER.value)
            if not plain and device not in self.served_devices:
                raise names.BadName(
                    f"device {device[:80]!r} is not served here; this server's devices are "
                    f"{', '.join(sorted({'auto', 'interpreter', *self.served_devices}))}"
                )
        if isinstance(body.device_classes, list):
            for key in body.device_classes:
                names.device_class(key)
        else:
            names.device_class(body.device_classes)
        team = names.team(body.team) if body.team is not None else principal.team
        if team != principal.team and not principal.admin:
            raise PermissionDenied(
                f"a {principal.scope.value} token of team {principal.team} cannot submit for "
                f"team {team}"
            )
        data["team"] = team
        return data

    def check_caps(self, spec: JobSpec, priority: int, principal: Principal) -> None:
        """OverCap (403) if a non-admin token's job goes over a cap of its team."""
        if not principal.admin:
            self.caps.check(spec.team or principal.team, priority, spec.trials, len(spec.problems))


def create_app(
    database: Database,
    *,
    scheduler: Any = None,
    allow_kernel_modules: Collection[str] = (),
    served_devices: Sequence[str] = (),
    caps: TeamCaps | None = None,
    refusals_per_minute: int = 10,
    docs: bool = False,
) -> FastAPI:
    """The API on ``database``; ``scheduler`` (if this server runs one) answers device classes.

    ``allow_kernel_modules``: modules whose ``module:attribute`` kernels jobs may name.
    ``served_devices``: the server's ``--device`` values a job may name besides auto/interpreter.
    ``caps``: what a non-admin team's job may ask (default: TeamCaps()).
    ``refusals_per_minute``: audit rows of refused requests per token and minute (see refusals).
    ``docs``: serve the interactive ``/docs`` and ``/redoc`` pages, their scripts from this server
    (orchestrator.server.docs; default off; ``/openapi.json`` is always served).
    """
    api = _Api(database, scheduler, allow_kernel_modules, served_devices, caps or TeamCaps())
    metrics = Metrics(database)
    app = FastAPI(
        title="tunefleet",
        version=API_VERSION,
        summary="Distributed autotuning of GPU kernels for teams: jobs, shared best configs, bundles.",
        docs_url=None,
        redoc_url=None,
    )
    app.state.database = database
    app.state.refusals = RefusalAudit(database, refusals_per_minute)
    app.state.authenticator = Authenticator(database)
    app.state.api = api
    app.state.metrics = metrics
    install(app)
    _routes(app, api)
    pages.mount(app)
    if docs:
        api_docs.mount(app)
    app.add_middleware(BodyLimit)
    app.add_middleware(PathGuard)
    app.add_middleware(metrics.middleware)
    return app


JobId = Annotated[int, Path(ge=1, le=2**62)]
KernelName = Annotated[str, Path(min_length=1, max_length=200)]
ClassQuery = Annotated[str | None, Query(min_length=1, max_length=200)]
KnownClassQuery = Annotated[
    str, Query(min_length=1, max_length=200, description="A known class, e.g. H200 or MI300X.")
]


def _routes(app: FastAPI, api: _Api) -> None:
    database = api.database

    detail_for = api.detail

    refusals: RefusalAudit = app.state.refusals

    def audited(
        principal: Principal, action: str, target: str, run: Any, *, done: bool = True
    ) -> Any:
        """``run()``, with an audit row of its outcome (the error's status if it raises; those
        rows rate-limited per token, see :mod:`orchestrator.server.refusals`). ``done=False``:
        ``run()`` audits its own success (the token use cases, in the change's transaction)."""
        try:
            result = run()
        except Exception as exc:
            status = exc.status if isinstance(exc, ApiError) else status_of(exc)
            refusals.write(principal, action, target=target, detail={"status": status})
            raise
        if done:
            audit(database, principal, action, target=target, detail={"status": 200})
        return result

    def actor(principal: Principal) -> tokens.Actor:
        return tokens.Actor("api", principal.token_id, principal.team)

    @app.get("/healthz", tags=["service"])
    def healthz() -> Response:
        """200 when the database answers and this server's scheduler (if it runs one) can run
        jobs; else 503 with a one-line reason (no token needed; no path or address given)."""
        try:
            with database.session(readonly=True) as s:
                repository.count_jobs(s, status=JobStatus.RUNNING)
        except Exception:
            return json_response({"status": "unavailable", "reason": "the database is down"}, 503)
        problem = api.scheduler_problem()
        if problem is not None:
            return json_response({"status": "unavailable", "reason": problem}, 503)
        return json_response({"status": "ok"})

    @app.get("/metrics", tags=["service"])
    def metrics_text(_: ReadPrincipal) -> Response:
        """Prometheus text: queue length, running jobs, trials per minute by outcome, latencies."""
        return Response(app.state.metrics.render(), media_type="text/plain; version=0.0.4")

    @app.post("/v1/jobs", status_code=201, tags=["jobs"])
    def submit(body: JobRequest, principal: SubmitPrincipal) -> Response:
        """Queue a job for the token's team; the scheduler of some server runs it."""

        def run() -> Any:
            problem = api.scheduler_problem()
            if problem is not None:
                raise ApiError(503, f"this server cannot run jobs now: {problem}")
            spec = JobSpec.from_mapping(api.job_mapping(body, principal))
            api.check_caps(spec, body.priority, principal)
            job_id = submit_job(database, spec, priority=body.priority)
            return job_detail(database, job_id)

        job = audited(principal, "job.submit", body.kernel, run)
        view = _plain(job)
        return json_response(view, 201, {"Location": f"/v1/jobs/{view['id']}"})

    @app.get("/v1/jobs", tags=["jobs"])
    def jobs(
        principal: ReadPrincipal,
        team: Annotated[str | None, Query(max_length=64)] = None,
        status: JobStatus | None = None,
        kernel: Annotated[str | None, Query(max_length=200)] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
        offset: Annotated[int, Query(ge=0, le=2**31)] = 0,
        before: Annotated[
            int | None, Query(ge=1, le=2**63 - 1, description="only ids below it: next_before")
        ] = None,
    ) -> Response:
        """The jobs of the token's team (an admin token: any team's), newest first; page on
        with ``before`` set to the page's ``next_before`` (as fast deep down as on top)."""
        if team is not None:
            names.team(team)
            if not principal.admin and team != principal.team:
                raise PermissionDenied(f"team {principal.team} cannot list team {team}'s jobs")
        if kernel is not None:
            api.kernel(kernel)
        page = list_jobs(
            database,
            team=team if team is not None else principal.team_filter(),
            status=status,
            kernel=kernel,
            limit=limit,
            offset=offset,
            before=before,
        )
        return json_response(page)

    @app.get("/v1/jobs/{job_id}", tags=["jobs"])
    async def job(job_id: JobId, principal: ReadPrincipal) -> Response:
        """One job with per-study progress: trials by outcome, best so far, budget, times."""
        return json_response(await detail_for(job_id, principal))

    @app.get("/v1/jobs/{job_id}/events", tags=["jobs"])
    async def events(
        job_id: JobId,
        request: Request,
        principal: ReadPrincipal,
        interval_s: Annotated[float, Query(ge=0.2, le=30.0)] = 1.0,
    ) -> StreamingResponse:
        """Server-sent events: a ``progress`` event whenever the job changes, ``end`` when it
        finishes. Read from the database, so it follows a job run by any server."""
        first = await detail_for(job_id, principal)

        async def stream() -> AsyncIterator[str]:
            detail, last, sent_at, number = first, "", 0.0, 0
            loop = asyncio.get_running_loop()
            while True:
                view = detail
                payload = json.dumps(view, default=str, separators=(",", ":"))
                if payload != last:
                    number += 1
                    yield f"id: {number}\nevent: progress\ndata: {payload}\n\n"
                    last, sent_at = payload, loop.time()
                elif loop.time() - sent_at >= EVENT_KEEPALIVE_S:
                    yield ": keep-alive\n\n"
                    sent_at = loop.time()
                if JobStatus(view["status"]) in TERMINAL:
                    yield f"event: end\ndata: {json.dumps({'status': view['status']})}\n\n"
                    return
                await asyncio.sleep(interval_s)
                if await request.is_disconnected():
                    return
                detail = await detail_for(job_id, principal)

        return StreamingResponse(
            stream(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    @app.post("/v1/jobs/{job_id}/cancel", tags=["jobs"])
    def cancel(job_id: JobId, principal: SubmitPrincipal) -> Response:
        """Ask a job to stop (own team's with a submit token, any with admin); finished trials stay."""
        view = audited(
            principal,
            "job.cancel",
            f"job {job_id}",
            lambda: cancel_job(database, job_id, team=principal.team_filter()),
        )
        api.progress.forget(job_id)
        return json_response(view)

    @app.post("/v1/jobs/{job_id}/resume", tags=["jobs"])
    def resume(job_id: JobId, principal: SubmitPrincipal) -> Response:
        """Queue a failed, cancelled or stalled job again (own team's with a submit token, any
        with admin); a scheduler runs it on from its trials up to its budget. 409 for a done job
        or one whose lease is live."""

        def run() -> Any:
            problem = api.scheduler_problem()
            if problem is not None:
                raise ApiError(503, f"this server cannot run jobs now: {problem}")
            return requeue_job(database, job_id, team=principal.team_filter())

        view = audited(principal, "job.resume", f"job {job_id}", run)
        api.progress.forget(job_id)
        return json_response(view)

    @app.get("/v1/jobs/{job_id}/plot", tags=["jobs"])
    def plot_data(job_id: JobId, principal: ReadPrincipal) -> Response:
        """The job's studies with their trials in recorded order (outcome, median, config,
        reused): what ``tunefleet plot`` draws."""
        return json_response(plot.plot_data(database, job_id, team=principal.team_filter()))

    @app.get("/v1/kernels", tags=["kernels"])
    def kernels(_: ReadPrincipal) -> Response:
        """The kernels this server can tune, with their problem schema and an example."""
        return json_response({"kernels": kernel_views.list_kernels()})

    @app.get("/v1/kernels/{name}/space", tags=["kernels"])
    def kernel_space(name: KernelName, _: ReadPrincipal, device_class: KnownClassQuery) -> Response:
        """A kernel's search space on a known device class: parameters, rules, default, counts."""
        api.kernel(name)
        names.device_class(device_class)
        return json_response(kernel_views.kernel_space(name, device_class))

    @app.get("/v1/device-classes", tags=["kernels"])
    def device_classes(_: ReadPrincipal) -> Response:
        """The device classes of this server's cluster with workers, busy and idle (empty on a
        server started with --no-scheduler)."""
        found = [] if api.scheduler is None else api.scheduler.device_classes()
        return json_response(
            {"device_classes": _plain(found), "scheduler": api.scheduler is not None}
        )

    @app.get("/v1/best", tags=["results"])
    async def best(
        _: ReadPrincipal,
        kernel: Annotated[str, Query(min_length=1, max_length=200)],
        device_class: ClassQuery = None,
        objective: Objective = Objective.KERNEL,
        problem: Annotated[
            str | None, Query(max_length=1000, description="e.g. M=64,N=64,K=64,dtype=float16")
        ] = None,
    ) -> Response:
        """Best configs of the installed version of a kernel (every team's), with who found them."""
        api.kernel(kernel)
        if device_class is not None:
            names.device_class(device_class)
        index = await api.best_index(kernel, device_class, objective)
        if problem is None:
            found = [view for views in index.values() for view in views]
        else:
            found = index.get(problem_key(api.spec(kernel).parse_problem(problem)), [])
        version = api.spec(kernel).version_hash()
        return json_response(
            {
                "kernel": kernel,
                "kernel_version": version,
                "objective": objective.value,
                "best": found,
            }
        )

    @app.get("/v1/bundles/{kernel}", tags=["results"])
    async def bundle(
        kernel: KernelName,
        request: Request,
        _: ReadPrincipal,
        device_class: ClassQuery = None,
        objective: Objective = Objective.KERNEL,
        fmt: Annotated[BundleFormat, Query(alias="format")] = BundleFormat.NATIVE,
    ) -> Response:
        """The bundle file ``tunefleet pull`` writes, as a download (with an ETag: a client that
        sends it back in If-None-Match gets 304 while the bundle is unchanged)."""
        api.kernel(kernel)
        if device_class is not None:
            names.device_class(device_class)
        file, etag = await api.bundle(kernel, device_class, objective, fmt)
        headers = {"ETag": etag, "Cache-Control": "no-cache"}
        if request.headers.get("if-none-match") == etag:
            return Response(status_code=304, headers=headers)
        filename = file.filename if _SAFE_FILENAME.fullmatch(file.filename) else "bundle"
        headers["Content-Disposition"] = f'attachment; filename="{filename}"'
        return Response(file.content, media_type=file.media_type, headers=headers)

    @app.post("/v1/tokens", status_code=201, tags=["tokens"])
    def create_token(body: TokenRequest, principal: AdminPrincipal) -> Response:
        """A new token; its secret is in this answer only (the database keeps a digest)."""
        team = names.team(body.team)

        def run() -> tokens.NewToken:
            return tokens.create_token(
                database,
                team,
                body.scope,
                expires_days=None if body.expires_days is None else float(body.expires_days),
                name=body.name,
                actor=actor(principal),
            )

        created = audited(principal, "token.create", f"team {team}", run, done=False)
        return json_response(created, 201)

    @app.get("/v1/tokens", tags=["tokens"])
    def list_tokens(_: AdminPrincipal) -> Response:
        """Every token (never its secret)."""
        return json_response({"tokens": tokens.list_tokens(database)})

    @app.post("/v1/tokens/{token_id}/revoke", tags=["tokens"])
    def revoke(token_id: JobId, principal: AdminPrincipal) -> Response:
        """Revoke a token: at once on this server, within a second on the others."""
        audited(
            principal,
            "token.revoke",
            f"token {token_id}",
            lambda: tokens.revoke_token(database, token_id, actor=actor(principal)),
            done=False,
        )
        app.state.authenticator.forget(token_id)
        return json_response({"id": token_id, "revoked": True})
