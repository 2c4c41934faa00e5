"""The search benchmark's leave-one-problem-out mode (issue 23): the database prior of a replayed
landscape, taken from the other landscapes of its kernel, and the table that holds the ``learned``
sampler to the issue's targets. ``benchmarks/search.py --prior-from`` and ``--learned-table`` use
them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from orchestrator.study.samplers.learned import PriorTrial
from search_spaces.problem import Problem
from workers.landscape import read_landscape
from workers.measurement import Outcome


def prior_trials(kernel: str, problem: Problem, paths: Sequence[str | Path]) -> list[PriorTrial]:
    """The database prior of a leave-one-problem-out run: every ok result of the landscapes in
    ``paths`` of ``kernel`` on a problem other than ``problem``."""
    out = []
    for path in paths:
        other = read_landscape(path)
        if other.kernel != kernel or dict(other.problem) == problem:
            continue
        out += [
            PriorTrial(dict(other.problem), other.device_name, dict(r.config), r.time_ms)
            for r in other.results
            if r.outcome is Outcome.OK and r.time_ms is not None
        ]
    return out


def learned_table(rows: Sequence[Mapping[str, Any]], baseline: str = "local") -> str:
    """Per landscape, trials to within 2% (median / p90) of ``baseline``, ``baseline+warm``,
    ``learned``, ``learned+warm``, ``learned+prior``, ``learned+prior+warm`` and
    ``learned+sparse`` (after the configs within 2% of the optimum and random search's expected
    trials to draw one, where the rows have them), and issue 23's targets: learned median <= 20
    and p90 <= 50; with the prior (complete or sparse) median <= 5 and p90 <= 15; learned's median
    at most 10% above the baseline's.
    A target whose rows did not run reads "-". Then on how many of the landscapes that ran its
    rows each target is met."""
    names = (
        baseline,
        f"{baseline}+warm",
        "learned",
        "learned+warm",
        "learned+prior",
        "learned+prior+warm",
        "learned+sparse",
    )
    by: dict[str, dict[str, Mapping[str, Any]]] = {}
    for r in rows:
        by.setdefault(r["landscape"], {})[r["sampler"]] = r
    lines = [
        "| landscape | space | within 2% (random) | "
        + " | ".join(f"{n}: 2% median / p90" for n in names)
        + " | learned / local (median) | learned ≤20/≤50 | +prior ≤5/≤15 | +sparse ≤5/≤15 | "
        "≤1.1× local |",
        "|---" * (len(names) + 8) + "|",
    ]
    tally: dict[str, list[bool]] = {"cold": [], "prior": [], "sparse": [], "local": []}
    for landscape, row in by.items():
        t2 = {n: row[n]["trials_to_2pct"] for n in names if n in row}
        cells = [f"{t2[n]['median']:g} / {t2[n]['p90']:g}" if n in t2 else "-" for n in names]
        cold, sparse, base = t2.get("learned"), t2.get("learned+sparse"), t2.get(baseline)
        ratio = cold["median"] / base["median"] if cold and base else None
        met = {
            "cold": None if cold is None else cold["median"] <= 20 and cold["p90"] <= 50,
            **{
                key: None if t is None else t["median"] <= 5 and t["p90"] <= 15
                for key, t in (("prior", t2.get("learned+prior")), ("sparse", sparse))
            },
            "local": None if ratio is None else ratio <= 1.1,
        }
        for key, ok in met.items():
            if ok is not None:
                tally[key].append(ok)
        first = next(iter(row.values()))
        near = first.get("near_optimum", {}).get("2pct")
        hard = "-" if near is None else f"{near['configs']} ({near['random_expected_trials']:g})"
        lines.append(
            f"| {landscape} | {first['space']} | {hard} | "
            + " | ".join(cells)
            + f" | {'-' if ratio is None else f'{ratio:.2f}'} | "
            + " | ".join("-" if ok is None else "yes" if ok else "no" for ok in met.values())
            + " |"
        )

    def count(key: str) -> str:
        return f"{sum(tally[key])} of {len(tally[key])}"

    lines.append("")
    lines.append(
        f"- on {len(by)} landscapes: learned meets its no-prior target on {count('cold')}, "
        f"learned+prior its prior target on {count('prior')}, learned+sparse on "
        f"{count('sparse')}, learned is within 10% of "
        f"{baseline} (or better) on {count('local')}"
    )
    return "\n".join(lines)
