"""Helpers of the repository modules: rows to records, get-or-create, enum coercion."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import fields
from typing import TYPE_CHECKING, Any, TypeVar, cast

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from db.errors import InvalidRecord
from db.models import DeviceClass, Environment, Kernel, Study

if TYPE_CHECKING:
    from _typeshed import DataclassInstance


_E = TypeVar("_E", bound=enum.Enum)
_R = TypeVar("_R", bound="DataclassInstance")


def record(record_type: type[_R], row: object, **extra: Any) -> _R:
    """A ``record_type`` from the ORM ``row``'s attributes of the same names, plus ``extra`` fields."""
    values = {f.name: getattr(row, f.name) for f in fields(record_type) if f.name not in extra}
    return record_type(**values, **extra)


def get_or_create(
    s: Session,
    model: type[DeviceClass | Environment | Kernel | Study],
    key: Mapping[str, Any],
    **other: Any,
) -> int:
    """Id of the ``model`` row whose columns equal ``key``; if none, a new row of ``key`` + ``other``."""
    select = sa.select(model.id).where(*(getattr(model, k) == v for k, v in key.items()))
    existing = s.scalar(select)
    if existing is not None:
        return existing
    try:
        with s.begin_nested():
            row = model(**key, **other)
            s.add(row)
    except IntegrityError:
        # Another writer created the same row between our select and insert.
        found = s.scalar(select)
        if found is None:
            raise
        return found
    return cast(int, row.id)


def coerce(enum_type: type[_E], value: object, what: str) -> _E:
    try:
        return enum_type(value)
    except ValueError:
        allowed = ", ".join(str(m.value) for m in enum_type)
        raise InvalidRecord(f"unknown {what} {value!r}; one of {allowed}") from None
