"""The per-key decision of a paired re-timing: the noise floor and the tie rule (pure)."""

from __future__ import annotations

import pytest

from orchestrator.run.decision import TIE_BAND, Timed, decide, pair_noise


def timed(key: str, *rounds: float) -> Timed:
    ordered = sorted(rounds)
    return Timed(key, ordered[len(ordered) // 2], tuple(rounds))


def test_the_noise_is_the_spread_of_the_per_round_ratios() -> None:
    # Both drift alike from round to round: their ratio does not, the noise is 0.
    assert pair_noise(timed("a", 1.0, 2.0, 3.0), timed("b", 2.0, 4.0, 6.0), 3) == 0.0
    spread = pair_noise(timed("a", 1.0, 1.0, 1.0), timed("b", 1.0, 1.02, 0.98), 3)
    assert spread == pytest.approx((1 / 0.98 - 1 / 1.02) / 1.0)
    # A failed round (fewer times than rounds): no pairing.
    assert pair_noise(timed("a", 1.0, 1.0), timed("b", 1.0, 1.0, 1.0), 3) is None


def test_a_challenger_inside_the_noise_keeps_the_incumbent() -> None:
    incumbent = timed("held", 1.00, 1.02, 0.98)
    challenger = timed("new", 0.99, 0.99, 0.99)  # 1% faster; the rounds' ratio spreads 4%
    decision = decide([challenger, incumbent], 3, incumbent="held")
    assert decision.winner == "held" and decision.fastest == "new"
    assert decision.noise == pytest.approx(pair_noise(challenger, incumbent, 3))


def test_a_challenger_beyond_the_noise_replaces_the_incumbent() -> None:
    incumbent = timed("held", 1.00, 1.01, 0.99)
    challenger = timed("new", 0.80, 0.81, 0.79)
    assert decide([incumbent, challenger], 3, incumbent="held").winner == "new"


def test_with_no_incumbent_the_vendor_path_wins_ties_and_loses_beyond_the_noise() -> None:
    vendor = timed("vendor:torch.matmul", 1.0, 1.0, 1.0)
    assert decide([timed("a", 1.0, 1.0, 1.0), vendor], 3, vendor=vendor.key).winner == vendor.key
    inside = timed("a", 0.99, 1.0, 0.97)  # fastest by median, inside its 3% spread
    assert decide([inside, vendor], 3, vendor=vendor.key).winner == vendor.key
    beyond = timed("a", 0.5, 0.5, 0.5)
    assert decide([beyond, vendor], 3, vendor=vendor.key).winner == "a"


def test_the_incumbent_is_asked_before_the_vendor_path() -> None:
    held = timed("held", 1.0, 1.0, 1.0)
    vendor = timed("vendor:v", 1.0, 1.0, 1.0)
    new = timed("new", 1.0, 1.0, 1.0)
    assert decide([new, vendor, held], 3, "held", vendor.key).winner == "held"
    # A vendor path faster than the incumbent beyond the noise wins.
    assert decide([timed("vendor:v", 0.5, 0.5, 0.5), held], 3, "held", "vendor:v").winner == (
        "vendor:v"
    )


def test_without_defenders_the_fastest_wins_and_the_noise_is_against_the_runner_up() -> None:
    a, b = timed("a", 1.0, 1.0, 1.0), timed("b", 2.0, 2.2, 1.8)
    decision = decide([b, a], 3)
    assert (decision.winner, decision.noise) == ("a", pair_noise(a, b, 3))
    assert decide([Timed("only", 1.0)], 3).noise is None
    with pytest.raises(ValueError, match="at least one"):
        decide([], 3)


def test_a_difference_inside_the_tie_band_never_flips_a_defender_even_with_no_noise() -> None:
    # The rounds agree exactly (measured floor 0), yet 1.5% is inside TIE_BAND: the vendor holds;
    # 3% is outside it: the Triton config wins.
    vendor = timed("vendor:torch.matmul", 1.0, 1.0, 1.0)
    close = timed("a", 0.985, 0.985, 0.985)
    decision = decide([close, vendor], 3, vendor=vendor.key)
    assert TIE_BAND == 0.02
    assert decision.winner == vendor.key and decision.noise == 0.0
    assert decide([timed("b", 0.97, 0.97, 0.97), vendor], 3, vendor=vendor.key).winner == "b"
