"""Each trial of `learned` (no prior, batch 4) on one recorded landscape: its time over the optimum
and its config.

Usage (repo root): PYTHONPATH=$PWD OPENBLAS_NUM_THREADS=1 python3 \
    benchmarks/results/search/2026-12-04-4a74eb9-cpu-needle-variants/trace.py LANDSCAPE SEEDS
(LANDSCAPE: a file name under benchmarks/landscapes/h200/ without .json.gz; SEEDS: 0,1,...)
"""

import sys

sys.path.insert(0, ".")

from benchmarks.search import load_bench, run_seed, sampler_table

bench = load_bench(f"benchmarks/landscapes/h200/{sys.argv[1]}.json.gz")
factory, numeric = sampler_table()["learned"]
for seed in (int(s) for s in sys.argv[2].split(",")):
    run = run_seed(bench, factory, numeric, seed, batch=4)
    print(f"seed {seed}: {len(run.trace)} trials")
    best = float("inf")
    for i, (time, c) in enumerate(zip(run.trace, run.configs, strict=True), start=1):
        ratio = time / bench.optimum if time else float("inf")
        best = min(best, ratio)
        tile = f"{c['BLOCK_M']}x{c['BLOCK_N']}x{c['BLOCK_K']}"
        rest = f"g{c['GROUP_M']} sk{c['SPLIT_K']} s{c['num_stages']} w{c['num_warps']}"
        print(f"{i:3d} {ratio:6.3f} best {best:.3f}  {tile} {rest}")
