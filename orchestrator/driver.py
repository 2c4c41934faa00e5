"""The job driver: plans studies, runs the ask → check → reuse → dispatch → tell loop, finishes.

One driver process owns a job. It is the only writer of the job's rows (workers never touch the
database) and holds its Optuna studies in memory. Every trial result is committed as it arrives,
so a driver killed at any point loses at most the trials in flight; ``resume`` picks the job up
again: it rebuilds each study from the trial rows already in the database (which also count
against the budget) and goes on.

Per study, a suggested config is, in order: rejected without dispatch if it breaks the space's
constraints on the class (told PRUNED, no row); answered from this study if already known; answered
from the database if measured for the same (kernel version, problem, class, objective) by any job (a
``reused`` row, counts toward the budget); else dispatched. Budget = rows of the study that are not
``infra``. A study ends early only when every valid config is known. After ``IDLE_LIMIT``
suggestions in a row that needed no new measurement (the sampler keeps proposing known or
constraint-breaking configs: TPE and GP do on sparse spaces, see benchmarks/results/search/), the
driver queues an unmeasured valid config drawn at random, so the budget is spent.
"""

from __future__ import annotations

import json
import logging
import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import optuna
from optuna.trial import Trial as OptunaTrial
from sqlalchemy.orm import Session

from db import Database, JobStatus, Objective, StudyStatus, TrialOutcome, repository
from orchestrator.dispatch import Done, Task, WorkerInfo, WorkerPool
from orchestrator.errors import JobSpecError, JobStateError, NoWorkersError
from orchestrator.jobs import JobSpec
from orchestrator.progress import Reporter, SilentReporter
from orchestrator.search import SearchStudy, study_name, valid_configs
from search_spaces.problem import Problem, problem_key
from search_spaces.space import Config, config_key
from search_spaces.spec import KernelSpec
from workers.device import Backend
from workers.device_table import canonical_class_key
from workers.measurement import Measurement, Outcome

#: Suggestions handled per study before the driver turns to other studies and results.
ASKS_PER_STEP = 20
#: Times a trial is dispatched before a lost worker is taken as the config's fault.
MAX_ATTEMPTS = 3
#: Best configs of other problems / classes enqueued as warm start, per source.
WARM_NEIGHBOURS = 5
#: Fastest configs of the nearest problem enqueued as warm start (its best among them).
WARM_NEAREST_TOP = 8


@dataclass(frozen=True)
class StudyPlan:
    """One study to run: a problem on a device class, with the class's limits and space size."""

    problem: Problem
    class_key: str
    info: WorkerInfo
    valid: int

    @property
    def problem_key(self) -> str:
        return problem_key(self.problem)

    @property
    def label(self) -> str:
        dims = ",".join(f"{k}={v}" for k, v in self.problem.items())
        return f"{dims} @ {self.class_key}"


def _match_class(wanted: str, present: Sequence[str]) -> str | None:
    folded = {p.casefold(): p for p in present}
    return folded.get(wanted.casefold()) or folded.get(canonical_class_key(wanted).casefold())


GPU_BACKENDS = (Backend.CUDA, Backend.ROCM)


def plan_job(spec: JobSpec, kernel: KernelSpec, pool: WorkerPool) -> list[StudyPlan]:
    """The studies of ``spec`` on ``pool``'s classes; raises before anything is written when a
    class is missing, a space is empty on a class, a replay device lacks a problem, or the graph
    objective meets a class without a GPU."""
    present = pool.classes()
    names = sorted(present)
    if spec.all_classes:
        chosen = names
    else:
        chosen = []
        for wanted in spec.device_classes:
            match = _match_class(wanted, names)
            if match is None:
                raise NoWorkersError(
                    f"no worker of device class {wanted!r}; classes present: {', '.join(names)}"
                )
            chosen.append(match)
    plans = []
    for class_key in dict.fromkeys(chosen):
        info = present[class_key]
        if spec.objective is Objective.GRAPH and info.fingerprint.backend not in GPU_BACKENDS:
            raise JobSpecError(
                f"objective graph times launches inside CUDA graphs, and {class_key} is "
                f"{info.fingerprint.backend.value}, not a GPU: use objective kernel there"
            )
        valid = len(valid_configs(kernel.space, info.limits))
        if valid == 0:
            raise JobSpecError(
                f"the {kernel.name} space has no valid config on {class_key}; "
                "check the space's constraints against this device"
            )
        for problem in spec.problems:
            if info.replay_keys is not None and (spec.kernel, problem_key(problem)) not in set(
                info.replay_keys
            ):
                raise JobSpecError(
                    f"replay device {class_key} has no landscape for {spec.kernel} on "
                    f"{problem_key(problem)}; record one with `tunefleet record`"
                )
            plans.append(StudyPlan(problem, class_key, info, valid))
    return plans


