"""Audit rows of refused requests, rate-limited per token: a token whose requests are refused
(403 for its scope, a cap, 404, 422, ...) writes at most :attr:`RefusalAudit.per_minute` rows a
minute, then one row saying that more were refused and not written, then none until the next
minute. Accepted state changes are always audited."""

from __future__ import annotations

import threading
import time
from typing import Any

from db import Database
from orchestrator.server.auth import Principal, audit

SUPPRESSED = "audit.suppressed"
WINDOW_S = 60.0


class RefusalAudit:
    """Writes refused requests' audit rows within a per-token budget (see the module doc)."""

    def __init__(self, database: Database, per_minute: int = 10) -> None:
        self.database = database
        self.per_minute = per_minute
        self._lock = threading.Lock()
        self._windows: dict[int, tuple[float, int]] = {}  # token id -> (window start, rows)

    def _count(self, token_id: int) -> int:
        """This refusal's number in its token's current window (from 1)."""
        now = time.monotonic()
        with self._lock:
            start, seen = self._windows.get(token_id, (now, 0))
            if now - start >= WINDOW_S:
                start, seen = now, 0
            self._windows[token_id] = (start, seen + 1)
            if len(self._windows) > 4096:  # forget the oldest windows
                for old in sorted(self._windows, key=lambda t: self._windows[t][0])[:1024]:
                    del self._windows[old]
            return seen + 1

    def write(
        self,
        principal: Principal,
        action: str,
        *,
        target: str | None = None,
        detail: dict[str, Any] | None = None,
    ) -> None:
        """Audit a refused request of ``principal`` unless its token is over its budget."""
        number = self._count(principal.token_id)
        if number <= self.per_minute:
            audit(self.database, principal, action, target=target, detail=detail)
        elif number == self.per_minute + 1:
            audit(
                self.database,
                principal,
                SUPPRESSED,
                target=action,
                detail={"after": self.per_minute, "window_s": WINDOW_S},
            )
