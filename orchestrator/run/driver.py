"""The job driver: connects a study per plan, the job's ledger and a pool.

One driver owns a job while it runs. :func:`plan_job` (orchestrator.run.planning) checks the spec
against the pool's classes; the :class:`~orchestrator.run.ledger.Ledger` is the only writer of the
job's rows (workers never touch the database) and commits the trials each ``wait`` drained in one
transaction before dispatching again, so a driver killed at any point loses at most the trials in
flight or just drained (measured again on resume), and no slot is reused before its trial is
committed; each :class:`~orchestrator.study.loop.Study` holds its Optuna study in memory and decides
what to measure (see orchestrator.study.loop for the rules: constraint breakers rejected free, known
configs answered, configs measured for the same key by any job reused, warm start, the
stuck-sampler draw). ``resume`` runs the job again: each study is rebuilt from the trial rows
already in the database (which count against the budget).

Vendor paths: at the start, each study's ``spec.vendor_paths(problem)`` that has no ``ok``
measurement on its key in its class's environment (nor one by this study) is measured once on a
worker of the class, with the job's objective, dispatched before any trial; the result goes to
the vendor trials (``Ledger.record_vendor``), never to the study: it is neither counted against
the budget nor told to the sampler. A path that does not end ``ok`` (or a ``vendor_paths`` that
raises) is reported in one line and the study goes on without it. Promotion compares the key's
winner with the fastest ``ok`` one (orchestrator.run.promotion).

The loop: while a class has free slots (for up to ``DISPATCH_S`` a pass), retried trials go
first, then the class's studies propose in turn; the results each ``wait`` drains are recorded together, then told. A trial whose worker was lost is
recorded ``infra`` and dispatched again, ``MAX_ATTEMPTS`` times in all. A retryable verdict
(``db.RETRYABLE_OUTCOMES``: crash, compile or run timeout; maybe not the config's fault: a process
killed from outside, a loaded node) is, the first time for its config in the study, recorded
``provisional``, neither told nor counted, and measured once more (on a fresh trial process: the
runner replaces a crashed or timed-out one); that second verdict stands. A resumed job re-measures
the provisional configs that have no final row yet. The database is checked every poll
(the cancel flag is read in a write transaction: ``Ledger.cancel_requested``, or for every job of a
server at once by its scheduler); once it is lost (``DatabaseLost``: the SQLite file deleted, replaced
or read-only) the driver dispatches and records nothing more and the error leaves ``run``; so
does ``LeaseLost``, raised by any write once another owner took the job over (the ledger fences
every write on the driver's ``lease``): the job is the new owner's, untouched.
Every write is retried on transient errors (orchestrator.run.ledger). The job ends when every
study is finished (budget spent or every valid config known) or the time budget is spent (the
vendor paths still queued are measured even so: they decide a key no trial reached), then
re-times and promotes (orchestrator.run.promotion); or it ends early: the database's cancel flag
(``cancelled``: each study's fastest ``ok`` trial is promoted, not re-timed), or the ``stop``
hook (back to ``queued`` for a new owner, nothing promoted); whenever dispatch stops so, the
trials in flight are waited for and recorded. Ctrl-C (KeyboardInterrupt) marks the job
``cancelled``, promoting as a cancel does, and SIGTERM (SystemExit, as Ray's handler raises it)
leaves it ``queued`` for ``resume`` and raises :class:`Terminated`; both then leave ``run``
(the trials in flight are not waited for: their configs are measured again on resume).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

import optuna

from db import RETRYABLE_OUTCOMES, Database, DatabaseLost, JobStatus, Lease, LeaseLost
from orchestrator.errors import JobStateError, NoWorkersError, Terminated
from orchestrator.run.jobs import JobSpec
from orchestrator.run.ledger import Ledger, OpenJob, Result, StudyRows, create_job
from orchestrator.run.planning import StudyPlan, plan_job
from orchestrator.run.pool import Done, Pool
from orchestrator.run.progress import Reporter, SilentReporter
from orchestrator.run.promotion import Winners, promote, promote_trials
from orchestrator.study import samplers
from orchestrator.study.loop import Answer, Study
from orchestrator.study.samplers.learned import PriorTrial
from orchestrator.study.search import SearchStudy
from search_spaces.space import config_key
from workers.measurement import Outcome
from workers.trial import TrialRequest

__all__ = ["Driver", "JobResult", "StudyPlan", "plan_job", "submit_job"]

#: Suggestions handled per study before the driver turns to other studies and results.
ASKS_PER_STEP = 20
#: Seconds one dispatch pass may propose before the driver turns to results and polls: with
#: hundreds of free slots a pass would otherwise propose for all of them (seconds on a loaded
#: host) while finished trials wait to be recorded and a stop or cancel waits to be seen.
DISPATCH_S = 0.2
#: Times a trial is dispatched before a lost worker is taken as the config's fault.
MAX_ATTEMPTS = 3
_RETRYABLE = frozenset(o.value for o in RETRYABLE_OUTCOMES)


@dataclass
class _Running:
    """One study of the job: its rows and its loop."""

    rows: StudyRows
    study: Study
    provisional: set[str] = field(default_factory=set)  # keys with a provisional row

    @property
    def plan(self) -> StudyPlan:
        return self.rows.plan


@dataclass(frozen=True)
class _Ticket:
    """What the driver tags a submitted trial with: its study, its config's key, how often it
    was lost."""

    running: _Running
    key: str
    attempt: int = 0


@dataclass(frozen=True)
class _VendorTicket:
    """What the driver tags a vendor-path measurement with: its study, how often it was lost."""

    running: _Running
    attempt: int = 0


@dataclass
class JobResult:
    """How the driver left the job, and per study its winner (none if none ran ok, or the job
    went back to ``queued``)."""

    job_id: int
    status: JobStatus
    winners: Winners = field(default_factory=dict)


def submit_job(database: Database, spec: JobSpec, pool: Pool) -> int:
    """Validate ``spec`` against the pool, then write the job (``queued``); return its id."""
    plan_job(spec, spec.kernel_spec(), pool)
    return create_job(database, spec)


class Driver:
    """Runs one job on a pool; see the module docstring for the loop's rules.

    ``stop``, if given, is polled with the cancel flag: once it returns True the driver asks
    no more, records the trials in flight and leaves the job ``queued`` (JobResult status
    QUEUED), e.g. when its lease was lost or its scheduler shuts down.
    """

    def __init__(
        self,
        database: Database,
        pool: Pool,
        *,
        reporter: Reporter | None = None,
        retime_rounds: int = 3,
        poll_s: float = 1.0,
        stop: Callable[[], bool] | None = None,
        cancelled: Callable[[], bool] | None = None,
        lease: Lease | None = None,
    ) -> None:
        """``cancelled``: whether a cancel of the job was asked for, as the caller reads it
        (a server's scheduler reads its jobs' flags in one query per poll); without it the
        driver reads the flag itself every ``poll_s``. ``lease``: the caller's lease on the
        job, which every write is fenced on (see :class:`~orchestrator.run.ledger.Ledger`)."""
        self.database = database
        self.pool = pool
        self.reporter: Reporter = reporter or SilentReporter()
        self.retime_rounds = retime_rounds
        self.poll_s = poll_s
        self._stop = stop
        self._cancelled = cancelled
        self._lease = lease
        self._studies: list[_Running] = []
        self._retries: dict[str, list[tuple[TrialRequest, _Ticket]]] = {}
        self._vendor: dict[str, list[tuple[TrialRequest, _VendorTicket]]] = {}
        self._rr: dict[str, int] = {}
        self._passes = 0
        self._ledger: Ledger | None = None
        self._job: OpenJob | None = None
        self._kernel_name = ""
        self._sharing = False  # the sampler takes the siblings' trials

    # ----- setup
    def _setup(self, job_id: int) -> OpenJob:
        ledger = Ledger(self.database, job_id, self._lease)
        job = ledger.open()
        plans = plan_job(job.spec, job.kernel, self.pool)
        self._ledger, self._kernel_name = ledger, job.spec.kernel
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        logging.getLogger("optuna").setLevel(logging.WARNING)
        spec = job.spec
        self._sharing = samplers.get(spec.sampler).prior
        prior = ledger.prior() if self._sharing else []
        for rows in ledger.start(job, plans):
            limits = rows.plan.info.limits
            search = SearchStudy.create(
                rows.name,
                job.kernel.space,
                limits,
                spec.sampler,
                spec.seed,
                spec.trials,
                kernel=job.kernel,
                problem=rows.plan.problem,
                device_class=rows.plan.class_key,
                prior=prior,
            )
            study = Study(
                search,
                job.kernel.space,
                limits,
                spec.trials,
                valid=rows.plan.valid,
                reuse=ledger.reuse(rows),
                equivalent=job.kernel.equivalence(rows.plan.problem),
            )
            study.restore(rows.history)
            study.warm_start(rows.warm)
            running = _Running(rows, study, set(rows.provisional))
            for config in rows.unfinished:
                study.hold(config)
                request = TrialRequest(job.spec.kernel, dict(rows.plan.problem), dict(config))
                self._retries.setdefault(rows.plan.class_key, []).append(
                    (request, _Ticket(running, config_key(config)))
                )
            self._studies.append(running)
            self.reporter.add(rows.plan.label, spec.trials, min(study.counted, spec.trials))
        self._job = job
        self._queue_vendor_paths(job)
        return job

    def _queue_vendor_paths(self, job: OpenJob) -> None:
        """Queue each study's vendor paths that the database cannot answer (see the module
        docstring)."""
        named: list[tuple[StudyRows, tuple[str, ...]]] = []
        for r in self._studies:
            try:
                names: tuple[str, ...] = tuple(job.kernel.vendor_paths(r.plan.problem))
            except Exception as exc:
                self._vendor_failed(r, None, f"{type(exc).__name__}: {exc}")
                names = ()
            named.append((r.rows, names))
        todo = self._ledger_of_job().vendor_todo(job, named) if named else []
        for r, missing in zip(self._studies, todo, strict=True):
            for name in missing:
                request = TrialRequest(job.spec.kernel, dict(r.plan.problem), {}, vendor=name)
                self._vendor.setdefault(r.plan.class_key, []).append((request, _VendorTicket(r)))

    def _vendor_failed(self, r: _Running, name: str | None, why: str) -> None:
        what = "its vendor paths" if name is None else f"vendor path {name!r}"
        first = why.splitlines()[0] if why else "no reason given"
        self.reporter.note(
            f"{r.plan.label}: kernel {self._kernel_name!r}: {what} failed: {first}; "
            "the study goes on without it"
        )

    def _ledger_of_job(self) -> Ledger:
        if self._ledger is None:
            raise JobStateError("the driver has no job loaded")
        return self._ledger

    # ----- the loop
    def run(self, job_id: int) -> JobResult:
        """Drive job ``job_id`` (new or resumed) to done, cancelled, failed, or (``stop``)
        back to queued."""
        job = self._setup(job_id)
        ledger = self._ledger_of_job()
        rows = [r.rows for r in self._studies]
        studies = [(r.rows, r.study) for r in self._studies]
        try:
            early = self._loop(job.spec)
            if early is None:
                winners = promote(
                    job, studies, self.pool, ledger, self.retime_rounds, self.reporter
                )
                result = JobResult(job_id, JobStatus.DONE, winners)
            elif early is JobStatus.CANCELLED:
                result = JobResult(job_id, early, promote_trials(job, studies, ledger))
            else:
                result = JobResult(job_id, early)
            ledger.close(result.status, None, rows)
            return result
        except (DatabaseLost, LeaseLost):
            raise  # nothing more can be recorded (or is ours to), not even the job's end
        except KeyboardInterrupt:
            try:
                promote_trials(job, studies, ledger)
            finally:
                ledger.close(JobStatus.CANCELLED, "interrupted (Ctrl-C)", rows)
            raise
        except SystemExit:  # SIGTERM: Ray's handler in a driver process raises SystemExit
            self.reporter.note(
                f"terminated: job {job_id} is left queued; `tunefleet resume {job_id}` continues it"
            )
            ledger.close(JobStatus.QUEUED, None, rows)
            raise Terminated(job_id) from None
        except BaseException as exc:
            error = str(exc).splitlines()[0] if str(exc) else repr(exc)
            ledger.close(JobStatus.FAILED, error, rows)
            raise
        finally:
            self.reporter.close()

    def _loop(self, spec: JobSpec) -> JobStatus | None:
        """Dispatch and collect until every study is finished (None) or the job ends early:
        CANCELLED (cancel flag), QUEUED (``stop``), None on the time budget."""
        ledger = self._ledger_of_job()
        deadline = time.monotonic() + spec.minutes * 60 if spec.minutes else math.inf
        next_poll = 0.0
        stopping = False
        early: JobStatus | None = None
        while True:
            now = time.monotonic()
            if not stopping and now >= next_poll:
                next_poll = now + self.poll_s
                # The driver's own read also checks the database takes writes.
                asked = self._cancelled or ledger.cancel_requested
                if asked():
                    early = JobStatus.CANCELLED
                    self.reporter.note("cancel requested: stopping dispatch")
                elif self._stop is not None and self._stop():
                    early = JobStatus.QUEUED
                    self.reporter.note("stop requested: handing the job back")
                elif now >= deadline:
                    self.reporter.note("time budget spent")
                stopping = early is not None or now >= deadline
            # Past the time budget the vendor paths still queued are measured (they are what
            # decides a key no trial reached); a cancel or stop drops them.
            cut = self._dispatch(vendor_only=stopping) if early is None else False
            if self.pool.in_flight == 0 and (
                early is not None
                or (
                    not any(self._vendor.values())
                    and (stopping or all(r.study.finished() for r in self._studies))
                )
            ):
                return early
            # A pass cut short left free slots: collect what is ready and go on proposing.
            self._handle(self.pool.wait(timeout=0.0 if cut else 0.2))

    def _dispatch(self, vendor_only: bool = False) -> bool:
        """Fill the classes' free slots for up to ``DISPATCH_S`` (each pass starts at the next
        class, so a pass cut short does not starve the last ones), with the queued vendor paths
        alone when ``vendor_only``; True if cut short."""
        by_class: dict[str, list[_Running]] = {}
        for r in self._studies:
            by_class.setdefault(r.plan.class_key, []).append(r)
        order = list(by_class.items())
        first = self._passes % len(order) if order else 0
        self._passes += 1
        deadline = time.monotonic() + DISPATCH_S
        for class_key, studies in order[first:] + order[:first]:
            if time.monotonic() >= deadline:
                return True
            if vendor_only and not self.pool.workers(class_key):
                self._vendor[class_key] = []  # no worker left to measure them
                continue
            if not self.pool.workers(class_key) and not (
                all(r.study.finished() for r in studies) and not self._vendor.get(class_key)
            ):
                raise NoWorkersError(
                    f"every worker of class {class_key!r} was lost; classes left: "
                    f"{', '.join(sorted(self.pool.classes())) or 'none'}"
                )
            retries = self._retries.setdefault(class_key, [])
            vendor = self._vendor.setdefault(class_key, [])
            while self.pool.free_slots(class_key) > 0:
                if time.monotonic() >= deadline:
                    return True
                if vendor:
                    self.pool.submit(class_key, *vendor.pop(0))
                    continue
                if vendor_only:
                    break
                if retries:
                    self.pool.submit(class_key, *retries.pop(0))
                    continue
                ready = [r for r in studies if r.study.wants()]
                if not ready:
                    break
                n = self._rr.get(class_key, 0)
                self._rr[class_key] = n + 1
                self._advance(ready[n % len(ready)])
        return False

    def _advance(self, r: _Running) -> None:
        """Let one study propose; submit what it wants measured."""
        study, plan = r.study, r.plan
        drawn, reused = study.search.drawn, study.reused
        found = study.propose_keyed(ASKS_PER_STEP)
        if drawn == 0 and study.search.drawn:
            self.reporter.note(
                f"{plan.label}: the sampler keeps proposing known or invalid configs; "
                "drawing unmeasured ones at random"
            )
        if study.reused != reused:
            self.reporter.update(plan.label, study.counted, study.best_ms)
        if found is not None:
            key, config = found
            request = TrialRequest(self._kernel_name, dict(plan.problem), config)
            self.pool.submit(plan.class_key, request, _Ticket(r, key))

    def _handle(self, batch: list[Done]) -> None:
        """Record what one ``wait`` drained in one transaction, then tell, retry or drop each."""
        ledger = self._ledger_of_job()
        vendor = [done for done in batch if isinstance(done.tag, _VendorTicket)]
        if vendor:
            self._handle_vendor(vendor)
        results: list[Result] = []
        for done in batch:
            if isinstance(done.tag, _VendorTicket):
                continue
            ticket = cast(_Ticket, done.tag)
            r, key = ticket.running, ticket.key
            retryable = not done.lost and done.measurement.outcome.value in _RETRYABLE
            provisional = retryable and key not in r.provisional
            if provisional:
                r.provisional.add(key)
            results.append(Result(r.rows, done, provisional, key))
        for result, answer in zip(results, ledger.record(results), strict=True):
            self._settle(result, answer)

    def _handle_vendor(self, batch: list[Done]) -> None:
        """Record vendor-path measurements (a lost one is dispatched again, ``MAX_ATTEMPTS``
        times in all); report each that did not end ``ok``."""
        job = self._job
        if job is None:
            raise JobStateError("the driver has no job loaded")
        recorded: list[tuple[_Running, Done]] = []
        for done in batch:
            ticket = cast(_VendorTicket, done.tag)
            r = ticket.running
            if done.lost and ticket.attempt + 1 < MAX_ATTEMPTS:
                again = _VendorTicket(r, ticket.attempt + 1)
                self._vendor.setdefault(r.plan.class_key, []).append((done.request, again))
                continue
            recorded.append((r, done))
        self._ledger_of_job().record_vendor(job, [(r.rows, done) for r, done in recorded])
        for r, done in recorded:
            m = done.measurement
            if m.outcome is not Outcome.OK:
                why = f"{m.outcome.value}: {m.error}" if m.error else m.outcome.value
                self._vendor_failed(r, done.request.vendor, why)

    def _settle(self, result: Result, answer: Answer) -> None:
        """What a recorded trial means for its study (see the module docstring)."""
        done = result.done
        ticket = cast(_Ticket, done.tag)
        r = ticket.running
        if result.provisional:
            self._retries.setdefault(r.plan.class_key, []).append((done.request, ticket))
            self.reporter.note(
                f"{r.plan.label}: {done.measurement.outcome.value}; measuring that config "
                "once more before taking it as its verdict"
            )
            return
        if done.lost or done.measurement.outcome is Outcome.INFRA:
            if ticket.attempt + 1 < MAX_ATTEMPTS:
                retry = _Ticket(r, ticket.key, ticket.attempt + 1)
                self._retries.setdefault(r.plan.class_key, []).append((done.request, retry))
                self.reporter.note(f"worker lost; re-dispatching a trial of {r.plan.label}")
            else:
                r.study.drop(done.request.config)
            return
        r.study.tell(done.request.config, answer, ticket.key)
        if self._sharing and answer.value is not None:
            shared = (
                PriorTrial(r.plan.problem, r.plan.class_key, done.request.config, answer.value),
            )
            for other in self._studies:
                if other is not r:
                    other.study.search.share(shared)
        self.reporter.update(r.plan.label, min(r.study.counted, r.study.budget), r.study.best_ms)
