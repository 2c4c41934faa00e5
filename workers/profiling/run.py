"""``profile``: a workload over a batch range, eager and graph; its report as plain data.

For each (phase, batch): the forward's latency per mode (medians, interleaved), one trace per mode
analysed by workers.profiling.trace, the eager trace's hot shapes; per phase the CPU/GPU-bound
transition; optionally (``bundle``) the same forwards with tuned kernels swapped in where the
bundle decides ``triton``, timed in the same rounds as the baseline, after the same-function check
of workers.profiling.check (a refused point is not timed), with the Amdahl bound of
workers.profiling.bound where the eager trace gives the swapped problems' share (an MoE block's
time split between its two GEMMs by their vendor times where the bundle has both:
workers.profiling.emit.measured_split; the studies' kernel speed-ups) with its ceiling (the same
problems at the device's roofline) and, where the all-swapped eager forward was traced, the
in-model figure beside it (the traces' GPU kernel time per forward), and per hot shape with a
vendor time in its bundle entry the study's vendor time against the model's own op
(workers.profiling.fidelity). An eager point
that is launch-bound (:func:`launch_bound`) keeps the vendor path for every op except the
kernels whose swapped path launches fewer kernels than the ops it replaces
(:data:`FEWER_LAUNCHES`, timed as their own eager variant in the same rounds): its
swapped latency is that variant's (the baseline's where the bundle has none of those kernels), and
the row keeps the measured all-swapped time beside the policy. The baseline's forwards are timed
once more, last in each round (a graph from its own capture, as the swapped forward's is): a
row's ``aa_change`` (that second baseline over the first) is the noise of its rounds, beside the
swap's ``change``. The same-function check runs on the
all-swapped forward. Traces land under
``out/traces``, plots and ``report.json`` in ``out``.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from search_spaces.device_identity import gpu_class, interpreter_class
from workers.profiling.bound import amdahl, exact_entry, floor_ms, in_model
from workers.profiling.check import ERROR_FLOOR, MAX_ERROR_RATIO, max_rel_error, refusal
from workers.profiling.emit import (
    HotShape,
    PointShapes,
    hot_shapes,
    job_documents,
    measured_split,
    write_jobs,
)
from workers.profiling.errors import ProfileError
from workers.profiling.fidelity import vendor_vs_model
from workers.profiling.trace import (
    GRAPH_PAYS_RATIO,
    Mode,
    Phase,
    analyze,
    load_trace,
    parse_trace,
    transition_batch,
)

if TYPE_CHECKING:
    from search_spaces.bundle import BundleEntry
    from workers.profiling.models import Workload

#: What a with-bundle row says where the policy keeps every op on the vendor path.
LAUNCH_BOUND_POLICY = (
    "kept vendor: the eager forward is launch-bound (graph/eager {ratio:.2f}), so a tuned "
    "kernel's launch costs more host time than its kernel saves"
)


#: Kernels whose swapped path launches fewer kernels than the ops it replaces (fused_moe: the
#: alignment, two GEMMs and the activation, against the torch path's sort, counts, gathers,
#: grouped GEMMs, scaling and scatter): a launch-bound eager forward still gains from them.
FEWER_LAUNCHES = frozenset({"fused_moe"})

#: The policy's words where the launch-saving kernels (:data:`FEWER_LAUNCHES`) ran.
LEAN_POLICY = (
    "kept vendor except {kernels} (their path launches fewer kernels than the ops it replaces): "
    "the eager forward is launch-bound (graph/eager {ratio:.2f})"
)


def _policy(ratio: float | None, lean: bool) -> str:
    if lean:
        return LEAN_POLICY.format(kernels=", ".join(sorted(FEWER_LAUNCHES)), ratio=ratio)
    return LAUNCH_BOUND_POLICY.format(ratio=ratio)


def _runs_under(swap: Any, kept: bool, lean: bool) -> Any:
    """What the Amdahl bound counts as swapped: every Triton decision; at a launch-bound point
    only the launch-saving kernels' (``lean``) or none."""
    if not kept:
        return swap.runs_triton
    if lean:
        return lambda k, p: k in FEWER_LAUNCHES and swap.runs_triton(k, p)
    return lambda k, p: False


