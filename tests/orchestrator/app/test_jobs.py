"""The application layer on SQLite and PostgreSQL, without Ray: submit, list with filters and
paging, per-study progress, cancel under leases, trials, best configs, bundles, the lease keeper.

Trial rows are written through the repository as a driver writes them, so the views are checked
against rows whose counts the test knows.
"""

from __future__ import annotations

import io
import json
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest

from db import Database, JobStatus, Objective, StudyStatus, repository
from orchestrator.app.jobs import (
    MAX_LIMIT,
    cancel_job,
    check_spec,
    job_detail,
    list_jobs,
    submit_job,
)
from orchestrator.app.kernels import kernel_space, list_kernels
from orchestrator.app.results import best_configs, build_bundle, bundle_files
from orchestrator.app.running import run_job
from orchestrator.app.views import BestView, JobDetail, JobPage, SpaceView
from orchestrator.errors import (
    Conflict,
    InvalidRequest,
    JobLeased,
    JobSpecError,
    JobStateError,
    NotFound,
)
from orchestrator.run.jobs import JobSpec
from orchestrator.run.lease import LeaseKeeper
from search_spaces.bundle import load_bundle
from tests.orchestrator.rows import CONFIG, add_study, store_best

SMALL = {"M": 16, "N": 16, "K": 16, "dtype": "float16"}
BIG = {"M": 64, "N": 64, "K": 64, "dtype": "float16"}


def spec(**fields: Any) -> JobSpec:
    return JobSpec.from_mapping(
        {"kernel": "matmul", "problems": [SMALL, BIG], "trials": 5, **fields}
    )


def test_submit_writes_a_queued_job_and_checks_without_a_cluster(db: Database) -> None:
    job_id = submit_job(db, spec(team="red"), priority=5)
    view = job_detail(db, job_id).job
    assert (view.status, view.team, view.priority, view.kernel) == (
        JobStatus.QUEUED,
        "red",
        5,
        "matmul",
    )
    assert (view.trials_done, view.trials_budget, view.best_ms) == (0, 10, None)
    with pytest.raises(JobSpecError, match="priority must be an integer"):
        submit_job(db, spec(), priority="high")  # type: ignore[arg-type]
    with pytest.raises(JobSpecError, match="unknown kernel"):
        check_spec(JobSpec("nokernel", ({"M": 16},)))
    assert list_jobs(db).total == 1  # nothing written by the refused ones


def test_list_filters_and_pages_newest_first(db: Database) -> None:
    ids = [
        submit_job(db, spec(team=team, kernel=kernel, problems=[problem]))
        for team, kernel, problem in [
            ("red", "matmul", SMALL),
            ("blue", "matmul", SMALL),
            ("red", "rmsnorm", {"M": 4, "N": 64, "dtype": "float16"}),
            ("red", "matmul", BIG),
        ]
    ]
    cancel_job(db, ids[0])
    page = list_jobs(db, team="red", limit=2)
    assert [j.id for j in page.items] == [ids[3], ids[2]] and page.total == 3
    assert [j.id for j in list_jobs(db, team="red", offset=2).items] == [ids[0]]
    assert [j.id for j in list_jobs(db, kernel="matmul").items] == [
        ids[3],
        ids[1],
        ids[0],
    ]
    cancelled = list_jobs(db, status="cancelled")
    assert [j.id for j in cancelled.items] == [ids[0]] and cancelled.total == 1
    walked, before = [], None
    while True:  # keyset paging visits every job once, newest first, and ends
        page = list_jobs(db, limit=2, before=before)
        walked += [j.id for j in page.items]
        if page.next_before is None:
            break
        before = page.next_before
    assert walked == ids[::-1] and page.total == 4
    bad_pages: list[dict[str, Any]] = [{"limit": 0}, {"limit": MAX_LIMIT + 1}]
    for bad in (*bad_pages, {"offset": -1}, {"status": "x"}, {"before": 0}):
        with pytest.raises(InvalidRequest):
            list_jobs(db, **bad)


