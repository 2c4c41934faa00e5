"""The HTTP client of a tunefleet server: the remote :class:`orchestrator.app.protocol.Door`.

Answers are read back into the application layer's views (:mod:`orchestrator.app.views`), whose
``to_dict()`` is the server's wire format, so remote and local commands render the same data.
What a server does not do for a client (running a job on this machine, storing re-timings it did
not measure) is refused here in one line, before any request (see
:mod:`orchestrator.app.protocol`). The server's
JSON errors (``{"error": ..., "detail": ...}``) become our exceptions with its one-line message:
401 Unauthorized, 403 PermissionDenied, 404 NotFound, 409 Conflict, 400/413/422 InvalidRequest,
anything else ServerError (an unreachable server: ServerUnavailable).
"""

from __future__ import annotations

import io
import ipaddress
import os
import re
import sys
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

from db.states import JobStatus, Objective, TokenScope
from orchestrator.app.protocol import DEFAULT_THRESHOLD, BestList, Resumed, RunHere
from orchestrator.app.tokens import NewToken, TokenView
from orchestrator.app.views import BestView, BundleFile, JobDetail, JobPage, JobView
from orchestrator.errors import (
    Conflict,
    InvalidRequest,
    NotFound,
    NotRemote,
    OrchestratorError,
    PermissionDenied,
    ServerError,
    ServerUnavailable,
    Unauthorized,
)

if TYPE_CHECKING:
    import httpx  # imported when a client is made: commands that use no server never load it

    from orchestrator.app.plot import JobPlot
    from orchestrator.app.revalidation import RevalidationReport
    from orchestrator.run.jobs import JobSpec
    from orchestrator.run.progress import Reporter

#: Environment variables: the server's URL, the bearer token.
SERVER_ENV = "TUNEFLEET_SERVER"
TOKEN_ENV = "TUNEFLEET_TOKEN"
#: Seconds one request may take.
TIMEOUT_S = 30.0
#: Names a downloaded bundle file may have (no folders, no dot files).
SAFE_FILENAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._,=+-]{0,200}")

