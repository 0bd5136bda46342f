"""serve's HTTP protocol: uvicorn's httptools protocol with two changes.

- Its writes go through :class:`snapshotd.coalesce.TurnWrites` (a connection's writes of one
  turn of the event loop in one system call).
- A request the application can answer at once is answered here, before it becomes an ASGI
  call: when the application has ``answer_at_once(method, path, query, headers, scope)`` and
  it gives the answer (status, headers, body), the answer is written as uvicorn would write
  it and no request cycle or task is made. When it does not, the request goes on to it the
  ASGI way with that ``scope``, in which it may have noted what it found. snapshotd answers
  so a bot's cache hit of a page sent in one piece
  (:meth:`snapshotd.proxy.Proxy.answer_at_once`), which is most of what uvicorn's own work
  per request was.

Invariants:
- only a GET or HEAD without ``Expect: 100-continue`` or an upgrade is asked for, and only
  when no earlier request of the connection is still being answered (pipelined requests are
  answered in order) and the client is reading what it was sent (so a client that sends
  without reading meets uvicorn's flow control, not a growing buffer);
- an answer given at once has the headers uvicorn adds (``date``) and keeps the connection
  as uvicorn would: closed after the answer for HTTP/1.0 or a request that says
  ``Connection: close``, else waiting for the next request under uvicorn's keep-alive
  timeout, which a request going the ASGI way stops;
- anything the application does not answer at once goes to it the ASGI way, as before.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from snapshotd.coalesce import TurnWrites

__all__ = ["HttpProtocol"]

log = logging.getLogger("snapshotd.protocol")

# A body up to this size is copied into one buffer with its head; a larger one is written
# as it is (server CPU per hit, gzip 5 KB: 30.5 us joined, 31.8 apart; identity 40 KB:
# 40.5 joined, 35.8 apart).
JOIN_MAX = 16 * 2**10

AnswerAtOnce = Callable[
    [str, str, str, list[tuple[bytes, bytes]], dict[str, Any]],
    tuple[int, list[tuple[bytes, bytes]], bytes] | None,
]


class _Answered:
    """The request cycle of a request answered at once: complete, as uvicorn checks."""

    response_complete = True
    message_event = asyncio.Event()  # set when the connection is lost; nothing waits on it


_ANSWERED = _Answered()


class HttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol writing through :class:`TurnWrites` and answering what
    the application answers at once (see the module)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._answer_at_once: AnswerAtOnce | None = getattr(self.app, "answer_at_once", None)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.transport = TurnWrites(transport, self.loop)  # type: ignore[assignment]

    def on_headers_complete(self) -> None:
        if self.transport.is_closing():
            # Closed after an answer given at once earlier in this read (HTTP/1.0 with
            # keep-alive asked for): like uvicorn, take no request after it.
            return
        if (
            self._answer_at_once is not None
            and (self.cycle is None or self.cycle.response_complete)
            and not self.flow.write_paused
            and not self.expect_100_continue
            and not self.parser.should_upgrade()
            and self.parser.get_method() in (b"GET", b"HEAD")
            and self._answered()
        ):
            return
        # An answer given at once earlier in the same read may have started the keep-alive
        # timer: this request is under way now.
        self._unset_keepalive_if_required()
        super().on_headers_complete()

    def _answered(self) -> bool:
        """Whether the request was answered at once (written, the connection kept or
        closing); nothing is done when not."""
        assert self._answer_at_once is not None
        try:
            url = httptools.parse_url(self.url)
        except httptools.HttpParserInvalidURLError:
            return False
        try:
            answer = self._answer_at_once(
                self.parser.get_method().decode("ascii"),
                url.path.decode("latin-1"),
                (url.query or b"").decode("latin-1"),
                self.headers,
                self.scope,  # type: ignore[arg-type]
            )
        except Exception as exc:  # the ASGI way answers it, failing open as it does
            log.warning("answering at once failed, the request goes on error=%r", exc)
            return False
        if answer is None:
            return False
        status, headers, body = answer
        keep_alive = self.parser.get_http_version() != "1.0" and self.parser.should_keep_alive()
        head = [STATUS_LINE[status]]
        for name, value in (*self.server_state.default_headers, *headers):
            head += (name, b": ", value, b"\r\n")
        if not keep_alive:
            head.append(b"connection: close\r\n")
        head.append(b"\r\n")
        if len(body) <= JOIN_MAX:
            head.append(body)
            self.transport.write(b"".join(head))
        else:  # not copied: it goes with the head in one writev at the turn's end
            self.transport.write(b"".join(head))
            self.transport.write(body)
        self.cycle = _ANSWERED  # type: ignore[assignment]
        if keep_alive:
            self.on_response_complete()
        else:
            self.server_state.total_requests += 1
            self.transport.close()
        return True
