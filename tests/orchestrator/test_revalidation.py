"""Stack changes are seen (issue 47): bests tuned on replay workers of one Triton version, then a
real server (uvicorn on loopback) whose scheduler's worker replays a newer Triton version with one
problem slower: the scheduler queues a revalidation job in its first cycle and runs it under the
lease, no user action; the verdicts land on the rows, in the drift history, on the page's route
and in /metrics (parsed). Also: the job's fencing, cancel, stop and resume, the retune policy, and
the operator's switch and quota (SQLite and PostgreSQL where the scheduler runs)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import ray
from prometheus_client.parser import text_string_to_metric_families

from db import Database, JobKind, JobStatus, repository
from db.errors import LeaseLost
from db.states import RevalidationState, TokenScope
from orchestrator.app.client import Client
from orchestrator.app.jobs import cancel_job, submit_job
from orchestrator.app.running import drive, run_job
from orchestrator.commands.render import job_row
from orchestrator.errors import JobStateError
from orchestrator.run.dispatch import PoolOptions, ensure_ray
from orchestrator.run.jobs import DeviceSource, JobSpec
from orchestrator.run.lease import LeaseKeeper
from orchestrator.run.local_pool import LocalPool
from orchestrator.run.revalidation_job import run_revalidation
from orchestrator.run.stack_watch import RevalidationPolicy, watch
from orchestrator.run.worker import WorkerPlan
from orchestrator.server.app import create_app
from orchestrator.server.scheduler import Scheduler
from search_spaces.problem import problem_key
from search_spaces.registry import get_spec
from tests.orchestrator.conftest import H200
from tests.server.conftest import LiveServer, make_token
from workers.device import Fingerprint
from workers.landscape import LandscapeResult, read_landscape, write_landscape
from workers.measurement import Outcome
from workers.replay import ReplayRunner

SMALL = "M=256,N=256,K=256,dtype=float16"
LARGE = "M=1024,N=1024,K=1024,dtype=float16"
CLASS = f"replay:{H200}"
NEW_TRITON = "3.10.0"
#: The newer stack's slowdown of the small problem (the large one holds).
SLOWER = 1.5


@pytest.fixture(scope="module", autouse=True)
def local_ray() -> Iterator[None]:
    ensure_ray(None, 2)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def upgraded(
    landscapes: dict[str, list[Path]], tmp_path_factory: pytest.TempPathFactory
) -> list[Path]:
    """The H200 landscapes as recorded under Triton 3.10.0: the small problem 1.5x slower, and
    a vendor time recorded for each problem."""
    out = []
    folder = tmp_path_factory.mktemp("triton-3.10")
    for path in landscapes[H200]:
        ls = read_landscape(path)
        factor = SLOWER if ls.problem["M"] == 256 else 1.0
        ls.device = {**ls.device, "triton": NEW_TRITON}
        ls.results = [
            LandscapeResult(r.config, r.outcome, None if r.time_ms is None else r.time_ms * factor)
            for r in ls.results
        ]
        ls.vendor = {"torch.matmul": LandscapeResult({}, Outcome.OK, 0.02)}
        out.append(write_landscape(folder / path.name, ls))
    return out


def tune_on_old_stack(
    database: Database, landscapes: dict[str, list[Path]], team: str = "alpha"
) -> int:
    """A real 8-trial job of both problems on the Triton 3.9.0 replay worker, driven in process."""
    paths = tuple(str(p) for p in landscapes[H200])
    spec = JobSpec.from_mapping(
        {
            "kernel": "matmul",
            "problems": [SMALL, LARGE],
            "device_classes": [CLASS],
            "devices": [str(DeviceSource.parse("replay:" + ",".join(paths)))],
            "trials": 8,
            "team": team,
        }
    )
    job_id = submit_job(database, spec)
    pool = LocalPool([WorkerPlan("replay", paths)])
    try:
        with LeaseKeeper(database, job_id, "seeder", 30) as keeper:
            assert drive(database, pool, job_id, keeper).status is JobStatus.DONE
    finally:
        pool.shutdown()
    return job_id


def bests(database: Database) -> dict[int, repository.BestRecord]:
    with database.session(readonly=True) as s:
        rows = repository.get_best(s, "matmul", device_class_key=CLASS)
    return {int(json.loads(b.problem_key)["M"]): b for b in rows}


def revalidation_jobs(database: Database) -> list[repository.JobRecord]:
    with database.session(readonly=True) as s:
        return [j for j in repository.list_jobs(s, limit=100) if j.kind is JobKind.REVALIDATE]


def until(check: object, timeout_s: float = 180.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def metric_samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def test_a_new_triton_version_is_revalidated_within_one_scheduler_cycle(
    db: Database, landscapes: dict[str, list[Path]], upgraded: list[Path]
) -> None:
    database = db  # SQLite and PostgreSQL
    tune_on_old_stack(database, landscapes)
    before = bests(database)
    assert set(before) == {256, 1024}
    with database.session(readonly=True) as s:
        env = repository.get_environment(s, before[256].environment_id or 0)
    assert env.triton_version == "3.9.0"
    scheduler = Scheduler(
        database,
        devices=(DeviceSource.parse("replay:" + ",".join(str(p) for p in upgraded)),),
        pool_options=PoolOptions(replay_delay_s=0.05),
        poll_s=0.5,
    )
    _, admin = make_token(database, "ops", TokenScope.ADMIN)
    live = LiveServer(create_app(database, scheduler=scheduler)).__enter__()
    scheduler.start()
    try:
        until(lambda: scheduler.cycles >= 1, what="the first scheduler cycle")
        # Queued and claimed in that first cycle: nobody asked for it.
        (job,) = revalidation_jobs(database)
        assert job.lease_owner == scheduler.owner or job.status is JobStatus.DONE
        assert job.team == "alpha" and job.spec["reason"] == "stack change: triton 3.9.0 -> 3.10.0"
        until(lambda: revalidation_jobs(database)[0].status is JobStatus.DONE, what="job done")
        cycles = scheduler.cycles
        until(lambda: scheduler.cycles >= cycles + 3, what="three more cycles")
        assert len(revalidation_jobs(database)) == 1  # revalidated here: not due again
        headers = {"Authorization": f"Bearer {admin}"}
        with httpx.Client(base_url=live.url, headers=headers, timeout=30) as client:
            listed = client.get("/v1/jobs").json()["items"]
            assert [j["kind"] for j in listed if j["id"] == job.id] == ["revalidate"]
            with Client(live.url, admin) as door:  # as `tunefleet jobs --json` prints it
                rows = [job_row(j) for j in door.jobs().items if j.id == job.id]
                assert [r["kind"] for r in rows] == ["revalidate"]
            drift = client.get(
                "/v1/drift",
                params={"kernel": "matmul", "problem": SMALL, "device_class": CLASS},
            ).json()
            held = client.get(
                "/v1/drift",
                params={"kernel": "matmul", "problem": LARGE, "device_class": CLASS},
            ).json()
            metrics = metric_samples(client.get("/metrics").text)
    finally:
        scheduler.stop(60)
        live.__exit__()
    after = bests(database)
    assert after[256].revalidation is RevalidationState.REGRESSED
    assert after[256].revalidated_ms == pytest.approx(SLOWER * before[256].time_ms, rel=1e-6)
    assert after[1024].revalidation is RevalidationState.HOLDS
    with database.session(readonly=True) as s:
        env = repository.get_environment(s, after[256].revalidated_environment_id or 0)
        audit = [a for a in repository.list_audit(s) if a.action == "job.revalidate"]
    assert env.triton_version == NEW_TRITON
    assert [a.target for a in audit] == [f"job {job.id}"]
    (point,) = drift["points"]
    assert point["state"] == "regressed" and point["ratio"] == pytest.approx(SLOWER)
    assert point["changed"] == "triton 3.9.0 -> 3.10.0" and point["vendor_ms"] == 0.02
    assert point["environment"]["triton"] == NEW_TRITON and point["job_id"] == job.id
    assert [p["at"] for p in drift["regressions"]] == [point["at"]]
    assert [p["state"] for p in held["points"]] == ["holds"] and held["regressions"] == []
    label = (("device_class", CLASS),)
    assert metrics[("tunefleet_best_configs_regressed", label)] == 1
    assert metrics[("tunefleet_best_configs_stale", label)] == 0
    assert metrics[("tunefleet_retimings_total", (*label, ("verdict", "regressed")))] == 1
    assert metrics[("tunefleet_retimings_total", (*label, ("verdict", "holds")))] == 1
    assert metrics[("tunefleet_best_configs", (*label, ("state", "holds")))] == 1


def fingerprint(paths: list[Path]) -> Fingerprint:
    return ReplayRunner(paths).fingerprint


def test_the_operator_switch_and_the_team_quota(
    database: Database, landscapes: dict[str, list[Path]], upgraded: list[Path]
) -> None:
    tune_on_old_stack(database, landscapes)
    new = fingerprint(upgraded)
    assert watch(database, new, RevalidationPolicy(on_change=False)) == []
    assert watch(database, new, RevalidationPolicy(quota=0)) == []
    with database.session(readonly=True) as s:  # a stack seen is marked, switch or not
        stale = {c.device_class: c.stale for c in repository.drift_by_class(s)}
    assert stale == {CLASS: 2}
    (first,) = watch(database, new, RevalidationPolicy(quota=1))
    assert watch(database, new, RevalidationPolicy(quota=5)) == []  # an open job covers them
    with pytest.raises(JobStateError, match="a server's scheduler runs it"):
        run_job(database, first)  # tunefleet resume: refused in one line
    cancel_job(database, first)
    assert watch(database, new, RevalidationPolicy(quota=1)) == []  # alpha used its one a day
    (second,) = watch(database, new, RevalidationPolicy(quota=2))
    # The old stack's worker: nothing differs from what the bests were measured in...
    old = fingerprint(landscapes[H200])
    cancel_job(database, second)
    assert watch(database, old, RevalidationPolicy(quota=9)) == []
    # ... unless they were last checked longer ago than --revalidate-every.
    time.sleep(0.05)
    (third,) = watch(database, old, RevalidationPolicy(quota=9, every_days=1e-6))
    with database.session(readonly=True) as s:
        spec = repository.get_job(s, third).spec
    assert spec["reason"].startswith("scheduled: last checked over")


def test_the_job_is_fenced_resumes_without_timing_twice_and_queues_the_teams_retune(
    database: Database, landscapes: dict[str, list[Path]], upgraded: list[Path]
) -> None:
    tune_on_old_stack(database, landscapes)
    (job_id,) = watch(
        database, fingerprint(upgraded), RevalidationPolicy(retune_teams=frozenset({"alpha"}))
    )
    pool = LocalPool([WorkerPlan("replay", tuple(str(p) for p in upgraded))])
    try:
        # Stopped after the first row: handed back queued, that row's verdict kept.
        calls = iter([False, True])
        with LeaseKeeper(database, job_id, "first", 30) as keeper:
            first = keeper.lease
            status = run_revalidation(database, pool, job_id, first, stop=lambda: next(calls))
        assert status is JobStatus.QUEUED
        with database.session(readonly=True) as s:
            assert len(repository.retimed_by_job(s, job_id)) == 1
        with LeaseKeeper(database, job_id, "second", 30) as keeper:
            assert run_revalidation(database, pool, job_id, keeper.lease) is JobStatus.DONE
        # A holder whose lease was taken since writes nothing.
        with pytest.raises(LeaseLost):
            run_revalidation(database, pool, job_id, first)
    finally:
        pool.shutdown()
    with database.session(readonly=True) as s:
        verdicts = repository.retimed_by_job(s, job_id)
        counts = [len(repository.retimings(s, b)) for b in verdicts]
        jobs = repository.list_jobs(s, limit=10)
    assert counts == [1, 1]  # the resumed job did not time the first row again
    assert sorted(v.value for v in verdicts.values()) == ["holds", "regressed"]
    (retune,) = [j for j in jobs if j.kind is JobKind.TUNE and j.status is JobStatus.QUEUED]
    small = problem_key(get_spec("matmul").parse_problem(SMALL))
    assert retune.team == "alpha" and retune.spec["device_classes"] == [CLASS]
    assert [problem_key(p) for p in retune.spec["problems"]] == [small]


def test_a_cancelled_revalidation_job_stops_between_rows(
    database: Database, landscapes: dict[str, list[Path]], upgraded: list[Path]
) -> None:
    tune_on_old_stack(database, landscapes)
    (job_id,) = watch(database, fingerprint(upgraded), RevalidationPolicy())
    pool = LocalPool([WorkerPlan("replay", tuple(str(p) for p in upgraded))])
    try:
        with LeaseKeeper(database, job_id, "runner", 30) as keeper:
            status = run_revalidation(database, pool, job_id, keeper.lease, cancelled=lambda: True)
    finally:
        pool.shutdown()
    assert status is JobStatus.CANCELLED
    with database.session(readonly=True) as s:
        assert repository.get_job(s, job_id).status is JobStatus.CANCELLED
        assert repository.retimed_by_job(s, job_id) == {}
