"""``tunefleet profile``: launch/queuing profile of a model (seed 002's TKLQT), hot shapes as jobs.

torch and the profiler load inside the command (workers.profiling), so building the CLI stays light.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from orchestrator.commands._common import JsonOption, console, print_json
from orchestrator.errors import OrchestratorError

PHASES = ("prefill", "decode", "both")
MODES = ("eager", "graph", "both")


def _batches(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise OrchestratorError(f"--batch {text!r}: give sizes like 1,2,4,8") from None
    if not values or min(values) < 1:
        raise OrchestratorError(f"--batch {text!r}: give positive sizes like 1,2,4,8")
    return tuple(sorted(set(values)))


def _choice(value: str, name: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise OrchestratorError(f"--{name} {value!r} is not one of {', '.join(choices)}")
    return value


def profile(
    model: Annotated[
        str,
        typer.Argument(
            help="tiny, tiny-moe, llama-3.2-1b, llama-3-8b, mixtral-8x7b, qwen3-30b-a3b (their "
            "dims, random weights), or MODULE:CALLABLE returning (model, build(batch, seq) -> "
            "args). MODULE:CALLABLE imports and runs that code."
        ),
    ],
    batch: Annotated[str, typer.Option(help="Batch sizes, comma-separated.")] = "1,2,4,8,16",
    seq: Annotated[
        int, typer.Option(help="Prompt tokens (prefill) or cached tokens (decode).")
    ] = 512,
    phase: Annotated[str, typer.Option(help="prefill, decode or both.")] = "prefill",
    mode: Annotated[str, typer.Option(help="eager, graph (CUDA graph replay) or both.")] = "both",
    out: Annotated[Path, typer.Option(help="Folder for traces, plots and report.json.")] = Path(
        "profile-out"
    ),
    device: Annotated[str, typer.Option(help="cuda (default when present) or cpu.")] = "auto",
    dtype: Annotated[str, typer.Option(help="bfloat16, float16 or float32.")] = "bfloat16",
    layers: Annotated[
        int | None,
        typer.Option(help="Build a built-in model with its first N layers only (fits, runs fast)."),
    ] = None,
    runs: Annotated[int, typer.Option(help="Timed forwards per point (median; at least 10).")] = 20,
    top_k: Annotated[int, typer.Option("--top-k", help="Kernels listed per point.")] = 10,
    trace_forwards: Annotated[
        int,
        typer.Option(
            "--trace-forwards", help="Forwards per trace (medians over them); 0: latency only."
        ),
    ] = 3,
    emit_job: Annotated[
        Path | None,
        typer.Option(
            "--emit-job",
            help="Write the hot GEMM/attention/norm shapes as job files FILE-stem.KERNEL."
            "OBJECTIVE.yaml beside FILE (for `tunefleet tune`).",
        ),
    ] = None,
    emit_problems: Annotated[
        int, typer.Option("--emit-problems", help="Hottest problems per emitted job.")
    ] = 8,
    emit_trials: Annotated[int, typer.Option("--emit-trials", help="Trials per study.")] = 20,
    with_bundle: Annotated[
        Path | None,
        typer.Option(
            "--with-bundle",
            help="Folder of `tunefleet pull` bundles: also time the model with those tuned "
            "kernels swapped in where the bundle decides triton (matmul, rmsnorm, flash/paged "
            "attention, fused_moe), after checking both against a float32 run.",
        ),
    ] = None,
    max_error_ratio: Annotated[
        float,
        typer.Option(
            "--max-error-ratio",
            help="--with-bundle: refuse a point whose swapped error vs float32 exceeds this "
            "times the baseline's error plus --error-floor.",
        ),
    ] = 2.0,
    error_floor: Annotated[
        float, typer.Option("--error-floor", help="Absolute slack of that rule.")
    ] = 1e-3,
    json_out: JsonOption = False,
) -> None:
    """Profile a model's forwards over a batch range: latency eager vs graph, TKLQT, GPU idle
    share, top kernels and the CPU/GPU-bound transition; plots and report.json under --out."""
    batches = _batches(batch)
    _choice(phase, "phase", PHASES)
    _choice(mode, "mode", MODES)
    if seq < 1:
        raise OrchestratorError(f"--seq {seq}: give a positive number of tokens")
    if runs < 10:
        raise OrchestratorError(f"--runs {runs}: latency is a median of at least 10 runs")
    if trace_forwards < 0:
        raise OrchestratorError(f"--trace-forwards {trace_forwards}: give 0 or more")
    if device not in ("auto", "cuda", "cpu"):
        raise OrchestratorError(f"--device {device!r} is not one of auto, cuda, cpu")
    if layers is not None and layers < 1:
        raise OrchestratorError(f"--layers {layers}: give 1 or more")
    if not max_error_ratio >= 1 or not error_floor >= 0:
        raise OrchestratorError(
            f"--max-error-ratio {max_error_ratio} / --error-floor {error_floor}: give a ratio "
            ">= 1 and a floor >= 0"
        )
    import torch

    from workers.profiling.run import ProfileOptions
    from workers.profiling.run import profile as run_profile
    from workers.profiling.trace import Mode, Phase

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    elif device == "cuda" and not torch.cuda.is_available():
        raise OrchestratorError("--device cuda: no CUDA device is visible")
    out.mkdir(parents=True, exist_ok=True)
    report = run_profile(
        ProfileOptions(
            model=model,
            batches=batches,
            seq=seq,
            phases=tuple(Phase) if phase == "both" else (Phase(phase),),
            modes=tuple(Mode) if mode == "both" else (Mode(mode),),
            out=out,
            device=device,
            dtype=dtype,
            runs=runs,
            steps=trace_forwards,
            top_k=top_k,
            bundle=with_bundle,
            emit_job=emit_job,
            emit_problems=emit_problems,
            emit_trials=emit_trials,
            layers=layers,
            max_error_ratio=max_error_ratio,
            error_floor=error_floor,
        )
    )
    if json_out:
        print_json(report)
    else:
        render(report)


def _num(value: Any, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def render(report: dict[str, Any]) -> None:
    """The report as tables: per point, transitions, top kernels, tuned-kernel change, files."""
    from rich.table import Table

    con = console()
    if not con.is_terminal:
        con.width = max(con.width, 150)
    for note in report["notes"]:
        con.print(f"note: {note}")
    table = Table(title=f"profile · {report['model']} · seq {report['seq']} · {report['device']}")
    for column in (
        "phase", "batch", "mode", "latency ms", "graph/eager", "kernels (matched)",
        "TKLQT ms", "TKLQT/latency", "launch→start µs", "graph launch µs", "launch→1st µs",
        "kernel gaps ms", "GPU idle", "kernel ms",
    ):  # fmt: skip
        table.add_column(column)
    for r in report["rows"]:
        s = r["stats"] or {"kernels": None, "matched": None, "launch_to_start_us": None}
        table.add_row(
            r["phase"], str(r["batch"]), r["mode"], f"{r['latency_ms']:.3f}",
            _num(r["graph_over_eager"], ".2f"),
            "-" if s["kernels"] is None else f"{s['kernels']:g} ({s['matched']:g})",
            _num(r["tklqt_ms"], ".3f"), _num(r["tklqt_over_latency"], ".2f"),
            _num(s["launch_to_start_us"], ".1f"), _num(r.get("graph_launch_us"), ".1f"),
            _num(r.get("graph_first_kernel_us"), ".1f"), _num(r.get("kernel_gaps_ms"), ".3f"),
            _num(r["idle_share"], ".0%"), _num(s.get("kernel_us") and s["kernel_us"] / 1e3, ".3f"),
        )  # fmt: skip
    con.print(table)
    if any(r["mode"] == "graph" and r["stats"] for r in report["rows"]):
        con.print(
            "graph rows: one cudaGraphLaunch issues every kernel, so TKLQT (eager only) is "
            "undefined; graph launch = its CPU time, launch→1st = to the first kernel's start, "
            "kernel gaps = GPU idle between the forward's kernels"
        )
    for phase, t in report["transitions"].items():
        idle = _num(t["idle_launch_us"], ".1f")
        con.print(
            f"{phase}: CPU/GPU-bound transition at batch {t['batch'] or '-'} "
            f"(idle launch latency {idle} µs; {t['reason']}); "
            f"graph stops paying (graph/eager >= 0.9) at batch "
            f"{t['graph_stops_paying_batch'] or '-'}"
        )
    eager = [r for r in report["rows"] if r["mode"] == "eager" and (r["stats"] or {}).get("top")]
    if eager:
        last = eager[-1]
        top = Table(title=f"top kernels · {last['phase']} batch {last['batch']} eager")
        for column in ("kernel", "operator", "calls", "µs / forward", "share"):
            top.add_column(column)
        for k in last["stats"]["top"][:5]:
            top.add_row(
                k["name"][:60],
                k["op"],
                f"{k['calls']:g}",
                f"{k['gpu_us']:.1f}",
                f"{k['share']:.0%}",
            )
        con.print(top)
    tuned = report.get("with_bundle")
    if tuned:
        render_swap(tuned)
    for path in report.get("emitted_jobs", []):
        con.print(f"job: {path}")
    for path in report["plots"]:
        con.print(f"plot: {path}")


def render_swap(tuned: dict[str, Any]) -> None:
    """The --with-bundle part: what was swapped, the change per point, errors, Amdahl bound and
    its roofline ceiling."""
    from rich.table import Table

    from workers.profiling.fidelity import describe

    con = console()
    for kernel, counts in tuned["used"].items():
        con.print(
            f"{kernel}: {counts.get('triton', 0)} problems on Triton, "
            f"{counts.get('kept vendor', 0)} kept vendor ({tuned['lookups'].get(kernel, {})})"
        )
    t = Table(title="tuned kernels swapped in (change of end-to-end latency; + is slower)")
    for column in (
        "phase", "batch", "mode", "baseline ms", "tuned ms", "change", "A/A", "bound",
        "ceiling", "err base/fp32", "err swap/fp32", "refused / policy",
    ):  # fmt: skip
        t.add_column(column)
    differ: dict[str, None] = {}
    for r in tuned["rows"]:
        amdahl = r.get("amdahl") or {}
        t.add_row(
            r["phase"], str(r["batch"]), r["mode"], f"{r['baseline_ms']:.3f}",
            _num(r["tuned_ms"], ".3f"), _num(r["change"], "+.1%"),
            _num(r.get("aa_change"), "+.1%"), _num(amdahl.get("change"), "+.1%"),
            _num(amdahl.get("ceiling"), "+.1%"),
            _num(r.get("baseline_error"), ".2g"), _num(r.get("swapped_error"), ".2g"),
            r["refused"] or ("kept vendor: launch-bound eager" if r.get("policy") else ""),
        )  # fmt: skip
        for v in r.get("vendor_vs_model") or []:
            if v["differs"]:
                differ[f"{r['phase']} b{r['batch']} {describe(v)}"] = None
    con.print(t)
    con.print(
        "A/A: the baseline timed again, last in each round (the rounds' noise; a graph from a "
        "second capture); bound: the change "
        "the studies' kernel speed-ups allow; ceiling: the same kernels at the device's roofline; "
        f"same-function check: {tuned['error_rule']}"
    )
    for line in differ:
        con.print(f"note: study vendor time far from the model's own op: {line}")


def register(app: typer.Typer) -> None:
    app.command()(profile)
