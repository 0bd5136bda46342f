"""The pass-through on a scripted origin (``tests.scripted``), without sockets: every kind of
origin answer the loopback tests check (``tests.test_relay``'s ANSWERS, and more), read
whole, byte by byte and cut in two at each point

- by an origin connection (:class:`snapshotd.net.http1.Connection`), for a GET and a HEAD;
- by both ways of passing a request through, side by side: a :class:`snapshotd.proxy.relay.Relay`
  and :meth:`snapshotd.proxy.passthrough.Upstream.forward` (the ASGI way);
- through serve's HTTP protocol to a client connection the test plays, HTTP/1.1 and 1.0,
  the same bytes both ways, read back by h11 (the answer whole and byte by byte only);

and the relay's callbacks against a client the test plays (a connection reused, the retry
once, no connection, a paused client, a client leaving). The loopback tests stay the
end-to-end proof; these run each case in milliseconds, and wait on no clock."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import MutableMapping
from typing import Any

import h11
import pytest
from uvicorn.server import ServerState

from snapshotd.net import http1
from snapshotd.net.http1 import OriginError, Pool
from snapshotd.proxy.passthrough import BAD_GATEWAY_PAGE, Upstream, bad_gateway_head, request_target
from snapshotd.proxy.relay import Relay
from snapshotd.server.run import uvicorn_config
from tests.scripted import ClientTransport, ScriptedOrigin, Split, at, byte_by_byte, every, whole
from tests.test_http1 import ok
from tests.test_relay import ANSWERS, CASES

ORIGIN = "http://127.0.0.1:1"  # never connected to: the scripted origin stands in for it
LARGE = bytes(range(256)) * 4096

# More answers than the loopback tests', read by path like theirs.
MORE = {
    b"/http10": b"HTTP/1.0 200 OK\r\n\r\nold style",
    b"/http10-length": b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nold",
    b"/close-length": ok(b"bye", b"Connection: close\r\n"),
    b"/not-modified-bare": b"HTTP/1.1 304 Not Modified\r\nETag: \"y\"\r\n\r\n",
    b"/trailers": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"5;ext=1\r\nhello\r\n0\r\nX-Trailer: t\r\n\r\n",
    b"/switching": b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
    b"Connection: Upgrade\r\n\r\n",
    b"/unasked": ok(b"asked") + ok(b"unasked"),
    # Framed two ways, or by two lengths: which one the origin meant cannot be told.
    b"/length-and-chunked": b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    b"/two-lengths": b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 5\r\n\r\nhello",
    # Trailers past the head's bound, after the head went out.
    b"/long-trailer": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"
    b"0\r\nX-Long: " + b"t" * http1.MAX_HEAD + b"\r\n\r\n",
}
EVERY = {**ANSWERS, **MORE}
CL = b"Content-Length"
# What a person gets for each, either way: its status; the origin's headers sent on (none
# hop-by-hop, none the origin's Connection names, none with a control character, no length
# on a 204 or 304, no interim answer's nor a trailer); the body; and whether the answer ends
# whole or is cut off. And how the origin's connection ends: kept for another exchange, not
# kept, or broken off after the head (an answer that fails before it is a 502 page).
EXPECTED: dict[bytes, tuple[int, list[tuple[bytes, bytes]], bytes, str, str]] = {
    b"/length": (
        200, [(CL, b"5"), (b"X-Mixed-Case", b"Kept"), (b"Set-Cookie", b"a=1"),
              (b"Set-Cookie", b"b=2")], b"hello", "end", "kept",
    ),
    b"/chunked": (200, [(b"Content-Type", b"text/plain")], b"hello, world", "end", "kept"),
    b"/until-close": (200, [], b"all until the end", "end", "not kept"),
    b"/hop": (200, [(CL, b"3"), (b"X-Public", b"yes")], b"hop", "end", "kept"),
    b"/no-content": (204, [(b"X-A", b"1")], b"", "end", "kept"),
    b"/not-modified": (304, [(b"ETag", b'"x"')], b"", "end", "kept"),
    b"/early-hints": (200, [(CL, b"5")], b"after", "end", "kept"),
    b"/control": (200, [(CL, b"3"), (b"X-Good", b"c")], b"ctl", "end", "kept"),
    b"/status": (502, bad_gateway_head(), BAD_GATEWAY_PAGE, "end", "OriginError"),
    b"/teapot": (418, [(CL, b"3")], b"tea", "end", "kept"),
    b"/large": (200, [(CL, b"1048576")], LARGE, "end", "kept"),
    b"/cut": (200, [(CL, b"100")], b"only part", "cut off", "broke"),
    b"/closed": (502, bad_gateway_head(), BAD_GATEWAY_PAGE, "end", "OriginClosed"),
    b"/http10": (200, [], b"old style", "end", "not kept"),
    b"/http10-length": (200, [(CL, b"3")], b"old", "end", "not kept"),
    b"/close-length": (200, [(CL, b"3")], b"bye", "end", "not kept"),
    b"/not-modified-bare": (304, [(b"ETag", b'"y"')], b"", "end", "kept"),
    b"/trailers": (200, [], b"hello", "end", "kept"),
    b"/switching": (502, bad_gateway_head(), BAD_GATEWAY_PAGE, "end", "OriginError"),
    b"/unasked": (200, [(CL, b"5")], b"asked", "end", "not kept"),
    b"/length-and-chunked": (502, bad_gateway_head(), BAD_GATEWAY_PAGE, "end", "OriginError"),
    b"/two-lengths": (502, bad_gateway_head(), BAD_GATEWAY_PAGE, "end", "OriginError"),
    b"/long-trailer": (200, [], b"hello", "cut off", "broke"),
}
HEADERS = [
    (b"host", b"site.test"), (b"accept", b"*/*"), (b"x-forwarded-for", b"203.0.113.9"),
]


def splits(answer: bytes) -> list[Split]:
    """The answer whole, byte by byte, and in two pieces cut at each point; one larger than
    a few KiB in pieces of 1 and 16 KiB and cut at each point of its head instead."""
    if len(answer) <= 4096:
        return [whole, byte_by_byte, *(at(i) for i in range(1, len(answer)))]
    return [whole, every(1024), every(16384), *(at(i) for i in range(1, 128))]


def script_of(answers: dict[bytes, bytes]) -> Any:
    def script(conn: int, index: int, request: bytes) -> bytes | None:
        return answers[request.split(b" ", 2)[1].split(b"?")[0]] or None

    return script


def origin_headers(answer: bytes) -> list[tuple[bytes, bytes]]:
    """The header lines of the answer's final (not interim) head, as the origin wrote them,
    read without llhttp."""
    head = answer
    while head.startswith((b"HTTP/1.1 1", b"HTTP/1.0 1")) and not head.startswith(
        b"HTTP/1.1 101"
    ):
        head = head.split(b"\r\n\r\n", 1)[1]
    lines = head.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]
    return [(name, value) for name, value in (line.split(b": ", 1) for line in lines)]


# The origin's connection.


async def exchange(origin: ScriptedOrigin, path: bytes, method: str = "GET") -> tuple[Any, ...]:
    """One exchange on a new connection of a pool: the status, the headers and the body
    read, and how it ended: "kept" (the connection could serve another), "not kept", "broke"
    (failed after the head), or the error's name (before it)."""
    pool = Pool()
    conn = await pool.connect("http", "127.0.0.1", 1)
    conn.begin(head=method == "HEAD")
    conn.write(b"%s %s HTTP/1.1\r\nhost: 127.0.0.1:1\r\n\r\n" % (method.encode(), path), end=True)
    try:
        status, headers = await conn.response()
    except OriginError as exc:
        return None, None, None, type(exc).__name__
    body = b""
    try:
        while data := await conn.read():
            body += data
    except OriginError:
        return status, list(headers), body, "broke"
    await origin.settle()  # what the origin sent after the answer, and its close, are read
    ending = "kept" if conn.reusable else "not kept"
    pool.release(conn)
    pool.close()
    return status, list(headers), body, ending


