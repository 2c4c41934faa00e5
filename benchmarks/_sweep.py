"""Pieces of the vendor-path sweeps (attention_sweep.py, matmul_sweep.py, moe_sweep.py,
paged_sweep.py): compile a spec's candidate configs in parallel processes (a hung or crashed
candidate is recorded, not fatal), time callables interleaved with Triton's do_bench.

Needs only torch, triton and search_spaces (no Ray, Optuna or database), so a device call can run
the sweeps without wheels.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any


def sweep_parser(
    grids: Mapping[str, Any], *, grid: str = "issue", rounds: int = 2
) -> argparse.ArgumentParser:
    """The options every sweep takes: ``--out`` (JSON), ``--grid`` (one of ``grids``, default
    ``grid``), ``--rounds`` (default ``rounds``) and ``--jobs`` (compile processes at once); a
    sweep adds its own."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--grid", choices=sorted(grids), default=grid)
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--jobs", type=int, default=16)
    return parser


def start_sweep() -> float:
    """Give the compile processes a fresh Triton cache to share (unless TRITON_CACHE_DIR is set);
    the start time for ``finish``."""
    os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="tf-sweep-cache-"))
    return time.perf_counter()


def on_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def device() -> str:
    return "cuda" if on_gpu() else "cpu"


#: Seconds one candidate's compile and first launch may take before it counts as hung.
COMPILE_TIMEOUT_S = 300.0

_CHILD = (
    "import json, sys; sys.path[:0] = json.loads(sys.argv[1]); from _sweep import _compile_one; "
    "print(json.dumps(_compile_one(json.loads(sys.stdin.read()))))"
)


def _compile_one(args: Sequence[Any]) -> str | None:
    """Launch ``config`` once on ``problem`` (small, same constexprs as the problems it stands
    for), filling the shared Triton cache; the error text, or None if it compiled and ran."""
    kernel, problem, config = args
    from search_spaces import get_spec

    spec = get_spec(kernel)
    try:
        spec.make_launcher(spec.build_inputs(spec.validate_problem(problem), device()), config)()
    except Exception as exc:  # a candidate that does not compile is recorded, not fatal
        return f"{type(exc).__name__}: {str(exc)[-300:]}"
    return None


def compile_in_process(task: Sequence[Any], timeout_s: float = COMPILE_TIMEOUT_S) -> str | None:
    """``_compile_one(task)`` in a process of its own: the error text, or None if it compiled and
    ran. A candidate that hangs (a kernel that never returns) is killed after ``timeout_s`` and one
    that kills its process (a compiler abort) is reported, so neither stops a sweep."""
    here = str(Path(__file__).resolve().parent)
    try:
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, json.dumps([here, *sys.path])],
            input=json.dumps(list(task)),
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        return f"Hung: no result in {timeout_s:.0f} s; its process was killed"
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1][-300:]
        return f"Crashed: exit code {out.returncode}: {last}"
    result = json.loads(lines[-1])
    return None if result is None else str(result)


def for_device(kernel: str, config: dict[str, Any]) -> dict[str, Any]:
    """``config`` in this device's space of ``kernel``: parameters it lacks from the spec's
    default here, those the space has not here dropped (PDL and GLUON on the interpreter)."""
    from search_spaces import get_spec
    from workers.device import detect

    spec = get_spec(kernel)
    limits = detect("auto")[0].limits()
    names = {p.name for p in spec.space.params_for(limits.vendor)}
    return {**spec.default_for(limits), **{k: v for k, v in config.items() if k in names}}


def compile_all(
    kernel: str,
    small: dict[str, dict[str, Any]],
    candidates: Sequence[dict[str, Any]],
    jobs: int,
    *,
    outside_space: bool = False,
    timeout_s: float = COMPILE_TIMEOUT_S,
) -> dict[str, set[int]]:
    """Compile every candidate that is in the kernel's space on this device (every candidate
    with ``outside_space``: a probe of configs the space's rules leave out) on every small
    stand-in problem (key -> problem), ``jobs`` at a time, each in a process of its own
    (``compile_in_process``; they share TRITON_CACHE_DIR, which the caller sets); key -> indices
    that are not in the space, failed, crashed or hung, with the reasons printed."""
    from search_spaces import get_spec
    from workers.device import detect

    limits = detect("auto")[0].limits()
    space = get_spec(kernel).space
    invalid = {i for i, c in enumerate(candidates) if space.violation(c, limits) is not None}
    for i in sorted(invalid):
        print(f"  c{i} is not in the space here: {space.violation(candidates[i], limits)}")
    if outside_space:
        invalid = set()
    work = [
        (key, i, (kernel, prob, c))
        for key, prob in small.items()
        for i, c in enumerate(candidates)
        if i not in invalid
    ]
    broken: dict[str, set[int]] = {key: set(invalid) for key in small}
    start = time.perf_counter()
    with ThreadPoolExecutor(jobs) as pool:
        errors = pool.map(lambda w: compile_in_process(w[2], timeout_s), work)
        for (key, i, _), err in zip(work, errors, strict=True):
            if err is not None:
                broken[key].add(i)
                print(f"  failed c{i} on {key}: {err}", flush=True)
    print(f"compiled {len(work)} variants in {time.perf_counter() - start:.0f} s", flush=True)
    for key, failed in broken.items():
        if len(failed) == len(candidates):
            raise SystemExit(f"no candidate config compiled and ran on {key}; see the lines above")
    return broken


def bench_ms(fn: Callable[[], Any]) -> float:
    """Median ms of ``fn`` by Triton's do_bench (events, L2 flushed before each rep); one timed
    call on the CPU."""
    if not on_gpu():
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e3
    import triton

    return float(triton.testing.do_bench(fn, warmup=5, rep=25, return_mode="median"))


