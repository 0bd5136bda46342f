"""The pass-through's framing on a scripted origin (``tests.scripted``), without sockets:
every kind of origin answer the loopback tests check (``tests.test_relay``'s ANSWERS, and a
few more), read whole, byte by byte and cut in two at each point, by an origin connection
(:class:`snapshotd.http1.Connection`) and by both ways of passing a request through (the
:class:`snapshotd.relay.Relay` of serve's protocol and :meth:`snapshotd.upstream.Upstream.
forward`, the ASGI way); and the relay's callbacks against a client the test plays. The
loopback tests stay the end-to-end proof; these run each case in milliseconds."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from snapshotd import http1
from snapshotd.http1 import OriginClosed, OriginError, Pool
from snapshotd.relay import Relay
from snapshotd.upstream import BAD_GATEWAY_PAGE, Upstream, bad_gateway_head
from tests.scripted import ScriptedOrigin, Split, at, byte_by_byte, every, whole
from tests.test_http1 import ok
from tests.test_relay import ANSWERS

ORIGIN = "http://127.0.0.1:1"  # never connected to: the scripted origin stands in for it
LARGE = bytes(range(256)) * 4096

# More answers than the loopback tests', read by path like theirs.
MORE = {
    b"/http10": b"HTTP/1.0 200 OK\r\n\r\nold style",
    b"/http10-length": b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nold",
    b"/close-length": ok(b"bye", b"Connection: close\r\n"),
    b"/trailers": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"5;ext=1\r\nhello\r\n0\r\nX-Trailer: t\r\n\r\n",
    b"/switching": b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
    b"Connection: Upgrade\r\n\r\n",
    b"/unasked": ok(b"asked") + ok(b"unasked"),
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
    b"/trailers": (200, [], b"hello", "end", "kept"),
    b"/switching": (502, bad_gateway_head(), BAD_GATEWAY_PAGE, "end", "OriginError"),
    b"/unasked": (200, [(CL, b"5")], b"asked", "end", "not kept"),
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
    await asyncio.sleep(0)  # a close the origin sent with the answer's end is read
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
        assert got == expected, (split, origin.transports[0].written)


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
        assert got == expected, split
