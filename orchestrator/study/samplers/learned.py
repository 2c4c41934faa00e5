"""``learned``: ``local``'s moves and a Gaussian-process cost model over config features, with a
prior from other problems.

The model (numpy only). Configs are featurized on the study's problem: each parameter's value
(log2 of a power of two, an int as it is, a flag 0/1, a categorical one-hot) plus the derived
quantities the spec exposes (:meth:`KernelSpec.features`: programs, k-steps, bytes per stage...),
each column scaled to [0, 1] over the valid configs. The log time of a config is modelled as

    log t(x) = c + a * mu0(x) + r(x),    r ~ GP(0, s^2 * Matern52(|x - x'| / l))

``mu0`` is the prior (:class:`Prior`): the trials of the same kernel version on other problems
and device classes (:class:`PriorTrial`; orchestrator/run/prior.py reads them from the database),
each problem's log times standardized and averaged per config with relevance weights
``exp(-distance)`` (L1 over log2 of the dims; another dtype or flag, or another device class,
adds a fixed distance), blended with a cost model (weighted ridge over the configs' one-hot
values, features and their squares, each prior trial featurized on its own problem), which is
all a config no prior problem measured gets. ``a`` and ``c`` are fitted to the study's own
trials (``a`` shrunk towards the prior problems' spread and never negative: a prior that the
study's measurements contradict fades out); ``l`` and ``s`` by maximum marginal likelihood.
Without a prior ``mu0 = 0``: a plain GP after ``STARTUP`` random valid configs.

Proposals, always a valid config no trial asked (pending ones included): with a prior, the first
batch probes the prior's best and the fastest config of each prior problem, nearest first, and
the spec's default follows. After that the sampler is a portfolio: every ``EI_EVERY``-th
proposal is the config of largest expected improvement over the best measured log time (among a
random subset of the unasked configs and all those within ``LOCAL_RADIUS`` index steps of the
fastest and of the fastest one in another region), the others are ``local``'s move
(:class:`~orchestrator.study.samplers.local.LocalSearchSampler`: the unasked neighbour of the best
configs that its additive model predicts fastest). The moves climb where the model's jumps stall,
the EI proposals jump where the model expects gains. Pending configs count as measured at their
predicted mean (kriging believer), so a batch spreads out. In a job, the trials of the study's
siblings are shared with it as they land (:meth:`LearnedSampler.share`): at its ``SHARE_FIRST``-th
config and each doubling, a prior fitted to them picks one config to measure next; the model keeps
its own prior. The prior is fitted once per study (first proposal); each EI pick refits only the
GP over at most ``MAX_TRAIN`` own trials (its length scale chosen again every ``REFIT_GROWTH``
growth of them) and scores at most ``MAX_CANDIDATES`` configs (benchmarks/learned_latency.py
measures it).
"""

from __future__ import annotations

import functools
import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler, RandomSampler
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

from orchestrator.study.encoding import Encoding, valid_configs
from orchestrator.study.samplers import one_blas_thread, whole_trial
from orchestrator.study.samplers.local import LocalSearchSampler
from search_spaces.problem import Problem
from search_spaces.space import Config, Param, ParamKind, Value, config_key

#: Derived features of a config on a problem (the spec's ``features`` hook).
FeatureHook = Callable[[Problem, Config], Mapping[str, float]]


@dataclass(frozen=True)
class PriorTrial:
    """One ``ok`` trial of the same kernel version elsewhere: its problem, device class key,
    config and time (ms, the study's objective)."""

    problem: Problem
    device_class: str
    config: Config
    time_ms: float


PriorTrials = Sequence[PriorTrial]

