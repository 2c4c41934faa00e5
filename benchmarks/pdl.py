"""PDL (programmatic dependent launch) off and on, back to back, for the kernels that have it (GPU).

Per kernel: one graph-objective `tunefleet tune` job over a decode-sized suite (the same job as
kernels.py runs), then per problem, in this process on fresh inputs: the tuned config with PDL
off and on (its other parameters as tuned) and the spec default, all by the graph objective's
timer (workers.timing.time_graph over rotating input sets, median of 25 replays), twice in
alternating order (off, on, on, off); a pair's time is the mean of its two medians.

Usage (GPU machine, repo root): python benchmarks/pdl.py --out-dir DIR [--kernels rmsnorm
paged_attention] [--trials 40] [--in-flight 16]. Writes DIR/pdl.json and DIR/pdl.db; prints a
table per kernel.
"""

from __future__ import annotations

import argparse
import json
import statistics
from typing import Any

from _bench import add_job_args, input_sets, local_target, time_on, tune_suite  # this folder

SUITES: dict[str, list[str]] = {
    "paged_attention": [
        f"batch={b},context_len={c},pattern=uniform,q_heads=32,kv_heads=8,head_dim=128,"
        "dtype=bfloat16"
        for b in (1, 8, 64)
        for c in (1024, 8192)
    ],
    "rmsnorm": [f"M={m},N=4096,dtype=bfloat16" for m in (1, 128, 4096)],
}


def measure(kernel: str, text: str, config: dict[str, Any]) -> dict[str, Any]:
    """The tuned config with PDL off and on, and the default, back to back on the same inputs."""
    from search_spaces import get_spec
    from search_spaces.accuracy import max_rel_error

    spec = get_spec(kernel)
    limits, backend, device = local_target()
    problem = spec.parse_problem(text)
    sets = input_sets(spec, problem, device, "graph")
    off, on = {**config, "PDL": False}, {**config, "PDL": True}

    def ms(chosen: dict[str, Any]) -> float:
        return time_on(sets, lambda s: spec.make_launcher(s, chosen), backend, "graph")

    def error(chosen: dict[str, Any]) -> float:
        spec.make_launcher(sets[0], chosen)()
        return max_rel_error(sets[0]["out"], spec.reference(sets[0]))

    first_off, first_on = ms(off), ms(on)
    second_on, second_off = ms(on), ms(off)
    off_ms = statistics.fmean((first_off, second_off))
    on_ms = statistics.fmean((first_on, second_on))
    return {
        "problem": problem,
        "config": config,
        "pdl_off_ms": off_ms,
        "pdl_on_ms": on_ms,
        "off_over_on": off_ms / on_ms,
        "default_ms": ms(spec.default_for(limits)),
        "max_rel_error": {"off": error(off), "on": error(on)},
        "tolerance": spec.tolerance(problem),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    add_job_args(parser, list(SUITES), trials=40)
    args = parser.parse_args()
    from search_spaces import get_spec, problem_key
    from search_spaces.kernels._common import PDL_MIN_SM, nvidia_sm

    limits = local_target()[0]
    if args.smoke or nvidia_sm(limits) < PDL_MIN_SM:
        raise SystemExit(f"pdl.py needs an NVIDIA sm_{PDL_MIN_SM}+ GPU (this is {limits.arch})")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {}
    for kernel in args.kernels:
        _, best = tune_suite(args, kernel, SUITES[kernel], args.out_dir / "pdl.db", "graph")
        spec = get_spec(kernel)
        rows = []
        for text in SUITES[kernel]:
            config = best.get(problem_key(spec.parse_problem(text)))
            if config is None:
                print(f"  {text}: no stored winner; skipped", flush=True)
                continue
            rows.append(measure(kernel, text, config))
        report[kernel] = rows
        (args.out_dir / "pdl.json").write_text(json.dumps(report, indent=1, default=str))
        print(f"{kernel}: tuned config, PDL off / on (us), back to back", flush=True)
        for r in rows:
            p = ",".join(f"{k}={v}" for k, v in r["problem"].items() if k != "dtype")
            print(
                f"  {p:<64} off {1e3 * r['pdl_off_ms']:8.2f}  on {1e3 * r['pdl_on_ms']:8.2f}  "
                f"off/on {r['off_over_on']:.3f}  tuned with PDL {r['config'].get('PDL')}  "
                f"default {1e3 * r['default_ms']:8.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
