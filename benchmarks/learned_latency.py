"""How long the ``learned`` sampler takes to propose a config, with a large database prior.

Usage (repo root): python benchmarks/learned_latency.py [--prior 10000] [--own 0 25 50 100 200]
    [--repeats 20] [--json]

The study is a matmul problem on the H200's limits over the shipped spec's whole space; its prior
holds ``--prior`` trials of random valid configs on 12 other matmul problems (times from a smooth
made-up cost, which the cost of fitting does not depend on). For each count of own trials
(``--own``, told with made-up times before the clock starts) the study asks ``--repeats`` times
with three trials pending (a batch of four workers), each proposal told at once, so every
proposal refits the GP to one more own trial; reported: the one-time preparation (valid
configs, features, prior fit; paid by the study's first model-based proposal) and the median and
p90 of ``sample_relative`` (the sampler's proposal; wall clock and the thread's CPU time, which
other processes on a shared machine do not inflate) and of the whole ask (wall and CPU). The ask
is Optuna's ``Study.ask`` with the distributions fixed (``--via optuna``, the path a driver took
for ``learned`` before its one-write ask) or the driver's ``SearchStudy.ask`` (``--via search``:
the trial created with every parameter in one storage write).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import optuna

from orchestrator.study.encoding import Encoding, valid_configs
from orchestrator.study.samplers.learned import LearnedSampler, PriorTrial
from orchestrator.study.search import SearchStudy
from search_spaces.problem import Problem
from search_spaces.registry import get_spec
from workers.device_table import lookup

DEVICE = "NVIDIA H200"
TARGET: Problem = {"M": 512, "N": 4096, "K": 4096, "dtype": "bfloat16"}


def _cost(problem: Problem, config: dict[str, Any]) -> float:
    flops = 2.0 * int(problem["M"]) * int(problem["N"]) * int(problem["K"])
    shape = sum(abs(math.log2(int(config[n]) / 64)) for n in ("BLOCK_M", "BLOCK_N", "BLOCK_K"))
    return flops / 5e11 * (1.0 + 0.2 * shape + 0.05 * int(config["SPLIT_K"]))


def _prior(configs: Sequence[dict[str, Any]], count: int, rng: random.Random) -> list[PriorTrial]:
    problems: list[Problem] = [
        {"M": m, "N": n, "K": 4096, "dtype": "bfloat16"}
        for m in (16, 128, 1024, 4096)
        for n in (4096, 8192, 28672)
    ]
    out = []
    for i in range(count):
        problem, config = problems[i % len(problems)], rng.choice(configs)
        out.append(PriorTrial(problem, DEVICE, dict(config), _cost(problem, config)))
    return out


def measure(
    prior: int, own: int, repeats: int, seed: int = 0, via: str = "optuna"
) -> dict[str, Any]:
    """Preparation time and proposal times (ms) at ``own`` told trials and ``prior`` prior
    trials, asking through ``via`` ("optuna" or "search", see the module docstring)."""
    spec, limits = get_spec("matmul"), lookup(DEVICE).limits
    configs = list(valid_configs(spec.space, limits))
    rng = random.Random(seed)
    encoding = Encoding(spec.space, limits, numeric_only=False)
    sampler = LearnedSampler(
        encoding,
        seed,
        problem=TARGET,
        device_class=DEVICE,
        features=spec.features,
        prior=_prior(configs, prior, rng),
    )
    proposals: list[float] = []
    cpu: list[float] = []
    inner = sampler.sample_relative

    def timed(*args: Any) -> dict[str, Any]:
        started, cpu_started = time.perf_counter(), time.thread_time()
        out = inner(*args)
        proposals.append(1e3 * (time.perf_counter() - started))
        cpu.append(1e3 * (time.thread_time() - cpu_started))
        return out

    sampler.sample_relative = timed  # type: ignore[method-assign,assignment]
    study = optuna.create_study(direction="minimize", sampler=sampler)
    dists = encoding.distributions()
    for config in rng.sample(configs, own):
        params = encoding.encode(config)
        assert params is not None
        study.add_trial(
            optuna.trial.create_trial(
                params=params, distributions=dists, value=_cost(TARGET, config)
            )
        )
    search = SearchStudy(study, encoding)

    def ask() -> optuna.Trial:
        return search.ask()[0] if via == "search" else study.ask(dists)

    for _ in range(3):
        ask()  # pending; the first ask prepares the sampler
    prepare_ms, prepare_cpu_ms = proposals[0], cpu[0]
    asks, ask_cpu = [], []
    for _ in range(repeats):
        started, cpu_started = time.perf_counter(), time.thread_time()
        trial = ask()
        asks.append(1e3 * (time.perf_counter() - started))
        ask_cpu.append(1e3 * (time.thread_time() - cpu_started))
        # Told at once: the next proposal refits the GP to one more own trial (a batch of one,
        # the most refitting a study does).
        study.tell(trial, _cost(TARGET, encoding.decode(trial.params)))
    sample = proposals[3:]
    return {
        "prior_trials": prior,
        "own_trials": own,
        "space": len(configs),
        "first_proposal_ms": round(prepare_ms, 1),
        "first_proposal_cpu_ms": round(prepare_cpu_ms, 1),
        "proposal_ms": _stats(sample),
        "proposal_cpu_ms": _stats(cpu[3:]),
        "via": via,
        "ask_ms": _stats(asks),
        "ask_cpu_ms": _stats(ask_cpu),
    }


def _stats(values: Sequence[float]) -> dict[str, float]:
    return {
        "median": round(float(np.median(values)), 2),
        "p90": round(float(np.percentile(values, 90)), 2),
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prior", type=int, default=10_000)
    parser.add_argument("--own", type=int, nargs="+", default=[0, 25, 50, 100, 200])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--via", choices=("optuna", "search"), default="optuna")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.prior < 0 or args.repeats < 1 or min(args.own) < 0:
        raise SystemExit("--prior and --own must be >= 0, --repeats >= 1")
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    rows = [measure(args.prior, own, args.repeats, via=args.via) for own in args.own]
    if args.json:
        print(json.dumps({"results": rows}, indent=1))
        return
    print(
        "| prior trials | own trials | space | first proposal: wall / CPU (ms) | "
        "proposal wall: median / p90 (ms) | proposal CPU: median / p90 (ms) | "
        f"ask ({args.via}) wall: median / p90 (ms) | ask CPU: median / p90 (ms) |"
    )
    print("|---" * 8 + "|")
    for r in rows:
        p, c, a, ac = r["proposal_ms"], r["proposal_cpu_ms"], r["ask_ms"], r["ask_cpu_ms"]
        print(
            f"| {r['prior_trials']} | {r['own_trials']} | {r['space']} | "
            f"{r['first_proposal_ms']} / {r['first_proposal_cpu_ms']} | "
            f"{p['median']} / {p['p90']} | {c['median']} / {c['p90']} | "
            f"{a['median']} / {a['p90']} | {ac['median']} / {ac['p90']} |"
        )


if __name__ == "__main__":
    main()
