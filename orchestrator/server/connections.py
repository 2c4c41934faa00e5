"""Connection limits of ``tunefleet serve``: uvicorn's settings and a request-head guard.

uvicorn bounds concurrent connections (``limit_concurrency``: over it, a request gets 503) and
idle keep-alive connections, but not a client that connects and never finishes a request head:
such half-open connections would hold file descriptors and concurrency slots for ever.
:func:`guarded_http` is uvicorn's httptools protocol with a deadline for every request head (from
the connection, or from the first byte of a later request on it) and a bound on its size: a late
head closes the connection, an over-long one gets 431.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ConnectionLimits:
    """``max_connections``: connections served at once (more get 503); ``head_timeout_s``: time
    a client has to send a whole request head; ``max_head_bytes``: its largest size;
    ``keep_alive_s``: how long an idle connection is kept; ``shutdown_grace_s``: how long a
    stopping server waits for open connections (event streams) before closing them."""

    max_connections: int = 500
    head_timeout_s: float = 10.0
    max_head_bytes: int = 64 * 1024
    keep_alive_s: float = 5.0
    shutdown_grace_s: float = 10.0

    def uvicorn_options(self) -> dict[str, Any]:
        """Keyword arguments of ``uvicorn.Config`` that apply these limits."""
        return {
            "http": guarded_http(self.head_timeout_s, self.max_head_bytes),
            "limit_concurrency": self.max_connections,
            "timeout_keep_alive": self.keep_alive_s,
            "timeout_graceful_shutdown": self.shutdown_grace_s,
            "h11_max_incomplete_event_size": self.max_head_bytes,
        }


_TOO_LARGE_BODY = b'{"error":"request head too large","detail":null}'
_TOO_LARGE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
    b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(_TOO_LARGE_BODY), _TOO_LARGE_BODY)
)


def guarded_http(head_timeout_s: float, max_head_bytes: int) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol with a deadline and a size bound on every request head."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class GuardedHttp(HttpToolsProtocol):
        _head_timer: asyncio.TimerHandle | None = None
        _head_bytes = 0
        _in_head = False

        def _start_head(self) -> None:
            self._in_head, self._head_bytes = True, 0
            if self._head_timer is None:
                self._head_timer = self.loop.call_later(head_timeout_s, self._head_late)

        def _end_head(self) -> None:
            self._in_head = False
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_late(self) -> None:
            self._head_timer = None
            if not self.transport.is_closing():
                self.transport.close()

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._start_head()

        def data_received(self, data: bytes) -> None:
            if self._in_head:
                self._head_bytes += len(data)
                if self._head_bytes > max_head_bytes:
                    self._end_head()
                    self.transport.write(_TOO_LARGE)
                    self.transport.close()
                    return
            super().data_received(data)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            if not self._in_head:
                self._start_head()

        def on_headers_complete(self) -> None:
            self._end_head()
            super().on_headers_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._end_head()
            super().connection_lost(exc)

    return GuardedHttp
