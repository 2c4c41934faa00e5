"""The kernels that can be tuned and their search spaces on a device class.

These views need no database: they start fast.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator.app.results import registered_kernel
from orchestrator.app.views import KernelView, SpaceView
from search_spaces.registry import all_specs
from search_spaces.space import DeviceLimits
from workers.device_table import lookup


def list_kernels() -> list[KernelView]:
    """The kernels that can be tuned (built-in and registered through entry points)."""
    return [
        KernelView(
            name=s.name,
            description=s.description,
            problem=tuple(s.schema.describe()),
            usage=s.schema.usage(),
            example=dict(s.example),
        )
        for s in all_specs()
    ]


def _limits_for(device_class: str | None) -> tuple[str, DeviceLimits]:
    if device_class is None:
        from workers.device import detect

        fingerprint = detect("auto")[0]
        return fingerprint.device_class.key, fingerprint.limits()
    known = lookup(device_class)
    return known.name, known.limits


def kernel_space(name: str, device_class: str | None = None) -> SpaceView:
    """``name``'s space on a known device class (None: this machine's first device)."""
    spec = registered_kernel(name)
    class_key, limits = _limits_for(device_class)
    described = spec.space.describe()
    present = {p.name for p in spec.space.params_for(limits.vendor)}
    parameters: Mapping[str, Any] = described["parameters"]  # type: ignore[assignment]
    constraints: Sequence[dict[str, Any]] = described["constraints"]  # type: ignore[assignment]
    return SpaceView(
        kernel=spec.name,
        device_class=class_key,
        parameters={k: v for k, v in parameters.items() if k in present},
        constraints=tuple(constraints),
        default=spec.default_for(limits),
        total=spec.space.total(limits.vendor),
        valid=spec.space.count(limits),
        space_hash=spec.space.hash(),
        version=spec.version_hash(),
    )


__all__ = [
    "kernel_space",
    "list_kernels",
]
