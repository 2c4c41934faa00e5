"""The search benchmark's leave-one-problem-out mode (issue 23): the database prior of a replayed
landscape, taken from the other landscapes of its kernel, and the table that holds the ``learned``
sampler to the issue's targets. ``benchmarks/search.py --prior-from`` and ``--learned-table`` use
them."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from orchestrator.samplers.learned import PriorTrial
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
    ``learned``, ``learned+warm``, ``learned+prior`` and ``learned+prior+warm``, and issue 23's
    targets: learned median <= 20 and p90 <= 50;
    with the prior median <= 5 and p90 <= 15; learned's median at most 10% above the baseline's.
    Then how many landscapes meet each."""
    names = (
        baseline,
        f"{baseline}+warm",
        "learned",
        "learned+warm",
        "learned+prior",
        "learned+prior+warm",
    )
    by: dict[str, dict[str, Mapping[str, Any]]] = {}
    for r in rows:
        by.setdefault(r["landscape"], {})[r["sampler"]] = r
    lines = [
        "| landscape | space | "
        + " | ".join(f"{n}: 2% median / p90" for n in names)
        + " | learned / local (median) | learned ≤20/≤50 | +prior ≤5/≤15 | ≤1.1× local |",
        "|---" * (len(names) + 6) + "|",
    ]
    tally = {"cold": 0, "prior": 0, "local": 0}
    for landscape, row in by.items():
        t2 = {n: row[n]["trials_to_2pct"] for n in names if n in row}
        cells = [f"{t2[n]['median']:g} / {t2[n]['p90']:g}" if n in t2 else "-" for n in names]
        cold, prior, base = t2.get("learned"), t2.get("learned+prior"), t2.get(baseline)
        ok_cold = cold is not None and cold["median"] <= 20 and cold["p90"] <= 50
        ok_prior = prior is not None and prior["median"] <= 5 and prior["p90"] <= 15
        ratio = cold["median"] / base["median"] if cold and base else math.nan
        ok_local = ratio <= 1.1
        tally["cold"] += ok_cold
        tally["prior"] += ok_prior
        tally["local"] += ok_local
        n = next(iter(row.values()))["space"]
        lines.append(
            f"| {landscape} | {n} | "
            + " | ".join(cells)
            + f" | {ratio:.2f} | "
            + " | ".join("yes" if ok else "no" for ok in (ok_cold, ok_prior, ok_local))
            + " |"
        )
    lines.append("")
    lines.append(
        f"- on {len(by)} landscapes: learned meets its no-prior target on {tally['cold']}, "
        f"learned+prior its prior target on {tally['prior']}, learned is within 10% of "
        f"{baseline} (or better) on {tally['local']}"
    )
    return "\n".join(lines)
