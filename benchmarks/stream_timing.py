"""Isolated launches against a stream of launches, for rmsnorm at every config (GPU).

The workers time each launch alone: device events around it, L2 flushed before it. In a model's
forward pass the kernel instead runs back to back with others, so each launch's start-up and tail
overlap its neighbours'. For each problem this times every valid rmsnorm config (checked against
the fp32 reference first) both ways, with a copy of the same tensors and torch's ``rms_norm``:

- isolated: the workers' timer (events, 256 MiB L2 flush before each rep, 5 warm-ups, median of 25);
- stream: the graph objective's timer (workers.timing.time_graph): one CUDA graph of launches
  back to back over rotating input sets (graph_sets: 256 MiB of them, at most 64), median of 25
  replays of time per launch.

Usage (GPU machine, repo root): python benchmarks/stream_timing.py [--problems P ...] [--json FILE]
Prints, per problem, each timer's best config and its share of the 4 GiB copy bandwidth measured
in the same run.

Reading a recorded run (any machine): python benchmarks/stream_timing.py --from FILE --pairs PARAM
pairs every config with PARAM off and on (the rest equal) and prints off / on time ratios.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
from pathlib import Path
from typing import Any

from _bench import (  # this folder (run as a script)
    Maker,
    ceilings,
    input_sets,
    local_target,
    time_on,
)
from kernels import rmsnorm_eager, same_size_copy

PROBLEMS = [f"M={m},N={n},dtype=bfloat16" for m in (128, 4096, 16384) for n in (4096, 8192)]


def rel_error(out: Any, ref: Any) -> float:
    return float((out.float() - ref).norm() / ref.norm())


def measure_problem(text: str, limits: Any, backend: Any, copy_gbps: float) -> dict[str, Any]:
    """Every valid config of ``text`` timed isolated and in a stream, with copy and torch rows."""
    from search_spaces.kernels.rmsnorm import SPEC

    problem = SPEC.parse_problem(text)
    nbytes = SPEC.bytes_moved(problem)
    sets = input_sets(SPEC, problem, "cuda", "graph")
    one = sets[0]

    def gbps(ms: float) -> float:
        return nbytes / ms / 1e6

    def isolated_ms(make: Maker) -> float:
        return time_on(sets, make, backend, "kernel")

    def stream_ms(make: Maker) -> float:
        return time_on(sets, make, backend, "graph")

    def both(make: Maker) -> dict[str, float]:
        return {"isolated_ms": isolated_ms(make), "stream_ms": stream_ms(make)}

    def config_launcher(config: dict[str, Any]) -> Maker:
        return lambda s: SPEC.make_launcher(s, config)

    rows = []
    for config in SPEC.space.enumerate(limits):
        one["out"].fill_(float("nan"))
        SPEC.make_launcher(one, config)()
        error = rel_error(one["out"], SPEC.reference(one))
        if not error < 1e-2:
            rows.append({"config": config, "error": error})
            continue
        rows.append({"config": config, "error": error, **both(config_launcher(config))})
    good = [r for r in rows if "isolated_ms" in r]
    best_iso = min(good, key=lambda r: r["isolated_ms"])
    best_stream = min(good, key=lambda r: r["stream_ms"])
    # The same config timed again: a difference between configs under this spread is noise.
    iso_again = isolated_ms(config_launcher(best_iso["config"]))
    stream_again = stream_ms(config_launcher(best_stream["config"]))
    copy_bytes = same_size_copy(one)[1]
    same_copy = both(lambda s: same_size_copy(s)[0])
    torch_row = both(lambda s: rmsnorm_eager(s, problem))
    summary = {
        "problem": text,
        "configs": len(rows),
        "failed": sum(1 for r in rows if "isolated_ms" not in r),
        "bytes": nbytes,
        "input_sets": len(sets),
        "isolated_best": best_iso,
        "stream_best": best_stream,
        "isolated_best_in_stream_ms": best_iso["stream_ms"],
        "isolated_best_again_ms": iso_again,
        "stream_best_again_ms": stream_again,
        "same_size_copy": same_copy,
        "torch_rms_norm": torch_row,
        "pct_of_copy": {
            "isolated": 100 * gbps(best_iso["isolated_ms"]) / copy_gbps,
            "stream": 100 * gbps(best_stream["stream_ms"]) / copy_gbps,
            "same_size_copy_isolated": 100
            * copy_bytes
            / same_copy["isolated_ms"]
            / 1e6
            / copy_gbps,
            "same_size_copy_stream": 100 * copy_bytes / same_copy["stream_ms"] / 1e6 / copy_gbps,
        },
        "rows": rows,
    }
    return summary


def print_pairs(path: Path, param: str) -> None:
    """Off / on ratios of bool ``param`` over the configs of a recorded ``--json`` file."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        recorded = json.load(f)
    print(f"{param} off / {param} on, same config otherwise ({path.name}); >1: on is faster")
    print("problem | pairs | stream median (min-max) | alone median | best stream off -> on (us)")
    for r in recorded["results"]:
        pairs: dict[str, dict[bool, dict[str, Any]]] = {}
        for row in r["rows"]:
            rest = {k: v for k, v in row["config"].items() if k != param}
            pairs.setdefault(json.dumps(rest, sort_keys=True), {})[row["config"].get(param)] = row
        both = [p for p in pairs.values() if False in p and True in p]
        if not both:
            raise SystemExit(
                f"{path}: no config of {r['problem']} was timed with {param} both ways"
            )
        stream = [p[False]["stream_ms"] / p[True]["stream_ms"] for p in both]
        alone = [p[False]["isolated_ms"] / p[True]["isolated_ms"] for p in both]
        best_off = min(p[False]["stream_ms"] for p in both)
        best_on = min(p[True]["stream_ms"] for p in both)
        print(
            f"{r['problem']} | {len(both)} | {statistics.median(stream):.3f} ({min(stream):.3f}-"
            f"{max(stream):.3f}) | {statistics.median(alone):.3f} | {best_off * 1e3:.2f} -> "
            f"{best_on * 1e3:.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", nargs="*", default=PROBLEMS)
    parser.add_argument("--json", type=Path, help="write every config's times here")
    parser.add_argument("--from", dest="source", type=Path, help="read a recorded --json file")
    parser.add_argument("--pairs", metavar="PARAM", help="with --from: off / on ratios of PARAM")
    args = parser.parse_args()
    if (args.source is None) != (args.pairs is None):
        parser.error("--from and --pairs go together")
    if args.source is not None:
        print_pairs(args.source, args.pairs)
        return
    import torch

    limits, backend, device = local_target()
    if device != "cuda":
        raise SystemExit("stream_timing.py: needs a GPU (CUDA graphs); run it on the GPU machine")
    copy_gbps = ceilings(backend)["copy_gbps"]
    print(f"4 GiB copy: {copy_gbps:.0f} GB/s", flush=True)
    results = []
    for text in args.problems:
        r = measure_problem(text, limits, backend, copy_gbps)
        torch.cuda.empty_cache()  # the problem's input sets went with measure_problem
        results.append(r)
        pct = r["pct_of_copy"]
        print(
            f"{text}: {r['configs']} configs ({r['failed']} wrong); isolated best "
            f"{r['isolated_best']['isolated_ms'] * 1e3:.1f} us = {pct['isolated']:.0f}% "
            f"{r['isolated_best']['config']}; stream best "
            f"{r['stream_best']['stream_ms'] * 1e3:.1f} us = {pct['stream']:.0f}% "
            f"{r['stream_best']['config']}; copy {pct['same_size_copy_isolated']:.0f}% / "
            f"{pct['same_size_copy_stream']:.0f}%; torch rms_norm "
            f"{r['torch_rms_norm']['isolated_ms'] * 1e3:.1f} / "
            f"{r['torch_rms_norm']['stream_ms'] * 1e3:.1f} us",
            flush=True,
        )
    if args.json:
        args.json.write_text(json.dumps({"copy_gbps": copy_gbps, "results": results}, indent=1))
    print("\n% of the 4 GiB copy | isolated (tuner's timer) | stream (graph, rotating inputs)")
    print(
        "problem | rmsnorm best | same-size copy | rmsnorm best | same-size copy | iso-best in stream"
    )
    for r in results:
        pct = r["pct_of_copy"]
        iso_in_stream = 100 * r["bytes"] / r["isolated_best_in_stream_ms"] / 1e6 / copy_gbps
        print(
            f"{r['problem']} | {pct['isolated']:.0f} | {pct['same_size_copy_isolated']:.0f} | "
            f"{pct['stream']:.0f} | {pct['same_size_copy_stream']:.0f} | {iso_in_stream:.0f}"
        )


if __name__ == "__main__":
    main()
