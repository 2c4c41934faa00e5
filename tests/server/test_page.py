"""The web page in headless Chromium (Debian's /usr/bin/chromium through playwright) against a real
server: uvicorn on a loopback port with a scheduler running replay jobs on a local Ray (two device
classes of synthetic matmul landscapes), on SQLite.

One browser and one server for the module; the tests run in file order (the later pages show what
the job of the earlier ones produced). Each page is screenshotted; the PNGs go to docs/screenshots/
only with ``TUNEFLEET_SCREENSHOTS=1`` (to refresh the documentation), else to a temporary folder.
"""

from __future__ import annotations

import io
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import ray

from db import Database, JobStatus, repository
from db.models import TokenScope
from orchestrator.run.dispatch import PoolOptions, ensure_ray
from orchestrator.run.jobs import DeviceSource
from orchestrator.server.app import create_app
from orchestrator.server.scheduler import Scheduler
from search_spaces.bundle import load_bundle
from tests.orchestrator.conftest import A100, H200
from tests.server.conftest import LiveServer, make_token

CHROMIUM = "/usr/bin/chromium"
DOC_SHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
SHOTS = (
    DOC_SHOTS
    if os.environ.get("TUNEFLEET_SCREENSHOTS") == "1"
    else Path(tempfile.gettempdir()) / "tunefleet-screenshots"
)
SMALL = "M=256,N=256,K=256,dtype=float16"
SMALL_M = 256
CLASSES = (f"replay:{H200}", f"replay:{A100}")
WAIT_MS = 60_000

pytestmark = pytest.mark.timeout(900)

sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")


@dataclass
class Site:
    """The running server, its database and tokens (``alpha``: submit, ``beta``: read)."""

    url: str
    database: Database
    tokens: dict[str, str]
    jobs: list[int]

    def submit(self, trials: int, classes: tuple[str, ...] = CLASSES) -> int:
        body = {
            "kernel": "matmul",
            "problems": [SMALL],
            "device_classes": list(classes),
            "trials": trials,
        }
        headers = {"Authorization": f"Bearer {self.tokens['alpha']}"}
        r = httpx.post(f"{self.url}/v1/jobs", json=body, headers=headers, timeout=30)
        assert r.status_code == 201, r.text
        job_id = int(r.json()["id"])
        self.jobs.append(job_id)
        return job_id

    def status(self, job_id: int) -> JobStatus:
        with self.database.session(readonly=True) as s:
            return repository.get_job(s, job_id).status

    def wait_done(self, job_id: int, timeout_s: float = 240) -> None:
        deadline = time.monotonic() + timeout_s
        # One read per round: the job may finish between two reads.
        while (status := self.status(job_id)) is not JobStatus.DONE:
            assert time.monotonic() < deadline, f"job {job_id} is {status}"
            assert status in (JobStatus.QUEUED, JobStatus.RUNNING)
            time.sleep(0.3)


@pytest.fixture(scope="module")
def site(
    tmp_path_factory: pytest.TempPathFactory, landscapes: dict[str, list[Path]]
) -> Iterator[Site]:
    tmp = tmp_path_factory.mktemp("page")
    database = Database(f"sqlite:///{tmp / 'page.db'}")
    database.ensure_schema()
    ensure_ray(None, 2)
    # Each class's landscape of SMALL, the one problem of these jobs (a replay worker loads every
    # file it is given, in each pool and each re-timing).
    devices = tuple(
        DeviceSource.parse(f"replay:{p}")
        for d in (H200, A100)
        for p in landscapes[d]
        if p.name.endswith(f"-M{SMALL_M}.json.gz")
    )
    scheduler = Scheduler(
        database, devices=devices, pool_options=PoolOptions(replay_delay_s=0.4), poll_s=0.2
    )
    scheduler.start()
    live = LiveServer(create_app(database, scheduler=scheduler)).__enter__()
    tokens = {
        "alpha": make_token(database, "alpha", TokenScope.SUBMIT)[1],
        "beta": make_token(database, "beta", TokenScope.READ)[1],
    }
    try:
        yield Site(live.url, database, tokens, [])
    finally:
        live.__exit__()
        scheduler.stop(60)
        ray.shutdown()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if shutil.which(CHROMIUM) is None:
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium (.ci/run does)")
    with sync_api.sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture
def open_page(browser: Any, site: Site) -> Iterator[Callable[..., Any]]:
    """``open_page(path, token=None)``: a fresh tab (own sessionStorage) at ``path``."""
    contexts: list[Any] = []

    def open_(path: str, token: str | None = None) -> Any:
        context = browser.new_context(
            viewport={"width": 1200, "height": 820}, accept_downloads=True
        )
        contexts.append(context)
        if token is not None:
            context.add_init_script(
                f"if (!sessionStorage.getItem('tunefleet.token')) "
                f"sessionStorage.setItem('tunefleet.token', '{token}')"
            )
        page = context.new_page()
        page.set_default_timeout(WAIT_MS)
        page.goto(site.url + path)
        return page

    yield open_
    for context in contexts:
        context.close()


def shot(page: Any, name: str) -> None:
    """A full-page screenshot, as a 64-colour PNG (a few tens of KB)."""
    from PIL import Image

    SHOTS.mkdir(parents=True, exist_ok=True)
    image = Image.open(io.BytesIO(page.screenshot(full_page=True)))
    image.convert("RGB").quantize(colors=64).save(SHOTS / f"{name}.png", optimize=True)


def test_login_then_the_empty_jobs_list(open_page: Callable[..., Any], site: Site) -> None:
    page = open_page("/")
    login = page.locator("#login")
    login.wait_for(state="visible")
    assert page.locator("#main").is_hidden()
    assert "Enter a token" in page.locator("#login-reason").inner_text()
    shot(page, "login")
    page.fill("#token", site.tokens["alpha"])
    page.click("#login-form button")
    page.locator("#jobs-empty").wait_for(state="visible")
    assert "No job yet for team alpha" in page.locator("#jobs-empty").inner_text()
    assert "team alpha · submit token" in page.locator("#who").inner_text()
    assert login.is_hidden()


def test_a_rejected_token_shows_the_login_with_the_reason(
    open_page: Callable[..., Any], site: Site
) -> None:
    page = open_page("/best", token="not-a-token")
    page.locator("#login").wait_for(state="visible")
    reason = page.locator("#login-reason").inner_text()
    assert reason.startswith("Token rejected: token unknown, revoked or expired"), reason
    assert page.locator("#main").is_hidden()
    assert page.evaluate("sessionStorage.getItem('tunefleet.token')") is None

    # A token revoked while the page is open: the next data request shows the login again.
    token_id, secret = make_token(site.database, "alpha", TokenScope.READ)
    page = open_page("/", token=secret)
    page.locator("#jobs-empty").wait_for(state="visible")
    with site.database.session() as s:
        assert repository.revoke_token(s, token_id)
    page.select_option("#status-filter", "done")
    page.locator("#login").wait_for(state="visible")
    assert "Token rejected" in page.locator("#login-reason").inner_text()


