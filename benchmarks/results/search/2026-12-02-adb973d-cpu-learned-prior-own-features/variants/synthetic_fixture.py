"""Trials to the optimum on the synthetic H200 test landscapes (tests/orchestrator/landscapes), seeds 0-3:
cold, then with the other problem's trials as the prior, for each PRIOR_BLEND given: python3 synthetic_fixture.py BLEND...
(from a tree's root, PYTHONPATH = that root)."""

import pathlib
import sys
import tempfile

sys.path.insert(0, "tests/orchestrator/landscapes")
sys.path.insert(0, "tests/orchestrator")
import test_learned_sampler as T
from make_landscapes import write_all

import orchestrator.samplers.learned as L
from workers.landscape import read_landscape

ls = write_all(pathlib.Path(tempfile.mkdtemp()))
small, large = (read_landscape(p) for p in ls[T.H200])
for blend in [float(a) for a in sys.argv[1:]]:
    L.PRIOR_BLEND = blend
    for seed in range(4):
        print(
            blend,
            seed,
            len(T._replay(large, seed=seed)),
            len(T._replay(large, seed=seed, prior=T._prior(small))),
            len(T._replay(small, seed=seed, prior=T._prior(large))),
        )