#: Distance added for each problem field other than a dim that differs (dtype, flags).
FIELD_DISTANCE = 2.0
#: Distance added for a trial measured on another device class.
CLASS_DISTANCE = 1.0
#: Ridge penalty of the prior's cost model, per unit of the most weight one trial has.
PRIOR_RIDGE = 1.0
#: Weight of that model against a config's own prior times, per unit of the most weight one
#: config has.
PRIOR_BLEND = 0.2
#: Configs a study with a prior measures first from :attr:`Prior.probes` (one batch of four);
#: the spec's default follows them.
PRIOR_PROBES = 4
#: Weight of the prior's slope ``a`` at its expected value, in own trials' worth.
PRIOR_SLOPE_WEIGHT = 3.0
#: Residual spread the GP assumes before the study measured anything, as a share of the prior
#: problems' spread of log times.
PRIOR_RESIDUAL = 0.5
#: Smallest residual spread the GP assumes, as a share of the prior problems' spread (1 without).
RESIDUAL_FLOOR = 0.05
#: GP length scales tried by marginal likelihood (features in [0, 1]).
LENGTHS = (0.25, 0.5, 1.0, 2.0)
#: The length scale is chosen again once the own trials grew by this factor since it was chosen.
REFIT_GROWTH = 1.25
#: GP noise, as a share of its signal variance.
NUGGET = 1e-3
#: Own trials the GP is fitted to at most (the fastest half of them, the rest spread by rank).
MAX_TRAIN = 128
#: Valid configs scored per proposal at most (those near the best, then a random subset).
MAX_CANDIDATES = 512
#: Every EI_EVERY-th proposal (counting from the study's first) is the EI pick; the others are
#: ``local``'s moves (the EI pick where no move is left).
EI_EVERY = 5
#: The EI pick always scores the configs within LOCAL_RADIUS index steps of the LOCAL_PARENTS
#: fastest measured ones (none left there: the nearest unasked ones), so it also looks near the
#: best.
LOCAL_RADIUS = 2
LOCAL_PARENTS = 2
#: Each parent after the first is more than this many index steps from the parents before it
#: (0: the fastest ones, wherever they are), so a second basin keeps being climbed.
SPREAD_PARENTS = 6
#: Random valid configs before the model when there is no prior.
STARTUP = 4
#: A study given its siblings' trials (:meth:`LearnedSampler.share`) fits a prior with them for
#: its SHARE_FIRST-th config, then each time its configs double, where new ones came.
SHARE_FIRST = 8
#: Configs each such fit queues to measure next: its best, then each sibling problem's fastest,
#: nearest first (those the study has not asked).
SHARE_PROBES = 1
#: Shared trials a study keeps (the newest), as the database prior holds at most 10,000
#: (orchestrator.run.prior.PRIOR_LIMIT): a job's memory and each fit's time stay bounded.
SHARED_LIMIT = 10_000


def relevance(target: Problem, target_class: str, problem: Problem, device_class: str) -> float:
    """Weight of a trial on ``problem``/``device_class`` for a study of ``target``/``target_class``:
    ``exp(-distance)``, distance = L1 over log2 of the dims plus ``FIELD_DISTANCE`` per other
    differing field and ``CLASS_DISTANCE`` for another device class."""
    distance = 0.0 if device_class == target_class else CLASS_DISTANCE
    for name in set(target) | set(problem):
        a, b = target.get(name), problem.get(name)
        if _dim(a) and _dim(b):
            distance += abs(math.log2(int(a)) - math.log2(int(b)))  # type: ignore[arg-type]
        elif a != b:
            distance += FIELD_DISTANCE
    return math.exp(-distance)


