"""Our exceptions as HTTP statuses; every error response is JSON ``{"error": ..., "detail": ...}``.

NotFound 404, PermissionDenied 403, JobLeased / Conflict / a forbidden state change 409, a bad spec or
request 422, a bad name 400, an unreachable database 503 (which names no file or host); anything
unexpected is a 500 whose body says nothing about the server's insides (the traceback goes to the
log).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import Response

from db.errors import DatabaseError, DatabaseUnavailable, InvalidRecord, InvalidTransition
from db.errors import NotFound as RowNotFound
from orchestrator.errors import (
    Conflict,
    InvalidRequest,
    JobLeased,
    JobNotFoundError,
    JobStateError,
    NotFound,
    OrchestratorError,
    PermissionDenied,
)
from orchestrator.server.names import BadName
from search_spaces.errors import SpecError
from workers.errors import WorkerError

log = logging.getLogger("tunefleet.server")

#: Exception type -> status, most specific first (the first isinstance match wins).
STATUS: tuple[tuple[type[Exception], int], ...] = (
    (BadName, 400),
    (InvalidRequest, 400),
    (PermissionDenied, 403),
    (NotFound, 404),
    (JobNotFoundError, 404),
    (RowNotFound, 404),
    (JobLeased, 409),
    (Conflict, 409),
    (JobStateError, 409),
    (InvalidTransition, 409),
    (SpecError, 422),
    (InvalidRecord, 422),
    (DatabaseUnavailable, 503),
    (OrchestratorError, 422),
    (DatabaseError, 500),
    (WorkerError, 422),
)


class ApiError(Exception):
    """An error response decided by a handler: ``status``, a one-line ``error`` and a ``detail``."""

    def __init__(self, status: int, error: str, detail: Any = None) -> None:
        super().__init__(error)
        self.status = status
        self.error = error
        self.detail = detail


def error_response(
    status: int, error: str, detail: Any = None, headers: Mapping[str, str] | None = None
) -> Response:
    body = json.dumps({"error": error, "detail": jsonable_encoder(detail)}, default=str)
    return Response(body, status_code=status, media_type="application/json", headers=headers)


def status_of(exc: Exception) -> int:
    """The HTTP status for one of our exceptions (500 for anything else)."""
    return next((status for kind, status in STATUS if isinstance(exc, kind)), 500)


def _validation_detail(exc: RequestValidationError) -> list[dict[str, Any]]:
    return [
        {"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
        for e in exc.errors()
    ]


def install(app: FastAPI) -> None:
    """Register the handlers that turn every exception into a JSON error response."""

    @app.exception_handler(ApiError)
    async def _api(_: Request, exc: ApiError) -> Response:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return error_response(exc.status, exc.error, exc.detail, headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> Response:
        detail = _validation_detail(exc)
        first = detail[0] if detail else {"loc": [], "msg": "invalid request"}
        where = ".".join(str(part) for part in first["loc"])
        return error_response(422, f"invalid request: {where}: {first['msg']}", detail)

    @app.exception_handler(HTTPException)
    async def _http(_: Request, exc: HTTPException) -> Response:
        return error_response(exc.status_code, str(exc.detail), None, exc.headers)

    async def _ours(request: Request, exc: Exception) -> Response:
        status = status_of(exc)
        if status == 500:
            log.error("%s %s failed: %r", request.method, request.url.path, exc)
            return error_response(500, "internal server error; the server log has the cause")
        if status == 503:
            # The database's message names its file or host: for the log, not for a client.
            log.warning("%s %s: %s", request.method, request.url.path, exc)
            return error_response(503, "the database is unavailable; retry later")
        lines = str(exc).splitlines()
        return error_response(status, lines[0] if lines else type(exc).__name__)

    for kind in (BadName, OrchestratorError, DatabaseError, SpecError, WorkerError):
        app.add_exception_handler(kind, _ours)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        # Starlette re-raises after this response, so the server logs the traceback.
        return error_response(500, "internal server error; the server log has the cause")
