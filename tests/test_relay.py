"""A person's GET or HEAD passed through by a relay (``snapshotd.proxy.relay``, run by serve's HTTP
protocol) against raw loopback origins answering byte for byte as each test scripts them:
the origin is asked and the client answered byte for byte as the ASGI way does, and the
relay keeps the ASGI way's bounds (time, memory, a client gone, a connection closed as it
was taken)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import http.client
import logging
import socket
import ssl
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest

from snapshotd.net import http1
from snapshotd.net.http1 import Pool
from snapshotd.proxy.relay import Relay
from snapshotd.server.protocol import HttpProtocol
from tests.servers import serve_asgi
from tests.test_http1 import RawOrigin, Script, ok
from tests.test_protocol import PERSON, Counted

CHUNKED = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"5\r\nhello\r\n7\r\n, world\r\n0\r\n\r\n"
)
# What the origin answers, by the request's path.
ANSWERS = {
    b"/length": ok(b"hello", b"X-Mixed-Case: Kept\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\n"),
    b"/chunked": CHUNKED,
    b"/until-close": b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall until the end",
    b"/hop": ok(
        b"hop",
        b"Connection: x-private\r\nX-Private: secret\r\nKeep-Alive: timeout=5\r\n"
        b"Proxy-Authenticate: Basic\r\nX-Public: yes\r\n",
    ),
    b"/no-content": b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\nX-A: 1\r\n\r\n",
    b"/not-modified": b"HTTP/1.1 304 Not Modified\r\nContent-Length: 100\r\nETag: \"x\"\r\n\r\n",
    b"/early-hints": b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n" + ok(b"after"),
    b"/control": ok(b"ctl", b"X-Bad: a\x01b\r\nX-Good: c\r\n"),
    b"/status": b"HTTP/1.1 999 Odd\r\nContent-Length: 0\r\n\r\n",
    b"/teapot": b"HTTP/1.1 418 I'm a teapot\r\nContent-Length: 3\r\n\r\ntea",
    b"/large": ok(bytes(range(256)) * 4096),  # 1 MiB
    b"/cut": b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 100\r\n\r\nonly part",
    b"/closed": b"",
}


async def answer_by_path(conn: int, index: int, request: bytes) -> bytes | None:
    return ANSWERS[request.split(b" ", 2)[1].split(b"?")[0]] or None


@contextlib.contextmanager
def raw_origin(script: Script | RawOrigin) -> Iterator[tuple[str, RawOrigin]]:
    """A :class:`RawOrigin` (or one answering as ``script`` says) running in a thread of its
    own; its URL and itself."""
    origin = script if isinstance(script, RawOrigin) else RawOrigin(script)
    loop = asyncio.new_event_loop()
    ready: list[str] = []
    stop = asyncio.Event()

    async def run() -> None:
        async with origin.running() as url:
            ready.append(url)
            await stop.wait()
        handlers = asyncio.all_tasks() - {asyncio.current_task()}
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)

    thread = threading.Thread(target=loop.run_until_complete, args=(run(),), daemon=True)
    thread.start()
    while not ready:
        time.sleep(0.01)
    try:
        yield ready[0], origin
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(5)
        loop.close()


@contextlib.contextmanager
def servers(tmp_path: Any, url: str) -> Iterator[tuple[str, str, Counted]]:
    """Two snapshotd servers before ``url``: one passing through by relays, one the ASGI
    way; their URLs and the first one's counts."""
    db = str(tmp_path / "s.db")
    fast, plain = Counted(db, url, at_once=True), Counted(db, url, at_once=False)
    with serve_asgi(fast, at_once=fast.at_once) as fast_url, serve_asgi(plain) as plain_url:
        yield fast_url, plain_url, fast


def raw_exchange(
    base: str, data: bytes, timeout: float = 5.0, quiet: float = 0.3
) -> tuple[bytes, bool]:
    """``data`` sent on a new connection; every byte read back until the server closes, or
    is ``quiet`` seconds after its first byte, or ``timeout``; and whether it closed."""
    host, port = base.removeprefix("http://").split(":")
    got = b""
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(data)
        deadline = time.monotonic() + timeout
        sock.settimeout(quiet)
        while time.monotonic() < deadline:
            try:
                piece = sock.recv(1 << 20)
            except TimeoutError:
                if got:
                    return got, False  # whole answers, and the connection kept
                continue
            if not piece:
                return got, True
            got += piece
    return got, False


def read_until(sock: socket.socket, wanted: bytes) -> bytes:
    """What the socket reads until ``wanted`` is in it (or the server closes)."""
    got = b""
    while wanted not in got and (data := sock.recv(65536)):
        got += data
    return got


