"""The pass-through's origin client (snapshotd.net.http1) and the forwarder on it, against raw
loopback origins that answer byte for byte as each test scripts them."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from snapshotd.net import http1
from snapshotd.net.http1 import OriginError, Pool
from snapshotd.proxy.passthrough import Upstream, forwarded_proto

# (connection number, request number on it, the request's bytes) -> bytes to answer, or None
# to close the connection without answering.
Script = Callable[[int, int, bytes], Awaitable[bytes | None]]


class RawOrigin:
    """An asyncio server on 127.0.0.1 that reads whole requests (head, then a body of its
    Content-Length) and answers each with what the script says."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.connections = 0
        self.requests: list[bytes] = []
        self.open_connections = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        number = self.connections
        self.connections += 1
        self.open_connections += 1
        try:
            for index in range(1000):
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                request = head + (await reader.readexactly(length) if length else b"")
                self.requests.append(request)
                answer = await self.script(number, index, request)
                if answer is None:
                    return
                writer.write(answer)
                await writer.drain()
                if b"\r\nConnection: close\r\n" in answer or answer.startswith(b"HTTP/1.0"):
                    return
        finally:
            self.open_connections -= 1
            writer.close()

    @asynccontextmanager
    async def running(self) -> AsyncIterator[str]:
        server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            yield f"http://127.0.0.1:{port}"


def ok(body: bytes = b"ok", extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), extra, body)


async def call(
    upstream: Upstream, origin: str, receive: Callable[[], Awaitable[dict[str, Any]]],
    path: bytes = b"/", method: str = "GET", headers: list[tuple[bytes, bytes]] | None = None,
    query: bytes = b"",
) -> tuple[int, list[dict[str, Any]]]:
    """``Upstream.forward`` with the test's own ``receive``; the status and every message."""
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http", "method": method, "scheme": "http", "path": path.decode(),
        "raw_path": path, "query_string": query,
        "headers": [(b"host", b"a.test"), *(headers or [])],
        "client": ("127.0.0.1", 1),
    }
    return await upstream.forward(origin, scope, receive, send), sent


async def never() -> dict[str, Any]:
    await asyncio.Event().wait()  # as a server does until the client leaves
    raise AssertionError("unreachable")


async def forward(
    upstream: Upstream, origin: str, path: bytes = b"/", method: str = "GET",
    body: bytes | None = None, headers: list[tuple[bytes, bytes]] | None = None,
) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """One request through ``Upstream.forward``, as the server would hand it over: the
    status, the headers and the body sent."""
    messages = [{"type": "http.request", "body": body or b"", "more_body": False}]
    head = list(headers or [])
    if body is not None:
        head.append((b"content-length", str(len(body)).encode()))

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else await never()

    status, sent = await call(upstream, origin, receive, path, method, head)
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == status
    assert not sent[-1].get("more_body", False) or status == 502
    return status, sent[0]["headers"], b"".join(m.get("body", b"") for m in sent[1:])


async def test_one_connection_serves_request_after_request() -> None:
    async def script(conn: int, index: int, request: bytes) -> bytes:
        return ok(b"answer %d" % index)

    origin = RawOrigin(script)
    upstream = Upstream()
    async with origin.running() as url:
        for i in range(5):
            status, _, body = await forward(upstream, url, b"/page?i=%d" % i)
            assert (status, body) == (200, b"answer %d" % i)
        await upstream.close()
    assert origin.connections == 1 and upstream.pool.opened == 1
    assert origin.requests[0].startswith(b"GET /page?i=0 HTTP/1.1\r\nhost: 127.0.0.1:")


