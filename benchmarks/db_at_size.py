"""The database at size: fill a PostgreSQL schema with millions of trial rows over realistic keys,
then time the queries tunefleet runs per trial and per request, with EXPLAIN (ANALYZE, BUFFERS).

    nice python3 benchmarks/db_at_size.py --trials 10000000 \
        --out benchmarks/results/db_at_size/2026-12-01-cpu

Phases: (1) a fresh schema (dropped at the end unless ``--keep``) migrated by the real migrations to
``--before`` (default 0003, the schema without revision 0004's indexes); (2) the fill: device classes,
environments and kernel versions through the repository's ``ensure_*`` functions, jobs and studies
by ``COPY``, trials by ``INSERT ... SELECT`` over ``generate_series`` in chunks (the trial table's
indexes are dropped for the load and rebuilt from their own ``pg_get_indexdef``; foreign-key
triggers are skipped for the load, ``session_replication_role = replica``, and the references are
checked by anti-joins afterwards), best configs from the fastest ``ok`` trial per key; (3) timing
at ``--before``; (4) ``Database.upgrade()`` to head (timed: what a user's ``tunefleet db upgrade``
costs on such a table); (5) timing at head. Every timed operation runs through a real repository
(or bundle export) function in its own ``Database.session()``, as the product calls it; the SQL it
sends is captured once and re-run under ``EXPLAIN (ANALYZE, BUFFERS)`` (writes in a rolled-back
transaction).

Keys: the registered kernels, three versions each (the newest the installed ``version_hash``, so
``pull`` exports it), 8 device classes (7 known ones and ``replay:NVIDIA H200``), two environments
each (Triton 3.5 and 3.6), ~200 problems per kernel picked with a Zipf skew (hot problems carry tens
of thousands of trials), jobs of 12 teams with 2-8 studies and 30-500 trials per study, configs from
each kernel's real search space. Trial samples are 25 floats (the runner's default ``reps``) drawn
from a pool, so row widths are real; medians are independent of them (no query reads both).
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import platform
import random
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from db import Database, Objective, repository  # noqa: E402
from db.session import declared_head  # noqa: E402
from orchestrator.export import bundle as bundle_export  # noqa: E402
from search_spaces.problem import problem_key  # noqa: E402
from search_spaces.registry import all_specs  # noqa: E402
from search_spaces.space import config_key  # noqa: E402
from search_spaces.spec import KernelSpec  # noqa: E402
from workers import device_table  # noqa: E402

PG_URL = os.environ.get("TUNEFLEET_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
TEAMS = tuple(f"team-{i:02d}" for i in range(12))
REPLAY_CLASS = "replay:NVIDIA H200"
#: Share of jobs per device class (the rest of the classes evenly).
CLASS_WEIGHTS = {"NVIDIA H200": 5, "NVIDIA H100 80GB HBM3": 4, "NVIDIA B200": 2, REPLAY_CLASS: 2}
KERNEL_WEIGHTS = {"matmul": 35, "flash_attention": 20, "fused_moe": 15, "rmsnorm": 15}
PROBLEMS_PER_KERNEL = 200
CONFIGS_PER_KERNEL = 1200
TRITONS = ("3.5.1", "3.6.0")
#: Outcome shares of the generated trials; crash and run_timeout rows are provisional.
OUTCOMES = (
    ("ok", 0.86),
    ("invalid", 0.06),
    ("compile_error", 0.03),
    ("wrong", 0.015),
    ("crash", 0.015),
    ("run_timeout", 0.005),
    ("infra", 0.015),
)
CHUNK_STUDIES = 2000
#: Trials a driver writes in one batch (a pool's wait drains up to its in-flight count).
BATCH = 16
#: Running jobs whose cancel flags one scheduler poll reads (the fleet simulation's 48).
JOBS_PER_SERVER = 48


@dataclass(frozen=True)
class Dims:
    """Ids of what the fill created, for picking realistic keys."""

    kernels: dict[tuple[str, int], int]  # (name, version index 0=newest) -> kernel id
    versions: dict[int, str]  # kernel id -> version hash
    classes: dict[str, int]  # class key -> id
    envs: dict[tuple[int, str], int]  # (class id, triton) -> environment id


def _url(schema: str) -> str:
    url = sa.make_url(PG_URL).update_query_dict({"options": f"-csearch_path={schema}"})
    return url.render_as_string(hide_password=False)


def _admin() -> sa.Engine:
    return sa.create_engine(sa.make_url(PG_URL), isolation_level="AUTOCOMMIT")


def _migrate(database: Database, revision: str, *, down: bool = False) -> None:
    config = database._alembic_config()
    with database.engine.connect() as conn, conn.begin():
        config.attributes["connection"] = conn
        (command.downgrade if down else command.upgrade)(config, revision)


def _log(msg: str) -> None:
    print(f"[{datetime.now(timezone.utc):%H:%M:%S}] {msg}", flush=True)


# ---------------------------------------------------------------------------------------- fill


def _problems(spec: KernelSpec, n: int, rng: random.Random) -> list[dict[str, Any]]:
    """Up to ``n`` valid problems around the spec's example: integer fields scaled by powers of 2."""
    example = dict(spec.example)
    ints = [k for k, v in example.items() if isinstance(v, int) and not isinstance(v, bool)]
    out: dict[str, dict[str, Any]] = {}
    for _ in range(n * 20):
        if len(out) >= n:
            break
        raw = dict(example)
        for k in ints:
            raw[k] = max(1, int(example[k] * 2 ** rng.randint(-4, 4)))
        try:
            problem = spec.schema.validate(raw)
        except Exception:
            continue
        out.setdefault(problem_key(problem), dict(problem))
    return list(out.values())


