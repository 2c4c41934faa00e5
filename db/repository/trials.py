"""Trials: writes (one or a batch), the dedupe and reuse of a config's verdict, warm start's reads."""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypedDict, Unpack, cast

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import Session

from db.errors import InvalidRecord
from db.models import RETRYABLE_OUTCOMES, Objective, Trial, TrialOutcome, utcnow
from db.repository._rows import coerce, record
from db.text import StoredJSON, StoredString, StoredText


@dataclass(frozen=True)
class TrialRecord:
    """A trial row. Times in ms except ``compile_s``/``run_s``."""

    id: int
    job_id: int | None
    study_id: int | None
    kernel_id: int
    problem_key: str
    device_class_id: int
    environment_id: int | None
    config: dict[str, Any]
    config_key: str
    outcome: TrialOutcome
    objective: Objective
    samples_ms: list[float] | None
    median_ms: float | None
    iqr_ms: float | None
    max_rel_error: float | None
    compile_s: float | None
    run_s: float | None
    error: str | None
    worker: str | None
    host: str | None
    reused: bool
    provisional: bool
    created_at: datetime


@dataclass(frozen=True)
class MeasuredRecord:
    """What warm start needs of one trial: its config, median time and outcome."""

    config: dict[str, Any]
    config_key: str
    median_ms: float | None
    outcome: TrialOutcome


class _TrialKey(TypedDict):
    kernel_id: int
    problem_key: str
    device_class_id: int
    config: Mapping[str, Any]
    config_key: str
    outcome: TrialOutcome | str


class TrialFields(_TrialKey, total=False):
    """One trial row's fields: its key and verdict (required), then what was measured."""

    job_id: int | None
    study_id: int | None
    environment_id: int | None
    samples_ms: list[float] | None
    median_ms: float | None
    iqr_ms: float | None
    max_rel_error: float | None
    compile_s: float | None
    run_s: float | None
    error: str | None
    worker: str | None
    host: str | None
    reused: bool
    objective: Objective | str
    provisional: bool


def record_trial(s: Session, **fields: Unpack[TrialFields]) -> int:
    """Write one trial and return its id; ``outcome`` is an Outcome value (``"ok"``, ``"infra"``, ...),
    ``objective`` what its times mean (default ``kernel``).

    ``provisional=True`` marks a verdict that may not be the config's fault (an outcome of
    :data:`db.models.RETRYABLE_OUTCOMES`): kept for the record, never reused by
    :func:`find_measured` / :func:`measured_for_key`, so the config is measured again.
    ``config_key`` must be the caller's canonical JSON of ``config`` (search_spaces.space.config_key).
    The row is flushed, and committed when the caller's session block ends.
    """
    return record_trials(s, [fields])[0]


def record_trials(s: Session, rows: Sequence[TrialFields]) -> list[int]:
    """Write several trials (each: :func:`record_trial`'s fields) in one statement (one
    batched ``INSERT ... RETURNING``, no ORM objects); their ids, in order."""
    if not rows:
        return []
    values = [_trial_values(row) for row in rows]
    if s.get_bind().dialect.name == "postgresql":
        return _insert_json(s, values)
    table = cast(sa.Table, Trial.__table__)
    insert = sa.insert(table).returning(table.c.id, sort_by_parameter_order=True)
    return list(s.execute(insert, values).scalars())


