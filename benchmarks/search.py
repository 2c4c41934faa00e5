"""Issue 4 search benchmark: how soon each sampler finds a near-best config, replayed on CPU.

Usage (repo root): python benchmarks/search.py --landscape FILE [FILE ...] --sampler S [S ...]
    --seeds N [--batch 4] [--horizon 1.0] [--space auto|observed] [--jobs 1] [--json]
    python benchmarks/search.py --landscape FILE --synthesize OUT_DIR   (synthetic variants)
    python benchmarks/search.py --table RESULT.json [...]   (--json outputs as a Markdown table)

Each (landscape, sampler) runs N seeds of the product's study loop against the landscape: the
driver's own :class:`orchestrator.study.loop.Study` (so the rules are the product's by construction: a
config that breaks the space's constraints is told PRUNED at no cost, a config stands for its class
where the spec has an equivalence (``--no-equivalence``: every config its own), a config already measured
or pending is answered from the study at no cost, after ``IDLE_LIMIT`` asks in a row without a new
trial an unmeasured valid config drawn at random is queued), with the registry's samplers
(:mod:`orchestrator.study.samplers`) in their encodings, batched like a cluster of ``--batch`` workers
(propose until ``batch`` new configs are pending, then tell them all). Every new config costs one
trial; a config the landscape lacks is ``invalid`` (no valid time).

Warm start (``--warm-from FILE ...``, rows labelled ``SAMPLER+warm``): as ``tunefleet tune`` does for
a new problem when the database holds other problems' winners on the device, the study is seeded
in the order of :func:`orchestrator.run.warm_start.warm_order`: the spec's default config, the best
configs of the ``WARM_NEIGHBOURS`` nearest problems (``search_spaces.problem.problem_distance``)
among the given landscapes of the same kernel, leaving out the landscape's own problem, then the
nearest one's fastest configs up to ``WARM_NEAREST_TOP`` (from its whole landscape; a real job has
only what an earlier job measured there). Seeded configs are measured first and count as trials.

The space: for a shipped kernel whose spec version matches the file and a device in the device
table, the spec's space on that device (what ``tunefleet tune`` searches). A file recorded under
another spec version whose configs are all valid under the shipped spec (a parameter the file
predates taken at the spec default's value, and left out of the search) searches the spec's space
cut to the file's configs (``spec, file's configs``): a config the file lacks is rejected for free
like a constraint breaker, so the file replays as the space it was recorded in. Otherwise (or with
``--space observed``) the configs seen in the file: each parameter's observed values, ordered if all
are ints, else categorical, no constraints, so an absent combination costs a trial. The space size
N is the number of valid configs (spec) or of configs in the file (cut spec, observed).

Metrics over seeds (median, p90): trials until the best found is within 2% / 5% of the landscape's
optimum (a seed that does not get there within ``horizon * N`` trials, or whose study ends first,
counts as N), and the best found after 5%, 10%, 25% of N trials as a ratio to the optimum.
Samplers: every sampler of the registry (``learned``, the default; ``local``: a neighbourhood search
around the best configs; tpe = multivariate + constant liar, gp, random, cmaes; and any installed through the
``tunefleet.samplers`` entry points) except ``grid`` (over the Cartesian grid it is random order
without replacement, and it is too slow on this space to benchmark), plus variants that exist only
here: TPE variants (tpe-indep: not multivariate; tpe-noliar: no constant liar) and ``cmaes+novel``
(CMA-ES whose repeated proposals are replaced by unasked random configs).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import json
import math
import random
import sys
import time
import warnings
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution
from optuna.samplers import BaseSampler, TPESampler
from optuna.study import Study as OptunaStudy
from optuna.trial import FrozenTrial, TrialState

from benchmarks.search_prior import learned_table, prior_trials
from orchestrator.run.warm_start import warm_order
from orchestrator.study import samplers
from orchestrator.study.encoding import Encoding
from orchestrator.study.loop import Answer, Equivalent, Study
from orchestrator.study.samplers import SamplerContext, SamplerFactory, startup_trials
from orchestrator.study.samplers.learned import PriorTrial
from orchestrator.study.search import SearchStudy
from search_spaces.problem import Problem, problem_key
from search_spaces.registry import get_spec
from search_spaces.space import (
    Constraint,
    DeviceLimits,
    Param,
    ParamKind,
    Space,
    Value,
    Vendor,
    config_key,
)
from search_spaces.spec import KernelSpec
from workers.device_table import find
from workers.landscape import Landscape, LandscapeResult, read_landscape, write_landscape
from workers.measurement import Outcome

THRESHOLDS = (0.02, 0.05)
FRACTIONS = (0.05, 0.10, 0.25)
#: Absolute cap on asks per seed, in multiples of the space size (the idle limit usually ends first).
MAX_ASKS_PER_CONFIG = 50


@dataclass(frozen=True)
class Bench:
    """A landscape prepared for search: its space, which configs it timed, and its optimum."""

    name: str
    synthetic: bool
    space: Space
    limits: DeviceLimits
    times: dict[str, float | None]  # config key -> time (ms), None when not ``ok``
    constrained: bool  # spec space: constraint-breaking configs are rejected before a trial
    size: int
    optimum: float
    in_file: bool = False  # spec space restricted to the file's configs (older spec version)
    kernel: str = ""
    problem: Problem = field(default_factory=dict)
    device_class: str = ""
    #: The spec's classes of configs that run alike on the problem (spec spaces only).
    equivalent: Equivalent | None = None

    @property
    def kind(self) -> str:
        """The space's label: "spec", "spec, file's configs" or "observed"."""
        if not self.constrained:
            return "observed"
        return "spec, file's configs" if self.in_file else "spec"


