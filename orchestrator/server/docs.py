"""The interactive API docs (``tunefleet serve --docs``): Swagger UI at ``/docs``, ReDoc at
``/redoc``, every script and style served by this server itself, never from a CDN.

The pages share the origin that keeps the jobs page's token, so a third-party script there could
read it. The assets come from the ``fastapi-offline`` distribution (MIT; it ships Swagger UI,
Apache-2.0, and ReDoc, MIT, as files), located on disk without importing its code; its files
are served under fixed names only (no path parameter reaches the file system). Swagger UI's
start-up is a script file of ours (``/docs/assets/swagger-init.js``), not an inline script, so the
pages carry a strict Content-Security-Policy: scripts from this origin only, nothing inline
but styles (both UIs set element styles), search workers of ReDoc from ``blob:``.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse, HTMLResponse, Response

from orchestrator.errors import OrchestratorError

#: The distribution whose files are the assets, and its folder of them.
ASSETS_PACKAGE = "fastapi_offline"
ASSETS_DIR = "static"
#: Asset name served under /docs/assets/ -> (file of ASSETS_PACKAGE, media type).
ASSETS = {
    "swagger-ui-bundle.js": ("swagger-ui-bundle.js", "text/javascript"),
    "swagger-ui.css": ("swagger-ui.css", "text/css"),
    "redoc.standalone.js": ("redoc.standalone.js", "text/javascript"),
    "favicon.png": ("favicon.png", "image/png"),
}
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; worker-src blob:; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
SWAGGER_INIT = """window.ui = SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#swagger-ui",
  layout: "BaseLayout",
  deepLinking: true,
  presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
});
"""
SWAGGER_HTML = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>tunefleet API - Swagger UI</title>
<link rel="icon" href="/docs/assets/favicon.png">
<link rel="stylesheet" href="/docs/assets/swagger-ui.css"></head>
<body><div id="swagger-ui"></div>
<script src="/docs/assets/swagger-ui-bundle.js"></script>
<script src="/docs/assets/swagger-init.js"></script>
</body></html>
"""
REDOC_HTML = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>tunefleet API - ReDoc</title>
<link rel="icon" href="/docs/assets/favicon.png"></head>
<body><redoc spec-url="/openapi.json"></redoc>
<script src="/docs/assets/redoc.standalone.js"></script>
</body></html>
"""


def assets_folder() -> Path:
    """The folder of the docs' asset files; OrchestratorError if the distribution is missing or
    lacks one of them."""
    spec = importlib.util.find_spec(ASSETS_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    folder = Path(locations[0]) / ASSETS_DIR if locations else None
    if folder is None or not all((folder / name).is_file() for name, _ in ASSETS.values()):
        raise OrchestratorError(
            f"--docs needs the Swagger UI and ReDoc files of the {ASSETS_PACKAGE.replace('_', '-')}"
            " package; install tunefleet's dependencies"
        )
    return folder


def mount(app: FastAPI) -> None:
    """Add ``/docs``, ``/redoc`` and their assets to ``app`` (kept out of the OpenAPI schema)."""
    folder = assets_folder()

    @app.get("/docs", include_in_schema=False)
    def swagger_page() -> Response:
        return HTMLResponse(SWAGGER_HTML, headers=HEADERS)

    @app.get("/redoc", include_in_schema=False)
    def redoc_page() -> Response:
        return HTMLResponse(REDOC_HTML, headers=HEADERS)

    @app.get("/docs/assets/swagger-init.js", include_in_schema=False)
    def swagger_init() -> Response:
        return Response(SWAGGER_INIT, media_type="text/javascript", headers=HEADERS)

    for name, (file, media_type) in ASSETS.items():
        app.add_api_route(
            f"/docs/assets/{name}",
            _file_route(folder / file, media_type),
            methods=["GET"],
            include_in_schema=False,
        )


def _file_route(path: Path, media_type: str) -> Callable[[], Response]:
    def serve() -> Response:
        return FileResponse(path, media_type=media_type, headers=HEADERS)

    return serve
