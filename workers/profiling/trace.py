"""Launch and queuing analysis of a torch.profiler (Kineto) Chrome trace: pure Python, no torch.

Definitions (seed 002, Vellaisamy et al., arXiv 2504.11750):

* A *kernel* is a trace event of category ``kernel`` (memcpy and memset are not counted). Its
  *launch* is the ``cuda_runtime`` or ``cuda_driver`` event with the same ``correlation`` id:
  runtime launches (``cudaLaunchKernel*``), driver launches (``cuLaunchKernel*``: cuBLAS, Triton)
  and graph launches (``cudaGraphLaunch``: every kernel a graph replay runs carries that call's id).
* *launch-to-start* of a kernel = its GPU start minus its launch call's CPU start (both in the
  trace's microseconds); **TKLQT** = the sum of launch-to-start over the kernels of one forward
  matched to a runtime or driver launch. Kernels without a launch event are counted and their
  reason is given.
* TKLQT is defined for eager forwards only: in a CUDA-graph replay one ``cudaGraphLaunch`` issues
  every kernel, so a kernel's "launch-to-start" would be its offset in the replay, not a launch
  and queue (summed, it grows with the square of the kernel count). A forward whose kernels all
  come from graph launches has no TKLQT; what the seed's metric means there is reported instead:
  the *graph launch* (the ``cudaGraphLaunch`` calls' CPU time, and launch-to-start of each
  replay's first kernel) and the GPU's *kernel gaps* (see below).
* *Kernel gaps* of a forward = (last kernel end - first kernel start) - union of kernel
  intervals: the time the GPU idles between the forward's kernels (in eager, waiting for launches;
  in a graph, the replay's own inter-kernel cost).
* A forward is one ``user_annotation`` named ``STEP`` (a trace without one is one forward); a
  kernel belongs to the forward whose window holds its launch. Per-forward numbers are medians
  over the trace's forwards.
* *GPU idle share* = 1 - (union of kernel intervals) / window, the window running from the
  forward's CPU start to the later of its CPU end and its last kernel's end.
* *Idle launch latency* = median launch-to-start of runtime/driver kernels launched while no
  kernel was queued or running (every earlier-launched kernel had ended): the pure launch cost.
* The *issuing operator* of a kernel is the outermost ``cpu_op`` (on the launch's thread) whose
  interval holds the launch call; the leaf operator is the innermost. A ``user_annotation`` named
  with :data:`MOE_ANNOTATION` (an MoE expert block of workers.profiling.models) counts as an
  operator too: it names its problem, as recorded input shapes name the others.

Transition rule (:func:`transition_batch`): the CPU/GPU-bound transition is the smallest batch
from which on (that batch and every larger one) the eager forward's mean launch-to-start exceeds
``TRANSITION_FACTOR`` (2) times the idle launch latency. While the host is the bottleneck, the GPU
waits for each launch, so a kernel starts about one launch latency after its call (ratio near 1,
flat TKLQT per kernel); once the GPU is the bottleneck, kernels queue behind earlier ones and the
wait grows with kernel time. At a ratio of 2 a kernel waits in the queue as long again as the
launch itself took: the queue, not the host, sets its start. The rule needs only the eager trace
(TKLQT is the seed's metric); the graph/eager latency ratio (:data:`GRAPH_PAYS_RATIO`) is reported
beside it as a cross-check and picks the tuning objective.
"""

from __future__ import annotations

import enum
import gzip
import json
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from workers.profiling.errors import ProfileError

STEP = "tunefleet.forward"
#: Prefix of the user_annotation around an MoE expert block (its problem follows the prefix).
MOE_ANNOTATION = "tunefleet.moe"
TRANSITION_FACTOR = 2.0
#: A graph "pays" at a batch when its latency is under this fraction of eager's.
GRAPH_PAYS_RATIO = 0.9
TOP_K = 10


class Phase(str, enum.Enum):
    """What one forward does: a prompt of ``seq`` tokens, or one new token over ``seq`` cached."""

    PREFILL = "prefill"
    DECODE = "decode"


class Mode(str, enum.Enum):
    """How a forward is issued: op by op (eager), or one CUDA graph replay (graph)."""

    EAGER = "eager"
    GRAPH = "graph"


class LaunchKind(str, enum.Enum):
    RUNTIME = "runtime"
    DRIVER = "driver"
    GRAPH = "graph"


