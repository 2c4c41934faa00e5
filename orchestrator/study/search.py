"""Thin Optuna adapter: one study per (kernel version, problem, device class) of a job.

:class:`SearchStudy` speaks configs of the space to an Optuna study whose sampler comes from the
registry (:mod:`orchestrator.study.samplers`; the encoding in :mod:`orchestrator.study.encoding`).

Told states: an ``ok`` trial is COMPLETE with its median time (ms, minimized); a config that breaks
a constraint or did not produce a valid time is PRUNED, which TPE counts among the bad trials
(a FAIL would teach it nothing).

Storage: Optuna's in-memory storage. The database's trial rows are the record: a resumed job
rebuilds each study from them (:meth:`SearchStudy.add_history`). With Optuna's RDB storage the
driver managed 20 trials/s on replayed trials, in memory 404
(benchmarks/results/driver_throughput/2026-11-30-08e6ee2-cpu/); on two H200s it had capped a job
near 10 trials/s (benchmarks/results/scaling/2026-11-30-08e6ee2-h200x2/). Constraint-rejected
asks are not rebuilt: asked again after a resume, they are rejected again for free. Tells go
through Optuna's ``_tell_with_warning``: ``Study.tell`` without the deep copy of the told trial
that ``tell`` returns (a fifth of a driver's time when most asks are rejected configs). An ask of
a sampler that gives every parameter at once (:class:`~orchestrator.study.samplers.WholeTrialSampler`:
``local``, ``learned``) with no queued trial creates the trial with every parameter in one
storage write (its ``sample_trial`` gives them as Optuna's ask would), not one
suggest per parameter (each a copy of the trial and distribution checks in Optuna). Enqueued
configs wait in the adapter's own queue and are asked first, each created as a trial with its
params in one storage write: Optuna keeps them as waiting trials, which its ask finds by scanning
every trial of the study and its enqueue writes with a deep copy (a sixth of a server's Python
time in the fleet simulation, where every new job warm-starts its studies). An enqueue skips
params that a trial of the study or the queue already has, as Optuna's ``skip_if_exists`` does,
from a set of the trials' params kept up to date incrementally: Optuna compares each enqueue with
every trial (``numpy.isclose`` per parameter), which made a warm start of a few hundred configs
take tens of seconds of CPU.
"""

from __future__ import annotations

import hashlib
import random
import warnings
from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.study._tell import _tell_with_warning
from optuna.trial import FrozenTrial, Trial, TrialState

from orchestrator.study import samplers
from orchestrator.study.encoding import Encoding, valid_configs
from orchestrator.study.samplers import WholeTrialSampler, gives_whole_trials
from search_spaces.space import Config, DeviceLimits, Space, Value, config_key
from search_spaces.spec import KernelSpec

if TYPE_CHECKING:
    from orchestrator.study.samplers.learned import PriorTrial


def study_name(kernel: str, version: str, problem_key: str, class_key: str, job_id: int) -> str:
    """Deterministic Optuna study name, so ``resume`` reattaches to the same study."""
    digest = hashlib.sha256(f"{problem_key}|{class_key}".encode()).hexdigest()[:16]
    return f"tunefleet/{kernel}/{version}/job-{job_id}/{digest}"


#: Suggestions in a row that needed no new measurement (known or constraint-breaking configs)
#: before a study draws an unmeasured valid config at random; after its first draw, the shorter.
IDLE_LIMIT = 100
IDLE_LIMIT_AFTER_DRAW = 10


class _Running(FrozenTrial):
    """A new trial's template whose deep copy (the storage copies the template it creates a
    trial from) is a plain :class:`FrozenTrial` with its own containers that shares the param
    values (numbers, strings, booleans) and the distribution objects, as Optuna's own suggest
    does (it stores the very objects it is given): the generic deep copy was most of the cost
    of creating a trial."""

    def __deepcopy__(self, memo: dict[int, object]) -> FrozenTrial:
        return FrozenTrial(
            number=self.number,
            state=self.state,
            value=None,
            datetime_start=self.datetime_start,
            datetime_complete=None,
            params=dict(self.params),
            distributions=dict(self.distributions),
            user_attrs={},
            system_attrs={},
            intermediate_values={},
            trial_id=self._trial_id,
        )


