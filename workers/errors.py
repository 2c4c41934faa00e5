"""Exceptions raised by workers at its boundary; each message is one line for the user."""


class WorkerError(Exception):
    """Base class: a device, device class or runner setting is wrong."""


class UnknownDeviceClass(WorkerError):
    """A device-class name or alias is not in the table of known classes."""


class DeviceError(WorkerError):
    """No device of the asked backend is visible, or a fingerprint cannot be read."""


class RunnerConfigError(WorkerError):
    """RunnerOptions hold a value the runner cannot use (a bad timeout, count or backend)."""
