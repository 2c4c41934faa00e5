"""Deployment-side dispatch: launch what a bundle decided for a problem (stdlib only at import).

:func:`launcher_for` turns a :class:`~search_spaces.bundle.Decision` into the callable a
deployment runs: the spec's vendor launcher (``make_vendor_launcher``) where the decision is
``vendor`` and the spec names that path for the problem (``vendor_paths``), else the spec's Triton
launcher with the decision's config (the bundle's best Triton config; the default where no entry
fits). A vendor decision the spec cannot follow (a path it does not name, say from a bundle of a
newer spec) launches that Triton config instead, and the returned decision says so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from search_spaces.bundle import Bundle, Decision

if TYPE_CHECKING:
    from search_spaces.spec import Inputs, KernelSpec, Launcher


def launcher_for(
    spec: KernelSpec, bundle: Bundle, problem: Mapping[str, Any], inputs: Inputs
) -> tuple[Launcher, Decision]:
    """``(launcher, decision)`` for ``problem`` on ``inputs`` (built for that problem): the
    launcher writes ``inputs["out"]`` as the decided backend computes it; ``decision`` is what it
    follows (:meth:`Bundle.decide`'s, with ``backend`` ``triton`` where the spec has no such
    vendor path). Raises what the spec's launcher factory raises."""
    decision = bundle.decide(problem)
    vendor = decision.vendor
    if decision.backend == "vendor" and vendor and vendor in spec.vendor_paths(dict(problem)):
        return spec.make_vendor_launcher(inputs, vendor), decision
    if decision.backend != "triton":
        decision = dataclasses.replace(decision, backend="triton")
    return spec.make_launcher(inputs, dict(decision.config)), decision
