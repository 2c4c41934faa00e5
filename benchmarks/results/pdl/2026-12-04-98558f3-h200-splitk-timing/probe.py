"""Why two split-K winners with PDL timed 16-29% slower in kernels.py's comparison than in the tune
(benchmarks/results/kernels/2026-12-04-6796161-h200-wide-200/): the same configs timed by
(a) kernels.py's timer in this process (`_bench.timed`), (b) the trial runner in its child process
(the tune's and the promotion's path), (c) this process with the GPU queue filled first (a
`torch.cuda._sleep` before the reps: no rep can wait for the CPU), (d) a CUDA graph of the launch
alone (no CPU in the timed region), and (e) torch.profiler's kernel durations and the gap between
the GEMM and the reduction. Plus each launcher's CPU time per call. Interleaved over 3 rounds."""

import itertools
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, "benchmarks")
from _bench import timed

from search_spaces import get_spec
from workers.device import Backend
from workers.runner import RunnerOptions, TrialRunner
from workers.timing import l2_flush_buffer
from workers.trial import TrialRequest

BASE = {"GROUP_M": 1, "PERSISTENT": False, "STREAM_K": False, "WIDE_N": False}
CASES = [
    (
        "M16 wide-run winner (sk4 TMA PDL)",
        16,
        {
            **BASE,
            "BLOCK_M": 16,
            "BLOCK_N": 64,
            "BLOCK_K": 128,
            "SPLIT_K": 4,
            "FUSED_REDUCE": False,
            "num_warps": 4,
            "num_stages": 3,
            "TMA": True,
            "PDL": True,
        },
    ),
    (
        "M16 same, PDL off",
        16,
        {
            **BASE,
            "BLOCK_M": 16,
            "BLOCK_N": 64,
            "BLOCK_K": 128,
            "SPLIT_K": 4,
            "FUSED_REDUCE": False,
            "num_warps": 4,
            "num_stages": 3,
            "TMA": True,
            "PDL": False,
        },
    ),
    (
        "M16 deep13 winner (sk4 fused)",
        16,
        {
            **BASE,
            "BLOCK_M": 16,
            "BLOCK_N": 64,
            "BLOCK_K": 64,
            "SPLIT_K": 4,
            "FUSED_REDUCE": True,
            "num_warps": 2,
            "num_stages": 5,
            "TMA": False,
            "PDL": False,
        },
    ),
    (
        "M128 wide-run winner (sk2 TMA PDL)",
        128,
        {
            **BASE,
            "BLOCK_M": 128,
            "BLOCK_N": 64,
            "BLOCK_K": 128,
            "SPLIT_K": 2,
            "FUSED_REDUCE": False,
            "num_warps": 4,
            "num_stages": 4,
            "TMA": True,
            "PDL": True,
        },
    ),
    (
        "M128 same, PDL off",
        128,
        {
            **BASE,
            "BLOCK_M": 128,
            "BLOCK_N": 64,
            "BLOCK_K": 128,
            "SPLIT_K": 2,
            "FUSED_REDUCE": False,
            "num_warps": 4,
            "num_stages": 4,
            "TMA": True,
            "PDL": False,
        },
    ),
    (
        "M128 deep13 winner (64x64, 13 st)",
        128,
        {
            **BASE,
            "BLOCK_M": 64,
            "BLOCK_N": 64,
            "BLOCK_K": 64,
            "GROUP_M": 4,
            "SPLIT_K": 1,
            "FUSED_REDUCE": False,
            "num_warps": 4,
            "num_stages": 13,
            "TMA": False,
            "PDL": False,
        },
    ),
]
REPS = 25


def problem(m):
    return {"M": m, "N": 4096, "K": 4096, "dtype": "bfloat16"}


def queue_ahead(launcher, flush):
    """Like workers.timing.time_launcher, after a 50 ms GPU sleep so the CPU enqueues every rep
    before the GPU reaches the first."""
    for _ in range(5):
        launcher()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(REPS)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(REPS)]
    torch.cuda._sleep(100_000_000)
    for s, e in zip(starts, ends, strict=True):
        flush.zero_()
        s.record()
        launcher()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends, strict=True))


