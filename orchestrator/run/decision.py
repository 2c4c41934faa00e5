"""Deciding a best-config key from one paired, interleaved re-timing: noise floor and tie rule.

Every candidate (Triton configs, the key's incumbent best, the vendor path) was timed in the
same ``rounds`` rounds, each round timing every candidate once, one after another, in one
process; a candidate's *times* are its per-round medians, its time their median.

Noise floor. Two candidates timed in the same rounds give per-round ratios ``q_i = a_i / b_i``,
which cancel what drifts for both within a round (clocks, temperature, a neighbour's load);
``noise(a, b) = (max q - min q) / median q`` is the relative spread of those ratios. Only
candidates whose every round ended ``ok`` are paired (a failed round would misalign them); with
fewer than two rounds the spread is 0. The key's noise floor is the largest ``noise(fastest, d)``
over its *defenders* ``d`` other than the fastest candidate (the incumbent, then the vendor path,
those that have times); with none, ``noise(fastest, runner-up)``; None with one candidate or no
pair.

Tie rule. The fastest candidate by median wins unless a defender *holds*: the fastest is not
faster than it by more than the band, ``(d - fastest) / d <= max(noise, TIE_BAND)`` (the stored
floor is the measured spread; TIE_BAND, 2%, is the least difference that counts, since timings of
one config drift 1-4% between windows and runs: a flip inside it buys nothing). The defenders are asked
in this order, the first that holds winning (the fastest, if it is a defender, stands in its own
place): the incumbent (the key's stored best: re-tuning does not flip a winner inside the
noise), then the vendor path (with no incumbent, what the deployment runs already wins ties: a
bundle never makes it slower). Exact ties in median go to the incumbent, then the vendor path,
then the candidate listed first.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

#: The least relative difference that decides against a defender, whatever the measured floor.
TIE_BAND = 0.02


@dataclass(frozen=True)
class Timed:
    """One candidate of a re-timing: its key, its time (ms) and its per-round medians (empty
    when it was not re-timed, ``time_ms`` then an earlier measurement's)."""

    key: str
    time_ms: float
    rounds: tuple[float, ...] = field(default=())


@dataclass(frozen=True)
class Decision:
    """The winner's key, the fastest candidate's key, and the noise floor (a fraction; None:
    no pair to compute it from)."""

    winner: str
    fastest: str
    noise: float | None


def pair_noise(a: Timed, b: Timed, rounds: int) -> float | None:
    """The relative spread of ``a``'s per-round ratios to ``b`` (see the module docstring);
    None unless both ended ``ok`` in all ``rounds``."""
    if len(a.rounds) != rounds or len(b.rounds) != rounds or rounds < 1:
        return None
    ratios = [x / y for x, y in zip(a.rounds, b.rounds, strict=True)]
    return (max(ratios) - min(ratios)) / statistics.median(ratios)


def decide(
    candidates: Sequence[Timed],
    rounds: int,
    incumbent: str | None = None,
    vendor: str | None = None,
) -> Decision:
    """Apply the tie rule to ``candidates`` (at least one); ``incumbent`` and ``vendor`` name
    the defenders among them (keys absent from ``candidates`` are ignored)."""
    if not candidates:
        raise ValueError("a decision needs at least one candidate")
    by_key = {c.key: c for c in candidates}
    defenders = [by_key[k] for k in (incumbent, vendor) if k is not None and k in by_key]
    priority = {d.key: n for n, d in enumerate(defenders)}
    ranked = sorted(
        enumerate(candidates),
        key=lambda ic: (ic[1].time_ms, priority.get(ic[1].key, len(priority)), ic[0]),
    )
    fastest = ranked[0][1]
    others = [d for d in defenders if d.key != fastest.key]
    pairs = others or [c for _, c in ranked[1:2]]
    spreads = [n for n in (pair_noise(fastest, d, rounds) for d in pairs) if n is not None]
    noise = max(spreads) if spreads else None
    floor = max(noise or 0.0, TIE_BAND)
    for d in defenders:  # in priority order; the fastest itself ends the search
        if d.key == fastest.key or (d.time_ms - fastest.time_ms) / d.time_ms <= floor:
            return Decision(d.key, fastest.key, noise)
    return Decision(fastest.key, fastest.key, noise)
