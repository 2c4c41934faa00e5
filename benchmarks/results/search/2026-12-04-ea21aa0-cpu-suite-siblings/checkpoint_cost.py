"""What a sharing checkpoint costs: `Prior.fit` for one H200 matmul study (the shipped spec's
whole space) over shared trials of random valid configs on the 35 other suite problems, after the
study's first fit (the valid configs' design rows are then cached). Median of 5, thread CPU time.
Run from the repo root: python benchmarks/results/search/2026-12-04-ea21aa0-cpu-suite-siblings/checkpoint_cost.py
"""

import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path.cwd() / "benchmarks"))
sys.path.insert(0, str(Path.cwd()))
from kernels import SUITES

from orchestrator.encoding import Encoding, valid_configs
from orchestrator.samplers.learned import Featurizer, Prior, PriorTrial
from search_spaces.registry import get_spec
from workers.device_table import lookup

spec, limits = get_spec("matmul"), lookup("H200").limits
configs = list(valid_configs(spec.space, limits))
problems = [spec.parse_problem(p) for p in SUITES["matmul"]]
params = Encoding(spec.space, limits, numeric_only=False).params
featurizer = Featurizer(params, problems[0], spec.features, configs)
rng = random.Random(0)
print(f"{len(configs)} valid configs, {len(problems) - 1} sibling problems")
for total in (300, 1_200, 4_800, 10_000, 20_000):
    trials = [
        PriorTrial(problems[1 + i % (len(problems) - 1)], "H200", rng.choice(configs), rng.random())
        for i in range(total)
    ]
    Prior.fit(trials[:50], problems[0], "H200", featurizer)  # the first fit caches the design
    times = []
    for _ in range(5):
        start = time.thread_time()
        Prior.fit(trials, problems[0], "H200", featurizer)
        times.append(time.thread_time() - start)
    print(f"{total:>6} shared trials: fit {1000 * statistics.median(times):6.1f} ms CPU")
