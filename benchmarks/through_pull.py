"""A kernel tuned through `tunefleet pull`, its decisions timed against the vendor paths, one process.

Usage (GPU machine, repo root; needs no Ray):
    python benchmarks/through_pull.py --kernel fp8_matmul|matmul|flash_attention --grid NAME
        --out DIR [--trials 20] [--budget-s S] [--db URL] [--rounds 3] [--shard K/N]
        [--timing device|do_bench] [--interpreter]

1. Writes ``DIR/job.json`` (every problem of the grid a key, ``--trials`` trials each) and tunes
   it with ``benchmarks/profile/tune_jobs.py`` (in-process pool, ``--budget-s`` its time budget)
   into ``--db`` (default ``sqlite:///DIR/tune.db``).
2. ``tunefleet pull KERNEL --out DIR/bundle --db URL`` and loads the bundle it wrote; for
   fp8_matmul also ``--format vllm --out DIR/vllm``, each file read back as vLLM reads it (the
   summary's ``vllm``: the M of each file, or pull's refusal).
3. Per problem, on inputs built for it: ``bundle.decide(problem)`` and the launcher
   ``search_spaces.dispatch.launcher_for`` gives for it (``decision``), the decision's Triton config
   where the decision is ``vendor`` (``triton``), and every vendor path of the spec. Each is launched
   once into its own NaN-filled ``out`` and checked against ``spec.reference`` within
   ``spec.tolerance``; a vendor path that refuses the problem is named with the reason, an entry out
   of tolerance is reported and not timed. The rest are timed interleaved, ``--rounds`` rounds in
   rotated order, L2 flushed before each rep. ``--timing device`` (default): as the studies time
   (benchmarks/_bench.py ``timed``: events, every rep queued before the GPU starts the first, so
   host launch cost is not in the time; the median of 25 reps). ``--timing do_bench``: Triton's
   ``do_bench`` median, where a launch whose host cost exceeds its GPU time reads host-bound (the
   eager view of a small problem). On the CPU one perf_counter call (do_bench) or two (device).
4. Writes ``DIR/through_pull.json`` (rows and summary) and prints a table and the summary: per
   group (M buckets; seq <= 1024 or longer) and overall, the geomean and min of fastest vendor /
   decision and of fastest vendor / Triton config, and how many fall below 0.95.

``through_pull.py --summarize DIR/through_pull.json`` prints a stored run's summary recomputed
from its rows.

Grids: fp8_matmul's and flash_attention's are fp8_sweep.py's and attention_sweep.py's; matmul's
``issue46`` (and one per model family) and ``smoke`` are below. ``--interpreter`` runs Triton's
interpreter on the CPU (tuning included). ``--shard K/N``: the grid's problems K, K + N, ...
(1-based), so a grid too large for one run splits over N runs. Exit 2 on bad input (one line), 1
if the tune stored nothing to pull or an entry is out of tolerance.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.util
import io
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

KERNELS = ("fp8_matmul", "matmul", "flash_attention")
#: How entries are timed (module doc, step 3); the first is the default.
TIMINGS = ("device", "do_bench")

#: Issue 46's M (tokens per linear call) for matmul.
MATMUL_M = (1, 7, 16, 64, 128, 200, 512, 1024, 2500, 4096)

#: (N, K) of the q, fused k+v, o, fused gate+up and down linears, from each model's Hugging Face
#: config.json (hidden_size, num_attention_heads, num_key_value_heads, head_dim 128,
#: intermediate_size). Llama-3-70B is one rank of tensor parallel 8 (column-parallel q, kv, gate_up
#: split N, row-parallel o, down split K), as it is served; Mixtral-8x7B's experts are one expert's
#: linears and its router (N = 8 experts). Shapes repeated within a model (q and o) appear once.
MODEL_LINEARS: dict[str, tuple[tuple[int, int], ...]] = {
    # hidden 4096, 32/8 heads, intermediate 14336
    "llama3-8b": ((4096, 4096), (2048, 4096), (28672, 4096), (4096, 14336)),
    # hidden 8192, 64/8 heads, intermediate 28672; per TP8 rank
    "llama3-70b-tp8": ((1024, 8192), (256, 8192), (8192, 1024), (7168, 8192), (8192, 3584)),
    # hidden 3584, 28/4 heads, intermediate 18944
    "qwen2.5-7b": ((3584, 3584), (1024, 3584), (37888, 3584), (3584, 18944)),
    # hidden 4096, 32/8 heads, 8 experts of intermediate 14336
    "mixtral-8x7b": ((4096, 4096), (2048, 4096), (28672, 4096), (4096, 14336), (8, 4096)),
}


def _matmul_grid(models: tuple[str, ...]) -> list[dict[str, Any]]:
    shapes = dict.fromkeys(nk for model in models for nk in MODEL_LINEARS[model])
    return [{"M": m, "N": n, "K": k, "dtype": "bfloat16"} for n, k in shapes for m in MATMUL_M]


MATMUL_GRIDS: dict[str, list[dict[str, Any]]] = {
    "issue46": _matmul_grid(tuple(MODEL_LINEARS)),
    **{f"issue46-{model}": _matmul_grid((model,)) for model in MODEL_LINEARS},
    "smoke": [
        {"M": 7, "N": 48, "K": 64, "dtype": "float32"},
        {"M": 33, "N": 32, "K": 96, "dtype": "float32"},
    ],
}


def grids(kernel: str) -> dict[str, list[Any]]:
    """Grid name -> problems (dicts, or ``NAME=VALUE,...`` texts) of ``kernel``."""
    if kernel == "matmul":
        return MATMUL_GRIDS
    if kernel == "fp8_matmul":
        from fp8_sweep import GRIDS as FP8_GRIDS  # this folder

        return dict(FP8_GRIDS)
    from attention_sweep import GRIDS as ATTENTION_GRIDS  # this folder

    return dict(ATTENTION_GRIDS)


def group(kernel: str, problem: dict[str, Any]) -> str:
    """The summary group of ``problem``: an M bucket for the GEMMs, seq <= 1024 or longer."""
    if kernel == "flash_attention":
        return "seq<=1024" if int(problem["max_seqlen"]) <= 1024 else "seq>1024"
    m = int(problem["M"])
    return next((f"M<={top}" for top in (16, 128, 1024) if m <= top), "M>1024")


def tune_and_pull(
    kernel: str, problems: list[dict[str, Any]], out: Path, db: str, args: argparse.Namespace
) -> tuple[int, Path]:
    """Tune ``problems`` through tune_jobs.py into ``db`` and pull the bundle; (tune's exit
    status, the bundle file). SystemExit with one line if pull wrote no single bundle."""
    from orchestrator.commands.cli import main as cli

    job = out / "job.json"
    job.write_text(json.dumps({"kernel": kernel, "problems": problems, "trials": args.trials}))
    path = HERE / "profile" / "tune_jobs.py"
    spec = importlib.util.spec_from_file_location("tunefleet_bench_tune_jobs", path)
    assert spec is not None and spec.loader is not None
    tune_jobs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tune_jobs)
    argv = [str(job), "--db", db, "--json"]
    argv += ["--device", "interpreter"] if args.interpreter else []
    argv += ["--budget-s", str(args.budget_s)] if args.budget_s is not None else []
    status = int(tune_jobs.main(argv))
    if status == 2:
        raise SystemExit(2)
    bundles = out / "bundle"
    try:
        cli(["pull", kernel, "--out", str(bundles), "--db", db])
    except SystemExit as exc:
        if exc.code:
            raise SystemExit(f"error: tunefleet pull {kernel} exited {exc.code}") from None
    files = sorted(bundles.glob(f"{kernel}-*.json"))
    if len(files) != 1:
        raise SystemExit(f"error: expected one {kernel} bundle in {bundles}, found {len(files)}")
    return status, files[0]


def vllm_files(kernel: str, out: Path, db: str) -> dict[str, Any] | None:
    """fp8_matmul only (None otherwise): ``tunefleet pull --format vllm`` into ``out/vllm``, each
    file read back as vLLM's ``get_w8a8_block_fp8_configs`` reads it (M as an int -> its config):
    ``{"files": {name: [M, ...]}}``, or ``{"refused": pull's one line}``."""
    from orchestrator.commands.cli import main as cli

    if kernel != "fp8_matmul":
        return None
    folder = out / "vllm"
    said = io.StringIO()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(said):
            cli(["pull", kernel, "--format", "vllm", "--out", str(folder), "--db", db])
    except SystemExit as exc:
        if exc.code:
            return {"refused": said.getvalue().strip()}
    files = {}
    for path in sorted(folder.glob("N=*.json")):
        with path.open() as f:
            files[path.name] = sorted(int(m) for m in json.load(f))
    return {"files": files, "notes": said.getvalue().strip().splitlines()}


def _checked(
    make: Callable[[dict[str, Any]], Any], inputs: dict[str, Any], ref: Any, tolerance: float
) -> tuple[Any, float | None, str | None]:
    """``make`` over ``inputs`` with an ``out`` of its own filled with NaN, launched once: (the
    launcher, its max relative error against ``ref``, None), or (None, None, why it refused)."""
    import torch

    from search_spaces import SpecError
    from search_spaces.accuracy import max_rel_error

    own = {**inputs, "out": torch.full_like(inputs["out"], float("nan"))}
    try:
        launch = make(own)
        launch()
    except (SpecError, RuntimeError) as exc:
        return None, None, (str(exc).splitlines() or [type(exc).__name__])[0][:200]
    return launch, max_rel_error(own["out"], ref), None


def measure(
    spec: Any, bundle: Any, problem: dict[str, Any], rounds: int, timing: str = "device"
) -> dict[str, Any]:
    """One problem's row: the decision, the checks and the interleaved medians (module doc)."""
    from _sweep import bench_ms, device, interleaved, medians, on_gpu  # this folder

    from search_spaces.dispatch import launcher_for

    decision = bundle.decide(problem)
    inputs = spec.build_inputs(problem, device())
    ref = spec.reference(inputs)
    tolerance = spec.tolerance(problem)
    makers: dict[str, Callable[[dict[str, Any]], Any]] = {
        "decision": lambda own: launcher_for(spec, bundle, problem, own)[0]
    }
    if not decision.triton:
        makers["triton"] = lambda own: spec.make_launcher(own, dict(decision.config))
    vendors = spec.vendor_paths(problem)
    for name in vendors:
        makers[name] = functools.partial(spec.make_vendor_launcher, name=name)
    entries: dict[str, Any] = {}
    errors: dict[str, float] = {}
    not_run: dict[str, str] = {}
    wrong: dict[str, str] = {}
    for label, make in makers.items():
        launch, err, why = _checked(make, inputs, ref, tolerance)
        if why is not None:
            not_run[label] = why
            continue
        assert err is not None
        errors[label] = err
        if err > tolerance:
            wrong[label] = f"max rel. error {err:.2e} > {tolerance:.0e}"
        else:
            entries[label] = launch
    bench = bench_ms
    if timing == "device":  # as the studies time, on this machine's backend
        from _bench import timed  # this folder

        from workers.device import detect

        bench = functools.partial(timed, backend=detect("auto")[0].backend)
    ms = medians(interleaved(entries, rounds, bench)) if entries else {}
    del inputs, entries, ref
    if on_gpu():
        import torch

        torch.cuda.empty_cache()
    decision_ms = ms.get("decision")
    triton_ms = decision_ms if decision.triton else ms.get("triton")
    vendor_ms = {name: ms[name] for name in vendors if name in ms}
    fastest = min(vendor_ms, key=vendor_ms.__getitem__) if vendor_ms else None
    row: dict[str, Any] = {
        "problem": problem,
        "group": group(spec.name, problem),
        "decision": {"backend": decision.backend, "vendor": decision.vendor, "how": decision.how},
        "config": decision.config,
        "ms": ms,
        "decision_ms": decision_ms,
        "triton_ms": triton_ms,
        "vendor_ms": vendor_ms,
        "fastest_vendor": fastest,
        "max_rel_error": errors,
        "tolerance": tolerance,
        "not_run": not_run,
        "wrong": wrong,
    }
    if fastest is not None:
        for what, t in (("decision", decision_ms), ("triton", triton_ms)):
            row[f"vendor_over_{what}"] = vendor_ms[fastest] / t if t else None
    return row


def _ratios(ratios: list[float], suffix: str) -> dict[str, Any]:
    """``geomean_``, ``min_`` and ``below_0.95_`` + ``suffix`` of ``ratios`` (none if empty)."""
    from _sweep import geomean  # this folder

    if not ratios:
        return {}
    return {
        f"geomean_{suffix}": geomean(ratios),
        f"min_{suffix}": min(ratios),
        f"below_0.95_{suffix}": sum(x < 0.95 for x in ratios),
    }


def _stats(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"problems": len(rows)}
    for what in ("decision", "triton"):
        ratios = [r[f"vendor_over_{what}"] for r in rows if r.get(f"vendor_over_{what}")]
        out.update(_ratios(ratios, f"vendor_over_{what}"))
        if ratios:
            out[f"compared_vendor_over_{what}"] = len(ratios)
    return out


def _vendor_stats(rows: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """The ratios of vendor path ``name`` alone over the problems where it ran and was timed:
    ``name`` / decision and ``name`` / Triton config (geomean, min, how many below 0.95)."""
    ran = [r for r in rows if r["ms"].get(name)]
    out: dict[str, Any] = {"problems": len(ran)}
    for what, key in (("decision", "decision_ms"), ("triton", "triton_ms")):
        out.update(_ratios([r["ms"][name] / r[key] for r in ran if r.get(key)], f"over_{what}"))
    return out


def _aa(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Where the decision is the fastest vendor path, the decision and that path are one call
    timed twice in the same rounds: their ratios' spread is the run's noise (A/A)."""
    from _sweep import geomean  # this folder

    same = [
        r["vendor_over_decision"]
        for r in rows
        if r["decision"]["backend"] == "vendor"
        and r["decision"]["vendor"] == r["fastest_vendor"]
        and r.get("vendor_over_decision")
    ]
    if not same:
        return {"problems": 0}
    return {"problems": len(same), "geomean": geomean(same), "min": min(same), "max": max(same)}


def summarize(kernel: str, grid: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Overall and per-group ratios, the same per vendor path over the problems it ran
    (``per_vendor``), the run's noise (``aa``: vendor / decision where both are one path),
    decisions by backend and how, vendor paths not run (per path, problem -> why) and entries
    out of tolerance."""
    from _sweep import problem_text  # this folder

    groups = list(dict.fromkeys(r["group"] for r in rows))
    decisions: dict[str, int] = {}
    for r in rows:
        d = r["decision"]
        label = f"{d['backend']}{':' + d['vendor'] if d['vendor'] else ''} ({d['how']})"
        decisions[label] = decisions.get(label, 0) + 1
    not_run: dict[str, dict[str, str]] = {}
    for r in rows:
        for label, why in r["not_run"].items():
            not_run.setdefault(label, {})[problem_text(r["problem"])] = why
    return {
        "kernel": kernel,
        "grid": grid,
        **_stats(rows),
        "groups": {g: _stats([r for r in rows if r["group"] == g]) for g in groups},
        "per_vendor": {
            name: _vendor_stats(rows, name)
            for name in dict.fromkeys(n for r in rows for n in r["vendor_ms"])
        },
        "aa": _aa(rows),
        "decisions": decisions,
        "not_run": not_run,
        "wrong": {problem_text(r["problem"]): r["wrong"] for r in rows if r["wrong"]},
        "all_checked_within_tolerance": not any(r["wrong"] for r in rows),
    }


def _line(row: dict[str, Any]) -> str:
    from _sweep import problem_text  # this folder

    d = row["decision"]
    chosen = "triton" if d["backend"] == "triton" else d["vendor"]
    vendors = "  ".join(f"{n} {t:.4f}" for n, t in row["vendor_ms"].items())
    ratio = row.get("vendor_over_decision")
    return (
        f"{problem_text(row['problem']):<60} {chosen} ({d['how']}) "
        + (f"{row['decision_ms']:.4f} ms" if row["decision_ms"] else "not timed")
        + (f"  triton {row['triton_ms']:.4f}" if row["triton_ms"] else "")
        + f"  {vendors}"
        + (f"  vendor/decision x{ratio:.3f}" if ratio else "")
        + (f"  WRONG {row['wrong']}" if row["wrong"] else "")
    )


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(2)


def _stored_summary(stored: dict[str, Any]) -> dict[str, Any]:
    """:func:`summarize` of a stored ``through_pull.json`` (``--summarize``)."""
    return summarize(stored["summary"]["kernel"], stored["summary"]["grid"], stored["rows"])


def main(argv: list[str]) -> int:
    from _sweep import resummarize  # this folder

    status = resummarize(argv, "through_pull.py", _stored_summary)
    if status is not None:
        return status
    parser = _Parser(prog="through_pull.py")
    parser.add_argument("--kernel", required=True, choices=KERNELS)
    parser.add_argument("--grid", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--budget-s", type=float)
    parser.add_argument("--db")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--interpreter", action="store_true")
    parser.add_argument("--shard", default="1/1")
    parser.add_argument("--timing", choices=TIMINGS, default=TIMINGS[0])
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    if args.interpreter:
        os.environ["TRITON_INTERPRET"] = "1"
    available = grids(args.kernel)
    if args.grid not in available:
        print(f"error: no grid {args.grid!r} for {args.kernel} ({', '.join(available)})",
              file=sys.stderr)  # fmt: skip
        return 2
    if args.trials < 1 or args.rounds < 1:
        print("error: --trials and --rounds must be at least 1", file=sys.stderr)
        return 2
    part, _, parts = args.shard.partition("/")
    if not (part.isdigit() and parts.isdigit() and 1 <= int(part) <= int(parts)):
        print(f"error: --shard {args.shard}: give K/N with 1 <= K <= N", file=sys.stderr)
        return 2
    from _sweep import on_gpu  # this folder

    if not args.interpreter and not on_gpu():
        print("error: no GPU here; pass --interpreter to run on the CPU", file=sys.stderr)
        return 2
    from search_spaces import get_spec
    from search_spaces.bundle import load_bundle

    start = time.perf_counter()
    spec = get_spec(args.kernel)
    problems = [
        dict(spec.parse_problem(p) if isinstance(p, str) else spec.validate_problem(p))
        for p in available[args.grid][int(part) - 1 :: int(parts)]
    ]
    args.out.mkdir(parents=True, exist_ok=True)
    db = args.db or f"sqlite:///{(args.out / 'tune.db').resolve()}"
    try:
        tune_status, bundle_path = tune_and_pull(args.kernel, problems, args.out, db, args)
    except SystemExit as exc:
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
            return 1
        return int(exc.code or 0)
    bundle = load_bundle(bundle_path, spec)
    vllm = vllm_files(args.kernel, args.out, db)
    tuned_s = time.perf_counter() - start
    rows = []
    for problem in problems:
        rows.append(measure(spec, bundle, problem, args.rounds, args.timing))
        print(_line(rows[-1]), flush=True)
    summary = {
        **summarize(args.kernel, args.grid, rows),
        "shard": args.shard,
        "trials": args.trials,
        "budget_s": args.budget_s,
        "rounds": args.rounds,
        "timing": args.timing,
        "tune_exit_status": tune_status,
        "bundle": str(bundle_path),
        "vllm": vllm,
        "tune_and_pull_s": tuned_s,
        "wall_s": time.perf_counter() - start,
        "argv": sys.argv,
    }
    result = args.out / "through_pull.json"
    result.write_text(json.dumps({"summary": summary, "rows": rows}, indent=1, default=str))
    print(json.dumps({k: v for k, v in summary.items() if k != "not_run"}, indent=1))
    print(result)
    return 0 if summary["all_checked_within_tolerance"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
