"""Stored text is always storable: the one place strings are made fit for every backend.

A string that reaches the database may come from a user's kernel (an error message), a device
(its name, a driver version), a request or a file. PostgreSQL refuses a NUL character in text and
JSON text; neither backend's driver encodes a lone surrogate to UTF-8; PostgreSQL refuses a value
longer than a ``VARCHAR(n)``. :func:`storable` escapes the first two (NUL as ``\\x00``, a lone
surrogate as ``\\udXXX``) and cuts the value to the column's length with :data:`CUT_MARK` at its
end. The column types below apply it to every bound value, Core and ORM alike, so no caller can
forget it; their ``impl`` is the plain type, so the schema the migrations build is unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect

#: Put at the end of a value cut to its column's length.
CUT_MARK = "...[cut]"
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return "\\x00" if char == "\x00" else f"\\u{ord(char):04x}"


def storable(value: str, length: int | None = None) -> str:
    """``value`` with NUL and lone surrogates escaped, cut to ``length`` characters (None: any
    length) with :data:`CUT_MARK` as its last characters when it was longer."""
    text = _UNSTORABLE.sub(_escape, value)
    if length is not None and len(text) > length:
        return text[: max(0, length - len(CUT_MARK))] + CUT_MARK[:length]
    return text


def storable_json(value: Any) -> Any:
    """``value`` (a JSON document: dicts, lists, scalars) with every string in it, keys
    included, made :func:`storable`."""
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, Mapping):
        return {storable(str(k)): storable_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [storable_json(v) for v in value]
    return value


class StoredString(sa.TypeDecorator[str]):
    """``VARCHAR(n)`` whose bound values are :func:`storable` within ``n`` characters."""

    impl = sa.String
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | None:
        if value is None:
            return None
        length = getattr(self.impl, "length", None)
        return storable(str(value), length)


class StoredText(sa.TypeDecorator[str]):
    """``TEXT`` whose bound values are :func:`storable`."""

    impl = sa.Text
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | None:
        return None if value is None else storable(str(value))


class StoredJSON(sa.TypeDecorator[Any]):
    """``JSON`` whose bound documents hold only :func:`storable` strings."""

    impl = sa.JSON
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        return storable_json(value)