_ERRORS: dict[int, type[OrchestratorError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: PermissionDenied,
    404: NotFound,
    409: Conflict,
    413: InvalidRequest,
    422: InvalidRequest,
}


def read_token(token_file: Path | None) -> str | None:
    """The token in ``token_file`` (its first line), else $TUNEFLEET_TOKEN, else None."""
    if token_file is not None:
        try:
            text = token_file.read_text()
        except OSError as exc:
            raise OrchestratorError(
                f"cannot read --token-file {token_file}: {exc.strerror or exc}"
            ) from None
        lines = text.strip().splitlines()
        if not lines or not lines[0].strip():
            raise OrchestratorError(f"--token-file {token_file} is empty; put the token in it")
        return lines[0].strip()
    return os.environ.get(TOKEN_ENV) or None


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def masked(url: str) -> str:
    """``url`` for messages: a password in it (``user:password@``) as ``***``."""
    return re.sub(r"//([^/@:]*):[^/@]*@", r"//\1:***@", url)


def check_url(url: str) -> str:
    """``url`` without a trailing slash if it is an http(s) URL with a host; else one line."""
    try:
        parts = urlsplit(url)
        scheme, host = parts.scheme, parts.hostname
    except ValueError:  # e.g. an unclosed [ in the host
        scheme, host = "", None
    if scheme not in ("http", "https") or not host:
        raise OrchestratorError(
            f"--server {masked(url)!r} is not a server URL; give one like http://127.0.0.1:8471"
        )
    return url.rstrip("/")


def safe_filename(name: str) -> str:
    """``name`` if it may be written as a file in the output folder; else ServerError."""
    if not SAFE_FILENAME.fullmatch(name) or name in (".", ".."):
        raise ServerError(
            f"the server sent a bundle file named {name[:80]!r}; refusing to write it"
        )
    return name


class Client:
    """A connection to a tunefleet server at ``url`` with bearer ``token`` (None: no header)."""

    def __init__(
        self,
        url: str,
        token: str | None,
        *,
        timeout_s: float = TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = check_url(url)
        self.shown = masked(self.url)  # the URL in messages
        self.where = f"on {self.shown}"
        host = urlsplit(self.url).hostname or ""
        if token and urlsplit(self.url).scheme == "http" and not _loopback(host):
            print(
                f"warning: the token goes to {host} over plain http; use https "
                "(uvicorn's --ssl-certfile or a TLS proxy)",
                file=sys.stderr,
            )
        import httpx

        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(
            base_url=self.url, headers=headers, timeout=timeout_s, transport=transport
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
    ) -> httpx.Response:
        import httpx

        query = {k: v for k, v in (params or {}).items() if v is not None}
        # A GET is sent again once when a kept-alive connection turns out closed by the server.
        for attempt in range(2 if method == "GET" else 1):
            try:
                response = self._http.request(method, path, params=query, json=json)
                break
            except httpx.TimeoutException:
                raise ServerUnavailable(
                    f"{self.shown} did not answer {method} {path} in time"
                ) from None
            except httpx.TransportError as exc:
                if attempt == 0 and method == "GET" and not isinstance(exc, httpx.ConnectError):
                    continue
                raise ServerUnavailable(
                    f"cannot reach {self.shown}: {exc}; check --server or {SERVER_ENV}"
                ) from None
        if response.is_success:
            return response
        try:
            message = str(response.json()["error"])
        except (ValueError, KeyError, TypeError):
            message = response.text.strip().splitlines()[0][:200] if response.text.strip() else ""
        message = message or response.reason_phrase
        if response.status_code == 401:
            message += f"; give a valid token in {TOKEN_ENV} or with --token-file"
        kind = _ERRORS.get(response.status_code, ServerError)
        raise kind(f"{self.shown}: {message} (HTTP {response.status_code})")

    def _json(self, response: httpx.Response) -> Any:
        try:
            return response.json()
        except ValueError:
            raise ServerError(f"{self.shown} answered with something that is not JSON") from None

    # ----- jobs
    def submit(self, spec: JobSpec, *, priority: int = 0) -> JobDetail:
        """Queue ``spec`` with ``priority``; the queued job."""
        body = {**job_request(spec), "priority": priority}
        return JobDetail.from_dict(self._json(self._request("POST", "/v1/jobs", json=body)))

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
        """The jobs the token's team may see, newest first (``before``: ids below it)."""
        filters = {"team": team, "status": JobStatus(status).value if status else None}
        page = {"kernel": kernel, "limit": limit, "offset": offset, "before": before}
        response = self._request("GET", "/v1/jobs", params={**filters, **page})
        return JobPage.from_dict(self._json(response))

    def job(self, job_id: int) -> JobDetail:
        """The job with its per-study progress."""
        return JobDetail.from_dict(self._json(self._request("GET", f"/v1/jobs/{int(job_id)}")))

    def cancel(self, job_id: int) -> JobView:
        """Cancel the job (see orchestrator.app.jobs.cancel_job); the job as it is after."""
        response = self._request("POST", f"/v1/jobs/{int(job_id)}/cancel")
        return JobView.from_dict(self._json(response))

    def resume(
        self, job_id: int, *, here: RunHere | None = None, reporter: Reporter | None = None
    ) -> Resumed:
        """Have the server's schedulers run the job again (orchestrator.app.jobs.requeue_job); it is queued.
        ``here`` options are refused: the server runs jobs on its own workers."""
        if here is not None and here.given:
            raise InvalidRequest(
                f"--ray-address, --keep-workers and --kernel-module run a job on this machine; "
                f"the server {self.shown} runs job {job_id} on its own workers: drop them, or "
                "give --db to run it here"
            )
        response = self._request("POST", f"/v1/jobs/{int(job_id)}/resume")
        return Resumed(JobDetail.from_dict(self._json(response)))

    def plot_data(self, job_id: int) -> JobPlot:
        """The job's studies and trials (``GET /v1/jobs/{id}/plot``)."""
        from orchestrator.app.plot import JobPlot

        response = self._request("GET", f"/v1/jobs/{int(job_id)}/plot")
        return JobPlot.from_dict(self._json(response))

    # ----- results
    def best(
        self,
        kernel: str,
        *,
        device_class: str | None = None,
        objective: Objective = Objective.KERNEL,
        problem: str | None = None,
    ) -> BestList:
        """The best configs the server stores for ``kernel``'s installed version."""
        params = {
            "kernel": kernel,
            "device_class": device_class,
            "objective": Objective(objective).value,
            "problem": problem,
        }
        found = self._json(self._request("GET", "/v1/best", params=params))
        rows = tuple(BestView.from_dict(b) for b in found["best"])
        version = found.get("kernel_version") or (rows[0].kernel_version if rows else None)
        name = rows[0].kernel if rows else str(found.get("kernel", kernel))
        return BestList(name, version, Objective(objective), rows)

    def bundle(
        self,
        kernel: str,
        *,
        device_class: str | None = None,
        objective: Objective = Objective.KERNEL,
        fmt: str = "native",
    ) -> BundleFile:
        """The bundle ``pull`` writes, as the server builds it (one file, or a zip of several)."""
        params = {
            "device_class": device_class,
            "objective": Objective(objective).value,
            "format": fmt,
        }
        response = self._request("GET", f"/v1/bundles/{quote(kernel, safe='')}", params=params)
        found = re.search(r'filename="([^"]*)"', response.headers.get("content-disposition", ""))
        name = safe_filename(found.group(1) if found else "")
        media = response.headers.get("content-type", "").split(";")[0].strip()
        return BundleFile(name, response.content, media)

    def bundle_files(
        self,
        kernel: str,
        *,
        device_classes: Sequence[str] = (),
        objective: Objective = Objective.KERNEL,
        fmt: str = "native",
    ) -> list[BundleFile]:
        """The files of the server's bundles of ``kernel``: one download per class asked (none
        asked: one of every class), unpacked (see :func:`bundle_members`)."""
        classes: Sequence[str | None] = list(device_classes) or [None]
        return [
            member
            for c in classes
            for member in bundle_members(
                self.bundle(kernel, device_class=c, objective=objective, fmt=fmt)
            )
        ]

    def revalidate(
        self,
        kernel: str,
        device_class: str,
        *,
        device: str = "auto",
        threshold: float = DEFAULT_THRESHOLD,
    ) -> RevalidationReport:
        """Refused (NotRemote): a server stores only times its own workers measured."""
        raise NotRemote(
            f"revalidate re-times on this machine's device and {self.shown} stores only times "
            "its own workers measure; revalidate against a database you hold with --db URL"
        )

    # ----- tokens (an admin token)
    def create_token(
        self,
        team: str,
        scope: TokenScope,
        *,
        expires_days: float | None = None,
        name: str | None = None,
    ) -> NewToken:
        """A new token of ``team``; its secret is in this answer only."""
        body = {
            "team": team,
            "scope": TokenScope(scope).value,
            "expires_days": expires_days,
            "name": name,
        }
        response = self._request("POST", "/v1/tokens", json=body)
        return NewToken.from_dict(self._json(response))

    def tokens(self) -> list[TokenView]:
        """Every token of the server's database (never a secret)."""
        found = self._json(self._request("GET", "/v1/tokens"))
        return [TokenView.from_dict(t) for t in found["tokens"]]

    def revoke_token(self, token_id: int) -> None:
        """Revoke token ``token_id``; NotFound if it is not an active token."""
        self._request("POST", f"/v1/tokens/{int(token_id)}/revoke")


def job_request(spec: JobSpec) -> dict[str, Any]:
    """The job's fields as a server's ``POST /v1/jobs`` takes them: kernel, problems and every
    field that is not at its default (a server of an older version knows fewer fields)."""
    from orchestrator.run.jobs import JobSpec

    given = spec.to_dict()
    default = JobSpec(spec.kernel, spec.problems).to_dict()
    return {k: v for k, v in given.items() if k in ("kernel", "problems") or v != default[k]}


def bundle_members(bundle: BundleFile) -> list[BundleFile]:
    """The files of a downloaded bundle: the file itself, or the members of its zip archive
    (each name checked like a downloaded file's)."""
    if bundle.media_type != "application/zip":
        return [bundle]
    try:
        archive = zipfile.ZipFile(io.BytesIO(bundle.content))
    except zipfile.BadZipFile:
        raise ServerError(f"the bundle {bundle.filename} is not a readable zip archive") from None
    with archive:
        return [
            BundleFile(safe_filename(info.filename), archive.read(info), "application/octet-stream")
            for info in archive.infolist()
            if not info.is_dir()
        ]
