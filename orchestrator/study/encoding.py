"""Optimizer-neutral space -> Optuna distributions, and back.

Ordered parameters (INT, POW2) become an ``IntDistribution`` over the index of their value list,
so samplers see the order (a list of powers of two is already log-spaced in its index); BOOL and
CATEGORICAL parameters become categorical, except with ``numeric_only`` (samplers that need
numbers, such as CMA-ES): there every parameter is an index.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution

from search_spaces.space import Config, DeviceLimits, Param, Space, Value


class Encoding:
    """Maps configs of a space (on one vendor) to Optuna params and back."""

    def __init__(self, space: Space, limits: DeviceLimits, *, numeric_only: bool) -> None:
        self.space, self.limits = space, limits
        self.params: tuple[Param, ...] = space.params_for(limits.vendor)
        self._indexed = {p.name: numeric_only or p.kind.ordered for p in self.params}

    def distributions(self) -> dict[str, BaseDistribution]:
        out: dict[str, BaseDistribution] = {}
        for p in self.params:
            if self._indexed[p.name]:
                out[p.name] = IntDistribution(0, len(p.values) - 1)
            else:
                out[p.name] = CategoricalDistribution(list(p.values))
        return out

    def grid(self) -> dict[str, list[Any]]:
        """Every encoded value of every parameter (for the grid sampler)."""
        return {
            p.name: list(range(len(p.values))) if self._indexed[p.name] else list(p.values)
            for p in self.params
        }

    def decode(self, params: Mapping[str, Any]) -> Config:
        config: Config = {}
        for p in self.params:
            raw = params[p.name]
            config[p.name] = p.values[int(raw)] if self._indexed[p.name] else raw
        return config

    def valid_params(self) -> list[dict[str, Any]]:
        """The Optuna params of every valid config of the space on the device."""
        out = (self.encode(c) for c in valid_configs(self.space, self.limits))
        return [p for p in out if p is not None]

    def valid_positions(self) -> np.ndarray:
        """Every valid config of the space on the device as a row of value indices (column
        ``j``: the index of the config's value in ``self.params[j].values``), which is each
        parameter's position in its distribution. Cached per (space, limits) for the process,
        read-only: every study of a kernel on a device shares one array."""
        return _valid_positions(self.space, self.limits)

    def encode(self, config: Mapping[str, Value]) -> dict[str, Any] | None:
        """Optuna params for ``config``, or None if it has a value outside the space."""
        out: dict[str, Any] = {}
        for p in self.params:
            value = config.get(p.name)
            if value not in p.values or type(value) is not type(p.values[0]):
                return None
            out[p.name] = p.values.index(value) if self._indexed[p.name] else value
        return out


@functools.lru_cache(maxsize=16)
def valid_configs(space: Space, limits: DeviceLimits) -> tuple[Config, ...]:
    """Every valid config of ``space`` on ``limits`` (cached: do not mutate them)."""
    return tuple(space.iter_valid(limits))


@functools.lru_cache(maxsize=16)
def _valid_positions(space: Space, limits: DeviceLimits) -> np.ndarray:
    params = space.params_for(limits.vendor)
    index = [{(type(v), v): i for i, v in enumerate(p.values)} for p in params]
    rows = [
        [index[j][type(c[p.name]), c[p.name]] for j, p in enumerate(params)]
        for c in valid_configs(space, limits)
    ]
    out = np.array(rows, dtype=np.int64).reshape(-1, len(params))
    out.setflags(write=False)
    return out
