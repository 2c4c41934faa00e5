"""The profiler's error type (a WorkerError: the CLI prints it as one line and exits 2)."""

from workers.errors import WorkerError


class ProfileError(WorkerError):
    """A workload, trace or bundle cannot be used as asked (unknown model, bad callable, ...)."""
