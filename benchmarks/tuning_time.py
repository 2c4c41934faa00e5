"""Issue 4 item 6: exhaustive tuning by tunefleet's pipeline against `triton.autotune` over the very
same config list, from cold caches, on one GPU; plus a search job (search + pipeline) on the problem.

Usage (GPU machine, repo root):
    python benchmarks/tuning_time.py --out-dir DIR [--problem M=4096,N=4096,K=4096,dtype=bfloat16]
        [--configs N] [--seed 0] [--search-trials 48]
The list: every valid config of the matmul space on this device with SPLIT_K=1 and TMA off
(triton.autotune launches one kernel; split-K needs a second, reduction launch, TMA descriptors
built per problem), or --configs N of them drawn (seeded).
Each contender runs as its own process with its own empty TRITON_CACHE_DIR:
  pipeline:  `tunefleet record matmul -p P --configs LIST` (compile pool + isolated trial process)
  autotune:  this script's --autotune-child: @triton.autotune over the list, key (M, N, K), its
             default benchmark settings, first call timed to synchronize
  search:    `tunefleet tune matmul -p P --trials T` (default sampler, full space, local Ray),
             and the seconds from its start to its first trial within 2% of the pipeline best
Then, in this process on fresh inputs, each winner is timed in interleaved rounds (events, L2
flushed, median of 25 per round) so the winners are compared within one run.
--search-only PREV runs the search job alone and takes the pipeline's and autotune's figures from
the earlier run in PREV (their winners are timed again with the search's, in this process).
Writes DIR/tuning_time.json and the children's logs; prints a table. Dry run without a GPU:
TRITON_INTERPRET=1 with a tiny --problem (the autotune side then times on the wall clock).
`--timeline DIR` prints where an earlier run's search job spent its wall time (CPU only).
`--warm-workers` runs the search job on a Ray head started here whose worker actor (trial process,
compile pool, device context, Triton's launcher stubs) a 1-trial job on another dtype started
first; no kernel of the measured problem is compiled before it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _bench import local_target, ray_head, timed  # this folder (run as a script)

ROUNDS = 5
#: The --warm-workers warm-up job's problem: another dtype, so no kernel of the measured problem
#: is compiled by it.
WARMUP_PROBLEM = "M=256,N=256,K=256,dtype=float16"


def config_line(config: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in config.items())


def draw_configs(n: int | None, seed: int) -> list[dict[str, Any]]:
    """The valid configs on this device with SPLIT_K=1 and TMA off, or ``n`` of them drawn with
    ``seed``."""
    from search_spaces import get_spec

    limits, _, _ = local_target()
    space = get_spec("matmul").space.enumerate(limits)
    valid = [c for c in space if c["SPLIT_K"] == 1 and not c.get("TMA")]
    chosen = valid if n is None else random.Random(seed).sample(valid, min(n, len(valid)))
    return sorted(chosen, key=config_line)


def run_child(cmd: list[str], cache: Path, log: Path, base: dict[str, str] | None = None) -> float:
    """Wall seconds of ``cmd`` run with an empty Triton cache at ``cache`` (and ``base`` as its
    environment, default this one's); its stdout goes to ``log``, its stderr to ``log`` with the
    suffix ``.err``."""
    env = {**(base or os.environ), "TRITON_CACHE_DIR": str(cache)}
    start = time.perf_counter()
    with log.open("w") as sink, log.with_suffix(".err").open("w") as err:
        proc = subprocess.run(cmd, env=env, stdout=sink, stderr=err)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:4])} failed ({proc.returncode}); see {log}(.err)")
    return wall


def pace_line(log: Path) -> str:
    """The `record` command's line on where its time went (start-up, then per config)."""
    lines = [line for line in log.read_text().splitlines() if line.startswith("first result")]
    return lines[-1] if lines else "(no pace line in the log)"


def _job_and_trials(db_url: str) -> tuple[Any, list[Any]]:
    """The search database's (only) job and its trials in the order they were stored."""
    from db import Database, repository

    database = Database(db_url)
    with database.session() as s:
        job = repository.list_jobs(s)[0]
        trials = [t for st in repository.studies_for_job(s, job.id)
                  for t in repository.trials_for_study(s, st.id)]  # fmt: skip
    return job, sorted(trials, key=lambda t: t.created_at)


def seconds_to_within(db_url: str, started: float, best_ms: float, within: float) -> float | None:
    """Seconds from ``started`` (epoch) until the search job stored its first trial within
    ``within`` (0.02 = 2%) of ``best_ms``; None if none got there."""
    _, trials = _job_and_trials(db_url)
    close = [t.created_at for t in trials if t.median_ms and t.median_ms <= best_ms * (1 + within)]
    return min(close).timestamp() - started if close else None


def pipeline_best_ms(folder: Path, report: dict[str, Any]) -> float:
    """The best time in the pipeline's landscape of the run in ``folder`` (or the run it took
    the pipeline from)."""
    from workers.landscape import read_landscape

    if "pipeline_best_ms" in report:
        return float(report["pipeline_best_ms"])
    source = Path(report["search_only_from"]) if report.get("search_only_from") else folder
    best = read_landscape(source / "pipeline_landscape.json.gz").best()
    if best is None or best.time_ms is None:
        raise SystemExit(f"{source}: the pipeline's landscape has no ok config")
    return best.time_ms


def timeline(folder: Path) -> list[str]:
    """Where the search job's wall time went, from a run's tuning_time.json and search.db:
    seconds from the process start to the job row, its first and last trial, and its end."""
    report = json.loads((folder / "tuning_time.json").read_text())
    job, trials = _job_and_trials(f"sqlite:///{folder / 'search.db'}")
    started = report.get("search_started_epoch")
    to_2pct = report["search_s_to_within_2pct_of_pipeline_best"]
    if started is None:  # runs before the start was recorded: back from the first trial within 2%
        if to_2pct is None:
            raise SystemExit(f"{folder}: no start time and no trial within 2%")
        best_ms = pipeline_best_ms(folder, report)
        close = [t for t in trials if t.median_ms and t.median_ms <= best_ms * 1.02]
        started = close[0].created_at.timestamp() - to_2pct
    marks = [
        ("job row written", job.created_at),
        (f"first trial stored (of {len(trials)})", trials[0].created_at),
        ("last trial stored", trials[-1].created_at),
        ("job finished (after re-timing the top configs)", job.finished_at),
    ]
    lines = [f"{label:<50} {when.timestamp() - started:6.1f} s" for label, when in marks if when]
    lines.append(f"{'process exited':<50} {report['wall_s']['search']:6.1f} s")
    return lines


def _wall_clock_bench(fn: Any, quantiles: Any = None) -> list[float]:
    start = time.perf_counter()
    fn()
    ms = (time.perf_counter() - start) * 1e3
    return [ms] * (len(quantiles) if quantiles else 1)


def autotune_child(problem_text: str, list_path: Path, out: Path) -> None:
    """Tune the listed configs with @triton.autotune; write the winner and the tuning seconds."""
    import torch
    import triton

    from search_spaces import get_spec
    from search_spaces.kernels._matmul_kernels import matmul_kernel
    from search_spaces.spec import split_launch_options

    spec = get_spec("matmul")
    problem = spec.parse_problem(problem_text)
    listed = [json.loads(line) for line in list_path.read_text().splitlines()]
    configs = []
    for c in listed:
        meta, options = split_launch_options(c)
        meta.pop("TMA", None)
        configs.append(triton.Config({**meta, "DOT_IN_FP32": False}, **options))
    inputs = spec.build_inputs(problem, local_target()[2])
    # Without a GPU (a dry run in the interpreter) triton has no benchmarker: time on the wall clock.
    bench = {} if inputs["a"].is_cuda else {"do_bench": _wall_clock_bench}
    tuned = triton.autotune(configs=configs, key=["M", "N", "K"], **bench)(matmul_kernel)
    a, b, c_out = inputs["a"], inputs["b"], inputs["out"]
    m, k = a.shape
    n = b.shape[1]

    def grid(meta: dict[str, Any]) -> tuple[int, int]:
        return (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]), 1)

    sync = torch.cuda.synchronize if a.is_cuda else (lambda: None)
    sync()
    start = time.perf_counter()
    tuned[grid](a, b, c_out, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), 0,
                c_out.stride(0), c_out.stride(1))  # fmt: skip
    sync()
    seconds = time.perf_counter() - start
    best = tuned.best_config
    winner = {**best.kwargs, "num_warps": best.num_warps, "num_stages": best.num_stages}
    winner.pop("DOT_IN_FP32", None)
    out.write_text(json.dumps({"tuning_s": seconds, "winner": winner}))


