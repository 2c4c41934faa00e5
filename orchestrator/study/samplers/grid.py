"""Optuna's grid sampler for ask/tell studies."""

from __future__ import annotations

from collections.abc import Sequence

import optuna
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState


class AskTellGridSampler(optuna.samplers.GridSampler):
    """Optuna's GridSampler without its stop request once the grid is used up: ``Study.stop``
    raises outside ``optimize``, and the driver ends a study itself when every valid config is
    known."""

    def after_trial(
        self,
        study: Study,
        trial: FrozenTrial,
        state: TrialState,
        values: Sequence[float] | None,
    ) -> None:
        return None