def _observed_space(landscape: Landscape) -> Space:
    names = sorted({n for r in landscape.results for n in r.config})
    params = []
    for name in names:
        values = {r.config[name] for r in landscape.results if name in r.config}
        ints = all(isinstance(v, int) and not isinstance(v, bool) for v in values)
        ordered = sorted(values) if ints else sorted(values, key=str)
        params.append(Param(name, tuple(ordered), ParamKind.INT if ints else ParamKind.CATEGORICAL))
    return Space(tuple(params))


def _pin(constraint: Constraint, pinned: Mapping[str, Value]) -> Constraint:
    """``constraint`` over the parameters not in ``pinned``, which it reads at their fixed value."""
    if not set(constraint.uses) & set(pinned):
        return constraint
    check = constraint.check
    return Constraint(
        constraint.name,
        constraint.text,
        tuple(u for u in constraint.uses if u not in pinned),
        lambda c, lim: check({**pinned, **c}, lim),
    )


def _as_recorded(spec: KernelSpec, limits: DeviceLimits, landscape: Landscape) -> Space | None:
    """The spec's space as a file of another spec version was recorded in it, or None when a
    config of the file, completed with the spec default's value of every parameter the file
    lacks, is not valid under the spec: those parameters are fixed at the default (left out of
    the search), each other parameter keeps only the values the file holds (a value added to the
    spec since would shift the encoding's steps), and one more rule keeps exactly the file's
    configs."""
    present = spec.space.params_for(limits.vendor)
    default = spec.default_for(limits)
    pinned = {
        p.name: default[p.name]
        for p in present
        if all(p.name not in r.config for r in landscape.results)
    }
    if any(spec.space.violation({**pinned, **r.config}, limits) for r in landscape.results):
        return None
    keys = frozenset(config_key(r.config) for r in landscape.results)
    rule = Constraint(
        "in-landscape",
        "config recorded in the landscape (recorded under an older spec version)",
        tuple(p.name for p in present if p.name not in pinned),
        lambda c, _lim: config_key(c) in keys,
    )
    recorded = {p.name: {r.config.get(p.name) for r in landscape.results} for p in present}
    return Space(
        tuple(
            dataclasses.replace(p, values=tuple(v for v in p.values if v in recorded[p.name]))
            if p.name in recorded
            else p
            for p in spec.space.params
            if p.name not in pinned
        ),
        (*(_pin(c, pinned) for c in spec.space.constraints), rule),
    )


def _spec_space(landscape: Landscape) -> tuple[Space, DeviceLimits, bool] | None:
    """The shipped spec's space and the device's limits, if both apply to this file, and whether
    the space is cut to the file's configs (:func:`_as_recorded`: the file has another spec
    version)."""
    try:
        spec = get_spec(landscape.kernel)
    except Exception:  # not a shipped kernel (or its spec does not import): observed space
        return None
    known = find(landscape.device_name)
    if known is None:
        return None
    if spec.version_hash() != landscape.kernel_version:
        space = _as_recorded(spec, known.limits, landscape)
        return None if space is None else (space, known.limits, True)
    if any(spec.space.violation(r.config, known.limits) for r in landscape.results):
        return None
    return spec.space, known.limits, False


