"""The pass-through's framing and request heads, both ways (the relay and the ASGI way),
against raw loopback origins that read requests as a real server does: what the proxy
forwards is framed by the proxy alone, whatever the client's ``Connection`` names; a
request head is bounded; ``Host`` is one; an answer has one ``Date``."""

from __future__ import annotations

import pytest

from tests.test_http1 import ok
from tests.test_relay import raw_exchange, raw_origin, servers

PERSON = "Mozilla/5.0 (X11; Linux x86_64) Chrome/120"


def path_of(request: bytes) -> bytes:
    return request.split(b" ", 2)[1]


async def answer_with_path(conn: int, index: int, request: bytes) -> bytes:
    """Each request answered with its own path, and the cookie it came with."""
    cookie = b""
    for line in request.split(b"\r\n"):
        if line.lower().startswith(b"cookie:"):
            cookie = line.split(b":", 1)[1].strip()
    return ok(b"answer for " + path_of(request) + b" cookie=" + cookie)


def send_on(base: str, data: bytes) -> bytes:
    """``data`` on a new connection; the answer, whole (read until the server is quiet)."""
    return raw_exchange(base, data)[0]


@pytest.mark.parametrize(
    "attack",
    [
        # The body is a second request, left open for the next client's to complete.
        b"POST /store HTTP/1.1\r\nHost: site.test\r\nConnection: content-length\r\n"
        b"Content-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s",
        b"POST /store HTTP/1.1\r\nHost: site.test\r\nConnection: keep-alive, Content-Length\r\n"
        b"Content-Length: %d\r\n\r\n%s",
        b"GET /store HTTP/1.1\r\nHost: site.test\r\nConnection: content-length\r\n"
        b"Content-Length: %d\r\n\r\n%s",
    ],
    ids=["post", "post-listed", "get-with-body"],
)
def test_a_connection_token_naming_content_length_smuggles_no_request(
    tmp_path, attack: bytes
) -> None:
    """An attacker's request whose ``Connection`` names ``Content-Length``, its body a
    second request left unfinished; then a victim's request on another client connection,
    sent on the same kept-alive origin connection: the victim gets the answer to its own
    request, and the origin saw exactly the two requests sent, the attacker's body whole."""
    smuggled = b"GET /echo?smuggled=1 HTTP/1.1\r\nX-Ignore: "
    victim = (
        b"GET /account HTTP/1.1\r\nHost: site.test\r\nUser-Agent: %s\r\n"
        b"Cookie: session=victim\r\n\r\n" % PERSON.encode()
    )
    with raw_origin(answer_with_path) as (url, origin), servers(tmp_path, url) as (fast, plain, _):
        for base in (fast, plain):
            origin.requests.clear()
            attacker = send_on(base, attack % (len(smuggled), smuggled))
            assert attacker.startswith(b"HTTP/1.1 200 ") and b"answer for /store" in attacker
            answer = send_on(base, victim)
            assert answer.startswith(b"HTTP/1.1 200 "), answer
            assert answer.endswith(b"answer for /account cookie=session=victim"), answer
            assert [path_of(r) for r in origin.requests] == [b"/store", b"/account"]
            assert origin.requests[0].endswith(b"\r\n\r\n" + smuggled)
            assert origin.connections == 1  # the one kept-alive connection, reused
            origin.connections = 0


def test_a_connection_token_does_not_remove_what_the_proxy_writes_from_the_client(
    tmp_path,
) -> None:
    """``Connection`` naming Host and X-Forwarded-*: the origin still learns the client's
    Host, the front server's X-Forwarded-For (extended) and the scheme, both ways."""
    ask = (
        b"GET /page HTTP/1.1\r\nHost: site.test\r\nUser-Agent: %s\r\n"
        b"Connection: host, x-forwarded-for, x-forwarded-proto, x-forwarded-host\r\n"
        b"X-Forwarded-For: 203.0.113.9\r\nX-Forwarded-Proto: https\r\n\r\n" % PERSON.encode()
    )
    with raw_origin(answer_with_path) as (url, origin), servers(tmp_path, url) as (fast, plain, n):
        for base in (fast, plain):
            origin.requests.clear()
            assert send_on(base, ask).startswith(b"HTTP/1.1 200 ")
            head = origin.requests[0].lower()
            assert b"\r\nx-forwarded-for: 203.0.113.9, 127.0.0.1\r\n" in head
            assert b"\r\nx-forwarded-proto: https\r\n" in head
            assert b"\r\nx-forwarded-host: site.test\r\n" in head
        assert n.answered == 1  # the relay, then the ASGI way


def test_an_origins_connection_token_does_not_remove_its_content_length(tmp_path) -> None:
    """The origin's ``Connection`` naming its own Content-Length: the client gets the
    answer with that length, not chunked, both ways."""

    async def script(conn: int, index: int, request: bytes) -> bytes:
        return ok(b"hello", b"Connection: content-length, x-private\r\nX-Private: 1\r\n")

    ask = b"GET /page HTTP/1.1\r\nHost: site.test\r\nUser-Agent: %s\r\n\r\n" % PERSON.encode()
    with raw_origin(script) as (url, _), servers(tmp_path, url) as (fast, plain, _):
        for base in (fast, plain):
            head, body = send_on(base, ask).split(b"\r\n\r\n", 1)
            lines = head.lower().split(b"\r\n")
            assert b"content-length: 5" in lines and b"x-private: 1" not in lines, head
            assert not any(line.startswith(b"transfer-encoding") for line in lines)
            assert body == b"hello"