async def test_a_kept_alive_connection_the_origin_closed_is_retried_once_without_a_body() -> None:
    """The origin closes a kept-alive connection just as the next request comes (its own
    keep-alive timeout): a GET goes again on a new connection; a POST, whose body may have
    been taken, gets 502."""

    async def script(conn: int, index: int, request: bytes) -> bytes | None:
        return ok() if index == 0 else None  # the second request on a connection: closed

    origin = RawOrigin(script)
    upstream = Upstream()
    async with origin.running() as url:
        assert (await forward(upstream, url))[0] == 200
        assert (await forward(upstream, url))[0] == 200
        assert origin.connections == 2
        status, _, body = await forward(upstream, url, method="POST", body=b"x")
        await upstream.close()
    assert status == 502 and b"Bad Gateway" in body
    assert origin.connections == 2  # the POST was not sent again


async def test_an_idle_connection_past_its_time_is_not_reused(monkeypatch) -> None:
    async def script(conn: int, index: int, request: bytes) -> bytes:
        return ok()

    monkeypatch.setattr(http1, "IDLE_SECONDS", 0.2)
    origin = RawOrigin(script)
    upstream = Upstream()
    async with origin.running() as url:
        await forward(upstream, url)
        await forward(upstream, url)
        await asyncio.sleep(0.3)
        await forward(upstream, url)
        await upstream.close()
    assert origin.connections == 2


async def test_answers_framed_every_way_arrive_whole() -> None:
    answers = {
        b"/chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n",
        # No length: the body ends when the origin closes.
        b"/until-close": b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nto the end",
        b"/http10": b"HTTP/1.0 200 OK\r\n\r\nold style",
        b"/early-hints": b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"
        + ok(b"after hints"),
        b"/no-content": b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n",
    }

    async def script(conn: int, index: int, request: bytes) -> bytes | None:
        path = request.split(b" ")[1]
        if index:
            return None
        return answers[path]

    origin = RawOrigin(script)
    upstream = Upstream()
    async with origin.running() as url:
        got = {path: await forward(upstream, url, path) for path in answers}
        await upstream.close()
    assert got[b"/chunked"][2] == b"abcdefg"
    assert not any(k.lower() == b"transfer-encoding" for k, _ in got[b"/chunked"][1])
    assert got[b"/until-close"][2] == b"to the end"
    assert got[b"/http10"][2] == b"old style"
    assert got[b"/early-hints"][:1] == (200,) and got[b"/early-hints"][2] == b"after hints"
    assert got[b"/no-content"][0] == 204 and got[b"/no-content"][2] == b""


async def test_the_trailers_of_a_chunked_answer_are_not_sent_on_as_its_headers() -> None:
    """Trailers come after the body, when the headers have gone to the client: however the
    answer is read (here in one piece, head, body and trailers), they are not among them."""

    async def script(conn: int, index: int, request: bytes) -> bytes:
        return (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"5\r\nhello\r\n0\r\nX-Trailer: t\r\nSet-Cookie: late=1\r\n\r\n"
        )

    origin = RawOrigin(script)
    upstream = Upstream()
    async with origin.running() as url:
        status, headers, body = await forward(upstream, url)
        await upstream.close()
    assert (status, body) == (200, b"hello")
    assert [k.lower() for k, _ in headers] == [], headers


async def test_a_head_answer_with_a_length_ends_at_its_headers() -> None:
    async def script(conn: int, index: int, request: bytes) -> bytes:
        return b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n"

    origin = RawOrigin(script)
    upstream = Upstream()
    async with origin.running() as url:
        status, headers, body = await asyncio.wait_for(
            forward(upstream, url, method="HEAD"), 5
        )
        await forward(upstream, url, method="HEAD")
        await upstream.close()
    assert status == 200 and body == b"" and (b"Content-Length", b"5000") in headers
    assert origin.connections == 2  # llhttp cannot go on after a HEAD answer: not reused


