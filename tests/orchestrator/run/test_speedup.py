"""The one speedup computation: a reference's time over the winner's, None without both."""

from orchestrator.run.speedup import speedup


def test_speedup_is_reference_over_time_and_none_without_both() -> None:
    assert speedup(2.0, 0.5) == 4.0
    assert speedup(0.5, 0.5) == 1.0
    for reference, time_ms in ((None, 1.0), (1.0, None), (0.0, 1.0), (1.0, 0.0), (-1.0, 1.0)):
        assert speedup(reference, time_ms) is None
