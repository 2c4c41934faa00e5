"""SearchStudy: configs in and out of Optuna, and a resumed study rebuilt from earlier results."""

from __future__ import annotations

import optuna

from orchestrator.samplers import startup_trials
from orchestrator.search import SearchStudy
from search_spaces import config_key, get_spec
from workers.device_table import lookup

SPACE = get_spec("matmul").space
LIMITS = lookup("H200").limits


def differing(a: dict[str, object], b: dict[str, object]) -> list[str]:
    return [name for name in a if a[name] != b[name]]


def test_a_study_rebuilt_from_history_goes_on_from_its_best() -> None:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    configs = SPACE.enumerate(LIMITS)[::97][: startup_trials(40) + 2]
    times = {config_key(c): 1.0 + i for i, c in enumerate(configs)}
    best = configs[0]
    study = SearchStudy.create("rebuilt", SPACE, LIMITS, "local", seed=0, budget=40)
    for c in configs:
        assert study.add_history(c, times[config_key(c)])
    assert study.add_history({**best, "BLOCK_K": 16}, None) is False  # not a value of the space
    trial, config = study.ask()
    assert config_key(config) not in times
    assert len(differing(config, best)) == 1, (config, best)
    study.tell_ok(trial, 0.5)
    assert study.study.best_value == 0.5


def test_failed_history_counts_as_known_but_not_as_best() -> None:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    good, bad = SPACE.enumerate(LIMITS)[:2]
    study = SearchStudy.create("failed", SPACE, LIMITS, "local", seed=1, budget=8)
    assert study.add_history(good, 2.0) and study.add_history(bad, None)
    states = sorted(t.state.name for t in study.study.get_trials())
    assert states == ["COMPLETE", "PRUNED"]
    assert study.study.best_value == 2.0


def test_the_grid_sampler_asks_every_valid_config_once_and_never_stops_the_study() -> None:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    space = get_spec("rmsnorm").space
    valid = {config_key(c) for c in space.enumerate(LIMITS)}
    study = SearchStudy.create("grid", space, LIMITS, "grid", seed=0, budget=len(valid))
    asked = []
    for _ in range(space.total(LIMITS.vendor)):  # the whole grid, invalid combinations included
        trial, config = study.ask()
        asked.append(config_key(config))
        if asked[-1] in valid:
            study.tell_ok(trial, 1.0 + len(asked))
        else:
            study.tell_bad(trial, "breaks a constraint")
    assert len(set(asked)) == len(asked) and valid <= set(asked)
