"""serve's HTTP protocol: uvicorn's httptools protocol with two changes.

- Its writes go through :class:`snapshotd.server.batched_writes.TurnWrites` (a connection's writes
  of one turn of the event loop in one system call).
- A request the application can answer at once is answered here, before it becomes an ASGI
  call: the protocol is handed the application's ``answer_at_once(method, path, query,
  headers, scope)`` (:func:`protocol_for`, which serve's :func:`snapshotd.server.run.uvicorn_config`
  calls: whatever wraps the application, the fast path stays), and when it gives the answer
  (status, headers, body), the answer is written as uvicorn would write it and no request
  cycle or task is made. When it does not, the request goes on to it the
  ASGI way with that ``scope``, in which it may have noted what it found. snapshotd answers
  so a bot's cache hit of a page sent in one piece
  (:meth:`snapshotd.proxy.handler.Proxy.answer_at_once`), which is most of what uvicorn's own work
  per request was.
- When the application gives a :class:`snapshotd.proxy.relay.Relay` instead (a GET or HEAD
  without a body passed through to the origin), the relay writes the answer through this
  protocol as it comes, as uvicorn's ``send`` would, and is told when the client takes more
  again or is gone.

It subclasses uvicorn's httptools protocol and uses its parts, which are not uvicorn's public
API: every one is named in :mod:`snapshotd.server.uvicorn_contract`, which serve checks before it
runs this protocol (else it runs uvicorn's plain one).

Invariants:
- only a GET or HEAD without ``Expect: 100-continue`` or an upgrade is asked for, and only
  when no earlier request of the connection is still being answered (pipelined requests are
  answered in order) and the client is reading what it was sent (so a client that sends
  without reading meets uvicorn's flow control, not a growing buffer);
- every answer given here has one ``Date`` (:mod:`snapshotd.server.exchange`): its own when it has
  one (a passed-through answer, the origin's), else this server's;
- an answer given at once, or by a relay, is framed as uvicorn frames it (chunked without a
  ``Content-Length``), and keeps the connection as uvicorn would: closed after the answer
  for HTTP/1.0 or a request that says ``Connection: close``, else waiting for the next
  request under uvicorn's keep-alive timeout, which a request going the ASGI way stops;
- anything the application does not answer at once goes to it the ASGI way, as before;
- a request's head is bounded (:mod:`snapshotd.server.exchange`): its target at :data:`MAX_LINE`
  bytes (else 414), each header line at :data:`MAX_LINE` and all its lines at
  :data:`MAX_HEAD` (else 431), trailers of a chunked body alike, and the connection is
  closed after the refusal (as after any refusal written here: 400, 408, 414, 431, the
  server ends its side first and reads and drops what the client still sends, until the
  client ends its own or :data:`LINGER_SECONDS` pass, so a client still sending reads the
  refusal rather than a reset). While a head is read, bytes are handed to the parser only once
  they end a line (or more than :data:`MAX_LINE` of them, which is a refusal), so a line
  comes to the parser in two pieces at most: what the parser and uvicorn put together of a
  line costs time in proportion to its length however it is trickled, and a client sending
  an endless head is refused within its bounds;
- a request's head is whole within :data:`HEAD_SECONDS` of its first byte, else 408 and the
  connection closed, so a head trickled within its bounds holds no connection for ever.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from snapshotd.proxy.relay import AtOnce, Relay
from snapshotd.server.batched_writes import TurnWrites
from snapshotd.server.exchange import (
    HEAD_SECONDS,
    LINGER_SECONDS,
    MAX_HEAD,
    MAX_LINE,
    TOO_LARGE,
    TOO_SLOW,
    http_date,
    line_size,
)

__all__ = ["HttpProtocol", "protocol_for"]

log = logging.getLogger("snapshotd.server.protocol")

# A body up to this size is copied into one buffer with its head; a larger one is written
# as it is (server CPU per hit, gzip 5 KB: 30.5 us joined, 31.8 apart; identity 40 KB:
# 40.5 joined, 35.8 apart).
JOIN_MAX = 16 * 2**10

AnswerAtOnce = Callable[[str, str, str, list[tuple[bytes, bytes]], dict[str, Any]], AtOnce]


class _Answered:
    """The request cycle of a request answered at once: complete, as uvicorn checks."""

    response_complete = True
    message_event = asyncio.Event()  # set when the connection is lost; nothing waits on it


class _TooLarge(Exception):
    """Raised in a parser callback to stop the parser: the request's head is too large."""

    def __init__(self, status: int) -> None:
        self.status = status


