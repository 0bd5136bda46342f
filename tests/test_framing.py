"""The pass-through's framing and request heads, both ways (the relay and the ASGI way),
against raw loopback origins that read requests as a real server does: what the proxy
forwards is framed by the proxy alone, whatever the client's ``Connection`` names; a
request head is bounded; ``Host`` is one; an answer has one ``Date``; the worker's pid is
told only when the settings ask for it."""

from __future__ import annotations

import http.client
import select
import socket
import threading
import time
from statistics import median

import pytest

from snapshotd.config.loading import load_settings
from snapshotd.config.settings import Settings, SiteSettings
from snapshotd.server.app import create_app
from tests.servers import serve_asgi
from tests.test_http1 import ok
from tests.test_proxy_stream import NoRender, store_page
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


def trickle(
    base: str, head: bytes, piece: bytes, *, most: int = 8 * 2**20, seconds: float = 15.0,
    through_answers: bool = False, pace: float = 0.0002,
) -> tuple[bytes, int, float]:
    """``head``, then ``piece`` after ``piece`` in small writes ``pace`` seconds apart (the
    server reads each alone), until the server answers (or, ``through_answers``, closes),
    ``most`` bytes are sent or ``seconds`` pass; what the server sent back until it closed,
    the bytes sent and the seconds taken."""
    host, port = base.removeprefix("http://").split(":")
    started = time.monotonic()
    sent = 0
    got = b""
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            sock.sendall(head)
            while sent < most and time.monotonic() - started < seconds:
                if select.select([sock], [], [], 0)[0]:
                    if not through_answers or not (data := sock.recv(65536)):
                        break
                    got += data
                sock.sendall(piece)
                sent += len(piece)
                time.sleep(pace)
        except (BrokenPipeError, ConnectionResetError):
            pass
        try:
            while data := sock.recv(65536):
                got += data
        except (TimeoutError, ConnectionResetError):
            pass
    return got, sent, time.monotonic() - started


ENDLESS = [
    (b"GET /a", b"a" * 64, 414),  # the request target
    (b"GET / HTTP/1.1\r\nHost: site.test\r\nX-Long: ", b"a" * 64, 431),  # a header's value
    (b"GET / HTTP/1.1\r\nHost: site.test\r\nX-", b"a" * 64, 431),  # a header's name
    # Header after header, each within bounds.
    (b"GET / HTTP/1.1\r\nHost: site.test\r\n", b"X-Many: " + b"a" * 54 + b"\r\n", 431),
]


@pytest.mark.parametrize(
    ("head", "piece", "status"), ENDLESS, ids=["target", "value", "name", "many"]
)
def test_an_endless_request_head_is_refused_at_its_bound_and_closed(
    tmp_path, head: bytes, piece: bytes, status: int
) -> None:
    """A client trickling an endless request line or head in small writes: 414 (the target)
    or 431 (the headers), and the connection closed, once the bound is passed (what the
    server holds of it no more than that), both ways."""
    with raw_origin(answer_with_path) as (url, origin), servers(tmp_path, url) as (fast, plain, _):
        for base in (fast, plain):
            answer, sent, took = trickle(base, head, piece, seconds=60)
            assert answer.startswith(b"HTTP/1.1 %d " % status), (answer[:100], sent, took)
            assert b"\r\nconnection: close\r\n" in answer.lower()
            assert sent < 256 * 2**10, (sent, took)
        assert origin.requests == []


def test_a_client_still_sending_when_refused_reads_the_refusal_then_the_end(tmp_path) -> None:
    """A client that writes the whole of an oversized request before it reads, as a client
    sending its request in one go does (4 MiB of target, far more than the socket buffers
    hold): every byte is taken, then the 414 is read and the connection ends, with no reset
    (a server closing with the client's bytes unread resets the connection, and the reset
    can throw the refusal away), both ways; the server ends the connection once the client
    ends its side."""
    ask = b"GET /a?q=" + b"a" * (4 * 2**20) + b" HTTP/1.1\r\nHost: site.test\r\n\r\n"
    with raw_origin(answer_with_path) as (url, origin), servers(tmp_path, url) as (fast, plain, _):
        for base in (fast, plain):
            host, port = base.removeprefix("http://").split(":")
            with socket.create_connection((host, int(port)), timeout=30) as sock:
                sock.sendall(ask)  # raises on a reset
                sock.shutdown(socket.SHUT_WR)
                answer = b""
                while data := sock.recv(65536):  # raises on a reset
                    answer += data
            assert answer.startswith(b"HTTP/1.1 414 "), answer[:100]
            assert b"\r\nconnection: close\r\n" in answer.lower()
        assert origin.requests == []


