"""Hot shapes of a trace as tunefleet job files (pure Python, no torch).

Recorded input shapes of the outermost linear/matmul/mm/addmm, scaled_dot_product_attention and
rms_norm calls become problems of the built-in kernels: linear/matmul -> ``matmul`` (M = all leading
dims, K, N), prefill SDPA (queries == keys) -> ``flash_attention`` (causal unless the trace says
otherwise), decode SDPA (one query) -> ``paged_attention`` (context = keys, page size 16,
``cache=contiguous``: the built-in decoders keep each sequence's pages consecutive), rms_norm
-> ``rmsnorm``, and an MoE expert block (its annotation, workers.profiling.trace.MOE_ANNOTATION)
-> two ``fused_moe`` problems, the gate+up GEMM (N = 2 x ffn, K = hidden) and ``gemm=down_sum``
(N = hidden, K = ffn, each token's slots summed in the epilogue). The gate+up GEMM is ``up_silu``
(SiLU(gate) * up in the epilogue) from :data:`GATED_MIN_TOKENS` tokens, else ``up`` (the swapped
block runs fused_moe's SiLU-and-mul kernel after it): on the H100 at Qwen3-30B-A3B's dims the
epilogue form was 1.044x and 1.065x the plain GEMM plus that kernel at 512 and 8192 tokens and tied
at 64 (0.995x, ``benchmarks/results/moe_sweep/2026-12-07-ab2a496-h100-qwen``). A shape's weight is the GPU time
of the kernels its call launched per forward (a CPU-only trace: the call's CPU time); an expert
block's is split between its two GEMMs by their FLOPs (2:1). Problems are ordered by their share
of the profiled forwards' time; a problem a kernel spec rejects (e.g. head_dim 80) is left out
with the reason. The objective of a problem is ``graph`` when the model runs faster as a CUDA
graph at that batch (graph/eager < GRAPH_PAYS_RATIO: a deployment would capture it), else
``kernel``; one file per (kernel, objective).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from search_spaces.errors import SpecError
from search_spaces.kernels.fused_moe import GATED
from search_spaces.problem import problem_key
from search_spaces.registry import get_spec
from workers.profiling.errors import ProfileError
from workers.profiling.trace import MOE_ANNOTATION, ShapeOp, Trace, kernels_by_step

DTYPES = {"c10::BFloat16": "bfloat16", "c10::Half": "float16", "float": "float32"}
PAGE_SIZE = 16
#: From this many tokens an expert block's gate+up GEMM is emitted as ``up_silu`` (see module).
GATED_MIN_TOKENS = 512


@dataclass(frozen=True)
class HotShape:
    kernel: str
    problem: dict[str, Any]
    op: str
    weight_us: float
    calls: float


def _prod(dims: Sequence[int]) -> int:
    return math.prod(dims) if dims else 1


#: (kernel, problem, share of the call's weight)
Mapped = list[tuple[str, dict[str, Any], float]]


def moe_problems(name: str) -> Mapped | str:
    """fused_moe's two problems of an expert block's annotation (see module), or why none."""
    try:
        f = dict(item.split("=", 1) for item in name.removeprefix(MOE_ANNOTATION).split())
        m, e, topk, hidden, ffn = (int(f[k]) for k in ("M", "E", "topk", "hidden", "ffn"))
        dtype = f["dtype"]
    except (KeyError, ValueError):
        return f"{name}: not an MoE annotation (M=.. E=.. topk=.. hidden=.. ffn=.. dtype=..)"
    common = {"M": m, "E": e, "topk": topk, "dtype": dtype}
    first = GATED if m >= GATED_MIN_TOKENS else "up"
    return [
        ("fused_moe", {**common, "N": 2 * ffn, "K": hidden, "gemm": first}, 2 / 3),
        ("fused_moe", {**common, "N": hidden, "K": ffn, "gemm": "down_sum"}, 1 / 3),
    ]


def problems_of(op: ShapeOp) -> Mapped | str:
    """The problems of one recorded call with their shares of its weight, or why none."""
    if op.event.name.startswith(MOE_ANNOTATION):
        return moe_problems(op.event.name)
    mapped = problem_of(op)
    return mapped if isinstance(mapped, str) else [(*mapped, 1.0)]


def problem_of(op: ShapeOp) -> tuple[str, dict[str, Any]] | str:
    """``(kernel, problem)`` for one recorded operator call, or why it maps to none."""
    dims, types, name = op.dims, op.types, op.event.name
    dtype = DTYPES.get(types[0] if types else "")
    if dtype is None:
        return f"{name}: dtype {types[:1]} has no kernel"
    if name in ("aten::linear", "aten::matmul", "aten::mm", "aten::addmm"):
        a, b = (dims[1], dims[2]) if name == "aten::addmm" else (dims[0], dims[1])
        if len(b) != 2 or not a:
            return f"{name}: batched operands {dims[:2]} (matmul is 2-D)"
        k = a[-1]
        n = b[0] if name == "aten::linear" else b[1]
        return "matmul", {"M": _prod(a[:-1]), "N": n, "K": k, "dtype": dtype}
    if name == "aten::rms_norm":
        x = dims[0]
        return "rmsnorm", {"M": _prod(x[:-1]), "N": x[-1], "dtype": dtype}
    if name == "aten::scaled_dot_product_attention":
        q, keys = dims[0], dims[1]
        if len(q) != 4 or len(keys) != 4:
            return f"{name}: q/k are not [batch, heads, seq, head_dim]"
        batch, qh, sq, d = q
        kvh, sk = keys[1], keys[2]
        if sq == 1:
            # the built-in decoders keep each sequence's pages consecutive (KVCache)
            return "paged_attention", {
                "batch": batch, "context_len": sk, "pattern": "uniform", "q_heads": qh,
                "kv_heads": kvh, "head_dim": d, "page_size": PAGE_SIZE, "dtype": dtype,
                "cache": "contiguous",
            }  # fmt: skip
        if sq != sk:
            return f"{name}: {sq} queries over {sk} keys (neither prefill nor decode)"
        concrete = op.concrete
        causal = concrete[5] != "False" if len(concrete) > 5 and concrete[5] else True
        return "flash_attention", {
            "batch": batch, "max_seqlen": sq, "pattern": "uniform", "q_heads": qh,
            "kv_heads": kvh, "head_dim": d, "causal": causal, "dtype": dtype,
        }  # fmt: skip
    return f"{name}: no kernel"


def hot_shapes(trace: Trace) -> tuple[list[HotShape], list[str]]:
    """Shapes of one trace by weight per forward (see module), and the reasons of skipped calls."""
    forwards = max(1, len(trace.steps))
    weight: dict[int, float] = defaultdict(float)
    has_kernels = bool(trace.kernels)
    for group in kernels_by_step(trace):
        for kernel in group:
            if kernel.launch is not None and kernel.launch.shape_op is not None:
                weight[kernel.launch.shape_op] += kernel.event.dur
    in_steps = [
        i
        for i, op in enumerate(trace.shape_ops)
        if not trace.steps or any(s.ts <= op.event.ts <= s.end for s in trace.steps)
    ]
    merged: dict[tuple[str, str], list[Any]] = {}
    skipped: set[str] = set()
    for i in in_steps:
        op = trace.shape_ops[i]
        mapped = problems_of(op)
        if isinstance(mapped, str):
            skipped.add(mapped)
            continue
        for name, raw, share in mapped:
            try:
                problem = dict(get_spec(name).validate_problem(raw))
            except SpecError as exc:
                skipped.add(f"{op.event.name} as {name}: {exc}")
                continue
            w = share * (weight.get(i, 0.0) if has_kernels else op.event.dur)
            key = (name, problem_key(problem))
            entry = merged.setdefault(key, [problem, op.event.name, 0.0, 0])
            entry[2] += w / forwards
            entry[3] += 1 / forwards
    shapes = [
        HotShape(kernel, problem, name, w, calls)
        for (kernel, _), (problem, name, w, calls) in merged.items()
    ]
    shapes.sort(key=lambda s: -s.weight_us)
    return shapes, sorted(skipped)


def measured_split(
    shapes: Sequence[HotShape], vendor_ms: Callable[[str, dict[str, Any]], float | None]
) -> list[HotShape]:
    """``shapes`` with each MoE expert block's GPU time split between its two GEMM problems by
    their vendor times (``vendor_ms``: each half as its study timed the vendor path) where both
    have one, in place of the FLOP split (2:1, a guess: the down GEMM's half also scatters and
    sums the slots); other shapes, and blocks without both times, as they are. A per-problem bound
    on this split is the layer's share times the layer's kernel speed-up."""
    halves: dict[str, list[int]] = defaultdict(list)
    for i, shape in enumerate(shapes):
        if shape.op.startswith(MOE_ANNOTATION):
            halves[shape.op].append(i)
    out = list(shapes)
    for pair in halves.values():
        times = [t for i in pair if (t := vendor_ms(shapes[i].kernel, shapes[i].problem))]
        if len(pair) != 2 or len(times) != 2:
            continue
        block = sum(shapes[i].weight_us for i in pair)
        for i, t in zip(pair, times, strict=True):
            out[i] = replace(shapes[i], weight_us=block * t / sum(times))
    return out


#: (kernel, objective, job mapping, ranking: each problem's share of time and where it was seen)
JobDocument = tuple[str, str, dict[str, Any], list[dict[str, Any]]]


@dataclass(frozen=True)
class PointShapes:
    """The hot shapes of one profiled (phase, batch), its forward's time and chosen objective."""

    phase: str
    batch: int
    objective: str
    total_us: float
    shapes: list[HotShape]


