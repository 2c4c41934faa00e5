"""SearchStudy: configs in and out of Optuna, and a resumed study rebuilt from earlier results."""

from __future__ import annotations

import optuna
from optuna.trial import Trial

from orchestrator.study.samplers import startup_trials
from orchestrator.study.search import SearchStudy
from search_spaces import config_key, get_spec
from workers.device_table import lookup

SPACE = get_spec("matmul").space
LIMITS = lookup("H200").limits


def steps(a: dict[str, object], b: dict[str, object]) -> int:
    """Index steps between two configs of SPACE (as `local` counts them; flags are ordered)."""
    return sum(
        abs(p.values.index(a[p.name]) - p.values.index(b[p.name]))
        for p in SPACE.params_for(LIMITS.vendor)
    )


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
    # A move of one parameter from the best, repaired where it breaks a rule (num_warps 2 -> 4
    # takes BLOCK_M 16 -> 32 with it): nearer the best than any other config of the history.
    assert steps(config, best) <= 2, (config, best)
    assert all(steps(config, best) < steps(config, c) for c in configs[1:]), config
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


def test_enqueue_skips_params_any_trial_has_as_optunas_skip_if_exists_does() -> None:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    configs = SPACE.enumerate(LIMITS)[::53][:40]
    ours = SearchStudy.create("ours", SPACE, LIMITS, "random", seed=0, budget=40)
    ref = SearchStudy.create("ref", SPACE, LIMITS, "random", seed=0, budget=40)
    for s in (ours, ref):
        s.add_history(configs[0], 1.0)  # a trial from history
    # Queued twice, in history, and asked (then queued again): each is asked once.
    sequence = [configs[1], configs[2], configs[1], configs[0], configs[3]]
    for config in sequence:
        assert ours.enqueue(config)
        ref.study.enqueue_trial(ref.encoding.encode(config) or {}, skip_if_exists=True)
    asked = ours.ask()[1]
    ref.ask()
    for config in [asked, configs[4], configs[3]]:
        ours.enqueue(config)
        ref.study.enqueue_trial(ref.encoding.encode(config) or {}, skip_if_exists=True)

    waiting = ref.study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    assert ours.queued == len(waiting) == 3  # configs 2, 3 and 4; 1 was asked
    for _ in waiting:  # asked in the order Optuna's queue gives them
        assert ours.ask()[1] == ref.ask()[1]
    assert ours.queued == 0
    assert ours.enqueue({**configs[0], "BLOCK_K": 16}) is False  # outside the space


def test_a_warm_start_of_hundreds_of_configs_enqueues_in_well_under_a_second() -> None:
    import time

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    configs = SPACE.enumerate(LIMITS)[:400]
    study = SearchStudy.create("warm", SPACE, LIMITS, "local", seed=0, budget=400)
    t0 = time.process_time()  # CPU time: other processes on the machine do not count
    for config in configs + configs:
        study.enqueue(config)
    assert time.process_time() - t0 < 0.5  # Optuna's own check: tens of seconds
    assert study.queued == len(configs)


def test_asks_of_the_local_sampler_are_optunas_asks_made_in_one_write() -> None:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    configs = SPACE.enumerate(LIMITS)
    ours = SearchStudy.create("twin", SPACE, LIMITS, "local", seed=3, budget=60)
    ref = SearchStudy.create("twin", SPACE, LIMITS, "local", seed=3, budget=60)
    for s in (ours, ref):
        s.add_history(configs[5], 2.0)
    ours.enqueue(configs[900])  # a queued config is asked first, as from Optuna's queue
    ref.study.enqueue_trial(ref.encoding.encode(configs[900]) or {})
    pending: list[tuple[Trial, Trial]] = []
    for i in range(60):
        a = ours.ask()[0]
        b = ref.study.ask(fixed_distributions=ref._distributions)
        assert (a.number, a.params) == (b.number, b.params)
        assert a.distributions == b.distributions
        pending.append((a, b))
        while len(pending) > i % 4:  # some told later, some pruned
            a, b = pending.pop(0)
            if i % 5 == 0:
                ours.tell_bad(a, "no valid time")
                ref.tell_bad(b, "no valid time")
            else:
                ours.tell_ok(a, 1.0 + (i * 31) % 7)
                ref.tell_ok(b, 1.0 + (i * 31) % 7)
    stored = ours.study.get_trials(deepcopy=False)[-1].distributions
    assert all(stored[n] is d for n, d in ours._distributions.items())  # shared, not copied
    got = [(t.number, t.state, t.params, t.value) for t in ours.study.get_trials()]
    assert got == [(t.number, t.state, t.params, t.value) for t in ref.study.get_trials()]