def interleaved(
    entries: dict[str, Callable[[], Any]],
    rounds: int,
    bench: Callable[[Callable[[], Any]], float] = bench_ms,
) -> dict[str, list[float]]:
    """Each entry's ``bench`` (default: the do_bench median) in each of ``rounds`` rounds, the
    entry order rotated by one each round."""
    names = list(entries)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append(bench(entries[name]))
    return times


def medians(times: dict[str, list[float]]) -> dict[str, float]:
    return {name: statistics.median(ts) for name, ts in times.items()}


def problem_text(problem: dict[str, Any]) -> str:
    """``NAME=VALUE,...`` of a problem, in its field order."""
    return ",".join(f"{k}={v}" for k, v in problem.items())


def geomean(values: Sequence[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def copy_gbps() -> float:
    """Device-to-device copy bandwidth (GB/s, bytes read + written) of a 4 GiB buffer (64 MiB on
    the CPU)."""
    import torch

    n = (1 << 31) if on_gpu() else (1 << 25)
    src = torch.randn(n, dtype=torch.bfloat16, device=device())
    dst = torch.empty_like(src)
    ms = statistics.median(interleaved({"copy": lambda: dst.copy_(src)}, 3)["copy"])
    return 2 * n * 2 / ms / 1e6


def candidate_launchers(
    spec: Any, inputs: dict[str, Any], candidates: Sequence[dict[str, Any]], broken: set[int]
) -> dict[str, Callable[[], Any]]:
    """``c<i>`` -> the spec's launcher of candidate i over ``inputs``, for those that compiled."""
    return {
        f"c{i}": spec.make_launcher(inputs, c) for i, c in enumerate(candidates) if i not in broken
    }


def fastest_candidate(med: dict[str, float]) -> str:
    """The label of the fastest candidate (``c<i>``) among the medians."""
    return min((k for k in med if k[0] == "c" and k[1:].isdigit()), key=med.__getitem__)


def winner_on_fresh(spec: Any, problem: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """Fresh inputs after one launch of ``config`` into a NaN-poisoned ``out``."""
    fresh = spec.build_inputs(problem, device())
    fresh["out"].fill_(float("nan"))
    spec.make_launcher(fresh, config)()
    return fresh


def checked_winner(
    spec: Any, problem: dict[str, Any], med: dict[str, float], candidates: Sequence[dict[str, Any]]
) -> tuple[str, float]:
    """The fastest candidate's label among the medians and its max relative error against the
    spec's reference on fresh inputs (``winner_on_fresh``)."""
    from search_spaces.accuracy import max_rel_error

    best = fastest_candidate(med)
    fresh = winner_on_fresh(spec, problem, candidates[int(best[1:])])
    return best, max_rel_error(fresh["out"], spec.reference(fresh))


def winner_row(
    spec: Any,
    problem: dict[str, Any],
    med: dict[str, float],
    candidates: Sequence[dict[str, Any]],
    best: str,
    err: float,
) -> dict[str, Any]:
    """The fields every sweep's row has: the medians, the winner and its check; frees the GPU's
    cached blocks for the next problem."""
    if on_gpu():
        import torch

        torch.cuda.empty_cache()
    return {
        "problem": problem,
        "ms": med,
        "best": best,
        "best_config": candidates[int(best[1:])],
        "best_ms": med[best],
        "default_ms": med.get("c0"),
        "winner_max_rel_error": err,
        "tolerance": spec.tolerance(problem),
    }


def add_runnable(entries: dict[str, Any], fns: dict[str, Callable[[], Any]]) -> dict[str, str]:
    """Run each of ``fns`` once; add those that ran to ``entries``. Label -> the first line of the
    RuntimeError of each that refused (e.g. an SDPA backend that does not take the problem)."""
    refused: dict[str, str] = {}
    for label, fn in fns.items():
        try:
            fn()
        except RuntimeError as exc:
            refused[label] = str(exc).splitlines()[0][:200]
            continue
        entries[label] = fn
    return refused


def resummarize(
    argv: Sequence[str], tool: str, summarize: Callable[[dict[str, Any]], dict[str, Any]]
) -> int | None:
    """``TOOL --summarize FILE``: print the summary ``summarize`` recomputes from the stored
    output FILE (its rows; figures added to the summary since it was written included), without
    its ``not_run``; exit status 0, or 2 with one line for a bad call or an unreadable file. None
    where ``argv`` does not start with ``--summarize``."""
    if argv[:1] != ["--summarize"]:
        return None
    if len(argv) != 2:
        print(f"error: usage: {tool} --summarize FILE", file=sys.stderr)
        return 2
    path = Path(argv[1])
    try:
        summary = summarize(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"error: {path} is not output of {tool} ({exc})", file=sys.stderr)
        return 2
    print(json.dumps({k: v for k, v in summary.items() if k != "not_run"}, indent=1))
    return 0


def finish(
    out: Path,
    summary: dict[str, Any],
    candidates: Sequence[dict[str, Any]],
    rows: list[dict[str, Any]],
    start: float,
) -> None:
    """Complete ``summary`` (every winner within tolerance, wall time, argv), write it with the
    candidates and rows to ``out`` and print it."""
    summary = {
        **summary,
        "all_winners_within_tolerance": all(
            r["winner_max_rel_error"] <= r["tolerance"] for r in rows
        ),
        "wall_s": time.perf_counter() - start,
        "argv": sys.argv,
    }
    out.write_text(
        json.dumps({"summary": summary, "candidates": list(candidates), "rows": rows}, indent=1)
    )
    print(json.dumps({k: v for k, v in summary.items() if k != "compile_failures"}, indent=1))
