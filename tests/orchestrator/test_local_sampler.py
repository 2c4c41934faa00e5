"""The default sampler: random startup trials, then unasked neighbours of the best config."""

from __future__ import annotations

import optuna
from optuna.distributions import CategoricalDistribution, IntDistribution

from orchestrator.search import LocalSearchSampler

DISTRIBUTIONS = {
    "a": IntDistribution(0, 9),
    "b": IntDistribution(0, 9),
    "c": CategoricalDistribution([True, False]),
}


def cost(params: dict[str, object]) -> float:
    return abs(int(params["a"]) - 7) + abs(int(params["b"]) - 2) + (0 if params["c"] else 3) + 1.0


def test_climbs_to_the_optimum_and_never_repeats_a_config() -> None:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(sampler=LocalSearchSampler(DISTRIBUTIONS, seed=3, startup=5))
    seen = set()
    for _ in range(60):
        trial = study.ask(DISTRIBUTIONS)
        key = (trial.params["a"], trial.params["b"], trial.params["c"])
        assert key not in seen
        seen.add(key)
        study.tell(trial, cost(trial.params))
    assert study.best_value == 1.0  # a=7, b=2, c=True
    # After the startup trials, every proposal is one step from an earlier config.
    trials = study.get_trials()
    for t in trials[5:]:
        assert any(
            sum(t.params[k] != u.params[k] for k in DISTRIBUTIONS) == 1 for u in trials[: t.number]
        )