async def test_a_silent_origin_is_a_bounded_failure(monkeypatch) -> None:
    monkeypatch.setattr(http1, "READ_TIMEOUT", 0.3)

    async def script(conn: int, index: int, request: bytes) -> bytes | None:
        if b"/mid" in request:
            return b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part"
        await asyncio.sleep(5)
        return None

    origin = RawOrigin(script)
    upstream = Upstream()
    async with origin.running() as url:
        status, _, _ = await asyncio.wait_for(forward(upstream, url, b"/silent"), 3)
        assert status == 502
        # Headers are out when the origin goes silent: the answer is left cut off.
        sent: list[dict[str, Any]] = []

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        scope = {"type": "http", "method": "GET", "scheme": "http", "path": "/mid",
                 "raw_path": b"/mid", "query_string": b"", "headers": [], "client": None}
        await asyncio.wait_for(upstream.forward(url, scope, receive, send), 3)
        await upstream.close()
    assert sent[0]["status"] == 200
    assert all(m.get("more_body") for m in sent[1:])  # never ended as if whole
    assert b"".join(m.get("body", b"") for m in sent[1:]) == b"only part"


async def test_a_huge_header_is_refused_not_held() -> None:
    async def script(conn: int, index: int, request: bytes) -> bytes:
        return b"HTTP/1.1 200 OK\r\n" + b"X-Big: " + b"a" * 60000 + b"\r\n" * 1 + (
            b"X-More: " + b"b" * 60000 + b"\r\n"
        ) * 5 + b"Content-Length: 2\r\n\r\nok"

    origin = RawOrigin(script)
    upstream = Upstream()
    async with origin.running() as url:
        status, _, _ = await forward(upstream, url)
        await upstream.close()
    assert status == 502


async def test_nothing_answers_is_a_bad_gateway() -> None:
    upstream = Upstream()
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    status, _, body = await forward(upstream, f"http://127.0.0.1:{port}")
    await upstream.close()
    assert status == 502 and b"Bad Gateway" in body


async def test_a_pool_over_tls_checks_the_origin_certificate(tmp_path) -> None:
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(server_ctx)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
                break
            writer.write(ok(b"secure"))
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_ctx)
    port = server.sockets[0].getsockname()[1]
    url = f"https://127.0.0.1:{port}"
    async with server:
        trusted = ssl.create_default_context()
        ca.configure_trust(trusted)
        upstream = Upstream(Pool(trusted))
        first = await forward(upstream, url)
        second = await forward(upstream, url)
        await upstream.close()
        stranger = Upstream(Pool(ssl.create_default_context()))
        refused = await forward(stranger, url)
        await stranger.close()
    assert first[0] == second[0] == 200 and first[2] == b"secure"
    assert upstream.pool.opened == 1
    assert refused[0] == 502


