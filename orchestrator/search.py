"""Thin Optuna adapter: one study per (kernel version, problem, device class) of a job.

Encoding (optimizer-neutral space -> Optuna distributions): ordered parameters (INT, POW2) become
an ``IntDistribution`` over the index of their value list, so samplers see the order (a list of
powers of two is already log-spaced in its index); BOOL and CATEGORICAL parameters become
categorical, except under CMA-ES, which needs numbers: there every parameter is an index.

Samplers (``make_sampler``): ``local`` (the default: random startup, then unasked neighbours of the
best measured configs, constraint-breaking moves repaired, chosen by an additive model — see
:class:`LocalSearchSampler` and issue 4's results, benchmarks/results/search/TABLE.md), Optuna's TPE
(multivariate, constant liar), GP, random, grid and CMA-ES.

Told states: an ``ok`` trial is COMPLETE with its median time (ms, minimized); a config that breaks
a constraint or did not produce a valid time is PRUNED, which TPE counts among the bad trials
(a FAIL would teach it nothing).

Storage: Optuna's in-memory storage. The database's trial rows are the record: a resumed job
rebuilds each study from them (:meth:`SearchStudy.add_history`). With Optuna's RDB storage the
driver managed 20 trials/s on replayed trials, in memory 404 (benchmarks/results/cpu/
driver_throughput.txt); on two H200s it had capped a job near 10 trials/s
(benchmarks/results/h200/scaling/). Constraint-rejected asks are not rebuilt: asked again after a
resume, they are rejected again for free.
"""

from __future__ import annotations

import functools
import hashlib
import random
import warnings
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution
from optuna.samplers import BaseSampler, RandomSampler
from optuna.study import Study
from optuna.trial import FrozenTrial, Trial, TrialState

from orchestrator.jobs import Sampler
from search_spaces.space import Config, DeviceLimits, Param, Space, Value, config_key


def study_name(kernel: str, version: str, problem_key: str, class_key: str, job_id: int) -> str:
    """Deterministic Optuna study name, so ``resume`` reattaches to the same study."""
    digest = hashlib.sha256(f"{problem_key}|{class_key}".encode()).hexdigest()[:16]
    return f"tunefleet/{kernel}/{version}/job-{job_id}/{digest}"


class Encoding:
    """Maps configs of a space (on one vendor) to Optuna params and back."""

    def __init__(self, space: Space, limits: DeviceLimits, *, numeric_only: bool) -> None:
        self.space, self.limits = space, limits
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

    def valid_params(self) -> list[dict[str, Any]]:
        """The Optuna params of every valid config of the space on the device."""
        out = (self.encode(c) for c in valid_configs(self.space, self.limits))
        return [p for p in out if p is not None]

    def encode(self, config: Mapping[str, Value]) -> dict[str, Any] | None:
        """Optuna params for ``config``, or None if it has a value outside the space."""
        out: dict[str, Any] = {}
        for p in self.params:
            value = config.get(p.name)
            if value not in p.values or type(value) is not type(p.values[0]):
                return None
            out[p.name] = p.values.index(value) if self._indexed[p.name] else value
        return out


#: Suggestions in a row that needed no new measurement (known or constraint-breaking configs)
#: before a study draws an unmeasured valid config at random; after its first draw, the shorter.
IDLE_LIMIT = 100
IDLE_LIMIT_AFTER_DRAW = 10