@pytest.mark.parametrize("path", list(EVERY))
async def test_a_connection_reads_each_answer_alike_in_whatever_pieces_it_comes(
    path: bytes,
) -> None:
    """The status, headers as sent, body, and whether the connection may serve another
    exchange, the same for every split of the answer, and as expected."""
    status, _, body, _, ending = EXPECTED[path]
    if ending in ("OriginError", "OriginClosed"):
        expected: tuple[Any, ...] = (None, None, None, ending)
    else:
        expected = (status, origin_headers(EVERY[path]), body, ending)
    for split in splits(EVERY[path]):
        origin = ScriptedOrigin(script_of(EVERY), split)
        with origin.installed():
            got = await exchange(origin, path)
        assert got == expected, split.__name__


@pytest.mark.parametrize("path", list(EVERY))
async def test_a_connection_ends_a_head_answer_at_its_headers_and_does_not_keep_it(
    path: bytes,
) -> None:
    """A HEAD's answer has no body, whatever its headers say (llhttp would wait for the
    body of its length): it ends with its head, and the connection is not kept."""
    status, _, _, _, ending = EXPECTED[path]
    if ending in ("OriginError", "OriginClosed"):
        expected: tuple[Any, ...] = (None, None, None, ending)
    else:
        expected = (status, origin_headers(EVERY[path]), b"", "not kept")
    for split in splits(EVERY[path]):
        origin = ScriptedOrigin(script_of(EVERY), split)
        with origin.installed():
            got = await exchange(origin, path, "HEAD")
        assert got == expected, split.__name__


