"""Issue 23's suite mode: every landscape of a kernel searched at once, as the studies of one job,
with and without the siblings' trials shared, replayed on CPU.

Usage (repo root): python benchmarks/search_suite.py --landscape FILE [FILE ...] [--seeds 20]
    [--batch 4] [--trials 200] [--jobs 1] [--json]

One seed is one job per kernel: a study per landscape of that kernel (the product's
:class:`~orchestrator.study.loop.Study` and the ``learned`` sampler, built as search.py builds them,
with no database prior: a job on an empty database), all with the seed, in rounds: each study
proposes until ``--batch`` new configs are pending, then every study is told its configs' times
from its landscape. In the ``learned+siblings`` rows each ``ok`` time is then shared with the job's
other studies, as the job driver shares it (:meth:`orchestrator.study.search.SearchStudy.share`); the
``learned`` rows run the same job without sharing. A study stops after ``--trials`` trials or
when its space ends.

Per landscape over seeds: trials until the best is within 2% / 5% of the optimum (median, p90; a
seed that never gets there counts as the landscape's size) and the best after the study's trials
over the optimum (median, worst).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import optuna

from benchmarks.search import Bench, _cached_bench, best_after, new_study, trials_to
from orchestrator.study import samplers
from orchestrator.study.loop import Answer
from orchestrator.study.samplers.learned import PriorTrial
from search_spaces.space import Config, config_key

SAMPLER = "learned"
#: Row label -> whether the studies share their trials.
MODES = {SAMPLER: False, f"{SAMPLER}+siblings": True}
#: Asks one study may spend on one proposal before it counts as stuck.
MAX_ASKS = 10_000


def run_job(
    benches: Sequence[Bench], share: bool, seed: int, batch: int, trials: int
) -> list[list[float | None]]:
    """One job over ``benches`` (one kernel's landscapes); each study's trace of times in order."""
    entry = samplers.get(SAMPLER)
    studies = [new_study(b, entry.make, entry.numeric, seed, trials) for b in benches]
    traces: list[list[float | None]] = [[] for _ in benches]
    live = set(range(len(benches)))
    while live:
        told: list[tuple[int, PriorTrial]] = []
        for i in sorted(live):
            study, bench = studies[i], benches[i]
            pending: list[Config] = []
            while len(pending) < batch:
                config = study.propose(MAX_ASKS)
                if config is None:
                    break
                pending.append(config)
            if not pending:
                live.discard(i)
                continue
            for config in pending:
                value = bench.times.get(config_key(config))
                traces[i].append(value)
                study.tell(config, Answer(value))
                if value is not None:
                    told.append((i, PriorTrial(bench.problem, bench.device_class, config, value)))
        if share:
            for i, study in enumerate(studies):
                study.search.share([t for j, t in told if j != i])
    return traces


def _job(args: tuple[tuple[str, ...], bool, int, int, int]) -> list[list[float | None]]:
    paths, share, seed, batch, trials = args
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    return run_job([_cached_bench(p, False) for p in paths], share, seed, batch, trials)


def _stat(values: Sequence[float], q: float) -> float:
    return round(float(np.percentile(np.asarray(values, dtype=float), q)), 4)


def summarize(bench: Bench, mode: str, traces: Sequence[Sequence[float | None]]) -> dict[str, Any]:
    """One JSON row for ``bench``'s study over seeds."""
    row: dict[str, Any] = {
        "landscape": bench.name,
        "sampler": mode,
        "space": bench.size,
        "seeds": len(traces),
        "trials": max(len(t) for t in traces),
    }
    for pct in (2, 5):
        reached = [trials_to(t, bench.optimum * (1 + pct / 100), bench.size) for t in traces]
        row[f"trials_to_{pct}pct"] = {"median": _stat(reached, 50), "p90": _stat(reached, 90)}
    ratios = [best_after(t, len(t)) / bench.optimum for t in traces]
    row["best_ratio_at_end"] = {"median": _stat(ratios, 50), "worst": round(max(ratios), 4)}
    return row


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--landscape", nargs="+", required=True, type=Path)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--trials", type=int, default=200, help="trials per study at most")
    parser.add_argument("--jobs", type=int, default=1, help="processes running seeds")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.batch < 1 or args.trials < 1 or args.jobs < 1:
        parser.error("--seeds, --batch, --trials and --jobs must be at least 1")
    missing = [str(p) for p in args.landscape if not p.is_file()]
    if missing:
        parser.error(f"no such landscape file: {missing[0]}")
    by_kernel: dict[str, list[str]] = {}
    for path in args.landscape:
        by_kernel.setdefault(_cached_bench(str(path), False).kernel, []).append(str(path))
    work = [
        (tuple(paths), share, seed, args.batch, args.trials)
        for (paths, (mode, share), seed) in itertools.product(
            by_kernel.values(), MODES.items(), range(args.seeds)
        )
    ]
    with ProcessPoolExecutor(args.jobs) as pool:
        results = list(pool.map(_job, work, chunksize=1))
    rows = []
    for paths, (mode, share) in itertools.product(by_kernel.values(), MODES.items()):
        jobs = [
            r for w, r in zip(work, results, strict=True) if w[0] == tuple(paths) and w[1] == share
        ]
        for i, path in enumerate(paths):
            rows.append(summarize(_cached_bench(path, False), mode, [job[i] for job in jobs]))
    if args.json:
        print(json.dumps({"results": rows}, indent=1))
    for r in rows:
        t2, t5, end = r["trials_to_2pct"], r["trials_to_5pct"], r["best_ratio_at_end"]
        print(
            f"{r['landscape'][:44]:<44} {r['sampler']:<17} 2%: {t2['median']:g}/{t2['p90']:g}  "
            f"5%: {t5['median']:g}/{t5['p90']:g}  end: {end['median']:.3f}/{end['worst']:.3f}",
            file=sys.stderr,
        )


if __name__ == "__main__":
    main()
