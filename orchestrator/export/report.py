"""What a bundle's dispatch policy measured against the vendor path, for ``pull``'s summary.

Per entry (a shape a study saw) with a vendor time, ``ratio`` is ``vendor_ms / chosen_ms``: the
chosen backend's time from the same paired re-timing (``triton_ms``, else the entry's ``time_ms``
when Triton won; ``vendor_ms`` when the vendor path won, so 1.0). Over those entries the report
gives the worst case (the minimum: below 1 only where a chosen Triton config measured slower than
the vendor path, which promotion's tie rule should prevent) and the geometric mean.

The unseen-shape case is leave-one-out: each such entry is decided by the bundle without it
(:meth:`Bundle.decide`: the nearest other entry's decision, a Triton one only across the
bundle's batch fields, else the default), and that decision's
time on the entry's shape gives ``unseen_ratio``. It is measured when the decision runs what the
entry measured there (its vendor path, or its own Triton config); a different Triton config, or a
vendor path other than the entry's, was not timed on that shape, and ``unseen_ratio`` is then an
upper bound (the entry's own Triton config is the fastest its study measured, its vendor path the
fastest vendor path), marked ``unseen_exact: false``. The unseen worst case is the minimum, an
upper bound of the true one when any row is.
"""

from __future__ import annotations

import math
from typing import Any

from search_spaces.bundle import Bundle, BundleEntry, Decision, nearest_rank


def triton_ms(entry: BundleEntry) -> float | None:
    """The entry's best Triton config's time: the re-timing's, else ``time_ms`` where Triton won
    (a cancelled job's entry); None for a vendor win without one."""
    if entry.triton_ms is not None:
        return entry.triton_ms
    return entry.time_ms if entry.backend == "triton" else None


def _chosen_ms(entry: BundleEntry) -> float | None:
    return entry.vendor_ms if entry.backend == "vendor" else triton_ms(entry)


def _ratio(vendor_ms: float, ms: float | None) -> float | None:
    return None if ms is None or ms <= 0 else vendor_ms / ms


def _unseen(entry: BundleEntry, vendor_ms: float, decision: Decision) -> tuple[float | None, bool]:
    """``(ratio, exact)`` of ``decision`` on ``entry``'s shape (see the module doc)."""
    if decision.backend == "vendor":
        return 1.0, decision.vendor == entry.vendor
    best_triton = triton_ms(entry)
    return _ratio(vendor_ms, best_triton), decision.config == entry.config


def _is_dim(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _left_out_decisions(bundle: Bundle) -> list[Decision]:
    """Per entry, :meth:`Bundle.decide` of its problem by the bundle without it: the nearest other
    entry by :func:`search_spaces.problem.problem_distance` (same field names and non-dim
    values; the sum of ``|log2 a - log2 b|`` over the dims, added in the problem's field order;
    ranked by :func:`search_spaces.bundle.nearest_rank`, ties to the entry listed first), else the
    default. The same rule, computed in one pass per
    group of comparable entries instead of one bundle per left-out entry."""
    groups: dict[tuple[Any, ...], list[int]] = {}
    logs: list[dict[str, float]] = []
    for i, entry in enumerate(bundle.entries):
        problem = entry.problem
        key = tuple(
            (name, ("dim",) if _is_dim(problem[name]) else ("eq", problem[name]))
            for name in sorted(problem)
        )
        groups.setdefault(key, []).append(i)
        logs.append({n: math.log2(v) for n, v in problem.items() if _is_dim(v)})
    decisions = [Decision("triton", bundle.default, None, "default")] * len(bundle.entries)
    for members in groups.values():
        for i in members:
            mine = logs[i]
            best: tuple[float, bool, int] | None = None
            for j in members:
                if j == i:
                    continue
                other = logs[j]
                total = 0.0
                for name, value in mine.items():
                    total += abs(value - other[name])
                rank = nearest_rank(total, bundle.entries[j])
                if best is None or rank < best[:2]:
                    best = (*rank, j)
            if best is not None:
                how = "exact" if best[0] == 0 else "nearest"
                decisions[i] = bundle.decision_from(
                    bundle.entries[i].problem, bundle.entries[best[2]], how
                )
    return decisions


def policy_report(bundle: Bundle) -> dict[str, Any]:
    """The policy's measured outcome on the shapes ``bundle``'s studies saw (module doc): counts
    per backend, the worst and geometric-mean speed-up over the vendor path, the leave-one-out
    worst case, and one row per entry with a vendor time."""
    shapes: list[dict[str, Any]] = []
    for entry, decision in zip(bundle.entries, _left_out_decisions(bundle), strict=True):
        if entry.vendor_ms is None or entry.vendor_ms <= 0:
            continue
        ratio = _ratio(entry.vendor_ms, _chosen_ms(entry))
        if ratio is None:
            continue
        unseen, exact = _unseen(entry, entry.vendor_ms, decision)
        shapes.append(
            {
                "problem": entry.problem,
                "backend": entry.backend,
                "vendor": entry.vendor,
                "ratio": ratio,
                "unseen_backend": decision.backend,
                "unseen_how": decision.how,
                "unseen_ratio": unseen,
                "unseen_exact": exact,
            }
        )
    worst = min(shapes, key=lambda row: row["ratio"], default=None)
    unseen_rows = [row for row in shapes if row["unseen_ratio"] is not None]
    unseen_worst = min(unseen_rows, key=lambda row: row["unseen_ratio"], default=None)
    return {
        "kernel": bundle.kernel,
        "device_class": bundle.device_class,
        "digest": bundle.digest,
        "entries": len(bundle.entries),
        "triton": sum(e.backend == "triton" for e in bundle.entries),
        "vendor": sum(e.backend == "vendor" for e in bundle.entries),
        "measured": len(shapes),
        "worst_vs_vendor": None if worst is None else worst["ratio"],
        "worst_problem": None if worst is None else worst["problem"],
        "geomean_vs_vendor": (
            math.exp(sum(math.log(row["ratio"]) for row in shapes) / len(shapes))
            if shapes
            else None
        ),
        "unseen_worst_vs_vendor": None if unseen_worst is None else unseen_worst["unseen_ratio"],
        "unseen_worst_problem": None if unseen_worst is None else unseen_worst["problem"],
        "unseen_bounded": sum(not row["unseen_exact"] for row in unseen_rows),
        "shapes": shapes,
    }


def _problem_text(problem: dict[str, Any] | None) -> str:
    return "-" if problem is None else ",".join(f"{k}={v}" for k, v in problem.items())


def summary_line(report: dict[str, Any]) -> str:
    """One line of ``pull``'s summary for a :func:`policy_report`."""
    head = (
        f"policy {report['kernel']} {report['device_class']}: {report['triton']} triton, "
        f"{report['vendor']} vendor"
    )
    if not report["measured"]:
        return f"{head}; no entry measured against a vendor path"
    worst = report["unseen_worst_vs_vendor"]
    unseen = "unseen (leave-one-out) -"
    if worst is not None:
        sign = "=" if not report["unseen_bounded"] else "<="
        unseen = (
            f"unseen (leave-one-out) worst {sign} {worst:.3f}x at "
            f"{_problem_text(report['unseen_worst_problem'])}"
            f" ({report['unseen_bounded']} bound(s))"
        )
    return (
        f"{head}; vs vendor over {report['measured']} measured shape(s): worst "
        f"{report['worst_vs_vendor']:.3f}x at {_problem_text(report['worst_problem'])}, geomean "
        f"{report['geomean_vs_vendor']:.3f}x; {unseen}"
    )
