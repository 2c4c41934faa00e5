"""A scripted Optuna sampler for tests of the study loop and the search benchmark."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler
from optuna.study import Study
from optuna.trial import FrozenTrial


class Scripted(BaseSampler):
    """Proposes the given encoded points (Optuna params) in order, then the last one forever:
    a deterministic stand-in for a model, and past its script a stuck one."""

    def __init__(
        self, distributions: Mapping[str, BaseDistribution], points: Sequence[Mapping[str, Any]]
    ) -> None:
        self._distributions = dict(distributions)
        self._points = [dict(p) for p in points]

    def infer_relative_search_space(
        self, study: Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        return dict(self._distributions)

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        return self._points.pop(0) if len(self._points) > 1 else dict(self._points[0])

    def sample_independent(self, *args: Any) -> Any:
        raise AssertionError("every point is given")