@dataclass(frozen=True)
class Event:
    name: str
    ts: float
    dur: float
    tid: Any
    args: Mapping[str, Any]

    @property
    def end(self) -> float:
        return self.ts + self.dur


@dataclass(frozen=True)
class Launch:
    event: Event
    kind: LaunchKind
    op: str | None
    leaf_op: str | None
    shape_op: int | None  # index into Trace.shape_ops of the outermost shape op holding the call


@dataclass(frozen=True)
class Kernel:
    event: Event
    launch: Launch | None

    @property
    def delay(self) -> float:
        """Launch-to-start in microseconds (only for matched kernels)."""
        assert self.launch is not None
        return self.event.ts - self.launch.event.ts


#: Operators whose recorded input shapes name a tunable problem (see workers.profiling.emit).
SHAPE_OPS = (
    "aten::linear",
    "aten::matmul",
    "aten::mm",
    "aten::addmm",
    "aten::scaled_dot_product_attention",
    "aten::rms_norm",
)


def is_shape_op(name: str) -> bool:
    """A SHAPE_OPS operator or an MoE expert block's annotation."""
    return name in SHAPE_OPS or name.startswith(MOE_ANNOTATION)


@dataclass(frozen=True)
class ShapeOp:
    """One call of a SHAPE_OPS operator: its recorded input dims and types, CPU interval."""

    event: Event

    @property
    def dims(self) -> list[list[int]]:
        return [
            list(d) if isinstance(d, list) else [] for d in self.event.args.get("Input Dims", [])
        ]

    @property
    def types(self) -> list[str]:
        return [str(t) for t in self.event.args.get("Input type", [])]

    @property
    def concrete(self) -> list[str]:
        return [str(c) for c in self.event.args.get("Concrete Inputs", [])]


@dataclass
class Trace:
    """The parsed parts of one trace: forwards, kernels with their launches, shape ops."""

    steps: list[Event]
    kernels: list[Kernel]
    shape_ops: list[ShapeOp]
    unmatched: dict[str, int] = field(default_factory=dict)


def _events(doc: Mapping[str, Any]) -> Iterable[tuple[str, Event]]:
    for raw in doc.get("traceEvents", []):
        if not isinstance(raw, Mapping) or raw.get("ph") != "X" or "ts" not in raw:
            continue
        yield (
            str(raw.get("cat", "")),
            Event(
                str(raw.get("name", "")),
                float(raw["ts"]),
                float(raw.get("dur", 0.0)),
                raw.get("tid"),
                raw.get("args") or {},
            ),
        )


def _launch_kind(cat: str, name: str) -> LaunchKind:
    if name.startswith("cudaGraphLaunch") or name.startswith("cuGraphLaunch"):
        return LaunchKind.GRAPH
    if cat == "cuda_driver" or (name.startswith("cu") and not name.startswith("cuda")):
        return LaunchKind.DRIVER
    return LaunchKind.RUNTIME


def parse_trace(doc: Mapping[str, Any], step: str = STEP) -> Trace:
    """Split a decoded Chrome trace into forwards, kernels (matched to launches) and shape ops."""
    steps: list[Event] = []
    raw_kernels: list[Event] = []
    launches: list[tuple[Event, LaunchKind]] = []
    ops_by_tid: dict[Any, list[Event]] = defaultdict(list)
    for cat, event in _events(doc):
        if cat == "kernel":
            raw_kernels.append(event)
        elif cat in ("cuda_runtime", "cuda_driver") and "correlation" in event.args:
            launches.append((event, _launch_kind(cat, event.name)))
        elif cat == "cpu_op":
            ops_by_tid[event.tid].append(event)
        elif cat == "user_annotation" and event.name == step:
            steps.append(event)
        elif cat == "user_annotation" and event.name.startswith(MOE_ANNOTATION):
            ops_by_tid[event.tid].append(event)
    shape_ops: list[ShapeOp] = []
    by_corr: dict[Any, Launch] = {}
    launches_by_tid: dict[Any, list[tuple[Event, LaunchKind]]] = defaultdict(list)
    for event, kind in launches:
        launches_by_tid[event.tid].append((event, kind))
    for tid, tid_launches in launches_by_tid.items():
        for launch in _attribute(ops_by_tid.get(tid, []), tid_launches, shape_ops):
            by_corr[launch.event.args["correlation"]] = launch
    kernels: list[Kernel] = []
    unmatched: dict[str, int] = defaultdict(int)
    for event in raw_kernels:
        corr = event.args.get("correlation")
        matched = by_corr.get(corr)
        if matched is None:
            reason = (
                "kernel event has no correlation id"
                if corr is None
                else "no cuda_runtime/cuda_driver event with its correlation id "
                "(launched before the profiler started, or dropped from the trace)"
            )
            unmatched[reason] += 1
        kernels.append(Kernel(event, matched))
    # Shape ops that issued no launch (a CPU-only trace) still count, with their CPU time.
    seen = {id(s.event) for s in shape_ops}
    for tid_ops in ops_by_tid.values():
        for op in _outermost_shape_ops(tid_ops):
            if id(op) not in seen:
                shape_ops.append(ShapeOp(op))
    steps.sort(key=lambda e: e.ts)
    return Trace(steps, kernels, shape_ops, dict(unmatched))


