"""The door's contract: one test class run against both implementations of
:class:`orchestrator.app.protocol.Door` over the same database (SQLite and PostgreSQL): the local
door in this process, and the HTTP client of a real server (uvicorn on loopback) with an admin
token. Then what only the remote door refuses, before any request."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from db import Database, JobStatus, repository
from db.models import TokenScope
from orchestrator.app.client import Client
from orchestrator.app.local import LocalDoor
from orchestrator.app.protocol import Door, RunHere
from orchestrator.app.tokens import TokenState
from orchestrator.errors import InvalidRequest, NotFound, NotRemote, OrchestratorError
from orchestrator.run.jobs import JobSpec
from search_spaces.registry import get_spec
from tests.server.conftest import MATMUL_PROBLEMS, ServerFactory, seed_best, serve  # noqa: F401

TINY = "M=16,N=16,K=16,dtype=float16"


def _spec(team: str = "alpha") -> JobSpec:
    return JobSpec.from_mapping({"kernel": "matmul", "problems": [TINY], "team": team})


@pytest.fixture(params=["local", "remote"])
def door(
    request: pytest.FixtureRequest,
    db: Database,
    serve: ServerFactory,  # noqa: F811 (the fixture imported above)
) -> Iterator[Door]:
    """The local door on ``db``, or a client of a server on ``db`` with an admin token."""
    chosen: Door
    if request.param == "local":
        url = db.engine.url.render_as_string(hide_password=False)
        chosen = LocalDoor(lambda: Database(url))
    else:
        api = serve()
        chosen = Client(api.url, api.tokens["admin"][1])
    with chosen:
        yield chosen


class TestDoorContract:
    """What every door answers, the same way."""

    def test_submit_list_show_cancel(self, door: Door) -> None:
        detail = door.submit(_spec(), priority=2)
        job_id = detail.job.id
        assert (detail.job.status, detail.job.team, detail.job.priority) == (
            JobStatus.QUEUED,
            "alpha",
            2,
        )
        assert door.job(job_id).to_dict() == detail.to_dict()
        door.submit(_spec("beta"))
        page = door.jobs(team="alpha", status=JobStatus.QUEUED)
        assert [j.id for j in page.items] == [job_id] and page.total == 1
        assert door.cancel(job_id).status is JobStatus.CANCELLED
        with pytest.raises(OrchestratorError, match="already cancelled"):
            door.cancel(job_id)

    def test_a_missing_job_is_not_found_everywhere(self, door: Door) -> None:
        for call in (door.job, door.cancel, door.resume, door.plot_data):
            with pytest.raises(NotFound, match="no job 999"):
                call(999)

    def test_a_done_job_is_not_resumed(self, door: Door, db: Database) -> None:
        job_id = seed_best(db, "alpha", MATMUL_PROBLEMS)
        with pytest.raises(OrchestratorError, match=f"job {job_id} is already done"):
            door.resume(job_id)
        assert door.job(job_id).job.status is JobStatus.DONE

    def test_best_bundle_and_plot_data(self, door: Door, db: Database) -> None:
        job_id = seed_best(db, "alpha", MATMUL_PROBLEMS)
        spec = get_spec("matmul")
        found = door.best("matmul")
        assert (found.kernel, found.kernel_version) == ("matmul", spec.version_hash())
        assert sorted(b.time_ms for b in found.items) == [0.01, 0.02]
        assert {(b.team, b.job_id) for b in found.items} == {("alpha", job_id)}
        (one,) = door.best("matmul", problem="M=32,N=32,K=32,dtype=float16").items
        assert one.time_ms == 0.02
        (bundle,) = door.bundle_files("matmul")
        assert len(json.loads(bundle.content)["entries"]) == 2
        plot = door.plot_data(job_id)
        assert plot.job_id == job_id
        assert [len(st.trials) for st in plot.studies] == [1, 1]
        assert {st.trials[0].median_ms for st in plot.studies} == {0.01, 0.02}

    def test_tokens_create_list_revoke_with_their_audit_rows(
        self, door: Door, db: Database
    ) -> None:
        created = door.create_token("gamma", TokenScope.READ, expires_days=1, name="ci")
        assert len(created.secret) >= 40 and created.token.state is TokenState.ACTIVE
        assert created.token.expires_at is not None
        listed = {t.id: t for t in door.tokens()}
        assert listed[created.token.id].team == "gamma"
        assert created.secret not in json.dumps([t.to_dict() for t in listed.values()])
        door.revoke_token(created.token.id)
        assert {t.id: t for t in door.tokens()}[created.token.id].state is TokenState.REVOKED
        with pytest.raises(NotFound, match=f"no active token {created.token.id}"):
            door.revoke_token(created.token.id)
        with db.session(readonly=True) as s:
            done = [  # a server also audits the refused revoke (its status, no via)
                (a.action, a.target, a.detail["via"])
                for a in repository.list_audit(s)
                if a.detail and "via" in a.detail
            ]
        via = "api" if isinstance(door, Client) else "cli"
        assert done == [
            ("token.revoke", f"token {created.token.id}", via),
            ("token.create", "team gamma", via),
        ]


def test_the_server_refuses_what_runs_here_before_any_request() -> None:
    """Port 9 (discard) on loopback: nothing answers there, so a request would fail otherwise."""
    with Client("http://127.0.0.1:9", "token") as client:
        with pytest.raises(InvalidRequest, match="run a job on this machine"):
            client.resume(1, here=RunHere(ray_address="127.0.0.1:6379"))
        with pytest.raises(NotRemote, match="stores only times its own workers measure"):
            client.revalidate("matmul", "cpu", device="interpreter")