def _ids(s: Session, kernel: KernelSpec, version: str) -> int:
    return repository.ensure_kernel(s, kernel.name, version, kernel.space.hash())


def submit_job(database: Database, spec: JobSpec, pool: WorkerPool) -> int:
    """Validate ``spec`` against the pool, then write the job (``queued``); return its id."""
    kernel = spec.kernel_spec()
    plan_job(spec, kernel, pool)
    version = kernel.version_hash()
    with database.session() as s:
        kernel_id = _ids(s, kernel, version)
        return repository.create_job(s, kernel_id, spec.to_dict(), spec.team)


def triton_minor(version: str | None) -> str:
    """``3.9.1`` -> ``3.9``; ``none`` when unknown."""
    if not version:
        return "none"
    return ".".join(version.split(".")[:2])


def _measured_for_key(
    s: Session, kernel_id: int, pkey: str, class_id: int, objective: Objective
) -> list[tuple[Config, float | None]]:
    # Configs measured for this key by any job (not infra): ok ones fastest first, then the rest.
    seen: dict[str, tuple[Config, float | None]] = {}
    for row in repository.measured_for_key(s, kernel_id, pkey, class_id, objective):
        value = row.median_ms if row.outcome is TrialOutcome.OK else None
        seen.setdefault(config_key(row.config), (dict(row.config), value))
    return sorted(seen.values(), key=lambda cv: (cv[1] is None, cv[1] or 0.0))


def problem_distance(a: Problem, b: Problem) -> float:
    """L1 distance over log2 of the integer dims; inf unless every other field is equal."""
    if set(a) != set(b):
        return math.inf
    total = 0.0
    for name, value in a.items():
        other = b[name]
        dims = all(isinstance(v, int) and not isinstance(v, bool) for v in (value, other))
        if dims:
            total += abs(math.log2(int(value)) - math.log2(int(other)))
        elif value != other:
            return math.inf
    return total


@dataclass
class _Study:
    plan: StudyPlan
    study_id: int
    class_id: int
    name: str
    budget: int
    search: SearchStudy = field(init=False)
    counted: int = 0
    measured: int = 0
    reused: int = 0
    rejected: int = 0
    exhausted: bool = False
    values: dict[str, float | None] = field(default_factory=dict)
    trial_ids: dict[str, int] = field(default_factory=dict)
    configs: dict[str, Config] = field(default_factory=dict)
    waiting: dict[str, list[OptunaTrial]] = field(default_factory=dict)

    def wants(self) -> bool:
        return not self.exhausted and self.counted + len(self.waiting) < self.budget

    def finished(self) -> bool:
        return not self.waiting and (self.exhausted or self.counted >= self.budget)

    @property
    def best_ms(self) -> float | None:
        ok = [v for v in self.values.values() if v is not None]
        return min(ok) if ok else None


@dataclass
class JobResult:
    """How the driver left the job, and per study the promoted config (None if none ran ok)."""

    job_id: int
    status: JobStatus
    winners: dict[int, tuple[Config, float, bool]] = field(default_factory=dict)


