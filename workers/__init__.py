"""Workers: device detection and fingerprints, known device classes, the isolated trial runner.

Importing this package (or workers.runner) loads neither torch nor triton; they load in the trial
process, or inside ``detect`` for GPU backends. Names load on first use (PEP 562), so
``from workers.device_table import lookup`` does not import the trial runner.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workers.device import Backend, DeviceClass, Fingerprint, detect, normalize_name
    from workers.device_table import KnownClass, lookup, parse_class
    from workers.errors import DeviceError, RunnerConfigError, UnknownDeviceClass, WorkerError
    from workers.measurement import Measurement, Outcome
    from workers.runner import RunnerOptions, TrialRequest, TrialRunner

_WHERE: dict[str, str] = {
    "Backend": "workers.device",
    "DeviceClass": "workers.device",
    "DeviceError": "workers.errors",
    "Fingerprint": "workers.device",
    "KnownClass": "workers.device_table",
    "Measurement": "workers.measurement",
    "Outcome": "workers.measurement",
    "RunnerConfigError": "workers.errors",
    "RunnerOptions": "workers.runner",
    "TrialRequest": "workers.runner",
    "TrialRunner": "workers.runner",
    "UnknownDeviceClass": "workers.errors",
    "WorkerError": "workers.errors",
    "detect": "workers.device",
    "lookup": "workers.device_table",
    "normalize_name": "workers.device",
    "parse_class": "workers.device_table",
}


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'workers' has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value
    return value


__all__ = [
    "Backend",
    "DeviceClass",
    "DeviceError",
    "Fingerprint",
    "KnownClass",
    "Measurement",
    "Outcome",
    "RunnerConfigError",
    "RunnerOptions",
    "TrialRequest",
    "TrialRunner",
    "UnknownDeviceClass",
    "WorkerError",
    "detect",
    "lookup",
    "normalize_name",
    "parse_class",
]
