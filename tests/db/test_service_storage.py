"""Leases, job claims, tokens, the audit log and job paging, on every backend (``backend`` fixture)."""

from __future__ import annotations

import hashlib
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from db import Database, InvalidRecord, JobStatus, LeaseLost, NotFound, TokenScope
from db import repository as repo
from db.models import Job, Token, utcnow


def _jobs(db: Database, n: int, **kw: Any) -> list[int]:
    with db.session() as s:
        kernel = repo.ensure_kernel(s, kw.pop("kernel", "matmul"), "v1", "s1")
        return [
            repo.create_job(s, kernel, {"i": i}, kw.get("team"), kw.get("priority", 0))
            for i in range(n)
        ]


def _expire(db: Database, job_id: int) -> None:
    with db.session() as s:
        s.execute(
            sa.update(Job)
            .where(Job.id == job_id)
            .values(lease_expires_at=utcnow() - timedelta(seconds=1))
        )


def _held(db: Database, job_id: int) -> repo.Lease:
    """The lease job ``job_id`` has now, as its holder knows it."""
    with db.session(readonly=True) as s:
        record = repo.get_job(s, job_id)
    assert record.lease_owner is not None
    return repo.Lease(job_id, record.lease_owner, record.lease_epoch)


class TestLeases:
    def test_live_lease_is_refused_expired_one_taken_over(self, db: Database) -> None:
        (job,) = _jobs(db, 1)
        with db.session() as s:
            first = repo.acquire_lease(s, job, "a", 30)
            again = repo.acquire_lease(s, job, "a", 30)  # its own lease: renewed, epoch raised
            assert first == repo.Lease(job, "a", 1) and again == repo.Lease(job, "a", 2)
            assert repo.acquire_lease(s, job, "b", 30) is None
        a = _held(db, job)
        with db.session() as s:
            record = repo.get_job(s, job)
            assert record.lease_owner == "a"
            assert record.lease_expires_at is not None and record.lease_expires_at > utcnow()
            assert repo.renew_lease(s, repo.Lease(job, "b", a.epoch), 30) is False
            assert repo.renew_lease(s, first, 30) is False  # an older epoch of the same owner
            assert repo.renew_lease(s, a, 30) is True
            assert repo.jobs_leased_by(s, "a") == [job]
        _expire(db, job)
        with db.session() as s:
            b = repo.acquire_lease(s, job, "b", 30)
            assert b is not None and b.epoch == a.epoch + 1
            assert repo.renew_lease(s, a, 30) is False  # taken over: a lost it
            assert repo.jobs_leased_by(s, "a") == []
            repo.release_lease(s, a)  # not a's: nothing happens
            assert repo.get_job(s, job).lease_owner == "b"
            repo.release_lease(s, b)
            record = repo.get_job(s, job)
            assert (record.lease_owner, record.lease_expires_at, record.heartbeat_at) == (
                None,
                None,
                None,
            )
            assert repo.acquire_lease(s, job, "c", 30) is not None

    def test_a_write_fenced_on_a_lost_lease_is_discarded(self, db: Database) -> None:
        """check_lease passes for the holder's owner and epoch only; a write after a failed
        check is rolled back with its transaction."""
        (job,) = _jobs(db, 1)
        with db.session() as s:
            a = repo.acquire_lease(s, job, "a", 30)
            assert a is not None
            repo.check_lease(s, a)
        _expire(db, job)
        with db.session() as s:
            b = repo.acquire_lease(s, job, "a", 30)  # the same owner id, taken again
            assert b is not None
        with pytest.raises(LeaseLost, match="no longer a's"), db.session() as s:
            repo.set_job_status(s, job, JobStatus.RUNNING)
            repo.check_lease(s, a)
        with db.session() as s:
            assert repo.get_job(s, job).status is JobStatus.QUEUED
            repo.check_lease(s, b)

    def test_lease_times_are_the_databases_clock(self, db: Database) -> None:
        (job,) = _jobs(db, 1)
        with db.session() as s:
            before = repo.db_now(s)
            assert repo.acquire_lease(s, job, "a", 30) is not None
            record = repo.get_job(s, job)
            assert record.heartbeat_at is not None and record.lease_expires_at is not None
            assert record.lease_expires_at - record.heartbeat_at == timedelta(seconds=30)
            assert before <= record.heartbeat_at <= repo.db_now(s)
            assert repo.lease_live(s, job)
        _expire(db, job)
        with db.session() as s:
            assert not repo.lease_live(s, job)

    def test_renewal_is_one_statement_on_a_connection_too(self, db: Database) -> None:
        (job,) = _jobs(db, 1)
        with db.session() as s:
            a = repo.acquire_lease(s, job, "a", 5)
            assert a is not None
            before = repo.get_job(s, job).lease_expires_at
        assert db.write_one(lambda c: repo.renew_lease(c, a, 300)) is True
        assert db.write_one(lambda c: repo.renew_lease(c, repo.Lease(job, "b", 1), 300)) is False
        with db.session(readonly=True) as s:
            after = repo.get_job(s, job)
        assert before is not None and after.lease_expires_at is not None
        assert after.lease_expires_at - before > timedelta(seconds=200)
        assert after.lease_owner == "a"
        with pytest.raises(NotFound, match="no job"):
            db.write_one(lambda c: repo.renew_lease(c, repo.Lease(job + 1000, "a", 1), 30))

    def test_stopped_job_goes_back_to_the_queue_and_is_claimed_again(self, db: Database) -> None:
        (job,) = _jobs(db, 1)
        with db.session() as s:
            assert repo.claim_next_job(s, "a", 30) == job
            repo.set_job_status(s, job, JobStatus.RUNNING)
            repo.set_job_status(s, job, JobStatus.QUEUED)  # its driver was told to stop
        with db.session() as s:
            repo.release_lease(s, _held(db, job))
            record = repo.get_job(s, job)
            assert (record.status, record.finished_at) == (JobStatus.QUEUED, None)
            assert record.started_at is not None
            assert repo.claim_next_job(s, "b", 30) == job

    def test_lease_errors(self, db: Database) -> None:
        (job,) = _jobs(db, 1)
        with db.session() as s:
            with pytest.raises(NotFound):
                repo.acquire_lease(s, job + 100, "a", 30)
            for ttl in (0, -1, float("nan"), float("inf")):
                with pytest.raises(InvalidRecord, match="ttl_s"):
                    repo.acquire_lease(s, job, "a", ttl)
            with pytest.raises(InvalidRecord, match="owner"):
                repo.acquire_lease(s, job, "", 30)

    def test_claim_order_priority_then_age_and_expired_running_jobs(self, db: Database) -> None:
        low, high, high_later = (
            _jobs(db, 1, priority=0)[0],
            _jobs(db, 1, priority=5)[0],
            _jobs(db, 1, priority=5)[0],
        )
        with db.session() as s:
            assert [repo.claim_next_job(s, "x", 30) for _ in range(4)] == [
                high,
                high_later,
                low,
                None,
            ]
            repo.set_job_status(s, high, JobStatus.RUNNING)
            repo.set_job_status(s, high_later, JobStatus.RUNNING)
            repo.set_job_status(s, high_later, JobStatus.DONE)
        _expire(db, high)
        _expire(db, high_later)
        with db.session() as s:
            # The running job of a dead owner is taken over; a finished one never is.
            assert repo.claim_next_job(s, "y", 30) == high
            assert repo.claim_next_job(s, "y", 30) is None
            assert repo.jobs_leased_by(s, "y") == [high]
            assert repo.get_job(s, high).status is JobStatus.RUNNING

    def test_claim_shares_between_teams_within_a_priority(self, db: Database) -> None:
        flood = _jobs(db, 4, team="a")
        (late,) = _jobs(db, 1, team="b")
        (urgent,) = _jobs(db, 1, team="a", priority=1)
        with db.session() as s:
            # Priority first; then b (no lease held) before a (one); then a's oldest.
            claimed = [repo.claim_next_job(s, "x", 30) for _ in range(4)]
            assert claimed == [urgent, late, flood[0], flood[1]]
            for job in (late, flood[0]):
                record = repo.get_job(s, job)
                repo.release_lease(s, repo.Lease(job, "x", record.lease_epoch))
            # a holds two leases, b none: b's job again before a's older one.
            assert [repo.claim_next_job(s, "x", 30) for _ in range(2)] == [late, flood[0]]

    def test_concurrent_claimers_get_disjoint_jobs(self, db: Database) -> None:
        jobs = _jobs(db, 10)
        claimed: dict[str, list[int]] = {"a": [], "b": []}
        start = threading.Barrier(2)
        errors: list[BaseException] = []

        def claimer(owner: str) -> None:
            try:
                other = Database(db.engine.url.render_as_string(hide_password=False))
                start.wait()
                while True:
                    with other.session() as s:
                        job = repo.claim_next_job(s, owner, 60)
                        if job is None:
                            break
                        time.sleep(0.01)  # hold the claim open a moment
                    claimed[owner].append(job)
                other.close()
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=claimer, args=(o,)) for o in claimed]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors
        assert not set(claimed["a"]) & set(claimed["b"])
        assert sorted(claimed["a"] + claimed["b"]) == jobs
        with db.session(readonly=True) as s:
            assert repo.jobs_leased_by(s, "a") == sorted(claimed["a"])

    @pytest.mark.postgres
    @pytest.mark.parametrize("backend", ["postgresql"])  # SQLite claimers queue on the write lock
    def test_postgresql_claim_skips_a_row_another_claimer_holds(self, empty_url: str) -> None:
        db = Database(empty_url)
        db.upgrade()
        first, second = _jobs(db, 2)
        holding, done = threading.Event(), threading.Event()
        got: list[int | None] = []

        def hold() -> None:
            with db.session() as s:
                got.append(repo.claim_next_job(s, "a", 60))
                holding.set()
                done.wait(30)  # the transaction (and its row lock) stays open

        holder = threading.Thread(target=hold)
        holder.start()
        assert holding.wait(30)
        try:
            with db.session() as s:
                s.execute(sa.text("SET LOCAL lock_timeout = '2s'"))
                # Without SKIP LOCKED this blocks on the held row (and fails on lock_timeout).
                assert repo.claim_next_job(s, "b", 60) == second
        finally:
            done.set()
            holder.join(30)
            db.close()
        assert got == [first]


