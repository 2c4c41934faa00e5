"""The search benchmark's core (benchmarks/search.py) on tiny synthetic landscapes."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from optuna.distributions import BaseDistribution, IntDistribution
from optuna.samplers import BaseSampler, RandomSampler
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

from orchestrator.run.warm_start import WARM_NEAREST_TOP
from search_spaces.registry import get_spec
from search_spaces.space import (
    Constraint,
    DeviceLimits,
    Param,
    ParamKind,
    Space,
    Vendor,
    config_key,
)
from tests.benchmark_script import BENCHMARKS, load
from tests.orchestrator.scripted import Scripted
from workers.landscape import Landscape, LandscapeResult, read_landscape, write_landscape
from workers.measurement import Outcome

bench_mod = load("search")


def _landscape(path: Path, times: Mapping[tuple[int, int], float], kernel: str = "toy") -> Path:
    results = [
        LandscapeResult({"a": a, "b": b}, Outcome.OK, t) for (a, b), t in sorted(times.items())
    ]
    return write_landscape(
        path, Landscape(kernel, "v0", {"n": 1}, {"name": "Toy GPU", "vendor": "nvidia"}, results)
    )


def _fixed(points: Sequence[dict]) -> Any:
    return lambda c: Scripted(c.encoding.distributions(), points)


def test_random_search_reaches_the_known_optimum(tmp_path: Path) -> None:
    times = {(a, b): 1.0 + a + 10 * b for a in range(1, 6) for b in (0, 1)}  # optimum at (1, 0)
    bench = bench_mod.load_bench(_landscape(tmp_path / "toy.json", times))
    assert (bench.size, bench.optimum, bench.constrained) == (10, 2.0, False)
    runs = [
        bench_mod.run_seed(bench, *bench_mod.sampler_table()["random"], seed=s, batch=1)
        for s in range(5)
    ]
    for run in runs:
        assert run.trace[-1] == 2.0  # stops once the optimum is found
        assert len(run.trace) == len(set(run.trace)) <= 10  # a config costs one trial, once
    row = bench_mod.summarize(bench, "random", runs, 1.0)
    assert row["trials_to_2pct"]["reached"] == 5
    assert row["trials_to_2pct"]["median"] <= 10
    assert set(row["best_ratio_after"]) == {"5pct", "10pct", "25pct"}
    # Within 2% of 2.0: only (1, 0); within 5%: (1, 0) too (3.0 for the next); 11/2 draws.
    assert row["near_optimum"]["2pct"] == {"configs": 1, "random_expected_trials": 5.5}
    assert row["near_optimum"]["5pct"]["configs"] == 1


def test_near_optimum_counts_configs_within_each_threshold(tmp_path: Path) -> None:
    times = {(1, 0): 1.0, (2, 0): 1.015, (3, 0): 1.04, (4, 0): 1.2}
    bench = bench_mod.load_bench(_landscape(tmp_path / "toy.json", times))
    assert bench_mod.near_optimum(bench) == {
        "2pct": {"configs": 2, "random_expected_trials": round(5 / 3, 1)},
        "5pct": {"configs": 3, "random_expected_trials": 1.2},
    }


def test_a_seed_that_never_gets_there_counts_as_the_whole_space(tmp_path: Path) -> None:
    assert bench_mod.trials_to([5.0, None, 3.0], 1.02, 10) == 10
    assert bench_mod.trials_to([5.0, None, 1.0], 1.02, 10) == 3
    bench = bench_mod.load_bench(_landscape(tmp_path / "toy.json", {(1, 0): 1.0, (2, 0): 2.0}))
    never = bench_mod.SeedRun([2.0], asks=1, rejected=0, cached=0, drawn=0, wall_s=0.0)
    row = bench_mod.summarize(bench, "x", [never, never], 1.0)
    assert row["trials_to_2pct"] == {"median": 2.0, "p90": 2.0, "reached": 0}
    assert row["best_ratio_after"]["25pct"]["median"] == 2.0
    none_ok = bench_mod.SeedRun([None], asks=1, rejected=0, cached=0, drawn=0, wall_s=0.0)
    assert bench_mod.summarize(bench, "x", [none_ok], 1.0)["best_ratio_after"]["5pct"] == {
        "median": None,
        "p90": None,
    }


def test_absent_combination_costs_a_trial_and_duplicates_are_free(tmp_path: Path) -> None:
    # Observed space a in {1, 2}, b in {0, 1}; (2, 1) is absent from the file.
    path = _landscape(tmp_path / "toy.json.gz", {(1, 0): 3.0, (1, 1): 2.0, (2, 0): 1.0})
    bench = bench_mod.load_bench(path)
    absent, dup, opt = {"a": 1, "b": 1}, {"a": 0, "b": 0}, {"a": 1, "b": 0}
    run = bench_mod.run_seed(bench, _fixed([absent, dup, dup, opt]), False, seed=0, batch=1)
    assert run.trace == [None, 3.0, 1.0]  # the invalid combination took trial 1
    assert (run.asks, run.cached, run.rejected) == (4, 1, 0)
    assert bench_mod.trials_to(run.trace, bench.optimum * 1.02, bench.size) == 3


def test_constraint_breaking_configs_are_rejected_before_a_trial() -> None:
    space = Space(
        (Param("a", (1, 2, 3), ParamKind.INT), Param("b", (1, 2), ParamKind.INT)),
        (
            Constraint(
                "small", "a*b <= 3", ("a", "b"), lambda c, _l: int(c["a"]) * int(c["b"]) <= 3
            ),
        ),
    )
    limits = DeviceLimits(Vendor.NVIDIA, "Toy GPU", "x", 0, 0, 32, 0)
    times = {'{"a":1,"b":1}': 3.0, '{"a":2,"b":1}': 2.0, '{"a":3,"b":1}': 1.0, '{"a":1,"b":2}': 4.0}
    bench = bench_mod.Bench("toy", True, space, limits, times, True, 4, 1.0)
    points = [{"a": 2, "b": 1}, {"a": 1, "b": 0}, {"a": 2, "b": 0}]  # (3, 2) breaks the rule
    run = bench_mod.run_seed(bench, _fixed(points), False, seed=0, batch=2)
    assert run.trace == [2.0, 1.0]  # one batch of 2 new configs, told in ask order
    assert run.rejected == 1


def test_cli_json_on_a_landscape_of_an_unshipped_kernel(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    times = {(a, b): 1.0 + abs(a - 3) + b for a in range(1, 6) for b in (0, 1)}
    path = _landscape(tmp_path / "toy.json", times)
    bench_mod.main(
        ["--landscape", str(path), "--sampler", "random", "local", "--seeds", "3", "--json"]
    )
    rows = json.loads(capsys.readouterr().out)["results"]
    assert [r["sampler"] for r in rows] == ["random", "local"]
    for row in rows:
        assert row["space"] == 10 and row["space_kind"] == "observed" and row["real"]
        assert 1 <= row["trials_to_2pct"]["median"] <= row["trials_to_2pct"]["p90"] <= 10
        assert math.isclose(row["best_ratio_after"]["25pct"]["p90"], 1.0, rel_tol=0.5)


def _toy(path: Path, n: int, best: tuple[int, int], kernel: str = "toy") -> Path:
    results = [
        LandscapeResult({"a": a, "b": b}, Outcome.OK, 1.0 if (a, b) == best else 2.0 + a + b)
        for a in range(3)
        for b in range(3)
    ]
    return write_landscape(
        path, Landscape(kernel, "v0", {"n": n}, {"name": "Toy GPU", "vendor": "nvidia"}, results)
    )


def test_warm_start_takes_the_nearest_other_problems_winners(tmp_path: Path) -> None:
    own = _toy(tmp_path / "n1.json", 1, (0, 0))
    near = _toy(tmp_path / "n2.json", 2, (1, 2))
    far = _toy(tmp_path / "n64.json", 64, (2, 1))
    other_kernel = _toy(tmp_path / "x.json", 2, (2, 2), kernel="other")
    warm = bench_mod.warm_configs(own, [far, other_kernel, own, near])
    # The winners, nearest first; then the nearest's next fastest (2 + a + b: (0, 0) first) up
    # to its WARM_NEAREST_TOP fastest, which leaves out only its slowest, (2, 2).
    assert WARM_NEAREST_TOP == 8
    assert warm[:3] == [{"a": 1, "b": 2}, {"a": 2, "b": 1}, {"a": 0, "b": 0}]
    assert sorted((c["a"], c["b"]) for c in warm) == [
        (a, b) for a in range(3) for b in range(3) if (a, b) != (2, 2)
    ]


def test_warm_rows_are_held_to_the_warm_target() -> None:
    row = {"space": 1000, "sampler": "local", "trials_to_2pct": {"median": 30, "p90": 100}}
    assert bench_mod.meets_target(row)
    assert not bench_mod.meets_target({**row, "sampler": "local+warm"})
    assert bench_mod.meets_target(
        {**row, "sampler": "local+warm", "trials_to_2pct": {"median": 20, "p90": 999}}
    )


def test_the_learned_table_marks_a_target_whose_rows_did_not_run_with_a_dash() -> None:
    from benchmarks.search_prior import learned_table

    def row(sampler: str, median: float, p90: float) -> dict[str, object]:
        return {
            "landscape": "l",
            "space": 100,
            "sampler": sampler,
            "trials_to_2pct": {"median": median, "p90": p90},
        }

    cold = learned_table([row("local", 20, 40), row("learned", 10, 30)])
    line = next(x for x in cold.splitlines() if x.startswith("| l |"))
    assert line.startswith("| l | 100 | - |") and line.endswith("| 0.50 | yes | - | - | yes |")
    near = {"near_optimum": {"2pct": {"configs": 3, "random_expected_trials": 25.2}}}
    hard = learned_table([{**row("local", 20, 40), **near}, row("learned", 10, 30)])
    assert next(x for x in hard.splitlines() if x.startswith("| l |")).startswith(
        "| l | 100 | 3 (25.2) |"
    )
    assert "prior target on 0 of 0" in cold and "no-prior target on 1 of 1" in cold
    rows = [row("local", 20, 40), row("learned", 30, 30), row("learned+prior", 3, 9)]
    both = learned_table([*rows, row("learned+sparse", 6, 9)])
    assert next(x for x in both.splitlines() if x.startswith("| l |")).endswith(
        "| 1.50 | no | yes | no | no |"
    )


H200_4096 = BENCHMARKS / "landscapes" / "h200" / "matmul_M4096_N4096_K4096_bfloat16.json.gz"


def _matmul_landscape(path: Path, version: str) -> Path:
    """The recorded 4096^3 H200 landscape, relabelled with kernel version ``version``."""
    recorded = read_landscape(H200_4096)
    return write_landscape(
        path,
        Landscape(recorded.kernel, version, recorded.problem, recorded.device, recorded.results),
    )


def test_an_older_spec_versions_landscape_searches_the_spec_space_cut_to_its_configs(
    tmp_path: Path,
) -> None:
    spec = get_spec("matmul")
    limits = bench_mod.find("NVIDIA H200").limits
    old = bench_mod.load_bench(_matmul_landscape(tmp_path / "old.json.gz", "older"))
    assert (old.size, old.kind, old.constrained) == (1176, "spec, file's configs", True)
    assert old.space.count(limits) == 1176 < spec.space.count(limits)
    assert all(old.space.violation(json.loads(key), limits) is None for key in old.times)
    # A config of the spec's space that the file lacks is rejected for free, never a trial.
    names = [p.name for p in old.space.params_for(limits.vendor)]
    cut = ({n: c[n] for n in names} for c in spec.space.iter_valid(limits))
    absent = next(c for c in cut if config_key(c) not in old.times)
    assert old.space.violation(absent, limits) is not None
    assert bench_mod.warm_configs(H200_4096, [])[0] == {
        n: spec.default_for(limits)[n] for n in names
    }


def test_a_landscape_of_the_shipped_spec_version_searches_the_whole_spec_space(
    tmp_path: Path,
) -> None:
    spec = get_spec("matmul")
    limits = bench_mod.find("NVIDIA H200").limits
    recorded = read_landscape(H200_4096)
    results = [
        LandscapeResult({**spec.default_for(limits), **r.config}, r.outcome, r.time_ms)
        for r in recorded.results
    ]
    path = write_landscape(
        tmp_path / "cur.json.gz",
        Landscape("matmul", spec.version_hash(), recorded.problem, recorded.device, results),
    )
    current = bench_mod.load_bench(path)
    assert (current.size, current.kind) == (spec.space.count(limits), "spec")


class _RecordedLocal(BaseSampler):
    """``local`` as it was when the H200 suite was first recorded (one-step neighbours of the best,
    in random order), to check that the cut space replays the recorded numbers."""

    def __init__(self, distributions: Mapping[str, BaseDistribution], seed: int, startup: int):
        self._distributions = dict(distributions)
        self._rng = random.Random(seed)
        self._random = RandomSampler(seed=seed)
        self._startup = startup

    def infer_relative_search_space(
        self, study: Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        return dict(self._distributions)

    def _neighbours(self, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for name, dist in self._distributions.items():
            if isinstance(dist, IntDistribution):
                steps = [params[name] + d for d in (-1, 1)]
                others = [v for v in steps if dist.low <= v <= dist.high]
            else:
                others = [v for v in getattr(dist, "choices", ()) if v != params[name]]
            out.extend({**params, name: v} for v in others)
        self._rng.shuffle(out)
        return out

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        trials = study.get_trials(deepcopy=False)
        done = [t for t in trials if t.state is TrialState.COMPLETE and t.value is not None]
        if len(done) < self._startup:
            return {}
        names = sorted(self._distributions)
        seen = {tuple(t.params.get(n) for n in names) for t in trials if t.number != trial.number}
        for best in sorted(done, key=lambda t: float(t.value or 0.0)):
            for candidate in self._neighbours(best.params):
                if tuple(candidate[n] for n in names) not in seen:
                    return candidate
        return {}

    def sample_independent(
        self, study: Study, trial: FrozenTrial, name: str, dist: BaseDistribution
    ) -> Any:
        return self._random.sample_independent(study, trial, name, dist)


def test_the_cut_space_replays_the_numbers_recorded_in_the_older_space() -> None:
    """benchmarks/results/search/ (before the split-K rule widened the space): ``local`` on
    4096^3, 20 seeds, batch 4: trials to 2% median 28, p90 45.1."""
    bench = bench_mod.load_bench(H200_4096)

    def factory(c: Any) -> BaseSampler:
        return _RecordedLocal(
            c.encoding.distributions(), c.seed, bench_mod.startup_trials(c.budget)
        )

    runs = [bench_mod.run_seed(bench, factory, False, seed) for seed in range(20)]
    row = bench_mod.summarize(bench, "local", runs, 1.0)
    assert row["trials_to_2pct"] == {"median": 28.0, "p90": 45.1, "reached": 20}


def test_the_sparse_benchmark_prior_is_locals_first_trials_on_the_other_problems(
    landscapes: dict[str, list[Path]],
) -> None:
    small, large = (str(p) for p in landscapes["NVIDIA H200"])
    target = dict(read_landscape(large).problem)
    prior = bench_mod.sparse_prior("matmul", target, [small, large], False, 2, 4, 12)
    times = {config_key(r.config): r.time_ms for r in read_landscape(small).results}
    assert 0 < len(prior) <= 12 and all(t.problem != target for t in prior)
    assert len({config_key(t.config) for t in prior}) == len(prior)
    assert all(times[config_key(t.config)] == t.time_ms for t in prior)
    assert bench_mod.sparse_prior("matmul", target, [small], False, 2, 4, 12) == prior


def test_the_suite_mode_shares_the_siblings_trials_after_each_batch(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """benchmarks/search_suite.py: two recorded H200 landscapes as one job. With the siblings'
    trials shared, each study's first batch (before anything was shared) is the unshared job's,
    a later trial differs; the CLI gives a row per landscape and mode."""
    suite = load("search_suite")
    paths = [
        str(BENCHMARKS / "landscapes" / "h200" / f"matmul_M{m}_N4096_K4096_dtypebfloat16.json.gz")
        for m in (16, 128)
    ]
    benches = [bench_mod.load_bench(p) for p in paths]
    alone, sharing = (suite.run_job(benches, share, 1, 4, 24) for share in (False, True))
    assert all(len(t) == 24 for t in alone + sharing)
    for a, s in zip(alone, sharing, strict=True):
        assert a[:4] == s[:4]
    assert alone != sharing
    suite.main(["--landscape", *paths, "--seeds", "2", "--trials", "16", "--json"])
    rows = json.loads(capsys.readouterr().out)["results"]
    assert sorted((r["landscape"][:11], r["sampler"]) for r in rows) == [
        (name, mode)
        for name in ("matmul_M128", "matmul_M16_")
        for mode in ("learned", "learned+siblings")
    ]
    for row in rows:
        assert 1 <= row["trials_to_2pct"]["median"] <= row["trials_to_2pct"]["p90"] <= row["space"]
        assert row["best_ratio_at_end"]["worst"] >= row["best_ratio_at_end"]["median"] >= 1.0
