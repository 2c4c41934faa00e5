"""``serve --docs``: Swagger UI at /docs and ReDoc at /redoc with every script from this server
(orchestrator/server/docs.py) under a strict Content-Security-Policy, checked on the served HTML
and in headless Chromium (the page loads and renders the API; no script, style or request of data goes to another origin:
only ReDoc's logo image is asked of its CDN, and the policy refuses it)."""

from __future__ import annotations

import re
import shutil
from typing import Any

import pytest
from playwright import sync_api

from orchestrator.server.docs import ASSETS
from tests.server.conftest import Api, ServerFactory

CHROMIUM = "/usr/bin/chromium"
PAGES = ("/docs", "/redoc")


def _csp(response: Any) -> dict[str, str]:
    """The Content-Security-Policy header as directive -> sources."""
    policy = response.headers["content-security-policy"]
    return dict(part.strip().partition(" ")[::2] for part in policy.split(";"))


def test_the_docs_pages_name_only_this_servers_scripts_under_a_strict_policy(
    serve: ServerFactory,
) -> None:
    api = serve(docs=True)
    for page in PAGES:
        response = api.call(None, "GET", page)
        assert response.status_code == 200
        html = response.text
        policy = _csp(response)
        assert policy["script-src"] == "'self'" and policy["default-src"] == "'none'"
        scripts = re.findall(r"<script([^>]*)>(.*?)</script>", html, re.S)
        assert scripts and all(body.strip() == "" for _attrs, body in scripts)  # none inline
        sources = re.findall(r'(?:src|href)="([^"]*)"', html)
        assert sources and all(s.startswith("/docs/assets/") for s in sources), sources
        for source in sources:
            asset = api.call(None, "GET", source)
            assert asset.status_code == 200 and asset.content, source
            assert "cdn" not in asset.headers.get("content-type", "")
    init = api.call(None, "GET", "/docs/assets/swagger-init.js")
    assert init.status_code == 200 and "/openapi.json" in init.text
    assert api.call(None, "GET", "/docs/assets/../app.py").status_code in (400, 404)
    assert api.call(None, "GET", "/docs/assets/other.js").status_code == 404


def test_without_docs_neither_the_pages_nor_their_assets_are_served(serve: ServerFactory) -> None:
    api = serve()
    for path in (*PAGES, *(f"/docs/assets/{name}" for name in ASSETS)):
        assert api.call(None, "GET", path).status_code == 404, path


@pytest.fixture(scope="module")
def browser() -> Any:
    if shutil.which(CHROMIUM) is None:
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium (.ci/run does)")
    with sync_api.sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.mark.parametrize(
    ("page", "rendered"),
    [("/docs", ".swagger-ui .info .title"), ("/redoc", "h1")],
)
def test_the_docs_pages_render_in_chromium_from_this_origin_alone(
    serve: ServerFactory, browser: Any, page: str, rendered: str
) -> None:
    api: Api = serve(docs=True)
    context = browser.new_context()
    tab = context.new_page()
    foreign: list[tuple[str, str]] = []
    violations: list[str] = []
    tab.on(
        "request",
        lambda r: (
            None
            if r.url.startswith((api.url, "blob:", "data:"))
            else foreign.append((r.resource_type, r.url))
        ),
    )
    tab.on(
        "console",
        lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None,
    )
    try:
        tab.goto(api.url + page)
        tab.wait_for_selector(rendered, timeout=60_000)
        assert "tunefleet" in tab.inner_text(rendered)
        tab.wait_for_load_state("networkidle")
    finally:
        context.close()
    # ReDoc's "by Redocly" logo is an image of its CDN: asked for, refused by img-src 'self'.
    assert all(kind == "image" for kind, _url in foreign), foreign
    assert all("img-src" in v for v in violations), violations