def job_documents(points: Iterable[PointShapes], problems: int, trials: int) -> list[JobDocument]:
    """``(kernel, objective, job, ranking)`` per file: up to ``problems`` hottest problems each;
    ``ranking`` gives each problem's share of all profiled forwards' time."""
    points = list(points)
    total = sum(p.total_us for p in points) or 1.0
    weights: dict[tuple[str, str, str], list[Any]] = {}
    for point in points:
        for shape in point.shapes:
            key = (shape.kernel, point.objective, problem_key(shape.problem))
            entry = weights.setdefault(key, [shape.problem, 0.0, set()])
            entry[1] += shape.weight_us
            entry[2].add(f"{point.phase}:{point.batch}")
    files: dict[tuple[str, str], list[tuple[dict[str, Any], float, set[str]]]] = defaultdict(list)
    for (kernel, objective, _), (problem, w, where) in weights.items():
        files[(kernel, objective)].append((problem, w, where))
    out: list[JobDocument] = []
    for (kernel, objective), rows in files.items():
        rows.sort(key=lambda r: -r[1])
        chosen = rows[:problems]
        job = {
            "kernel": kernel,
            "objective": objective,
            "trials": trials,
            "problems": [problem for problem, _, _ in chosen],
        }
        ranking = [
            {"problem": problem, "share": w / total, "seen_at": sorted(where)}
            for problem, w, where in chosen
        ]
        out.append((kernel, objective, job, ranking))
    out.sort(key=lambda f: -sum(r["share"] for r in f[3]))
    return out


def write_jobs(path: str | Path, documents: Sequence[JobDocument]) -> list[Path]:
    """One YAML job file per document, named ``STEM.KERNEL.OBJECTIVE.yaml`` beside ``path``."""
    import yaml

    target = Path(path)
    if target.suffix.lower() not in (".yaml", ".yml"):
        raise ProfileError(f"--emit-job {target}: give a .yaml file name (one file per kernel)")
    if not target.parent.is_dir():
        raise ProfileError(f"--emit-job {target}: folder {target.parent} does not exist")
    if not documents:
        raise ProfileError("no hot GEMM, attention or norm shape in the trace to emit a job for")
    written = []
    for kernel, objective, job, ranking in documents:
        file = target.with_name(f"{target.stem}.{kernel}.{objective}{target.suffix}")
        header = "".join(
            f"# {i + 1}. {100 * r['share']:.1f}% of profiled time, at {', '.join(r['seen_at'])}\n"
            for i, r in enumerate(ranking)
        )
        file.write_text(
            f"# emitted by `tunefleet profile`: problems by share of GPU time\n{header}"
            + yaml.safe_dump(job, sort_keys=False)
        )
        written.append(file)
    return written
