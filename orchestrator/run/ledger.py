"""The ledger: every database call one job makes, and the only writer of its rows.

The results one ``Pool.wait`` drained are committed in one transaction (:meth:`Ledger.record`,
the studies' vendor-path measurements by :meth:`Ledger.record_vendor`)
before the driver dispatches again, so a driver killed at any point loses at most the trials in
flight and those it had not yet committed, none of whose slots it had reused. Every call runs in
:meth:`db.Database.run_with_retry`: a transient database error (a connection reset, a writer
holding the lock) is retried in a new transaction instead of failing the job; ``DatabaseLost``
is not retried and leaves to the caller. Given the driver's lease, every write transaction first
checks that the lease is still the driver's (``repository.check_lease``, :meth:`Ledger._fenced`):
once another owner took the job over, the write is rolled back and LeaseLost raised.
"""

from __future__ import annotations

import math
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

from db import Database, JobStatus, Lease, Objective, StudyStatus, TrialOutcome, repository
from orchestrator.errors import JobStateError
from orchestrator.run.jobs import JobSpec
from orchestrator.run.planning import StudyPlan
from orchestrator.run.pool import Done, WorkerInfo
from orchestrator.run.prior import prior_trials
from orchestrator.run.warm_start import warm_configs
from orchestrator.study.loop import Answer, Reuse
from orchestrator.study.search import study_name
from search_spaces.space import Config, config_key
from search_spaces.spec import KernelSpec
from workers.measurement import Outcome

if TYPE_CHECKING:
    from db import Session
    from orchestrator.study.samplers.learned import PriorTrial

_T = TypeVar("_T")


@dataclass(frozen=True)
class OpenJob:
    """A job as stored: its spec, the installed kernel spec (of the job's version), ids."""

    job_id: int
    spec: JobSpec
    kernel: KernelSpec
    kernel_id: int
    version: str


@dataclass(frozen=True)
class StudyRows:
    """A study's rows: ids, its Optuna name, its final results so far ``(config, answer,
    reused)`` (a resumed job's, oldest first), its warm-start configs, the keys of its
    provisional rows, and the configs with rows but no final row yet (a provisional one's
    re-measurement, or a trial whose worker was lost, ``infra``, not yet measured again when
    the job stopped or failed): the driver measures those first."""

    plan: StudyPlan
    study_id: int
    class_id: int
    name: str
    history: list[tuple[Config, Answer, bool]]
    warm: list[Config]
    provisional: frozenset[str] = frozenset()
    unfinished: tuple[Config, ...] = ()


@dataclass(frozen=True)
class Result:
    """A trial to record: its study's rows, how it ended, whether it is kept as provisional (a
    retryable outcome kept for the record only, see db.RETRYABLE_OUTCOMES)."""

    rows: StudyRows
    done: Done
    provisional: bool = False
    key: str | None = None  # the config's config_key, computed if None


def triton_minor(version: str | None) -> str:
    """``3.9.1`` -> ``3.9``; ``none`` when unknown."""
    if not version:
        return "none"
    return ".".join(version.split(".")[:2])


def _measured(
    samples_ms: list[float] | None,
    median_ms: float | None,
    iqr_ms: float | None,
    max_rel_error: float | None,
    error: str | None,
    worker: str | None,
    host: str | None,
) -> dict[str, Any]:
    """The measurement columns of a trial row."""
    return {
        "samples_ms": samples_ms,
        "median_ms": median_ms,
        "iqr_ms": iqr_ms,
        "max_rel_error": max_rel_error,
        "error": error,
        "worker": worker,
        "host": host,
    }


def _finite(value: float | None) -> float | None:
    return value if value is None or math.isfinite(value) else None


#: How stale the sets of configs measured by any job may be (seconds) before a new config's
#: reuse check reads what was written since: one query per process per interval, for every
#: study key its drivers check, instead of one per new config (or per study). A config another
#: job measured within it is measured again, as when two jobs ask for it at once.
REUSE_REFRESH_S = 0.2