class TestJobPaging:
    def test_filters_paging_and_counts(self, db: Database) -> None:
        ml = _jobs(db, 3, team="ml")
        infra = _jobs(db, 2, team="infra", kernel="rmsnorm")
        with db.session() as s:
            repo.set_job_status(s, ml[0], JobStatus.RUNNING)
            every = [j.id for j in repo.list_jobs(s)]
            assert every == sorted(ml + infra, reverse=True)
            assert repo.count_jobs(s) == 5
            assert [j.id for j in repo.list_jobs(s, team="ml", limit=2)] == [ml[2], ml[1]]
            assert [j.id for j in repo.list_jobs(s, team="ml", limit=2, offset=2)] == [ml[0]]
            assert repo.count_jobs(s, team="ml") == 3
            assert [j.id for j in repo.list_jobs(s, status="running")] == [ml[0]]
            assert repo.count_jobs(s, status=JobStatus.QUEUED) == 4
            assert [j.id for j in repo.list_jobs(s, kernel="rmsnorm")] == infra[::-1]
            assert [j.id for j in repo.list_jobs(s, kernel="rmsnorm", limit=1, offset=1)] == [
                infra[0]
            ]
            assert [j.id for j in repo.list_jobs(s, limit=2, offset=3)] == every[3:5]
            assert [j.id for j in repo.list_jobs(s, before=every[1])] == every[2:]
            assert [j.id for j in repo.list_jobs(s, team="ml", before=ml[2], limit=1)] == [ml[1]]
            assert [j.id for j in repo.list_jobs(s, before=every[1], offset=1)] == every[3:]
            assert repo.list_jobs(s, before=min(every)) == []
            assert repo.list_jobs(s, offset=5) == []
            assert repo.count_jobs(s, kernel="rmsnorm", team="ml") == 0
            assert repo.list_jobs(s, team="nobody") == []
            (record,) = repo.list_jobs(s, limit=1)
            assert (record.priority, record.lease_owner, record.lease_expires_at) == (0, None, None)
            with pytest.raises(InvalidRecord, match="unknown job status"):
                repo.list_jobs(s, status="sleeping")
            with pytest.raises(InvalidRecord, match="limit"):
                repo.list_jobs(s, offset=-1)

    def test_priority_is_stored_and_checked(self, db: Database) -> None:
        (job,) = _jobs(db, 1, priority=7)
        with db.session() as s:
            assert repo.get_job(s, job).priority == 7
            kernel = repo.ensure_kernel(s, "matmul", "v1", "s1")
            with pytest.raises(InvalidRecord, match="priority"):
                repo.create_job(s, kernel, {}, None, priority="high")  # type: ignore[arg-type]