class Driver:
    """Runs one job on a worker pool; see the module doc for the loop's rules."""

    def __init__(
        self,
        database: Database,
        pool: WorkerPool,
        *,
        reporter: Reporter | None = None,
        retime_rounds: int = 3,
        poll_s: float = 1.0,
    ) -> None:
        self.database = database
        self.pool = pool
        self.reporter: Reporter = reporter or SilentReporter()
        self.retime_rounds = retime_rounds
        self.poll_s = poll_s
        self._studies: list[_Study] = []
        self._retries: dict[str, list[Task]] = {}
        self._envs: dict[str, int] = {}
        self._rr: dict[str, int] = {}
        self._job_id = 0
        self._kernel: KernelSpec | None = None
        self._kernel_name = ""
        self._objective = Objective.KERNEL

    # ----- setup
    def _environment(self, s: Session, info: WorkerInfo, class_id: int) -> int:
        env = self._envs.get(info.worker)
        if env is None:
            fp = info.fingerprint
            env = repository.ensure_environment(
                s, class_id, fp.driver or "", fp.runtime or "", fp.triton or "", fp.torch or ""
            )
            self._envs[info.worker] = env
        return env

    def _class_id(self, s: Session, info: WorkerInfo) -> int:
        cls = info.fingerprint.device_class
        limits = {**asdict(info.limits), "vendor": info.limits.vendor.value}
        return repository.ensure_device_class(
            s, cls.key, cls.vendor.value, cls.name, cls.arch, cls.replay, limits
        )

    def _warm_configs(
        self,
        s: Session,
        plan: StudyPlan,
        class_id: int,
        kernel: KernelSpec,
        version: str,
        kernel_id: int,
        budget: int,
    ) -> list[Config]:
        """Warm start, in order: configs measured for this key by any job (fastest first, at most
        the budget), the spec's default, the best configs of the ``WARM_NEIGHBOURS`` nearest
        problems on this class, the next fastest configs measured for the nearest one (up to its
        ``WARM_NEAREST_TOP`` fastest), the best configs of this problem on other classes.
        Deduplicated."""
        measured = _measured_for_key(s, kernel_id, plan.problem_key, class_id, self._objective)
        configs = [c for c, _ in measured[:budget]]
        configs.append(kernel.default_for(plan.info.limits))
        bests = repository.get_best(
            s, kernel.name, kernel_version=version, objective=self._objective
        )
        near = sorted(
            (
                (
                    problem_distance(plan.problem, dict(json.loads(b.problem_key))),
                    b.problem_key,
                    b.config,
                )
                for b in bests
                if b.device_class_key == plan.class_key and b.problem_key != plan.problem_key
            ),
            key=lambda dkc: dkc[0],
        )
        near = [dkc for dkc in near if math.isfinite(dkc[0])]
        configs.extend(c for _, _, c in near[:WARM_NEIGHBOURS])
        if near:
            nearest = _measured_for_key(s, kernel_id, near[0][1], class_id, self._objective)
            configs.extend(c for c, ms in nearest[:WARM_NEAREST_TOP] if ms is not None)
        others = sorted(
            (
                b
                for b in bests
                if b.problem_key == plan.problem_key and b.device_class_key != plan.class_key
            ),
            key=lambda b: b.time_ms,
        )
        configs.extend(b.config for b in others[:WARM_NEIGHBOURS])
        return list({config_key(c): dict(c) for c in configs}.values())

    def _open(self, job_id: int) -> tuple[JobSpec, KernelSpec, int, str]:
        with self.database.session() as s:
            job = repository.get_job(s, job_id)
        spec = JobSpec.from_mapping(job.spec)
        kernel = spec.kernel_spec()
        version = kernel.version_hash()
        if version != job.kernel_version:
            raise JobStateError(
                f"job {job_id} was made for {kernel.name} version {job.kernel_version}, but the "
                f"installed kernel is {version}; start a new job"
            )
        if job.status is JobStatus.DONE:
            raise JobStateError(f"job {job_id} is already done; start a new job to tune more")
        return spec, kernel, job.kernel_id, version

    def _setup(self, job_id: int) -> tuple[JobSpec, KernelSpec, int, str]:
        spec, kernel, kernel_id, version = self._open(job_id)
        plans = plan_job(spec, kernel, self.pool)
        self._job_id, self._kernel, self._kernel_name = job_id, kernel, spec.kernel
        self._objective = spec.objective
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        logging.getLogger("optuna").setLevel(logging.WARNING)
        warm: list[list[Config]] = []
        with self.database.session() as s:
            for plan in plans:
                class_id = self._class_id(s, plan.info)
                name = study_name(kernel.name, version, plan.problem_key, plan.class_key, job_id)
                study_id = repository.ensure_study(
                    s,
                    job_id,
                    kernel_id,
                    plan.problem_key,
                    plan.problem,
                    class_id,
                    spec.sampler.value,
                    name,
                )
                st = _Study(plan, study_id, class_id, name, spec.trials)
                for row in repository.trials_for_study(s, study_id):
                    if row.outcome is TrialOutcome.INFRA:
                        continue
                    st.counted += 1
                    st.reused += int(row.reused)
                    st.measured += int(not row.reused)
                    ok = row.outcome is TrialOutcome.OK
                    st.values[row.config_key] = row.median_ms if ok else None
                    st.configs[row.config_key] = dict(row.config)
                    if ok:
                        st.trial_ids[row.config_key] = row.id
                warm.append(
                    self._warm_configs(s, plan, class_id, kernel, version, kernel_id, spec.trials)
                )
                self._studies.append(st)
            repository.set_job_status(s, job_id, JobStatus.RUNNING)
        for st, configs in zip(self._studies, warm, strict=True):
            st.search = SearchStudy.create(
                st.name, kernel.space, st.plan.info.limits, spec.sampler, spec.seed, spec.trials
            )
            for key, value in st.values.items():
                st.search.add_history(st.configs[key], value)
            if not st.values:
                for config in configs:
                    st.search.enqueue(config)
            self.reporter.add(st.plan.label, st.budget, min(st.counted, st.budget))
        return spec, kernel, kernel_id, version

    # ----- the loop
    def run(self, job_id: int) -> JobResult:
        """Drive job ``job_id`` (new or resumed) to done, cancelled or failed."""
        spec, kernel, kernel_id, version = self._setup(job_id)
        status = JobStatus.DONE
        try:
            cancelled = self._loop(job_id, spec, kernel_id)
            if cancelled:
                status = JobStatus.CANCELLED
                result = JobResult(job_id, status)
            else:
                result = self._finish(job_id, spec, kernel, version)
            self._close(job_id, status, None)
            return result
        except KeyboardInterrupt:
            self._close(job_id, JobStatus.CANCELLED, "interrupted (Ctrl-C)")
            return JobResult(job_id, JobStatus.CANCELLED)
        except BaseException as exc:
            self._close(
                job_id, JobStatus.FAILED, str(exc).splitlines()[0] if str(exc) else repr(exc)
            )
            raise
        finally:
            self.reporter.close()

    def _close(self, job_id: int, status: JobStatus, error: str | None) -> None:
        study_status = {
            JobStatus.DONE: StudyStatus.DONE,
            JobStatus.CANCELLED: StudyStatus.CANCELLED,
        }.get(status, StudyStatus.FAILED)
        with self.database.session() as s:
            for st in self._studies:
                repository.set_study_status(s, st.study_id, study_status)
            repository.set_job_status(s, job_id, status, error)

    def _cancel_requested(self, job_id: int) -> bool:
        with self.database.session(readonly=True) as s:
            return repository.get_job(s, job_id).cancel_requested

    def _loop(self, job_id: int, spec: JobSpec, kernel_id: int) -> bool:
        """Dispatch and collect until every study is finished; True if cancelled."""
        deadline = time.monotonic() + spec.minutes * 60 if spec.minutes else math.inf
        next_poll = 0.0
        stopping = cancelled = False
        while True:
            now = time.monotonic()
            if not stopping and now >= next_poll:
                next_poll = now + self.poll_s
                cancelled = self._cancel_requested(job_id)
                stopping = cancelled or now >= deadline
                if stopping:
                    self.reporter.note(
                        "cancel requested: stopping dispatch" if cancelled else "time budget spent"
                    )
            if not stopping:
                self._dispatch(kernel_id)
            if self.pool.in_flight == 0 and (
                stopping or all(st.finished() for st in self._studies)
            ):
                return cancelled
            for done in self.pool.wait(timeout=0.2):
                self._handle(done, kernel_id, job_id)

    def _dispatch(self, kernel_id: int) -> None:
        by_class: dict[str, list[_Study]] = {}
        for st in self._studies:
            by_class.setdefault(st.plan.class_key, []).append(st)
        for class_key, studies in by_class.items():
            if not self.pool.workers(class_key) and not all(st.finished() for st in studies):
                raise NoWorkersError(
                    f"every worker of class {class_key!r} was lost; classes left: "
                    f"{', '.join(sorted(self.pool.classes())) or 'none'}"
                )
            retries = self._retries.setdefault(class_key, [])
            while self.pool.free_slots(class_key) > 0:
                if retries:
                    self.pool.submit(class_key, retries.pop(0))
                    continue
                ready = [st for st in studies if st.wants()]
                if not ready:
                    break
                n = self._rr.get(class_key, 0)
                self._rr[class_key] = n + 1
                self._advance(ready[n % len(ready)], kernel_id)

    def _advance(self, st: _Study, kernel_id: int) -> None:
        """Ask until one config is dispatched, the budget is met, or the study converges."""
        plan = st.plan
        for _ in range(ASKS_PER_STEP):
            if not st.wants():
                return
            drawn = st.search.drawn
            if len(st.values) >= plan.valid or not st.search.unstick(st.values, st.waiting):
                st.exhausted = True
                return
            if drawn == 0 and st.search.drawn:
                self.reporter.note(
                    f"{plan.label}: the sampler keeps proposing known or invalid configs; "
                    "drawing unmeasured ones at random"
                )
            trial, config = st.search.ask()
            violation = self._space_violation(st, config)
            if violation is not None:
                st.search.tell_bad(trial, violation)
                st.rejected += 1
                st.search.note(new=False)
                continue
            key = config_key(config)
            if key in st.waiting:
                st.waiting[key].append(trial)
                st.search.note(new=False)
                continue
            if key in st.values:
                self._tell(st, [trial], st.values[key])
                st.search.note(new=False)
                continue
            with self.database.session() as s:
                prior = repository.find_measured(
                    s, kernel_id, plan.problem_key, st.class_id, key, self._objective
                )
                if prior is not None:
                    row_id = repository.record_trial(
                        s,
                        kernel_id=kernel_id,
                        problem_key=plan.problem_key,
                        device_class_id=st.class_id,
                        config=config,
                        config_key=key,
                        outcome=prior.outcome,
                        job_id=self._job_id,
                        study_id=st.study_id,
                        environment_id=prior.environment_id,
                        samples_ms=prior.samples_ms,
                        median_ms=prior.median_ms,
                        iqr_ms=prior.iqr_ms,
                        max_rel_error=prior.max_rel_error,
                        error=prior.error,
                        worker=prior.worker,
                        host=prior.host,
                        reused=True,
                        objective=self._objective,
                    )
            if prior is not None:
                ok = prior.outcome is TrialOutcome.OK
                value = prior.median_ms if ok else None
                st.values[key], st.configs[key] = value, config
                if ok:
                    st.trial_ids[key] = row_id
                st.counted += 1
                st.reused += 1
                st.search.note(new=True)
                self._tell(st, [trial], value)
                self.reporter.update(plan.label, st.counted, st.best_ms)
                continue
            st.waiting[key] = [trial]
            st.configs[key] = config
            st.search.note(new=True)
            self.pool.submit(
                plan.class_key, Task(st, self._kernel_name, dict(plan.problem), config)
            )
            return

    def _space_violation(self, st: _Study, config: Config) -> str | None:
        if self._kernel is None:
            raise JobStateError("the driver has no job loaded")
        v = self._kernel.space.violation(config, st.plan.info.limits)
        return None if v is None else str(v)

    def _tell(self, st: _Study, trials: list[OptunaTrial], value: float | None) -> None:
        for trial in trials:
            if value is None:
                st.search.tell_bad(trial, "no valid time")
            else:
                st.search.tell_ok(trial, value)

    def _handle(self, done: Done, kernel_id: int, job_id: int) -> None:
        st: _Study = done.task.owner
        plan = st.plan
        m: Measurement = done.measurement
        key = config_key(done.task.config)
        lost = done.lost or m.outcome is Outcome.INFRA
        with self.database.session() as s:
            env_id = self._environment(s, done.worker, st.class_id)
            row_id = repository.record_trial(
                s,
                kernel_id=kernel_id,
                problem_key=plan.problem_key,
                device_class_id=st.class_id,
                config=done.task.config,
                config_key=key,
                outcome=m.outcome.value,
                job_id=job_id,
                study_id=st.study_id,
                environment_id=env_id,
                samples_ms=list(m.samples_ms) or None,
                median_ms=m.median_ms,
                iqr_ms=m.iqr_ms,
                max_rel_error=_finite(m.max_rel_error),
                compile_s=m.compile_s,
                run_s=m.run_s,
                error=m.error,
                worker=m.worker,
                host=m.host,
                objective=self._objective,
            )
        if lost:
            if done.task.attempt + 1 < MAX_ATTEMPTS:
                retry = Task(st, done.task.kernel, done.task.problem, done.task.config)
                retry.attempt = done.task.attempt + 1
                self._retries.setdefault(plan.class_key, []).append(retry)
                self.reporter.note(f"worker lost; re-dispatching a trial of {plan.label}")
            else:
                self._tell(st, st.waiting.pop(key, []), None)
            return
        ok = m.outcome is Outcome.OK and m.median_ms is not None
        value = m.median_ms if ok else None
        st.values[key] = value
        if ok:
            st.trial_ids[key] = row_id
        st.counted += 1
        st.measured += 1
        self._tell(st, st.waiting.pop(key, []), value)
        self.reporter.update(plan.label, min(st.counted, st.budget), st.best_ms)

    # ----- finish
    def _finish(self, job_id: int, spec: JobSpec, kernel: KernelSpec, version: str) -> JobResult:
        """Re-time each study's top k in a fresh process, interleaved; upsert the winner."""
        result = JobResult(job_id, JobStatus.DONE)
        jobs = []
        tops: list[list[str]] = []
        for st in self._studies:
            ranked = sorted(
                (k for k, v in st.values.items() if v is not None and k in st.trial_ids),
                key=lambda k: st.values[k] or 0.0,
            )[: spec.top_k]
            tops.append(ranked)
            jobs.append(
                (
                    st.plan.class_key,
                    self._kernel_name,
                    dict(st.plan.problem),
                    [st.configs[k] for k in ranked],
                )
            )
        if any(tops):
            self.reporter.note("re-timing the top configs in a fresh process")
        retimed = self.pool.retime(jobs, self.retime_rounds) if any(tops) else [None] * len(jobs)
        with self.database.session() as s:
            for st, ranked, medians in zip(self._studies, tops, retimed, strict=True):
                if not ranked:
                    continue
                times: dict[str, float] = {}
                for i, k in enumerate(ranked):
                    samples = medians[i] if medians is not None else []
                    times[k] = statistics.median(samples) if samples else float(st.values[k] or 0.0)
                winner = min(ranked, key=lambda k: times[k])
                info = st.plan.info
                promoted = repository.upsert_best(
                    s,
                    kernel.name,
                    version,
                    st.plan.problem_key,
                    st.plan.class_key,
                    triton_minor(info.fingerprint.triton),
                    st.configs[winner],
                    times[winner],
                    st.trial_ids[winner],
                    job_id,
                    self._environment(s, info, st.class_id),
                    self._objective,
                )
                result.winners[st.study_id] = (st.configs[winner], times[winner], promoted)
        return result


def _finite(value: float | None) -> float | None:
    return value if value is None or math.isfinite(value) else None