def _outermost_shape_ops(ops: list[Event]) -> list[Event]:
    """SHAPE_OPS calls that no other SHAPE_OPS call encloses (linear holds mm: linear counts)."""
    outer: list[Event] = []
    for op in sorted(ops, key=lambda e: (e.ts, -e.dur)):
        if not is_shape_op(op.name):
            continue
        if outer and op.ts >= outer[-1].ts and op.end <= outer[-1].end:
            continue
        outer.append(op)
    return outer


def _attribute(
    ops: list[Event], launches: list[tuple[Event, LaunchKind]], shape_ops: list[ShapeOp]
) -> list[Launch]:
    """Launches of one thread with the operators enclosing each call (one sweep in time order)."""
    # Ops sort before a launch at the same time (they hold it); enclosing ops before inner ones.
    items: list[tuple[float, int, float, Event, LaunchKind | None]] = [
        (op.ts, 0, -op.dur, op, None) for op in ops
    ]
    items += [(event.ts, 1, 0.0, event, kind) for event, kind in launches]
    items.sort(key=lambda item: (item[0], item[1], item[2]))
    stack: list[Event] = []
    shape_index: dict[int, int] = {}
    out: list[Launch] = []
    for ts, _, _, event, kind in items:
        while stack and stack[-1].end < ts:
            stack.pop()
        if kind is None:
            stack.append(event)
            continue
        chain = [op for op in stack if op.end >= ts]
        outer_shape = next((op for op in chain if is_shape_op(op.name)), None)
        index = None
        if outer_shape is not None:
            if id(outer_shape) not in shape_index:
                shape_index[id(outer_shape)] = len(shape_ops)
                shape_ops.append(ShapeOp(outer_shape))
            index = shape_index[id(outer_shape)]
        out.append(
            Launch(
                event,
                kind,
                chain[0].name if chain else None,
                chain[-1].name if chain else None,
                index,
            )
        )
    return out


@dataclass(frozen=True)
class TopKernel:
    name: str
    op: str
    leaf_op: str
    calls: float
    gpu_us: float
    share: float


@dataclass(frozen=True)
class StepStats:
    """One forward: ``tklqt_us`` None where no kernel came from a runtime/driver launch;
    ``graph_*`` zero without graph launches."""

    kernels: int
    matched: int
    launched: int
    tklqt_us: float | None
    kernel_us: float
    idle_share: float
    window_us: float
    gap_us: float
    graph_launches: int
    graph_launch_us: float
    graph_first_kernel_us: float