def _exact(swap: Any, kernel: str, problem: dict[str, Any]) -> BundleEntry | None:
    """The swap's bundle entry for exactly ``problem``; None without one (or without a bundle of
    ``kernel`` it can swap)."""
    from workers.profiling.swap import FIELDS

    bundle, fields = swap.bundles.get(kernel), FIELDS.get(kernel)
    return None if bundle is None or fields is None else exact_entry(bundle, fields, problem)


def launch_bound(mode: Mode, graph_over_eager: float | None) -> bool:
    """Whether the deployment policy keeps every op of an ``mode`` forward on the vendor path:
    an eager forward whose CUDA graph runs under GRAPH_PAYS_RATIO of its time is set by its
    launches (the seed's CPU-bound regime), where a Triton launch's larger host cost shows and
    a faster kernel cannot. Graph forwards, and eager ones with no graph measured, swap."""
    return (
        mode is Mode.EAGER and graph_over_eager is not None and graph_over_eager < GRAPH_PAYS_RATIO
    )


@dataclass(frozen=True)
class ProfileOptions:
    model: str
    batches: tuple[int, ...]
    seq: int
    phases: tuple[Phase, ...]
    modes: tuple[Mode, ...]
    out: Path
    device: str
    dtype: str = "bfloat16"
    runs: int = 20
    steps: int = 3
    top_k: int = 10
    bundle: Path | None = None
    emit_job: Path | None = None
    emit_problems: int = 8
    emit_trials: int = 20
    layers: int | None = None
    max_error_ratio: float = MAX_ERROR_RATIO
    error_floor: float = ERROR_FLOOR
    notes: list[str] = field(default_factory=list)


def _ms(us: float | None) -> float | None:
    return None if us is None else us / 1e3


def _save_trace(raw: Path) -> Path:
    packed = raw.with_suffix(".json.gz")
    with raw.open("rb") as src, gzip.open(packed, "wb") as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()
    return packed


def _switched_on(swap: Any, fn: Any, only: frozenset[str] | None = None) -> Any:
    """``fn`` run with the swap's tuned kernels on (``only`` these kernels', if given; off again
    afterwards)."""

    def tuned() -> Any:
        swap.on, swap.only = True, only
        try:
            return fn()
        finally:
            swap.on, swap.only = False, None

    return tuned


def _swapped_trace(
    timed: list[tuple[str, Mode, Any]], options: ProfileOptions, point: str
) -> tuple[dict[str, Any], float | None]:
    """A trace of the all-swapped eager forward (if it was timed and traces are on): its path
    under ``--out`` (``swapped_trace``) and its top kernels (``swapped_top``), where the swapped
    time goes; and its GPU kernel µs per forward (None without the trace)."""
    from workers.profiling import capture

    forward = next((f for kind, m, f in timed if (kind, m) == ("tuned", Mode.EAGER)), None)
    if forward is None or not options.steps:
        return {}, None
    raw = options.out / "traces" / f"{point}-eager-swapped.json"
    packed = _save_trace(capture.record_trace(forward, options.device, raw, options.steps))
    stats = analyze(parse_trace(load_trace(packed)), options.top_k)
    path = str(packed.relative_to(options.out))
    return {"swapped_trace": path, "swapped_top": stats.to_dict()["top"]}, stats.kernel_us


def _same_function(
    workload: Workload, twin: Any, base: Any, tuned: Any, reference: Any, options: ProfileOptions
) -> dict[str, Any]:
    """The errors of workers.profiling.check at one point and its verdict (``refused``: why).
    Each forward is compared with the twin routed as it was (workers.profiling.models:
    ``rerouted`` counts the (layer, token) pairs where the twin would have chosen otherwise)."""
    from workers.profiling.models import same_routes

    base_out, base_routes = workload.routed(base)
    tuned_out, tuned_routes = workload.routed(tuned)
    base_ref, base_moved = workload.pinned(twin, reference, base_routes)
    if same_routes(base_routes, tuned_routes):
        tuned_ref, tuned_moved = base_ref, base_moved
    else:
        tuned_ref, tuned_moved = workload.pinned(twin, reference, tuned_routes)
    base_error, swapped_error = (
        max_rel_error(base_out, base_ref),
        max_rel_error(tuned_out, tuned_ref),
    )
    return {
        "baseline_error": base_error,
        "swapped_error": swapped_error,
        "max_rel_error": max_rel_error(tuned_out, base_out),
        "baseline_rerouted": base_moved,
        "swapped_rerouted": tuned_moved,
        "refused": refusal(base_error, swapped_error, options.max_error_ratio, options.error_floor),
    }