def test_detail_counts_trials_by_outcome_with_budget_and_best(db: Database) -> None:
    job_id = submit_job(db, spec(team="red"))
    study = add_study(db, job_id, SMALL, [("ok", 2.0), ("ok", 1.5), ("wrong", 0), ("infra", 0)])
    with db.session() as s:  # a crash that is measured again: not counted until it stands
        first = repository.trials_for_study(s, study)[0]
        repository.record_trial(
            s,
            kernel_id=first.kernel_id,
            problem_key=first.problem_key,
            device_class_id=first.device_class_id,
            config={**CONFIG, "BLOCK_K": 128},
            config_key="provisional",
            outcome="crash",
            job_id=job_id,
            study_id=study,
            provisional=True,
        )
    add_study(db, job_id, BIG, [("ok", 9.0)] + [("invalid", 0)] * 5)
    detail = job_detail(db, job_id, team="red")
    small, big = detail.studies
    assert small.outcomes == {"infra": 1, "ok": 2, "wrong": 1}
    assert (small.done, small.budget, small.measured, small.reused) == (3, 5, 2, 1)
    assert small.best_ms == 1.5 and small.best_config == {**CONFIG, "BLOCK_K": 32}
    assert small.label == "M=16,N=16,K=16,dtype=float16 @ cpu" and small.device_class == "cpu"
    assert (big.done, big.best_ms, big.status) == (5, 9.0, StudyStatus.RUNNING)  # 6 rows, capped
    assert (detail.job.trials_done, detail.job.trials_budget, detail.job.best_ms) == (8, 10, 1.5)
    (listed,) = list_jobs(db).items
    assert listed == detail.job
    # The wire format: JSON-ready, and read back equal.
    wire = json.loads(json.dumps(detail.to_dict()))
    assert wire["studies"][0]["outcomes"]["ok"] == 2 and wire["status"] == "queued"
    assert JobDetail.from_dict(wire) == detail
    assert JobPage.from_dict(json.loads(json.dumps(list_jobs(db).to_dict())))


def test_job_views_need_no_importable_kernel(db: Database) -> None:
    """A job of a user kernel (module:attribute) is listed and shown from its rows alone."""
    with db.session() as s:
        kernel_id = repository.ensure_kernel(s, "no_such_module:SPEC", "v1", "h1")
        job_id = repository.create_job(
            s,
            kernel_id,
            {"kernel": "no_such_module:SPEC", "problems": [{"n": 4}], "trials": 3},
            "red",
        )
    add_study(db, job_id, {"n": 4}, [("ok", 1.0)])
    detail = job_detail(db, job_id)
    assert detail.job.kernel == "no_such_module:SPEC" and detail.studies[0].done == 1
    assert list_jobs(db).items[0].trials_budget == 3


def test_teams_see_only_their_jobs_and_missing_ones_are_not_found(db: Database) -> None:
    job_id = submit_job(db, spec(team="red"))
    # Another team's job is the same NotFound as a missing one.
    with pytest.raises(NotFound, match=f"no job {job_id} of yours"):
        job_detail(db, job_id, team="blue")
    with pytest.raises(NotFound, match=f"no job {job_id} of yours"):
        cancel_job(db, job_id, team="blue")
    with pytest.raises(NotFound, match="no job 999"):
        job_detail(db, 999)
    assert job_detail(db, job_id).job.status is JobStatus.QUEUED


def test_cancel_under_a_live_an_expired_and_no_lease(db: Database) -> None:
    queued, leased, expired = (submit_job(db, spec()) for _ in range(3))
    view = cancel_job(db, queued)
    assert view.status is JobStatus.CANCELLED and view.finished_at is not None
    with db.session() as s:
        assert repository.acquire_lease(s, leased, "other:1:x", 60.0)
        assert repository.acquire_lease(s, expired, "dead:1:x", 0.05)
        repository.set_job_status(s, expired, JobStatus.RUNNING)
    add_study(db, expired, SMALL, [("ok", 1.0)])
    time.sleep(0.1)
    view = cancel_job(db, leased)  # its owner stops when it polls the flag
    assert view.status is JobStatus.QUEUED and view.cancel_requested
    detail = job_detail(db, expired)
    assert detail.studies[0].status is StudyStatus.RUNNING
    view = cancel_job(db, expired)  # its driver died: nobody would stop it
    assert view.status is JobStatus.CANCELLED
    assert job_detail(db, expired).studies[0].status is StudyStatus.CANCELLED
    with pytest.raises(Conflict, match="already cancelled"):
        cancel_job(db, queued)


def test_cancelling_a_job_nobody_runs_promotes_its_fastest_ok_trials_marked(db: Database) -> None:
    job_id = submit_job(db, spec(team="red"))
    add_study(db, job_id, SMALL, [("ok", 2.0), ("ok", 0.7), ("crash", 0.1), ("ok", 1.5)])
    other = submit_job(db, spec())
    store_best(db, other, "cpu", BIG)
    cancel_job(db, job_id)
    (best,) = best_configs(db, kernel="matmul", problem="M=16,N=16,K=16,dtype=float16")
    assert (best.job_id, best.team, best.time_ms) == (job_id, "red", 0.7)
    assert best.config == {**CONFIG, "BLOCK_K": 32} and best.cancelled_job
    wire = json.loads(json.dumps(best.to_dict()))
    assert BestView.from_dict(wire) == best
    del wire["cancelled_job"]  # a server of an older version does not send it
    assert not BestView.from_dict(wire).cancelled_job
    (kept,) = best_configs(db, kernel="matmul", problem="M=64,N=64,K=64,dtype=float16")
    assert kept.job_id == other and not kept.cancelled_job