def load_bench(path: str | Path, observed: bool = False) -> Bench:
    """Read a landscape file and choose its space (see the module docstring)."""
    landscape = read_landscape(path)
    times = {
        config_key(r.config): r.time_ms if r.outcome is Outcome.OK else None
        for r in landscape.results
    }
    ok = [t for t in times.values() if t is not None]
    if not ok:
        raise SystemExit(f"{path}: no ok config, nothing to search for")
    spec = None if observed else _spec_space(landscape)
    shipped = None if spec is None else _shipped(landscape.kernel)
    if spec is None:
        space = _observed_space(landscape)
        limits = DeviceLimits(Vendor.NVIDIA, landscape.device_name, "unknown", 0, 0, 32, 0)
        size = len(times)
    else:
        space, limits, in_file = spec
        size = len(times) if in_file else space.count(limits)
    name = Path(path).name.removesuffix(".gz").removesuffix(".json")
    return Bench(
        name=name,
        synthetic="synthetic" in landscape.device or name.startswith("synthetic"),
        space=space,
        limits=limits,
        times=times,
        constrained=spec is not None,
        size=size,
        optimum=min(ok),
        in_file=spec is not None and spec[2],
        kernel=landscape.kernel,
        problem=dict(landscape.problem),
        device_class=landscape.device_name,
        equivalent=None if shipped is None else shipped.equivalence(landscape.problem),
    )