#: The trial columns :func:`_insert_json` writes, with their PostgreSQL types.
_JSON_INSERT_COLUMNS = (
    ("job_id", "int8"),
    ("study_id", "int8"),
    ("kernel_id", "int8"),
    ("problem_key", "text"),
    ("device_class_id", "int8"),
    ("environment_id", "int8"),
    ("config", "json"),
    ("config_key", "text"),
    ("outcome", "text"),
    ("objective", "text"),
    ("samples_ms", "json"),
    ("median_ms", "float8"),
    ("iqr_ms", "float8"),
    ("max_rel_error", "float8"),
    ("compile_s", "float8"),
    ("run_s", "float8"),
    ("error", "text"),
    ("worker", "text"),
    ("host", "text"),
    ("reused", "bool"),
    ("provisional", "bool"),
    ("created_at", "timestamptz"),
)
_ENUM_COLUMNS = frozenset({"outcome", "objective"})
_FLOAT_COLUMNS = frozenset(c for c, t in _JSON_INSERT_COLUMNS if t == "float8")
_TRIAL_COLUMNS = cast(sa.Table, Trial.__table__).c
#: The columns whose types make text storable (db.text).
_STORED_COLUMNS: tuple[tuple[str, StoredString | StoredText | StoredJSON], ...] = tuple(
    (c, t)
    for c, _ in _JSON_INSERT_COLUMNS
    if isinstance(t := _TRIAL_COLUMNS[c].type, StoredString | StoredText | StoredJSON)
)
_NO_DIALECT = postgresql.dialect()
_JSON_SELECT = {"samples_ms": "coalesce(samples_ms, 'null'::json)"}
#: One statement text whatever the batch's size, with one parameter: the rows as one JSON
#: array of objects, which PostgreSQL takes apart (``json_to_recordset``); psycopg dumps one
#: string instead of an array per column (its per-element dumping and escaping of the text
#: arrays was a fifth of a fleet server's Python time). Rows in the array's order.
_JSON_INSERT = (
    f"INSERT INTO {Trial.__tablename__} ({', '.join(c for c, _ in _JSON_INSERT_COLUMNS)}) "
    # json_to_recordset reads a JSON null as SQL NULL: samples_ms stays JSON null, as
    # SQLAlchemy's JSON type writes None (and the other backends hold it).
    f"SELECT {', '.join(_JSON_SELECT.get(c, c) for c, _ in _JSON_INSERT_COLUMNS)} "
    "FROM ROWS FROM (json_to_recordset(%(rows)s::json) AS "
    f"({', '.join(f'{c} {t}' for c, t in _JSON_INSERT_COLUMNS)})) "
    f"WITH ORDINALITY AS u({', '.join(c for c, _ in _JSON_INSERT_COLUMNS)}, n) ORDER BY n "
    "RETURNING id"
)


def _json_row(values: dict[str, Any]) -> dict[str, Any]:
    """A trial row's values as JSON values (enums by value, the time in ISO 8601, text made
    storable by its column's type, as a bound parameter is: this statement bypasses them)."""
    row = dict(values)
    for column, stored in _STORED_COLUMNS:
        row[column] = stored.process_bind_param(row[column], _NO_DIALECT)
    for column in _ENUM_COLUMNS:
        row[column] = row[column].value
    row["created_at"] = row["created_at"].isoformat()
    return row