def _configs(spec: KernelSpec, n: int, rng: random.Random) -> list[dict[str, Any]]:
    limits = device_table.lookup("H200").limits
    configs: list[dict[str, Any]] = []
    for i, config in enumerate(spec.space.iter_valid(limits)):
        if len(configs) < n:
            configs.append(dict(config))
        else:  # reservoir sample over the whole space
            j = rng.randint(0, i)
            if j < n:
                configs[j] = dict(config)
        if i > 50 * n:
            break
    return configs


def _ensure_dims(database: Database, specs: list[KernelSpec]) -> Dims:
    kernels: dict[tuple[str, int], int] = {}
    versions: dict[int, str] = {}
    classes: dict[str, int] = {}
    envs: dict[tuple[int, str], int] = {}
    known = [device_table.lookup(n) for n in device_table.known_names() if n != "cpu"]
    with database.session() as s:
        for spec in specs:
            for v in range(3):
                version = spec.version_hash() if v == 0 else f"{spec.version_hash()[:12]}old{v}"
                kid = repository.ensure_kernel(s, spec.name, version, spec.space.hash())
                kernels[(spec.name, v)] = kid
                versions[kid] = version
        rows = [
            (k.device_class.key, k.vendor.value, k.name, k.arch, False, k.limits) for k in known
        ]
        h200 = device_table.lookup("H200")
        rows.append((REPLAY_CLASS, "nvidia", h200.name, h200.arch, True, h200.limits))
        for key, vendor, name, arch, replay, lim in rows:
            limits = {**lim.__dict__, "vendor": lim.vendor.value}
            classes[key] = repository.ensure_device_class(
                s, key, vendor, name, arch, replay, limits
            )
        for cid in classes.values():
            for triton in TRITONS:
                envs[(cid, triton)] = repository.ensure_environment(
                    s, cid, "580.159.04", "cuda 13.0", triton, "2.11.0"
                )
    return Dims(kernels, versions, classes, envs)


def _weighted(rng: random.Random, weights: Mapping[str, float], keys: list[str]) -> str:
    w = [weights.get(k, 1.0) for k in keys]
    return rng.choices(keys, weights=w)[0]


def _copy(raw: Any, table: str, columns: list[str], rows: list[tuple[Any, ...]]) -> None:
    """COPY ``rows`` into ``table`` (text format; None is NULL)."""

    def cell(v: Any) -> str:
        if v is None:
            return "\\N"
        if isinstance(v, bool):
            return "t" if v else "f"
        text = v if isinstance(v, str) else str(v)
        return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")

    buf = io.StringIO()
    for row in rows:
        buf.write("\t".join(cell(v) for v in row) + "\n")
    with raw.cursor() as cur, cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as cp:
        cp.write(buf.getvalue())


def _plan_jobs(
    target: int, specs: list[KernelSpec], dims: Dims, rng: random.Random
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], dict[str, list[dict[str, Any]]]]:
    """Job and study rows whose study budgets add up to ``target`` trials."""
    problems = {s.name: _problems(s, PROBLEMS_PER_KERNEL, rng) for s in specs}
    names = [s.name for s in specs]
    class_keys = list(dims.classes)
    zipf = {n: [1 / (r + 1) ** 0.9 for r in range(len(p))] for n, p in problems.items()}
    jobs: list[tuple[Any, ...]] = []
    studies: list[tuple[Any, ...]] = []
    start = datetime(2026, 6, 1, tzinfo=timezone.utc)
    total = 0
    job_id = study_id = 0
    while total < target:
        job_id += 1
        name = _weighted(rng, KERNEL_WEIGHTS, names)
        v = rng.choices([0, 1, 2], weights=[6, 3, 1])[0]
        kid = dims.kernels[(name, v)]
        n_problems = rng.choice([1, 2, 4])
        n_classes = rng.choice([1, 2])
        chosen = rng.choices(range(len(problems[name])), weights=zipf[name], k=n_problems)
        picked = [problems[name][i] for i in dict.fromkeys(chosen)]
        cls = list(
            dict.fromkeys(_weighted(rng, CLASS_WEIGHTS, class_keys) for _ in range(n_classes))
        )
        budget = rng.choice([30, 30, 60, 100, 200, 500])
        team = rng.choice(TEAMS)
        created = start + timedelta(seconds=job_id * 600 + rng.randint(0, 500))
        triton = TRITONS[1] if rng.random() < 0.7 else TRITONS[0]
        spec = {
            "kernel": name,
            "problems": picked,
            "device_classes": cls,
            "trials": budget,
            "sampler": "local",
            "objective": "kernel",
            "team": team,
            "seed": rng.randint(0, 2**31),
            "in_flight": 4,
        }
        jobs.append(
            (job_id, kid, "done", json.dumps(spec), team, None, created.isoformat(),
             created.isoformat(), (created + timedelta(hours=1)).isoformat(), False, 0)
        )  # fmt: skip
        for problem in picked:
            for key in cls:
                study_id += 1
                cid = dims.classes[key]
                pkey = problem_key(problem)
                n = max(1, int(budget * rng.uniform(0.8, 1.05)))
                total += n
                studies.append(
                    (study_id, job_id, kid, pkey, json.dumps(problem), cid, "local",
                     f"tunefleet-job{job_id}-s{study_id}", "done", n, dims.envs[(cid, triton)],
                     name, created.isoformat())
                )  # fmt: skip
    return jobs, studies, problems


