"""The HTTP API through a real server on SQLite and PostgreSQL: tokens and scopes, teams, shared
best configs and bundles, progress events, metrics and the audit trail."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from db import JobStatus, repository
from db.models import Token, TokenScope, utcnow
from orchestrator.server.app import PROGRESS_TTL_S
from orchestrator.server.auth import REMEMBER_S
from orchestrator.server.cache import VERSION_TTL_S
from search_spaces.bundle import load_bundle
from search_spaces.problem import problem_key
from search_spaces.registry import get_spec
from search_spaces.space import Vendor
from tests.server.conftest import (
    CLASS_KEY,
    MATMUL_PROBLEMS,
    TRITON_MINOR,
    Api,
    ServerFactory,
    job_body,
    make_token,
    seed_best,
    sse_events,
)


def _audit(api: Api) -> list[repository.AuditRecord]:
    with api.database.session(readonly=True) as s:
        return repository.list_audit(s)


def test_healthz_needs_no_token_and_everything_else_does(api: Api) -> None:
    assert api.call(None, "GET", "/healthz").json() == {"status": "ok"}
    for method, path in (
        ("GET", "/v1/jobs"),
        ("POST", "/v1/jobs"),
        ("GET", "/v1/kernels"),
        ("GET", "/v1/best?kernel=matmul"),
        ("GET", "/v1/bundles/matmul"),
        ("GET", "/metrics"),
        ("GET", "/v1/tokens"),
    ):
        r = api.call(None, method, path)
        assert r.status_code == 401, (path, r.text)
        assert r.headers["www-authenticate"] == "Bearer"
        assert set(r.json()) == {"error", "detail"}


def test_a_token_check_never_waits_for_a_writer_and_its_use_is_stamped_after(api: Api) -> None:
    token_id, token = make_token(api.database, "alpha", TokenScope.READ)
    headers = {"Authorization": f"Bearer {token}"}
    with api.database.session() as s:  # a writer (a running job) holds the lock and the row
        s.get(Token, token_id, with_for_update=True)
        r = api.call(None, "GET", "/v1/whoami", headers=headers, timeout=10)
        assert r.status_code == 200, r.text
        with api.database.session(readonly=True) as read:
            assert repository.verify_token(read, token).last_used_at is None  # type: ignore[union-attr]
    deadline = time.monotonic() + 20
    while True:  # the stamp, written apart from the request, lands once the writer is done
        with api.database.session(readonly=True) as read:
            record = repository.verify_token(read, token)
        assert record is not None
        if record.last_used_at is not None:
            break
        assert time.monotonic() < deadline, "the token's use was never stamped"
        time.sleep(0.05)


def test_unknown_revoked_and_expired_tokens_get_401(api: Api) -> None:
    assert api.call("alpha", "GET", "/v1/jobs").status_code == 200
    _, expired = make_token(api.database, "alpha", TokenScope.ADMIN, utcnow() - timedelta(1))
    revoked_id, revoked = make_token(api.database, "alpha", TokenScope.ADMIN)
    assert api.call(
        None, "GET", "/v1/jobs", headers={"Authorization": f"Bearer {revoked}"}
    ).is_success
    with api.database.session() as s:
        assert repository.revoke_token(s, revoked_id)
    time.sleep(REMEMBER_S)  # what a server reuses of a check it made
    for header in (
        f"Bearer {expired}",
        f"Bearer {revoked}",
        "Bearer not-a-token",
        f"Basic {api.tokens['admin'][1]}",
        "Bearer " + "x" * 5000,
    ):
        r = api.call(None, "GET", "/v1/jobs", headers={"Authorization": header})
        assert r.status_code == 401, (header[:20], r.text)
        assert r.json()["error"]


def test_scopes_teams_and_the_audit_trail(api: Api) -> None:
    denied = api.call("alpha_read", "POST", "/v1/jobs", json=job_body())
    assert denied.status_code == 403, denied.text
    assert "submit" in denied.json()["error"]

    created = api.call("alpha", "POST", "/v1/jobs", json=job_body(priority=5))
    assert created.status_code == 201, created.text
    job = created.json()
    assert (job["team"], job["status"], job["priority"]) == ("alpha", "queued", 5)
    assert created.headers["location"] == f"/v1/jobs/{job['id']}"
    other = api.call("beta", "POST", "/v1/jobs", json=job_body()).json()

    # Submitting for another team is refused; an admin may.
    assert api.call("alpha", "POST", "/v1/jobs", json=job_body(team="beta")).status_code == 403
    assert (
        api.call("admin", "POST", "/v1/jobs", json=job_body(team="beta")).json()["team"] == "beta"
    )

    # beta cannot cancel alpha's job (nor learn it exists); alpha can; a finished job cannot be
    # cancelled again.
    r = api.call("beta", "POST", f"/v1/jobs/{job['id']}/cancel")
    assert r.status_code == 404, r.text
    r = api.call("alpha_read", "POST", f"/v1/jobs/{job['id']}/cancel")
    assert r.status_code == 403, r.text
    r = api.call("alpha", "POST", f"/v1/jobs/{job['id']}/cancel")
    assert r.status_code == 200 and r.json()["status"] == "cancelled", r.text
    assert api.call("alpha", "POST", f"/v1/jobs/{job['id']}/cancel").status_code == 409
    # An admin cancels any team's job.
    r = api.call("admin", "POST", f"/v1/jobs/{other['id']}/cancel")
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    assert api.call("admin", "POST", "/v1/jobs/999999/cancel").status_code == 404

    alpha_id = api.tokens["alpha"][0]
    entries = [
        (e.action, e.token_id, e.team, e.target, (e.detail or {}).get("status"))
        for e in _audit(api)
    ]
    assert ("job.submit", alpha_id, "alpha", "matmul", 200) in entries
    assert ("job.cancel", alpha_id, "alpha", f"job {job['id']}", 200) in entries
    assert ("job.cancel", api.tokens["beta"][0], "beta", f"job {job['id']}", 404) in entries
    assert ("job.submit", alpha_id, "alpha", "matmul", 403) in entries  # for team beta
    assert (
        "job.cancel",
        api.tokens["admin"][0],
        "ops",
        f"job {other['id']}",
        200,
    ) in entries
    denials = [e for e in _audit(api) if e.action == "request.denied"]
    assert {e.token_id for e in denials} == {api.tokens["alpha_read"][0]}


def test_each_team_sees_only_its_own_jobs(api: Api) -> None:
    mine = [api.call("alpha", "POST", "/v1/jobs", json=job_body()).json()["id"] for _ in range(3)]
    theirs = api.call("beta", "POST", "/v1/jobs", json=job_body()).json()["id"]

    page = api.call("alpha_read", "GET", "/v1/jobs", params={"limit": 2}).json()
    assert page["total"] == 3 and [j["id"] for j in page["items"]] == mine[::-1][:2]
    page = api.call("alpha_read", "GET", "/v1/jobs", params={"limit": 2, "offset": 2}).json()
    assert [j["id"] for j in page["items"]] == [mine[0]]
    # Keyset paging: the page's next_before gives the next page; beta's job never shows.
    first = api.call("alpha", "GET", "/v1/jobs", params={"limit": 2}).json()
    assert first["next_before"] == mine[1]
    last = api.call("alpha", "GET", "/v1/jobs", params={"limit": 2, "before": mine[1]}).json()
    assert [j["id"] for j in last["items"]] == [mine[0]] and last["next_before"] is None
    assert last["total"] == 3
    assert api.call("alpha", "GET", "/v1/jobs", params={"before": 0}).status_code == 422
    assert [j["id"] for j in api.call("beta", "GET", "/v1/jobs").json()["items"]] == [theirs]
    assert api.call("alpha", "GET", "/v1/jobs", params={"team": "beta"}).status_code == 403
    assert api.call("alpha", "GET", f"/v1/jobs/{theirs}").status_code == 404
    assert api.call("alpha", "GET", f"/v1/jobs/{theirs}/events").status_code == 404
    detail = api.call("beta", "GET", f"/v1/jobs/{theirs}").json()
    assert detail["id"] == theirs and detail["team"] == "beta" and "studies" in detail

    every = api.call("admin", "GET", "/v1/jobs").json()
    assert every["total"] == 4
    only_beta = api.call("admin", "GET", "/v1/jobs", params={"team": "beta"}).json()
    assert [j["id"] for j in only_beta["items"]] == [theirs]
    filtered = api.call("alpha", "GET", "/v1/jobs", params={"status": "done"}).json()
    assert filtered["total"] == 0
    assert api.call("alpha", "GET", "/v1/jobs", params={"status": "nope"}).status_code == 422


def test_a_foreign_job_or_study_is_the_same_404_as_a_missing_one(api: Api) -> None:
    theirs = seed_best(api.database, "beta", MATMUL_PROBLEMS[:1])
    study = api.call("beta", "GET", f"/v1/jobs/{theirs}").json()["studies"][0]["id"]
    missing = theirs + 1000
    for foreign_path, missing_path, method in (
        (f"/v1/jobs/{theirs}", f"/v1/jobs/{missing}", "GET"),
        (f"/v1/jobs/{theirs}/events", f"/v1/jobs/{missing}/events", "GET"),
        (f"/v1/jobs/{theirs}/cancel", f"/v1/jobs/{missing}/cancel", "POST"),
        (f"/v1/jobs/{theirs}/studies/{study}", f"/v1/jobs/{missing}/studies/{study}", "GET"),
        (
            f"/v1/jobs/{theirs}/studies/{study}/trials",
            f"/v1/jobs/{missing}/studies/{study}/trials",
            "GET",
        ),
    ):
        foreign = api.call("alpha", method, foreign_path)
        gone = api.call("alpha", method, missing_path)
        assert foreign.status_code == gone.status_code == 404, (foreign_path, foreign.text)
        # The same body but for the id asked for.
        assert gone.text.replace(str(missing), "ID") == foreign.text.replace(str(theirs), "ID")
    assert api.call("beta", "GET", f"/v1/jobs/{theirs}").json()["status"] == "done"


def test_best_configs_and_bundles_are_shared_across_teams(api: Api, tmp_path: Path) -> None:
    job_id = seed_best(api.database, "alpha", MATMUL_PROBLEMS)
    r = api.call("beta", "GET", "/v1/best", params={"kernel": "matmul"})
    assert r.status_code == 200, r.text
    best = r.json()["best"]
    assert len(best) == 2
    assert {(b["team"], b["job_id"], b["device_class"]) for b in best} == {
        ("alpha", job_id, CLASS_KEY)
    }
    one = api.call(
        "beta",
        "GET",
        "/v1/best",
        params={
            "kernel": "matmul",
            "problem": "M=32,N=32,K=32,dtype=float16",
            "device_class": "H200",
        },
    ).json()["best"]
    assert [b["problem"]["M"] for b in one] == [32]

    r = api.call("beta", "GET", "/v1/bundles/matmul", params={"device_class": CLASS_KEY})
    assert r.status_code == 200, r.text
    disposition = r.headers["content-disposition"]
    assert disposition.startswith('attachment; filename="matmul-NVIDIA_H200-triton3.6')
    path = tmp_path / "bundle.json"
    path.write_bytes(r.content)
    bundle = load_bundle(path)
    assert bundle.kernel == "matmul" and len(bundle.entries) == 2
    assert {e.job for e in bundle.entries} == {job_id}

    py = api.call("alpha_read", "GET", "/v1/bundles/matmul", params={"format": "triton"})
    assert py.status_code == 200 and "CONFIGS = [" in py.text
    assert (
        api.call("beta", "GET", "/v1/bundles/matmul", params={"format": "vllm"}).status_code == 422
    )
    assert (
        api.call("beta", "GET", "/v1/bundles/matmul", params={"format": "xml"}).status_code == 422
    )
    missing = api.call("beta", "GET", "/v1/bundles/rmsnorm")
    assert missing.status_code == 422 and "no best configs" in missing.json()["error"]


def test_events_stream_progress_until_the_job_ends(api: Api) -> None:
    job_id = api.call("alpha", "POST", "/v1/jobs", json=job_body()).json()["id"]
    with (
        api.client("alpha_read") as reader,
        reader.stream("GET", f"/v1/jobs/{job_id}/events", params={"interval_s": 0.2}) as stream,
    ):
        assert stream.headers["content-type"].startswith("text/event-stream")
        events = sse_events(stream.iter_lines())
        kind, first = next(events)
        assert (kind, first["id"], first["status"]) == ("progress", job_id, "queued")
        assert api.call("alpha", "POST", f"/v1/jobs/{job_id}/cancel").status_code == 200
        kind, update = next(events)
        assert (kind, update["status"]) == ("progress", "cancelled")
        assert next(events) == ("end", {"status": "cancelled"})


def test_kernels_space_and_device_classes(api: Api) -> None:
    kernels = api.call("alpha_read", "GET", "/v1/kernels").json()["kernels"]
    assert "matmul" in {k["name"] for k in kernels}
    space = api.call(
        "alpha_read", "GET", "/v1/kernels/matmul/space", params={"device_class": "H200"}
    )
    assert space.status_code == 200, space.text
    assert space.json()["device_class"] == "NVIDIA H200" and space.json()["valid"] > 0
    assert (
        api.call("alpha_read", "GET", "/v1/kernels/nokernel/space?device_class=H200").status_code
        == 400
    )
    unknown = api.call("alpha_read", "GET", "/v1/kernels/matmul/space?device_class=Z9000")
    assert unknown.status_code == 422, unknown.text
    classes = api.call("alpha_read", "GET", "/v1/device-classes").json()
    assert classes == {"device_classes": [], "scheduler": False}


def test_metrics(api: Api) -> None:
    api.call("alpha", "POST", "/v1/jobs", json=job_body())
    seed_best(api.database, "alpha", MATMUL_PROBLEMS)
    text = api.call("alpha_read", "GET", "/metrics").text
    assert "tunefleet_queue_length 1.0" in text
    assert "tunefleet_running_jobs 0.0" in text
    assert 'tunefleet_trials_per_minute{outcome="ok"} 2.0' in text
    assert (
        'tunefleet_http_request_duration_seconds_count{method="POST",route="/v1/jobs",status="201"} 1.0'
        in text
    )


def test_admin_manages_tokens_over_http(api: Api) -> None:
    assert api.call("alpha", "GET", "/v1/tokens").status_code == 403
    r = api.call(
        "admin", "POST", "/v1/tokens", json={"team": "gamma", "scope": "read", "expires_days": 1}
    )
    assert r.status_code == 201, r.text
    created = r.json()
    assert created["team"] == "gamma" and len(created["token"]) >= 40
    headers = {"Authorization": f"Bearer {created['token']}"}
    assert api.call(None, "GET", "/v1/jobs", headers=headers).json()["total"] == 0
    listed = api.call("admin", "GET", "/v1/tokens").json()["tokens"]
    assert created["id"] in {t["id"] for t in listed}
    assert all("token" not in t for t in listed)
    assert api.call("admin", "POST", f"/v1/tokens/{created['id']}/revoke").status_code == 200
    assert api.call(None, "GET", "/v1/jobs", headers=headers).status_code == 401
    assert api.call("admin", "POST", f"/v1/tokens/{created['id']}/revoke").status_code == 404
    bad_team = api.call("admin", "POST", "/v1/tokens", json={"team": "../x", "scope": "read"})
    assert bad_team.status_code == 400
    actions = [(e.action, e.target) for e in _audit(api)]
    assert ("token.create", "team gamma") in actions
    assert ("token.revoke", f"token {created['id']}") in actions


def test_openapi_always_and_the_docs_pages_only_when_asked(serve: ServerFactory) -> None:
    api = serve()
    doc = api.call(None, "GET", "/openapi.json").json()
    assert {"/v1/jobs", "/v1/jobs/{job_id}/events", "/v1/bundles/{kernel}", "/metrics"} <= set(
        doc["paths"]
    )
    assert "HTTPBearer" in doc["components"]["securitySchemes"]
    # /docs and /redoc (their assets served here, tests/server/test_docs.py): off by default.
    for page in ("/docs", "/redoc"):
        assert "cdn" not in api.call(None, "GET", page).text.lower()
    assert "swagger" in serve(docs=True).call(None, "GET", "/docs").text.lower()


def _soon(read: Callable[[], object], expected: object, ttl_s: float) -> bool:
    """Whether ``read()`` gives ``expected`` within a refresh after ``ttl_s`` (a cache that
    answers the old value while it refreshes gives the new one on a later request)."""
    time.sleep(ttl_s)
    deadline = time.monotonic() + 2.0
    while read() != expected:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_cached_answers_follow_the_database(api: Api) -> None:
    job_id = seed_best(api.database, "alpha", MATMUL_PROBLEMS[:1])
    params = {"kernel": "matmul", "problem": "M=16,N=16,K=16,dtype=float16"}
    assert [
        b["time_ms"] for b in api.call("beta", "GET", "/v1/best", params=params).json()["best"]
    ] == [0.01]
    first = api.call("beta", "GET", "/v1/bundles/matmul")
    etag = first.headers["etag"]
    unchanged = api.call("beta", "GET", "/v1/bundles/matmul", headers={"If-None-Match": etag})
    assert unchanged.status_code == 304 and unchanged.content == b""

    # Another writer (a scheduler on some server) promotes a faster config and adds a problem.
    seed_best(api.database, "beta", [{**MATMUL_PROBLEMS[0]}, MATMUL_PROBLEMS[1]])
    with api.database.session() as s:
        spec = get_spec("matmul")
        key = problem_key(spec.validate_problem(MATMUL_PROBLEMS[0]))
        config = spec.default_config(Vendor.NVIDIA)
        assert repository.upsert_best(
            s,
            "matmul",
            spec.version_hash(),
            key,
            repository.ensure_device_class(s, CLASS_KEY, "nvidia", CLASS_KEY, "sm_90"),
            TRITON_MINOR,
            config,
            0.005,
            None,
            job_id,
            None,
        )

    def best() -> list[tuple[float, int]]:
        found = api.call("beta", "GET", "/v1/best", params=params).json()["best"]
        return [(b["time_ms"], b["job_id"]) for b in found]

    assert _soon(best, [(0.005, job_id)], VERSION_TTL_S)
    changed = api.call("beta", "GET", "/v1/bundles/matmul", headers={"If-None-Match": etag})
    assert changed.status_code == 200 and changed.headers["etag"] != etag
    assert len(json.loads(changed.content)["entries"]) == 2

    # A job's progress is reused for a moment only.
    job = api.call("alpha", "POST", "/v1/jobs", json=job_body()).json()["id"]
    assert api.call("alpha", "GET", f"/v1/jobs/{job}").json()["status"] == "queued"
    with api.database.session() as s:
        repository.set_job_status(s, job, JobStatus.CANCELLED)

    def status() -> str:
        return str(api.call("alpha", "GET", f"/v1/jobs/{job}").json()["status"])

    assert _soon(status, "cancelled", PROGRESS_TTL_S)


def test_a_study_s_trials_page_by_page(api: Api) -> None:
    job_id = seed_best(api.database, "alpha", MATMUL_PROBLEMS)
    study = api.call("alpha", "GET", f"/v1/jobs/{job_id}").json()["studies"][1]
    path = f"/v1/jobs/{job_id}/studies/{study['id']}/trials"
    page = api.call("alpha_read", "GET", path, params={"sort": "time", "limit": 10}).json()
    assert page["total"] == 1 and page["items"][0]["outcome"] == "ok"
    assert page["items"][0]["median_ms"] == study["best_ms"]
    assert api.call("beta", "GET", path).status_code == 404
    assert api.call("alpha", "GET", f"/v1/jobs/{job_id}/studies/999999/trials").status_code == 404
    assert api.call("alpha", "GET", path, params={"sort": "name"}).status_code == 422
