"""Problem schemas: the named dims, dtype and flags a kernel is tuned for, with validation."""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeGuard

from search_spaces.errors import ProblemError

ProblemValue = int | bool | str
Problem = dict[str, ProblemValue]

DTYPES = ("float16", "bfloat16", "float32")


class FieldKind(str, enum.Enum):
    """A problem field: a positive integer dim, the dtype, a flag, or one of a set of names."""

    DIM = "dim"
    DTYPE = "dtype"
    BOOL = "bool"
    CHOICE = "choice"


def _positive_int(raw: object) -> int | None:
    """``raw`` as a positive int (ints, whole floats, digit strings), else None."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, float):
        value = int(raw) if raw.is_integer() else None
    elif isinstance(raw, int):
        value = raw
    else:
        text = str(raw).strip()
        value = int(text) if text.lstrip("+").isdigit() else None
    return value if value is not None and value > 0 else None


@dataclass(frozen=True)
class Field:
    """One named field of a problem; ``default`` (if set) fills it in when the user omits it.
    ``batch``: the field grows with a deployment's batch or sequence (tokens, sequences, context
    length), not with its weights or model dims."""

    name: str
    kind: FieldKind = FieldKind.DIM
    choices: tuple[str, ...] = ()
    default: ProblemValue | None = None
    doc: str = ""
    batch: bool = False

    def coerce(self, raw: object) -> ProblemValue:
        """Turn a value from JSON or the command line into this field's type, or raise ProblemError."""
        if self.kind is FieldKind.DIM:
            value = _positive_int(raw)
            if value is None:
                raise ProblemError(f"{self.name}={raw} must be a positive integer")
            return value
        if self.kind is FieldKind.BOOL:
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in ("1", "true", "yes"):
                return True
            if text in ("0", "false", "no"):
                return False
            raise ProblemError(f"{self.name}={raw} must be true or false")
        allowed = DTYPES if self.kind is FieldKind.DTYPE else self.choices
        text = str(raw).strip()
        if text not in allowed:
            raise ProblemError(
                f"{self.name}={raw} is not supported; choose one of {', '.join(allowed)}"
            )
        return text


@dataclass(frozen=True)
class ProblemSchema:
    """The fields of a kernel's problems, in order; validates and canonicalizes problems."""

    fields: tuple[Field, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    @property
    def batch_names(self) -> tuple[str, ...]:
        """The fields that grow with a deployment's batch or sequence (``Field.batch``)."""
        return tuple(f.name for f in self.fields if f.batch)

    def validate(self, raw: Mapping[str, object]) -> Problem:
        """A complete, typed problem from ``raw``; raises ProblemError naming the first bad field."""
        unknown = sorted(set(raw) - set(self.names))
        if unknown:
            raise ProblemError(
                f"unknown problem field {unknown[0]!r}; fields are {', '.join(self.names)}"
            )
        problem: Problem = {}
        for f in self.fields:
            if f.name in raw:
                problem[f.name] = f.coerce(raw[f.name])
            elif f.default is not None:
                problem[f.name] = f.default
            else:
                raise ProblemError(f"problem lacks {f.name!r}; give {self.usage()}")
        return problem

    def parse(self, text: str) -> Problem:
        """Parse ``M=64,N=64,dtype=float16`` (the CLI's ``-p``) and validate it; a field named
        twice is a ProblemError (the last would otherwise win silently)."""
        raw: dict[str, object] = {}
        for item in filter(None, (s.strip() for s in text.split(","))):
            name, sep, value = item.partition("=")
            if not sep:
                raise ProblemError(f"problem item {item!r} is not NAME=VALUE; give {self.usage()}")
            name = name.strip()
            if name in raw:
                raise ProblemError(
                    f"problem names {name!r} twice ({name}={raw[name]} and {name}={value}); "
                    "give each field once"
                )
            raw[name] = value
        return self.validate(raw)

    def usage(self) -> str:
        parts = []
        for f in self.fields:
            if f.kind is FieldKind.DIM:
                parts.append(f"{f.name}=<int>")
            elif f.kind is FieldKind.DTYPE:
                parts.append(f"{f.name}={'|'.join(DTYPES)}")
            elif f.kind is FieldKind.BOOL:
                parts.append(f"{f.name}=true|false")
            else:
                parts.append(f"{f.name}={'|'.join(f.choices)}")
        return ",".join(parts)

    def describe(self) -> list[dict[str, object]]:
        return [
            {
                "name": f.name,
                "kind": f.kind.value,
                **(
                    {"choices": list(DTYPES if f.kind is FieldKind.DTYPE else f.choices)}
                    if f.kind in (FieldKind.DTYPE, FieldKind.CHOICE)
                    else {}
                ),
                **({"default": f.default} if f.default is not None else {}),
                **({"doc": f.doc} if f.doc else {}),
            }
            for f in self.fields
        ]


def problem_key(problem: Mapping[str, ProblemValue]) -> str:
    """Canonical JSON of a problem: the key under which results are stored."""
    return json.dumps(dict(problem), sort_keys=True, separators=(",", ":"))


def _is_dim(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def problem_distance(a: Mapping[str, object], b: Mapping[str, object]) -> float:
    """How far apart two problems are: the sum over their integer dims of ``|log2(x) - log2(y)|``
    (2048 is as far from 4096 as 4096 from 8192); inf unless both have the same field names and
    every other field (dtype, flags, choices) is equal. Warm start and the bundle's nearest-entry
    lookup both use it."""
    if set(a) != set(b):
        return math.inf
    total = 0.0
    for name, value in a.items():
        other = b[name]
        if _is_dim(value) and _is_dim(other):
            total += abs(math.log2(value) - math.log2(other))
        elif value != other or _is_dim(value) != _is_dim(other):
            return math.inf
    return total