class MeasuredKeys:
    """For each study key that a driver of this process checks reuse on, the config keys with
    a verdict on it (any job). A key is read whole when first held; then every key held is
    brought up to date by one read of the trial rows newer than the newest read so far, at most
    every ``REUSE_REFRESH_S``, by whichever check finds the sets stale. A row committed after a
    newer id was read is not seen: its config is measured again. Thread-safe; one per
    :class:`~db.Database` (:meth:`of`)."""

    def __init__(self, database: Database) -> None:
        self._database = database
        self._lock = threading.Lock()
        self._keys: dict[repository.StudyKey, set[str]] = {}
        self._holders: dict[repository.StudyKey, int] = {}
        self._last_id: int | None = None
        self._read_at = -math.inf

    @classmethod
    def of(cls, database: Database) -> MeasuredKeys:
        """The process's instance for ``database``."""
        with _MEASURED_LOCK:
            found = _MEASURED.get(database)
            if found is None:
                found = _MEASURED[database] = cls(database)
            return found

    def hold(self, key: repository.StudyKey) -> None:
        """Keep ``key``'s set from now on until as many :meth:`release` calls (read whole on
        the first hold)."""
        with self._lock:
            self._holders[key] = self._holders.get(key, 0) + 1
            if self._holders[key] > 1:
                return

            def read(s: Session) -> tuple[set[str], int]:
                last = repository.last_trial_id(s) if self._last_id is None else self._last_id
                return repository.measured_keys(s, *key)[0], last

            self._keys[key], self._last_id = self._database.run_with_retry(read, readonly=True)

    def release(self, key: repository.StudyKey) -> None:
        with self._lock:
            self._holders[key] -= 1
            if self._holders[key] == 0:
                del self._holders[key], self._keys[key]

    def may_hold(self, key: repository.StudyKey, config: str) -> bool:
        """False if no job had measured ``config`` on ``key`` (held) by the last read (read
        again when stale). Only a stale check takes the lock (the sets are read without it:
        a held key's set is only ever added to), so the drivers of a process do not queue on
        it for every new config."""
        known = self._keys[key]
        if config in known:
            return True
        if time.monotonic() - self._read_at < REUSE_REFRESH_S:
            return False
        with self._lock:
            now = time.monotonic()
            if now - self._read_at >= REUSE_REFRESH_S:  # no other check read meanwhile
                after = self._last_id or 0
                found, self._last_id = self._database.run_with_retry(
                    lambda s: repository.verdicts_after(s, after), readonly=True
                )
                for study_key, configs in found.items():
                    if study_key in self._keys:
                        self._keys[study_key] |= configs
                self._read_at = now
            return config in known


_MEASURED: weakref.WeakKeyDictionary[Database, MeasuredKeys] = weakref.WeakKeyDictionary()
_MEASURED_LOCK = threading.Lock()


def create_job(database: Database, spec: JobSpec) -> int:
    """Write the job row (``queued``) for a checked ``spec``; its id."""
    kernel = spec.kernel_spec()
    with database.session() as s:
        kernel_id = repository.ensure_kernel(
            s, kernel.name, kernel.version_hash(), kernel.space.hash()
        )
        return repository.create_job(s, kernel_id, spec.to_dict(), spec.team)


#: What identifies an environment row: the class id, then the worker's driver, runtime, Triton
#: and torch versions. The workers of a class mostly share one, so a job looks each up once, not
#: once per worker (a lookup per worker was a tenth of a process's time with 64 jobs on 640
#: simulated workers).
_EnvKey = tuple[int, str, str, str, str]


def _env_key(info: WorkerInfo, class_id: int) -> _EnvKey:
    fp = info.fingerprint
    return (class_id, fp.driver or "", fp.runtime or "", fp.triton or "", fp.torch or "")


