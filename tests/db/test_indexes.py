"""Revision 0004's indexes exist after an upgrade and the planner uses them for the per-trial and
per-request queries (dedupe lookup, warm start, best read, job progress, job pages), on every
backend: PostgreSQL's EXPLAIN and SQLite's EXPLAIN QUERY PLAN over 20,000 trial rows.

The SQL explained is what the repository function itself sends (captured from the engine)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from db import Database, Objective
from db import repository as repo
from db.models import BestConfig, Job, Trial, utcnow

TRIALS = 20_000
KEYS = 100  # (problem, class) keys: 200 trials each
CONFIGS = 150
BESTS = 5_000  # best rows of other problems (a small table is scanned, rightly)
JOBS = 2_000  # jobs besides the 50 that own the trials

#: table -> the indexes revision 0004 adds.
INDEXES = {
    "tf_trials": {"ix_tf_trials_measured", "ix_tf_trials_study_counts"},
    "tf_jobs": {"ix_tf_jobs_team", "ix_tf_jobs_kernel"},
}


def _fill(db: Database, *, analyze: bool = True) -> dict[str, Any]:
    """20,000 trials over 100 keys of one kernel, 100 studies of 50 jobs; 2,000 more jobs of 5
    teams; 5,000 best rows (``analyze`` False: no statistics, as before autovacuum's first pass
    or without it)."""
    with db.session() as s:
        kernel = repo.ensure_kernel(s, "matmul", "v1", "s1")
        classes = [
            repo.ensure_device_class(s, f"gpu{c}", "nvidia", f"gpu{c}", "sm_90") for c in (0, 1)
        ]
        jobs = [repo.create_job(s, kernel, {"j": j}, f"team{j % 5}") for j in range(50)]
        studies = []
        for k in range(KEYS):
            pkey = json.dumps({"M": 16 * (k // 2 + 1), "N": 4096})
            cls = classes[k % 2]
            job = jobs[k // 2]
            study = repo.ensure_study(s, job, kernel, pkey, json.loads(pkey), cls, "local", f"s{k}")
            studies.append((study, job, pkey, cls))
    rows = []
    for i in range(TRIALS):
        study, job, pkey, cls = studies[i % KEYS]
        config = {"BLOCK_M": 16 << (i % 5), "BLOCK_N": 32 << (i % 3), "c": i % CONFIGS}
        rows.append(
            {
                "job_id": job,
                "study_id": study,
                "kernel_id": kernel,
                "problem_key": pkey,
                "device_class_id": cls,
                "config": config,
                "config_key": json.dumps(config, sort_keys=True, separators=(",", ":")),
                "outcome": "ok" if i % 10 else "invalid",
                "median_ms": 1.0 + (i % 97) / 10,
                "samples_ms": [1.0] * 25,
                "reused": False,
            }
        )
    with db.session() as s:
        s.execute(sa.insert(Trial), rows)
        for k in range(KEYS):
            _, job, pkey, cls = studies[k]
            repo.upsert_best(s, "matmul", "v1", pkey, cls, "3.6", {"c": k}, 1.0, None, job, None)
        now = utcnow()
        s.execute(
            sa.insert(BestConfig),
            [
                {"kernel_name": f"k{b % 20}", "kernel_version": "v1", "problem_key": f"p{b}",
                 "device_class_id": classes[0], "triton_minor": "3.6", "objective": "kernel",
                 "config": {"c": b}, "time_ms": 1.0, "updated_at": now}
                for b in range(BESTS)
            ],
        )  # fmt: skip
        s.execute(
            sa.insert(Job),
            [
                {"kernel_id": kernel, "status": "done", "spec": {"j": j}, "team": f"team{j % 5}",
                 "created_at": now, "cancel_requested": False, "priority": 0}
                for j in range(JOBS)
            ],
        )  # fmt: skip
    if analyze:
        with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            # VACUUM sets the visibility map an index-only scan needs (autovacuum does it in
            # service).
            conn.execute(sa.text("VACUUM ANALYZE" if db.backend == "postgresql" else "ANALYZE"))
    last = rows[-1]
    return {"kernel": kernel, "row": last, "study": studies[-1][0], "job": studies[-1][1]}


@contextmanager
def _captured(db: Database) -> Iterator[list[tuple[str, Any]]]:
    statements: list[tuple[str, Any]] = []

    def before(conn: Any, cursor: Any, statement: str, params: Any, *_: Any) -> None:
        statements.append((statement, params))

    sa.event.listen(db.engine, "before_cursor_execute", before)
    try:
        yield statements
    finally:
        sa.event.remove(db.engine, "before_cursor_execute", before)


def _plan(db: Database, call: Callable[[Session], object]) -> str:
    """The plans of the SELECTs ``call`` sends (EXPLAIN / EXPLAIN QUERY PLAN), one text."""
    with _captured(db) as statements, db.session(readonly=True) as s:
        call(s)
    selects = [(q, p) for q, p in statements if q.lstrip().upper().startswith("SELECT")]
    assert selects, "the repository function sent no SELECT"
    out: list[str] = []
    raw = db.engine.raw_connection()
    try:
        cur = raw.cursor()
        for query, params in selects:
            prefix = "EXPLAIN QUERY PLAN " if db.backend == "sqlite" else "EXPLAIN "
            cur.execute(prefix + query, params)
            out.extend(" ".join(str(c) for c in row) for row in cur.fetchall())
        raw.rollback()
    finally:
        raw.close()
    return "\n".join(out)


def test_upgrade_creates_the_indexes(db: Database) -> None:
    with db.engine.connect() as conn:
        inspector = sa.inspect(conn)
        for table, wanted in INDEXES.items():
            names = {ix["name"] for ix in inspector.get_indexes(table)}
            assert wanted <= names, f"{table} lacks {wanted - names}"
        assert "ix_tf_trials_study_id" not in {
            ix["name"] for ix in inspector.get_indexes("tf_trials")
        }


def _uses(plan: str, table: str, index: str, backend: str) -> bool:
    if backend == "sqlite":  # a unique constraint's index is SQLite's sqlite_autoindex_<table>_N
        name = f"sqlite_autoindex_{table}" if index.startswith("uq_") else index
        return f"SEARCH {table} USING INDEX {name}" in plan or (
            f"SEARCH {table} USING COVERING INDEX {name}" in plan
        )
    return any(
        f"{how} {index}" in plan
        for how in (
            "Index Scan using",
            "Index Scan Backward using",
            "Index Only Scan using",
            "Bitmap Index Scan on",
        )
    )


def test_planner_uses_the_indexes(db: Database) -> None:
    """Each per-trial / per-request query reaches its rows through its index, never a scan of
    the trial table; on PostgreSQL outcome counts and warm start's choice are index-only."""
    filled = _fill(db)
    row = filled["row"]
    key = (row["kernel_id"], row["problem_key"], row["device_class_id"])
    checks: list[tuple[str, Callable[[Session], object], str, str]] = [
        ("dedupe lookup", lambda s: repo.find_measured(s, *key, row["config_key"]), "tf_trials",
         "ix_tf_trials_measured"),
        ("warm start", lambda s: repo.measured_for_key(s, *key, Objective.KERNEL), "tf_trials",
         "ix_tf_trials_measured"),
        ("best read", lambda s: repo.get_best(s, "matmul", row["problem_key"], "gpu1", "v1", "3.6"),
         "tf_best_configs", "uq_tf_best_configs_key"),
        ("outcome counts", lambda s: repo.outcome_counts(s, filled["study"]), "tf_trials",
         "ix_tf_trials_study_counts"),
        ("team job count", lambda s: repo.count_jobs(s, team="team3"), "tf_jobs", "ix_tf_jobs_team"),
        ("vLLM fallback", lambda s: list(repo.fastest_ok_configs(
            s, [row["kernel_id"]], Objective.KERNEL, row["device_class_id"], row["problem_key"])),
         "tf_trials", "ix_tf_trials_measured"),
    ]  # fmt: skip
    for what, call, table, index in checks:
        plan = _plan(db, call)
        assert _uses(plan, table, index, db.backend), f"{what}: {plan}"
        assert "Seq Scan on tf_trials" not in plan and "SCAN tf_trials" not in plan, (
            f"{what}: {plan}"
        )
    if db.backend == "postgresql":  # covering: these read no trial row they do not return
        plan = _plan(db, lambda s: repo.outcome_counts(s, filled["study"]))
        assert "Index Only Scan using ix_tf_trials_study_counts" in plan, plan
        plan = _plan(db, lambda s: repo.measured_for_key(s, *key, Objective.KERNEL))
        assert "Index Only Scan using ix_tf_trials_measured" in plan, plan


def test_new_rows_are_read_by_id_range_without_statistics(db: Database) -> None:
    """The reuse check's read of the rows written since its last read (every 0.2 s in each
    server process) reaches them through the primary key on a table never analyzed, as a new
    database is until autovacuum's first pass (or for good without autovacuum)."""
    filled = _fill(db, analyze=False)
    with db.session(readonly=True) as s:
        newest = repo.last_trial_id(s)
        found, last = repo.verdicts_after(s, newest - 50)
    assert last == newest and sum(map(len, found.values())) == 50
    plan = _plan(db, lambda s: repo.verdicts_after(s, newest - 50))
    assert "Seq Scan on tf_trials" not in plan and "SCAN tf_trials" not in plan, plan
    assert filled["row"]["config_key"] in found[
        (filled["kernel"], filled["row"]["problem_key"], filled["row"]["device_class_id"],
         Objective.KERNEL)
    ]  # fmt: skip