def without_date(answer: bytes) -> bytes:
    return b"\r\n".join(
        line for line in answer.split(b"\r\n") if not line.lower().startswith(b"date:")
    )


def request(
    path: bytes, method: bytes = b"GET", version: bytes = b"1.1", extra: bytes = b""
) -> bytes:
    return b"%s %s HTTP/%s\r\nHost: site.test\r\nUser-Agent: %s\r\n%s\r\n" % (
        method, path, version, PERSON.encode(), extra
    )


CASES = [
    *((path, b"GET", b"1.1") for path in ANSWERS),
    (b"/length", b"HEAD", b"1.1"),
    (b"/chunked", b"HEAD", b"1.1"),
    (b"/length", b"GET", b"1.0"),
    (b"/chunked", b"GET", b"1.0"),
    (b"/until-close", b"GET", b"1.0"),
]


@pytest.mark.parametrize(("path", "method", "version"), CASES)
def test_the_origin_is_asked_and_the_client_answered_as_the_asgi_way_does(
    tmp_path, path: bytes, method: bytes, version: bytes
) -> None:
    """Each origin answer (lengths, chunks, until close, no body, interim answers, hop-by-hop
    and invalid headers, an odd status, a cut-off body, no answer at all), for GET and HEAD,
    HTTP/1.1 and 1.0: the same bytes to the client, the connection kept or closed alike, and
    the same request at the origin, X-Forwarded-* included."""
    extra = b"Accept: */*\r\nX-Forwarded-For: 203.0.113.9\r\n"
    ask = request(path + b"?q=1", method, version, extra)
    with raw_origin(answer_by_path) as (url, origin), servers(tmp_path, url) as (fast, plain, n):
        answers = []
        for base in (fast, plain):
            origin.requests.clear()
            answer, closed = raw_exchange(base, ask)
            answers.append((without_date(answer), closed, origin.requests[:]))
        assert n.answered == 1 and n.calls == 0
    assert answers[0] == answers[1]
    got, closed, asked = answers[0]
    assert len(asked) == 1 and asked[0].startswith(method + b" " + path + b"?q=1 HTTP/1.1\r\n")
    assert b"\r\nx-forwarded-for: 203.0.113.9, 127.0.0.1\r\n" in asked[0]
    if path in (b"/status", b"/closed"):
        assert got.startswith(b"HTTP/1.1 502 ")
    if path == b"/cut":
        assert closed and got.endswith(b"only part")


def test_one_origin_connection_serves_a_client_connection_request_after_request(tmp_path) -> None:
    """Kept alive on both sides; requests pipelined behind one being relayed go the ASGI way,
    in turn, over the same origin connection."""
    with raw_origin(answer_by_path) as (url, origin), servers(tmp_path, url) as (fast, _, counts):
        client = http.client.HTTPConnection(*fast.removeprefix("http://").split(":"))
        for path in ("/length", "/chunked") * 3:
            client.request("GET", path, headers={"User-Agent": PERSON})
            answer = client.getresponse()
            assert answer.read() == (b"hello" if path == "/length" else b"hello, world")
        client.close()
        pipelined, closed = raw_exchange(fast, b"".join(request(b"/length") for _ in range(5)))
    assert pipelined.count(b"HTTP/1.1 200 OK\r\n") == 5 and pipelined.endswith(b"hello")
    assert not closed and origin.connections == 1 and counts.answered == 6 + 1


def test_a_kept_alive_connection_the_origin_closed_is_asked_again_on_a_new_one(tmp_path) -> None:
    """The origin closes a kept-alive connection just as the next request comes (its own
    keep-alive timeout): the relay asks again, once, on a new connection."""

    async def script(conn: int, index: int, request: bytes) -> bytes | None:
        return ok(b"answer %d" % conn) if index == 0 else None

    with raw_origin(script) as (url, origin), servers(tmp_path, url) as (fast, _, counts):
        first, _ = raw_exchange(fast, request(b"/"))
        second, _ = raw_exchange(fast, request(b"/"))
    assert first.endswith(b"answer 0") and second.endswith(b"answer 1")
    assert origin.connections == 2 and counts.answered == 2


