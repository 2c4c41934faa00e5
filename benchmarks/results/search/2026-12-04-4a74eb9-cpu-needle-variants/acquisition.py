"""benchmarks/search.py with `learned`'s EI pick scored by another acquisition over the same GP.

Usage (repo root): ACQ=ts|lcb SCALE=S PYTHONPATH=$PWD OPENBLAS_NUM_THREADS=1 \
    python3 benchmarks/results/search/2026-12-04-4a74eb9-cpu-needle-variants/acquisition.py SEARCH.PY-ARGS
ts: Thompson sampling from the marginals, the lowest of mean + S * sd * N(0, 1);
lcb: the lowest of mean - S * sd.
"""

import os
import sys

sys.path.insert(0, ".")

import numpy as np

import orchestrator.samplers.learned as learned
from benchmarks.search import main

MODE = os.environ.get("ACQ", "ts")
SCALE = float(os.environ.get("SCALE", "1"))


def acquisition(self, done, pending, candidates):  # type: ignore[no-untyped-def]
    fit = self._fit(done)
    train, resid, inverse = fit.train, fit.resid, fit.inverse
    if pending:
        train, resid, inverse = self._believe(fit, np.array(pending, dtype=int))
    mean, sd = self._predict(train, resid, inverse, candidates, fit)
    mean += fit.c + fit.a * self._mu0[candidates]
    if MODE == "ts":
        return -(mean + SCALE * sd * self._rng.standard_normal(mean.size))
    return -(mean - SCALE * sd)


learned.LearnedSampler._acquisition = acquisition
main(sys.argv[1:])
