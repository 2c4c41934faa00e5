"""Thin Optuna adapter: one persisted study per (kernel version, problem, device class) of a job.

Encoding (optimizer-neutral space -> Optuna distributions): ordered parameters (INT, POW2) become
an ``IntDistribution`` over the index of their value list, so samplers see the order (a list of
powers of two is already log-spaced in its index); BOOL and CATEGORICAL parameters become
categorical, except under CMA-ES, which needs numbers: there every parameter is an index.

Told states: an ``ok`` trial is COMPLETE with its median time (ms, minimized); a config that breaks
a constraint or did not produce a valid time is PRUNED, which TPE counts among the bad trials
(a FAIL would teach it nothing). Trials a dead driver left RUNNING are failed by :meth:`fail_stale`.

Storage: Optuna's RDB storage on the job database's URL. Our tables carry a ``tf_`` prefix so they
do not collide with Optuna's; on SQLite only the driver writes (Ray workers never touch the
database), so one file holds both without the cross-process writes Optuna's FAQ warns about.
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Mapping
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution
from optuna.samplers import BaseSampler
from optuna.trial import Trial, TrialState

from orchestrator.jobs import Sampler
from search_spaces.space import Config, DeviceLimits, Param, Space, Value


def study_name(kernel: str, version: str, problem_key: str, class_key: str, job_id: int) -> str:
    """Deterministic Optuna study name, so ``resume`` reattaches to the same study."""
    digest = hashlib.sha256(f"{problem_key}|{class_key}".encode()).hexdigest()[:16]
    return f"tunefleet/{kernel}/{version}/job-{job_id}/{digest}"


def storage_for(url: str) -> optuna.storages.RDBStorage:
    """Optuna RDB storage on ``url`` (our SQLAlchemy URL, e.g. ``sqlite:///...``, ``postgresql+psycopg://``)."""
    kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        kwargs = {"connect_args": {"timeout": 60}}
    else:
        kwargs = {"pool_pre_ping": True}
    return optuna.storages.RDBStorage(url, engine_kwargs=kwargs)


class Encoding:
    """Maps configs of a space (on one vendor) to Optuna params and back."""

    def __init__(self, space: Space, limits: DeviceLimits, *, numeric_only: bool) -> None:
        self.params: tuple[Param, ...] = space.params_for(limits.vendor)
        self._indexed = {p.name: numeric_only or p.kind.ordered for p in self.params}

    def distributions(self) -> dict[str, BaseDistribution]:
        out: dict[str, BaseDistribution] = {}
        for p in self.params:
            if self._indexed[p.name]:
                out[p.name] = IntDistribution(0, len(p.values) - 1)
            else:
                out[p.name] = CategoricalDistribution(list(p.values))
        return out

    def grid(self) -> dict[str, list[Any]]:
        """Every encoded value of every parameter (for the grid sampler)."""
        return {
            p.name: list(range(len(p.values))) if self._indexed[p.name] else list(p.values)
            for p in self.params
        }

    def decode(self, params: Mapping[str, Any]) -> Config:
        config: Config = {}
        for p in self.params:
            raw = params[p.name]
            config[p.name] = p.values[int(raw)] if self._indexed[p.name] else raw
        return config

    def encode(self, config: Mapping[str, Value]) -> dict[str, Any] | None:
        """Optuna params for ``config``, or None if it has a value outside the space."""
        out: dict[str, Any] = {}
        for p in self.params:
            value = config.get(p.name)
            if value not in p.values or type(value) is not type(p.values[0]):
                return None
            out[p.name] = p.values.index(value) if self._indexed[p.name] else value
        return out


def startup_trials(budget: int) -> int:
    """Random trials before a model-based sampler takes over: a quarter of the budget, 3 to 10."""
    return max(3, min(10, budget // 4))


def make_sampler(sampler: Sampler, seed: int, budget: int, encoding: Encoding) -> BaseSampler:
    """The Optuna sampler for ``sampler``; startup (random) trials scale with the budget."""
    startup = startup_trials(budget)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if sampler is Sampler.TPE:
            return optuna.samplers.TPESampler(
                seed=seed, multivariate=True, constant_liar=True, n_startup_trials=startup
            )
        if sampler is Sampler.GP:
            return optuna.samplers.GPSampler(seed=seed, n_startup_trials=startup)
        if sampler is Sampler.RANDOM:
            return optuna.samplers.RandomSampler(seed=seed)
        if sampler is Sampler.GRID:
            return optuna.samplers.GridSampler(encoding.grid(), seed=seed)
        return optuna.samplers.CmaEsSampler(seed=seed, n_startup_trials=startup)


class SearchStudy:
    """Ask/tell over one Optuna study, speaking configs of the space instead of Optuna params."""

    def __init__(self, study: optuna.Study, encoding: Encoding) -> None:
        self.study = study
        self.encoding = encoding
        self._distributions = encoding.distributions()

    @classmethod
    def open(
        cls,
        storage: optuna.storages.BaseStorage,
        name: str,
        space: Space,
        limits: DeviceLimits,
        sampler: Sampler,
        seed: int,
        budget: int,
    ) -> SearchStudy:
        """Create the study ``name`` or reattach to it (the sampler is rebuilt from the seed)."""
        encoding = Encoding(space, limits, numeric_only=sampler is Sampler.CMAES)
        study = optuna.create_study(
            storage=storage,
            study_name=name,
            direction="minimize",
            sampler=make_sampler(sampler, seed, budget, encoding),
            load_if_exists=True,
        )
        return cls(study, encoding)

    @property
    def is_new(self) -> bool:
        """True when no trial was ever asked or enqueued in this study."""
        return not self.study.get_trials(deepcopy=False)

    def enqueue(self, config: Mapping[str, Value]) -> bool:
        """Queue ``config`` to be asked next (warm start); False if it is outside the space."""
        params = self.encoding.encode(config)
        if params is None:
            return False
        self.study.enqueue_trial(params, skip_if_exists=True)
        return True

    def ask(self) -> tuple[Trial, Config]:
        """The next trial and its config (enqueued configs come first)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trial = self.study.ask(fixed_distributions=self._distributions)
        return trial, self.encoding.decode(trial.params)

    def tell_ok(self, trial: Trial, time_ms: float) -> None:
        self.study.tell(trial, time_ms)

    def tell_bad(self, trial: Trial, reason: str) -> None:
        """Tell a config without a valid time (constraint, crash, wrong result) as PRUNED."""
        trial.set_user_attr("reason", reason[:200])
        self.study.tell(trial, state=TrialState.PRUNED)

    def fail_stale(self) -> int:
        """Fail the trials a dead driver left RUNNING (Optuna's heartbeat does not cover ask/tell)."""
        storage = self.study._storage
        stale = self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        for t in stale:
            storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
        return len(stale)
