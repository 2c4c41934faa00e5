"""The ``learned`` sampler: it proposes only valid configs nobody asked before, and a prior from a
related landscape gets a study to the optimum in fewer trials than no prior does."""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import optuna
import pytest

from db import Database
from orchestrator.study.encoding import Encoding
from orchestrator.study.samplers.learned import (
    Featurizer,
    LearnedSampler,
    PriorTrial,
    PriorTrials,
    relevance,
)
from orchestrator.study.search import SearchStudy
from search_spaces import get_spec
from search_spaces.problem import Problem
from search_spaces.space import config_key
from workers.device_table import lookup
from workers.landscape import Landscape, read_landscape

H200 = "NVIDIA H200"
A100 = "NVIDIA A100-SXM4-80GB"


def _study(landscape: Landscape, seed: int, prior: PriorTrials = ()) -> SearchStudy:
    spec = get_spec("matmul")
    limits = lookup(landscape.device_name).limits
    encoding = Encoding(spec.space, limits, numeric_only=False)
    sampler = LearnedSampler(
        encoding,
        seed,
        problem=dict(landscape.problem),
        device_class=landscape.device_name,
        features=spec.features,
        prior=prior,
    )
    study = optuna.create_study(direction="minimize", sampler=sampler)
    return SearchStudy(study, encoding, random.Random(seed))


def _replay(
    landscape: Landscape, seed: int, prior: PriorTrials = (), trials: int = 60
) -> list[str]:
    """Config keys in the order the study measured them, four at a time (a batch of four
    workers), until the landscape's optimum; a config the landscape lacks is told invalid."""
    times = {config_key(r.config): r.time_ms for r in landscape.results}
    optimum = min(t for t in times.values() if t is not None)
    search = _study(landscape, seed, prior)
    order: list[str] = []
    while len(order) < trials:
        batch = [search.ask() for _ in range(4)]
        for trial, config in batch:
            key = config_key(config)
            order.append(key)
            value = times.get(key)
            if value is None:
                search.tell_bad(trial, "not in the landscape")
            else:
                search.tell_ok(trial, value)
        if any(times.get(k) == optimum for k in order):
            break
    return order


def _prior(landscape: Landscape) -> list[PriorTrial]:
    return [
        PriorTrial(dict(landscape.problem), landscape.device_name, dict(r.config), r.time_ms)
        for r in landscape.results
        if r.time_ms is not None
    ]


def test_proposes_only_valid_configs_never_asked_before(landscapes: dict[str, list[Path]]) -> None:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    small, large = (read_landscape(p) for p in landscapes[H200])
    spec, limits = get_spec("matmul"), lookup(H200).limits
    valid = {config_key(c) for c in spec.space.iter_valid(limits)}
    for prior in ((), _prior(small)):
        order = _replay(large, seed=5, prior=prior, trials=24)
        assert len(order) == len(set(order)), "a config was asked twice"
        assert set(order) <= valid, "a constraint breaker was asked"


def test_a_related_problem_prior_reaches_the_optimum_sooner(
    landscapes: dict[str, list[Path]],
) -> None:
    """The synthetic H200 landscapes of two problems share their optimum's config: with the
    smaller problem's trials as its prior, a study of the larger one finds the optimum in fewer
    than half the trials it needs without, summed over four seeds (each run stops at the
    optimum; 72 trials against 148)."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    small, large = (read_landscape(p) for p in landscapes[H200])
    seeds = range(4)
    cold = sum(len(_replay(large, seed=s)) for s in seeds)
    warm = sum(len(_replay(large, seed=s, prior=_prior(small))) for s in seeds)
    assert warm < cold / 2, (warm, cold)


def test_featurizer_computes_the_derived_features_on_the_problem_asked() -> None:
    """The prior's cost model featurizes each prior trial on its own problem: the parameter
    columns stay, the derived ones are the spec's features on that problem, scaled as the
    study's (so they may leave [0, 1])."""
    spec, limits = get_spec("matmul"), lookup(H200).limits
    configs = list(spec.space.iter_valid(limits))[:50]
    study: Problem = {"M": 128, "N": 4096, "K": 4096, "dtype": "bfloat16"}
    other: Problem = {**study, "M": 4096}
    params = Encoding(spec.space, limits, numeric_only=False).params
    featurizer = Featurizer(params, study, spec.features, configs)
    same, moved = featurizer.matrix(configs), featurizer.matrix(configs, other)
    assert np.allclose(same, featurizer.reference)
    derived = sorted(spec.features(study, configs[0]))
    width = len(derived)
    assert np.allclose(same[:, :-width], moved[:, :-width])
    expected = np.array([[spec.features(other, c)[n] for n in derived] for c in configs])
    low, span = featurizer._low[-width:], featurizer._span[-width:]
    assert np.allclose(moved[:, -width:], (expected - low) / span)
    assert not np.allclose(moved[:, -width:], same[:, -width:])


