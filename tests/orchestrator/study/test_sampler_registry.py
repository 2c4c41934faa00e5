"""The sampler registry: built-ins, a sampler installed through the ``tunefleet.samplers``
entry-point group (a real dist-info on sys.path), and the checks a job spec goes through."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest

from orchestrator.errors import JobSpecError
from orchestrator.run.jobs import JobSpec
from orchestrator.study import samplers
from orchestrator.study.loop import Answer, Study
from orchestrator.study.search import SearchStudy
from search_spaces.registry import get_spec
from search_spaces.space import config_key
from workers.device_table import lookup

TOY_MODULE = '''
"""A toy sampler a team ships in its own package: the space's valid configs in order."""

import optuna

from orchestrator.study.samplers import SamplerEntry


class InOrder(optuna.samplers.BaseSampler):
    def __init__(self, points):
        self._points = list(points)

    def infer_relative_search_space(self, study, trial):
        return {}

    def sample_relative(self, study, trial, search_space):
        return {}

    def sample_independent(self, study, trial, name, dist):
        asked = len(study.get_trials(deepcopy=False)) - 1
        return self._points[asked % len(self._points)][name]


def fits(space, limits):
    return None if len(space.params_for(limits.vendor)) < 20 else "too many parameters"


ENTRY = SamplerEntry(
    "toy",
    lambda context: InOrder(context.encoding.valid_params()),
    "the valid configs in order",
    fits=fits,
)
'''


def install(folder: Path, entry_points: str) -> None:
    """A distribution as pip leaves it: a dist-info with METADATA and entry_points.txt."""
    info = folder / "toy_sampler-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-sampler\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[tunefleet.samplers]\n" + entry_points)


@pytest.fixture
def on_path(tmp_path: Path) -> Iterator[Path]:
    """``tmp_path`` on sys.path for the test."""
    sys.path.insert(0, str(tmp_path))
    try:
        yield tmp_path
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("toy_sampler", None)


@pytest.fixture
def toy_plugin(on_path: Path) -> Path:
    """``toy`` installed through the entry-point group, and ``broken``, whose module is gone."""
    (on_path / "toy_sampler.py").write_text(TOY_MODULE)
    install(on_path, "toy = toy_sampler:ENTRY\nbroken = no_such_module:ENTRY\n")
    return on_path


def test_builtins_are_listed_default_first_with_their_help() -> None:
    assert samplers.names() == ["learned", "cmaes", "gp", "grid", "local", "random", "tpe"]
    assert (
        JobSpec.from_mapping(
            {"kernel": "matmul", "problems": ["M=64,N=64,K=64,dtype=float16"]}
        ).sampler
        == samplers.DEFAULT
    )
    text = samplers.help_text()
    assert all(f"{n}: " in text for n in samplers.names())


def test_an_unknown_sampler_is_refused_in_one_line_naming_the_choices() -> None:
    with pytest.raises(JobSpecError) as info:
        JobSpec.from_mapping(
            {"kernel": "matmul", "problems": ["M=64,N=64,K=64,dtype=float16"], "sampler": "x"}
        )
    assert str(info.value).startswith("unknown sampler 'x'; choose one of learned, cmaes")
    assert "\n" not in str(info.value)


def test_a_sampler_installed_through_the_entry_point_group_runs_through_study(
    toy_plugin: Path,
) -> None:
    assert "toy" in samplers.names()
    assert "toy: the valid configs in order" in samplers.help_text()
    spec = JobSpec.from_mapping(
        {
            "kernel": "matmul",
            "problems": ["M=64,N=64,K=64,dtype=float16"],
            "sampler": "toy",
            "trials": 4,
        }
    )
    space, limits = get_spec("matmul").space, lookup("H200").limits
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    search = SearchStudy.create("toy-study", space, limits, spec.sampler, 0, spec.trials)
    study = Study(search, space, limits, spec.trials)
    proposed = []
    while study.wants():
        config = study.propose(10)
        assert config is not None
        proposed.append(config_key(config))
        study.tell(config, Answer(1.0))
    first = [config_key(c) for c in list(space.iter_valid(limits))[:4]]
    assert proposed == first


def test_register_adds_a_sampler_for_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(samplers, "_registered", {})
    entry = samplers.register(
        "seeded-random",
        lambda c: optuna.samplers.RandomSampler(seed=c.seed + 1),
        help="random with another seed",
    )
    assert samplers.get("seeded-random") is entry and "seeded-random" in samplers.names()
    space, limits = get_spec("matmul").space, lookup("H200").limits
    sampler = entry.make(samplers.SamplerContext(0, 5, entry.encoding(space, limits)))
    assert isinstance(sampler, optuna.samplers.RandomSampler)


def test_a_plug_in_that_does_not_import_breaks_only_itself(toy_plugin: Path) -> None:
    assert {"toy", "broken"} <= set(samplers.names())
    with pytest.raises(JobSpecError, match=r"sampler entry point 'broken' .* does not import"):
        samplers.get("broken")
    assert samplers.get("local").name == "local" and samplers.get("toy").name == "toy"
    assert "broken: unavailable (" in samplers.help_text()
