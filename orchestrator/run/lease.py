"""A job's lease, held while its owner (a CLI driver or a scheduler) runs it.

:class:`LeaseKeeper` takes the lease on entry (refusing a live one of another owner with
:class:`JobLeased`), renews it from a daemon thread every third of its time to live, and releases
it on exit. Its times are the database's clock (``repository.db_now``), so hosts whose clocks
differ agree on when it expires. Each acquisition raises the lease's epoch: give
:attr:`LeaseKeeper.lease` to the driver, whose ledger checks owner and epoch in every write
transaction (``repository.check_lease``) and raises LeaseLost once another owner took the job
over, the write discarded. If a renewal finds the lease gone or the database stays unreachable
past the time to live, :meth:`LeaseKeeper.lost` turns True: pass it as the driver's ``stop``
hook so the driver stops dispatching at once.
"""

from __future__ import annotations

import os
import secrets
import socket
import threading
import time
from types import TracebackType

from db import Database, Lease, repository
from db.errors import DatabaseError
from orchestrator.errors import JobLeased

#: Longest host name kept in an owner id (the column holds 200 characters).
HOST_CHARS = 150


def default_owner() -> str:
    """``host:pid:random``: unique per process and call, readable in ``tunefleet jobs``."""
    return f"{socket.gethostname()[:HOST_CHARS]}:{os.getpid()}:{secrets.token_hex(4)}"


def leased_message(database: Database, job_id: int) -> str:
    """One line naming who holds job ``job_id``'s lease and until when."""
    with database.session(readonly=True) as s:
        job = repository.get_job(s, job_id)
    until = job.lease_expires_at.isoformat(timespec="seconds") if job.lease_expires_at else "?"
    return (
        f"job {job_id} is being run by {job.lease_owner} (lease until {until}); "
        f"cancel it with `tunefleet cancel {job_id}` or wait until its lease expires"
    )


class LeaseKeeper:
    """Hold job ``job_id``'s lease for ``owner`` while the ``with`` block runs (see module doc)."""

    def __init__(self, database: Database, job_id: int, owner: str, ttl_s: float = 30.0) -> None:
        if ttl_s <= 0:
            raise ValueError(f"ttl_s must be positive, got {ttl_s}")
        self.database = database
        self.job_id = job_id
        self.owner = owner
        self.ttl_s = ttl_s
        self._lease: Lease | None = None
        self._lost = threading.Event()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> LeaseKeeper:
        with self.database.session() as s:
            taken = repository.acquire_lease(s, self.job_id, self.owner, self.ttl_s)
        if taken is None:
            raise JobLeased(leased_message(self.database, self.job_id))
        self._lease = taken
        self._thread = threading.Thread(
            target=self._renew, name=f"lease-{self.job_id}", daemon=True
        )
        self._thread.start()
        return self

    @property
    def lease(self) -> Lease:
        """The lease taken on entry (owner and epoch: what the driver's writes are fenced on)."""
        if self._lease is None:
            raise RuntimeError("the lease keeper was not entered")
        return self._lease

    def lost(self) -> bool:
        """True once the lease is no longer ours (taken over, or not renewable for a ttl)."""
        return self._lost.is_set()

    def _renew(self) -> None:
        renewed = time.monotonic()
        lease = self.lease
        while not self._done.wait(self.ttl_s / 3):
            try:
                held = self.database.write_one(
                    lambda c: repository.renew_lease(c, lease, self.ttl_s)
                )
            except DatabaseError:
                if time.monotonic() - renewed > self.ttl_s:
                    self._lost.set()
                    return
                continue
            if not held:
                self._lost.set()
                return
            renewed = time.monotonic()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        if self._lease is None:
            return
        try:
            with self.database.session() as s:
                repository.release_lease(s, self._lease)
        except DatabaseError:
            if exc is None:
                raise
            # The block's own error is the one to report; the lease expires by itself.