async def test_a_connection_takes_its_answer_but_is_not_reused_after_an_unasked_one() -> None:
    async def script(conn: int, index: int, request: bytes) -> bytes:
        return ok() + ok(b"unasked")

    origin = RawOrigin(script)
    pool = Pool()
    async with origin.running() as url:
        port = int(url.rsplit(":", 1)[1])
        conn = await pool.connect("http", "127.0.0.1", port)
        conn.begin()
        conn.write(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        assert (await conn.response())[0] == 200
        assert await conn.read() == b"ok"
        for _ in range(50):
            if conn.closed:
                break
            await asyncio.sleep(0.01)
        assert not conn.reusable
        pool.release(conn)
        assert (await pool.connect("http", "127.0.0.1", port)) is not conn
        pool.close()
    with pytest.raises(OriginError):
        conn.write(b"x")


async def test_the_origin_gets_the_clients_header_bytes_and_a_length_on_an_empty_post() -> None:
    async def script(conn: int, index: int, request: bytes) -> bytes:
        return ok()

    origin = RawOrigin(script)
    upstream = Upstream()
    async with origin.running() as url:
        await forward(
            upstream, url, b"/form", method="POST",
            headers=[(b"x-name", b"Ren\xe9"), (b"connection", b"x-drop"), (b"x-drop", b"1")],
        )
        await forward(upstream, url, b"/plain")
        await upstream.close()
    post, get = origin.requests
    assert post.startswith(b"POST /form HTTP/1.1\r\n")
    lines = post.split(b"\r\n")
    assert b"x-name: Ren\xe9" in lines and b"content-length: 0" in lines
    assert not any(line.startswith((b"x-drop", b"connection")) for line in lines)
    assert b"x-forwarded-for: 127.0.0.1" in lines and b"x-forwarded-host: a.test" in lines
    assert b"content-length" not in get.lower()




def slow_body(pieces: list[bytes], pause: float) -> Callable[[], Awaitable[dict[str, Any]]]:
    """A client's ``receive`` that hands over ``pieces`` of a body, ``pause`` s apart."""

    async def receive() -> dict[str, Any]:
        await asyncio.sleep(pause)
        piece = pieces.pop(0)
        return {"type": "http.request", "body": piece, "more_body": bool(pieces)}

    return receive


async def test_an_answer_without_a_length_that_goes_silent_is_cut_off_not_ended(
    monkeypatch,
) -> None:
    monkeypatch.setattr(http1, "READ_TIMEOUT", 0.3)

    async def script(conn: int, index: int, request: bytes) -> bytes:
        return b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\npartial"  # then silence

    origin = RawOrigin(script)
    upstream = Upstream()
    async with origin.running() as url:
        status, sent = await asyncio.wait_for(call(upstream, url, never), 3)
        await upstream.close()
    assert status == 200 and sent[1]["body"] == b"partial"
    assert all(m.get("more_body") for m in sent[1:])


async def test_an_upload_slower_than_the_read_timeout_still_goes_through(monkeypatch) -> None:
    """The origin's time to answer is counted from the request's end, not its start."""
    monkeypatch.setattr(http1, "READ_TIMEOUT", 0.3)

    async def script(conn: int, index: int, request: bytes) -> bytes:
        return ok(request.split(b"\r\n\r\n", 1)[1])

    origin = RawOrigin(script)
    upstream = Upstream()
    async with origin.running() as url:
        status, sent = await call(
            upstream, url, slow_body([b"%d" % i * 10 for i in range(8)], 0.1), b"/up", "POST",
            [(b"content-length", b"80")],
        )
        await upstream.close()
    assert status == 200
    assert b"".join(m.get("body", b"") for m in sent[1:]) == b"".join(
        b"%d" % i * 10 for i in range(8)
    )


async def test_an_origin_silent_after_a_slow_upload_is_a_bounded_failure(monkeypatch) -> None:
    """The answer is awaited while the body goes up; the bound starts when it has gone."""
    monkeypatch.setattr(http1, "READ_TIMEOUT", 0.3)

    async def script(conn: int, index: int, request: bytes) -> None:
        await asyncio.sleep(5)

    origin = RawOrigin(script)
    upstream = Upstream()
    async with origin.running() as url:
        status, _ = await asyncio.wait_for(
            call(
                upstream, url, slow_body([b"a" * 10, b"b" * 10], 0.2), b"/up", "POST",
                [(b"content-length", b"20")],
            ),
            3,
        )
        await upstream.close()
    assert status == 502


async def test_an_origin_that_does_not_answer_in_time_is_not_asked_again(monkeypatch) -> None:
    monkeypatch.setattr(http1, "READ_TIMEOUT", 0.3)

    async def script(conn: int, index: int, request: bytes) -> bytes | None:
        if index == 1:
            await asyncio.sleep(1)
            return None
        return ok()

    origin = RawOrigin(script)
    upstream = Upstream()
    async with origin.running() as url:
        await forward(upstream, url, method="DELETE")
        status, _, _ = await forward(upstream, url, b"/x", method="DELETE")
        await upstream.close()
    assert status == 502
    assert [r.split(b"\r\n")[0] for r in origin.requests] == [
        b"DELETE / HTTP/1.1", b"DELETE /x HTTP/1.1"
    ]


async def test_an_origin_switching_protocols_is_a_bad_gateway() -> None:
    async def script(conn: int, index: int, request: bytes) -> bytes:
        return (
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\n\r\nxx"
        )

    origin = RawOrigin(script)
    upstream = Upstream()
    async with origin.running() as url:
        status, sent = await call(upstream, url, never)
        await upstream.close()
    assert status == 502 and sent[0]["status"] == 502


async def _endless_answer(start: bytes) -> tuple[int, list[Any], int]:
    """What the pass-through sends on of an origin's answer that begins with ``start`` and
    goes on (40 MiB) without a line end: its status, its messages, and the peak of memory
    allocated meanwhile."""
    import tracemalloc

    class Endless(RawOrigin):
        async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(start)
            try:
                for _ in range(400):
                    writer.write(b"a" * 100_000)
                    await writer.drain()
            except ConnectionError:
                pass
            writer.close()

    origin = Endless(forward)  # type: ignore[arg-type]
    upstream = Upstream()
    tracemalloc.start()
    try:
        async with origin.running() as url:
            status, sent = await asyncio.wait_for(call(upstream, url, never), 10)
            await upstream.close()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return status, sent, peak


async def test_one_endless_header_line_is_refused_at_the_bound() -> None:
    """llhttp keeps a header line whole until it ends: the bound counts what came."""
    status, _, peak = await _endless_answer(b"HTTP/1.1 200 OK\r\nX-Long: ")
    assert status == 502
    assert peak < 8 * 2**20, peak


async def test_an_endless_trailer_line_cuts_the_answer_off_at_the_heads_bound() -> None:
    """Trailers are held as header lines are, each whole until it ends: one that never ends
    is refused once the head's bound is passed, and the answer, its head gone, is cut off."""
    status, sent, peak = await _endless_answer(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-Trailer: "
    )
    assert status == 200 and b"".join(m.get("body", b"") for m in sent[1:]) == b"hello"
    assert sent[-1].get("more_body")  # cut off, not ended as if whole
    assert peak < 8 * 2**20, peak


async def test_a_request_cancelled_while_it_waits_leaves_no_connection_open() -> None:
    async def script(conn: int, index: int, request: bytes) -> bytes:
        await asyncio.sleep(1)
        return ok()

    origin = RawOrigin(script)
    upstream = Upstream()
    async with origin.running() as url:
        pending = asyncio.ensure_future(call(upstream, url, never))
        await asyncio.sleep(0.2)
        assert origin.open_connections == 1
        pending.cancel()
        with pytest.raises(asyncio.CancelledError):
            await pending
        for _ in range(100):
            if origin.open_connections == 0:
                break
            await asyncio.sleep(0.01)
        await upstream.close()
    assert origin.open_connections == 0


async def test_a_target_with_a_space_or_control_character_is_not_forwarded() -> None:
    async def script(conn: int, index: int, request: bytes) -> bytes:
        return ok()

    origin = RawOrigin(script)
    upstream = Upstream()
    async with origin.running() as url:
        spaced = await call(upstream, url, never, b"/a", query=b"q=1 HTTP/1.1\r\nX: y")
        controlled = await call(upstream, url, never, b"/a\x01b")
        fine = await call(upstream, url, never, b"/a", query=b"q=1")
        await upstream.close()
    assert spaced[0] == controlled[0] == 400 and fine[0] == 200
    assert [r.split(b"\r\n")[0] for r in origin.requests] == [b"GET /a?q=1 HTTP/1.1"]


def test_only_a_front_server_on_this_host_says_which_scheme_the_client_used() -> None:
    assert forwarded_proto(b"127.0.0.1", b"https", "http") == b"https"
    assert forwarded_proto(b"::1", b"HTTPS ", "http") == b"https"
    assert forwarded_proto(b"198.51.100.7", b"https", "http") == b"http"  # anyone's say
    assert forwarded_proto(b"127.0.0.1", b"gopher", "http") == b"http"
    assert forwarded_proto(b"", b"https", "http") == b"http"  # a peer without an address