def test_relevance_falls_with_problem_distance_and_another_class() -> None:
    target: Problem = {"M": 128, "N": 4096, "K": 4096, "dtype": "bfloat16"}
    near = {**target, "M": 256}
    far = {**target, "M": 4096}
    other_dtype = {**target, "dtype": "float16"}
    assert relevance(target, H200, target, H200) == 1.0
    assert relevance(target, H200, near, H200) == math.exp(-1.0)
    assert relevance(target, H200, far, H200) < relevance(target, H200, near, H200)
    assert relevance(target, H200, near, "other") < relevance(target, H200, near, H200)
    assert 0 < relevance(target, H200, other_dtype, H200) < relevance(target, H200, near, H200)


def test_the_benchmark_prior_leaves_the_landscapes_own_problem_out(
    landscapes: dict[str, list[Path]],
) -> None:
    from benchmarks.search_prior import prior_trials

    small, large = landscapes[H200]
    everything = [*landscapes[H200], *landscapes[A100]]
    target = dict(read_landscape(large).problem)
    prior = prior_trials("matmul", target, everything)
    assert prior and all(t.problem != target for t in prior)
    # The smaller problem on both devices: each ok result once.
    ok = sum(
        r.time_ms is not None
        for p in (small, landscapes[A100][0])
        for r in read_landscape(p).results
    )
    assert len(prior) == ok


def test_without_a_problem_it_still_proposes_valid_unasked_configs() -> None:
    """As a registry factory given only an encoding builds it: no features hook, no prior."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    spec, limits = get_spec("rmsnorm"), lookup(H200).limits
    encoding = Encoding(spec.space, limits, numeric_only=False)
    study = optuna.create_study(sampler=LearnedSampler(encoding, seed=1))
    search = SearchStudy(study, encoding, random.Random(1))
    asked = []
    for _ in range(12):
        trial, config = search.ask()
        assert spec.space.violation(config, limits) is None
        asked.append(config_key(config))
        search.tell_ok(trial, 1.0 + len(asked) % 5)
    assert len(set(asked)) == len(asked)


def test_spec_features_name_the_same_finite_quantities_for_every_valid_config() -> None:
    limits = lookup(H200).limits
    problems: list[tuple[str, Problem]] = [
        ("matmul", {"M": 100, "N": 300, "K": 700, "dtype": "bfloat16"}),
        ("rmsnorm", {"M": 3, "N": 5000, "dtype": "float16"}),
    ]
    for name, problem in problems:
        spec = get_spec(name)
        rows = [spec.features(problem, c) for c in spec.space.iter_valid(limits)]
        assert rows and all(set(r) == set(rows[0]) for r in rows), name
        assert all(math.isfinite(v) for r in rows for v in r.values()), name
        assert len({tuple(r.values()) for r in rows}) > 1, name  # they tell configs apart


def test_a_learned_job_reads_its_prior_from_the_database(
    landscapes: dict[str, list[Path]], database: Database
) -> None:
    """A first job measures the small problem; a ``learned`` job on the large one gets those
    trials as its prior (through the ledger) and runs to the end on an in-process pool."""
    from orchestrator.run.driver import Driver, submit_job
    from orchestrator.run.jobs import JobSpec
    from orchestrator.run.ledger import Ledger
    from orchestrator.run.local_pool import LocalPool
    from orchestrator.run.worker import WorkerPlan

    small, large = (dict(read_landscape(p).problem) for p in landscapes[H200])
    pool = LocalPool([WorkerPlan("replay", tuple(str(p) for p in landscapes[H200]))])
    try:
        first = submit_job(
            database,
            JobSpec.from_mapping({"kernel": "matmul", "problems": [small], "trials": 8}),
            pool,
        )
        Driver(database, pool, retime_rounds=1, poll_s=0.0).run(first)
        spec = {"kernel": "matmul", "problems": [large], "trials": 8, "sampler": "learned"}
        second = submit_job(database, JobSpec.from_mapping(spec), pool)
        ledger = Ledger(database, second)
        ledger.open()
        prior = ledger.prior()
        assert 0 < len(prior) <= 8 and {config_key(t.problem) for t in prior} == {config_key(small)}
        result = Driver(database, pool, retime_rounds=1, poll_s=0.0).run(second)
    finally:
        pool.shutdown()
    assert result.status.value == "done"


def test_with_a_prior_the_spec_default_follows_the_priors_probes(
    landscapes: dict[str, list[Path]],
) -> None:
    """The prior's probes come first (its best config first), the spec's default right after
    them; without a prior the default is not singled out."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    small, large = (read_landscape(p) for p in landscapes[H200])
    spec, limits = get_spec("matmul"), lookup(H200).limits
    encoding = Encoding(spec.space, limits, numeric_only=False)
    default = spec.default_for(limits)
    expected = config_key({p.name: default[p.name] for p in encoding.params})
    for prior in ((), _prior(small)):
        sampler = LearnedSampler(
            encoding,
            3,
            problem=dict(large.problem),
            device_class=H200,
            features=spec.features,
            prior=prior,
            default=default,
        )
        search = SearchStudy(optuna.create_study(sampler=sampler), encoding, random.Random(3))
        asked = [config_key(search.ask()[1]) for _ in range(6)]
        probes = sampler._probes  # the order under test
        if prior:
            assert asked[len(probes) - 1] == expected and asked[0] != expected, asked
        else:
            assert probes == (), probes