def test_a_client_that_goes_on_sending_after_its_refusal_is_closed(tmp_path, monkeypatch) -> None:
    """What a refused client sends on is read and dropped for the linger's time at most:
    one that never stops sending is then closed all the same."""
    monkeypatch.setattr("snapshotd.server.protocol.LINGER_SECONDS", 0.5)
    with raw_origin(answer_with_path) as (url, _), servers(tmp_path, url) as (fast, _, _):
        host, port = fast.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(b"GET /a?q=" + b"a" * (16 * 2**10))
            answer, ended = b"", False
            try:
                for _ in range(100_000):  # a hang's bound: far more than the linger takes
                    readable = select.select([sock], [], [], 0.001)[0]
                    if readable and not (data := sock.recv(65536)):
                        ended = True
                        break
                    if readable:
                        answer += data
                    sock.sendall(b"a" * 1024)
            except (BrokenPipeError, ConnectionResetError):
                ended = True
        assert answer.startswith(b"HTTP/1.1 414 "), answer[:100]
        assert ended


def test_a_head_within_its_bounds_trickled_is_answered(tmp_path) -> None:
    """Just under the bounds, sent a few bytes at a time: a target of 8,000 bytes and three
    header lines of 7,000 (a head of 29 KiB) are passed through whole."""
    target = b"/page?q=" + b"a" * 7990
    lines = b"".join(b"X-H%d: %s\r\n" % (i, b"b" * 7000) for i in range(3))
    ask = b"GET %s HTTP/1.1\r\nHost: site.test\r\nUser-Agent: %s\r\n%s\r\n" % (
        target, PERSON.encode(), lines
    )
    with raw_origin(answer_with_path) as (url, origin), servers(tmp_path, url) as (fast, plain, _):
        for base in (fast, plain):
            origin.requests.clear()
            host, port = base.removeprefix("http://").split(":")
            with socket.create_connection((host, int(port)), timeout=5) as sock:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                for i in range(0, len(ask), 97):
                    sock.sendall(ask[i : i + 97])
                    time.sleep(0.0002)
                answer = sock.recv(65536)
            assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
            assert origin.requests[0].startswith(b"GET " + target + b" HTTP/1.1\r\n")
            assert origin.requests[0].count(b"b" * 7000) == 3


