"""Contract over the sampler registry: every registered sampler, driven by Study on a replayed
landscape (the synthetic H200 matmul of tests/orchestrator/landscapes), proposes only valid
configs, never one twice, and spends its budget."""

from __future__ import annotations

import random
from pathlib import Path

import optuna
import pytest

from orchestrator.study import samplers, search
from orchestrator.study.loop import Answer, Study
from orchestrator.study.search import SearchStudy
from search_spaces.registry import get_spec
from search_spaces.space import config_key
from tests.orchestrator.conftest import H200
from workers.device_table import lookup
from workers.landscape import read_landscape

BUDGET = 6


@pytest.mark.parametrize("name", samplers.names())
def test_every_registered_sampler_spends_its_budget_on_new_valid_configs(
    name: str, landscapes: dict[str, list[Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Draw after 3 idle asks (1 after the first draw), not 100: GP re-proposes rejected configs
    # of this sparse space, at a fraction of a second per ask.
    monkeypatch.setattr(search, "IDLE_LIMIT", 3)
    monkeypatch.setattr(search, "IDLE_LIMIT_AFTER_DRAW", 1)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    land = read_landscape(landscapes[H200][0])
    times = {config_key(r.config): r.time_ms for r in land.results}
    space, limits = get_spec("matmul").space, lookup(H200).limits
    entry = samplers.get(name)
    encoding = entry.encoding(space, limits)
    sampler = entry.make(samplers.SamplerContext(0, BUDGET, encoding))
    study = Study(
        SearchStudy(optuna.create_study(sampler=sampler), encoding, random.Random(0)),
        space,
        limits,
        BUDGET,
    )
    told: dict[str, float | None] = {}
    while study.wants():
        config = study.propose(50)
        assert config is not None, f"{name} stalled after {len(told)} configs"
        key = config_key(config)
        assert space.violation(config, limits) is None and key not in told
        told[key] = times.get(key)  # a config the landscape lacks has no valid time
        study.tell(config, Answer(told[key], row=len(told)))
    assert len(told) == study.counted == BUDGET and study.finished()
    ok = [v for v in told.values() if v is not None]
    assert study.best_ms == (min(ok) if ok else None)
