"""A person's request without a body passed through to the origin with callbacks only.

:meth:`snapshotd.proxy.passthrough.Upstream.forward` is the pass-through as an ASGI call: a task per
request, awaits for the origin's head and each piece of its body, a message per piece. A
:class:`Relay` does the same exchange from the protocols' callbacks, with nothing awaited:
the request is written to a kept-alive origin connection (:mod:`snapshotd.net.http1`) from the
client's protocol callback, and each piece the origin's connection parses is handed to the
client as it comes. serve's HTTP protocol (:mod:`snapshotd.server.protocol`) runs one for a GET or
HEAD that :meth:`snapshotd.proxy.handler.Proxy.answer_at_once` passes through; requests with a body
go the ASGI way.

Invariants, the same as the ASGI way's (:mod:`snapshotd.proxy.passthrough`):
- the request's head is the one :func:`~snapshotd.proxy.passthrough.request_head` builds, framed as
  a request without a body is (:func:`~snapshotd.proxy.passthrough.no_body_framing`), the answer's
  headers the ones :func:`~snapshotd.proxy.passthrough.response_headers` keeps; which requests a
  relay takes is :func:`~snapshotd.proxy.passthrough.relay_target`'s to say;
- an origin that cannot be reached, or closes or fails before the answer's head, is a 502
  page, except that a request is asked once more on a new connection when
  :func:`~snapshotd.proxy.passthrough.may_ask_again` says so; one that fails after it leaves the
  answer cut off;
- waiting on the origin is bounded by :data:`snapshotd.net.http1.READ_TIMEOUT` from the last
  byte heard, not counting the time the client was not taking the answer;
- a client that does not take the answer holds the origin back: nothing is handed to it
  while it is paused, and the origin's connection stops being read once it holds
  :data:`snapshotd.net.http1.HIGH_WATER` bytes;
- a client that goes away ends the exchange: the origin's connection is closed, not reused.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from starlette.types import Scope

from snapshotd.http_text.urls import origin_parts
from snapshotd.net import http1
from snapshotd.net.http1 import Connection, OriginError, Pool
from snapshotd.proxy.passthrough import (
    BAD_GATEWAY_PAGE,
    bad_gateway_head,
    log_origin_failed,
    log_stream_broke,
    may_ask_again,
    no_body_framing,
    request_head,
    response_headers,
)

__all__ = ["AtOnce", "Client", "Relay"]


class Client(Protocol):
    """Where a relay's answer goes: the client's connection, writing as uvicorn's ``send``
    would."""

    @property
    def paused(self) -> bool:
        """Whether the client is not taking more now; :meth:`Relay.resume` follows."""

    def start(self, status: int, headers: list[tuple[bytes, bytes]]) -> None: ...

    def body(self, data: bytes) -> None: ...

    def end(self) -> None:
        """The answer is whole."""

    def cut_off(self) -> None:
        """The answer broke off after its head: the connection is dropped."""


class Relay:
    """One request passed through (see the module): made by the application for the
    protocol, which calls :meth:`start`, :meth:`resume` when the client takes more again
    (at any time), and :meth:`abort` when the client is gone."""

    def __init__(self, pool: Pool, origin: str, method: str, target: bytes, scope: Scope):
        self.pool = pool
        self.origin = origin
        self.method = method
        self.scheme, self.host, self.port, authority = origin_parts(origin)
        self.head = request_head(method, target, authority, scope, no_body_framing(method))
        self.client: Client | None = None
        self.conn: Connection | None = None
        self.started = False  # the answer's head went to the client
        self.ended = False
        # The connecting task, held: the event loop keeps only a weak reference to it.
        self._connecting: asyncio.Future[Connection] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._heard = 0.0  # when the origin was last heard from, in the loop's time

    def start(self, client: Client) -> None:
        self.client = client
        conn = self.pool.idle(self.scheme, self.host, self.port)
        if conn is None:
            self._connect()
        else:
            self._ask(conn)

    def resume(self) -> None:
        """The client takes more again: hand it what the origin sent. The origin's time
        to send more starts again, as the client was the one waited on."""
        if self.conn is not None:
            self._heard = self.conn.loop.time()
        self._pass_on()

    def _pass_on(self) -> None:
        """Hand the client what the origin sent, as far as it takes it."""
        conn, client = self.conn, self.client
        if self.ended or conn is None:  # over, or still connecting
            return
        assert client is not None
        try:
            if not self.started:
                if not conn.head_ready():
                    return
                self.started = True
                client.start(conn.status, response_headers(conn.status, conn.headers))
            if client.paused:
                return
            data = conn.take()
        except OriginError as exc:
            self._failed(exc)
            return
        if data:
            client.body(data)
        if conn.finished:
            self._end(conn)
            client.end()

    def abort(self) -> None:
        """The client is gone: the exchange ends, and its connection is not reused."""
        if not self.ended:
            self._end(self.conn, reuse=False)

    def _connect(self) -> None:
        self._connecting = asyncio.ensure_future(
            self.pool.connect(self.scheme, self.host, self.port, fresh=True)
        )
        self._connecting.add_done_callback(self._connected)

    def _connected(self, connecting: asyncio.Future[Connection]) -> None:
        self._connecting = None
        if self.ended:  # the client left meanwhile
            if not connecting.cancelled() and connecting.exception() is None:
                connecting.result().close()
        elif connecting.cancelled():  # the loop is stopping
            self._end(None)
            assert self.client is not None
            self.client.cut_off()
        elif (exc := connecting.exception()) is not None:
            self._failed(exc)
        else:
            self._ask(connecting.result())

    def _ask(self, conn: Connection) -> None:
        self.conn = conn
        conn.begin(head=self.method == "HEAD")
        conn.listener = self._heard_from
        try:
            conn.write(self.head, end=True)
        except OriginError as exc:
            self._failed(exc)
            return
        self._heard = conn.loop.time()
        self._timer = conn.loop.call_later(http1.READ_TIMEOUT, self._check_heard)

    def _heard_from(self) -> None:
        """The origin's connection read or closed."""
        assert self.conn is not None
        self._heard = self.conn.loop.time()
        self._pass_on()

    def _check_heard(self) -> None:
        """At most :data:`~snapshotd.net.http1.READ_TIMEOUT` after the origin was last heard
        from: give up on it if it still is silent."""
        conn, client = self.conn, self.client
        assert conn is not None and client is not None
        now = conn.loop.time()
        if client.paused:
            self._heard = now  # the origin waits on the client, not the other way
        silent = now - self._heard
        if silent < http1.READ_TIMEOUT:
            self._timer = conn.loop.call_later(http1.READ_TIMEOUT - silent, self._check_heard)
        else:
            self._timer = None
            conn.time_out()  # fails the connection, which calls back

    def _failed(self, exc: BaseException) -> None:
        client, conn = self.client, self.conn
        assert client is not None
        if self.started:
            log_stream_broke(self.origin, exc)
            self._end(conn)
            client.cut_off()
        elif may_ask_again(exc, conn, has_body=False):
            assert conn is not None
            self._let_go(conn, reuse=False)
            self.conn = None
            self._connect()
        else:
            log_origin_failed(self.origin, exc)
            self._end(conn)
            self.started = True
            client.start(502, bad_gateway_head())
            client.body(BAD_GATEWAY_PAGE)
            client.end()

    def _end(self, conn: Connection | None, reuse: bool = True) -> None:
        self.ended = True
        if conn is not None:
            self._let_go(conn, reuse)

    def _let_go(self, conn: Connection, reuse: bool) -> None:
        """The connection's exchange is over: back to the pool (which keeps it only when it
        can serve another), or closed."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        conn.listener = None
        if reuse:
            self.pool.release(conn)
        else:
            conn.close()


# What an application's ``answer_at_once`` gives serve's HTTP protocol: the whole answer
# (status, headers, body), a relay passing the request through, or None (the ASGI way).
AtOnce = tuple[int, list[tuple[bytes, bytes]], bytes] | Relay | None