class Ledger:
    """The repository calls of job ``job_id`` (see the module docstring)."""

    def __init__(self, database: Database, job_id: int, lease: Lease | None = None) -> None:
        """``lease``: the driver's lease on the job, checked by every write (None: unfenced,
        for a caller that owns the job otherwise, e.g. a test)."""
        self.database = database
        self.job_id = job_id
        self.lease = lease
        self._envs: dict[_EnvKey, int] = {}
        self._objective = Objective.KERNEL
        self._kernel_id = 0

    def prior(self) -> list[PriorTrial]:
        """The ok trials of the job's kernel version and objective on every problem and device
        class (the ``learned`` sampler's prior; :func:`orchestrator.run.prior.prior_trials`)."""
        with self.database.session(readonly=True) as s:
            return prior_trials(s, self._kernel_id, self._objective)

    def open(self) -> OpenJob:
        """Read the job; raises JobStateError if it is done or made for another kernel version."""
        with self.database.session() as s:
            job = repository.get_job(s, self.job_id)
        spec = JobSpec.from_mapping(job.spec)
        kernel = spec.kernel_spec()
        version = kernel.version_hash()
        if version != job.kernel_version:
            raise JobStateError(
                f"job {self.job_id} was made for {kernel.name} version {job.kernel_version}, but "
                f"the installed kernel is {version}; start a new job"
            )
        if job.status is JobStatus.DONE:
            raise JobStateError(f"job {self.job_id} is already done; start a new job to tune more")
        self._objective, self._kernel_id = spec.objective, job.kernel_id
        return OpenJob(self.job_id, spec, kernel, job.kernel_id, version)

    def start(self, job: OpenJob, plans: list[StudyPlan]) -> list[StudyRows]:
        """Ensure each plan's study row, read its results so far and its warm start, and mark
        the job ``running`` (one transaction)."""
        return self.database.run_with_retry(self._fenced(lambda s: self._start(s, job, plans)))

    def _start(self, s: Session, job: OpenJob, plans: list[StudyPlan]) -> list[StudyRows]:
        out = []
        for plan in plans:
            class_id = self._class_id(s, plan.info)
            name = study_name(
                job.kernel.name, job.version, plan.problem_key, plan.class_key, self.job_id
            )
            study_id = repository.ensure_study(
                s,
                self.job_id,
                job.kernel_id,
                plan.problem_key,
                plan.problem,
                class_id,
                job.spec.sampler,
                name,
            )
            trials = repository.trials_for_study(s, study_id)
            final = [t for t in trials if t.outcome is not TrialOutcome.INFRA and not t.provisional]
            history = [
                (
                    dict(row.config),
                    Answer(row.median_ms, row.id)
                    if row.outcome is TrialOutcome.OK
                    else Answer(None),
                    row.reused,
                )
                for row in final
            ]
            done = {t.config_key for t in final}
            provisional = {t.config_key for t in trials if t.provisional}
            left = {t.config_key: dict(t.config) for t in trials if t.config_key not in done}
            unfinished = tuple(left.values())
            warm = warm_configs(
                s,
                job.kernel,
                job.version,
                job.kernel_id,
                plan.problem,
                plan.problem_key,
                plan.class_key,
                class_id,
                plan.info.limits,
                self._objective,
                job.spec.trials,
            )
            out.append(
                StudyRows(
                    plan,
                    study_id,
                    class_id,
                    name,
                    history,
                    warm,
                    frozenset(provisional),
                    unfinished,
                )
            )
        repository.set_job_status(s, self.job_id, JobStatus.RUNNING)
        return out

    def reuse(self, rows: StudyRows) -> Reuse:
        """The study's reuse hook: a config measured for the same key by any job is recorded
        again for this job as a ``reused`` row (counting toward its budget) and answered. Only a
        config among the key's measured keys (read at most every ``REUSE_REFRESH_S``) is looked
        up. The study key's set is kept (:class:`MeasuredKeys`) while the hook lives."""

        def write(s: Session, config: Config, key: str) -> repository.ReusedVerdict | None:
            plan = rows.plan
            return repository.reuse_measured(
                s,
                self._kernel_id,
                plan.problem_key,
                rows.class_id,
                key,
                self._objective,
                job_id=self.job_id,
                study_id=rows.study_id,
                config=config,
            )

        measured = MeasuredKeys.of(self.database)
        study_key = (self._kernel_id, rows.plan.problem_key, rows.class_id, self._objective)
        measured.hold(study_key)

        def answer(config: Config, key: str) -> Answer | None:
            if not measured.may_hold(study_key, key):
                return None
            found = self.database.run_with_retry(self._fenced(lambda s: write(s, config, key)))
            if found is None:
                return None
            if found.outcome is TrialOutcome.OK:
                return Answer(found.median_ms, found.id)
            return Answer(None)

        # The key is let go with the hook (when its study is gone, however the job ended).
        weakref.finalize(answer, measured.release, study_key)
        return answer

    def record(self, results: Sequence[Result]) -> list[Answer]:
        """Commit measured (or lost) trials in one transaction (the results one ``Pool.wait``
        drained); each one's answer for its study, in order."""

        def write(s: Session) -> tuple[list[int], dict[_EnvKey, int]]:
            envs = dict(self._envs)
            rows = []
            for result in results:
                done, m = result.done, result.done.measurement
                env_key = _env_key(done.worker, result.rows.class_id)
                if env_key not in envs:
                    envs[env_key] = repository.ensure_environment(s, *env_key)
                env = envs[env_key]
                rows.append(
                    self._row(
                        result.rows,
                        done.request.config,
                        m.outcome.value,
                        env,
                        compile_s=m.compile_s,
                        run_s=m.run_s,
                        provisional=result.provisional,
                        key=result.key,
                        **_measured(
                            list(m.samples_ms) or None,
                            m.median_ms,
                            m.iqr_ms,
                            _finite(m.max_rel_error),
                            m.error,
                            m.worker,
                            m.host,
                        ),
                    )
                )
            return repository.record_trials(s, rows), envs

        if not results:
            return []
        ids, envs = self.database.run_with_retry(self._fenced(write))
        self._envs = envs  # cached once committed
        out = []
        for result, row_id in zip(results, ids, strict=True):
            m = result.done.measurement
            ok = m.outcome is Outcome.OK and m.median_ms is not None
            out.append(Answer(m.median_ms, row_id) if ok else Answer(None))
        return out

    def _row(
        self,
        rows: StudyRows,
        config: Config,
        outcome: TrialOutcome | str,
        environment_id: int | None,
        key: str | None = None,
        **fields: Any,
    ) -> repository.TrialFields:
        """``record_trial``'s arguments with this job's, study's and key's ids filled in
        (``key``: the config's ``config_key``, computed if None)."""
        row = dict(
            kernel_id=self._kernel_id,
            problem_key=rows.plan.problem_key,
            device_class_id=rows.class_id,
            config=config,
            config_key=config_key(config) if key is None else key,
            outcome=outcome,
            job_id=self.job_id,
            study_id=rows.study_id,
            environment_id=environment_id,
            objective=self._objective,
            **fields,
        )
        return cast("repository.TrialFields", row)

    def cancel_requested(self) -> bool:
        """Whether a cancel of the job was asked for, read in a write transaction that writes
        nothing, so that it checks what :meth:`db.Database.check_alive` checks (the database
        is there and takes writes: on SQLite the same file, writable, its write lock taken):
        a driver's poll is one transaction, not two. Fenced like a write: a driver whose lease
        was taken over learns it at its next poll (LeaseLost)."""
        return self.database.run_with_retry(
            self._fenced(lambda s: repository.cancel_requested(s, self.job_id))
        )

    def vendor_todo(
        self, job: OpenJob, studies: Sequence[tuple[StudyRows, Sequence[str]]]
    ) -> list[list[str]]:
        """Per study, those of its vendor paths to measure: each that has neither an ``ok``
        measurement on the study's key in the environment of its class's worker (answered
        from the database) nor a measurement by this study (a resumed job measures nothing
        twice)."""

        envs = [self._env_id(rows.plan.info, rows.class_id) for rows, _ in studies]

        def read(s: Session) -> list[list[str]]:
            out = []
            for (rows, names), env in zip(studies, envs, strict=True):
                known = set(self._vendor_times(s, job, rows, env))
                known |= {v.vendor for v in repository.vendor_trials_for_study(s, rows.study_id)}
                out.append([name for name in names if name not in known])
            return out

        return self.database.run_with_retry(read, readonly=True)

    def vendor_times(self, job: OpenJob, rows: StudyRows) -> dict[str, float]:
        """The study's vendor paths measured ``ok`` on its key in its class's environment:
        name -> median ms."""
        env = self._env_id(rows.plan.info, rows.class_id)
        return self.database.run_with_retry(
            lambda s: self._vendor_times(s, job, rows, env), readonly=True
        )

    def _vendor_times(
        self, s: Session, job: OpenJob, rows: StudyRows, env: int
    ) -> dict[str, float]:
        found = repository.measured_vendor(
            s, job.kernel.name, rows.plan.problem_key, rows.class_id, env, self._objective
        )
        return {name: v.median_ms for name, v in found.items() if v.median_ms}

    def record_vendor(self, job: OpenJob, results: Sequence[tuple[StudyRows, Done]]) -> None:
        """Commit measurements of vendor paths (``Done.request.vendor``) in one transaction, fenced
        on the lease like every other write of the driver."""

        envs = [self._env_id(done.worker, rows.class_id) for rows, done in results]

        def write(s: Session) -> None:
            fields: list[repository.VendorTrialFields] = []
            for (rows, done), env in zip(results, envs, strict=True):
                m = done.measurement
                fields.append(
                    {
                        "job_id": self.job_id,
                        "study_id": rows.study_id,
                        "kernel_name": job.kernel.name,
                        "problem_key": rows.plan.problem_key,
                        "device_class_id": rows.class_id,
                        "environment_id": env,
                        "objective": self._objective,
                        "vendor": done.request.vendor or "",
                        "outcome": m.outcome.value,
                        "samples_ms": list(m.samples_ms) or None,
                        "median_ms": m.median_ms,
                        "iqr_ms": m.iqr_ms,
                        "max_rel_error": _finite(m.max_rel_error),
                        "error": m.error,
                        "worker": m.worker,
                        "host": m.host,
                    }
                )
            repository.record_vendor_trials(s, fields)

        if results:
            self.database.run_with_retry(self._fenced(write))

    def incumbent(self, job: OpenJob, rows: StudyRows) -> repository.BestRecord | None:
        """The stored best of the study's key, if any."""
        plan = rows.plan

        def read(s: Session) -> list[repository.BestRecord]:
            return repository.get_best(
                s,
                job.kernel.name,
                plan.problem_key,
                plan.class_key,
                job.version,
                triton_minor(plan.info.fingerprint.triton),
                self._objective,
            )

        found = self.database.run_with_retry(read, readonly=True)
        return found[0] if found else None

    def promote(
        self,
        job: OpenJob,
        rows: StudyRows,
        config: Config,
        time_ms: float,
        row: int | None,
        decision: repository.BestDecision | None = None,
        producer: repository.BestRecord | None = None,
    ) -> bool:
        """Upsert ``config`` as the best of the study's key if faster than the stored best, or
        as ``decision`` decided over it (see :func:`db.repository.upsert_best`); as this job's
        result, or kept as ``producer``'s (the incumbent that held: its trial, job and
        environment stay)."""
        info = rows.plan.info

        def write(s: Session) -> bool:
            if producer is not None:
                made = (producer.trial_id, producer.job_id, producer.environment_id)
            else:
                made = (row, self.job_id, self._environment(s, info, rows.class_id))
            return repository.upsert_best(
                s,
                job.kernel.name,
                job.version,
                rows.plan.problem_key,
                rows.class_id,
                triton_minor(info.fingerprint.triton),
                config,
                time_ms,
                *made,
                self._objective,
                decision=decision,
            )

        return self.database.run_with_retry(self._fenced(write))

    def close(self, status: JobStatus, error: str | None, studies: list[StudyRows]) -> None:
        """Move the job to ``status``; its studies follow, except when it goes back to
        ``queued`` (they resume with it)."""
        study_status = {
            JobStatus.DONE: StudyStatus.DONE,
            JobStatus.CANCELLED: StudyStatus.CANCELLED,
        }.get(status, StudyStatus.FAILED)

        def write(s: Session) -> None:
            if status is not JobStatus.QUEUED:
                for rows in studies:
                    repository.set_study_status(s, rows.study_id, study_status)
            repository.set_job_status(s, self.job_id, status, error)

        self.database.run_with_retry(self._fenced(write))

    def _fenced(self, fn: Callable[[Session], _T]) -> Callable[[Session], _T]:
        """``fn`` after the lease check in its transaction (LeaseLost once the lease is not the
        driver's: nothing of ``fn`` is written). Every write method wraps its work in it."""
        if self.lease is None:
            return fn
        lease = self.lease

        def fenced(s: Session) -> _T:
            repository.check_lease(s, lease)
            return fn(s)

        return fenced

    # ----- ids
    def _env_id(self, info: WorkerInfo, class_id: int) -> int:
        """The environment row of ``info``'s worker, written in a transaction of its own if
        new, and cached."""
        key = _env_key(info, class_id)
        env = self._envs.get(key)
        if env is None:
            env = self.database.run_with_retry(lambda s: repository.ensure_environment(s, *key))
            self._envs[key] = env
        return env

    def _environment(self, s: Session, info: WorkerInfo, class_id: int) -> int:
        """The environment row of ``info``'s worker (cached by :meth:`record` once committed)."""
        key = _env_key(info, class_id)
        env = self._envs.get(key)
        if env is None:
            env = repository.ensure_environment(s, *key)
        return env

    def _class_id(self, s: Session, info: WorkerInfo) -> int:
        cls = info.fingerprint.device_class
        limits = {**asdict(info.limits), "vendor": info.limits.vendor.value}
        return repository.ensure_device_class(
            s, cls.key, cls.vendor.value, cls.name, cls.arch, cls.replay, limits
        )
