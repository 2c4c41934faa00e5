"""The web page of the team service: HTML shells at ``/``, ``/jobs/{id}``, ``/best``,
``/portability`` and ``/drift`` (one stored best's re-timings), static files at ``/static``, and the JSON routes of
:mod:`orchestrator.server.views_api`.

The shells hold no data: their scripts ask the JSON API for everything with the token the user
typed once (kept in the tab's ``sessionStorage``, sent as ``Authorization: Bearer``), so the page
sees exactly what the token may see through the API. A strict Content-Security-Policy allows only
this server's own scripts and styles (no inline script, nothing from other origins).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from fastapi import FastAPI, Request
from fastapi import Path as PathParam
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from starlette.responses import Response

from db import TrialOutcome
from orchestrator.export.bundle import BundleFormat
from orchestrator.server import views_api

HERE = Path(__file__).resolve().parent
templates = Jinja2Templates(directory=HERE / "templates")

#: Headers of every HTML shell: own scripts and styles only, no framing, no referrer.
SHELL_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}

PAGES = (
    ("/", "jobs", "Jobs"),
    ("/best", "best", "Best configs"),
    ("/portability", "portability", "Portability"),
)


def _shell(request: Request, page: str, title: str, **context: Any) -> Response:
    response = templates.TemplateResponse(
        request,
        f"{page}.html",
        {"page": page, "title": title, "pages": PAGES, **context},
        headers=SHELL_HEADERS,
    )
    return response


def mount(app: FastAPI) -> None:
    """Add the page's JSON routes, HTML shells and static files to ``app``."""
    app.include_router(views_api.router)
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")

    @app.get("/", include_in_schema=False)
    def jobs_page(request: Request) -> Response:
        return _shell(request, "jobs", "Jobs")

    @app.get("/jobs/{job_id}", include_in_schema=False)
    def job_page(request: Request, job_id: Annotated[int, PathParam(ge=1, le=2**62)]) -> Response:
        outcomes = [o.value for o in TrialOutcome]
        return _shell(request, "job", f"Job {job_id}", job_id=job_id, outcomes=outcomes)

    @app.get("/best", include_in_schema=False)
    def best_page(request: Request) -> Response:
        return _shell(request, "best", "Best configs", formats=[f.value for f in BundleFormat])

    @app.get("/drift", include_in_schema=False)
    def drift_page(request: Request) -> Response:
        return _shell(request, "drift", "Drift")

    @app.get("/portability", include_in_schema=False)
    def portability_page(request: Request) -> Response:
        return _shell(request, "portability", "Portability")