def _non_finite_as_text(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with a non-finite float column as PostgreSQL's text for it (JSON has none)."""
    out = dict(row)
    for column in _FLOAT_COLUMNS:
        value = out[column]
        if isinstance(value, float) and not math.isfinite(value):
            out[column] = "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return out


def _insert_json(s: Session, values: list[dict[str, Any]]) -> list[int]:
    """PostgreSQL: ``values`` inserted by one constant-text ``INSERT ... SELECT FROM
    json_to_recordset`` (the batched ``INSERT ... VALUES`` had a new text per batch size,
    parsed again by psycopg and planned again by the server each time); their ids in order.
    The ids are drawn from the sequence row by row in the array's order (``ORDER BY n``), so
    ascending ids are the rows' order."""
    rows = [_json_row(v) for v in values]
    try:
        document = json.dumps(rows, allow_nan=False)
    except ValueError:  # a non-finite float column: as text (samples are checked finite)
        document = json.dumps([_non_finite_as_text(r) for r in rows])
    ids = s.connection().exec_driver_sql(_JSON_INSERT, {"rows": document}).scalars().all()
    return sorted(ids)


def _trial_values(f: TrialFields) -> dict[str, Any]:
    """A checked trial row's column values (see :func:`record_trial`)."""
    verdict = coerce(TrialOutcome, f["outcome"], "trial outcome")
    provisional = f.get("provisional", False)
    if provisional and verdict not in RETRYABLE_OUTCOMES:
        allowed = ", ".join(sorted(o.value for o in RETRYABLE_OUTCOMES))
        raise InvalidRecord(
            f"only a retryable outcome ({allowed}) can be provisional, not {verdict.value}"
        )
    samples = f.get("samples_ms")
    if samples is not None and not all(math.isfinite(x) for x in samples):
        raise InvalidRecord(f"trial samples must be finite numbers of ms, got {list(samples)!r}")
    return {
        "job_id": f.get("job_id"),
        "study_id": f.get("study_id"),
        "kernel_id": f["kernel_id"],
        "problem_key": f["problem_key"],
        "device_class_id": f["device_class_id"],
        "environment_id": f.get("environment_id"),
        "config": dict(f["config"]),
        "config_key": f["config_key"],
        "outcome": verdict,
        "objective": coerce(Objective, f.get("objective", Objective.KERNEL), "objective"),
        "samples_ms": list(samples) if samples is not None else None,
        "median_ms": f.get("median_ms"),
        "iqr_ms": f.get("iqr_ms"),
        "max_rel_error": f.get("max_rel_error"),
        "compile_s": f.get("compile_s"),
        "run_s": f.get("run_s"),
        "error": f.get("error"),
        "worker": f.get("worker"),
        "host": f.get("host"),
        "reused": f.get("reused", False),
        "provisional": provisional,
        "created_at": utcnow(),
    }


#: A trial row that is a config's own verdict, reusable by later jobs.
VERDICT = (Trial.outcome != TrialOutcome.INFRA, Trial.provisional.is_(False))


def find_measured(
    s: Session,
    kernel_id: int,
    problem_key: str,
    device_class_id: int,
    config_key: str,
    objective: Objective = Objective.KERNEL,
) -> TrialRecord | None:
    """The newest trial of this config on this key and objective that is the config's own
    verdict (neither ``infra`` nor provisional), or None.

    Such a verdict (ok, wrong, compile_error, a confirmed timeout, ...) need not be repeated.
    """
    trial = s.scalar(
        sa.select(Trial)
        .where(
            Trial.kernel_id == kernel_id,
            Trial.problem_key == problem_key,
            Trial.device_class_id == device_class_id,
            Trial.config_key == config_key,
            Trial.objective == objective,
            *VERDICT,
        )
        .order_by(Trial.id.desc())
        .limit(1)
    )
    return record(TrialRecord, trial) if trial is not None else None


@dataclass(frozen=True)
class ReusedVerdict:
    """A ``reused`` trial row written by :func:`reuse_measured`: its id, and the verdict it
    copied."""

    id: int
    outcome: TrialOutcome
    median_ms: float | None


def reuse_measured(
    s: Session | sa.Connection,
    kernel_id: int,
    problem_key: str,
    device_class_id: int,
    config_key: str,
    objective: Objective,
    *,
    job_id: int,
    study_id: int,
    config: Mapping[str, Any],
) -> ReusedVerdict | None:
    """Copy the verdict :func:`find_measured` finds for this config into a new ``reused`` row
    of ``job_id``'s study ``study_id`` (its measurement, environment, worker and host; ``config``
    as the study names it), in one ``INSERT ... SELECT``; the new row, or None (nothing
    written) if the config has no verdict on this key. ``s`` may be a connection (one in
    autocommit: :meth:`db.Database.write_one`)."""
    params = {
        "kernel_id": kernel_id,
        "problem_key": problem_key,
        "device_class_id": device_class_id,
        "config_key": config_key,
        "objective": objective,
        "job_id": job_id,
        "study_id": study_id,
        "config": dict(config),
        "created_at": utcnow(),
    }
    conn = s.connection() if isinstance(s, Session) else s  # Core either way: no ORM layers
    row = conn.execute(_reuse_statement(), params).first()
    return None if row is None else ReusedVerdict(row.id, TrialOutcome(row.outcome), row.median_ms)


#: The trial columns a reused row copies from the verdict it reuses.
_REUSE_COPIED = ("kernel_id", "problem_key", "device_class_id", "environment_id", "config_key",
                 "outcome", "objective", "samples_ms", "median_ms", "iqr_ms", "max_rel_error",
                 "error", "worker", "host")  # fmt: skip


@functools.cache
def _reuse_statement() -> sa.Insert:
    """:func:`reuse_measured`'s statement, built once: a new statement per call spent more of a
    server's time in SQLAlchemy's construction and cache key than in the database."""
    table = cast(sa.Table, Trial.__table__)
    c = table.c
    given = {
        "job_id": sa.bindparam("job_id", type_=c.job_id.type),
        "study_id": sa.bindparam("study_id", type_=c.study_id.type),
        "config": sa.bindparam("config", type_=c.config.type),
        "reused": sa.true(),
        "provisional": sa.false(),
        "created_at": sa.bindparam("created_at", type_=c.created_at.type),
    }
    prior = (
        sa.select(*(c[name] for name in _REUSE_COPIED), *given.values())
        .where(
            c.kernel_id == sa.bindparam("kernel_id"),
            c.problem_key == sa.bindparam("problem_key"),
            c.device_class_id == sa.bindparam("device_class_id"),
            c.config_key == sa.bindparam("config_key"),
            c.objective == sa.bindparam("objective", type_=c.objective.type),
            *VERDICT,
        )
        .order_by(c.id.desc())
        .limit(1)
    )
    return (
        sa.insert(table)
        .from_select([*_REUSE_COPIED, *given], prior)
        .returning(c.id, c.outcome, c.median_ms)
    )


def measured_keys(
    s: Session,
    kernel_id: int,
    problem_key: str,
    device_class_id: int,
    objective: Objective = Objective.KERNEL,
    after_id: int = 0,
) -> tuple[set[str], int]:
    """The config keys with a verdict (see :func:`find_measured`) on this key and objective in a
    trial row newer than ``after_id``, and the newest such row's id (``after_id`` if none): what
    a study checks before it looks one config up. Read from ``ix_tf_trials_measured`` alone."""
    rows = s.execute(
        sa.select(Trial.config_key, sa.func.max(Trial.id))
        .where(
            Trial.kernel_id == kernel_id,
            Trial.problem_key == problem_key,
            Trial.device_class_id == device_class_id,
            Trial.objective == objective,
            Trial.id > after_id,
            *VERDICT,
        )
        .group_by(Trial.config_key)
    ).all()
    return {key for key, _ in rows}, max((last for _, last in rows), default=after_id)


#: A study's key in the trials: (kernel id, problem key, device class id, objective).
StudyKey = tuple[int, str, int, Objective]


def verdicts_after(s: Session, after_id: int) -> tuple[dict[StudyKey, set[str]], int]:
    """The config keys with a verdict (see :func:`find_measured`) in trial rows newer than
    ``after_id``, by study key, and the newest such row's id (``after_id`` if none). Reads only
    the new rows (a range of the primary key)."""
    keys = (Trial.kernel_id, Trial.problem_key, Trial.device_class_id, Trial.objective)
    # The upper bound holds for every row; it makes the range two-sided, which PostgreSQL takes
    # for a narrow one even without the table's statistics (never analyzed: autovacuum off or
    # not yet run). One-sided, it took a third of the table and scanned all of it every time.
    newest = sa.select(sa.func.max(Trial.id)).correlate(None).scalar_subquery()
    rows = s.execute(
        sa.select(*keys, Trial.config_key, sa.func.max(Trial.id))
        .where(Trial.id > after_id, Trial.id <= newest, *VERDICT)
        .group_by(*keys, Trial.config_key)
    ).all()
    out: dict[StudyKey, set[str]] = {}
    for kernel_id, pkey, class_id, objective, ckey, _ in rows:
        out.setdefault((kernel_id, pkey, class_id, objective), set()).add(ckey)
    return out, max((row[5] for row in rows), default=after_id)


def last_trial_id(s: Session) -> int:
    """The newest trial row's id (0 if there is none)."""
    return int(s.scalar(sa.select(sa.func.max(Trial.id))) or 0)


def measured_for_key(
    s: Session,
    kernel_id: int,
    problem_key: str,
    device_class_id: int,
    objective: Objective = Objective.KERNEL,
) -> list[MeasuredRecord]:
    """Each config's oldest trial on this key and objective, by any job, that is the config's own
    verdict (neither ``infra`` nor provisional); oldest first.

    One row per config however often it was measured again (a popular key holds tens of thousands
    of trials of a space of a few thousand configs), and only the columns warm start needs: the
    configs are picked on ``ix_tf_trials_measured`` alone (on PostgreSQL it carries every column
    the choice reads), then only the chosen rows are read.
    """
    first = (
        sa.select(sa.func.min(Trial.id))
        .where(
            Trial.kernel_id == kernel_id,
            Trial.problem_key == problem_key,
            Trial.device_class_id == device_class_id,
            Trial.objective == objective,
            *VERDICT,
        )
        .group_by(Trial.config_key)
    )
    rows = s.execute(
        sa.select(Trial.config, Trial.config_key, Trial.median_ms, Trial.outcome)
        .where(Trial.id.in_(first.scalar_subquery()))
        .order_by(Trial.id)
    ).all()
    return [
        MeasuredRecord(config=config, config_key=key, median_ms=median, outcome=outcome)
        for config, key, median, outcome in rows
    ]


def trials_for_study(s: Session, study_id: int) -> list[TrialRecord]:
    """Every trial of study ``study_id``, oldest first."""
    trials = s.scalars(sa.select(Trial).where(Trial.study_id == study_id).order_by(Trial.id))
    return [record(TrialRecord, t) for t in trials]


def outcome_counts(s: Session, study_id: int) -> dict[str, int]:
    """Number of trials of study ``study_id`` per outcome value; outcomes with none are absent."""
    rows = s.execute(
        sa.select(Trial.outcome, sa.func.count())
        .where(Trial.study_id == study_id)
        .group_by(Trial.outcome)
    ).all()
    return {outcome.value: count for outcome, count in rows}