def startup_trials(budget: int) -> int:
    """Random trials before a model-based sampler takes over: a quarter of the budget, 3 to 10."""
    return max(3, min(10, budget // 4))


@functools.lru_cache(maxsize=16)
def valid_configs(space: Space, limits: DeviceLimits) -> tuple[Config, ...]:
    """Every valid config of ``space`` on ``limits`` (cached: do not mutate them)."""
    return tuple(space.iter_valid(limits))


#: Configs whose unasked neighbours ``local`` weighs against each other (the best ones with any).
LOCAL_PARENTS = 2
#: Ridge penalty of ``local``'s model (per one-hot coefficient, on centred log times).
LOCAL_RIDGE = 1.0


class LocalSearchSampler(BaseSampler):
    """Random startup, then an unasked neighbour of the best measured configs.

    A neighbour moves one parameter one index step (a categorical: to any other value). Given
    the space's valid points (``valid``, Optuna params), a move that breaks a constraint is
    repaired: the neighbour is the valid point with the moved value nearest to the config (fewest
    index steps in the other parameters; every tie), so coupled parameters move together (a
    larger BLOCK_K with fewer stages, split-K with the BLOCK_M and GROUP_M it allows) instead of
    the move being rejected. Among the unasked neighbours of the ``LOCAL_PARENTS`` best configs
    that have any, the one predicted fastest is asked: its parent's measured log time plus the
    change an additive model (ridge over one-hot parameter values, fitted to the measured log
    times) predicts for the move; ties are broken at random. A second parent keeps a plateau of
    near-equal configs around the best from hiding a nearby better region. Random when every
    neighbour is known. Asked-but-pending configs count as known."""

    def __init__(
        self,
        distributions: Mapping[str, BaseDistribution],
        seed: int,
        startup: int,
        valid: Callable[[], Iterable[Mapping[str, Any]]] | None = None,
    ) -> None:
        """``valid`` returns the space's valid points; it is called once, when first needed."""
        self._distributions = dict(distributions)
        self._names = list(self._distributions)
        self._rng = random.Random(seed)
        self._random = RandomSampler(seed=seed)
        self._startup = startup
        self._load_valid = valid
        self._valid: np.ndarray | None = None  # valid points as index positions, one per row
        self._sizes = [_size(d) for d in self._distributions.values()]
        self._offsets = np.cumsum([0, *self._sizes[:-1]])
        self._ordered = np.array(
            [isinstance(d, IntDistribution) for d in self._distributions.values()]
        )
        self._neighbour_cache: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
        self._model: tuple[int, np.ndarray] = (-1, np.zeros(sum(self._sizes)))
        self._positions: dict[int, tuple[int, ...]] = {}

    def infer_relative_search_space(
        self, study: Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        return dict(self._distributions)

    def _position(self, params: Mapping[str, Any]) -> tuple[int, ...] | None:
        """Index of each parameter's value (None if one is missing)."""
        out = []
        for name, dist in self._distributions.items():
            if name not in params:
                return None
            if isinstance(dist, CategoricalDistribution):
                out.append(dist.choices.index(params[name]))
            else:
                out.append(int(params[name]) - int(getattr(dist, "low", 0)))
        return tuple(out)

    def _params(self, position: Sequence[int]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for (name, dist), i in zip(self._distributions.items(), position, strict=True):
            if isinstance(dist, CategoricalDistribution):
                out[name] = dist.choices[i]
            else:
                out[name] = int(getattr(dist, "low", 0)) + int(i)
        return out

    def _trial_position(self, trial: FrozenTrial) -> tuple[int, ...] | None:
        """:meth:`_position` of a trial's params (cached once complete: fixed once asked; a
        queued trial has none yet)."""
        x = self._positions.get(trial.number)
        if x is None:
            x = self._position(trial.params)
            if x is not None:
                self._positions[trial.number] = x
        return x

    def _neighbours(self, x: tuple[int, ...]) -> list[tuple[int, ...]]:
        if x in self._neighbour_cache:
            return self._neighbour_cache[x]
        moves = [
            (j, v)
            for j, size in enumerate(self._sizes)
            for v in ((x[j] - 1, x[j] + 1) if self._ordered[j] else range(size))
            if 0 <= v < size and v != x[j]
        ]
        out: list[tuple[int, ...]] = []
        if self._valid is None:
            out = [(*x[:j], v, *x[j + 1 :]) for j, v in moves]
        else:
            points = self._valid
            steps = np.where(self._ordered, np.abs(points - np.array(x)), points != np.array(x))
            total = steps.sum(axis=1)
            for j, v in moves:
                moved = points[:, j] == v
                others = (total - steps[:, j])[moved]
                if others.size:
                    nearest = points[moved][others == others.min()]
                    out.extend(tuple(int(i) for i in row) for row in nearest)
        out = list(dict.fromkeys(out))
        self._neighbour_cache[x] = out
        return out

    def _fit(self, done: Sequence[tuple[tuple[int, ...], float]]) -> np.ndarray:
        """Ridge coefficients per one-hot parameter value for the measured log times (cached by
        how many configs were measured)."""
        if self._model[0] == len(done):
            return self._model[1]
        features = np.zeros((len(done), sum(self._sizes)))
        rows = np.arange(len(done))
        positions = np.array([x for x, _ in done])
        for j, offset in enumerate(self._offsets):
            features[rows, offset + positions[:, j]] = 1.0
        logs = np.log([max(v, 1e-300) for _, v in done])
        gram = features.T @ features + LOCAL_RIDGE * np.eye(features.shape[1])
        coef = np.linalg.solve(gram, features.T @ (logs - logs.mean()))
        self._model = (len(done), coef)
        return coef

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        trials = study.get_trials(deepcopy=False)
        done = []
        for t in trials:
            if t.state is TrialState.COMPLETE and t.value is not None:
                x = self._trial_position(t)
                if x is not None:
                    done.append((x, float(t.value)))
        if len(done) < self._startup:
            return {}
        if self._valid is None and self._load_valid is not None:
            points = [self._position(p) for p in self._load_valid()]
            valid = np.array([x for x in points if x is not None], dtype=np.int64)
            self._valid = valid.reshape(-1, len(self._names))
        seen = {self._trial_position(t) for t in trials if t.number != trial.number}
        coef = self._fit(done)
        best: tuple[float, tuple[int, ...]] | None = None
        parents = 0
        for x, value in sorted(done, key=lambda xv: xv[1]):
            unseen = [y for y in self._neighbours(x) if y not in seen]
            if not unseen:
                continue
            self._rng.shuffle(unseen)
            base = np.log(max(value, 1e-300)) - self._predict(coef, x)
            for y in unseen:
                score = base + self._predict(coef, y)
                if best is None or score < best[0]:
                    best = (score, y)
            parents += 1
            if parents == LOCAL_PARENTS:
                break
        return {} if best is None else self._params(best[1])

    def _predict(self, coef: np.ndarray, x: Sequence[int]) -> float:
        return float(coef[self._offsets + np.asarray(x)].sum())

    def sample_independent(
        self,
        study: Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        return self._random.sample_independent(study, trial, param_name, param_distribution)


def _size(dist: BaseDistribution) -> int:
    if isinstance(dist, IntDistribution):
        return dist.high - dist.low + 1
    return len(getattr(dist, "choices", ()))


class AskTellGridSampler(optuna.samplers.GridSampler):
    """Optuna's GridSampler without its stop request once the grid is used up: ``Study.stop``
    raises outside ``optimize``, and the driver ends a study itself when every valid config is
    known."""

    def after_trial(
        self,
        study: Study,
        trial: FrozenTrial,
        state: TrialState,
        values: Sequence[float] | None,
    ) -> None:
        return None


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
            return AskTellGridSampler(encoding.grid(), seed=seed)
        if sampler is Sampler.LOCAL:
            return LocalSearchSampler(
                encoding.distributions(), seed, startup, encoding.valid_params
            )
        return optuna.samplers.CmaEsSampler(seed=seed, n_startup_trials=startup)


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

    @classmethod
    def create(
        cls,
        name: str,
        space: Space,
        limits: DeviceLimits,
        sampler: Sampler,
        seed: int,
        budget: int,
    ) -> SearchStudy:
        """A new in-memory study ``name`` whose sampler is built from ``seed``."""
        encoding = Encoding(space, limits, numeric_only=sampler is Sampler.CMAES)
        study = optuna.create_study(
            study_name=name,
            direction="minimize",
            sampler=make_sampler(sampler, seed, budget, encoding),
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

    def enqueue(self, config: Mapping[str, Value]) -> bool:
        """Queue ``config`` to be asked next (warm start); False if it is outside the space."""
        params = self.encoding.encode(config)
        if params is None:
            return False
        self.study.enqueue_trial(params, skip_if_exists=True)
        return True

    def note(self, *, new: bool) -> None:
        """Count one ask: ``new`` when it brought a config to measure, else it was idle."""
        self.idle = 0 if new else self.idle + 1

    def unstick(self, *known: Collection[str]) -> bool:
        """After ``IDLE_LIMIT`` idle asks in a row (``IDLE_LIMIT_AFTER_DRAW`` once it has drawn),
        queue a valid config whose key is in none of ``known``, drawn at random; False only when
        stalled with every valid config known. TPE and GP keep proposing known or invalid configs
        on sparse spaces (benchmarks/results/search/); this keeps such a study spending its
        budget."""
        if self.idle < (IDLE_LIMIT if self.drawn == 0 else IDLE_LIMIT_AFTER_DRAW):
            return True
        if self._valid is None:
            enc = self.encoding
            self._valid = [(config_key(c), c) for c in valid_configs(enc.space, enc.limits)]
        unseen = [c for key, c in self._valid if not any(key in k for k in known)]
        if not unseen:
            return False
        self.enqueue(self._rng.choice(unseen))
        self.drawn += 1
        self.idle = 0
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