_SAMPLE_POOL = 4096


def _fill(database: Database, target: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    specs = all_specs()
    t0 = time.perf_counter()
    dims = _ensure_dims(database, specs)
    jobs, studies, _ = _plan_jobs(target, specs, dims, rng)
    configs = {s.name: _configs(s, CONFIGS_PER_KERNEL, rng) for s in specs}
    _log(f"planned {len(jobs)} jobs, {len(studies)} studies, {sum(r[9] for r in studies)} trials")
    raw = database.engine.raw_connection()
    try:
        drv = raw.driver_connection
        assert drv is not None
        cur = drv.cursor()
        cur.execute("SET maintenance_work_mem = '512MB'")
        cur.execute("SET work_mem = '256MB'")
        cur.execute("SET session_replication_role = replica")
        _copy(drv, "tf_jobs", ["id", "kernel_id", "status", "spec", "team", "error", "created_at",
                               "started_at", "finished_at", "cancel_requested", "priority"], jobs)  # fmt: skip
        study_cols = ["id", "job_id", "kernel_id", "problem_key", "problem", "device_class_id",
                      "sampler", "optuna_study_name", "status"]  # fmt: skip
        _copy(drv, "tf_studies", study_cols, [r[:9] for r in studies])
        cur.execute("SELECT setval('tf_jobs_id_seq', (SELECT max(id) FROM tf_jobs))")
        cur.execute("SELECT setval('tf_studies_id_seq', (SELECT max(id) FROM tf_studies))")
        # Helper tables (unlogged, dropped below): per study its trial count and config pool.
        cur.execute(
            "CREATE UNLOGGED TABLE fill_studies (study_id int PRIMARY KEY, job_id int, kernel_id int, "
            "problem_key text, device_class_id int, n int, environment_id int, kernel_name text, "
            "created_at timestamptz, key_no int, key_rank int, ncfg int)"
        )
        key_no: dict[tuple[int, str, int], int] = {}
        rank: dict[int, int] = {}
        rows = []
        for r in studies:
            k = (r[2], r[3], r[5])
            no = key_no.setdefault(k, len(key_no))
            rank[no] = rank.get(no, -1) + 1
            rows.append((r[0], r[1], r[2], r[3], r[5], r[9], r[10], r[11], r[12], no, rank[no],
                         len(configs[r[11]])))  # fmt: skip
        _copy(drv, "fill_studies", ["study_id", "job_id", "kernel_id", "problem_key",
                                    "device_class_id", "n", "environment_id", "kernel_name",
                                    "created_at", "key_no", "key_rank", "ncfg"], rows)  # fmt: skip
        cur.execute(
            "CREATE UNLOGGED TABLE fill_configs (kernel_name text, idx int, config text, "
            "config_key text, PRIMARY KEY (kernel_name, idx))"
        )
        _copy(drv, "fill_configs", ["kernel_name", "idx", "config", "config_key"],
              [(n, i, json.dumps(c), config_key(c)) for n, cs in configs.items()
               for i, c in enumerate(cs)])  # fmt: skip
        cur.execute("CREATE UNLOGGED TABLE fill_samples (idx int PRIMARY KEY, samples text)")
        _copy(drv, "fill_samples", ["idx", "samples"],
              [(i, json.dumps([rng.lognormvariate(-1, 1.5) for _ in range(25)]))
               for i in range(_SAMPLE_POOL)])  # fmt: skip
        # Trial indexes off during the load, rebuilt from their own definitions afterwards.
        cur.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'tf_trials' "
            "AND schemaname = current_schema() AND indexname <> 'pk_tf_trials'"
        )
        indexes = cur.fetchall()
        for name, _ in indexes:
            cur.execute(f"DROP INDEX {name}")
        drv.commit()
        t_dims = time.perf_counter() - t0
        bounds = [0.0]
        for _, share in OUTCOMES:
            bounds.append(bounds[-1] + share)
        outcome_case = " ".join(
            f"WHEN u < {bounds[i + 1]:.4f} THEN '{o}'" for i, (o, _) in enumerate(OUTCOMES)
        )
        insert = f"""
            INSERT INTO tf_trials (job_id, study_id, kernel_id, problem_key, device_class_id,
                environment_id, config, config_key, outcome, objective, samples_ms, median_ms,
                iqr_ms, max_rel_error, compile_s, run_s, error, worker, host, reused, provisional,
                created_at)
            SELECT f.job_id, f.study_id, f.kernel_id, f.problem_key, f.device_class_id,
                f.environment_id, c.config::json, c.config_key, t.outcome, 'kernel',
                CASE WHEN t.outcome IN ('ok', 'wrong') THEN sp.samples::json END,
                CASE WHEN t.outcome IN ('ok', 'wrong') THEN exp(random() * 6 - 4) END,
                CASE WHEN t.outcome IN ('ok', 'wrong') THEN random() * 0.01 END,
                CASE WHEN t.outcome IN ('ok', 'wrong') THEN random() * 1e-3 END,
                random() * 8, random() * 2,
                CASE WHEN t.outcome = 'compile_error'
                     THEN 'CompilationError: out of resource: shared memory, Required: 262144' END,
                'worker-' || mod(f.study_id, 64), 'node-' || mod(f.study_id, 16),
                f.key_rank > 0 AND random() < 0.5,
                t.outcome IN ('crash', 'run_timeout'),
                f.created_at + g.i * interval '2 seconds'
            FROM fill_studies f
            CROSS JOIN LATERAL generate_series(0, f.n - 1) AS g(i)
            JOIN fill_configs c ON c.kernel_name = f.kernel_name
                AND c.idx = mod(f.key_no * 7919 + g.i * 104729, f.ncfg)
            JOIN fill_samples sp ON sp.idx = mod(f.study_id * 31 + g.i, {_SAMPLE_POOL})
            CROSS JOIN LATERAL (SELECT CASE {outcome_case} ELSE 'ok' END AS outcome
                                FROM (SELECT random() + 0 * g.i AS u) r) t
            WHERE f.study_id > %s AND f.study_id <= %s
        """
        t1 = time.perf_counter()
        last = len(studies)
        for lo in range(0, last, CHUNK_STUDIES):
            cur.execute(insert, (lo, lo + CHUNK_STUDIES))
            drv.commit()
            _log(f"trials: studies up to {min(lo + CHUNK_STUDIES, last)}/{last}")
        t_trials = time.perf_counter() - t1
        t2 = time.perf_counter()
        for name, definition in indexes:
            cur.execute(definition)
            drv.commit()
            _log(f"rebuilt {name}")
        t_index = time.perf_counter() - t2
        t3 = time.perf_counter()
        cur.execute(
            """
            INSERT INTO tf_best_configs (kernel_name, kernel_version, problem_key, device_class_id,
                triton_minor, objective, config, time_ms, trial_id, job_id, environment_id,
                updated_at)
            SELECT DISTINCT ON (t.kernel_id, t.problem_key, t.device_class_id, e.triton_version)
                k.name, k.version_hash, t.problem_key, t.device_class_id,
                split_part(e.triton_version, '.', 1) || '.' || split_part(e.triton_version, '.', 2),
                'kernel', t.config, t.median_ms, t.id, t.job_id, t.environment_id, t.created_at
            FROM tf_trials t
            JOIN tf_kernels k ON k.id = t.kernel_id
            JOIN tf_environments e ON e.id = t.environment_id
            WHERE t.outcome = 'ok'
            ORDER BY t.kernel_id, t.problem_key, t.device_class_id, e.triton_version, t.median_ms
            """
        )
        cur.execute("DROP TABLE fill_studies, fill_configs, fill_samples")
        cur.execute("SET session_replication_role = origin")
        drv.commit()
        t_best = time.perf_counter() - t3
        orphans = {}
        for column, target_table in (
            ("job_id", "tf_jobs"),
            ("study_id", "tf_studies"),
            ("kernel_id", "tf_kernels"),
            ("device_class_id", "tf_device_classes"),
            ("environment_id", "tf_environments"),
        ):
            cur.execute(
                f"SELECT count(*) FROM tf_trials t WHERE t.{column} IS NOT NULL AND NOT EXISTS "
                f"(SELECT 1 FROM {target_table} x WHERE x.id = t.{column})"
            )
            orphans[column] = cur.fetchone()[0]
        drv.commit()
        if any(orphans.values()):
            raise SystemExit(f"the fill broke foreign keys: {orphans}")
        t4 = time.perf_counter()
        drv.autocommit = True
        cur.execute("VACUUM ANALYZE")
        t_vacuum = time.perf_counter() - t4
    finally:
        raw.close()
    return {
        "dims_jobs_studies_s": round(t_dims, 1),
        "trials_insert_s": round(t_trials, 1),
        "index_rebuild_s": round(t_index, 1),
        "best_configs_s": round(t_best, 1),
        "vacuum_analyze_s": round(t_vacuum, 1),
        "total_s": round(time.perf_counter() - t0, 1),
        "jobs": len(jobs),
        "studies": len(studies),
        "orphan_references": orphans,
    }


