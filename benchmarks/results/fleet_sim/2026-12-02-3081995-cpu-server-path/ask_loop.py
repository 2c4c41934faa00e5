"""CPU per trial of the study loop with the ``local`` sampler on matmul's H200 space (12,456 valid
configs), as a driver runs it: 4 studies of 1,000 trials on 4 recorded landscapes, 20 proposals
then their 20 answers (replayed) per round. Prints the CPU per trial and a hash of every proposed
config in order (equal hashes: the same proposals).

    PYTHONPATH=$PWD python3 benchmarks/results/fleet_sim/2026-12-02-3081995-cpu-server-path/ask_loop.py
"""

from __future__ import annotations

import hashlib
import sys
import time
from pathlib import Path
from typing import cast

import optuna

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT))

from benchmarks.fleet.sim_pool import landscape_problems  # noqa: E402
from orchestrator.encoding import Encoding  # noqa: E402
from orchestrator.search import SearchStudy  # noqa: E402
from orchestrator.study import Answer, Study  # noqa: E402
from search_spaces import get_spec  # noqa: E402
from search_spaces.problem import Problem  # noqa: E402
from search_spaces.space import Config  # noqa: E402
from workers.device_table import lookup  # noqa: E402
from workers.replay import ReplayOptions, ReplayRunner  # noqa: E402
from workers.trial import TrialRequest  # noqa: E402


def main() -> int:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    spec, limits = get_spec("matmul"), lookup("H200").limits
    paths = sorted((ROOT / "benchmarks/landscapes/h200").glob("matmul_*.json.gz"))[:4]
    runner = ReplayRunner(paths, ReplayOptions(samples=25))
    Encoding(spec.space, limits, numeric_only=False).valid_positions()  # the process's cache
    valid = spec.space.count(limits)
    digest = hashlib.sha256()
    t0, trials = time.process_time(), 0
    for seed, problem in enumerate(landscape_problems(paths)):
        search = SearchStudy.create(
            f"s{seed}", spec.space, limits, "local", seed, 1000, kernel=spec, problem=problem
        )
        study = Study(search, spec.space, limits, 1000, valid=valid)
        while not study.finished():
            batch: list[Config] = []
            while study.wants() and len(batch) < 20:
                config = study.propose(20)
                if config is None:
                    break
                batch.append(config)
            for config in batch:
                m = runner.run(TrialRequest("matmul", cast(Problem, dict(problem)), config))
                study.tell(config, Answer(m.median_ms if m.outcome.value == "ok" else None))
                digest.update(repr(sorted(config.items())).encode())
            if not batch and not study.pending:
                break
        trials += study.counted
    cpu = time.process_time() - t0
    print(
        f"trials {trials} cpu {cpu:.2f} s {1e3 * cpu / trials:.3f} ms/trial hash {digest.hexdigest()[:16]}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
