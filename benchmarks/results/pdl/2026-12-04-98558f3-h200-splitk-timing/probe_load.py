"""The same configs as probe.py timed by the trial timer before the hold (the loop of
workers.timing.time_launcher at 98558f3, copied here as `unheld`) and after it (the current
time_launcher, every rep queued before the GPU reaches the first), with the CPU idle and with
16 busy processes on the 16 cores (as a tune's compile pool keeps them). Interleaved, 3 rounds."""

import json
import multiprocessing as mp
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from probe import CASES, problem

from search_spaces import get_spec
from workers.device import Backend
from workers.timing import l2_flush_buffer, time_launcher


def unheld(launcher, flush, reps=25):
    for _ in range(5):
        launcher()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for s, e in zip(starts, ends, strict=True):
        flush.zero_()
        s.record()
        launcher()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends, strict=True))


def held(launcher, flush):
    return statistics.median(time_launcher(launcher, Backend.CUDA, warmup=5, reps=25, flush=flush))


def spin():
    while True:
        pass


def measure(spec, sets, flush, label):
    rows = {}
    cases = [*CASES, *[(f"M{m} cuBLAS", m, None) for m in (16, 128)]]
    for r in range(3):
        for name, m, c in cases[r:] + cases[:r]:
            if c is None:
                a, b = sets[m]["a"], sets[m]["b"]
                make = lambda a=a, b=b: lambda: torch.matmul(a, b)  # noqa: E731
            else:
                make = lambda m=m, c=c: spec.make_launcher(sets[m], c)  # noqa: E731
            row = rows.setdefault(name, {"name": name, "load": label, "unheld": [], "held": []})
            row["unheld"].append(unheld(make(), flush) * 1e3)
            row["held"].append(held(make(), flush) * 1e3)
    return list(rows.values())


def main():
    spec = get_spec("matmul")
    flush = l2_flush_buffer()
    sets = {m: spec.build_inputs(problem(m), "cuda") for m in (16, 128)}
    out = measure(spec, sets, flush, "idle")
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=spin, daemon=True) for _ in range(16)]
    for p in procs:
        p.start()
    try:
        out += measure(spec, sets, flush, "16 busy")
    finally:
        for p in procs:
            p.terminate()
    Path(sys.argv[1]).write_text(json.dumps(out, indent=1))
    print(f"{'case':38} {'load':8} {'unheld us':>9} {'held us':>8}")
    for row in out:
        print(
            f"{row['name']:38} {row['load']:8} {statistics.median(row['unheld']):9.2f} "
            f"{statistics.median(row['held']):8.2f}"
        )


if __name__ == "__main__":
    main()