def test_an_origin_that_cannot_be_reached_is_a_502_page(tmp_path, caplog) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    db = str(tmp_path / "s.db")
    fast = Counted(db, f"http://127.0.0.1:{port}", at_once=True)
    with serve_asgi(fast, at_once=fast.at_once) as base, caplog.at_level(logging.WARNING):
        answer, closed = raw_exchange(base, request(b"/"))
    assert answer.startswith(b"HTTP/1.1 502 Bad Gateway\r\n") and b"Bad Gateway</h1>" in answer
    assert not closed and fast.answered == 1
    lines = [r.getMessage() for r in caplog.records if r.name == "snapshotd.proxy.passthrough"]
    assert [line.split(" error=")[0] for line in lines] == [
        f"origin failed origin=http://127.0.0.1:{port}"
    ]


def test_a_silent_origin_is_a_bounded_failure(tmp_path, monkeypatch) -> None:
    """Silent before its head: a 502 page; silent after it: the answer cut off."""
    monkeypatch.setattr(http1, "READ_TIMEOUT", 0.5)

    async def script(conn: int, index: int, request: bytes) -> bytes | None:
        if b"/mid" in request:
            return b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part"
        await asyncio.sleep(3600)  # silent until the test ends: only a time-out answers
        return None

    with raw_origin(script) as (url, _), servers(tmp_path, url) as (fast, _, counts):
        silent, kept = raw_exchange(fast, request(b"/silent"), timeout=60)
        mid, closed = raw_exchange(fast, request(b"/mid"), timeout=60, quiet=1.5)
    assert silent.startswith(b"HTTP/1.1 502 ") and not kept
    assert mid.endswith(b"only part") and closed


def test_a_client_that_leaves_ends_the_exchange_with_the_origin(tmp_path) -> None:
    """An endless answer (server-sent events): the client leaves, and the origin's
    connection is closed, not read on for nobody nor kept."""
    events: list[str] = []

    async def script(conn: int, index: int, request: bytes) -> bytes | None:
        events.append("asked")
        return (
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n" + b"7\r\ndata: 1\r\n"
        )

    with raw_origin(script) as (url, origin), servers(tmp_path, url) as (fast, _, _counts):
        host, port = fast.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            sock.sendall(request(b"/events"))
            assert b"data: 1" in read_until(sock, b"data: 1")
            assert origin.open_connections == 1
        deadline = time.monotonic() + 5
        while origin.open_connections and time.monotonic() < deadline:
            time.sleep(0.05)
        assert origin.open_connections == 0 and events == ["asked"]