def test_the_progress_bar_advances_while_the_job_runs(
    open_page: Callable[..., Any], site: Site
) -> None:
    job_id = site.submit(trials=14)
    page = open_page("/", token=site.tokens["alpha"])
    bar = page.locator(f'#jobs tr[data-job-id="{job_id}"] progress')
    bar.wait_for()
    page.wait_for_function(
        "id => { const b = document.querySelector(`#jobs tr[data-job-id='${id}'] progress`);"
        " return b && Number(b.value) >= 2 && Number(b.value) < Number(b.max); }",
        arg=job_id,
        timeout=120_000,
    )
    first = float(bar.get_attribute("value") or 0)
    assert page.locator(f'#jobs tr[data-job-id="{job_id}"] .status').inner_text() == "running"
    assert page.locator(f'#jobs tr[data-job-id="{job_id}"] button.cancel').count() == 1
    shot(page, "jobs")
    # The bar moves without a reload: the row follows the job's events stream.
    page.wait_for_function(
        "([id, seen]) => Number(document.querySelector(`#jobs tr[data-job-id='${id}'] progress`)"
        ".value) > seen",
        arg=[job_id, first],
        timeout=120_000,
    )
    site.wait_done(job_id)
    page.wait_for_function(
        "id => document.querySelector(`#jobs tr[data-job-id='${id}'] .status`).textContent"
        " === 'done'",
        arg=job_id,
    )
    assert page.locator(f'#jobs tr[data-job-id="{job_id}"] button.cancel').count() == 0
    # A read token of another team sees none of alpha's jobs.
    other = open_page("/", token=site.tokens["beta"])
    other.locator("#jobs-empty").wait_for(state="visible")
    assert "No job yet for team beta" in other.locator("#jobs-empty").inner_text()


def test_the_job_page_draws_its_chart_and_sorts_its_trials(
    open_page: Callable[..., Any], site: Site
) -> None:
    job_id = site.jobs[0]
    page = open_page(f"/jobs/{job_id}", token=site.tokens["alpha"])
    page.locator("#chart canvas").first.wait_for()
    painted = page.evaluate(
        "() => { const c = document.querySelector('#chart canvas');"
        " const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
        " let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++; return n; }"
    )
    assert painted > 500, painted
    assert page.locator("#studies tbody tr").count() == 2
    assert "14/14" in page.locator("#studies tbody tr").first.inner_text()
    assert page.locator("#outcomes .bar").count() >= 1
    best = page.locator("#best").inner_text()
    assert "vs spec default" in best and "vs median trial" in best and "BLOCK_M" in best
    assert page.locator("#importance .bar").count() >= 1
    rows = page.locator("#trials tbody tr")
    assert rows.count() == 14
    page.click("#trials th[data-sort='time']")
    page.wait_for_selector("#trials th[data-sort='time'].asc")
    page.wait_for_function(
        "() => { const t = [...document.querySelectorAll('#trials tbody tr td:nth-child(4)')]"
        ".map(td => td.textContent).filter(x => x !== '–').map(Number);"
        " return t.length > 1 && t.every((v, i) => i === 0 || t[i - 1] <= v); }"
    )
    shot(page, "job")
    # Another team's job is not there for them.
    other = open_page(f"/jobs/{job_id}", token=site.tokens["beta"])
    other.locator("#studies-empty").wait_for(state="visible")
    assert f"No job {job_id} for team beta" in other.locator("#studies-empty").inner_text()


def test_best_configs_and_a_bundle_download_that_load_bundle_accepts(
    open_page: Callable[..., Any], site: Site, tmp_path: Path
) -> None:
    page = open_page("/best?kernel=matmul", token=site.tokens["beta"])
    table = page.locator("#best-table")
    table.wait_for()
    headers = table.locator("thead th").all_inner_texts()
    assert headers == ["Problem", *sorted(CLASSES)], headers
    row = table.locator("tbody tr").first.inner_text()
    assert "M=256,N=256,K=256,dtype=float16" in row
    assert f"team alpha · job {site.jobs[0]}" in row and " ms" in row
    shot(page, "best")
    page.select_option("#bundle-class", CLASSES[0])
    with page.expect_download() as info:
        page.click("#downloads button[data-format='native']")
    path = tmp_path / info.value.suggested_filename
    info.value.save_as(path)
    bundle = load_bundle(path)
    assert (bundle.kernel, bundle.device_class) == ("matmul", CLASSES[0])
    assert [e.problem for e in bundle.entries] == [
        {"M": 256, "N": 256, "K": 256, "dtype": "float16"}
    ]
    page.locator("#download-status").filter(has_text="Downloaded").wait_for()


