"""MeasuredKeys: the configs any job measured, per study key, for every study a driver of the
process checks reuse on; one read of the new trial rows brings every held key up to date, and a
key is let go with the last study that held it (SQLite, real rows)."""

from __future__ import annotations

import gc
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from db import Database, Objective, repository
from orchestrator.run import ledger
from orchestrator.run.driver import Driver, submit_job
from orchestrator.run.jobs import JobSpec
from orchestrator.run.ledger import MeasuredKeys
from orchestrator.run.local_pool import LocalPool
from orchestrator.run.worker import WorkerPlan
from tests.orchestrator.conftest import H200


def trial(database: Database, ids: dict[str, int], pkey: str, ckey: str, outcome: str) -> None:
    with database.session() as s:
        repository.record_trial(
            s,
            kernel_id=ids["kernel"],
            problem_key=pkey,
            device_class_id=ids["dc"],
            config={},
            config_key=ckey,
            outcome=outcome,
        )


def test_one_read_brings_every_held_key_up_to_date(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    database.upgrade()
    with database.session() as s:
        dc = repository.ensure_device_class(s, "H200", "nvidia", "NVIDIA H200", "sm_90")
        ids = {"dc": dc, "kernel": repository.ensure_kernel(s, "matmul", "v1", "space1")}
    keys = [(ids["kernel"], f'{{"M":{m}}}', dc, Objective.KERNEL) for m in (1, 2, 3)]
    trial(database, ids, keys[0][1], "old", "ok")
    reads: list[str] = []
    sa.event.listen(
        database.engine, "before_cursor_execute", lambda *a: reads.append(a[2]), named=False
    )
    measured = MeasuredKeys(database)
    for key in keys:
        measured.hold(key)
    measured.hold(keys[0])  # a second study on the first key
    assert measured.may_hold(keys[0], "old")  # read whole when held
    monkeypatch.setattr(ledger, "REUSE_REFRESH_S", 0.05)
    trial(database, ids, keys[1][1], "new", "ok")
    trial(database, ids, keys[2][1], "lost", "infra")  # no verdict
    trial(database, ids, '{"M":9}', "unheld", "ok")
    time.sleep(0.06)
    reads.clear()
    assert measured.may_hold(keys[1], "new")
    assert not measured.may_hold(keys[2], "lost") and not measured.may_hold(keys[0], "new")
    assert sum("tf_trials" in r for r in reads) == 1  # one read for the three keys
    measured.release(keys[0])
    assert measured.may_hold(keys[0], "old")  # still held by the other study
    measured.release(keys[0])
    with pytest.raises(KeyError):
        measured.may_hold(keys[0], "old")


def test_a_jobs_studies_let_their_keys_go_when_it_ends(
    database: Database, landscapes: dict[str, list[Path]]
) -> None:
    pool = LocalPool([WorkerPlan("replay", tuple(str(p) for p in landscapes[H200]))])
    try:
        spec = JobSpec.from_mapping(
            {
                "kernel": "matmul",
                "problems": [{"M": 256, "N": 256, "K": 256, "dtype": "float16"}],
                "trials": 50,
            }
        )
        held: list[int] = []

        def peek() -> bool:
            held.append(sum(MeasuredKeys.of(database)._holders.values()))
            return len(held) > 3

        job_id = submit_job(database, spec, pool)
        assert Driver(database, pool, poll_s=0.0, stop=peek).run(job_id).status.value == "queued"
    finally:
        pool.shutdown()
    assert held and set(held) == {1}  # its one study held its key while it ran
    gc.collect()
    assert MeasuredKeys.of(database)._holders == {}