def test_run_refuses_a_live_lease_and_a_done_job_before_ray(db: Database) -> None:
    job_id = submit_job(db, spec())
    with db.session() as s:
        repository.acquire_lease(s, job_id, "elsewhere:7:ab", 60.0)
    with pytest.raises(JobLeased, match="elsewhere:7:ab"):
        run_job(db, job_id)
    done = submit_job(db, spec())
    with db.session() as s:
        repository.set_job_status(s, done, JobStatus.RUNNING)
        repository.set_job_status(s, done, JobStatus.DONE)
    with pytest.raises(JobStateError, match="already done"):
        run_job(db, done)
    with pytest.raises(NotFound):
        run_job(db, 999)


def test_lease_keeper_renews_refuses_notices_loss_and_releases(db: Database) -> None:
    job_id = submit_job(db, spec())
    # A ttl of 2 s: a loaded 2-core CI machine may stall the test for most of a second.
    with LeaseKeeper(db, job_id, "me:1:a", ttl_s=2.0) as keeper:
        with pytest.raises(JobLeased), LeaseKeeper(db, job_id, "you:2:b", ttl_s=2.0):
            pass
        time.sleep(2.5)  # past one ttl: only renewals keep it ours
        with db.session(readonly=True) as s:
            job = repository.get_job(s, job_id)
        assert job.lease_owner == "me:1:a" and not keeper.lost()
        with db.session() as s:  # an operator (or a bug) releases it under us
            repository.release_lease(s, keeper.lease)
            theirs = repository.acquire_lease(s, job_id, "you:2:b", 60.0)
            assert theirs is not None
        deadline = time.monotonic() + 5
        while not keeper.lost():
            assert time.monotonic() < deadline
            time.sleep(0.05)
    with db.session(readonly=True) as s:
        assert repository.get_job(s, job_id).lease_owner == "you:2:b"  # not ours to release
    with db.session() as s:
        repository.release_lease(s, theirs)
    with LeaseKeeper(db, job_id, "me:1:a", ttl_s=5):
        pass
    with db.session(readonly=True) as s:
        assert repository.get_job(s, job_id).lease_owner is None


def test_best_configs_keep_their_provenance(db: Database) -> None:
    job_id = submit_job(db, spec(team="red"))
    store_best(db, job_id, "cpu", SMALL)
    store_best(db, job_id, "cpu", BIG)
    rows = best_configs(db, kernel="matmul")
    assert [r.problem for r in rows] == [BIG, SMALL] or [r.problem for r in rows] == [SMALL, BIG]
    (one,) = best_configs(db, kernel="matmul", problem="M=16,N=16,K=16,dtype=float16")
    assert (one.team, one.job_id, one.config, one.time_ms) == ("red", job_id, CONFIG, 0.5)
    assert one.tflops and one.tflops > 0 and one.roofline_pct is None  # cpu: no roofline
    assert BestView.from_dict(json.loads(json.dumps(one.to_dict()))) == one
    assert best_configs(db, kernel="matmul", objective=Objective.GRAPH) == []
    with pytest.raises(NotFound):
        best_configs(db, kernel="nokernel")
    with pytest.raises(InvalidRequest):
        best_configs(db, kernel="matmul", objective="bogus")


def test_bundle_is_one_file_or_a_zip_of_what_pull_writes(db: Database, tmp_path: Path) -> None:
    job_id = submit_job(db, spec())
    store_best(db, job_id, "cpu", SMALL)
    one = build_bundle(db, "matmul", device_class="cpu")
    assert one.media_type == "application/json" and one.filename.endswith(".json")
    path = tmp_path / one.filename
    path.write_bytes(one.content)
    assert load_bundle(path).lookup(SMALL) == CONFIG
    store_best(db, job_id, "replay:cpu", SMALL)
    both = build_bundle(db, "matmul", fmt="triton")
    assert both.media_type == "application/zip" and both.filename == "matmul-triton.zip"
    names = zipfile.ZipFile(io.BytesIO(both.content)).namelist()
    assert [f.filename for f in bundle_files(db, "matmul", fmt="triton")] == names
    assert len(names) == 2 and all(n.endswith(".py") for n in names)
    with pytest.raises(InvalidRequest, match="unknown format"):
        build_bundle(db, "matmul", fmt="onnx")


def test_kernel_listing_and_space_views() -> None:
    names = [k.name for k in list_kernels()]
    assert "matmul" in names and names == sorted(names)
    view = kernel_space("matmul", "H200")
    assert view.device_class == "NVIDIA H200" and 0 < view.valid <= view.total
    assert SpaceView.from_dict(json.loads(json.dumps(view.to_dict()))) == view
    with pytest.raises(NotFound):
        kernel_space("nokernel", "H200")