class TestTokens:
    def test_token_stored_hashed_verified_and_revoked(self, db: Database) -> None:
        with db.session() as s:
            record, token = repo.create_token(s, "ml", "submit", name="ci")
            assert (record.team, record.scope, record.name) == ("ml", TokenScope.SUBMIT, "ci")
            assert len(token) >= 43
            stored = s.scalar(sa.select(Token.token_hash).where(Token.id == record.id))
            assert stored == hashlib.sha256(token.encode()).hexdigest()
            assert token not in str(s.execute(sa.select(Token)).all())
        with db.session(readonly=True) as s:
            found = repo.verify_token(s, token)
            assert found is not None and found.id == record.id
            assert found.last_used_at is None  # a check reads only
        assert db.write_one(lambda c: repo.stamp_token_use(c, record.id)) is True
        assert db.write_one(lambda c: repo.stamp_token_use(c, record.id)) is False  # once a minute
        with db.session() as s:
            found = repo.verify_token(s, token)
            assert found is not None and found.last_used_at is not None
            s.execute(
                sa.update(Token)
                .where(Token.id == record.id)
                .values(last_used_at=found.last_used_at - repo.LAST_USED_EVERY)
            )
            assert repo.stamp_token_use(s, record.id) is True  # a minute old: due again
            assert repo.stamp_token_use(s, record.id + 100) is False
            assert repo.verify_token(s, token + "x") is None
            assert repo.verify_token(s, "") is None
            assert repo.active_token_count(s) == 1
        with db.session() as s:
            assert repo.revoke_token(s, record.id) is True
            assert repo.revoke_token(s, record.id) is False
            assert repo.revoke_token(s, record.id + 100) is False
            assert repo.verify_token(s, token) is None
            assert repo.active_token_count(s) == 0
            (listed,) = repo.list_tokens(s)
            assert listed.revoked_at is not None

    def test_expired_token_fails(self, db: Database) -> None:
        with db.session() as s:
            old, old_token = repo.create_token(
                s, "ml", TokenScope.READ, expires_at=utcnow() - timedelta(seconds=1)
            )
            new, new_token = repo.create_token(
                s, "ml", TokenScope.ADMIN, expires_at=utcnow() + timedelta(days=1)
            )
        with db.session() as s:
            assert repo.verify_token(s, old_token) is None
            verified = repo.verify_token(s, new_token)
            assert verified is not None and verified.scope is TokenScope.ADMIN
            assert repo.active_token_count(s) == 1
            assert [t.id for t in repo.list_tokens(s)] == [old.id, new.id]

    def test_token_input_checks(self, db: Database) -> None:
        with db.session() as s:
            with pytest.raises(InvalidRecord, match="unknown token scope 'root'"):
                repo.create_token(s, "ml", "root")
            with pytest.raises(InvalidRecord, match="team"):
                repo.create_token(s, " ", "read")


