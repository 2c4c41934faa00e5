"""Workers: device detection and fingerprints, known device classes, the isolated trial runner.

Importing this package (or workers.runner) loads neither torch nor triton; they load in the trial
process, or inside ``detect`` for GPU backends.
"""

from workers.device import Backend, DeviceClass, Fingerprint, detect, normalize_name
from workers.device_table import KnownClass, lookup, parse_class
from workers.errors import DeviceError, RunnerConfigError, UnknownDeviceClass, WorkerError
from workers.measurement import Measurement, Outcome
from workers.runner import RunnerOptions, TrialRequest, TrialRunner

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