def test_past_its_startup_it_proposes_locals_moves_between_its_model_picks() -> None:
    """Given the same four measured configs, the learned sampler's first two proposals are the
    moves ``local`` (same seed, no startup) proposes; every fifth proposal is the model's."""
    from optuna.trial import create_trial

    from orchestrator.study.samplers.learned import EI_EVERY
    from orchestrator.study.samplers.local import LocalSearchSampler

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    spec, limits = get_spec("rmsnorm"), lookup(H200).limits
    encoding = Encoding(spec.space, limits, numeric_only=False)
    dists = encoding.distributions()
    samplers = [
        LearnedSampler(encoding, seed=3),
        LocalSearchSampler(dists, 3, 0, encoding.valid_params),
    ]
    studies = [optuna.create_study(sampler=s) for s in samplers]
    for i, params in enumerate(encoding.valid_params()[:4]):
        for study in studies:
            study.add_trial(create_trial(params=params, distributions=dists, value=1.0 + i))
    assert EI_EVERY == 5
    for step in range(2):
        learned, local = (study.ask(dists) for study in studies)
        assert learned.params, "no proposal"
        assert learned.params == local.params, step
        for study, trial in zip(studies, (learned, local), strict=True):
            study.tell(trial, 0.5 - 0.1 * step)


def test_a_learned_sampler_leaves_numpy_one_blas_thread() -> None:
    from threadpoolctl import threadpool_info, threadpool_limits

    from orchestrator.study.samplers import one_blas_thread

    threadpool_limits(limits=2, user_api="blas")
    one_blas_thread.cache_clear()
    spec, limits = get_spec("rmsnorm"), lookup(H200).limits
    LearnedSampler(Encoding(spec.space, limits, numeric_only=False), seed=1)
    blas = [p for p in threadpool_info() if p["user_api"] == "blas"]
    assert blas and all(p["num_threads"] == 1 for p in blas)


def test_the_study_asks_it_for_whole_trials_and_gets_the_configs_optunas_ask_gets() -> None:
    """``SearchStudy.ask`` creates a learned trial from ``sample_trial`` in one storage write
    (the trial is not in the study while the sampler picks); with batches of four pending, the
    configs are the ones Optuna's own ask (the trial created first) gets on the same seed, past
    the startup, the moves and the model's picks."""
    from orchestrator.study.samplers import gives_whole_trials

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    spec, limits = get_spec("rmsnorm"), lookup(H200).limits
    encoding = Encoding(spec.space, limits, numeric_only=False)
    dists = encoding.distributions()
    problem: Problem = {"M": 128, "N": 4096, "dtype": "bfloat16"}

    def sampler() -> LearnedSampler:
        return LearnedSampler(encoding, 7, problem=problem, features=spec.features)

    def cost(config: dict[str, object]) -> float:
        return 1.0 + sum(abs(hash((k, str(v)))) % 97 for k, v in config.items()) / 100

    fast = SearchStudy(optuna.create_study(sampler=sampler()), encoding)
    slow = optuna.create_study(sampler=sampler())
    assert gives_whole_trials(fast.study.sampler)
    writes = []
    storage = fast.study._storage
    inner = storage.set_trial_param
    storage.set_trial_param = lambda *a: writes.append(a) or inner(*a)  # type: ignore[method-assign]
    for _ in range(5):
        fast_batch = [fast.ask() for _ in range(4)]
        slow_batch = [slow.ask(dists) for _ in range(4)]
        for (trial, config), other in zip(fast_batch, slow_batch, strict=True):
            assert config == encoding.decode(other.params)
            fast.tell_ok(trial, cost(config))
            slow.tell(other, cost(config))
    assert not writes, "a parameter was suggested one by one"
    assert len({config_key(encoding.decode(t.params)) for t in fast.study.trials}) == 20