# -------------------------------------------------------------------------------------- timing


class Capture:
    """The statements an engine sends while active (for EXPLAIN)."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self.statements: list[tuple[str, Any]] = []
        self.on = False
        sa.event.listen(engine, "before_cursor_execute", self._before)

    def _before(self, conn: Any, cursor: Any, statement: str, params: Any, *_: Any) -> None:
        if self.on:
            self.statements.append((statement, params))

    @contextmanager
    def active(self) -> Iterator[list[tuple[str, Any]]]:
        self.statements = []
        self.on = True
        try:
            yield self.statements
        finally:
            self.on = False


def _explained(
    database: Database, calls: list[list[tuple[str, Any]]], options: str
) -> Iterator[list[tuple[str, Any, list[Any]]]]:
    """Per call, each of its statements with the rows of ``EXPLAIN (options)`` of it, re-run on
    one connection; each call's writes rolled back."""
    raw = database.engine.raw_connection()
    try:
        drv = raw.driver_connection
        assert drv is not None
        with drv.cursor() as cur:
            for statements in calls:
                out = []
                for statement, params in statements:
                    head = statement.lstrip().split(None, 1)[0].upper()
                    if head not in {"SELECT", "INSERT", "UPDATE", "DELETE", "WITH"}:
                        continue
                    cur.execute(f"EXPLAIN ({options}) {statement}", params)
                    out.append((statement, params, [r[0] for r in cur.fetchall()]))
                drv.rollback()
                yield out
    finally:
        raw.close()