_ANSWERED = _Answered()
_UPGRADE_SAID = False  # whether this process said that upgrades are not proxied


def protocol_for(answer_at_once: AnswerAtOnce | None) -> Callable[..., HttpProtocol]:
    """The protocol uvicorn is to make for each connection (its ``http`` option), handed
    ``answer_at_once`` (None: every request the ASGI way)."""
    return functools.partial(HttpProtocol, answer_at_once=answer_at_once)


class HttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol writing through :class:`TurnWrites` and answering what
    ``answer_at_once`` answers (see the module)."""

    def __init__(
        self, *args: Any, answer_at_once: AnswerAtOnce | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self._answer_at_once = answer_at_once
        # The request a relay is passing through, and the request cycle of the ASGI call
        # under way: each is the protocol's ``cycle`` until a request pipelined behind it
        # takes that place.
        self._relaying: _Relaying | None = None
        self._running: Any = None
        # The parser is between requests or in a head; the bytes of a head line held back
        # until it ends; the bytes of the head parsed; the bytes read since a body's last
        # byte that were not a request's end (chunk lines, trailers).
        self._in_head = True
        self._line_fed = False  # a line's end of the head was handed to the parser
        self._held = bytearray()
        self._head_size = 0
        self._stalled = 0
        # A head's first bytes were parsed, not yet its end; the timer that runs out
        # HEAD_SECONDS after the read that left a head unfinished, unless it is whole by then.
        self._head_begun = False
        self._head_timer: asyncio.TimerHandle | None = None
        # A refusal was written and the server's side ended: what is read now is dropped,
        # until the timer closes the connection (LINGER_SECONDS).
        self._linger_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.transport = TurnWrites(transport, self.loop)  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self._head_done()
        if self._linger_timer is not None:
            self._linger_timer.cancel()
        if self._relaying is not None:
            self._relaying.relay.abort()
        running = self._running
        if running is not None and running is not self.cycle and not running.response_complete:
            # uvicorn tells only its ``cycle``, the last request, that the client is gone;
            # the one being answered must know too (an endless answer would go on).
            running.disconnected = True
            running.message_event.set()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        """uvicorn's, with the head's bounds (see the module)."""
        if self._linger_timer is not None:
            return  # sent after a refusal: dropped
        self._unset_keepalive_if_required()
        if self._in_head:
            held = self._held
            if held or b"\n" not in data:
                held += data
                if b"\n" not in data:
                    if len(held) > MAX_LINE:
                        self._too_large(431 if self._line_fed else 414)
                    else:
                        self._time_head()
                    return
                data = bytes(held)
                held.clear()
            self._line_fed = True  # the request line ends in what is fed now
        else:
            self._stalled += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            if isinstance(exc.__context__, _TooLarge):
                self._too_large(exc.__context__.status)
            else:
                self._invalid()
        except httptools.HttpParserError:
            self._invalid()
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
        else:
            if self._stalled > MAX_LINE:
                self._too_large(431)
            else:
                self._time_head()

    def _invalid(self) -> None:
        """uvicorn's answer to what is not HTTP/1.1: a line in its log, 400, closed."""
        msg = "Invalid HTTP request received."
        self.logger.warning(msg)
        self._refuse(400, msg)

    def _refuse(self, status: int, text: str) -> None:
        """A short ``text/plain`` answer, and the connection closed after it."""
        body = text.encode()
        headers = [(b"content-type", b"text/plain; charset=utf-8"),
                   (b"content-length", b"%d" % len(body))]
        head, _ = self._head(status, headers, "GET", keep_alive=False)
        head.append(body)
        self.transport.write(b"".join(head))
        self._linger()

    def _linger(self) -> None:
        """Close after a refusal as RFC 9112 (9.6) asks: the server's side ends after the
        refusal, and what the client still sends is read and dropped until it ends its own
        side (the transport then closes) or :data:`LINGER_SECONDS` pass. Closed at once when
        something else may still be written (an answer under way) or the transport cannot
        end one side."""
        self._head_done()
        busy = self._relaying is not None or (
            self.cycle is not None and not self.cycle.response_complete
        )
        if busy or self.transport.is_closing() or not self.transport.can_write_eof():
            self.transport.close()
            return
        self.transport.write_eof()
        self._linger_timer = self.loop.call_later(LINGER_SECONDS, self.transport.close)

    def _too_large(self, status: int) -> None:
        """Refuse a request whose head (or trailers) is too large, 414 or 431, and close the
        connection: the refusal is the answer when no other is under way or made."""
        if not self.transport.is_closing():
            log.warning(
                "request refused status=%d client=%s: %s",
                status, (self.client or ("-",))[0], TOO_LARGE[status].strip(),
            )
        if self._in_head and (self.cycle is None or self.cycle.response_complete):
            self._refuse(status, TOO_LARGE[status])
        else:
            self.transport.close()

    def _too_slow(self) -> None:
        """Refuse a request whose head is not whole within its time, 408, and close the
        connection."""
        self._head_timer = None
        if self.transport.is_closing():
            return
        log.warning(
            "request refused status=408 client=%s: head not whole within %g s",
            (self.client or ("-",))[0], HEAD_SECONDS,
        )
        if self.cycle is None or self.cycle.response_complete:
            self._refuse(408, TOO_SLOW.format(HEAD_SECONDS))
        else:
            self.transport.close()

    def _time_head(self) -> None:
        """Start the head's time when what was read leaves a head unfinished: a head read
        whole in one piece, the usual case, costs no timer."""
        if self._head_timer is None and (self._held or self._head_begun):
            self._head_timer = self.loop.call_later(HEAD_SECONDS, self._too_slow)

    def _head_done(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    # Parser callbacks: uvicorn's, counting the head's bytes and where it ends.

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_size = 0
        self._head_begun = True

    def on_url(self, url: bytes) -> None:
        self._head_size += len(url)
        if self._head_size > MAX_LINE:
            raise _TooLarge(414)
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        size = line_size(name, value)
        self._head_size += size
        if size > MAX_LINE or self._head_size > MAX_HEAD:
            raise _TooLarge(431)
        name = name.lower()
        if name == b"expect" and value.lower() == b"100-continue":
            self.expect_100_continue = True
        self.headers.append((name, value))

    def on_body(self, body: bytes) -> None:
        self._stalled = 0
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._in_head = True
        self._line_fed = False
        self._stalled = 0
        super().on_message_complete()

    def on_response_complete(self) -> None:
        if self._running is not None and self._running.response_complete:
            self._running = None  # nor its request's body, for the connection's life
        queued = self.pipeline[-1][0] if self.pipeline else None
        super().on_response_complete()
        if queued is not None and not (self.pipeline and self.pipeline[-1][0] is queued):
            self._running = queued  # started now

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._relaying is not None:
            self._relaying.relay.resume()

    def _unsupported_upgrade_warning(self) -> None:
        """uvicorn's two lines for every upgrade asked for, which advise installing a
        WebSocket library, become one line per process (SPEC 3.2)."""
        global _UPGRADE_SAID
        if not _UPGRADE_SAID:
            _UPGRADE_SAID = True
            log.warning(
                "WebSocket upgrades are not proxied: passed on as plain HTTP requests "
                "(route them to the app before snapshotd)"
            )

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_begun = False
        self._head_done()
        if self.transport.is_closing():
            # Closed after an answer given at once earlier in this read (HTTP/1.0 with
            # keep-alive asked for): like uvicorn, take no request after it.
            return
        # An answer given at once earlier in the same read may have started the keep-alive
        # timer: this request is under way now.
        self._unset_keepalive_if_required()
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
        super().on_headers_complete()
        if not (self.pipeline and self.pipeline[0][0] is self.cycle):
            self._running = self.cycle  # started now, not queued

    def _answered(self) -> bool:
        """Whether the request was answered at once (written, the connection kept or
        closing) or is being passed through by a relay; nothing is done when not."""
        assert self._answer_at_once is not None
        try:
            url = httptools.parse_url(self.url)
        except httptools.HttpParserInvalidURLError:
            return False
        method = self.parser.get_method().decode("ascii")
        # uvicorn records a version other than 1.1 only after this turn.
        self.scope["http_version"] = self.parser.get_http_version()
        try:
            answer = self._answer_at_once(
                method,
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
        keep_alive = self.parser.get_http_version() != "1.0" and self.parser.should_keep_alive()
        if isinstance(answer, Relay):
            self._relaying = _Relaying(self, answer, method, keep_alive)
            self.cycle = self._relaying  # type: ignore[assignment]
            answer.start(self._relaying)
            return True
        status, headers, body = answer
        head, _ = self._head(status, headers, method, keep_alive)
        if len(body) <= JOIN_MAX:
            head.append(body)
            self.transport.write(b"".join(head))
        else:  # not copied: it goes with the head in one writev at the turn's end
            self.transport.write(b"".join(head))
            self.transport.write(body)
        self.cycle = _ANSWERED  # type: ignore[assignment]
        self._complete(keep_alive)
        return True

    def _head(
        self, status: int, headers: list[tuple[bytes, bytes]], method: str, keep_alive: bool
    ) -> tuple[list[bytes], int | None]:
        """An answer's status line and headers, as uvicorn's ``send`` writes them, dated
        when they have no Date, and the length of its body (None: chunked, which the head
        then says)."""
        head = [STATUS_LINE[status]]
        length = None
        dated = False
        for name, value in (*self.server_state.default_headers, *headers):
            name = name.lower()
            if name == b"content-length" and length is None:
                length = int(value)
            elif name == b"date":
                dated = True
            head += (name, b": ", value, b"\r\n")
        if not dated:
            head += (b"date: ", http_date(), b"\r\n")
        if not keep_alive:
            head.append(b"connection: close\r\n")
        if length is None and (method == "HEAD" or status in (204, 304)):
            length = 0
        elif length is None:
            head.append(b"transfer-encoding: chunked\r\n")
        head.append(b"\r\n")
        return head, length

    def _complete(self, keep_alive: bool) -> None:
        """An answer given at once, or by a relay, is whole: the connection waits for the
        next request, or closes."""
        if keep_alive:
            self.on_response_complete()
        else:
            self.server_state.total_requests += 1
            self.transport.close()


class _Relaying:
    """The request cycle of a request a :class:`Relay` passes through: uvicorn's protocol
    reads and sets the attributes of a cycle on it (``keep_alive`` is unset by a shutdown),
    and the relay writes the answer through it (:class:`snapshotd.proxy.relay.Client`)."""

    message_event = _ANSWERED.message_event
    more_body = True
    disconnected = False

    def __init__(self, protocol: HttpProtocol, relay: Relay, method: str, keep_alive: bool):
        self.protocol = protocol
        self.relay = relay
        self.method = method
        self.keep_alive = keep_alive
        self.response_complete = False
        self.left: int | None = 0  # of the body to write; None: chunked

    @property
    def paused(self) -> bool:
        return self.protocol.flow.write_paused

    def start(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        head, self.left = self.protocol._head(status, headers, self.method, self.keep_alive)
        self.protocol.transport.write(b"".join(head))

    def body(self, data: bytes) -> None:
        if self.method == "HEAD":
            return
        if self.left is None:
            self.protocol.transport.write(b"%x\r\n%s\r\n" % (len(data), data))
        else:
            self.left -= len(data)
            self.protocol.transport.write(data)

    def end(self) -> None:
        if self.left is None:
            self.protocol.transport.write(b"0\r\n\r\n")
        elif self.left and self.method != "HEAD":
            self.cut_off()  # not the length its head said: not a whole answer
            return
        self.response_complete = True
        self.protocol._relaying = None
        self.protocol._complete(self.keep_alive)

    def cut_off(self) -> None:
        self.protocol._relaying = None
        self.protocol.transport.close()
