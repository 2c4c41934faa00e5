"""Warm start: the configs a new study asks first, from what the database already holds.

In order: configs measured for this key (kernel version, problem, class, objective) by any job,
fastest first, at most the budget (answered from the database, never re-measured); the spec's
default; the spec's listed configs (a captured kernel's own list); the best configs of the ``WARM_NEIGHBOURS`` nearest problems on this class (distance:
:func:`search_spaces.problem.problem_distance`); the next fastest configs measured for the
nearest one (up to its ``WARM_NEAREST_TOP`` fastest); the best configs of this problem on other
classes. Deduplicated, first place kept.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from db import Objective, TrialOutcome, repository
from search_spaces.problem import Problem, problem_distance, problem_key
from search_spaces.space import Config, DeviceLimits, config_key
from search_spaces.spec import KernelSpec

if TYPE_CHECKING:
    from db import Session

#: Best configs of other problems / classes enqueued as warm start, per source.
WARM_NEIGHBOURS = 5
#: Fastest configs of the nearest problem enqueued as warm start (its best among them).
WARM_NEAREST_TOP = 8


def measured_for_key(
    s: Session, kernel_id: int, pkey: str, class_id: int, objective: Objective
) -> list[tuple[Config, float | None]]:
    """Configs measured for this key by any job (not infra): ok ones fastest first, then the
    rest (time None)."""
    seen: dict[str, tuple[Config, float | None]] = {}
    for row in repository.measured_for_key(s, kernel_id, pkey, class_id, objective):
        value = row.median_ms if row.outcome is TrialOutcome.OK else None
        seen.setdefault(config_key(row.config), (dict(row.config), value))
    return sorted(seen.values(), key=lambda cv: (cv[1] is None, cv[1] or 0.0))


def warm_order(
    problem: Problem,
    default: Config | None,
    bests: Sequence[tuple[Problem, Config]],
    fastest_of: Callable[[Problem], Sequence[Config]],
    measured: Sequence[Config] = (),
    other_classes: Sequence[Config] = (),
    listed: Sequence[Config] = (),
) -> list[Config]:
    """The warm-start order (see the module docstring) from its sources: ``measured`` (this
    key's configs, fastest first), the ``default``, ``listed`` (the spec's own list), ``bests`` (other problems of this class and
    their best config; ties in distance keep this order), ``fastest_of`` (a problem's fastest
    configs, fastest first; asked only for the nearest), ``other_classes`` (this problem's best
    configs on other classes, fastest first). Deduplicated, first place kept."""
    configs = [*measured, *([default] if default is not None else []), *listed]
    near = sorted(
        ((problem_distance(problem, other), other, config) for other, config in bests),
        key=lambda dpc: dpc[0],
    )
    near = [dpc for dpc in near if math.isfinite(dpc[0])]
    configs.extend(c for _, _, c in near[:WARM_NEIGHBOURS])
    if near:
        configs.extend(fastest_of(near[0][1])[:WARM_NEAREST_TOP])
    configs.extend(other_classes[:WARM_NEIGHBOURS])
    return list({config_key(c): dict(c) for c in configs}.values())


def warm_configs(
    s: Session,
    kernel: KernelSpec,
    version: str,
    kernel_id: int,
    problem: Problem,
    pkey: str,
    class_key: str,
    class_id: int,
    limits: DeviceLimits,
    objective: Objective,
    budget: int,
) -> list[Config]:
    """The warm-start configs of one study from the database (see the module docstring)."""
    bests = repository.get_best(s, kernel.name, kernel_version=version, objective=objective)

    def fastest_of(other: Problem) -> list[Config]:
        ranked = measured_for_key(s, kernel_id, problem_key(other), class_id, objective)
        return [c for c, ms in ranked if ms is not None]

    return warm_order(
        problem,
        kernel.default_for(limits),
        [
            (dict(json.loads(b.problem_key)), b.config)
            for b in bests
            if b.device_class_key == class_key and b.problem_key != pkey
        ],
        fastest_of,
        measured=[c for c, _ in measured_for_key(s, kernel_id, pkey, class_id, objective)[:budget]],
        listed=kernel.listed_configs(limits),
        other_classes=[
            b.config
            for b in sorted(
                (b for b in bests if b.problem_key == pkey and b.device_class_key != class_key),
                key=lambda b: b.time_ms,
            )
        ],
    )
