"""What serve does to every HTTP exchange, whichever HTTP protocol parses it (its own,
:mod:`snapshotd.server.protocol`, or uvicorn's plain one when that cannot run, see
:func:`snapshotd.server.run.uvicorn_config`).

Invariants:
- a request's head is bounded: its target and each header line at :data:`MAX_LINE` bytes,
  all its lines at :data:`MAX_HEAD`, refused past them with 414 or 431 and the connection
  closed (by serve's protocol as it reads the head; on the plain way, by
  :class:`Served` before the application sees the request, and by h11 with 400 for a head
  still unfinished past :data:`MAX_HEAD`);
- every answer has one ``Date``: its own when it has one (a passed-through answer, the
  origin's), else this server's (uvicorn, run without its own, adds none).
"""

from __future__ import annotations

import time
from collections.abc import MutableMapping
from email.utils import formatdate
from typing import Any

__all__ = [
    "HEAD_SECONDS",
    "MAX_HEAD",
    "MAX_LINE",
    "TOO_LARGE",
    "TOO_SLOW",
    "Served",
    "http_date",
    "line_size",
]

# A request's target and each header line may have this many bytes (nginx's default, from
# its large_client_header_buffers 4 8k), and its head, target and header lines, this many.
MAX_LINE = 8 * 2**10
MAX_HEAD = 32 * 2**10
TOO_LARGE = {
    414: f"Request target longer than {MAX_LINE} bytes\n",
    431: f"Request header line over {MAX_LINE} bytes, or head over {MAX_HEAD}\n",
}

# A request's head, from its first byte to its blank line, is whole within this many
# seconds (Apache's mod_reqtimeout gives 20 to 40; nginx's client_header_timeout 60), so a
# client trickling a head within its bounds cannot hold a connection for ever.
HEAD_SECONDS = 20.0
TOO_SLOW = "Request head not whole within {:g} s\n"

# After a refusal the server ends its side and reads, and drops, what the client still sends,
# this many seconds at most, before it closes (RFC 9112 9.6; nginx's lingering_timeout): a
# client still sending its request reads the refusal, where a close with its bytes unread
# would send a reset that may throw the refusal away.
LINGER_SECONDS = 5.0

_DATE = [0, b""]  # the second, and the Date header's value for it


def http_date() -> bytes:
    """Now, as a Date header's value (made once a second)."""
    now = int(time.time())
    if now != _DATE[0]:
        _DATE[:] = now, formatdate(now, usegmt=True).encode()
    return _DATE[1]  # type: ignore[return-value]


def line_size(name: bytes, value: bytes) -> int:
    """The bytes of a header line as the bounds count them: name, ": ", value, line end."""
    return len(name) + len(value) + 4


def too_large(scope: Any) -> int | None:
    """414 or 431 when a request's head is over its bounds, else None."""
    if len(scope["raw_path"]) + len(scope["query_string"]) + 1 > MAX_LINE:
        return 414
    total = 0
    for name, value in scope["headers"]:
        size = line_size(name, value)
        total += size
        if size > MAX_LINE or total > MAX_HEAD:
            return 431
    return None


class Served:
    """The application, its answers given a Date when they have none; with
    ``bound_heads``, a request whose head is over the bounds refused before it sees it."""

    def __init__(self, app: Any, bound_heads: bool = False) -> None:
        self.app = app
        self.bound_heads = bound_heads

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if self.bound_heads and (status := too_large(scope)) is not None:
            body = TOO_LARGE[status].encode()
            await send({"type": "http.response.start", "status": status, "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", b"%d" % len(body)), (b"connection", b"close"),
                (b"date", http_date()),
            ]})
            await send({"type": "http.response.body", "body": body})
            return None

        async def dated(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                headers = message.get("headers", ())
                if not any(k.lower() == b"date" for k, _ in headers):
                    message = {**message, "headers": [*headers, (b"date", http_date())]}
            await send(message)

        return await self.app(scope, receive, dated)