@dataclass
class _Rounds:
    """The forwards one point times in the same rounds, each under its kind ("base", "tuned",
    "lean", "again"), and the CUDA graphs they replay (kept alive while they are timed); a mode
    whose capture failed is left out, with a note in ``notes``."""

    device: str
    where: str
    notes: list[str]
    forwards: list[tuple[str, Mode, Any]] = field(default_factory=list)
    graphs: list[Any] = field(default_factory=list)

    def add(self, kind: str, fn: Any, modes: Sequence[Mode], label: str = "") -> dict[Mode, Any]:
        """``fn``'s callable per mode (a graph captured now) added under ``kind``; returned."""
        from workers.profiling import capture

        got, graphs, failed = capture.forwards_for(fn, modes, self.device)
        self.notes += [f"{self.where}{label}: {why}" for why in failed]
        self.graphs += graphs
        self.forwards += [(kind, m, f) for m, f in got.items()]
        return got


def profile(options: ProfileOptions) -> dict[str, Any]:
    """Run the whole profile (see module) and return the report (also written as report.json)."""
    from workers.profiling import capture
    from workers.profiling.models import load_workload

    if options.emit_job is not None and not options.steps:
        raise ProfileError("--emit-job reads the shapes from traces: give --trace-forwards >= 1")
    if options.emit_job is not None and not options.emit_job.parent.is_dir():
        raise ProfileError(f"--emit-job: folder {options.emit_job.parent} does not exist")
    workload = load_workload(options.model, options.device, options.dtype, options.layers)
    notes = list(options.notes) + workload.notes
    modes = options.modes
    if not capture.cuda(options.device) and Mode.GRAPH in modes:
        modes = tuple(m for m in modes if m is not Mode.GRAPH)
        notes.append("graph mode needs a CUDA device: only eager ran")
    if not capture.cuda(options.device):
        notes.append(
            "CPU run: the trace is the profiler's CPU trace, with no GPU kernels; latency is "
            "host time"
        )
    swap = twin = None
    if options.bundle is not None:
        import torch

        from workers.profiling.swap import install, load_bundles

        if capture.cuda(options.device):
            props = torch.cuda.get_device_properties(torch.device(options.device))
            device = gpu_class(props, hip=bool(getattr(torch.version, "hip", None)))
        elif os.environ.get("TRITON_INTERPRET") == "1":
            device = interpreter_class()
            notes.append("--with-bundle on the CPU: Triton's interpreter ran the tuned kernels")
        else:
            raise ProfileError(
                "--with-bundle runs tuned Triton kernels: it needs a CUDA device "
                "(or TRITON_INTERPRET=1 on the CPU)"
            )
        bundles = load_bundles(options.bundle, device)
        twin = workload.fp32_twin()  # before the swap wraps the model's modules
        swap = install(workload.model, bundles)
    capture.init_gpu_profiler(options.device)
    traces = options.out / "traces"
    rows: list[dict[str, Any]] = []
    tuned_rows: list[dict[str, Any]] = []
    shapes: list[PointShapes] = []
    skipped: set[str] = set()
    for phase in options.phases:
        for batch in options.batches:
            fn = workload.forward_for(phase, batch, options.seq)
            where = f"{phase.value} batch {batch}"
            rounds = _Rounds(options.device, where, notes)
            fwds = rounds.add("base", fn, modes)
            check: dict[str, Any] = {}
            if swap is not None and twin is not None:
                tuned = _switched_on(swap, fn)
                try:
                    reference = workload.reference_for(twin, phase, batch, options.seq)
                    check = _same_function(workload, twin, fn, tuned, reference, options)
                except Exception as exc:  # a tuned kernel that cannot run is reported, not hidden
                    notes.append(f"{where}: tuned kernels failed: {str(exc).splitlines()[0]}")
                    check = {"refused": f"tuned kernels failed: {str(exc).splitlines()[0]}"}
                if check["refused"]:
                    notes.append(f"{where}: swap refused: {check['refused']}")
                else:
                    rounds.add("tuned", tuned, modes, " (tuned)")
                    if Mode.EAGER in modes and FEWER_LAUNCHES & set(swap.bundles):
                        rounds.add(
                            "lean",
                            _switched_on(swap, fn, FEWER_LAUNCHES),
                            (Mode.EAGER,),
                            " (launch-saving kernels only)",
                        )
                    # the baseline again, last in each round: its change over the baseline is the
                    # A/A figure, the rounds' own noise (slot position included); a graph is
                    # captured afresh, as the swapped one is, so capture-to-capture noise counts too
                    rounds.add("again", fn, modes, " (A/A)")
            timed = rounds.forwards
            latencies = capture.time_interleaved(
                [f for _, _, f in timed], options.device, options.runs
            )
            by = {(kind, m): ms for (kind, m, _), ms in zip(timed, latencies, strict=True)}
            found: list[HotShape] = []
            base_kernel_us: float | None = None  # the eager trace's, per forward
            eager_ms = by.get(("base", Mode.EAGER))
            graph_ms = by.get(("base", Mode.GRAPH))
            ratio = graph_ms / eager_ms if graph_ms is not None and eager_ms else None
            for mode, f in fwds.items():
                latency = by[("base", mode)]
                row: dict[str, Any] = {
                    "phase": phase.value,
                    "batch": batch,
                    "mode": mode.value,
                    "latency_ms": latency,
                    "graph_over_eager": ratio,
                    "tklqt_ms": None,
                    "tklqt_over_latency": None,
                    "idle_share": None,
                    "kernel_gaps_ms": None,
                    "graph_launch_us": None,
                    "graph_first_kernel_us": None,
                    "trace": None,
                    "stats": None,
                }
                rows.append(row)
                if not options.steps:
                    continue
                name = f"{phase.value}-b{batch}-{mode.value}.json"
                raw = capture.record_trace(f, options.device, traces / name, options.steps)
                packed = _save_trace(raw)
                trace = parse_trace(load_trace(packed))
                stats = analyze(trace, options.top_k)
                row.update(
                    tklqt_ms=_ms(stats.tklqt_us),
                    tklqt_over_latency=None
                    if stats.tklqt_us is None
                    else stats.tklqt_us / 1e3 / latency,
                    idle_share=stats.idle_share,
                    kernel_gaps_ms=_ms(stats.gap_us),
                    graph_launch_us=stats.graph_launch_us,
                    graph_first_kernel_us=stats.graph_first_kernel_us,
                    trace=str(packed.relative_to(options.out)),
                    stats=stats.to_dict(),
                )
                if mode is Mode.EAGER:
                    base_kernel_us = stats.kernel_us
                    found, why = hot_shapes(trace)
                    skipped.update(why)
                    pays = ratio is not None and ratio < GRAPH_PAYS_RATIO
                    total = stats.kernel_us if trace.kernels else sum(s.weight_us for s in found)
                    shapes.append(
                        PointShapes(phase.value, batch, "graph" if pays else "kernel", total, found)
                    )
            if swap is not None:
                swapped_trace, swapped_kernel_us = _swapped_trace(
                    timed, options, f"{phase.value}-b{batch}"
                )
                # The problems as the swap runs them, each MoE block split by vendor times.
                split = measured_split(
                    [replace(h, problem=swap.ran(h.kernel, h.problem)) for h in found],
                    lambda k, p: getattr(_exact(swap, k, p), "vendor_ms", None),
                )
                # a CPU trace has host times under the profiler, not kernel times: no comparison
                versus = [
                    asdict(v)
                    for v in vendor_vs_model(
                        [(h.kernel, h.problem, h.weight_us, h.calls) for h in split],
                        lambda k, p: _exact(swap, k, p),
                    )
                ] if capture.cuda(options.device) else []  # fmt: skip
                for mode in modes:
                    if ("base", mode) not in by:
                        continue
                    base, new = by[("base", mode)], by.get(("tuned", mode))
                    again = by.get(("again", mode))
                    kept = launch_bound(mode, ratio)
                    lean = by.get(("lean", mode)) if kept else None
                    bound = amdahl(
                        [(s.kernel, s.problem, s.weight_us) for s in split],
                        _runs_under(swap, kept, lean is not None),
                        lambda k, p: _exact(swap, k, p),
                        lambda k, p: floor_ms(swap.bundles[k], p),
                        base * 1e3,
                    )
                    gpu = in_model(base_kernel_us, swapped_kernel_us, base * 1e3)
                    chosen = (lean or base) if kept and new is not None else new
                    tuned_rows.append(
                        {
                            "phase": phase.value,
                            "batch": batch,
                            "mode": mode.value,
                            "baseline_ms": base,
                            "tuned_ms": chosen,
                            "change": None if chosen is None else chosen / base - 1.0,
                            "aa_change": None if again is None else again / base - 1.0,
                            "policy": _policy(ratio, lean is not None) if kept else None,
                            "swapped_all_ms": new,
                            **(swapped_trace if mode is Mode.EAGER else {}),
                            **check,
                            "amdahl": None if bound is None else bound.to_dict(),
                            "in_model": None if gpu is None else gpu.to_dict(),
                            "vendor_vs_model": versus,
                        }
                    )
            del fwds, rounds, timed
            capture.release(options.device)
    transitions = {}
    for phase in options.phases:
        eager = [
            r
            for r in rows
            if r["phase"] == phase.value and r["mode"] == Mode.EAGER.value and r["stats"]
        ]
        idle = [r["stats"]["idle_launch_us"] for r in eager if r["stats"]["idle_launch_us"]]
        transitions[phase.value] = transition_batch(
            {r["batch"]: r["stats"]["launch_to_start_us"] for r in eager},
            statistics.median(idle) if idle else None,
        ).to_dict()
        graph_pays = [
            r["batch"]
            for r in rows
            if r["phase"] == phase.value and r["mode"] == Mode.EAGER.value
            if r["graph_over_eager"] is not None and r["graph_over_eager"] >= GRAPH_PAYS_RATIO
        ]
        transitions[phase.value]["graph_stops_paying_batch"] = min(graph_pays, default=None)
    report: dict[str, Any] = {
        "model": options.model,
        "layers": options.layers,
        "device": options.device,
        "dtype": options.dtype,
        "seq": options.seq,
        "runs": options.runs,
        "forwards_per_trace": options.steps,
        "notes": notes,
        "rows": rows,
        "transitions": transitions,
        "skipped_shapes": sorted(skipped),
    }
    if swap is not None:
        report["with_bundle"] = {
            "bundles": {k: b.device_class for k, b in swap.bundles.items()},
            "lookups": swap.lookups,
            "used": swap.used,
            "error_rule": f"refused where swapped error > {options.max_error_ratio:g} x baseline "
            f"error + {options.error_floor:g} (both vs the float32 twin, routed as each was)",
            "rows": tuned_rows,
        }
    documents = job_documents(shapes, options.emit_problems, options.emit_trials)
    report["hot_shapes"] = [
        {"kernel": k, "objective": o, "problems": ranking} for k, o, _, ranking in documents
    ]
    if options.emit_job is not None:
        report["emitted_jobs"] = [str(p) for p in write_jobs(options.emit_job, documents)]
    from workers.profiling.plots import plot_report

    title = f"{options.model}, seq {options.seq}, {options.dtype}, {options.device}"
    report["plots"] = [str(p) for p in plot_report(rows, options.out, title)]
    (options.out / "report.json").write_text(json.dumps(report, indent=1, default=str))
    return report