def _running(params: dict[str, Any], distributions: Mapping[str, BaseDistribution]) -> _Running:
    """A RUNNING trial with ``params`` (from ``distributions``), not in a study yet."""
    return _Running(
        number=-1,
        state=TrialState.RUNNING,
        value=None,
        datetime_start=datetime.now(),
        datetime_complete=None,
        params=params,
        distributions=dict(distributions),
        user_attrs={},
        system_attrs={},
        intermediate_values={},
        trial_id=-1,
    )


def _params_key(params: Mapping[str, object]) -> tuple[tuple[str, object], ...]:
    """Hashable form of Optuna params, equal for equal params (names and values)."""
    return tuple(sorted(params.items()))


class SearchStudy:
    """Ask/tell over one Optuna study, speaking configs of the space instead of Optuna params."""

    def __init__(
        self, study: optuna.Study, encoding: Encoding, rng: random.Random | None = None
    ) -> None:
        """``rng`` draws the configs of :meth:`unstick` (default: seeded by the study's name)."""
        self.study = study
        self.encoding = encoding
        self._distributions = encoding.distributions()
        self.idle = 0  # asks in a row that brought no config to measure
        self.drawn = 0  # configs queued by unstick
        self._rng = rng or random.Random(study.study_name)
        self._valid: list[tuple[str, Config]] | None = None
        self._params_seen: set[tuple[tuple[str, object], ...]] = set()  # of the trials scanned
        self._queue: deque[dict[str, Any]] = deque()  # enqueued params, asked first, in order
        self._scanned = 0  # trials whose params are in ``_params_seen``

    @classmethod
    def create(
        cls,
        name: str,
        space: Space,
        limits: DeviceLimits,
        sampler: str,
        seed: int,
        budget: int,
        *,
        kernel: KernelSpec | None = None,
        problem: Mapping[str, object] | None = None,
        device_class: str | None = None,
        prior: Sequence[PriorTrial] = (),
    ) -> SearchStudy:
        """A new in-memory study ``name`` with the registered ``sampler`` built from ``seed``
        and the study's context (``prior``: for a sampler that learns from the database's
        trials; raises JobSpecError for an unknown sampler)."""
        entry = samplers.get(sampler)
        encoding = entry.encoding(space, limits)
        context = samplers.SamplerContext(
            seed, budget, encoding, kernel, dict(problem or {}), device_class, tuple(prior)
        )
        study = optuna.create_study(
            study_name=name, direction="minimize", sampler=entry.make(context)
        )
        return cls(study, encoding)

    def add_history(self, config: Mapping[str, Value], time_ms: float | None) -> bool:
        """Teach the study a config measured earlier (``time_ms`` None: no valid time); False if
        the config is outside the space."""
        params = self.encoding.encode(config)
        if params is None:
            return False
        state = TrialState.COMPLETE if time_ms is not None else TrialState.PRUNED
        self.study.add_trial(
            optuna.trial.create_trial(
                params=params, distributions=self._distributions, value=time_ms, state=state
            )
        )
        return True

    def share(self, trials: Sequence[PriorTrial]) -> None:
        """Give the sampler trials measured since the study began on other problems or device
        classes (:func:`orchestrator.study.samplers.share`; a sampler without a prior ignores them)."""
        samplers.share(self.study.sampler, trials)

    def enqueue(self, config: Mapping[str, Value]) -> bool:
        """Queue ``config`` to be asked after the configs queued before it, ahead of the sampler
        (warm start), unless a trial of the study (asked, told or from history) or a queued
        config already has its params; False if it is outside the space."""
        params = self.encoding.encode(config)
        if params is None:
            return False
        # The storage's trials only grow, and a trial's params are final once ``ask`` or
        # ``add_trial`` returns: scan the new ones only.
        trials = self.study.get_trials(deepcopy=False)
        for trial in trials[self._scanned :]:
            self._params_seen.add(_params_key(trial.params))
        self._scanned = len(trials)
        key = _params_key(params)
        if key not in self._params_seen:
            self._queue.append(params)
            self._params_seen.add(key)
        return True

    @property
    def queued(self) -> int:
        """Configs enqueued and not asked yet."""
        return len(self._queue)

    def note(self, *, new: bool) -> None:
        """Count one ask: ``new`` when it brought a config to measure, else it was idle."""
        self.idle = 0 if new else self.idle + 1

    def unstick(
        self, *known: Collection[str], equivalent: Callable[[Config], Config] | None = None
    ) -> bool:
        """After ``IDLE_LIMIT`` idle asks in a row (``IDLE_LIMIT_AFTER_DRAW`` once it has drawn),
        queue a valid config whose key is in none of ``known``, drawn at random (among the
        representatives of ``equivalent``, the same on every call); False only when stalled with
        every valid config known, or at once when the sampler says it asked every one
        (:func:`~orchestrator.study.samplers.asked_every_config`). TPE and GP keep proposing known or
        invalid configs on sparse spaces (benchmarks/results/search/); this keeps such a study
        spending its budget."""
        if samplers.asked_every_config(self.study.sampler):
            return False
        if self.idle < (IDLE_LIMIT if self.drawn == 0 else IDLE_LIMIT_AFTER_DRAW):
            return True
        if self._valid is None:
            enc = self.encoding
            configs = valid_configs(enc.space, enc.limits)
            if equivalent is not None:
                configs = tuple(map(equivalent, configs))
            self._valid = list({config_key(c): c for c in configs}.items())
        unseen = [c for key, c in self._valid if not any(key in k for k in known)]
        if not unseen:
            return False
        self.enqueue(self._rng.choice(unseen))
        self.drawn += 1
        self.idle = 0
        return True

    def ask(self) -> tuple[Trial, Config]:
        """The next trial and its config (enqueued configs come first)."""
        if self._queue:
            params = self._queue.popleft()
            return self._create(params), self.encoding.decode(params)
        sampler = self.study.sampler
        if gives_whole_trials(sampler):
            trial, params = self._ask_whole(sampler)
            return trial, self.encoding.decode(params)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trial = self.study.ask(fixed_distributions=self._distributions)
        return trial, self.encoding.decode(trial.params)

    def _ask_whole(self, sampler: WholeTrialSampler) -> tuple[Trial, dict[str, Any]]:
        """``study.ask`` for a sampler that gives every parameter at once: the trial is
        created with its params (one storage write, as ``add_trial`` does) instead of one
        suggest per parameter; the trial and its params (not to be changed)."""
        params = sampler.sample_trial(self.study, _running({}, {}))
        return self._create(params), params

    def _create(self, params: dict[str, Any]) -> Trial:
        """A new RUNNING trial of the study with ``params`` (Optuna params of every parameter),
        in one storage write."""
        template = _running(params, self._distributions)
        trial_id = self.study._storage.create_new_trial(
            self.study._study_id, template_trial=template
        )
        return optuna.Trial(self.study, trial_id)

    def tell_ok(self, trial: Trial, time_ms: float) -> None:
        _tell_with_warning(self.study, trial, time_ms, TrialState.COMPLETE)

    def tell_bad(self, trial: Trial, reason: str) -> None:
        """Tell a config without a valid time (constraint, crash, wrong result) as PRUNED."""
        trial.set_user_attr("reason", reason[:200])
        _tell_with_warning(self.study, trial, None, TrialState.PRUNED)
