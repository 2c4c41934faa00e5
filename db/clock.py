"""This host's clock as rows are stamped with it (created, updated, finished): UTC, offset by
:data:`CLOCK_OFFSET_ENV` (stdlib only; leases never read it, see ``repository.db_now``)."""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone

#: Seconds added to this host's clock as :func:`utcnow` reads it; fault tests set it to play a
#: host whose clock is off. Leases never read the host's clock (``repository.db_now``).
CLOCK_OFFSET_ENV = "TUNEFLEET_CLOCK_OFFSET_S"


def _clock_offset() -> timedelta:
    try:
        return timedelta(seconds=float(os.environ.get(CLOCK_OFFSET_ENV) or 0))
    except (ValueError, OverflowError):
        return timedelta()


_OFFSET = _clock_offset()


def utcnow() -> datetime:
    """This host's clock, in UTC (timestamps of rows: created, updated, finished)."""
    return datetime.now(timezone.utc) + _OFFSET
