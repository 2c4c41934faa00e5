"""Variants of the `learned` sampler, replayed: python exp.py VARIANT cold|prior SEEDS LANDSCAPE...

Each landscape runs SEEDS seeds of benchmarks/search.py's run_seed (batch 4), cold or with the
leave-one-problem-out prior (every other landscape of the same kernel); printed per landscape: the
median and p90 of trials to within 2% of the optimum, then the mean of the medians. VARIANTS says
which module constants of orchestrator/samplers/learned.py each name sets.
"""

import glob
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import optuna

import orchestrator.samplers.learned as L
from benchmarks import search as S

VARIANTS = {
    "base": {},
}
VARIANTS.update(getattr(L, "_EXPERIMENT_VARIANTS", {}))


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
    medians, p90s, start = [], [], time.time()
    with ProcessPoolExecutor(2) as pool:
        for p in paths:
            kind = os.path.basename(p).split("_")[0]
            same = [q for q in every if os.path.basename(q).split("_")[0] == kind]
            a = np.array(list(pool.map(one, [(name, p, mode, s, same) for s in range(seeds)])))
            medians.append(float(np.median(a)))
            p90s.append(float(np.percentile(a, 90)))
            print(
                f"{name} {mode} {os.path.basename(p)[:-8]} {np.median(a):g} {np.percentile(a, 90):.1f}",
                flush=True,
            )
    m, q = np.array(medians), np.array(p90s)
    lim = (5, 15) if mode == "prior" else (20, 50)
    met = int(((m <= lim[0]) & (q <= lim[1])).sum())
    print(
        f"{name} {mode} mean-of-medians {m.mean():.2f} median-of-medians {np.median(m):g} met {met}/{len(m)} wall {time.time() - start:.0f}s",
        flush=True,
    )