def graph_ms(launcher):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        launcher()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        launcher()
    flush = l2_flush_buffer()
    times = []
    for _ in range(REPS):
        flush.zero_()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        g.replay()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    return statistics.median(times)


def cpu_us(launcher):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(50):
        launcher()
    t = (time.perf_counter() - t0) / 50 * 1e6
    torch.cuda.synchronize()
    return t


def profiled(launcher, flush):
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    launcher()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(REPS):
            flush.zero_()
            launcher()
        torch.cuda.synchronize()
    evs = sorted(
        (
            e
            for e in prof.events()
            if e.device_type == DeviceType.CUDA
            and "zero" not in e.name
            and "fill" not in e.name.lower()
            and "elementwise" not in e.name
        ),
        key=lambda e: e.time_range.start,
    )
    names = sorted({e.name for e in evs})
    durs = {
        n: statistics.median(e.time_range.elapsed_us() for e in evs if e.name == n) for n in names
    }
    gaps = [
        b.time_range.start - a.time_range.end
        for a, b in itertools.pairwise(evs)
        if "reduce" in b.name and "reduce" not in a.name
    ]
    return {"kernels_us": durs, "gap_to_reduce_us": statistics.median(gaps) if gaps else None}


def main():
    spec = get_spec("matmul")
    flush = l2_flush_buffer()
    runner = TrialRunner(RunnerOptions.for_backend("cuda"))
    out = []
    try:
        sets = {m: spec.build_inputs(problem(m), "cuda") for m in (16, 128)}
        rows = {
            name: {
                "name": name,
                "M": m,
                "config": c,
                "bench": [],
                "runner": [],
                "ahead": [],
                "graph": [],
            }
            for name, m, c in CASES
        }
        for r in range(3):
            order = CASES[r % len(CASES) :] + CASES[: r % len(CASES)]
            for name, m, c in order:
                row = rows[name]
                row["bench"].append(timed(spec.make_launcher(sets[m], c), Backend.CUDA) * 1e3)
                meas = runner.run(TrialRequest("matmul", problem(m), c))
                row["runner"].append(meas.median_ms * 1e3 if meas.median_ms else float("nan"))
                row["ahead"].append(queue_ahead(spec.make_launcher(sets[m], c), flush) * 1e3)
                row["graph"].append(graph_ms(spec.make_launcher(sets[m], c)) * 1e3)
            for m in (16, 128):
                a, b = sets[m]["a"], sets[m]["b"]
                rows.setdefault(f"M{m} cuBLAS", {"name": f"M{m} cuBLAS", "M": m, "bench": []})
                rows[f"M{m} cuBLAS"]["bench"].append(
                    timed(lambda a=a, b=b: torch.matmul(a, b), Backend.CUDA) * 1e3
                )
        for name, m, c in CASES:
            row = rows[name]
            launcher = spec.make_launcher(sets[m], c)
            row["cpu_us_per_call"] = cpu_us(launcher)
            row.update(profiled(launcher, flush))
        out = list(rows.values())
    finally:
        runner.close()
    Path(sys.argv[1]).write_text(json.dumps(out, indent=1))
    print(
        f"{'case':38} {'bench':>7} {'runner':>7} {'ahead':>7} {'graph':>7} {'cpu/call':>8} kernels(us) gap"
    )
    for row in out:
        med = {
            k: statistics.median(row[k])
            for k in ("bench", "runner", "ahead", "graph")
            if row.get(k)
        }
        ks = " ".join(f"{v:.1f}" for v in row.get("kernels_us", {}).values())
        print(
            f"{row['name']:38} "
            + " ".join(
                f"{med.get(k, float('nan')):7.2f}" for k in ("bench", "runner", "ahead", "graph")
            )
            + f" {row.get('cpu_us_per_call', float('nan')):8.1f} {ks} {row.get('gap_to_reduce_us')}"
        )


if __name__ == "__main__":
    main()
