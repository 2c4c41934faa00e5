"""ASGI middleware that refuses a request before any handler sees it.

* :class:`PathGuard`: a path or query string that holds ``..``, a backslash or a NUL byte, in plain,
  percent-encoded or double-encoded form, gets 400 (no name of ours contains them).
* :class:`BodyLimit`: a body over ``max_bytes`` (declared by Content-Length or sent in chunks) gets
  413; the body is read before the handler runs, so nothing is half-processed.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from orchestrator.server.errors import error_response

MAX_BODY_BYTES = 1 << 20
_DECODE_ROUNDS = 4
_FORBIDDEN = ("..", "\\", "\x00")


def _decoded(raw: str) -> str:
    """``raw`` percent-decoded until it stops changing (at most a few rounds)."""
    text = raw
    for _ in range(_DECODE_ROUNDS):
        decoded = unquote(text)
        if decoded == text:
            break
        text = decoded
    return text


def suspicious(raw_path: str, query: str) -> str | None:
    """What is wrong with a request target, or None if it holds no traversal form."""
    for part, where in ((raw_path, "path"), (query, "query")):
        decoded = _decoded(part)
        for bad in _FORBIDDEN:
            if bad in decoded:
                return f"the {where} holds {bad!r} (in some encoding); names may not"
    return None


class PathGuard:
    """Answer 400 to a request whose path or query holds a traversal form."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            raw = scope.get("raw_path") or scope["path"].encode()
            problem = suspicious(
                raw.decode("latin-1"), scope.get("query_string", b"").decode("latin-1")
            )
            if problem is not None:
                await error_response(400, f"bad request target: {problem}")(scope, receive, send)
                return
        await self.app(scope, receive, send)


class BodyLimit:
    """Answer 413 to a request body over ``max_bytes``; pass the (buffered) body on otherwise."""

    def __init__(self, app: ASGIApp, max_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    def _too_large(self) -> Any:
        return error_response(
            413, f"request body too large; send at most {self.max_bytes} bytes", self.max_bytes
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        declared = headers.get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await self._too_large()(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._too_large()(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
