"""Seed 0 of `learned` with the leave-one-problem-out prior on the named H200 landscapes: each
trial's time over the landscape's optimum, in the order asked (first 16).

Usage (repo root): OPENBLAS_NUM_THREADS=1 python benchmarks/results/search/2026-12-04-d5bddf6-cpu-prior-probes/prior_trace.py NAME.json.gz ...
"""

import glob
import sys

sys.path.insert(0, ".")
from tests.benchmark_script import load

search = load("search")
L = "benchmarks/landscapes/h200/"
paths = tuple(sorted(glob.glob(L + "matmul_*.json.gz")))
for name in sys.argv[1:]:
    bench = search.load_bench(L + name)
    prior = search._cached_prior(L + name, False, paths)
    factory, numeric = search.sampler_table()["learned"]
    run = search.run_seed(bench, factory, numeric, seed=0, batch=4, prior=prior)
    ratios = [None if v is None else round(v / bench.optimum, 3) for v in run.trace]
    print(name[7:35], ratios[:16])
