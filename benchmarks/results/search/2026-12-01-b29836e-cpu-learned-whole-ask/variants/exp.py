"""Variants of the `learned` sampler, replayed: python exp.py VARIANT cold|prior SEEDS LANDSCAPE...

Run from the root of a tree at commit b29836e with variants.patch applied (it adds the module
constants of orchestrator/samplers/learned.py the variants set; their defaults are the committed
behaviour). Each landscape runs SEEDS seeds of benchmarks/search.py's run_seed (batch 4), cold or
with the leave-one-problem-out prior (every other landscape of the same kernel); printed per
landscape: the median and p90 of trials to within 2% of the optimum, then the mean of the medians.
"""

import glob
import os
import sys
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import optuna

import orchestrator.samplers.learned as L
from benchmarks import search as S

VARIANTS = {
    "base": {},
    # cold
    "cd": {"COLD_DEFAULT": True},  # the spec default first, then 3 random configs
    "cd8": {"COLD_DEFAULT": True, "STARTUP": 8},
    "gei": {"MOVE_SCORE": "ei", "MOVE_SCORE_COLD": True},  # moves picked by the GP's EI
    "gmean": {"MOVE_SCORE": "mean", "MOVE_SCORE_COLD": True},  # ... by the GP's mean
    "t05": {"MOVE_TAU": 0.5},  # local's model weighted towards the best trials
    "t02": {"MOVE_TAU": 0.2},
    "t01": {"MOVE_TAU": 0.1},
    # with the prior
    "pmu0": {"PROBE_MIX": "mu0"},  # first batch: the prior's four best configs
    "pmix": {"PROBE_MIX": "mix"},  # alternating the prior's best and the problems' winners
    "pp3": {"PRIOR_PROBES": 3},
    "pp5": {"PRIOR_PROBES": 5},
    "sw1": {"PRIOR_SLOPE_WEIGHT": 1.0},  # trust own trials sooner
    "sw10": {"PRIOR_SLOPE_WEIGHT": 10.0},
    "res1": {"PRIOR_RESIDUAL": 1.0},
    "res025": {"PRIOR_RESIDUAL": 0.25},
    "pe2": {"PRIOR_EI_EVERY": 2},  # with a prior, every second proposal the EI pick
    "mei": {"MOVE_SCORE": "ei"},  # with a prior, moves picked by the model's EI
    "mmean": {"MOVE_SCORE": "mean"},
    "pm1": {"PRIOR_MOVES": 1.0},  # local's model shrunk towards the prior's additive model
    "pm5": {"PRIOR_MOVES": 5.0},
    "pm20": {"PRIOR_MOVES": 20.0},
}


def factory_for(name):
    def factory(c):
        for k, v in VARIANTS[name].items():
            setattr(L, k, v)
        return L.LearnedSampler(
            c.encoding,
            c.seed,
            problem=dict(c.problem) or None,
            device_class=c.device_class,
            features=c.kernel.features if c.kernel is not None else None,
            prior=c.prior,
            default=c.kernel.default_for(c.encoding.limits) if c.kernel is not None else None,
            startup=L.STARTUP,
        )

    return factory


def one(args):
    name, path, mode, seed, same = args
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    bench = S._cached_bench(path, False)
    prior = S._cached_prior(path, False, tuple(same)) if mode == "prior" else ()
    run = S.run_seed(bench, factory_for(name), False, seed, 4, 1.0, (), prior)
    return S.trials_to(run.trace, bench.optimum * 1.02, bench.size)


if __name__ == "__main__":
    name, mode, seeds, paths = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
    every = sorted(glob.glob("benchmarks/landscapes/h200/*.json.gz"))
    medians = []
    with ProcessPoolExecutor(1) as pool:
        for p in paths:
            kind = os.path.basename(p).split("_")[0]
            same = [q for q in every if os.path.basename(q).split("_")[0] == kind]
            a = np.array(list(pool.map(one, [(name, p, mode, s, same) for s in range(seeds)])))
            medians.append(float(np.median(a)))
            print(
                f"{name} {mode} {os.path.basename(p)[:-8]} {np.median(a):g} {np.percentile(a, 90):.1f}"
            )
    print(f"{name} {mode} mean-of-medians {np.mean(medians):.2f}")