class TestAudit:
    def test_audit_newest_first(self, db: Database) -> None:
        with db.session() as s:
            record, _ = repo.create_token(s, "ml", "admin")
            repo.write_audit(s, action="job.submit", token_id=record.id, team="ml", target="job/1")
            repo.write_audit(s, action="token.revoke", detail={"token": 3})
        with db.session(readonly=True) as s:
            newest, oldest = repo.list_audit(s)
            assert (newest.action, newest.detail, newest.token_id) == (
                "token.revoke",
                {"token": 3},
                None,
            )
            assert (oldest.action, oldest.token_id, oldest.team, oldest.target) == (
                "job.submit",
                record.id,
                "ml",
                "job/1",
            )
            assert [a.action for a in repo.list_audit(s, limit=1)] == ["token.revoke"]
            with pytest.raises(InvalidRecord, match="action"):
                repo.write_audit(s, action="")


def test_best_config_carries_its_producers_team_and_job(db: Database) -> None:
    with db.session() as s:
        dc = repo.ensure_device_class(s, "cpu", "cpu", "cpu", "interpreter")
        kernel = repo.ensure_kernel(s, "matmul", "v1", "s1")
        job = repo.create_job(s, kernel, {}, "ml")
        trial = repo.record_trial(
            s,
            kernel_id=kernel,
            problem_key="p",
            device_class_id=dc,
            config={},
            config_key="{}",
            outcome="ok",
            job_id=job,
        )
        common: dict[str, Any] = {
            "kernel_name": "matmul",
            "kernel_version": "v1",
            "device_class_id": dc,
            "triton_minor": "3.6",
            "config": {},
            "time_ms": 1.0,
            "environment_id": None,
        }
        repo.upsert_best(s, problem_key="a", trial_id=trial, job_id=job, **common)
        repo.upsert_best(s, problem_key="b", trial_id=trial, job_id=None, **common)
        repo.upsert_best(s, problem_key="c", trial_id=None, job_id=None, **common)
    with db.session(readonly=True) as s:
        rows = {b.problem_key: (b.team, b.job_id) for b in repo.get_best(s, "matmul")}
    assert rows == {"a": ("ml", job), "b": ("ml", job), "c": (None, None)}
