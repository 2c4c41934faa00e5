"""Optimizer-neutral search spaces: discrete parameters, multi-parameter constraints, vendor parameters.

A :class:`Space` knows nothing about Optuna or any other optimizer. Given :class:`DeviceLimits` it
enumerates the valid configs, counts them, checks one config (naming the rule it breaks) and has a
stable hash that changes whenever a parameter, a value or a constraint changes.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from search_spaces.device_identity import Vendor
from search_spaces.errors import ConfigError

Value = int | bool | str
Config = dict[str, Value]


class ParamKind(str, enum.Enum):
    """How a parameter's values relate: ordered ints, powers of two, a flag, or unordered labels."""

    INT = "int"
    POW2 = "pow2"
    BOOL = "bool"
    CATEGORICAL = "categorical"

    @property
    def ordered(self) -> bool:
        return self in (ParamKind.INT, ParamKind.POW2)


@dataclass(frozen=True)
class DeviceLimits:
    """What a space needs to know of a device class to decide which configs can run there."""

    vendor: Vendor
    name: str
    arch: str
    shared_mem_per_block: int
    registers_per_block: int
    warp_size: int
    multiprocessors: int
    max_threads_per_block: int = 1024


@dataclass(frozen=True)
class Param:
    """A named parameter with a finite, ordered list of allowed values.

    ``vendors`` limits the parameter to some device vendors (e.g. AMD's ``waves_per_eu``); on other
    vendors the parameter is absent from configs.
    """

    name: str
    values: tuple[Value, ...]
    kind: ParamKind = ParamKind.INT
    vendors: frozenset[Vendor] | None = None
    doc: str = ""

    def __post_init__(self) -> None:
        if not self.values:
            raise ValueError(f"parameter {self.name!r} has no values")
        if len(set(self.values)) != len(self.values):
            raise ValueError(f"parameter {self.name!r} repeats a value: {self.values}")
        if self.kind is ParamKind.POW2 and any(
            not isinstance(v, int) or v <= 0 or v & (v - 1) for v in self.values
        ):
            raise ValueError(f"parameter {self.name!r} is pow2 but has {self.values}")
        if self.kind is ParamKind.BOOL and set(self.values) - {True, False}:
            raise ValueError(f"parameter {self.name!r} is bool but has {self.values}")

    def applies_to(self, vendor: Vendor) -> bool:
        return self.vendors is None or vendor in self.vendors

    def coerce(self, raw: str) -> Value:
        """Parse a command-line string into one of this parameter's values, or raise ConfigError."""
        for value in self.values:
            if str(value).lower() == raw.strip().lower():
                return value
        raise ConfigError(
            f"{self.name}={raw} is not allowed; choose one of {', '.join(map(str, self.values))}"
        )


@dataclass(frozen=True)
class Constraint:
    """A rule over several parameters (and the device's limits) that a valid config must keep.

    ``check(config, limits)`` returns True when the config is allowed. ``uses`` names the parameters
    read, and ``check`` reads no other (enumeration checks a rule as soon as its last one is set);
    the rule is skipped on vendors where one of them is absent. ``text`` says the rule to a person
    and goes into the space's hash: change it whenever the rule changes.
    """

    name: str
    text: str
    uses: tuple[str, ...]
    check: Callable[[Mapping[str, Value], DeviceLimits], bool]


@dataclass(frozen=True)
class Violation:
    """Why a config is not valid: the broken rule's name and a sentence for the user."""

    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.message}"


