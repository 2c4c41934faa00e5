"""``POST /v1/jobs/{id}/resume`` and ``GET /v1/jobs/{id}/plot`` through a real server on SQLite
and PostgreSQL: a failed, cancelled or stalled job goes back to the queue (error and cancel
request cleared, audited); a done job and a live lease are refused with 409 and one line; another
team's job is the same 404 as a missing one; a read token may not resume."""

from __future__ import annotations

import time

from db import Database, JobStatus, repository
from tests.server.conftest import MATMUL_PROBLEMS, Api, job_body, seed_best


def _submit(api: Api, who: str = "alpha") -> int:
    response = api.call(who, "POST", "/v1/jobs", json=job_body())
    assert response.status_code == 201, response.text
    return int(response.json()["id"])


def _status(db: Database, job_id: int) -> JobStatus:
    with db.session(readonly=True) as s:
        return repository.get_job(s, job_id).status


def test_failed_cancelled_and_stalled_jobs_go_back_to_the_queue(api: Api, db: Database) -> None:
    failed, cancelled, stalled = _submit(api), _submit(api), _submit(api)
    with db.session() as s:
        repository.set_job_status(s, failed, JobStatus.RUNNING)
        repository.set_job_status(s, failed, JobStatus.FAILED, "no worker of class X")
        repository.set_job_status(s, stalled, JobStatus.RUNNING)
        repository.acquire_lease(s, stalled, "dead-driver", 0.05)
        repository.request_cancel(s, stalled)  # asked while its driver was dead
    assert api.call("alpha", "POST", f"/v1/jobs/{cancelled}/cancel").status_code == 200
    time.sleep(0.1)  # the dead driver's lease expires
    for job_id in (failed, cancelled, stalled):
        response = api.call("alpha", "POST", f"/v1/jobs/{job_id}/resume")
        assert response.status_code == 200, response.text
        view = response.json()
        assert (view["id"], view["status"], view["error"]) == (job_id, "queued", None)
        assert view["cancel_requested"] is False
        assert _status(db, job_id) is JobStatus.QUEUED
    again = api.call("alpha", "POST", f"/v1/jobs/{failed}/resume")  # queued: left as it is
    assert again.status_code == 200 and again.json()["status"] == "queued"
    with db.session(readonly=True) as s:
        audited = {(a.action, a.target, a.team) for a in repository.list_audit(s)}
    assert ("job.resume", f"job {failed}", "alpha") in audited


def test_a_done_job_and_a_live_lease_are_refused_with_one_line(api: Api, db: Database) -> None:
    done = seed_best(db, "alpha", MATMUL_PROBLEMS)
    refused = api.call("alpha", "POST", f"/v1/jobs/{done}/resume")
    assert refused.status_code == 409
    assert refused.json()["error"] == f"job {done} is already done; submit a new job to tune more"
    running = _submit(api)
    with db.session() as s:
        repository.set_job_status(s, running, JobStatus.RUNNING)
        repository.acquire_lease(s, running, "live-driver", 60)
    refused = api.call("alpha", "POST", f"/v1/jobs/{running}/resume")
    assert refused.status_code == 409, refused.text
    assert "its lease is live" in refused.json()["error"]
    assert "\n" not in refused.json()["error"]
    assert _status(db, running) is JobStatus.RUNNING
    with db.session(readonly=True) as s:
        assert repository.lease_live(s, running)  # untouched


def test_another_teams_job_is_the_same_404_and_a_read_token_is_403(api: Api, db: Database) -> None:
    theirs = _submit(api, "beta")
    with db.session() as s:
        repository.set_job_status(s, theirs, JobStatus.CANCELLED)
    foreign = api.call("alpha", "POST", f"/v1/jobs/{theirs}/resume")
    missing = api.call("alpha", "POST", "/v1/jobs/999/resume")
    assert foreign.status_code == missing.status_code == 404
    assert foreign.json()["error"] == missing.json()["error"].replace("999", str(theirs))
    assert api.call("alpha_read", "POST", f"/v1/jobs/{theirs}/resume").status_code == 403
    assert _status(db, theirs) is JobStatus.CANCELLED
    assert api.call("admin", "POST", f"/v1/jobs/{theirs}/resume").json()["status"] == "queued"
    assert api.call("alpha", "GET", f"/v1/jobs/{theirs}/plot").status_code == 404


def test_plot_data_lists_each_studys_trials(api: Api, db: Database) -> None:
    job_id = seed_best(db, "alpha", MATMUL_PROBLEMS)
    response = api.call("alpha_read", "GET", f"/v1/jobs/{job_id}/plot")
    assert response.status_code == 200, response.text
    data = response.json()
    assert data["job_id"] == job_id
    assert [s["problem"] for s in data["studies"]] == MATMUL_PROBLEMS
    assert [[t["median_ms"] for t in s["trials"]] for s in data["studies"]] == [[0.01], [0.02]]
    assert {t["outcome"] for s in data["studies"] for t in s["trials"]} == {"ok"}
