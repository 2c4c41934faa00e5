"""What the web page shows beyond :mod:`orchestrator.app.jobs`: one study analysed (convergence,
outcomes, best config against the spec default and the median trial, parameter importance), a
study's trials paged and sorted in SQL, and the portability matrix of a kernel's problem across
device classes.

Like the job use cases these return frozen :class:`~orchestrator.app.views.View` dataclasses
(``to_dict()`` is the wire format) and read only trial rows that are a config's own verdict
(neither ``infra`` nor provisional), so the figures match what the jobs list counts.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from db import Database, Objective, TrialOutcome, repository
from db.repository import TrialRecord
from orchestrator.app.jobs import MAX_LIMIT, job_detail, visible_job
from orchestrator.app.plot import convergence, importance
from orchestrator.app.study_best import BestSource
from orchestrator.app.views import StudyProgress, TrialPage, TrialView, View, aware
from orchestrator.errors import InvalidRequest, NotFound
from orchestrator.run.speedup import speedup
from search_spaces.errors import SpecError
from search_spaces.problem import problem_key
from search_spaces.registry import get_spec, spec_from_storage
from search_spaces.space import DeviceLimits, Vendor, config_key
from search_spaces.spec import KernelSpec

if TYPE_CHECKING:
    from db import Session

#: Columns the trial table sorts by (``time`` puts trials without a time last either way).
TRIAL_SORT_COLUMNS = tuple(sort.value for sort in repository.TrialSort)
ORDERS = ("asc", "desc")


@dataclasses.dataclass(frozen=True)
class StudyAnalysis(View):
    """One study: progress, convergence as (trial number, best ms) at each improvement, its best
    as every view shows it (``best_source``, ``best_ms``, ``best_config`` and the speedups are the
    ``study``'s, :mod:`orchestrator.app.study_best`), the spec's default and the median ok trial.

    A decided study's ``default_ms`` and ``speedup_vs_default`` are those of the re-timing that
    decided its key (``default_outcome`` None); before that, ``default_ms`` is the default's trial
    on the key (``default_outcome`` its verdict) and there is no speedup yet. ``speedup_vs_median``
    compares trials with trials: the median ok trial over the fastest (``fastest_trial_ms``)."""

    job_id: int
    study: StudyProgress
    trials: int
    convergence: tuple[tuple[int, float], ...]
    best_ms: float | None
    best_config: dict[str, Any] | None
    default_config: dict[str, Any] | None
    default_ms: float | None
    default_outcome: str | None
    median_ms: float | None
    speedup_vs_default: float | None
    speedup_vs_median: float | None
    importance: dict[str, float]
    best_source: BestSource | None = None
    fastest_trial_ms: float | None = None
    speedup_vs_vendor: float | None = None


@dataclasses.dataclass(frozen=True)
class PortabilityCell(View):
    """Class ``source``'s best config run on class ``target``: its time there and the loss against
    ``target``'s own best (``loss_pct`` 0 on the diagonal); ``note`` says why a cell has no time."""

    source: str
    target: str
    time_ms: float | None
    target_best_ms: float | None
    loss_pct: float | None
    note: str | None


@dataclasses.dataclass(frozen=True)
class PortabilityMatrix(View):
    """The classes with ``ok`` trials of ``kernel`` on ``problem`` and every (source, target) cell,
    row-major; ``problems`` lists the kernel's problems that have trials (for a problem chooser)."""

    kernel: str
    objective: Objective
    problem: dict[str, Any] | None
    problems: tuple[dict[str, Any], ...]
    classes: tuple[str, ...]
    best: dict[str, dict[str, Any]]
    cells: tuple[PortabilityCell, ...]


def _study(database: Database, job_id: int, study_id: int, team: str | None) -> StudyProgress:
    detail = job_detail(database, job_id, team=team)
    for study in detail.studies:
        if study.id == study_id:
            return study
    raise NotFound(f"job {job_id} has no study {study_id}")


def _check_study(s: Session, job_id: int, study_id: int, team: str | None) -> None:
    """NotFound unless job ``job_id`` (of ``team``, if given) has study ``study_id`` (another
    team's job: the same NotFound as a missing one)."""
    visible_job(s, job_id, team)
    if not repository.study_in_job(s, job_id, study_id):
        raise NotFound(f"job {job_id} has no study {study_id}")


@dataclasses.dataclass(frozen=True)
class _TrialFigures:
    """What a study's analysis derives from its trial rows alone."""

    count: int
    steps: tuple[tuple[int, float], ...]
    ok_times: tuple[float, ...]
    importance: dict[str, float]


class _FigureCache:
    """Figures by (database, study, row count, newest row id): trial rows are only appended, so an
    unchanged count and newest id mean unchanged figures. Bounded, thread-safe."""

    def __init__(self, size: int = 64) -> None:
        self._items: OrderedDict[tuple[int, int, int, int], _TrialFigures] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def get(
        self, key: tuple[int, int, int, int], compute: Callable[[], _TrialFigures]
    ) -> _TrialFigures:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        value = compute()
        with self._lock:
            self._items[key] = value
            while len(self._items) > self._size:
                self._items.popitem(last=False)
        return value


_FIGURES = _FigureCache()


def _figures(trials: list[TrialRecord]) -> _TrialFigures:
    curve = convergence(trials)
    steps: list[tuple[int, float]] = []
    for number, best in enumerate(curve, start=1):
        if best is not None and (not steps or best < steps[-1][1]):
            steps.append((number, best))
    if steps and steps[-1][0] != len(curve):
        steps.append((len(curve), steps[-1][1]))
    ok_times = tuple(
        t.median_ms for t in trials if t.outcome is TrialOutcome.OK and t.median_ms is not None
    )
    return _TrialFigures(len(curve), tuple(steps), ok_times, importance(trials))


def _default_config(kernel: str, vendor: str) -> dict[str, Any] | None:
    """The spec's default config for ``vendor``, or None where the kernel is not installed here
    or is a ``module:attribute`` (a job row's name is never imported for a view)."""
    try:
        return dict(spec_from_storage(kernel).default_config(Vendor(vendor)))
    except (SpecError, ValueError):
        return None


def study_analysis(
    database: Database, job_id: int, study_id: int, *, team: str | None = None
) -> StudyAnalysis:
    """Study ``study_id`` of job ``job_id`` (``team`` given: only that team's job) analysed.

    Its best is the job detail's (see :class:`StudyAnalysis`). Until its key is decided, the
    default's time is the study's own trial of it, else any verdict of it on the same kernel
    version, problem and class (warm start measures it for other jobs); None if never measured.
    """
    progress = _study(database, job_id, study_id, team)
    with database.session(readonly=True) as s:
        count, newest = repository.study_trial_stamp(s, study_id)
        figures = _FIGURES.get(
            (id(database), study_id, count, newest),
            lambda: _figures(repository.study_final_trials(s, study_id)),
        )
        study = next(st for st in repository.studies_for_job(s, job_id) if st.id == study_id)
        job = repository.get_job(s, job_id)
        default = _default_config(job.kernel_name, study.device_class.vendor)
        measured = None
        decided = progress.best_source is BestSource.DECIDED
        if default is not None and not decided:
            measured = repository.find_measured(
                s,
                study.kernel_id,
                study.problem_key,
                study.device_class.id,
                config_key(default),
                job.objective,
            )
    ok_times = figures.ok_times
    fastest_ms = min(ok_times) if ok_times else None
    median_ms = statistics.median(ok_times) if ok_times else None
    if decided:
        default_ms, default_outcome = progress.default_ms, None
    else:
        ok = measured is not None and measured.outcome is TrialOutcome.OK
        default_ms = measured.median_ms if measured is not None and ok else None
        default_outcome = measured.outcome.value if measured is not None else None
    return StudyAnalysis(
        job_id=job_id,
        study=progress,
        trials=figures.count,
        convergence=figures.steps,
        best_ms=progress.best_ms,
        best_config=progress.best_config,
        default_config=default,
        default_ms=default_ms,
        default_outcome=default_outcome,
        median_ms=median_ms,
        speedup_vs_default=progress.speedup_vs_default,
        speedup_vs_median=speedup(median_ms, fastest_ms),
        importance=figures.importance,
        best_source=progress.best_source,
        fastest_trial_ms=fastest_ms,
        speedup_vs_vendor=progress.speedup_vs_vendor,
    )


def _trial_view(trial: TrialRecord) -> TrialView:
    values = {f.name: getattr(trial, f.name) for f in dataclasses.fields(TrialView)}
    values["config"] = dict(trial.config)
    values["created_at"] = aware(trial.created_at)
    return TrialView(**values)


def trial_page(
    database: Database,
    job_id: int,
    study_id: int,
    *,
    team: str | None = None,
    limit: int = 50,
    offset: int = 0,
    sort: str = "id",
    order: str = "asc",
    outcome: str | None = None,
) -> TrialPage:
    """One page of a study's trials (provisional rows included: they are on the record), sorted
    by ``sort`` (one of :data:`TRIAL_SORT_COLUMNS`) in ``order``, optionally of one outcome.
    The database sorts and pages, so a study of any size costs one page."""
    if not 1 <= limit <= MAX_LIMIT or offset < 0:
        raise InvalidRequest(f"limit must be 1 to {MAX_LIMIT} and offset 0 or more")
    if sort not in TRIAL_SORT_COLUMNS:
        raise InvalidRequest(f"unknown sort {sort!r}; one of {', '.join(TRIAL_SORT_COLUMNS)}")
    if order not in ORDERS:
        raise InvalidRequest(f"unknown order {order!r}; asc or desc")
    chosen = None
    if outcome is not None:
        try:
            chosen = TrialOutcome(outcome)
        except ValueError:
            raise InvalidRequest(
                f"unknown outcome {outcome!r}; one of {', '.join(o.value for o in TrialOutcome)}"
            ) from None
    with database.session(readonly=True) as s:
        _check_study(s, job_id, study_id, team)
        total, rows = repository.study_trial_page(
            s,
            study_id,
            sort=repository.TrialSort(sort),
            descending=order == "desc",
            outcome=chosen,
            limit=limit,
            offset=offset,
        )
        items = tuple(_trial_view(t) for t in rows)
    return TrialPage(study_id, items, total, limit, offset, f"{sort} {order}")


def _violation(
    spec: KernelSpec, config: dict[str, Any], limits: dict[str, Any] | None
) -> str | None:
    """Why ``config`` is outside ``spec``'s space on a class of ``limits`` (as the class row stores
    them), or None (valid, or the limits are not known)."""
    if not limits:
        return None
    try:
        known = DeviceLimits(**{**limits, "vendor": Vendor(limits["vendor"])})
    except (TypeError, KeyError, ValueError):
        return None
    violation = spec.space.violation(config, known)
    return str(violation) if violation is not None else None


def portability(
    database: Database,
    *,
    kernel: str,
    problem: str | Mapping[str, Any] | None = None,
    objective: Objective | str = Objective.KERNEL,
) -> PortabilityMatrix:
    """For the installed version of ``kernel`` on ``problem``: each class's winner (its stored
    best config, else its fastest ``ok`` trial) and what that config measured on every other
    class, from trials on both (warm start measures other classes' winners). Times are trial
    medians on both sides, so the diagonal is 0. Without ``problem``: the first with trials."""
    try:
        spec = get_spec(kernel)
    except SpecError as exc:
        raise NotFound(str(exc)) from None
    try:
        chosen = Objective(objective)
    except ValueError:
        raise InvalidRequest(f"unknown objective {objective!r}; choose kernel or graph") from None
    with database.session(readonly=True) as s:
        kernel_ids = repository.kernel_ids(s, spec.name, spec.version_hash())
        keys = repository.ok_problem_keys(s, kernel_ids, chosen)
        if problem is None:
            key = keys[0] if keys else None
        else:
            parsed = (
                spec.parse_problem(problem)
                if isinstance(problem, str)
                else spec.validate_problem(problem)
            )
            key = problem_key(parsed)
        # class -> config key -> (fastest ok time, else None) and its outcomes
        seen: dict[str, dict[str, tuple[float | None, str]]] = {}
        best: dict[str, dict[str, Any]] = {}
        limits: dict[str, dict[str, Any] | None] = {}
        if key is not None:
            rows = repository.verdicts_by_class(s, kernel_ids, chosen, key)
            for class_key, ckey, outcome, fastest in rows:
                per = seen.setdefault(class_key, {})
                if outcome is TrialOutcome.OK and fastest is not None:
                    old = per.get(ckey, (None, ""))[0]
                    per[ckey] = (fastest if old is None else min(old, fastest), outcome.value)
                    if class_key not in best or fastest < best[class_key]["time_ms"]:
                        best[class_key] = {"config_key": ckey, "time_ms": fastest}
                elif ckey not in per:
                    per[ckey] = (None, outcome.value)
            # A class's stored best config (promoted after re-timing) is its winner where there
            # is one; else its fastest trial (a job still running).
            stored = repository.get_best(
                s, spec.name, key, None, spec.version_hash(), objective=chosen
            )
            for record in sorted(stored, key=lambda r: -r.time_ms):
                ckey = config_key(record.config)
                own = seen.get(record.device_class_key, {}).get(ckey, (None, ""))[0]
                if own is not None:
                    best[record.device_class_key] = {"config_key": ckey, "time_ms": own}
            limits = {
                class_key: found.limits
                for class_key, found in repository.device_classes_by_key(s, list(best)).items()
            }
            for class_key, entry in best.items():
                entry["config"] = repository.config_of(
                    s, kernel_ids, chosen, key, class_key, entry["config_key"]
                )
    classes = tuple(sorted(best))
    cells = []
    for source in classes:
        wanted = best[source]["config_key"]
        for target in classes:
            own = best[target]["time_ms"]
            time_ms, outcome_value = seen[target].get(wanted, (None, ""))
            note = None
            if outcome_value and time_ms is None:
                note = f"{outcome_value} on {target}"
            elif time_ms is None:
                broken = _violation(spec, best[source]["config"], limits.get(target))
                note = f"not valid on {target}: {broken}" if broken else f"not measured on {target}"
            loss = (time_ms / own - 1.0) * 100.0 if time_ms is not None else None
            cells.append(PortabilityCell(source, target, time_ms, own, loss, note))
    for entry in best.values():
        del entry["config_key"]
    return PortabilityMatrix(
        kernel=spec.name,
        objective=chosen,
        problem=json.loads(key) if key is not None else None,
        problems=tuple(json.loads(k) for k in keys),
        classes=classes,
        best=best,
        cells=tuple(cells),
    )