def test_siblings_trials_put_their_prior_best_next_at_the_checkpoint(
    landscapes: dict[str, list[Path]],
) -> None:
    """Trials shared from the start change nothing before ``SHARE_FIRST`` own asks; that ask is
    the best config of a prior fitted to them (the study had none), then the study goes on."""
    from orchestrator.study.samplers.learned import SHARE_FIRST, Prior

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    small, large = (read_landscape(p) for p in landscapes[H200])
    times = {config_key(r.config): r.time_ms for r in large.results}
    asked: list[list[str]] = []
    for shared in ((), _prior(small)):
        search = _study(large, seed=2)
        search.share(shared)
        keys = []
        for _ in range(SHARE_FIRST + 2):
            trial, config = search.ask()
            keys.append(config_key(config))
            value = times.get(keys[-1])
            search.tell_bad(trial, "none") if value is None else search.tell_ok(trial, value)
        asked.append(keys)
    alone, sharing = asked
    assert alone[: SHARE_FIRST - 1] == sharing[: SHARE_FIRST - 1]
    sampler = search.study.sampler
    assert isinstance(sampler, LearnedSampler) and sampler._featurizer is not None
    prior = Prior.fit(_prior(small), dict(large.problem), H200, sampler._featurizer)
    assert prior is not None
    probe = config_key(sampler._featurizer.configs[prior.probes[0]])
    assert probe not in sharing[: SHARE_FIRST - 1]
    assert sharing[SHARE_FIRST - 1] == probe != alone[SHARE_FIRST - 1]
    assert len(set(sharing)) == len(sharing)


def test_a_learned_job_shares_each_studys_ok_times_with_its_siblings(
    landscapes: dict[str, list[Path]], database: Database, h200_pool: object
) -> None:
    """In a ``learned`` job of two problems, each study's sampler was given every ``ok`` time
    of the other study, and none of its own."""
    from orchestrator.run.driver import Driver, submit_job
    from orchestrator.run.jobs import JobSpec
    from orchestrator.run.local_pool import LocalPool

    assert isinstance(h200_pool, LocalPool)
    problems = [dict(read_landscape(p).problem) for p in landscapes[H200]]
    spec = {"kernel": "matmul", "problems": problems, "trials": 12, "sampler": "learned"}
    job = submit_job(database, JobSpec.from_mapping(spec), h200_pool)
    driver = Driver(database, h200_pool, retime_rounds=1, poll_s=0.0)
    assert driver.run(job).status.value == "done"
    studies = [r.study for r in driver._studies]
    for own, other in (studies, studies[::-1]):
        sampler = own.search.study.sampler
        assert isinstance(sampler, LearnedSampler)
        shared = {(config_key(t.config), t.time_ms) for t in sampler._shared}
        told = {(k, v) for k, v in other.values.items() if v is not None}
        assert shared == told and told


def test_a_study_keeps_the_newest_shared_trials_and_still_reaches_its_checkpoint(
    landscapes: dict[str, list[Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past ``SHARED_LIMIT`` the oldest shared trials are dropped; the checkpoint still sees
    new ones, so it fits a prior and probes."""
    from orchestrator.study.samplers import learned

    monkeypatch.setattr(learned, "SHARED_LIMIT", 5)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    small, large = (read_landscape(p) for p in landscapes[H200])
    shared = _prior(small)
    search = _study(large, seed=2)
    sampler = search.study.sampler
    assert isinstance(sampler, LearnedSampler)
    search.share(shared[:-5])
    search.share(shared[-5:])
    assert list(sampler._shared) == shared[-5:]
    for _ in range(learned.SHARE_FIRST):
        trial, _config = search.ask()
        search.tell_ok(trial, 1.0)
    assert sampler._fitted_shared == len(shared)