def compare_winners(problem_text: str, winners: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Median over interleaved rounds of each winner's median ms, on one set of fresh inputs."""
    from search_spaces import get_spec

    spec = get_spec("matmul")
    problem = spec.parse_problem(problem_text)
    _, backend, device = local_target()
    inputs = spec.build_inputs(problem, device)
    launchers = {name: spec.make_launcher(inputs, c) for name, c in winners.items()}
    rounds: dict[str, list[float]] = {name: [] for name in winners}
    for _ in range(ROUNDS):
        for name, launch in launchers.items():
            rounds[name].append(timed(launch, backend))
    return {name: statistics.median(ms) for name, ms in rounds.items()}


def contenders_from(prev: Path) -> tuple[dict[str, Any], Path]:
    """The report and pipeline landscape of an earlier run in ``prev`` (for --search-only)."""
    report = prev / "tuning_time.json"
    land = prev / "pipeline_landscape.json.gz"
    if not report.exists() or not land.exists():
        raise SystemExit(f"--search-only {prev}: needs tuning_time.json and {land.name} there")
    return json.loads(report.read_text()), land


def main() -> None:
    from search_spaces import get_spec
    from workers.landscape import read_landscape

    parser = argparse.ArgumentParser()
    parser.add_argument("--out-dir", type=Path)
    parser.add_argument("--problem", default="M=4096,N=4096,K=4096,dtype=bfloat16")
    parser.add_argument("--configs", type=int, default=None, help="draw N (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--search-trials", type=int, default=48)
    parser.add_argument(
        "--search-only",
        type=Path,
        help="run only the search job; the pipeline's and autotune's results come from this "
        "earlier run's folder (its winners are timed again here)",
    )
    parser.add_argument(
        "--warm-workers",
        action="store_true",
        help="run the search job on a Ray head started here, with its worker kept warm by a "
        "1-trial job on another dtype first (`tune --keep-workers`)",
    )
    parser.add_argument(
        "--timeline", type=Path, help="print where an earlier run's search job spent its time"
    )
    parser.add_argument("--autotune-child", nargs=2, type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.timeline:
        print("\n".join(timeline(args.timeline)))
        return
    if args.autotune_child:
        autotune_child(args.problem, *args.autotune_child)
        return
    if args.out_dir is None:
        parser.error("--out-dir is required (except with --timeline)")
    out = args.out_dir
    out.mkdir(parents=True, exist_ok=True)
    spec = get_spec("matmul")
    py = sys.executable
    commands: dict[str, list[str]] = {}
    wall: dict[str, float] = {}
    if args.search_only:
        earlier, land = contenders_from(args.search_only)
        args.problem, configs_n = earlier["problem"], earlier["configs"]
        commands.update({k: v for k, v in earlier["commands"].items() if k != "search"})
        wall.update({k: v for k, v in earlier["wall_s"].items() if k != "search"})
        autotune_winner = earlier["winners"]["autotune"]
        autotune_first_call_s = earlier["autotune_first_call_s"]
        print(f"pipeline and autotune from {args.search_only}: {wall}")
    else:
        configs = draw_configs(args.configs, args.seed)
        configs_n = len(configs)
        (out / "configs.txt").write_text("".join(config_line(c) + "\n" for c in configs))
        (out / "configs.jsonl").write_text("".join(json.dumps(c) + "\n" for c in configs))
        drawn = "all" if args.configs is None else f"drawn with seed {args.seed}"
        print(f"{configs_n} configs (SPLIT_K=1, TMA off, {drawn}) for matmul {args.problem}")

        land = out / "pipeline_landscape.json.gz"
        commands["pipeline"] = [py, "-m", "orchestrator", "record", "matmul", "-p", args.problem,
                                "--configs", str(out / "configs.txt"), "--out", str(land)]  # fmt: skip
        wall["pipeline"] = run_child(
            commands["pipeline"], out / "cache_pipeline", out / "pipeline.log"
        )
        print(f"pipeline: {wall['pipeline']:.1f} s; {pace_line(out / 'pipeline.log')}", flush=True)

        at_out = out / "autotune.json"
        commands["autotune"] = [py, __file__, "--out-dir", str(out), "--problem", args.problem,
                                "--autotune-child", str(out / "configs.jsonl"), str(at_out)]  # fmt: skip
        wall["autotune"] = run_child(
            commands["autotune"], out / "cache_autotune", out / "autotune.log"
        )
        autotune = json.loads(at_out.read_text())
        autotune_first_call_s = autotune["tuning_s"]
        autotune_winner = {**spec.default_for(local_target()[0]), **autotune["winner"]}
        print(
            f"autotune: {wall['autotune']:.1f} s ({autotune_first_call_s:.1f} s in its first call)"
        )

    db_url = f"sqlite:///{out / 'search.db'}"
    commands["search"] = [py, "-m", "orchestrator", "tune", "matmul", "-p", args.problem, "--trials",
                          str(args.search_trials), "--json", "--db", db_url]  # fmt: skip
    cache = out / "cache_search"
    with contextlib.ExitStack() as stack:
        env = None
        if args.warm_workers:
            env = stack.enter_context(ray_head({"TRITON_CACHE_DIR": str(cache)}))
            commands["search"].append("--keep-workers")
            commands["warmup"] = [py, "-m", "orchestrator", "tune", "matmul", "-p", WARMUP_PROBLEM,
                                  "--trials", "1", "--keep-workers", "--db",
                                  f"sqlite:///{out / 'warmup.db'}"]  # fmt: skip
            run_child(commands["warmup"], cache, out / "warmup.log", env)
        search_started = time.time()
        wall["search"] = run_child(commands["search"], cache, out / "search.log", env)
    search_winner = json.loads((out / "search.log").read_text())["studies"][0]["best"]["config"]
    print(f"search ({args.search_trials} trials): {wall['search']:.1f} s", flush=True)

    landscape = read_landscape(land)
    best = landscape.best()
    if best is None:
        raise SystemExit("the pipeline found no ok config")
    winners = {"pipeline": best.config, "autotune": autotune_winner, "search": search_winner}
    ms = compare_winners(args.problem, winners)
    to_2pct = seconds_to_within(db_url, search_started, best.time_ms or 0.0, 0.02)
    report = {
        "problem": args.problem,
        "configs": configs_n,
        "search_only_from": str(args.search_only) if args.search_only else None,
        "search_warm_workers": args.warm_workers,
        "commands": commands,
        "wall_s": wall,
        "autotune_first_call_s": autotune_first_call_s,
        "winners": winners,
        "winner_ms": ms,
        "pipeline_ok": sum(r.outcome.value == "ok" for r in landscape.results),
        "speedup_pipeline_vs_autotune": wall["autotune"] / wall["pipeline"],
        "speedup_search_vs_autotune": wall["autotune"] / wall["search"],
        "search_started_epoch": search_started,
        "pipeline_best_ms": best.time_ms,
        "search_s_to_within_2pct_of_pipeline_best": to_2pct,
        "speedup_to_2pct_vs_autotune": None if to_2pct is None else wall["autotune"] / to_2pct,
    }
    (out / "tuning_time.json").write_text(json.dumps(report, indent=1))
    print(f"{'contender':<10} {'wall s':>8} {'winner ms':>10} {'vs autotune winner':>19}")
    for name in ("autotune", "pipeline", "search"):
        print(f"{name:<10} {wall[name]:8.1f} {ms[name]:10.4f} {ms['autotune'] / ms[name]:18.3f}x")
    print(
        f"pipeline {report['speedup_pipeline_vs_autotune']:.1f}x faster than triton.autotune over "
        f"the same {configs_n} configs; search job {report['speedup_search_vs_autotune']:.1f}x"
    )
    if to_2pct is None:
        print(f"search: no trial within 2% of the pipeline's best in {args.search_trials} trials")
    else:
        print(
            f"search: first trial within 2% of the pipeline's best after {to_2pct:.1f} s "
            f"(from the process start) = {wall['autotune'] / to_2pct:.1f}x faster than "
            "triton.autotune"
        )


if __name__ == "__main__":
    main()