class NoveltySampler(BaseSampler):
    """Wraps a sampler: when its model proposes a config already asked (measured, rejected or
    pending), a random config never asked is proposed instead, so the model cannot stall on a
    known point (a PRUNED trial teaches GP and CMA-ES nothing, so they repeat it)."""

    def __init__(self, base: BaseSampler, distributions: Mapping[str, BaseDistribution], seed: int):
        self._base = base
        self._distributions = dict(distributions)
        self._rng = random.Random(seed)

    def infer_relative_search_space(
        self, study: OptunaStudy, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        return self._base.infer_relative_search_space(study, trial)

    def _random_point(self) -> dict[str, Any]:
        point: dict[str, Any] = {}
        for name, d in self._distributions.items():
            if isinstance(d, IntDistribution):
                point[name] = self._rng.randint(d.low, d.high)
            else:
                assert isinstance(d, CategoricalDistribution)
                point[name] = self._rng.choice(list(d.choices))
        return point

    def sample_relative(
        self, study: OptunaStudy, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        params = self._base.sample_relative(study, trial, search_space)
        names = sorted(self._distributions)
        if sorted(params) != names:
            return params
        trials = study.get_trials(deepcopy=False)
        seen = {tuple(t.params.get(n) for n in names) for t in trials if t.number != trial.number}
        for _ in range(100):
            if tuple(params[n] for n in names) not in seen:
                return params
            params = self._random_point()
        return params

    def sample_independent(
        self,
        study: OptunaStudy,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        return self._base.sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study: OptunaStudy, trial: FrozenTrial) -> None:
        self._base.before_trial(study, trial)

    def after_trial(
        self,
        study: OptunaStudy,
        trial: FrozenTrial,
        state: TrialState,
        values: Sequence[float] | None,
    ) -> None:
        self._base.after_trial(study, trial, state, values)


def _novel(inner: SamplerFactory) -> SamplerFactory:
    return lambda c: NoveltySampler(inner(c), c.encoding.distributions(), c.seed)


def _tpe(multivariate: bool, liar: bool) -> SamplerFactory:
    def factory(c: SamplerContext) -> BaseSampler:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return TPESampler(
                seed=c.seed,
                multivariate=multivariate,
                constant_liar=liar,
                n_startup_trials=startup_trials(c.budget),
            )

    return factory


#: Registered samplers this benchmark does not run (see the module docstring).
UNBENCHED = ("grid",)


@functools.lru_cache(maxsize=1)
def sampler_table() -> dict[str, tuple[SamplerFactory, bool]]:
    """Name -> (factory, whether its encoding is numeric only): the registry's samplers but
    ``UNBENCHED``, then the variants that exist only here."""
    table = {
        name: (entry.make, entry.numeric)
        for name, entry in ((n, samplers.get(n)) for n in samplers.names())
        if name not in UNBENCHED
    }
    cmaes = samplers.get("cmaes")
    return {
        **table,
        "tpe-indep": (_tpe(multivariate=False, liar=True), False),
        "tpe-noliar": (_tpe(multivariate=True, liar=False), False),
        "cmaes+novel": (_novel(cmaes.make), cmaes.numeric),
    }


@dataclass(frozen=True)
class SeedRun:
    """One seed: the value of each trial in order (None: no valid time), the asks made, how many
    of them broke a constraint (rejected) or hit a known or pending config (cached), how many
    configs were drawn at random after the sampler stalled, seconds, and each trial's config."""

    trace: list[float | None]
    asks: int
    rejected: int
    cached: int
    drawn: int
    wall_s: float
    configs: list[dict[str, Any]] = field(default_factory=list)


def new_study(
    bench: Bench,
    factory: SamplerFactory,
    numeric_only: bool,
    seed: int,
    budget: int,
    prior: Sequence[PriorTrial] = (),
    equivalence: bool = True,
) -> Study:
    """The product's :class:`Study` of ``bench`` with the sampler ``factory`` makes from ``seed``,
    ``budget`` and ``prior`` (``equivalence``: configs the spec says run alike measured once)."""
    encoding = Encoding(bench.space, bench.limits, numeric_only=numeric_only)
    context = SamplerContext(
        seed,
        budget,
        encoding,
        _shipped(bench.kernel),
        bench.problem,
        bench.device_class,
        tuple(prior),
    )
    optuna_study = optuna.create_study(direction="minimize", sampler=factory(context))
    search = SearchStudy(optuna_study, encoding, random.Random(seed))
    equivalent = bench.equivalent if equivalence else None
    return Study(search, bench.space, bench.limits, budget, equivalent=equivalent)


def run_seed(
    bench: Bench,
    factory: SamplerFactory,
    numeric_only: bool,
    seed: int,
    batch: int = 4,
    horizon: float = 1.0,
    warm: Sequence[Mapping[str, Any]] = (),
    prior: Sequence[PriorTrial] = (),
    stop_early: bool = True,
    equivalence: bool = True,
) -> SeedRun:
    """One seed of the product's :class:`Study` against the landscape (``warm`` configs queued
    first; ``prior``: the sampler's database prior; ``equivalence``: configs the spec says run
    alike are measured once, as in a job), until the best is within 2% and 25% of the
    space is spent or the optimum is found (only with ``stop_early``), or the horizon or the
    space ends."""
    started = time.perf_counter()
    budget = max(1, math.ceil(horizon * bench.size))
    study = new_study(bench, factory, numeric_only, seed, budget, prior, equivalence)
    search = study.search
    study.warm_start([dict(c) for c in warm])
    max_asks = MAX_ASKS_PER_CONFIG * bench.size
    trace: list[float | None] = []
    asked: list[dict[str, Any]] = []
    min_trials = math.ceil(max(FRACTIONS) * bench.size)
    goal = bench.optimum * (1 + min(THRESHOLDS))
    best = math.inf
    while True:
        pending: list[dict[str, Any]] = []
        while len(pending) < batch:
            config = study.propose(max_asks - study.asks)
            if config is None:
                break
            pending.append(config)
        if not pending:
            break
        for config in pending:
            value = bench.times.get(config_key(config))
            trace.append(value)
            asked.append(config)
            best = min(best, value if value is not None else math.inf)
            study.tell(config, Answer(value))
        if stop_early and (best <= bench.optimum or (best <= goal and len(trace) >= min_trials)):
            break  # the metrics cannot change any more
    return SeedRun(
        trace,
        study.asks,
        study.rejected,
        study.cached,
        search.drawn,
        time.perf_counter() - started,
        asked,
    )


def warm_configs(path: Path, pool: Sequence[Path]) -> list[dict[str, Any]]:
    """What ``tunefleet tune`` would seed the study of ``path``'s problem with, given the
    landscapes in ``pool`` (:func:`orchestrator.run.warm_start.warm_order`; see the module
    docstring)."""
    target = read_landscape(path)
    fastest: dict[str, list[dict[str, Any]]] = {}
    bests = []
    for other_path in pool:
        other = read_landscape(other_path)
        ranked = sorted(
            (r for r in other.results if r.time_ms is not None), key=lambda r: r.time_ms
        )
        if other.kernel != target.kernel or other.problem_key == target.problem_key or not ranked:
            continue
        fastest[other.problem_key] = [dict(r.config) for r in ranked]
        bests.append((dict(other.problem), dict(ranked[0].config)))
    default = None
    known = _spec_space(target)
    if known is not None:
        space, limits, _ = known
        spec_default = get_spec(target.kernel).default_for(limits)
        default = {p.name: spec_default[p.name] for p in space.params_for(limits.vendor)}
    return warm_order(dict(target.problem), default, bests, lambda p: fastest[problem_key(p)])


def trials_to(trace: Sequence[float | None], limit: float, size: int) -> int:
    """1-based trial at which the best first is <= ``limit``; ``size`` if it never is."""
    for i, value in enumerate(trace, 1):
        if value is not None and value <= limit:
            return i
    return size


def best_after(trace: Sequence[float | None], trials: int) -> float:
    """Best time among the first ``trials`` trials (inf when none had a valid time)."""
    ok = [v for v in trace[:trials] if v is not None]
    return min(ok) if ok else math.inf


def _stats(values: Sequence[float]) -> dict[str, float | None]:
    arr = np.asarray(values, dtype=float)
    out: dict[str, float | None] = {}
    for name, q in (("median", 50), ("p90", 90)):
        v = float(np.percentile(arr, q)) if np.isfinite(arr).all() else None
        out[name] = v if v is None else round(v, 4)
    return out


def near_optimum(bench: Bench) -> dict[str, dict[str, float]]:
    """Per threshold: how many of the landscape's configs run within it of the optimum, and the
    trials random search without repeats needs on average to draw one of them,
    (size + 1) / (configs + 1): how hard the landscape is, whatever the sampler."""
    out = {}
    for t in THRESHOLDS:
        limit = bench.optimum * (1 + t)
        near = sum(v is not None and v <= limit for v in bench.times.values())
        out[f"{round(t * 100)}pct"] = {
            "configs": near,
            "random_expected_trials": round((bench.size + 1) / (near + 1), 1),
        }
    return out


def summarize(
    bench: Bench, sampler: str, runs: Sequence[SeedRun], horizon: float
) -> dict[str, Any]:
    """One JSON row of results for ``runs`` (one per seed)."""
    row: dict[str, Any] = {
        "landscape": bench.name,
        "real": not bench.synthetic,
        "sampler": sampler,
        "space": bench.size,
        "space_kind": bench.kind,
        "seeds": len(runs),
        "horizon_trials": math.ceil(horizon * bench.size),
    }
    for t in THRESHOLDS:
        limit = bench.optimum * (1 + t)
        row[f"trials_to_{round(t * 100)}pct"] = {
            **_stats([trials_to(r.trace, limit, bench.size) for r in runs]),
            "reached": sum(any(v is not None and v <= limit for v in r.trace) for r in runs),
        }
    row["near_optimum"] = near_optimum(bench)
    row["best_ratio_after"] = {
        f"{round(f * 100)}pct": _stats(
            [best_after(r.trace, math.ceil(f * bench.size)) / bench.optimum for r in runs]
        )
        for f in FRACTIONS
    }
    trials = sum(len(r.trace) for r in runs)
    row["asks_per_trial"] = round(sum(r.asks for r in runs) / trials, 2)
    row["rejected_per_trial"] = round(sum(r.rejected for r in runs) / trials, 2)
    row["cached_per_trial"] = round(sum(r.cached for r in runs) / trials, 2)
    row["seeds_that_drew"] = sum(r.drawn > 0 for r in runs)
    row["wall_s_per_seed"] = round(float(np.mean([r.wall_s for r in runs])), 2)
    return row


def _one(
    args: tuple[str, bool, str, int, int, float, list[dict[str, Any]], tuple[str, ...], int, bool],
) -> SeedRun:
    path, observed, sampler, seed, batch, horizon, warm, prior, sparse, equivalence = args
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    factory, numeric = sampler_table()[sampler]
    bench = _cached_bench(path, observed)
    if sparse:
        trials: Sequence[PriorTrial] = sparse_prior(
            bench.kernel, bench.problem, prior, observed, seed, batch, sparse, equivalence
        )
    else:
        trials = _cached_prior(path, observed, prior) if prior else ()
    return run_seed(
        bench, factory, numeric, seed, batch, horizon, warm, trials, equivalence=equivalence
    )


def _shipped(kernel: str) -> KernelSpec | None:
    """The shipped spec of ``kernel``, or None (a landscape of an unshipped kernel)."""
    try:
        return get_spec(kernel)
    except Exception:  # not a shipped kernel (or its spec does not import)
        return None


@functools.lru_cache(maxsize=4)
def _cached_prior(path: str, observed: bool, paths: tuple[str, ...]) -> tuple[PriorTrial, ...]:
    bench = _cached_bench(path, observed)
    return tuple(prior_trials(bench.kernel, bench.problem, paths))


def sparse_prior(
    kernel: str,
    problem: Problem,
    paths: Sequence[str],
    observed: bool,
    seed: int,
    batch: int,
    trials: int,
    equivalence: bool = True,
) -> list[PriorTrial]:
    """The sparse database prior of a leave-one-problem-out run (``learned+sparse``): of each
    landscape in ``paths`` of ``kernel`` on a problem other than ``problem``, the ok trials among
    the first ``trials`` that ``local`` measured there (seed ``seed``, batches of ``batch``,
    ``observed`` as ``--space observed``, ``equivalence`` as in :func:`run_seed`), as an earlier job with that budget would have left
    them in a database."""
    out = []
    for other_path in paths:
        other = _cached_bench(other_path, observed)
        if other.kernel != kernel or other.problem == problem:
            continue
        run = _local_history(other_path, observed, seed, batch, trials, equivalence)
        out += [
            PriorTrial(dict(other.problem), other.device_class, dict(config), value)
            for config, value in zip(run.configs, run.trace, strict=True)
            if value is not None
        ]
    return out


@functools.lru_cache(maxsize=4096)
def _local_history(
    path: str, observed: bool, seed: int, batch: int, trials: int, equivalence: bool
) -> SeedRun:
    """The first ``trials`` trials of ``local`` on a landscape (once per process and seed)."""
    bench = _cached_bench(path, observed)
    factory, numeric = sampler_table()["local"]
    horizon = min(1.0, trials / bench.size)
    return run_seed(
        bench, factory, numeric, seed, batch, horizon, stop_early=False, equivalence=equivalence
    )


@functools.lru_cache(maxsize=64)
def _cached_bench(path: str, observed: bool) -> Bench:
    """:func:`load_bench`, once per process and file (seeds share its space and valid configs)."""
    return load_bench(path, observed)


def synthesize(path: str | Path, out_dir: Path, seed: int = 0) -> list[Path]:
    """Three clearly synthetic variants of a landscape: the same configs, times from seeded models.

    ``noise5``: the recorded times x exp(N(0, 0.05)) (near-best ranking shuffled).
    ``additive``: exp(per-parameter main effects of the recorded log times) x lognormal noise of the
    recorded residual's size (interactions replaced by noise: rugged).
    ``quadratic``: a random quadratic with pairwise interactions over the parameters' index
    positions (smooth, optimum at a random place).
    Each model's log times are rescaled to the recorded log times' mean and spread.
    """
    landscape = read_landscape(path)
    ok = [r for r in landscape.results if r.outcome is Outcome.OK and r.time_ms]
    names = sorted(ok[0].config)
    values = {n: sorted({r.config[n] for r in ok}, key=str) for n in names}
    logs = np.log([float(r.time_ms or 0.0) for r in ok])
    effects = {
        n: {
            v: float(np.mean([lt for r, lt in zip(ok, logs, strict=True) if r.config[n] == v]))
            - float(logs.mean())
            for v in values[n]
        }
        for n in names
    }
    additive = logs.mean() + np.array([sum(effects[n][r.config[n]] for n in names) for r in ok])
    residual = float(np.std(logs - additive))
    rng = np.random.default_rng(seed)
    pos = np.array(
        [[values[n].index(r.config[n]) / max(1, len(values[n]) - 1) for n in names] for r in ok]
    )
    centre, curv = rng.uniform(0, 1, len(names)), rng.uniform(0.3, 1.5, len(names))
    inter = np.triu(rng.normal(0, 0.4, (len(names), len(names))), 1)
    d = pos - centre
    quad = np.einsum("ij,j->i", d**2, curv) + np.einsum("ij,jk,ik->i", d, inter, d)
    models = {
        "noise5": (logs + rng.normal(0, 0.05, len(ok)), "recorded x lognormal(0.05)"),
        "additive": (
            additive + rng.normal(0, residual, len(ok)),
            f"main effects of recorded log time + lognormal({residual:.3f})",
        ),
        "quadratic": (
            logs.mean() + quad + rng.normal(0, 0.02, len(ok)),
            "random quadratic over index positions + lognormal(0.02)",
        ),
    }
    stem = Path(path).name.removesuffix(".gz").removesuffix(".json")
    written = []
    for model, (raw, text) in models.items():
        log_times = (raw - raw.mean()) / raw.std() * logs.std() + logs.mean()
        results = [
            LandscapeResult(dict(r.config), Outcome.OK, float(t))
            for r, t in zip(ok, np.exp(log_times), strict=True)
        ]
        device = {**landscape.device, "synthetic": f"{text}, seed {seed}, from {stem}"}
        variant = Landscape(
            landscape.kernel, landscape.kernel_version, landscape.problem, device, results
        )
        written.append(write_landscape(out_dir / f"synthetic-{model}_{stem}.json.gz", variant))
    return written


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--landscape", nargs="+", default=[], type=Path)
    parser.add_argument("--sampler", nargs="+", choices=sorted(sampler_table()), default=["tpe"])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument(
        "--horizon", type=float, default=1.0, help="most trials per seed, as a share of the space"
    )
    parser.add_argument("--space", choices=("auto", "observed"), default="auto")
    parser.add_argument(
        "--warm-from",
        nargs="*",
        type=Path,
        default=None,
        metavar="FILE",
        help="also run each sampler warm-started from these landscapes' winners (SAMPLER+warm)",
    )
    parser.add_argument(
        "--prior-from",
        nargs="*",
        type=Path,
        default=None,
        metavar="FILE",
        help="also run `learned` with these landscapes of the same kernel on other problems as "
        "its database prior (leave one problem out: learned+prior)",
    )
    parser.add_argument(
        "--sparse-prior",
        type=int,
        default=0,
        metavar="N",
        help="with --prior-from, also run `learned` with a sparse prior: of each of those "
        "landscapes, only the first N trials of `local` with the same seed (learned+sparse)",
    )
    parser.add_argument(
        "--start",
        nargs="+",
        choices=("", "+warm", "+prior", "+prior+warm", "+sparse"),
        help="run only these starts (row suffixes; '' is cold); default: every one the "
        "--warm-from and --prior-from options give",
    )
    parser.add_argument(
        "--no-equivalence",
        action="store_true",
        help="measure every config, also those the spec says run alike on the problem (the "
        "study loop before KernelSpec.equivalence)",
    )
    parser.add_argument("--jobs", type=int, default=1, help="processes running seeds")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--synthesize", type=Path, metavar="OUT_DIR")
    parser.add_argument(
        "--table", nargs="+", type=Path, metavar="JSON", help="print --json outputs as Markdown"
    )
    parser.add_argument(
        "--learned-table",
        action="store_true",
        help="with --table: the learned sampler against local, with issue 23's targets",
    )
    args = parser.parse_args(argv)
    if args.table:
        rows = [r for p in args.table for r in json.loads(p.read_text())["results"]]
        print(learned_table(rows) if args.learned_table else markdown_table(rows))
        return
    if not args.landscape:
        parser.error("--landscape is required")
    if args.synthesize:
        for p in args.landscape:
            for out in synthesize(p, args.synthesize):
                print(out)
        return
    if args.seeds < 1 or args.batch < 1 or not 0 < args.horizon <= 1:
        raise SystemExit("--seeds and --batch must be >= 1, --horizon in (0, 1]")
    observed = args.space == "observed"
    rows = []
    with ProcessPoolExecutor(args.jobs) as pool:
        mapper = pool.map if args.jobs > 1 else map
        for path in args.landscape:
            bench = load_bench(path, observed)
            # suffix -> (warm configs, prior landscapes, sparse prior's trials per landscape)
            starts: dict[str, tuple[list[dict[str, Any]], tuple[str, ...], int]] = {"": ([], (), 0)}
            if args.warm_from is not None:
                starts["+warm"] = (warm_configs(path, args.warm_from), (), 0)
            if args.prior_from is not None:
                prior_paths = tuple(str(p) for p in args.prior_from)
                starts["+prior"] = ([], prior_paths, 0)
                if args.warm_from is not None:
                    starts["+prior+warm"] = (starts["+warm"][0], prior_paths, 0)
                if args.sparse_prior:
                    starts["+sparse"] = ([], prior_paths, args.sparse_prior)
            for sampler, (suffix, (warm, prior, sparse)) in itertools.product(
                args.sampler, starts.items()
            ):
                if (prior and sampler != "learned") or (args.start and suffix not in args.start):
                    continue  # only the learned sampler takes a prior
                tasks = [
                    (
                        str(path),
                        observed,
                        sampler,
                        s,
                        args.batch,
                        args.horizon,
                        warm,
                        prior,
                        sparse,
                        not args.no_equivalence,
                    )
                    for s in range(args.seeds)
                ]
                runs = list(mapper(_one, tasks))
                row = summarize(bench, sampler + suffix, runs, args.horizon)
                if warm:
                    row["warm_start"] = len(warm)
                rows.append(row)
                if not args.json:
                    print(_line(row), flush=True)
                print(f"done {bench.name} {sampler}{suffix}", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps({"results": rows}, indent=1))


def _pct(value: float | None, size: int) -> str:
    return "-" if value is None else f"{value:g} ({100 * value / size:.1f}%)"


def markdown_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """A Markdown table of result rows, then per sampler on how many landscapes it meets issue 4's
    target: trials to within 2% of the optimum, median <= 5% and p90 <= 15% of the space; for a
    warm-started row (``+warm``), median <= 2%."""
    lines = [
        "| landscape | sampler | space | seeds | trials to 2%: median | p90 | reached | "
        "trials to 5%: median | p90 | best/optimum after 5% / 10% / 25% (median) | meets | "
        "asks/trial | s/seed |",
        "|---" * 13 + "|",
    ]
    tally: dict[str, list[bool]] = {}
    for r in rows:
        n, t2, t5 = r["space"], r["trials_to_2pct"], r["trials_to_5pct"]
        after = " / ".join(
            "-" if v["median"] is None else f"{v['median']:.3f}"
            for v in r["best_ratio_after"].values()
        )
        meets = meets_target(r)
        tally.setdefault(r["sampler"], []).append(meets)
        kind = "REAL" if r["real"] else "synthetic"
        lines.append(
            f"| {r['landscape']} ({kind}) | {r['sampler']} | {n} ({r['space_kind']}) | "
            f"{r['seeds']} | {_pct(t2['median'], n)} | {_pct(t2['p90'], n)} | "
            f"{t2['reached']}/{r['seeds']} | {_pct(t5['median'], n)} | {_pct(t5['p90'], n)} | "
            f"{after} | {'yes' if meets else 'no'} | {r['asks_per_trial']} | "
            f"{r['wall_s_per_seed']} |"
        )
    lines.append("")
    lines += [f"- `{name}` meets the target on {sum(m)} of {len(m)}" for name, m in tally.items()]
    return "\n".join(lines)


def meets_target(row: Mapping[str, Any]) -> bool:
    """Issue 4's target for one result row (see :func:`markdown_table`)."""
    n, t2 = row["space"], row["trials_to_2pct"]
    if str(row["sampler"]).endswith("+warm"):
        return bool(t2["median"] <= 0.02 * n)
    return bool(t2["median"] <= 0.05 * n and t2["p90"] <= 0.15 * n)


def _line(row: Mapping[str, Any]) -> str:
    t2, t5, after = row["trials_to_2pct"], row["trials_to_5pct"], row["best_ratio_after"]
    return (
        f"{row['landscape'][:40]:<40} {row['sampler']:<11} N={row['space']:<5} "
        f"2%: {t2['median']}/{t2['p90']} ({t2['reached']}/{row['seeds']})  "
        f"5%: {t5['median']}/{t5['p90']}  "
        f"within 2%: {row['near_optimum']['2pct']['configs']} configs  best@5/10/25%: "
        + "/".join(str(v["median"]) for v in after.values())
        + f"  {row['wall_s_per_seed']} s/seed"
    )


if __name__ == "__main__":
    main()
