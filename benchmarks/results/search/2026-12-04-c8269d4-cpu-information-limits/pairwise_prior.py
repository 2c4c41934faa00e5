"""benchmarks/search.py with learned's prior cost model given pairwise terms, for a probe.

Usage (repo root): VAR=base|pair|pair,blend=X PYTHONPATH=$PWD OPENBLAS_NUM_THREADS=1 \
    python3 benchmarks/results/search/2026-12-04-c8269d4-cpu-information-limits/pairwise_prior.py SEARCH.PY-ARGS

pair: the prior's ridge rows (orchestrator/samplers/learned.py ``_design``) gain the product of
every two parameter-value columns (what table 3 of limits.md calls the pairwise model);
blend=X sets ``PRIOR_BLEND`` (that model's weight against the per-config prior times; 0.2 shipped).
"""

import os
import sys

import numpy as np

sys.path.insert(0, ".")

import orchestrator.samplers.learned as learned
from benchmarks.search import main

shipped = learned._design


def pairwise_design(featurizer, configs, scaled):
    rows = shipped(featurizer, configs, scaled)
    values = sum(len(p.values) for p in featurizer.params)
    onehot = rows[:, 1 : 1 + values]  # after the intercept
    upper = np.triu_indices(values, 1)
    return np.hstack([rows, (onehot[:, :, None] * onehot[:, None, :])[:, upper[0], upper[1]]])


for item in filter(None, os.environ.get("VAR", "base").split(",")):
    if item == "pair":
        learned._design = pairwise_design
    elif item.startswith("blend="):
        learned.PRIOR_BLEND = float(item.removeprefix("blend="))
    elif item != "base":
        raise SystemExit(f"unknown VAR item {item}")
main(sys.argv[1:])