def _explain(database: Database, statements: list[tuple[str, Any]]) -> str:
    """``EXPLAIN (ANALYZE, BUFFERS)`` of ``statements``, as text."""
    (explained,) = _explained(database, [statements], "ANALYZE, BUFFERS")
    return "\n".join(
        f"-- {' '.join(q.split())[:400]}\n-- params: {p!r}\n" + "\n".join(rows) + "\n"
        for q, p, rows in explained
    )


@dataclass(frozen=True)
class Op:
    """A timed operation: ``call(i)`` runs it once for the i-th random key."""

    name: str
    what: str
    call: Callable[[int], object]
    calls: int
    target_ms: float | None = None


def _keys(database: Database, n: int, seed: int) -> dict[str, list[Any]]:
    """Random existing keys: trials (for dedupe), studies, jobs, teams, best rows."""
    rng = random.Random(seed)
    with database.engine.connect() as conn:
        max_id = conn.scalar(sa.text("SELECT max(id) FROM tf_trials")) or 0
        ids = [rng.randint(1, max_id) for _ in range(n)]
        trials = conn.execute(
            sa.text(
                "SELECT t.kernel_id, t.problem_key, t.device_class_id, t.config_key, t.study_id, "
                "k.name, k.version_hash, d.key, t.job_id FROM tf_trials t "
                "JOIN tf_kernels k ON k.id = t.kernel_id "
                "JOIN tf_device_classes d ON d.id = t.device_class_id WHERE t.id = ANY(:ids)"
            ),
            {"ids": ids},
        ).all()
        hot = conn.execute(
            sa.text(
                "SELECT kernel_id, problem_key, device_class_id, count(*) AS n FROM tf_trials "
                "GROUP BY 1, 2, 3 ORDER BY n DESC LIMIT 20"
            )
        ).all()
        bests = conn.execute(
            sa.text(
                "SELECT b.kernel_name, b.problem_key, d.key, b.kernel_version, b.triton_minor, "
                "b.time_ms, b.device_class_id FROM tf_best_configs b "
                "JOIN tf_device_classes d ON d.id = b.device_class_id ORDER BY random() LIMIT :n"
            ),
            {"n": n},
        ).all()
        running = (
            conn.execute(
                sa.text("SELECT id FROM tf_jobs ORDER BY random() LIMIT :n"), {"n": JOBS_PER_SERVER}
            )
            .scalars()
            .all()
        )
    shuffled = list(trials)
    rng.shuffle(shuffled)
    return {
        "trials": shuffled,
        "hot": list(hot),
        "bests": list(bests),
        "running": list(running),
        "newest": [max_id],
    }