def test_endless_heads_do_not_hold_up_other_clients(tmp_path) -> None:
    """Four clients trickling endless headers over and over for two seconds: a health check
    on another connection is answered meanwhile about as fast as before and after, and each
    trickling connection is refused within its bound.

    "About as fast" is a ratio to the same checks without the attack, on the same machine
    in the same test, with a margin set by their own spread: the typical check during the
    attack (the median) within ten times the slow ones without it (the 90th percentile)."""
    trickled: list[tuple[bytes, int, float]] = []
    with raw_origin(answer_with_path) as (url, _), servers(tmp_path, url) as (fast, _, _):
        host, port = fast.removeprefix("http://").split(":")

        def health_times(seconds: float) -> list[float]:
            times = []
            client = http.client.HTTPConnection(host, int(port), timeout=60)
            ends = time.monotonic() + seconds
            while time.monotonic() < ends:
                started = time.monotonic()
                client.request("GET", "/_snapshotd/healthz")
                assert client.getresponse().read() == b'{"status":"ok"}'
                times.append(time.monotonic() - started)
                time.sleep(0.01)
            client.close()
            return times

        quiet = health_times(1.0)
        stop = time.monotonic() + 2.0

        def attack() -> None:
            while time.monotonic() < stop:
                trickled.append(trickle(fast, ENDLESS[1][0], ENDLESS[1][1], seconds=60))

        attackers = [threading.Thread(target=attack) for _ in range(4)]
        for thread in attackers:
            thread.start()
        during = health_times(2.0)
        for thread in attackers:
            thread.join()
        quiet += health_times(1.0)
    typical, slow = median(during), sorted(quiet)[len(quiet) * 9 // 10]
    print(f"health check without the attack: {slow * 1000:.1f} ms at the 90th percentile, "
          f"during it: {typical * 1000:.1f} ms at the median; "
          f"{len(trickled)} endless heads refused")
    assert trickled and all(a.startswith(b"HTTP/1.1 431 ") and n < 256 * 2**10
                            for a, n, _ in trickled)
    assert typical < 10 * slow, (sorted(quiet), sorted(during))


def test_endless_trailers_of_a_chunked_body_are_refused_at_the_heads_bound(tmp_path) -> None:
    """A chunked upload whose trailers never end, trickled: the connection is closed within
    the head's bound, both ways."""
    head = (
        b"POST /upload HTTP/1.1\r\nHost: site.test\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5\r\nhello\r\n0\r\nX-Trailer: "
    )
    with raw_origin(answer_with_path) as (url, _), servers(tmp_path, url) as (fast, plain, _):
        for base in (fast, plain):
            answer, sent, took = trickle(
                base, head, b"a" * 64, through_answers=True, seconds=60
            )
            assert sent < 256 * 2**10, (sent, took, answer[:100])


def test_a_host_is_one_and_its_trailing_dot_names_the_same_site(tmp_path) -> None:
    """``Host: shop.test.`` is the site of ``shop.test`` (the same DNS name, fully
    qualified), not the default site; two Host headers get 400 and reach no origin; both
    ways."""
    with raw_origin(answer_with_path) as (shop_url, shop), raw_origin(
        answer_with_path
    ) as (other_url, other):
        sites = (
            SiteSettings(name="shop", origin=shop_url, hosts=("shop.test",)),
            SiteSettings(name="other", origin=other_url),
        )
        settings = Settings(db=str(tmp_path / "s.db"), sites=sites)
        app, other_app = (create_app(settings, renderer=NoRender(), crawler=False)
                          for _ in range(2))

        async def asgi_way(scope, receive, send):  # type: ignore[no-untyped-def]
            await other_app(scope, receive, send)  # without answer_at_once: the ASGI way

        with serve_asgi(app) as fast, serve_asgi(asgi_way) as plain:
            for base in (fast, plain):
                for host in (b"shop.test.", b"SHOP.test.:8080"):
                    ask = b"GET /p HTTP/1.1\r\nHost: %s\r\nUser-Agent: %s\r\n\r\n" % (
                        host, PERSON.encode()
                    )
                    asked = len(shop.requests)
                    assert send_on(base, ask).startswith(b"HTTP/1.1 200 ")
                    assert len(shop.requests) == asked + 1 and other.requests == []
                two = (
                    b"GET /p HTTP/1.1\r\nHost: shop.test\r\nUser-Agent: %s\r\n"
                    b"Host: evil.test\r\n\r\n" % PERSON.encode()
                )
                answer = send_on(base, two)
                assert answer.startswith(b"HTTP/1.1 400 ") and b"Host" in answer, answer
        assert len(shop.requests) == 4 and other.requests == []


def test_a_configured_hosts_trailing_dot_names_the_same_host() -> None:
    settings = load_settings(
        overrides={"origin": "http://127.0.0.1:3000", "hosts": "Shop.test."}, env={}
    )
    assert settings.sites[0].hosts == ("shop.test",)
    shop = settings.sites[0]
    assert settings.site_for_host("shop.test") is shop
    assert settings.site_for_host("SHOP.test.:8080") is shop
    assert settings.site_for_host("shop.test..") is None


def dates(answer: bytes) -> list[bytes]:
    head = answer.split(b"\r\n\r\n", 1)[0]
    return [line[5:].strip() for line in head.split(b"\r\n") if line.lower().startswith(b"date:")]


def test_a_passed_through_answer_has_one_date_the_origins(tmp_path) -> None:
    """The origin's Date, and no other, both ways; an origin that sends none gets the
    server's; answers snapshotd makes itself have one."""
    origin_date = b"Mon, 01 Jan 2001 00:00:00 GMT"

    async def script(conn: int, index: int, request: bytes) -> bytes:
        if path_of(request) == b"/undated":
            return ok(b"hello")
        return ok(b"hello", b"Date: " + origin_date + b"\r\n")

    with raw_origin(script) as (url, _), servers(tmp_path, url) as (fast, plain, _):
        for base in (fast, plain):
            for method, body in ((b"GET", b""), (b"POST", b"Content-Length: 0\r\n")):
                ask = b"%s /dated HTTP/1.1\r\nHost: site.test\r\nUser-Agent: %s\r\n%s\r\n" % (
                    method, PERSON.encode(), body
                )
                assert dates(send_on(base, ask)) == [origin_date]
            undated = dates(send_on(base, b"GET /undated HTTP/1.1\r\nHost: a\r\n\r\n"))
            healthz = dates(send_on(base, b"GET /_snapshotd/healthz HTTP/1.1\r\nHost: a\r\n\r\n"))
            bad = dates(send_on(base, b"GET /x HTTP/1.1\r\nHost: a\r\nBad Header\r\n\r\n"))
            for answer_dates in (undated, healthz, bad):
                assert len(answer_dates) == 1 and answer_dates[0].endswith(b" GMT")
                assert answer_dates[0] != origin_date


BOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"


@pytest.mark.parametrize("told", [False, True])
def test_the_worker_pid_is_told_only_when_the_setting_says_so(tmp_path, told: bool) -> None:
    """``X-Snapshotd-Worker`` on snapshot answers (at once and the ASGI way) and on healthz
    only with ``worker_header``; by default the public learns no pid."""
    db = str(tmp_path / "s.db")
    store_page(db, "/items/1", "<html><body><p>a sturdy thing</p></body></html>")
    with raw_origin(answer_with_path) as (url, _):
        settings = Settings(db=db, sites=(SiteSettings(origin=url),), worker_header=told)
        app, other_app = (create_app(settings, renderer=NoRender(), crawler=False)
                          for _ in range(2))

        async def asgi_way(scope, receive, send):  # type: ignore[no-untyped-def]
            await other_app(scope, receive, send)

        with serve_asgi(app) as fast, serve_asgi(asgi_way) as plain:
            for base in (fast, plain):
                hit = send_on(base, b"GET /items/1 HTTP/1.1\r\nHost: a\r\nUser-Agent: %s\r\n"
                              b"\r\n" % BOT.encode())
                health = send_on(base, b"GET /_snapshotd/healthz HTTP/1.1\r\nHost: a\r\n\r\n")
                assert b"x-snapshotd-cache: hit" in hit.lower()
                for answer in (hit, health):
                    assert (b"\r\nx-snapshotd-worker: " in answer.lower()) is told, answer


def test_a_head_trickled_past_its_time_is_refused_with_408_and_closed(
    tmp_path, monkeypatch
) -> None:
    """A client sending a head within its bounds but a byte at a time, slowly, to hold the
    connection (slowloris): 408 and the connection closed once the head's time is up, the
    origin never asked; a head sent in time on another connection is answered."""
    monkeypatch.setattr("snapshotd.server.protocol.HEAD_SECONDS", 1.0)
    with raw_origin(answer_with_path) as (url, origin), servers(tmp_path, url) as (fast, _, _):
        # A byte every 0.1 s at most, 100 of them (10 s or more): the head's time counts
        # from its first byte, not from the last read, so the 408 comes while they trickle.
        answer, sent, took = trickle(
            fast, b"GET / HTTP/1.1\r\nHost: site.test\r\nX-Slow: ", b"a", most=100,
            seconds=120, pace=0.1,
        )
        assert answer.startswith(b"HTTP/1.1 408 "), (answer[:100], sent, took)
        assert b"\r\nconnection: close\r\n" in answer.lower()
        assert sent < 100 and took >= 0.9, (sent, took)  # not before the head's time is up
        assert origin.requests == []
        host, port = fast.removeprefix("http://").split(":")
        client = http.client.HTTPConnection(host, int(port), timeout=5)
        client.request("GET", "/_snapshotd/healthz")
        assert client.getresponse().status == 200
        client.close()
