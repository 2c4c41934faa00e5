"""Per-team caps on what a job may ask of a shared server: queue priority, trials per study and
problems per job. The operator sets them (``tunefleet serve --max-priority`` etc.); an admin
token is not capped. A request over a cap is refused (OverCap: HTTP 403) with one line naming
the cap. Imports nothing of the web stack: the CLI reads the defaults."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.errors import PermissionDenied


class OverCap(PermissionDenied):
    """A job asks more than its team's cap (HTTP 403)."""


@dataclass(frozen=True)
class TeamCaps:
    """The most any team's job may ask: ``priority`` (and at least ``-priority``), ``trials`` per
    study, ``problems`` per job."""

    priority: int = 100
    trials: int = 10_000
    problems: int = 64

    def check(self, team: str, priority: int, trials: int, problems: int) -> None:
        """OverCap naming the first cap a job of ``team`` goes over."""
        for what, value, cap in (
            ("priority", abs(priority), self.priority),
            ("trials per study", trials, self.trials),
            ("problems per job", problems, self.problems),
        ):
            if value > cap:
                raise OverCap(
                    f"{what} {value} is over this server's cap for team {team} ({cap}); "
                    "ask its operator (tunefleet serve --max-priority/--max-trials/--max-problems)",
                )