def _ops(database: Database, keys: dict[str, list[Any]], calls: int, out_dir: Path) -> list[Op]:
    trials, hot, bests, running = keys["trials"], keys["hot"], keys["bests"], keys["running"]
    newest = keys["newest"][0]
    teams = list(TEAMS)
    with database.session(readonly=True) as s:  # the oldest jobs: the last pages' bounds
        oldest = list(s.scalars(sa.text("SELECT id FROM tf_jobs ORDER BY id LIMIT 100")))

    def tr(i: int) -> Any:
        return trials[i % len(trials)]

    def find_measured(i: int) -> object:
        t = tr(i)
        with database.session(readonly=True) as s:
            return repository.find_measured(s, t[0], t[1], t[2], t[3], Objective.KERNEL)

    def find_missing(i: int) -> object:
        t = tr(i)
        with database.session(readonly=True) as s:
            return repository.find_measured(s, t[0], t[1], t[2], '{"never":1}', Objective.KERNEL)

    def measured_for_key(i: int) -> object:
        t = tr(i)
        with database.session(readonly=True) as s:
            return repository.measured_for_key(s, t[0], t[1], t[2], Objective.KERNEL)

    def measured_hot(i: int) -> object:
        h = hot[i % len(hot)]
        with database.session(readonly=True) as s:
            return repository.measured_for_key(s, h[0], h[1], h[2], Objective.KERNEL)

    def warm_start(i: int) -> object:
        # The driver's warm-start reads for a study: this key's measured configs, every best of
        # the kernel version (the nearest problems on this class come from them), the nearest's.
        t = tr(i)
        with database.session(readonly=True) as s:
            repository.measured_for_key(s, t[0], t[1], t[2], Objective.KERNEL)
            rows = repository.get_best(s, t[5], kernel_version=t[6], objective=Objective.KERNEL)
            near = next(
                (b for b in rows if b.device_class_key == t[7] and b.problem_key != t[1]), None
            )
            if near is not None:
                repository.measured_for_key(s, t[0], near.problem_key, t[2], Objective.KERNEL)
            return rows

    def best_read(i: int) -> object:
        b = bests[i % len(bests)]
        with database.session(readonly=True) as s:
            return repository.get_best(s, b[0], b[1], b[2], b[3], b[4], Objective.KERNEL)

    def best_upsert(i: int) -> object:
        b = bests[i % len(bests)]
        with database.session() as s:  # slower than stored: the guarded upsert writes nothing
            return repository.upsert_best(
                s, b[0], b[3], b[1], b[6], b[4], {"BLOCK": 1}, b[5] * 1.5, None, None, None
            )

    def best_upsert_wins(i: int) -> object:
        b = bests[i % len(bests)]
        with database.session() as s:
            return repository.upsert_best(
                s, b[0], b[3], b[1], b[6], b[4], {"BLOCK": 1}, b[5] * 0.999, None, None, None
            )

    def record_trial(i: int) -> object:
        t = tr(i)
        with database.session() as s:
            return repository.record_trial(
                s, kernel_id=t[0], problem_key=t[1], device_class_id=t[2], config=json.loads(t[3]),
                config_key=t[3], outcome="ok", job_id=t[8], study_id=t[4],
                samples_ms=[0.1] * 25, median_ms=0.1, worker="bench", host="bench",
            )  # fmt: skip

    def record_batch(i: int) -> object:
        t = tr(i)
        row: repository.TrialFields = {
            "kernel_id": t[0], "problem_key": t[1], "device_class_id": t[2],
            "config": json.loads(t[3]), "config_key": t[3], "outcome": "ok", "job_id": t[8],
            "study_id": t[4], "samples_ms": [0.1] * 25, "median_ms": 0.1, "worker": "bench",
            "host": "bench",
        }  # fmt: skip
        with database.session() as s:
            return repository.record_trials(s, [row] * BATCH)

    def reuse_write(i: int) -> object:
        t = tr(i)
        return database.write_one(
            lambda c: repository.reuse_measured(
                c, t[0], t[1], t[2], t[3], Objective.KERNEL, job_id=t[8], study_id=t[4],
                config=json.loads(t[3]),
            )
        )  # fmt: skip

    def verdicts_read(i: int) -> object:
        # The rows a server's 0.2 s reuse read finds at 1,000 trials/s (the newest ~200; timed
        # before the ops that insert rows).
        with database.session(readonly=True) as s:
            return repository.verdicts_after(s, newest - 200 - i % 50)

    def cancels(i: int) -> object:
        with database.session(readonly=True) as s:
            return repository.cancels_requested(s, running)

    def job_detail(i: int) -> object:
        t = tr(i)
        with database.session(readonly=True) as s:
            repository.get_job(s, t[8])
            studies = repository.studies_for_job(s, t[8])
            return [repository.outcome_counts(s, st.id) for st in studies]

    def jobs_page_team(i: int) -> object:
        with database.session(readonly=True) as s:
            team = teams[i % len(teams)]
            return repository.list_jobs(s, team=team), repository.count_jobs(s, team=team)

    def jobs_page_kernel_status(i: int) -> object:
        with database.session(readonly=True) as s:
            kernel = trials[i % len(trials)][5]
            return (
                repository.list_jobs(s, kernel=kernel, status="done"),
                repository.count_jobs(s, kernel=kernel, status="done"),
            )

    def jobs_page_last(i: int) -> object:
        with database.session(readonly=True) as s:
            total = repository.count_jobs(s)
            return repository.list_jobs(s, limit=50, offset=max(0, total - 50 - i))

    def jobs_page_last_keyset(i: int) -> object:
        with database.session(readonly=True) as s:
            repository.count_jobs(s)  # the listing's total, as jobs_page_last reads it
            return repository.list_jobs(
                s, limit=50, before=oldest[min(len(oldest) - 1, 50 + i % 50)]
            )

    def claim(i: int) -> object:
        with database.session(readonly=True) as s:  # rolled back: the queue stays as it is
            return repository.claim_next_job(s, "bench", 30.0)

    def study_trials(i: int) -> object:
        with database.session(readonly=True) as s:
            return repository.trials_for_study(s, tr(i)[4])

    export_dir = Path(tempfile.mkdtemp(prefix="db_at_size_export_"))

    def export(i: int) -> object:
        return bundle_export.export(database, "matmul", export_dir / str(i % 3))

    ops = [
        Op("dedupe.find_measured", "per trial: dedupe lookup of a measured config", find_measured,
           calls, 2.0),
        Op("dedupe.find_measured_miss", "per trial: dedupe lookup of a new config", find_missing,
           calls, 2.0),
        Op("best.get_best", "per request: best config of one key", best_read, calls, 2.0),
        Op("best.upsert_best_slower", "per trial: best upsert that keeps the stored row",
           best_upsert, calls),
        Op("best.upsert_best_faster", "per trial: best upsert that replaces it", best_upsert_wins,
           calls),
        Op("dedupe.verdicts_after", "per server every 0.2 s: verdicts in the newest ~200 rows",
           verdicts_read, calls),
        Op("trial.record_trial", "per trial: insert one trial row", record_trial, calls),
        Op("trial.record_trials", f"per {BATCH} trials: the driver's batched insert", record_batch,
           calls),
        Op("dedupe.reuse_measured", "per reused trial: copy a verdict (write_one, autocommit)",
           reuse_write, calls, 2.0),
        Op("scheduler.cancels_requested", f"per scheduler poll: cancels of {JOBS_PER_SERVER} jobs",
           cancels, calls),
        Op("warm.measured_for_key", "per study: measured configs of a key", measured_for_key,
           calls),
        Op("warm.measured_for_key_hot", "per study: measured configs of one of the 20 hottest keys",
           measured_hot, max(20, calls // 5)),
        Op("warm.start", "per study: the driver's warm-start reads", warm_start, max(20, calls // 5)),
        Op("progress.job_detail", "per request: job + studies + outcome counts", job_detail, calls,
           20.0),
        Op("progress.jobs_page_team", "per request: list_jobs + count_jobs of a team",
           jobs_page_team, calls, 20.0),
        Op("progress.jobs_page_kernel_status", "per request: list_jobs + count_jobs by kernel, status",
           jobs_page_kernel_status, calls, 20.0),
        Op("progress.jobs_page_last", "per request: the last page of all jobs", jobs_page_last,
           max(20, calls // 5), 20.0),
        Op("progress.jobs_page_last_keyset", "per request: the last page of all jobs by `before`",
           jobs_page_last_keyset, max(20, calls // 5), 20.0),
        Op("scheduler.claim_next_job", "per scheduler poll: claim (rolled back)", claim, calls),
        Op("study.trials_for_study", "per request: a study's trials", study_trials,
           max(20, calls // 5)),
        Op("bundle.export_matmul", "per pull: bundle export of matmul (native)", export, 10,
           1000.0),
    ]  # fmt: skip
    return ops


def _server_ms(database: Database, calls: list[list[tuple[str, Any]]]) -> list[float]:
    """Planning + execution time the server reports for each call's statements, re-run under
    ``EXPLAIN (ANALYZE, TIMING OFF)`` (each call's writes rolled back)."""
    return [
        sum(rows[0][0]["Planning Time"] + rows[0][0]["Execution Time"] for _, _, rows in call)
        for call in _explained(database, calls, "ANALYZE, TIMING OFF, FORMAT JSON")
    ]


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))], 3)


def _time_ops(database: Database, ops: list[Op], label: str, out_dir: Path) -> list[dict[str, Any]]:
    capture = Capture(database.engine)
    results = []
    explain_dir = out_dir / f"explain-{label}"
    explain_dir.mkdir(parents=True, exist_ok=True)
    for op in ops:
        for i in range(3):  # warm-up: connections, statement caches
            op.call(i + 10_000)
        times = []
        captured = []
        load = os.getloadavg()[0]
        for i in range(op.calls):
            with capture.active() as statements:
                t0 = time.perf_counter()
                op.call(i)
                times.append((time.perf_counter() - t0) * 1e3)
            captured.append(list(statements))
        server = _server_ms(database, captured[:100])
        (explain_dir / f"{op.name}.txt").write_text(_explain(database, captured[0]))
        p99 = _pct(times, 0.99)
        row: dict[str, Any] = {
            "op": op.name,
            "what": op.what,
            "calls": op.calls,
            "p50_ms": _pct(times, 0.5),
            "p99_ms": p99,
            "max_ms": round(max(times), 3),
            "server_p50_ms": _pct(server, 0.5),
            "server_p99_ms": _pct(server, 0.99),
            "target_p99_ms": op.target_ms,
            "statements": len(captured[0]),
            "load_1min": round(load, 1),
            "meets_target": None if op.target_ms is None else p99 <= op.target_ms,
        }
        results.append(row)
        _log(
            f"{label} {op.name}: p50 {row['p50_ms']} p99 {row['p99_ms']} ms; server p50 "
            f"{row['server_p50_ms']} p99 {row['server_p99_ms']} ms (load {load:.1f})"
        )
    return results


def _sizes(database: Database) -> dict[str, Any]:
    with database.engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT c.relname, c.reltuples::bigint, pg_table_size(c.oid), pg_indexes_size(c.oid) "
                "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = current_schema() AND c.relkind = 'r' ORDER BY c.relname"
            )
        ).all()
        indexes = conn.execute(
            sa.text(
                "SELECT indexrelname, pg_relation_size(indexrelid) FROM pg_stat_user_indexes "
                "WHERE schemaname = current_schema() ORDER BY indexrelname"
            )
        ).all()
        trials = conn.scalar(sa.text("SELECT count(*) FROM tf_trials"))
        width = conn.scalar(
            sa.text("SELECT avg(pg_column_size(t.*)) FROM tf_trials t TABLESAMPLE SYSTEM (0.1)")
        )
    return {
        "tables": {r[0]: {"rows": r[1], "table_bytes": r[2], "index_bytes": r[3]} for r in rows},
        "indexes": {r[0]: r[1] for r in indexes},
        "trial_rows": trials,
        "trial_row_bytes_avg": round(float(width or 0), 1),
    }


def _markdown(report: dict[str, Any]) -> str:
    lines = [
        f"# db_at_size: {report['trial_rows']:,} trial rows on PostgreSQL "
        f"{report['server_version']}",
        "",
        f"Fill: {report['fill']}",
        "",
        f"Upgrade {report['before']} -> {report['after']}: {report['upgrade_s']} s"
        if report["upgrade_s"] is not None
        else f"Timed at revision {report['after']} only (filled at the head)",
        "",
        "Client: wall time of the repository call in its own session (Python, pool checkout,"
        " round trips; on a shared 2-core machine). Server: planning + execution time PostgreSQL"
        " reports for the same statements (EXPLAIN ANALYZE, TIMING OFF; first 100 calls).",
        "",
        "| op | what | calls | before p50 / p99 | after p50 / p99 | after server p50 / p99 | "
        "target p99 |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    before = {r["op"]: r for r in report["before_timing"]}
    for a in report["after_timing"]:
        b = before.get(a["op"], {})
        target = f"≤ {a['target_p99_ms']:g} ms" if a["target_p99_ms"] else ""
        if a["meets_target"] is not None:
            target += " ✓" if a["meets_target"] else " ✗"
        lines.append(
            f"| {a['op']} | {a['what']} | {a['calls']} | {b.get('p50_ms', '')} / "
            f"{b.get('p99_ms', '')} | {a['p50_ms']} / {a['p99_ms']} | "
            f"{a.get('server_p50_ms', '')} / {a.get('server_p99_ms', '')} | {target} |"
        )
    lines += ["", "Sizes (after):", "", "| table | rows | table bytes | index bytes |",
              "|---|---:|---:|---:|"]  # fmt: skip
    for name, t in report["sizes_after"]["tables"].items():
        lines.append(f"| {name} | {t['rows']:,} | {t['table_bytes']:,} | {t['index_bytes']:,} |")
    lines += ["", f"Average trial row: {report['sizes_after']['trial_row_bytes_avg']} bytes "
              "(pg_column_size over a 0.1% sample)", ""]  # fmt: skip
    lines += ["| index | bytes |", "|---|---:|"]
    lines += [f"| {k} | {v:,} |" for k, v in report["sizes_after"]["indexes"].items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=10_000_000, help="trial rows to generate")
    parser.add_argument("--calls", type=int, default=300, help="timed calls per query")
    parser.add_argument("--before", default="0003", help="revision timed before the upgrade")
    parser.add_argument("--schema", default=None, help="schema name (default: a fresh random one)")
    parser.add_argument("--reuse", action="store_true", help="time an already filled --schema")
    parser.add_argument("--keep", action="store_true", help="leave the schema (drop it yourself)")
    parser.add_argument("--fill-only", action="store_true", help="stop after the fill (use --keep)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--ops",
        nargs="+",
        default=None,
        metavar="PREFIX",
        help="time only the queries whose names start so (default: every one)",
    )
    parser.add_argument("--out", type=Path, required=True, help="results folder")
    args = parser.parse_args(argv)
    if args.trials < 1000 or args.calls < 10:
        parser.error("need --trials >= 1000 and --calls >= 10")
    if args.reuse and not args.schema:
        parser.error("--reuse needs --schema")
    schema = args.schema or f"dbsize_{secrets.token_hex(4)}"
    if not schema.replace("_", "").isalnum():
        parser.error(f"--schema {schema!r}: letters, digits and _ only")
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    admin = _admin()
    if not args.reuse:
        with admin.connect() as conn:
            conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
    database = Database(_url(schema))
    report: dict[str, Any] = {
        "schema": schema,
        "argv": sys.argv,
        "python": platform.python_version(),
    }
    try:
        with database.engine.connect() as conn:
            report["server_version"] = conn.scalar(sa.text("SHOW server_version"))
            report["shared_buffers"] = conn.scalar(sa.text("SHOW shared_buffers"))
        if args.reuse:
            report["fill"] = json.loads((out / "fill.json").read_text())
            if database.current_revision() != args.before:  # a rerun: back to the old schema
                t0 = time.perf_counter()
                _migrate(database, args.before, down=True)
                report["downgrade_s"] = round(time.perf_counter() - t0, 1)
        else:
            _migrate(database, args.before)
            report["load_at_start"] = os.getloadavg()
            _log(f"filling {schema} with {args.trials} trials (load {os.getloadavg()})")
            report["fill"] = _fill(database, args.trials, args.seed)
            (out / "fill.json").write_text(json.dumps(report["fill"], indent=1))
            _log(f"fill: {report['fill']}")
            if args.fill_only:
                return 0
        report["before"] = database.current_revision()
        keys = _keys(database, 2000, args.seed)
        ops = [
            op
            for op in _ops(database, keys, args.calls, out)
            if args.ops is None or op.name.startswith(tuple(args.ops))
        ]
        report["sizes_before"] = _sizes(database)
        at_head = report["before"] == declared_head()  # nothing to compare: time once
        report["before_timing"] = [] if at_head else _time_ops(database, ops, "before", out)
        t0 = time.perf_counter()
        database.upgrade()
        report["upgrade_s"] = None if at_head else round(time.perf_counter() - t0, 1)
        report["after"] = database.current_revision()
        with database.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(sa.text("ANALYZE"))
        report["after_timing"] = _time_ops(database, ops, "after", out)
        report["sizes_after"] = _sizes(database)
        report["trial_rows"] = report["sizes_after"]["trial_rows"]
        report["load_at_end"] = os.getloadavg()
        report["commit"] = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
        ).stdout.strip()
        (out / "db_at_size.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
        (out / "TABLE.md").write_text(_markdown(report))
        print(_markdown(report))
    finally:
        database.close()
        if not args.keep:
            with admin.connect() as conn:
                conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
            _log(f"dropped schema {schema}")
        admin.dispose()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
