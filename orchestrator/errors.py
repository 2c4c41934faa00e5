"""Exceptions the orchestrator raises at its boundary; each message is one line for the user.

The CLI prints ``error: <message>`` and exits 2 for any :class:`OrchestratorError`.
"""


class Terminated(BaseException):
    """The process got SIGTERM while it drove a job; the job was left queued to resume. Not an
    Exception, so nothing that handles errors swallows it."""


class OrchestratorError(Exception):
    """Base class: a job, its workers or its outputs cannot be handled as asked."""


class JobSpecError(OrchestratorError):
    """A job spec is malformed: unknown field, bad budget, unknown sampler, bad device source."""


class NoWorkersError(OrchestratorError):
    """A job asks for a device class that no worker in the cluster has (or all of them were lost)."""


class JobNotFoundError(OrchestratorError):
    """No job with the given id exists in the database."""


class JobStateError(OrchestratorError):
    """The job is in a state that does not allow the request (e.g. resuming a finished job)."""


class BundleExportError(OrchestratorError):
    """Nothing to export, or the output directory cannot be written."""


class WorkerFailure(OrchestratorError):
    """A worker raised instead of returning a measurement (a bug, not a trial's own failure)."""


class NotFound(OrchestratorError):
    """A job, study, kernel or stored result the request names does not exist (HTTP 404)."""


class PermissionDenied(OrchestratorError):
    """The caller's team may not act on this job (HTTP 403)."""


class Conflict(OrchestratorError):
    """The request conflicts with the job's state, e.g. cancelling a finished job (HTTP 409)."""


class JobLeased(Conflict):
    """Another live owner (a driver or a scheduler) holds the job's lease (HTTP 409)."""


class InvalidRequest(OrchestratorError):
    """A listing's filter or paging value is out of range (HTTP 400)."""


class SchedulerConflict(OrchestratorError):
    """Another scheduler already serves this SQLite database file."""


class Unauthorized(OrchestratorError):
    """A server refused the request's token: none, unknown, revoked or expired (HTTP 401)."""


class ServerError(OrchestratorError):
    """A tunefleet server failed the request, or answered with something the client cannot read."""


class ServerUnavailable(ServerError):
    """A tunefleet server could not be reached, or did not answer in time."""


class NotRemote(OrchestratorError):
    """The command runs on this machine (its device, its Ray) and a server is in effect: it
    refuses rather than fall back to the local database (the CLI: one line, exit 2)."""