# Both ways of passing a request through.


class Client:
    """A relay's client (:class:`snapshotd.proxy.relay.Client`) that records what it is given,
    and can say it is paused."""

    def __init__(self) -> None:
        self.paused = False
        self.status: int | None = None
        self.headers: list[tuple[bytes, bytes]] = []
        self.received = b""  # the body
        self.ending = ""
        self.done = asyncio.Event()

    def start(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        assert self.status is None and not self.ending
        self.status, self.headers = status, headers

    def body(self, data: bytes) -> None:
        assert self.status is not None and not self.ending and not self.paused
        self.received += data

    def end(self) -> None:
        self.ending = "end"
        self.done.set()

    def cut_off(self) -> None:
        self.ending = "cut off"
        self.done.set()

    def outcome(self) -> tuple[Any, ...]:
        return self.status, self.headers, self.received, self.ending


def scope(method: str, path: bytes) -> dict[str, Any]:
    return {
        "type": "http", "method": method, "scheme": "http", "path": path.decode(),
        "raw_path": path, "query_string": b"q=1", "headers": HEADERS,
        "client": ("127.0.0.1", 5000),
    }


async def relayed(pool: Pool, method: str, path: bytes) -> tuple[Any, ...]:
    """A relay's answer, as its client is given it: status, headers, body, how it ended."""
    client = Client()
    Relay(pool, ORIGIN, method, path + b"?q=1", scope(method, path)).start(client)
    await asyncio.wait_for(client.done.wait(), 5)
    return client.outcome()


async def the_asgi_way(upstream: Upstream, method: str, path: bytes) -> tuple[Any, ...]:
    """``Upstream.forward``'s answer, as the server is sent it, alike."""
    sent: list[MutableMapping[str, Any]] = []
    asked = [{"type": "http.request", "body": b"", "more_body": False}]

    async def receive() -> dict[str, Any]:
        if asked:
            return asked.pop()
        await asyncio.Event().wait()  # as the server does until the client leaves
        raise AssertionError("unreachable")

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    status = await asyncio.wait_for(upstream.forward(ORIGIN, scope(method, path), receive, send), 5)
    assert sent[0]["status"] == status
    ending = "cut off" if sent[-1].get("more_body") else "end"
    return status, sent[0]["headers"], b"".join(m.get("body", b"") for m in sent[1:]), ending


@pytest.mark.parametrize("method", ["GET", "HEAD"])
@pytest.mark.parametrize("path", list(EVERY))
async def test_both_ways_ask_the_origin_and_answer_the_client_alike_in_whatever_pieces(
    path: bytes, method: str
) -> None:
    """Each answer, in each split, passed through by a relay and the ASGI way: the same
    request at the origin (X-Forwarded-* included), the same status, headers sent on, body
    and ending to the client, as expected; and the origin's connection kept for the next
    request only when it can serve one."""
    status, headers, body, ending, kept = EXPECTED[path]
    if method == "HEAD" and status != 502:
        body, ending, kept = b"", "end", "not kept"
    for split in splits(EVERY[path]):
        origin = ScriptedOrigin(script_of(EVERY), split)
        relay_pool, upstream = Pool(), Upstream(Pool())
        with origin.installed():
            got = [
                await relayed(relay_pool, method, path),
                await the_asgi_way(upstream, method, path),
            ]
            await origin.settle()
        assert got == [(status, headers, body, ending)] * 2, split.__name__
        reused = [p.idle("http", "127.0.0.1", 1) is not None for p in (relay_pool, upstream.pool)]
        assert reused == [kept == "kept"] * 2, split.__name__
        relayed_asked, asgi_asked = origin.requests
        assert relayed_asked == asgi_asked and origin.connections == 2
        assert relayed_asked.startswith(b"%s %s?q=1 HTTP/1.1\r\nhost: 127.0.0.1:1\r\n" % (
            method.encode(), path
        ))
        assert b"\r\naccept: */*\r\n" in relayed_asked
        assert b"\r\nx-forwarded-for: 203.0.113.9, 127.0.0.1\r\n" in relayed_asked
        assert b"\r\nx-forwarded-host: site.test\r\n" in relayed_asked
        relay_pool.close()
        upstream.pool.close()


@pytest.mark.parametrize("size", [1024, 16384, 65536])
async def test_an_endless_trailer_line_cuts_the_answer_off_at_the_heads_bound(size: int) -> None:
    """Trailers come after the head went out, and are held whole until their line ends: one
    that never ends (the origin says no more, nor closes) is read no further than the head's
    bound, and the answer is cut off, both ways."""
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-Long: "
    answer = head + b"t" * (4 * http1.MAX_HEAD)
    origin = ScriptedOrigin(lambda conn, index, request: answer, every(size))
    with origin.installed():
        got = [await relayed(Pool(), "GET", b"/"), await the_asgi_way(Upstream(), "GET", b"/")]
        await origin.settle()
    assert got == [(200, [], b"hello", "cut off")] * 2
    for transport in origin.transports:
        assert transport.aborted and transport.outbox  # not read to its end
        assert transport.delivered <= len(head) + http1.MAX_HEAD + 2 * size


# The relay's callbacks, against a client the test plays.


async def test_one_origin_connection_serves_relay_after_relay_and_the_asgi_way() -> None:
    origin = ScriptedOrigin(lambda conn, index, request: ok(b"answer %d" % index), byte_by_byte)
    pool = Pool()
    with origin.installed():
        got = [(await relayed(pool, "GET", b"/"))[2] for _ in range(3)]
        got.append((await the_asgi_way(Upstream(pool), "GET", b"/"))[2])
    assert got == [b"answer 0", b"answer 1", b"answer 2", b"answer 3"]
    assert origin.connections == pool.opened == 1


async def test_a_kept_alive_connection_the_origin_closed_is_asked_again_once_without_a_body(
) -> None:
    """The origin closes a kept-alive connection as the next request comes (its keep-alive
    timeout): a GET is asked again on a new connection, by a relay and the ASGI way alike; a
    POST, whose body may have been taken, gets the 502 page; a new connection closed is not
    asked again."""

    def script(conn: int, index: int, request: bytes) -> bytes | None:
        return ok(b"answer %d" % conn) if index == 0 and conn < 4 else None

    origin = ScriptedOrigin(script)
    pool = Pool()
    upstream = Upstream(pool)
    with origin.installed():
        assert (await relayed(pool, "GET", b"/"))[2] == b"answer 0"
        assert (await relayed(pool, "GET", b"/"))[2] == b"answer 1"  # conn 0 closed
        assert (await the_asgi_way(upstream, "GET", b"/"))[2] == b"answer 2"  # conn 1 closed
        assert origin.connections == 3
        sent: list[MutableMapping[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"x", "more_body": False}

        async def send(message: MutableMapping[str, Any]) -> None:
            sent.append(message)

        post = {**scope("POST", b"/"), "headers": [*HEADERS, (b"content-length", b"1")]}
        assert await upstream.forward(ORIGIN, post, receive, send) == 502  # conn 2 closed
        assert origin.connections == 3  # the POST was not sent again
        assert (await relayed(pool, "GET", b"/"))[2] == b"answer 3"  # a new one, conn 3
        # Conn 3 closed as it was taken, then conn 4 closed at once: asked twice, no more.
        assert (await relayed(pool, "GET", b"/"))[:2] == (502, bad_gateway_head())
    assert origin.connections == 5


async def test_an_origin_that_cannot_be_reached_is_a_502_page_and_one_line_both_ways(
    caplog,
) -> None:
    origin = ScriptedOrigin(lambda conn, index, request: ok(), refuse=True)
    with origin.installed(), caplog.at_level(logging.WARNING, "snapshotd.proxy.passthrough"):
        got = [await relayed(Pool(), "GET", b"/"), await the_asgi_way(Upstream(), "GET", b"/")]
    assert got == [(502, bad_gateway_head(), BAD_GATEWAY_PAGE, "end")] * 2
    assert [r.getMessage() for r in caplog.records] == [
        f"origin failed origin={ORIGIN} error=OriginError: cannot connect: Connection refused"
    ] * 2
    assert origin.hosts == [("127.0.0.1", 1)] * 2


async def test_a_client_that_does_not_take_the_answer_holds_the_origin_back() -> None:
    """A 1 MiB answer to a paused client: it gets the head and nothing more, and the origin's
    connection is no longer read once it holds HIGH_WATER bytes; when the client takes more
    again, every byte arrives, in order, and the connection is kept."""
    origin = ScriptedOrigin(lambda conn, index, request: ok(LARGE), every(16384))
    pool = Pool()
    client = Client()
    client.paused = True
    relay = Relay(pool, ORIGIN, "GET", b"/large", scope("GET", b"/large"))
    with origin.installed():
        relay.start(client)
        await origin.settle(asked=1)
        (transport,) = origin.transports
        assert client.status == 200 and client.received == b""
        assert not transport.reading and transport.outbox
        assert http1.HIGH_WATER <= transport.delivered < http1.HIGH_WATER + 16384 + 100
        client.paused = False
        relay.resume()
        await asyncio.wait_for(client.done.wait(), 5)
    assert client.outcome() == (200, [(CL, b"1048576")], LARGE, "end")
    assert pool.idle("http", "127.0.0.1", 1) is not None


async def test_a_client_that_leaves_ends_the_exchange_and_the_origins_connection() -> None:
    """An endless answer (server-sent events): the client leaves, and the origin's
    connection is closed, neither read on for nobody nor kept."""
    events = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n" + b"7\r\ndata: 1\r\n" * 3
    )
    origin = ScriptedOrigin(lambda conn, index, request: events, every(20))
    pool = Pool()
    client = Client()
    relay = Relay(pool, ORIGIN, "GET", b"/events", scope("GET", b"/events"))
    with origin.installed():
        relay.start(client)
        await origin.settle(asked=1)
        assert client.received == b"data: 1" * 3 and origin.open_connections == 1
        relay.abort()
        await origin.settle()
    assert origin.open_connections == 0 and origin.transports[0].aborted
    assert client.ending == "" and pool.idle("http", "127.0.0.1", 1) is None


async def test_a_client_taking_more_while_the_relay_connects_waits_for_the_answer() -> None:
    origin = ScriptedOrigin(lambda conn, index, request: ok(b"answer"), byte_by_byte)
    client = Client()
    relay = Relay(Pool(), ORIGIN, "GET", b"/", scope("GET", b"/"))
    with origin.installed():
        relay.start(client)  # no idle connection: connecting
        assert relay.conn is None
        relay.resume()
        await asyncio.wait_for(client.done.wait(), 5)
    assert client.outcome() == (200, [(CL, b"6")], b"answer", "end")


# serve's HTTP protocol, on a client connection the test plays.


class PassThrough:
    """An application passing every request through to the origin: by a relay when it has
    ``answer_at_once`` (as :meth:`snapshotd.proxy.handler.Proxy.answer_at_once` does for a person's
    GET or HEAD), else the ASGI way."""

    def __init__(self, at_once: bool) -> None:
        self.upstream = Upstream()
        self.relayed = 0
        if at_once:
            self.answer_at_once = self._relay

    def _relay(self, method: str, path: str, query: str, headers: Any, scope: Any) -> Relay:
        self.relayed += 1
        target = request_target(path.encode("latin-1"), query.encode("latin-1"))
        return Relay(self.upstream.pool, ORIGIN, method, target, scope)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            await self.upstream.forward(ORIGIN, scope, receive, send)


async def served(
    app: PassThrough, request: bytes, method: bytes, origin: ScriptedOrigin
) -> tuple[bytes, bool]:
    """``request`` sent to serve's HTTP protocol on a new connection: every byte it wrote
    back, once its answer is whole (as h11 reads it) or the connection closed, and whether
    it closed."""
    at_once = getattr(app, "answer_at_once", None)
    config = uvicorn_config(app, at_once, log_config=None, log_level="warning")
    config.load()
    make: Any = config.http_protocol_class  # serve's, made as serve makes one
    protocol = make(config=config, server_state=ServerState(), app_state={})
    client = ClientTransport(protocol)
    protocol.connection_made(client)
    protocol.data_received(request)

    async def answered() -> None:
        await origin.settle(asked=1)
        while not client.closing and read_answer(method, bytes(client.written), False)[3] != "end":
            await asyncio.sleep(0)
        await origin.settle()

    await asyncio.wait_for(answered(), 5)
    closed = client.closing
    if not closed:
        protocol.connection_lost(None)
    await app.upstream.close()
    return bytes(client.written), closed


def without_date(answer: bytes) -> bytes:
    return b"\r\n".join(
        line for line in answer.split(b"\r\n") if not line.lower().startswith(b"date:")
    )


def finest(answer: bytes) -> list[bytes]:
    """Byte by byte; a large answer in pieces of 1 KiB."""
    return byte_by_byte(answer) if len(answer) <= 4096 else every(1024)(answer)


def read_answer(method: bytes, answer: bytes, closed: bool) -> tuple[Any, ...]:
    """The client's answer read by h11, apart from the code under test: its status, its
    headers but Date and the framing (Transfer-Encoding, Connection), its body, and whether
    it ended whole."""
    conn = h11.Connection(h11.CLIENT)
    conn.send(h11.Request(method=method, target=b"/", headers=[(b"host", b"site.test")]))
    conn.send(h11.EndOfMessage())
    conn.receive_data(answer)
    if closed:
        conn.receive_data(b"")
    status, headers, body, ending = None, [], b"", "cut off"
    with contextlib.suppress(h11.RemoteProtocolError):
        while (event := conn.next_event()) not in (h11.NEED_DATA, h11.PAUSED):
            if isinstance(event, h11.Response):
                status = event.status_code
                headers = [(k, v) for k, v in event.headers
                           if k not in (b"date", b"transfer-encoding", b"connection")]
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                ending = "end"
                break
    return status, headers, body, ending


@pytest.mark.parametrize("split", [whole, finest], ids=["whole", "finest"])
@pytest.mark.parametrize(
    ("path", "method", "version"), [*CASES, *((path, b"GET", b"1.1") for path in MORE)]
)
async def test_serves_protocol_answers_by_a_relay_byte_for_byte_as_the_asgi_way_does(
    path: bytes, method: bytes, version: bytes, split: Split
) -> None:
    """The loopback test of the same name's cases, without sockets: the same bytes to the
    client, the connection kept or closed alike, the same request at the origin; and the
    answer the client reads (by h11) the one expected."""
    ask = b"%s %s?q=1 HTTP/%s\r\nHost: site.test\r\nAccept: */*\r\n\r\n" % (
        method, path, version
    )
    answers = []
    for at_once in (True, False):
        origin = ScriptedOrigin(script_of(EVERY), split)
        app = PassThrough(at_once)
        with origin.installed():
            answer, closed = await served(app, ask, method, origin)
        assert app.relayed == at_once  # the way each was meant to go
        answers.append((without_date(answer), closed, origin.requests))
    assert answers[0] == answers[1]
    got, closed, asked = answers[0]
    assert len(asked) == 1 and asked[0].startswith(method + b" " + path + b"?q=1 HTTP/1.1\r\n")
    status, headers, body, ending, _ = EXPECTED[path]
    if method == b"HEAD" and status != 502:
        body = b""
    expected = (status, [(k.lower(), v) for k, v in headers], body, ending)
    assert read_answer(method, got, closed) == expected
    assert closed is not (version == b"1.1" and ending == "end")