@dataclass(frozen=True)
class TraceStats:
    """Per-forward medians of one trace, plus what holds for the trace as a whole."""

    forwards: int
    kernels: float
    matched: float
    unmatched: dict[str, int]
    launch_kinds: dict[str, int]
    tklqt_us: float | None
    launch_to_start_us: float | None
    kernel_us: float
    mean_kernel_us: float | None
    idle_share: float | None
    window_us: float
    idle_launch_us: float | None
    top: list[TopKernel]
    note: str | None = None
    #: GPU idle time between the forward's first kernel start and last kernel end.
    gap_us: float | None = None
    #: Graph replays per forward, their cudaGraphLaunch calls' CPU time, and launch-to-start of
    #: each replay's first kernel (summed over the forward's replays); None without graphs.
    graph_launches: float | None = None
    graph_launch_us: float | None = None
    graph_first_kernel_us: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _union(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, -math.inf
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def _step_of(ts: float, steps: Sequence[Event]) -> int | None:
    for i, step in enumerate(steps):
        if step.ts <= ts <= step.end:
            return i
    return None


def kernels_by_step(trace: Trace) -> list[list[Kernel]]:
    """The trace's kernels grouped by the forward that launched them (all in one without steps;
    unmatched kernels go by their own start)."""
    if not trace.steps:
        return [list(trace.kernels)]
    groups: list[list[Kernel]] = [[] for _ in trace.steps]
    for kernel in trace.kernels:
        when = kernel.launch.event.ts if kernel.launch else kernel.event.ts
        i = _step_of(when, trace.steps)
        if i is not None:
            groups[i].append(kernel)
    return groups


def idle_launch_latency(kernels: Sequence[Kernel]) -> float | None:
    """Median launch-to-start of runtime/driver kernels launched onto an idle GPU (see module)."""
    eager = sorted(
        (k for k in kernels if k.launch and k.launch.kind is not LaunchKind.GRAPH),
        key=lambda k: k.launch.event.ts if k.launch else 0.0,
    )
    samples, busy_until = [], -math.inf
    for kernel in eager:
        assert kernel.launch is not None
        if busy_until < kernel.launch.event.ts:
            samples.append(kernel.delay)
        busy_until = max(busy_until, kernel.event.end)
    return statistics.median(samples) if samples else None


def _step_stats(kernels: list[Kernel], step: Event | None) -> StepStats:
    matched = [k for k in kernels if k.launch is not None]
    launched = [k for k in matched if k.launch and k.launch.kind is not LaunchKind.GRAPH]
    first_of: dict[int, tuple[Event, float]] = {}  # graph launch -> (its event, first kernel ts)
    for k in matched:
        if k.launch and k.launch.kind is LaunchKind.GRAPH:
            ev = k.launch.event
            known = first_of.get(id(ev))
            first_of[id(ev)] = (ev, min(k.event.ts, known[1]) if known else k.event.ts)
    kernel_us = sum(k.event.dur for k in kernels)
    if step is not None:
        start = step.ts
        end = max([step.end, *(k.event.end for k in kernels)])
    elif kernels:
        start = min(k.launch.event.ts if k.launch else k.event.ts for k in kernels)
        end = max(k.event.end for k in kernels)
    else:
        start = end = 0.0
    window = end - start
    busy = _union([(k.event.ts, k.event.end) for k in kernels])
    span = max(k.event.end for k in kernels) - min(k.event.ts for k in kernels) if kernels else 0.0
    return StepStats(
        kernels=len(kernels),
        matched=len(matched),
        launched=len(launched),
        tklqt_us=sum(k.delay for k in launched) if launched else None,
        kernel_us=kernel_us,
        idle_share=1.0 - busy / window if window > 0 else math.nan,
        window_us=window,
        gap_us=span - busy,
        graph_launches=len(first_of),
        graph_launch_us=sum(ev.dur for ev, _ in first_of.values()),
        graph_first_kernel_us=sum(ts - ev.ts for ev, ts in first_of.values()),
    )


def _top(groups: list[list[Kernel]], k: int) -> list[TopKernel]:
    calls: dict[tuple[str, str, str], int] = defaultdict(int)
    time: dict[tuple[str, str, str], float] = defaultdict(float)
    for group in groups:
        for kernel in group:
            launch = kernel.launch
            if launch is None:
                op = leaf = "(no launch event)"
            elif launch.kind is LaunchKind.GRAPH:
                op = leaf = "(graph replay)"
            else:
                op, leaf = launch.op or "(no operator)", launch.leaf_op or "(no operator)"
            key = (kernel.event.name, op, leaf)
            calls[key] += 1
            time[key] += kernel.event.dur
    n = max(1, len(groups))
    total = sum(time.values()) or 1.0
    ranked = sorted(time, key=lambda key: -time[key])[:k]
    return [
        TopKernel(name, op, leaf, calls[key] / n, time[key] / n, time[key] / total)
        for key in ranked
        for name, op, leaf in [key]
    ]


def step_stats(trace: Trace) -> list[StepStats]:
    """Kernel count, matched count, TKLQT, kernel time, idle share and window of each forward."""
    steps: list[Event | None] = list(trace.steps) or [None]
    return [_step_stats(g, s) for g, s in zip(kernels_by_step(trace), steps, strict=True)]


def analyze(trace: Trace, top_k: int = TOP_K) -> TraceStats:
    """TKLQT and the rest per forward (medians over forwards); see the module for definitions."""
    groups = kernels_by_step(trace)
    per_step = step_stats(trace)
    kinds: dict[str, int] = defaultdict(int)
    for kernel in trace.kernels:
        if kernel.launch is not None:
            kinds[kernel.launch.kind.value] += 1

    def med(values: Iterable[float]) -> float:
        vals = [v for v in values if not math.isnan(v)]
        return statistics.median(vals) if vals else math.nan

    has_kernels = any(s.kernels for s in per_step)
    eager = [s for s in per_step if s.tklqt_us is not None]
    graphed = [s for s in per_step if s.graph_launches]
    matched = med(s.matched for s in per_step)
    # TKLQT over the forwards with runtime/driver launches, per kernel of those launches.
    tklqt = med(s.tklqt_us for s in eager if s.tklqt_us is not None) if eager else None
    launched = med(s.launched for s in eager) if eager else None
    kernels = med(s.kernels for s in per_step)
    kernel_us = med(s.kernel_us for s in per_step)
    notes = []
    if not has_kernels:
        notes.append(
            "no GPU kernels in the trace (a CPU run): TKLQT, idle share and launch latency are "
            "undefined; hot shapes are weighted by CPU time"
        )
    elif graphed and not eager:
        notes.append(
            "CUDA-graph replay: one launch issues every kernel, so TKLQT is undefined; see the "
            "graph launch (CPU time, launch to first kernel) and the GPU's kernel gaps"
        )
    return TraceStats(
        forwards=len(per_step),
        kernels=kernels,
        matched=matched,
        unmatched=dict(trace.unmatched),
        launch_kinds=dict(kinds),
        tklqt_us=tklqt,
        launch_to_start_us=tklqt / launched if tklqt is not None and launched else None,
        kernel_us=kernel_us,
        mean_kernel_us=kernel_us / kernels if kernels else None,
        idle_share=med(s.idle_share for s in per_step) if has_kernels else None,
        window_us=med(s.window_us for s in per_step),
        idle_launch_us=idle_launch_latency(trace.kernels),
        top=_top(groups, top_k),
        note="; ".join(notes) or None,
        gap_us=med(s.gap_us for s in per_step) if has_kernels else None,
        graph_launches=med(s.graph_launches for s in graphed) if graphed else None,
        graph_launch_us=med(s.graph_launch_us for s in graphed) if graphed else None,
        graph_first_kernel_us=med(s.graph_first_kernel_us for s in graphed) if graphed else None,
    )


def load_trace(path: str | Path) -> dict[str, Any]:
    """A Chrome trace file (``.json`` or ``.json.gz``) as a dict; raises ProfileError."""
    p = Path(path)
    try:
        raw = gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_bytes()
        doc = json.loads(raw)
    except (OSError, ValueError) as exc:
        raise ProfileError(f"cannot read trace {p}: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise ProfileError(f"trace {p} has no traceEvents list (not a Chrome/Kineto trace)")
    return doc


@dataclass(frozen=True)
class Transition:
    """The CPU/GPU-bound transition of one phase under the module's rule."""

    batch: int | None
    idle_launch_us: float | None
    factor: float
    ratios: dict[int, float]
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def transition_batch(
    launch_to_start_us: Mapping[int, float | None],
    idle_launch_us: float | None,
    factor: float = TRANSITION_FACTOR,
) -> Transition:
    """Smallest batch from which on eager launch-to-start > ``factor`` x idle launch latency."""
    rule = f"smallest batch from which on eager launch-to-start > {factor:g}x idle launch latency"
    if idle_launch_us is None or idle_launch_us <= 0:
        return Transition(None, idle_launch_us, factor, {}, "no idle launch latency: no kernels")
    ratios = {b: v / idle_launch_us for b, v in sorted(launch_to_start_us.items()) if v is not None}
    found = None
    for b in sorted(ratios, reverse=True):
        if ratios[b] <= factor:
            break
        found = b
    if found is None:
        return Transition(
            None, idle_launch_us, factor, ratios, f"CPU-bound at every batch ({rule})"
        )
    if found == min(ratios):
        return Transition(
            found, idle_launch_us, factor, ratios, f"GPU-bound at every batch ({rule})"
        )
    return Transition(found, idle_launch_us, factor, ratios, rule)