def test_the_portability_heat_map(open_page: Callable[..., Any], site: Site) -> None:
    # A second job on H200 only: its budget is the 14 configs measured there (reused) and one
    # more, which warm start gives to A100's winner.
    h200, a100 = CLASSES
    site.wait_done(site.submit(trials=15, classes=(h200,)))
    page = open_page("/portability?kernel=matmul", token=site.tokens["beta"])
    heat = page.locator("#heatmap")
    heat.locator("td").first.wait_for()
    assert heat.locator("thead th").all_inner_texts()[1:] == [a100, h200]
    cells = heat.locator("tbody td").all_inner_texts()
    assert len(cells) == 4
    assert cells[0].startswith("own best") and cells[3].startswith("own best")
    # A100's winner on H200: slower than H200's own best, by a loss in percent.
    assert cells[1].startswith("+") and cells[1].split("%")[0] != "+0.0", cells[1]
    # H200's winner on A100: the loss where the sampler happened to measure it there, else the
    # cell says why there is none (the JSON view says which).
    r = httpx.get(
        f"{site.url}/v1/portability",
        params={"kernel": "matmul"},
        headers={"Authorization": f"Bearer {site.tokens['beta']}"},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    (cell,) = [c for c in r.json()["cells"] if (c["source"], c["target"]) == (h200, a100)]
    if cell["time_ms"] is None:
        assert cells[2].startswith(f"not valid on {a100}") or cells[2] == f"not measured on {a100}"
    else:
        shown = float(cells[2].split("%")[0])
        assert abs(shown - cell["loss_pct"]) <= 0.051, (cells[2], cell)
    shot(page, "portability")


def test_cancel_where_the_token_may(open_page: Callable[..., Any], site: Site) -> None:
    job_id = site.submit(trials=400, classes=CLASSES[1:])
    reader = make_token(site.database, "alpha", TokenScope.READ)[1]
    watcher = open_page(f"/jobs/{job_id}", token=reader)
    watcher.locator("#job-progress-text").filter(has_text="/400 trials").wait_for()
    assert watcher.locator("#cancel").is_hidden()  # a read token of the team: no cancel
    page = open_page(f"/jobs/{job_id}", token=site.tokens["alpha"])
    page.locator("#cancel").wait_for(state="visible")
    page.on("dialog", lambda dialog: dialog.accept())
    page.click("#cancel")
    page.locator("#job-status").filter(has_text="cancel").wait_for()
    deadline = time.monotonic() + 120
    while site.status(job_id) is not JobStatus.CANCELLED:
        assert time.monotonic() < deadline, site.status(job_id)
        time.sleep(0.3)
    # The watcher's page follows the events stream to the end.
    watcher.locator("#job-status").filter(has_text="cancelled").wait_for()


def test_an_unreachable_server_is_said_in_words(open_page: Callable[..., Any], site: Site) -> None:
    page = open_page("/", token=site.tokens["alpha"])
    page.locator("#jobs tbody tr").first.wait_for()
    page.route("**/v1/**", lambda route: route.abort())
    page.select_option("#status-filter", "running")
    banner = page.locator("#banner")
    banner.wait_for(state="visible")
    assert banner.inner_text().startswith("Server unreachable")


def test_a_busy_database_is_tried_again(open_page: Callable[..., Any], site: Site) -> None:
    page = open_page("/", token=site.tokens["alpha"])
    page.locator("#jobs tbody tr").first.wait_for()
    answered: list[int] = []

    def busy_once(route: Any) -> None:
        if answered:
            route.continue_()
            return
        answered.append(503)
        route.fulfill(
            status=503,
            content_type="application/json",
            body='{"error": "the database is unavailable; retry later", "detail": null}',
        )

    page.route("**/v1/jobs?*", busy_once)
    page.select_option("#status-filter", "done")
    banner = page.locator("#banner")
    banner.filter(has_text="database is busy").wait_for()
    banner.wait_for(state="hidden")  # the next try was answered
    page.locator("#jobs tbody tr").first.wait_for()
    assert answered == [503]
