"""One view of a study everywhere: a real job (``tunefleet tune`` on Triton's interpreter, whose
final re-timing picks a winner other than the fastest trial), then a real server on the same
SQLite file, and the same best time, backend and speedups through ``job --json``, ``best --json``,
the API and the page in headless Chromium; a cancelled job's result is marked in all of them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from db import Database, JobStatus, TrialOutcome, repository
from db.models import TokenScope
from orchestrator.app.jobs import cancel_job
from orchestrator.server.app import create_app
from search_spaces.problem import problem_key
from search_spaces.registry import get_spec
from search_spaces.space import config_key
from tests.server.conftest import CLI, ROOT, LiveServer, make_token

CHROMIUM = "/usr/bin/chromium"
PROBLEM = "M=64,N=64,K=64,dtype=float16"
#: The cancelled job's problem: a key of its own, so its fastest trial becomes that key's best.
OTHER = {"M": 32, "N": 32, "K": 32, "dtype": "float16"}
WAIT_MS = 60_000

pytestmark = pytest.mark.timeout(600)

sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")


def _cli(*args: str) -> Any:
    done = subprocess.run(
        [*CLI, *args], cwd=ROOT, capture_output=True, text=True, timeout=300, env=os.environ
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def _cancelled_job(database: Database, team: str) -> int:
    """A job of ``team`` on OTHER with one ``ok`` trial on class ``cpu``, cancelled while no
    driver runs it (so its fastest trial is promoted, not re-timed); its id."""
    spec = get_spec("matmul")
    with database.session(readonly=True) as s:
        done = repository.get_job(s, 1)
        (study,) = repository.studies_for_job(s, 1)
        trials = repository.trials_for_study(s, study.id)
        config = next(t.config for t in trials if t.outcome is TrialOutcome.OK)
    key = problem_key(spec.validate_problem(OTHER))
    with database.session() as s:
        kernel_id = repository.ensure_kernel(s, spec.name, spec.version_hash(), spec.space.hash())
        job_spec = {**done.spec, "problems": [OTHER], "team": team}
        job_id = repository.create_job(s, kernel_id, job_spec, team)
        repository.set_job_status(s, job_id, JobStatus.RUNNING)
        study_id = repository.ensure_study(
            s, job_id, kernel_id, key, OTHER, study.device_class.id, "local", f"job{job_id}"
        )
        repository.record_trial(
            s,
            kernel_id=kernel_id,
            problem_key=key,
            device_class_id=study.device_class.id,
            config=config,
            config_key=config_key(config),
            outcome="ok",
            job_id=job_id,
            study_id=study_id,
            median_ms=1.5,
        )
    cancel_job(database, job_id)
    return job_id


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if shutil.which(CHROMIUM) is None:
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium (.ci/run does)")
    with sync_api.sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield launched
        launched.close()


def _page(browser: Any, url: str, token: str) -> Any:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.add_init_script(f"sessionStorage.setItem('tunefleet.token', '{token}')")
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    page.goto(url)
    return page


def _ms(value: float) -> float:
    """``value`` as the page prints it (4 significant digits), read back."""
    return float(f"{value:.4g}")


def test_job_best_api_and_page_report_one_best(tmp_path: Path, browser: Any) -> None:
    url = f"sqlite:///{tmp_path / 'one.db'}"
    ran = _cli(
        "tune", "matmul", "-p", PROBLEM, "--trials", "6", "--device", "interpreter",
        "--team", "alpha", "--db", url, "--json",
    )  # fmt: skip
    job_id = int(ran["job"])
    database = Database(url)
    cancelled = _cancelled_job(database, "alpha")

    job = _cli("job", str(job_id), "--db", url, "--json")
    (study,) = job["studies"]
    best_cli = _cli("best", "matmul", "--db", url, "--json")["best"]
    (best,) = [b for b in best_cli if b["job"] == job_id]
    # The decided best is the key's row: the re-timed winner, not the fastest trial.
    assert study["best_source"] == "decided" and study["best_job"] == job_id
    assert study["best_ms"] == best["time_ms"] == job["best_ms"]
    assert study["backend"] == best["backend"] and study["best_config"] == best["config"]
    assert study["speedup_vs_default"] == best["speedup_vs_default"] is not None
    assert study["speedup_vs_vendor"] == best["speedup_vs_vendor"] is not None
    assert ran["studies"][0]["best"]["time_ms"] == best["time_ms"]
    listed = _cli("jobs", "--db", url, "--json")["jobs"]
    assert [j["best_ms"] for j in listed if j["job"] == job_id] == [best["time_ms"]]
    assert ran["studies"][0]["speedup_vs_default"] == best["speedup_vs_default"]

    # The cancelled job's result is marked in `job` and `best` alike.
    other = _cli("job", str(cancelled), "--db", url, "--json")["studies"][0]
    (marked,) = [b for b in best_cli if b["job"] == cancelled]
    assert other["cancelled_job"] and other["best_ms"] == marked["time_ms"] == 1.5
    assert marked["cancelled_job"] and not best["cancelled_job"]

    _, token = make_token(database, "alpha", TokenScope.READ)
    headers = {"Authorization": f"Bearer {token}"}
    with LiveServer(create_app(database)) as live:
        with httpx.Client(base_url=live.url, headers=headers, timeout=30) as api:
            detail = api.get(f"/v1/jobs/{job_id}").json()
            assert detail["studies"] == job["studies"] and detail["best_ms"] == job["best_ms"]
            served = api.get("/v1/best", params={"kernel": "matmul", "problem": PROBLEM}).json()
            (entry,) = served["best"]
            assert entry["time_ms"] == best["time_ms"] and entry["backend"] == best["backend"]
            assert entry["speedup_vs_default"] == best["speedup_vs_default"]
            assert entry["speedup_vs_vendor"] == best["speedup_vs_vendor"]
            analysis = api.get(f"/v1/jobs/{job_id}/studies/{study['id']}").json()
            assert analysis["best_ms"] == best["time_ms"]
            assert analysis["speedup_vs_default"] == best["speedup_vs_default"]
            assert analysis["speedup_vs_vendor"] == best["speedup_vs_vendor"]
            assert analysis["default_ms"] == best["default_ms"] is not None
            assert analysis["fastest_trial_ms"] != analysis["best_ms"]

        page = _page(browser, f"{live.url}/jobs/{job_id}", token)
        page.locator("#best .best-kv").wait_for()
        row = page.locator("#studies tbody tr td.best-ms").first.inner_text()
        assert float(row) == _ms(best["time_ms"])
        card = dict(
            (r.locator("th").inner_text(), r.locator("td").inner_text())
            for r in page.locator("#best .best-kv tr").all()
        )
        assert float(card["time (re-timed winner)"].removesuffix(" ms")) == _ms(best["time_ms"])
        assert card["vs spec default"].startswith(f"{best['speedup_vs_default']:.2f}x"), card
        assert card["vs vendor"].startswith(f"{best['speedup_vs_vendor']:.2f}x"), card
        backend = f"vendor ({best['vendor']})" if best["backend"] == "vendor" else "triton"
        assert card["backend"] == backend

        page = _page(browser, f"{live.url}/best?kernel=matmul", token)
        page.locator("#best-table td.best-cell").first.wait_for()
        cells = page.locator("#best-table td.best-cell").all_inner_texts()
        (mine,) = [c for c in cells if f"job {job_id}" in c]
        assert float(mine.split(" ms")[0]) == _ms(best["time_ms"])
        assert f"vs default {best['speedup_vs_default']:.2f}x" in mine
        assert f"job {job_id}*" not in mine
        (theirs,) = [c for c in cells if f"job {cancelled}" in c]
        assert f"job {cancelled}*" in theirs
        note = page.locator("#best-note").inner_text()
        assert note.startswith(f"* from cancelled job {cancelled}: its fastest trial so far")
