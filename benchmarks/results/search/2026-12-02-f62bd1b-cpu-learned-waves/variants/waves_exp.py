"""Wave-quantization features for `learned`, replayed: python waves_exp.py VARIANT cold|prior SEEDS LANDSCAPE...

The harness of ../../2026-12-02-adb973d-cpu-learned-prior-own-features/variants/exp.py (run_seed,
batch 4, median and p90 of trials to within 2%, mean of the medians); the sampler's features hook
is the matmul spec's `features` plus the variant's wave features, computed with the study's
device limits (``c.encoding.limits.multiprocessors``: 132 on the H200 landscapes).
"""

import glob
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import optuna

import orchestrator.samplers.learned as L
from benchmarks import search as S


def launch_programs(problem, config, sms):
    """Programs of one launch as the launcher makes them, and the K steps each runs (mean)."""
    m, n, k = int(problem["M"]), int(problem["N"]), int(problem["K"])
    bm, bn, bk = int(config["BLOCK_M"]), int(config["BLOCK_N"]), int(config["BLOCK_K"])
    tiles = -(-m // bm) * -(-n // bn)
    steps = -(-k // bk)
    if config.get("PERSISTENT") and config.get("TMA"):
        return min(tiles, sms), tiles * steps / min(tiles, sms)
    if config.get("STREAM_K"):
        p = max(1, min(sms, tiles * steps))
        return p, tiles * steps / p
    split = int(config.get("SPLIT_K", 1))
    return tiles * split, -(-k // (split * bk))


def wave_features(variant, problem, config, sms):
    programs, steps = launch_programs(problem, config, sms)
    waves = -(-programs // sms)
    fill = programs / (waves * sms)  # busy share of the SM-waves launched
    busy = min(programs, sms) / sms
    if variant == "fill":
        return {"wave_fill": fill}
    if variant == "wavesfill":
        return {"log2_waves": math.log2(waves), "wave_fill": fill}
    if variant == "busy":
        return {"sm_busy": busy}
    if variant == "steps":  # K steps one SM runs in series: waves x steps per program
        return {"log2_sm_steps": math.log2(waves * steps)}
    if variant == "stepsfill":
        return {"log2_sm_steps": math.log2(waves * steps), "wave_fill": fill}
    if variant == "all":
        return {
            "log2_waves": math.log2(waves),
            "wave_fill": fill,
            "sm_busy": busy,
            "log2_sm_steps": math.log2(waves * steps),
        }
    if variant in ("base", "replace"):
        return {}
    raise SystemExit(f"unknown variant {variant}")


def factory_for(name):
    def factory(c):
        sms = c.encoding.limits.multiprocessors
        base = c.kernel.features if c.kernel is not None else None

        def hook(problem, config):
            if name == "replace":  # log2_programs out, log2_waves and wave_fill in
                own = base(problem, config)
                del own["log2_programs"]
                return {**own, **wave_features("wavesfill", problem, config, sms)}
            return {**base(problem, config), **wave_features(name, problem, config, sms)}

        return L.LearnedSampler(
            c.encoding,
            c.seed,
            problem=dict(c.problem) or None,
            device_class=c.device_class,
            features=hook if base is not None else None,
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
    jobs = int(os.environ.get("JOBS", "2"))
    every = sorted(glob.glob("benchmarks/landscapes/h200/*.json.gz"))
    medians, p90s, start = [], [], time.time()
    with ProcessPoolExecutor(jobs) as pool:
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