@dataclass(frozen=True)
class Space:
    """An ordered set of parameters plus constraints; the unit that search and storage hash."""

    params: tuple[Param, ...]
    constraints: tuple[Constraint, ...] = field(default=())

    def __post_init__(self) -> None:
        names = [p.name for p in self.params]
        if len(set(names)) != len(names):
            raise ValueError(f"space repeats a parameter name: {names}")
        for c in self.constraints:
            unknown = set(c.uses) - set(names)
            if unknown:
                raise ValueError(f"constraint {c.name!r} uses unknown parameters {sorted(unknown)}")

    def params_for(self, vendor: Vendor) -> tuple[Param, ...]:
        """The parameters that exist on ``vendor``, in declaration order."""
        return tuple(p for p in self.params if p.applies_to(vendor))

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise ConfigError(
            f"unknown parameter {name!r}; the space has {', '.join(p.name for p in self.params)}"
        )

    def total(self, vendor: Vendor) -> int:
        """Size of the Cartesian product of the parameters present on ``vendor``."""
        n = 1
        for p in self.params_for(vendor):
            n *= len(p.values)
        return n

    def violation(self, config: Mapping[str, Value], limits: DeviceLimits) -> Violation | None:
        """The first rule ``config`` breaks on ``limits``, or None if it is valid there."""
        present = self.params_for(limits.vendor)
        expected = {p.name for p in present}
        for name in config:
            if name not in expected:
                where = (
                    ""
                    if name not in {p.name for p in self.params}
                    else f" on {limits.vendor.value}"
                )
                return Violation(
                    "unknown-parameter",
                    f"{name!r} is not a parameter of this space{where}; "
                    f"parameters: {', '.join(sorted(expected))}",
                )
        for p in present:
            if p.name not in config:
                return Violation("missing-parameter", f"config lacks {p.name!r}")
            if config[p.name] not in p.values or type(config[p.name]) is not type(p.values[0]):
                return Violation(
                    "value-not-allowed",
                    f"{p.name}={config[p.name]!r} is not one of {list(p.values)}",
                )
        for c in self.constraints:
            if not set(c.uses) <= expected:
                continue
            if not c.check(config, limits):
                shown = ", ".join(f"{u}={config[u]}" for u in c.uses)
                return Violation(c.name, f"{c.text} ({shown}; device {limits.name})")
        return None

    def validate(self, config: Mapping[str, Value], limits: DeviceLimits) -> Config:
        """Return ``config`` as a plain dict if valid on ``limits``, else raise ConfigError."""
        v = self.violation(config, limits)
        if v is not None:
            raise ConfigError(f"config breaks {v}")
        return dict(config)

    def iter_valid(self, limits: DeviceLimits) -> Iterator[Config]:
        """Every valid config on ``limits``, in a deterministic (lexicographic) order."""
        present = self.params_for(limits.vendor)
        depth = {p.name: i for i, p in enumerate(present)}
        # Each constraint is checked as soon as its last parameter is set: whole subtrees of the
        # product are skipped, and the order stays that of itertools.product.
        due: list[list[Constraint]] = [[] for _ in present]
        for c in self.constraints:
            if not c.uses:  # a rule of the device alone
                if not c.check({}, limits):
                    return
            elif set(c.uses) <= set(depth):
                due[max(depth[u] for u in c.uses)].append(c)
        config: Config = {}

        def extend(i: int) -> Iterator[Config]:
            if i == len(present):
                yield dict(config)
                return
            for value in present[i].values:
                config[present[i].name] = value
                if all(c.check(config, limits) for c in due[i]):
                    yield from extend(i + 1)
            del config[present[i].name]

        yield from extend(0)

    def enumerate(self, limits: DeviceLimits) -> list[Config]:
        return list(self.iter_valid(limits))

    def count(self, limits: DeviceLimits) -> int:
        return sum(1 for _ in self.iter_valid(limits))

    def parse(self, text: str, vendor: Vendor) -> Config:
        """Parse ``NAME=VALUE,...`` into a config; names and values are checked, constraints not."""
        config: Config = {}
        for item in filter(None, (s.strip() for s in text.split(","))):
            name, sep, raw = item.partition("=")
            if not sep:
                raise ConfigError(f"config item {item!r} is not NAME=VALUE")
            p = self.param(name.strip())
            if not p.applies_to(vendor):
                raise ConfigError(f"parameter {p.name!r} does not exist on {vendor.value} devices")
            config[p.name] = p.coerce(raw)
        return config

    def describe(self) -> dict[str, object]:
        """A JSON-ready description: parameters with their values and kinds, and the constraints."""
        return {
            "parameters": {p.name: list(p.values) for p in self.params},
            "kinds": {p.name: p.kind.value for p in self.params},
            "vendor_only": {
                p.name: sorted(v.value for v in p.vendors) for p in self.params if p.vendors
            },
            "constraints": [{"name": c.name, "rule": c.text} for c in self.constraints],
        }

    def hash(self) -> str:
        """Stable hex digest of the parameters, their values and kinds, and the constraints' text."""
        blob = json.dumps(self.describe(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def config_key(config: Mapping[str, Value]) -> str:
    """Canonical JSON of a config: the same config always gives the same string. Memoised for
    hashable values (a driver keys each config several times per trial)."""
    items = tuple(config.items())
    try:
        return _config_key(items, tuple(map(type, config.values())))
    except TypeError:  # an unhashable value
        return _canonical(config)


@functools.lru_cache(maxsize=8192)
def _config_key(items: tuple[tuple[str, Value], ...], types: tuple[type, ...]) -> str:
    # ``types`` keeps 1, 1.0 and True apart: equal (and hashed alike) as items, not as JSON.
    return _canonical(dict(items))


def _canonical(config: Mapping[str, Value]) -> str:
    return json.dumps(dict(config), sort_keys=True, separators=(",", ":"))


def pow2_range(lo: int, hi: int) -> tuple[int, ...]:
    """Powers of two from ``lo`` to ``hi`` inclusive (both powers of two)."""
    out = []
    v = lo
    while v <= hi:
        out.append(v)
        v *= 2
    return tuple(out)
