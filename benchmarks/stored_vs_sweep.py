"""A tune job's stored flash_attention winners against a recorded attention_sweep run of the same
problems: cross-run, so an indication only (the issue's ratios come from one run,
llm_kernels.py).

Usage (any machine): python benchmarks/stored_vs_sweep.py --db TUNE.db[.gz] --sweep SWEEP.json
Per problem in both: the best config the database holds (what `pull` exports: the promoted,
re-timed time, the workers' timer) over the sweep's fastest SDPA backend time and over the
sweep's best candidate (Triton's do_bench, the sweep's own rounds); then the geomeans overall and
per llm_kernels.py's flash groups, and how often each winner config occurs.
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path
from typing import Any

from _bench import geomean, upgraded_copy  # this folder (run as a script)
from llm_kernels import FLASH_GROUPS


def stored_best(path: Path, kernel: str) -> dict[str, tuple[float, dict[str, Any]]]:
    """Problem key -> (time ms, config) of ``kernel``'s best-config rows in the SQLite file
    ``path`` (``.gz``: gzipped), read from a copy brought to the current schema."""
    from db import repository

    with upgraded_copy(path) as database, database.session(readonly=True) as s:
        return {r.problem_key: (r.time_ms, r.config) for r in repository.get_best(s, kernel)}


def label(config: dict[str, Any]) -> str:
    """A config as the sweep tables write it: 64x64 w4 s3 TMA."""
    flags = [
        name for name in ("TMA", "HEAVY_FIRST", "WARP_SPECIALIZE", "PRE_LOAD_V") if config.get(name)
    ]
    return " ".join(
        [f"{config['BLOCK_M']}x{config['BLOCK_N']} w{config['num_warps']} s{config['num_stages']}", *flags]
    )  # fmt: skip


def main() -> None:
    from search_spaces import problem_key

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", type=Path, required=True, help="the tune job's SQLite database")
    parser.add_argument("--sweep", type=Path, required=True, help="attention_sweep.py's JSON")
    args = parser.parse_args()
    best = stored_best(args.db, "flash_attention")
    sweep = {problem_key(r["problem"]): r for r in json.loads(args.sweep.read_text())["rows"]}
    rows = []
    for key, (ms, config) in best.items():
        if key not in sweep:
            continue
        s = sweep[key]
        rows.append((s["problem"], ms, config, s))
    print("| dtype | causal | d | heads q/kv | batch | seq | stored ms | config | sweep best ms | "
          "sweep fastest SDPA | its ms | stored / fastest SDPA | stored / sweep best |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for p, ms, config, s in sorted(rows, key=lambda r: sorted(r[0].items())):
        print(
            f"| {p['dtype']} | {p['causal']} | {p['head_dim']} | {p['q_heads']}/{p['kv_heads']} | "
            f"{p['batch']} | {p['max_seqlen']} | {ms:.4f} | {label(config)} | {s['best_ms']:.4f} | "
            f"{s['fastest_backend'].removesuffix('_ATTENTION')} | {s['fastest_backend_ms']:.4f} | "
            f"{s['fastest_backend_ms'] / ms:.3f} | {s['best_ms'] / ms:.3f} |"
        )
    print(f"\n{len(rows)} problems in both ({len(best)} stored, {len(sweep)} in the sweep)")
    groups: dict[str, Any] = {"all": lambda p: True, **FLASH_GROUPS}
    for name, member in groups.items():
        mine = [
            (s["fastest_backend_ms"] / ms, s["best_ms"] / ms) for p, ms, _, s in rows if member(p)
        ]
        if mine:
            print(
                f"{name}: stored / fastest SDPA geomean {geomean([a for a, _ in mine]):.3f}x "
                f"(min {min(a for a, _ in mine):.3f}), stored / sweep best "
                f"{geomean([b for _, b in mine]):.3f}x over {len(mine)}"
            )  # fmt: skip
    counts = collections.Counter(label(config) for _, _, config, _ in rows)
    print("winners: " + ", ".join(f"{name} {n}" for name, n in counts.most_common()))


if __name__ == "__main__":
    main()