def _dim(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


class Featurizer:
    """Config -> feature row on one problem, columns scaled to [0, 1] over ``reference`` configs."""

    def __init__(
        self,
        params: Sequence[Param],
        problem: Problem,
        hook: FeatureHook | None,
        reference: Sequence[Config],
    ) -> None:
        self.params, self.problem, self._hook = tuple(params), problem, hook
        self.configs = tuple(reference)
        derived = hook(problem, reference[0]) if hook and reference else {}
        self._derived = sorted(derived)
        raw = self._raw(reference)
        low, high = raw.min(axis=0), raw.max(axis=0)
        self._low = low
        self._span = np.where(high > low, high - low, 1.0)
        self.reference = (raw - low) / self._span  # the rows of ``reference``, scaled

    def _row(self, config: Config, problem: Problem) -> list[float]:
        row: list[float] = []
        for p in self.params:
            v = config[p.name]
            if p.kind is ParamKind.POW2:
                row.append(math.log2(int(v)))
            elif p.kind is ParamKind.INT:
                row.append(float(int(v)))
            elif p.kind is ParamKind.BOOL:
                row.append(float(bool(v)))
            else:
                row.extend(float(v == c) / math.sqrt(2) for c in p.values)
        if self._hook is not None and self._derived:
            extra = self._hook(problem, config)
            row.extend(float(extra[name]) for name in self._derived)
        return row

    def _raw(self, configs: Sequence[Config], problem: Problem | None = None) -> np.ndarray:
        on = self.problem if problem is None else problem
        width = len(self._row(configs[0], on)) if configs else 0
        rows = [self._row(c, on) for c in configs]
        return np.array(rows, dtype=float).reshape(len(configs), width)

    def matrix(self, configs: Sequence[Config], problem: Problem | None = None) -> np.ndarray:
        """Scaled feature rows of ``configs`` (each must hold every parameter, in the space), the
        derived features computed on ``problem`` (None: the featurizer's), scaled as the
        reference's (so another problem's rows may leave [0, 1])."""
        if not configs:
            return np.zeros((0, self._low.size))
        return (self._raw(configs, problem) - self._low) / self._span

    @functools.cached_property
    def reference_index(self) -> dict[tuple[Value, ...], int]:
        """Each reference config's parameter values, in ``params`` order -> its row."""
        names = [p.name for p in self.params]
        return {tuple(c[n] for n in names): i for i, c in enumerate(self.configs)}

    @functools.cached_property
    def reference_design(self) -> np.ndarray:
        """The prior's cost-model rows (:func:`_design`) of the reference configs."""
        return _design(self, self.configs, self.reference)

    def fits(self, config: Mapping[str, Value]) -> bool:
        """Whether ``config`` holds a value of the space for every parameter."""
        return all(config.get(p.name) in p.values for p in self.params)


def _sqdist(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    d = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2.0 * a @ b.T
    return np.maximum(d, 0.0)


def _matern52(sq: np.ndarray) -> np.ndarray:
    r = np.sqrt(5.0 * sq)
    return (1.0 + r + r * r / 3.0) * np.exp(-r)


def _norm_cdf(z: np.ndarray) -> np.ndarray:
    """Standard normal CDF (Abramowitz-Stegun 7.1.26, |error| < 1.5e-7)."""
    x = np.abs(z) / math.sqrt(2.0)
    t = 1.0 / (1.0 + 0.3275911 * x)
    poly = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    erf = 1.0 - poly * np.exp(-x * x)
    return 0.5 * (1.0 + np.sign(z) * erf)


def expected_improvement(mean: np.ndarray, sd: np.ndarray, best: float) -> np.ndarray:
    """EI of minimizing below ``best`` for normal predictions."""
    sd = np.maximum(sd, 1e-12)
    z = (best - mean) / sd
    pdf = np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
    return (best - mean) * _norm_cdf(z) + sd * pdf


@dataclass(frozen=True)
class Prior:
    """The prior fitted for one study: ``mu0`` per valid config (standardized log time, 0 = the
    prior problems' mean) and ``spread``, the relevance-weighted std of their log times."""

    mu0: np.ndarray
    spread: float
    #: Valid configs to measure first: the prior's best, then each prior problem's fastest,
    #: nearest problem first (distinct hypotheses for the first batch).
    probes: tuple[int, ...] = ()

    @staticmethod
    def fit(
        trials: PriorTrials,
        problem: Problem,
        device_class: str,
        featurizer: Featurizer,
    ) -> Prior | None:
        """The prior from ``trials`` for the featurizer's reference configs (the valid ones),
        or None when no prior problem has three usable trials.

        Each problem's log times are standardized; a config's prior value is the relevance-
        weighted mean of its standardized times, blended (``PRIOR_BLEND`` of the most weight one
        config has) with a cost model, which is all an unmeasured config gets: a weighted ridge
        model over :func:`_design` rows fitted to every usable trial, each featurized on its own
        problem (so the model learns how the derived features, such as programs and k-steps,
        relate to time across problems) and predicting on the study's."""
        names = [p.name for p in featurizer.params]
        index, size = featurizer.reference_index, len(featurizer.configs)
        groups: dict[tuple[str, str], list[PriorTrial]] = {}
        for t in trials:
            if t.time_ms > 0 and math.isfinite(t.time_ms) and featurizer.fits(t.config):
                groups.setdefault((config_key(t.problem), t.device_class), []).append(t)
        sums: dict[tuple[Value, ...], list[float]] = {}  # config values -> [weight, weight * z]
        spreads, weights, winners = [], [], []
        rows: list[np.ndarray] = []  # per usable trial: design row, weight, standardized time
        row_w: list[np.ndarray] = []
        row_z: list[np.ndarray] = []
        for group in groups.values():
            logs = np.log([t.time_ms for t in group])
            w = relevance(problem, device_class, group[0].problem, group[0].device_class)
            if len(group) < 3 or logs.std() <= 0 or w <= 0:
                continue
            spreads.append(float(logs.std()))
            weights.append(w)
            fastest = group[int(np.argmin(logs))].config
            winners.append((-w, index.get(tuple(fastest[n] for n in names))))
            zs = (logs - logs.mean()) / logs.std()
            for t, z in zip(group, zs, strict=True):
                entry = sums.setdefault(tuple(t.config[n] for n in names), [0.0, 0.0])
                entry[0] += w
                entry[1] += w * float(z)
            own = [t.config for t in group]
            rows.append(_design(featurizer, own, featurizer.matrix(own, group[0].problem)))
            row_w.append(np.full(len(group), w))
            row_z.append(zs)
        if not sums:
            return None
        x, w_trial, z_trial = np.vstack(rows), np.concatenate(row_w), np.concatenate(row_z)
        ridge = PRIOR_RIDGE * float(w_trial.max()) * np.eye(x.shape[1])
        coef = np.linalg.solve(x.T @ (x * w_trial[:, None]) + ridge, x.T @ (w_trial * z_trial))
        design = featurizer.reference_design
        w_cand, z_cand = np.zeros(size), np.zeros(size)
        for k, (w, wz) in sums.items():
            if k in index:
                w_cand[index[k]], z_cand[index[k]] = w, wz / w
        blend = PRIOR_BLEND * max(wz[0] for wz in sums.values())
        mu0 = (w_cand * z_cand + blend * (design @ coef)) / (w_cand + blend)
        ranked = [i for _, i in sorted(winners, key=lambda w: w[0]) if i is not None]
        probes = [int(np.argmin(mu0)), *ranked]
        return Prior(mu0, float(np.average(spreads, weights=weights)), tuple(dict.fromkeys(probes)))


def _design(featurizer: Featurizer, configs: Sequence[Config], scaled: np.ndarray) -> np.ndarray:
    """Rows for the prior's ridge model: an intercept, a one-hot column per parameter value, the
    configs' scaled feature rows ``scaled`` and their squares (so a feature's best value may lie
    inside its range)."""
    columns = [np.ones((len(configs), 1))]
    for p in featurizer.params:
        position = np.array([p.values.index(c[p.name]) for c in configs], dtype=int)
        columns.append(np.eye(len(p.values))[position].reshape(len(configs), len(p.values)))
    return np.hstack([*columns, scaled, scaled * scaled])


@dataclass(frozen=True)
class _Fit:
    """The model of one set of own trials: the GP's training configs, their residuals after the
    prior mean ``c + a * mu0`` and its kernel matrix's inverse, its inverse length scales and
    signal variance, and the best log time (None before any trial)."""

    train: np.ndarray
    resid: np.ndarray
    inverse: np.ndarray
    a: float
    c: float
    scales: np.ndarray
    var: float
    best: float | None


class LearnedSampler(BaseSampler):
    """Expected improvement under a GP over config features with a prior mean learned from
    other problems' trials (see the module docstring). Pending configs count as known."""

    def __init__(
        self,
        encoding: Encoding,
        seed: int,
        *,
        problem: Problem | None = None,
        device_class: str | None = None,
        features: FeatureHook | None = None,
        prior: PriorTrials = (),
        default: Config | None = None,
        startup: int = STARTUP,
    ) -> None:
        """``problem`` and ``device_class``: the study's (None: unknown; then the spec's
        ``features`` and the prior's relevance to the problem are not used, and the device
        class is the encoding's device name); ``prior``: trials of the same kernel version
        elsewhere (:mod:`orchestrator.run.prior` reads them from the database); ``default``: the
        spec's default config; with a prior it is measured right after the prior's probes.
        Numpy's BLAS runs on one thread in this process from then on."""
        one_blas_thread()
        self._encoding = encoding
        self._distributions = encoding.distributions()
        self._problem: Problem = dict(problem) if problem else {}
        self._class = device_class if device_class is not None else encoding.limits.name
        self._hook = features if problem else None
        self._prior_trials = prior
        self._default = dict(default) if default else None
        self._startup = startup
        self._rng = np.random.default_rng(seed)
        self._random = RandomSampler(seed=seed)
        self._ready = False
        self._keys: list[str] = []
        self._index: dict[str, int] = {}
        self._x = np.zeros((0, 0))
        self._prior: Prior | None = None
        self._trial_index: dict[int, int | None] = {}
        self._fitted: tuple[tuple[tuple[int, float], ...], _Fit] | None = None
        self._mu0 = np.zeros(0)  # the prior per valid config (0 without one)
        self._probes: tuple[int, ...] = ()  # configs measured first: the prior's, the default
        self._featurizer: Featurizer | None = None
        # the newest siblings' trials given by share(); how many were given, and how many
        # when the last shared prior was fitted
        self._shared: deque[PriorTrial] = deque(maxlen=SHARED_LIMIT)
        self._shared_count = self._fitted_shared = 0
        self._next_share = SHARE_FIRST  # the study's config that may fit the next shared prior
        self._share_probes: list[int] = []  # configs the shared priors queued, to measure next
        self._asked = 0
        self._every_config_asked = False  # found when an ask had no unasked config left
        self._near_cache: tuple[tuple[int, ...], np.ndarray] = ((), np.zeros(0, dtype=int))
        self._pos = np.zeros((0, 0), dtype=int)  # index of each parameter's value, per config
        self._length: tuple[int, float] | None = None  # own trials when last chosen, the length
        # local's moves (no startup of its own: this sampler's comes first), over the same
        # valid configs, as the process's shared array of their positions
        self._move = LocalSearchSampler(
            self._distributions, seed, 0, positions=encoding.valid_positions
        )

    def infer_relative_search_space(
        self, study: Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        return dict(self._distributions)

    def sample_trial(self, study: Study, trial: FrozenTrial) -> dict[str, Any]:
        """Every parameter of a new ``trial``, not in the study yet (a
        :class:`~orchestrator.study.samplers.WholeTrialSampler`: the study's ask then creates the
        trial in one storage write). Every trial of the study counts as another one's, so
        ``trial``'s number must be none of theirs."""
        return whole_trial(self, study, trial, self._distributions)

    def asked_every_config(self) -> bool:
        """Whether every valid config was asked (found when an ask had none left)."""
        return self._every_config_asked

    def share(self, trials: PriorTrials) -> None:
        """Add ``trials``: measured since the study began on other problems or device classes
        (its siblings in a job); the newest ``SHARED_LIMIT`` are kept. At the next checkpoint
        (the study's ``SHARE_FIRST``-th config, then each doubling of its configs) that finds
        new ones, a prior is fitted from the database prior and the shared trials, and up to
        ``SHARE_PROBES`` of its probes (:attr:`Prior.probes`) the study has not asked are
        measured next. The study's model keeps the prior it began with: fitted again with the
        siblings' few trials per problem, it found the 2% configs later
        (benchmarks/search_suite.py)."""
        self._shared.extend(trials)
        self._shared_count += len(trials)

    def _probe_shared(self, fresh: np.ndarray) -> None:
        """Queue the shared prior's probes not asked (``fresh``) nor queued."""
        self._fitted_shared = self._shared_count
        if self._featurizer is None:
            return
        prior = Prior.fit(
            [*self._prior_trials, *self._shared],
            self._problem,
            self._class,
            self._featurizer,
        )
        if prior is not None:
            queued = set(self._share_probes)
            new = [i for i in prior.probes if fresh[i] and i not in queued][:SHARE_PROBES]
            self._share_probes.extend(new)

    def _prepare(self) -> None:
        """Enumerate the valid configs, featurize them and fit the prior (once per study)."""
        configs = list(valid_configs(self._encoding.space, self._encoding.limits))
        self._configs, self._ready = configs, True
        if not configs:
            return
        self._keys = [config_key(c) for c in configs]
        self._index = {k: i for i, k in enumerate(self._keys)}
        self._pos = np.array(
            [[p.values.index(c[p.name]) for p in self._encoding.params] for c in configs], dtype=int
        ).reshape(len(configs), len(self._encoding.params))
        featurizer = Featurizer(self._encoding.params, self._problem, self._hook, configs)
        self._x, self._featurizer = featurizer.reference, featurizer
        if self._prior_trials:
            self._prior = Prior.fit(self._prior_trials, self._problem, self._class, featurizer)
        self._mu0 = self._prior.mu0 if self._prior is not None else np.zeros(len(configs))
        probes = self._prior.probes[:PRIOR_PROBES] if self._prior is not None else ()
        if self._prior is not None and self._default is not None and featurizer.fits(self._default):
            names = [p.name for p in self._encoding.params]
            found = self._index.get(config_key({n: self._default[n] for n in names}))
            probes = (*probes, found) if found is not None else probes
        self._probes = tuple(dict.fromkeys(probes))

    def _config_index(self, trial: FrozenTrial) -> int | None:
        """Index of the trial's config among the valid configs (None: not valid, or no params)."""
        if trial.number in self._trial_index:
            return self._trial_index[trial.number]
        if set(trial.params) != set(self._distributions):
            return None
        found = self._index.get(config_key(self._encoding.decode(trial.params)))
        self._trial_index[trial.number] = found  # a trial's params are fixed once asked
        return found

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        if not self._ready:
            self._prepare()
        if not self._keys:
            return {}
        seen: set[int] = set()
        done: dict[int, float] = {}
        pending: list[int] = []
        for t in study.get_trials(deepcopy=False):
            if t.number == trial.number:
                continue
            i = self._config_index(t)
            if i is None:
                continue
            seen.add(i)
            if t.state is TrialState.COMPLETE and t.value is not None and t.value > 0:
                done[i] = min(done.get(i, math.inf), float(t.value))
            elif t.state is TrialState.RUNNING:
                pending.append(i)
        fresh = np.ones(len(self._keys), dtype=bool)
        fresh[list(seen)] = False
        unseen = np.flatnonzero(fresh)
        if unseen.size == 0:
            self._every_config_asked = True
            return {}
        self._asked += 1
        if len(seen) + 1 >= self._next_share and self._shared_count > self._fitted_shared:
            self._next_share = 2 * (len(seen) + 1)
            self._probe_shared(fresh)
        self._share_probes = [i for i in self._share_probes if fresh[i]]
        probes = [i for i in self._probes if fresh[i]]
        if probes and len(seen) < len(self._probes):
            pick = probes[0]
        elif self._share_probes:
            pick = self._share_probes.pop(0)
        elif self._prior is None and len(done) < self._startup:
            pick = int(self._rng.choice(unseen))
        else:
            if done and self._asked % EI_EVERY != EI_EVERY - 1:
                moved = self._move.sample_move(study)
                if moved:
                    return moved
            if unseen.size > MAX_CANDIDATES:
                near = self._near(self._parents(sorted(done, key=done.__getitem__)), fresh)
                fresh[self._rng.choice(unseen, unseen.size - MAX_CANDIDATES, replace=False)] = False
                fresh[near] = True
                candidates = np.flatnonzero(fresh)
            else:
                candidates = unseen
            pick = int(candidates[np.argmax(self._acquisition(done, pending, candidates))])
        out = self._encoding.encode(self._configs[pick])
        return {} if out is None else out

    def _parents(self, ranked: Sequence[int]) -> list[int]:
        """``ranked`` (own trials, fastest first) as the EI pick's parents: the fastest, then
        the fastest ones more than ``SPREAD_PARENTS`` index steps from every parent before them
        (distinct regions), ``LOCAL_PARENTS`` in all."""
        if not SPREAD_PARENTS or not ranked:
            return list(ranked)
        out = [ranked[0]]
        for i in ranked[1:]:
            if len(out) == LOCAL_PARENTS:
                break
            if all(np.abs(self._pos[i] - self._pos[j]).sum() > SPREAD_PARENTS for j in out):
                out.append(i)
        return out

    def _near(self, ranked: Sequence[int], fresh: np.ndarray) -> np.ndarray:
        """The unasked configs (``fresh``) within ``LOCAL_RADIUS`` index steps of one of the
        ``LOCAL_PARENTS`` first of ``ranked``, or if there are none, the nearest ones."""
        parents = tuple(ranked[:LOCAL_PARENTS])
        if not parents:
            return np.zeros(0, dtype=int)
        if self._near_cache[0] != parents:
            steps = [np.abs(self._pos - self._pos[p]).sum(axis=1) for p in parents]
            self._near_cache = (parents, np.min(steps, axis=0))
        away = np.where(fresh, self._near_cache[1], np.iinfo(np.int64).max)
        return np.flatnonzero(away <= max(LOCAL_RADIUS, int(away.min())))

    def _acquisition(
        self, done: Mapping[int, float], pending: Sequence[int], candidates: np.ndarray
    ) -> np.ndarray:
        """Expected improvement of each candidate (pending configs believed at their mean)."""
        fit = self._fit(done)
        train, resid, inverse = fit.train, fit.resid, fit.inverse
        if pending:
            extra = np.array(pending, dtype=int)
            train, resid, inverse = self._believe(fit, extra)
        mean, sd = self._predict(train, resid, inverse, candidates, fit)
        mean += fit.c + fit.a * self._mu0[candidates]
        best = fit.best if fit.best is not None else float(mean.min())
        return expected_improvement(mean, sd, best)

    def _fit(self, done: Mapping[int, float]) -> _Fit:
        """The model for the own trials ``done`` (cached until they change): the GP over at most
        ``MAX_TRAIN`` of them, the fastest half and the rest spread evenly by rank."""
        key = tuple(sorted(done.items()))
        if self._fitted is not None and self._fitted[0] == key:
            return self._fitted[1]
        items = sorted(done.items(), key=lambda kv: kv[1])
        if len(items) > MAX_TRAIN:
            half = MAX_TRAIN // 2
            rest = np.linspace(half, len(items) - 1, MAX_TRAIN - half).astype(int)
            items = items[:half] + [items[i] for i in rest]
        train = np.array([i for i, _ in items], dtype=int)
        y = np.log([v for _, v in items]) if items else np.zeros(0)
        spread = self._prior.spread if self._prior is not None else 1.0
        a, c = self._mean_fit(self._mu0[train], y, spread if self._prior is not None else 0.0)
        resid = y - c - a * self._mu0[train]
        scales, var = self._hyper(train, resid, spread)
        xt = self._x[train] * scales
        inverse = np.linalg.inv(_matern52(_sqdist(xt, xt)) + NUGGET * np.eye(train.size))
        fit = _Fit(train, resid, inverse, a, c, scales, var, float(y.min()) if y.size else None)
        self._fitted = (key, fit)
        return fit

    def _believe(self, fit: _Fit, extra: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Training configs, residuals and kernel inverse with ``extra`` added at their predicted
        mean (the inverse by a block update of the fit's)."""
        xt, xe = self._x[fit.train] * fit.scales, self._x[extra] * fit.scales
        cross = _matern52(_sqdist(xt, xe))
        own = _matern52(_sqdist(xe, xe)) + NUGGET * np.eye(extra.size)
        ai_b = fit.inverse @ cross
        schur = np.linalg.inv(own - cross.T @ ai_b)
        top = fit.inverse + ai_b @ schur @ ai_b.T
        inverse = np.block([[top, -ai_b @ schur], [-(ai_b @ schur).T, schur]])
        believed = cross.T @ (fit.inverse @ fit.resid)
        return (
            np.concatenate([fit.train, extra]),
            np.concatenate([fit.resid, believed]),
            inverse,
        )

    @staticmethod
    def _mean_fit(mu: np.ndarray, y: np.ndarray, slope: float) -> tuple[float, float]:
        """Slope and offset of the prior mean: least squares on the own trials with the slope
        shrunk towards ``slope`` (``PRIOR_SLOPE_WEIGHT`` trials' worth), never negative."""
        if y.size == 0 or slope == 0.0:
            return slope, float(y.mean()) if y.size else 0.0
        dm, dy = mu - mu.mean(), y - y.mean()
        a = (float(dm @ dy) + PRIOR_SLOPE_WEIGHT * slope) / (float(dm @ dm) + PRIOR_SLOPE_WEIGHT)
        a = max(0.0, a)
        return a, float(y.mean() - a * mu.mean())

    def _hyper(self, idx: np.ndarray, resid: np.ndarray, spread: float) -> tuple[np.ndarray, float]:
        """GP inverse length scale (one for every feature, the most likely of ``LENGTHS``; chosen
        again once the own trials grew by ``REFIT_GROWTH`` since it was last chosen) and signal
        variance (its maximum-likelihood value, floored)."""
        ones = np.ones(self._x.shape[1])
        if idx.size < 3:
            start = PRIOR_RESIDUAL * spread if self._prior is not None else 1.0
            return ones / LENGTHS[1], start**2
        sq = _sqdist(self._x[idx], self._x[idx])
        chosen = self._length
        lengths = LENGTHS if chosen is None or idx.size >= chosen[0] * REFIT_GROWTH else chosen[1:]
        best: tuple[float, float, float] | None = None
        for length in lengths:
            chol = np.linalg.cholesky(_matern52(sq / length**2) + NUGGET * np.eye(idx.size))
            alpha = np.linalg.solve(chol, resid)
            var = max(float(alpha @ alpha) / idx.size, 1e-12)
            ll = -0.5 * idx.size * math.log(var) - float(np.log(np.diag(chol)).sum())
            if best is None or ll > best[0]:
                best = (ll, length, var)
        assert best is not None
        if len(lengths) > 1:
            self._length = (idx.size, best[1])
        return ones / best[1], max(best[2], (RESIDUAL_FLOOR * spread) ** 2)

    def _predict(
        self,
        train: np.ndarray,
        resid: np.ndarray,
        inverse: np.ndarray,
        at: np.ndarray,
        fit: _Fit,
    ) -> tuple[np.ndarray, np.ndarray]:
        """GP posterior mean and sd of the residual at ``at`` given ``resid`` at ``train``
        (``inverse``: of the kernel matrix of ``train``)."""
        if train.size == 0:
            return np.zeros(at.size), np.full(at.size, math.sqrt(fit.var))
        ks = _matern52(_sqdist(self._x[train] * fit.scales, self._x[at] * fit.scales))
        mean = ks.T @ (inverse @ resid)
        sd = np.sqrt(fit.var * np.maximum(1.0 - (ks * (inverse @ ks)).sum(0), 1e-9))
        return mean, sd

    def sample_independent(
        self,
        study: Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        return self._random.sample_independent(study, trial, param_name, param_distribution)