class Firehose(RawOrigin):
    """An origin answering every request with :data:`SIZE` bytes as fast as it is read,
    counting what it got to write."""

    SIZE = 64 * 2**20
    PIECE = bytes(range(256)) * 256  # 64 KiB

    def __init__(self) -> None:
        super().__init__(answer_by_path)
        self.written = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % self.SIZE)
        with contextlib.suppress(ConnectionError):
            for _ in range(self.SIZE // len(self.PIECE)):
                writer.write(self.PIECE)
                await writer.drain()
                self.written += len(self.PIECE)
        writer.close()


def stalled(origin: Firehose, quiet: float = 0.5, timeout: float = 20.0) -> int:
    """What ``origin`` had written once it wrote nothing more for ``quiet`` seconds (or at
    ``timeout``)."""
    deadline = time.monotonic() + timeout
    written = -1
    while origin.written != written and time.monotonic() < deadline:
        written = origin.written
        time.sleep(quiet)
    return origin.written


def test_a_client_that_does_not_read_holds_the_origin_back(tmp_path) -> None:
    """A 64 MiB answer to a client that reads nothing: the origin is held back, as the ASGI
    way holds it, once the connections' buffers are full (short of the whole answer: the
    kernel grows a loopback socket's buffers to a few MiB each, 32 at most here); then
    every byte arrives, in order."""
    held = []
    with raw_origin(Firehose()) as (url, origin), servers(tmp_path, url) as (fast, plain, counts):
        for base in (fast, plain):
            origin.written = 0
            host, port = base.removeprefix("http://").split(":")
            with socket.socket() as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
                sock.connect((host, int(port)))
                sock.sendall(request(b"/large"))
                held.append(stalled(origin))
                got = bytearray()
                sock.settimeout(5)
                while len(got) < Firehose.SIZE or not got.endswith(Firehose.PIECE):
                    data = sock.recv(1 << 20)
                    assert data
                    got += data
            head, body = bytes(got).split(b"\r\n\r\n", 1)
            assert body == Firehose.PIECE * (Firehose.SIZE // len(Firehose.PIECE))
        assert counts.answered == 1
    print("held by the relay, by the ASGI way:", held)
    assert all(0 < h < Firehose.SIZE * 3 // 4 for h in held), held


def test_a_paused_client_with_a_request_pipelined_behind_a_relay_gets_both_at_once(
    tmp_path, monkeypatch
) -> None:
    """A 4 MiB answer relayed to a client that reads nothing for a second, with a second
    request pipelined behind it (which takes the protocol's cycle): once the client reads,
    the relay goes on at once, and both answers arrive."""
    big = bytes(range(256)) * 16384

    async def script(conn: int, index: int, request: bytes) -> bytes:
        return ok(big if b"/big" in request else b"small")

    # The origin's read timeout far beyond the socket's: the relay must go on by itself.
    monkeypatch.setattr(http1, "READ_TIMEOUT", 3600.0)
    with raw_origin(script) as (url, _), servers(tmp_path, url) as (fast, _, counts):
        host, port = fast.removeprefix("http://").split(":")
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
            sock.connect((host, int(port)))
            sock.sendall(request(b"/big") + request(b"/small"))
            time.sleep(1.0)
            got = b""
            sock.settimeout(60)  # only stops a hang
            while not got.endswith(b"\r\n\r\nsmall"):
                data = sock.recv(1 << 20)
                assert data
                got += data
    assert got.count(b"HTTP/1.1 200 OK") == 2 and big in got and counts.answered == 1


class Client:
    """A relay's client that records what it is given, and can say it is paused."""

    def __init__(self) -> None:
        self.paused = False
        self.got: list[Any] = []
        self.done = asyncio.Event()

    def start(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.got.append(status)

    def body(self, data: bytes) -> None:
        self.got.append(data)

    def end(self) -> None:
        self.got.append("end")
        self.done.set()

    def cut_off(self) -> None:
        self.got.append("cut off")
        self.done.set()


SCOPE = {"headers": [(b"host", b"site.test")], "client": ("127.0.0.1", 1), "scheme": "http"}
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@contextlib.asynccontextmanager
async def relay_to(handle: Handler) -> AsyncIterator[tuple[Relay, Client]]:
    """A relay of ``GET /`` to an origin answering with ``handle``, not started, and its
    client."""
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pool = Pool()
    async with server:
        yield Relay(pool, f"http://127.0.0.1:{port}", "GET", b"/", SCOPE), Client()
        pool.close()


async def test_the_time_a_client_was_not_taking_the_answer_is_not_the_origins(
    monkeypatch,
) -> None:
    """The origin sends a piece, then the rest 1.3 s later; the client takes nothing until
    0.9 s. With a read timeout of 1 s, counted from when the client took the first piece,
    the answer is whole (as the ASGI way's, whose wait starts when it reads again)."""
    monkeypatch.setattr(http1, "READ_TIMEOUT", 1.0)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nfirst")
        await asyncio.sleep(1.3)
        writer.write(b"-rest")
        await writer.drain()
        writer.close()

    async with relay_to(handle) as (relay, client):
        client.paused = True
        relay.start(client)
        await asyncio.sleep(0.9)
        client.paused = False
        relay.resume()
        await asyncio.wait_for(client.done.wait(), 3)
    assert client.got == [200, b"first", b"-rest", "end"]


async def test_a_client_taking_more_while_the_relay_connects_waits_for_the_answer() -> None:
    """The client's ``resume`` may come before there is an origin connection (the relay
    is connecting): nothing is handed over yet, and the answer comes when it does."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(ok(b"answer"))
        await writer.drain()
        writer.close()

    async with relay_to(handle) as (relay, client):
        relay.start(client)  # no idle connection: connecting
        assert relay.conn is None
        relay.resume()
        await asyncio.wait_for(client.done.wait(), 3)
    assert client.got == [200, b"answer", "end"]


async def test_a_relay_over_tls_checks_the_origin_certificate() -> None:
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_ctx)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            while True:
                await reader.readuntil(b"\r\n\r\n")
                writer.write(ok(b"secure"))
                await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_ctx)
    url = f"https://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    trusted = ssl.create_default_context()
    ca.configure_trust(trusted)
    got = []
    async with server:
        for pool in (Pool(trusted), Pool(trusted), Pool(ssl.create_default_context())):
            client = Client()
            Relay(pool, url, "GET", b"/", SCOPE).start(client)
            await asyncio.wait_for(client.done.wait(), 5)
            pool.close()
            got.append(client.got)
    assert got[0] == got[1] == [200, b"secure", "end"]
    assert got[2][0] == 502  # a certificate no authority it trusts signed


class Events(RawOrigin):
    """An origin answering every request with endless server-sent events; counts its open
    connections."""

    def __init__(self) -> None:
        super().__init__(answer_by_path)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.open_connections += 1
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
            )
            while True:
                writer.write(b"7\r\ndata: 1\r\n")
                await writer.drain()
                await asyncio.sleep(0.05)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self.open_connections -= 1
            writer.close()


@pytest.mark.parametrize("method", [b"GET", b"POST"], ids=["relayed", "asgi"])
def test_a_client_that_leaves_with_a_request_pipelined_ends_the_endless_answer(
    tmp_path, method: bytes
) -> None:
    """Endless events, relayed (GET) or the ASGI way (a POST), with a request pipelined
    behind them; the client leaves, and the origin's connection is closed."""
    extra = b"Content-Length: 0\r\n" if method == b"POST" else b""
    with raw_origin(Events()) as (url, origin), servers(tmp_path, url) as (fast, _, _counts):
        host, port = fast.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            sock.sendall(request(b"/events", method, extra=extra) + request(b"/next"))
            assert b"data: 1" in read_until(sock, b"data: 1")
            assert origin.open_connections == 1
        deadline = time.monotonic() + 5
        while origin.open_connections and time.monotonic() < deadline:
            time.sleep(0.05)
        assert origin.open_connections == 0


WEBSOCKET = (
    b"GET /ws HTTP/1.1\r\nHost: site.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
)


@pytest.mark.parametrize("method", [b"GET", b"POST"], ids=["relayed", "asgi"])
def test_a_websocket_upgrade_during_an_endless_answer_leaves_nothing_behind(
    tmp_path, method: bytes
) -> None:
    """An upgrade sent on a connection whose endless answer is under way (a library for
    WebSockets is installed here, for the tests' servers): it waits its turn like any
    request, and when the client leaves, the origin's connection is closed."""
    extra = b"Content-Length: 0\r\n" if method == b"POST" else b""
    with raw_origin(Events()) as (url, origin), servers(tmp_path, url) as (fast, _, _counts):
        host, port = fast.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            sock.sendall(request(b"/events", method, extra=extra))
            read_until(sock, b"data: 1")
            sock.sendall(WEBSOCKET)
            time.sleep(0.3)
        deadline = time.monotonic() + 5
        while origin.open_connections and time.monotonic() < deadline:
            time.sleep(0.05)
        assert origin.open_connections == 0


def test_a_finished_request_and_its_unread_body_are_not_kept_by_the_connection(
    tmp_path,
) -> None:
    """A POST refused before its body is read, then GETs passed through by relays on the same
    kept-alive connection: the connection's protocol holds nothing of the POST."""
    body = b"x" * 200_000
    post = b"POST /form HTTP/1.1\r\nHost: bad host\r\nContent-Length: %d\r\n\r\n" % len(body)
    with raw_origin(answer_by_path) as (url, _), servers(tmp_path, url) as (fast, _, counts):
        host, port = fast.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            sock.sendall(post + body)
            assert b" 400 " in read_until(sock, b"malformed Host header\n")
            for _ in range(3):
                sock.sendall(request(b"/length"))
                read_until(sock, b"hello")
            mine = sock.getsockname()[1]
            (protocol,) = [
                o for o in gc.get_objects()
                if isinstance(o, HttpProtocol) and o.client and o.client[1] == mine
            ]
            assert counts.answered == 3
            held = [c for c in (protocol.cycle, protocol._running) if c is not None]
            assert not [c for c in held if getattr(c, "scope", {}).get("method") == "POST"]


@pytest.mark.parametrize("way", ["relayed", "asgi"])
def test_an_http_1_1_request_without_host_is_refused_and_an_http_1_0_one_served(
    tmp_path, way: str
) -> None:
    """RFC 9112, 3.2: an HTTP/1.1 request without Host gets 400, whichever way it is taken;
    HTTP/1.0 has no Host to require and goes to the site that takes any Host."""
    with raw_origin(answer_by_path) as (url, _), servers(tmp_path, url) as (fast, plain, counts):
        base = fast if way == "relayed" else plain
        for method, host in ((b"GET", b""), (b"POST", b""), (b"GET", b"Host: \r\n")):
            head = b"%s /length HTTP/1.1\r\n%sUser-Agent: %s\r\nContent-Length: 0\r\n\r\n" % (
                method, host, PERSON.encode())
            answer, _closed = raw_exchange(base, head)
            assert answer.startswith(b"HTTP/1.1 400 "), answer
            assert answer.endswith(b"Bad Request: no Host header\n"), answer
        answer, _closed = raw_exchange(base, b"GET /length HTTP/1.0\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b"hello"), answer
