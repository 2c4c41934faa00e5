"""Study: one study's loop without Ray or a database (asks, rejects, dedupe, reuse, warm start,
tell, the stuck-sampler draw)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import optuna

from orchestrator.study.encoding import Encoding
from orchestrator.study.loop import Answer, Study
from orchestrator.study.search import IDLE_LIMIT, SearchStudy
from search_spaces import Config, Constraint, DeviceLimits, Param
from search_spaces.space import ParamKind, Space, Vendor, config_key
from tests.orchestrator.scripted import Scripted

#: a in 1..4, b in 1..2 with a * b <= 4: 6 valid configs of 8.
SPACE = Space(
    (Param("a", (1, 2, 3, 4), ParamKind.INT), Param("b", (1, 2), ParamKind.INT)),
    (Constraint("small", "a*b <= 4", ("a", "b"), lambda c, _l: int(c["a"]) * int(c["b"]) <= 4),),
)
LIMITS = DeviceLimits(Vendor.NVIDIA, "Toy GPU", "x", 0, 0, 32, 0)


def cfg(a: int, b: int) -> Config:
    return {"a": a, "b": b}


def encoded(config: Config) -> dict[str, Any]:
    """Optuna params of ``config`` (ordered parameters are indices)."""
    return {"a": (1, 2, 3, 4).index(int(config["a"])), "b": (1, 2).index(int(config["b"]))}


def make_study(configs: Sequence[Config], budget: int = 6, **kwargs: Any) -> Study:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    encoding = Encoding(SPACE, LIMITS, numeric_only=False)
    sampler = Scripted(encoding.distributions(), [encoded(c) for c in configs])
    search = SearchStudy(optuna.create_study(sampler=sampler), encoding, random.Random(0))
    return Study(search, SPACE, LIMITS, budget, **kwargs)


def states(study: Study) -> list[str]:
    return [t.state.name for t in study.search.study.get_trials()]


def test_a_constraint_breaker_is_rejected_before_it_is_proposed() -> None:
    study = make_study([cfg(3, 2), cfg(2, 2)])
    assert study.valid == 6
    assert study.propose(5) == cfg(2, 2)
    assert (study.asks, study.rejected, study.counted) == (2, 1, 0)
    assert states(study) == ["PRUNED", "RUNNING"]


def test_a_pending_config_is_joined_and_a_known_one_answered_from_the_study() -> None:
    study = make_study([cfg(1, 1), cfg(1, 1), cfg(2, 1), cfg(1, 1), cfg(4, 1)], budget=3)
    assert study.propose(5) == cfg(1, 1)
    assert study.propose(5) == cfg(2, 1)  # the second (1, 1) joined the pending one
    assert study.cached == 1 and len(study.pending[config_key(cfg(1, 1))]) == 2
    study.tell(cfg(1, 1), Answer(2.0, row=7))
    assert states(study)[:2] == ["COMPLETE", "COMPLETE"]  # both asks told the one measurement
    assert study.propose(5) == cfg(4, 1)  # (1, 1) again: answered from the study, no trial
    assert (study.cached, study.counted, study.measured) == (2, 1, 1)
    assert not study.wants()  # 1 counted + 2 pending = the budget
    study.tell(cfg(2, 1), Answer(None))
    study.tell(cfg(4, 1), Answer(1.5, row=9))
    assert study.finished() and study.best_ms == 1.5
    assert [(r.config, r.value, r.row) for r in study.ranked(5)] == [
        (cfg(4, 1), 1.5, 9),
        (cfg(1, 1), 2.0, 7),
    ]


def test_a_config_the_reuse_hook_knows_is_answered_and_counted_as_reused() -> None:
    asked: list[Config] = []

    def reuse(config: Config, key: str) -> Answer | None:
        asked.append(config)
        return Answer(3.0, row=1) if config == cfg(1, 1) else None

    study = make_study([cfg(1, 1), cfg(2, 1)], reuse=reuse)
    assert study.propose(5) == cfg(2, 1)
    assert asked == [cfg(1, 1), cfg(2, 1)]
    assert (study.counted, study.reused, study.measured) == (1, 1, 0)
    assert study.values[config_key(cfg(1, 1))] == 3.0 and study.rows[config_key(cfg(1, 1))] == 1


def test_warm_start_configs_come_first_unless_the_study_has_history() -> None:
    fresh = make_study([cfg(1, 1)])
    fresh.warm_start([cfg(4, 1), cfg(2, 2)])
    assert [fresh.propose(5), fresh.propose(5), fresh.propose(5)] == [
        cfg(4, 1),
        cfg(2, 2),
        cfg(1, 1),
    ]
    resumed = make_study([cfg(1, 1), cfg(3, 1)])
    resumed.restore([(cfg(2, 1), Answer(1.0, row=3), False), (cfg(1, 2), Answer(None), True)])
    resumed.warm_start([cfg(4, 1)])
    assert (resumed.counted, resumed.measured, resumed.reused) == (2, 1, 1)
    assert states(resumed) == ["COMPLETE", "PRUNED"]  # the history taught to the sampler
    assert resumed.propose(5) == cfg(1, 1)  # no warm start after a resume


def test_a_stuck_sampler_gets_unmeasured_configs_drawn_at_random_until_the_budget_is_spent() -> (
    None
):
    study = make_study([cfg(1, 1)], budget=5)
    proposed = []
    while study.wants():
        config = study.propose(IDLE_LIMIT + 10)
        assert config is not None
        proposed.append(config)
        study.tell(config, Answer(1.0 + len(proposed), row=len(proposed)))
    assert len({config_key(c) for c in proposed}) == 5 and study.search.drawn == 4
    assert all(SPACE.violation(c, LIMITS) is None for c in proposed)


def test_a_study_that_knows_every_valid_config_is_exhausted() -> None:
    study = make_study([cfg(1, 1)], budget=50)
    study.restore([(c, Answer(1.0, row=i), False) for i, c in enumerate(SPACE.iter_valid(LIMITS))])
    assert study.propose(5) is None and study.exhausted and study.finished()


def test_a_dropped_config_is_told_without_a_time_and_not_counted() -> None:
    study = make_study([cfg(1, 1), cfg(2, 1)])
    config = study.propose(5)
    assert config is not None
    study.drop(config)
    assert states(study) == ["PRUNED"] and study.counted == 0 and not study.pending


def one_class_below_two(config: Config) -> Config:
    """A toy equivalence: b changes nothing when a == 1 (5 classes of the 6 valid configs)."""
    return cfg(1, 1) if config["a"] == 1 else config


def test_configs_of_one_class_are_measured_once_as_its_representative() -> None:
    study = make_study([cfg(1, 2), cfg(1, 1), cfg(2, 1)], equivalent=one_class_below_two)
    assert study.propose(5) == cfg(1, 1)  # (1, 2) stands for its class
    study.tell(cfg(1, 1), Answer(2.0, row=1))
    assert study.propose(5) == cfg(2, 1)  # (1, 1) answered from (1, 2)'s measurement
    assert (study.counted, study.cached) == (1, 1)
    values = [t.value for t in study.search.study.get_trials() if t.state.name == "COMPLETE"]
    assert values == [2.0, 2.0]


def test_a_stuck_study_draws_one_config_per_class_and_is_exhausted_after_the_last() -> None:
    study = make_study([cfg(1, 2)] * 60, budget=50, equivalent=one_class_below_two)
    proposed = []
    while (config := study.propose(IDLE_LIMIT + 10)) is not None:
        proposed.append(config)
        study.tell(config, Answer(1.0 + len(proposed), row=len(proposed)))
    assert len(proposed) == 5 and cfg(1, 2) not in proposed
    assert study.exhausted and study.finished()


def test_restored_history_is_keyed_by_class() -> None:
    study = make_study([cfg(1, 1), cfg(2, 1)], equivalent=one_class_below_two)
    study.restore([(cfg(1, 2), Answer(3.0, row=7), False)])  # measured before classes existed
    assert study.values == {config_key(cfg(1, 1)): 3.0}
    assert study.propose(5) == cfg(2, 1) and study.cached == 1


def test_a_study_whose_sampler_asked_every_config_is_exhausted_without_idle_asks() -> None:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    search = SearchStudy.create("all", SPACE, LIMITS, "local", seed=0, budget=50)
    study = Study(search, SPACE, LIMITS, 50, equivalent=one_class_below_two)
    proposed = []
    while (config := study.propose(IDLE_LIMIT + 10)) is not None:
        proposed.append(config)
        study.tell(config, Answer(1.0 + len(proposed), row=len(proposed)))
    assert len(proposed) == 5 and study.exhausted and study.finished()
    # Six valid configs, one class of two: every one asked once, then the sampler says so
    # (the study stalled for IDLE_LIMIT asks of known or invalid configs before).
    assert study.asks <= 7
