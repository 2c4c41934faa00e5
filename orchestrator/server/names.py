"""Allow-lists for the names a request carries that reach paths, files or imports.

Team names and device class keys are checked by pattern (no path separators, no dot-dot); kernel
names against the registry, and ``module:attribute`` kernels against the operator's allow-list.
Every check raises :class:`BadName` (HTTP 400) with one line.
"""

from __future__ import annotations

import re
from collections.abc import Collection

from search_spaces.registry import available

TEAM_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
CLASS_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9 _.:()+-]{0,199}")
_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
MODULE_REF_PATTERN = re.compile(
    rf"({_IDENTIFIER}(?:\.{_IDENTIFIER})*):({_IDENTIFIER}(?:\.{_IDENTIFIER})*)"
)


class BadName(ValueError):
    """A name in a request is not one this server accepts (HTTP 400)."""


def _checked(value: str, pattern: re.Pattern[str], what: str, hint: str) -> str:
    if not pattern.fullmatch(value) or ".." in value:
        raise BadName(f"{what} {value[:80]!r} is not allowed; {hint}")
    return value


def team(value: str) -> str:
    """``value`` if it is a team name: a letter or digit, then up to 63 of letters, digits, ``_.-``."""
    return _checked(value, TEAM_PATTERN, "team", "use letters, digits, '_', '.' and '-'")


def device_class(value: str) -> str:
    """``value`` if it can be a device class key (``NVIDIA H200``, ``replay:NVIDIA H200``, ``cpu``)."""
    return _checked(
        value, CLASS_PATTERN, "device class", "use a class key such as 'NVIDIA H200' or 'cpu'"
    )


def kernel(
    value: str, allowed_modules: Collection[str], registered: Collection[str] | None = None
) -> str:
    """``value`` if it is a registered kernel (one of ``registered``, default: the registry's), or
    ``module:attribute`` of an allow-listed module.

    Never imports anything: an unknown registered name and a module the operator did not list are
    refused before the registry would load them.
    """
    if ":" not in value:
        if value not in (available() if registered is None else registered):
            raise BadName(f"unknown kernel {value[:80]!r}; GET /v1/kernels lists the kernels")
        return value
    match = MODULE_REF_PATTERN.fullmatch(value)
    if match is None:
        raise BadName(f"kernel {value[:80]!r} is not a kernel name or MODULE:ATTRIBUTE")
    if match.group(1) not in allowed_modules:
        raise BadName(
            f"kernel module {match.group(1)!r} is not allowed on this server; its operator "
            "allows modules with `tunefleet serve --allow-kernel-module NAME`"
        )
    return value
