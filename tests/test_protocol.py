"""serve's HTTP protocol (``snapshotd.server.protocol``): a bot's cache hit is answered before it
becomes an ASGI call, with the answer the ASGI way gives, over real sockets; pipelined
requests keep their order, connections are kept or closed as uvicorn keeps them, and a
client that sends without reading meets flow control."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import h11
import httpx
import pytest

from snapshotd.config.settings import Settings, SiteSettings
from snapshotd.rewrite import parse_rules
from snapshotd.server.app import create_app
from tests.servers import serve_asgi
from tests.test_proxy_stream import NoRender, store_page

BOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
PERSON = "Mozilla/5.0 (X11; Linux x86_64) Chrome/120"
HTML = "<html><body>" + "<p>a sturdy thing</p>" * 200 + "</body></html>"


ORIGIN_SAW: list[str] = []  # the requests the origin was asked, "METHOD /path"


async def origin_app(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
    if scope["type"] != "http":
        return
    ORIGIN_SAW.append(f"{scope['method']} {scope['path']}")
    if scope["path"] == "/slow":
        await asyncio.sleep(1.5)
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"origin " + scope["path"].encode()})


class Counted:
    """The application, its ASGI calls and its answers given at once counted. Its
    ``at_once`` is what serve's protocol is handed: the application's ``answer_at_once``,
    counted, or None when ``at_once`` is false (every request the ASGI way)."""

    def __init__(self, db: str, origin: str, *, at_once: bool, rules: str = "") -> None:
        settings = Settings(db=db, sites=(SiteSettings(origin=origin),))
        ruleset = {"default": parse_rules(rules)} if rules else None
        self.app = create_app(settings, renderer=NoRender(), crawler=False, rules=ruleset)
        self.calls = self.answered = 0
        self.asked: list[tuple[str, str, str]] = []  # method, path, what was answered at once
        self.fail = False
        self.at_once = self._answer_at_once if at_once else None

    async def __call__(self, scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        if scope["type"] == "http":
            self.calls += 1
        await self.app(scope, receive, send)

    def _answer_at_once(self, *args: Any) -> Any:
        if self.fail:
            raise RuntimeError("a fault")
        answer = self.app.answer_at_once(*args)
        self.answered += answer is not None
        self.asked.append((args[0], args[1], type(answer).__name__))
        return answer


def exchange(base: str, requests: list[bytes], *, read_after: float = 0.0) -> list[Any]:
    """Send ``requests`` in one write on one connection; the responses read back, each as
    ``(h11.Response, body)``, then ``"closed"`` if the server closed the connection."""
    host, port = base.removeprefix("http://").split(":")
    out: list[Any] = []
    with socket.socket() as sock:
        # A small receive buffer (set before connecting, so the kernel keeps to it): what a
        # client does not read backs up at the server soon.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        sock.settimeout(10)
        sock.connect((host, int(port)))
        sender = threading.Thread(target=sock.sendall, args=(b"".join(requests),))
        sender.start()
        time.sleep(read_after)
        conn = h11.Connection(h11.CLIENT)
        response, body = None, b""
        while len(out) < len(requests):
            if conn.our_state is h11.IDLE:  # h11 reads an answer to a request it was told of
                conn.send(h11.Request(method="GET", target="/", headers=[("Host", "x")]))
                conn.send(h11.EndOfMessage())
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = sock.recv(65536)
                conn.receive_data(data)
                if not data:
                    break
            elif isinstance(event, h11.Response):
                response = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                out.append((response, body))
                response, body = None, b""
                if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                    break
                conn.start_next_cycle()
        sender.join()
        sock.settimeout(3)
        with contextlib.suppress(TimeoutError):  # still open
            if sock.recv(1) == b"":
                out.append("closed")
    return out


def request(
    path: str, agent: str = BOT, extra: str = "", version: str = "1.1", method: str = "GET"
) -> bytes:
    return (
        f"{method} {path} HTTP/{version}\r\nHost: x\r\nUser-Agent: {agent}\r\n{extra}\r\n"
    ).encode()


@contextlib.contextmanager
def hit_server(tmp_path: Any, page: str = HTML, **options: Any) -> Iterator[tuple[str, Counted]]:
    """A server answering at once, ``page`` stored as the snapshot of ``/page`` and read
    into its cache by a first bot request; yields its URL and its counts."""
    db = str(tmp_path / "s.db")
    store_page(db, "/page", page)
    with serve_asgi(origin_app) as origin:
        fast = Counted(db, origin, at_once=True)
        with serve_asgi(fast, at_once=fast.at_once, **options) as base:
            httpx.get(base + "/page", headers={"User-Agent": BOT}, trust_env=False)
            yield base, fast


def test_a_hit_answered_at_once_is_the_answer_the_asgi_way_gives(tmp_path) -> None:
    db = str(tmp_path / "s.db")
    store_page(db, "/page", HTML)
    with serve_asgi(origin_app) as origin:
        fast, plain = Counted(db, origin, at_once=True), Counted(db, origin, at_once=False)
        with serve_asgi(fast, at_once=fast.at_once) as fast_url, serve_asgi(plain) as plain_url:
            warm = httpx.get(fast_url + "/page", headers={"User-Agent": BOT}, trust_env=False)
            etag = warm.headers["etag"]
            # The snapshot stays in the cache for the whole test, however slow the machine
            # (a read after its second in the cache goes the ASGI way, rightly).
            fast.app.proxy.cache.ttl = 600.0
            assert (fast.calls, fast.answered) == (1, 0)  # the first read fills the cache
            variants = [
                ("GET", {}),
                ("GET", {"Accept-Encoding": "gzip"}),
                ("HEAD", {"Accept-Encoding": "gzip"}),
                ("GET", {"If-None-Match": etag}),
                ("GET", {"Connection": "close"}),
            ]
            for method, extra in variants:
                answers = []
                for url in (fast_url, plain_url):
                    r = httpx.request(
                        method, url + "/page", headers={"User-Agent": BOT, **extra},
                        trust_env=False,
                    )
                    kept = [(k, v) for k, v in r.headers.multi_items() if k != "date"]
                    answers.append((r.status_code, kept, r.content))
                assert answers[0] == answers[1], (method, extra)
            # A path with escapes and a path the store has not are the ASGI way's; a
            # person's is passed through by a relay (tests/test_relay.py).
            for path, agent in (("/p%61ge", BOT), ("/other", BOT), ("/page", PERSON)):
                httpx.get(fast_url + path, headers={"User-Agent": agent}, trust_env=False)
    assert fast.answered == len(variants) + 1, fast.asked
    assert fast.calls == 1 + 2
    assert plain.calls == len(variants)


def test_a_hit_is_answered_at_once_whatever_uvicorn_wraps_the_application_in(tmp_path) -> None:
    """uvicorn's proxy-headers middleware (or its trace logging) wraps the application it is
    given: the fast path, handed to the protocol, stays."""
    with hit_server(tmp_path, proxy_headers=True) as (base, fast):
        calls = fast.calls
        r = httpx.get(base + "/page", headers={"User-Agent": BOT}, trust_env=False)
    assert r.status_code == 200 and r.text == HTML
    assert fast.calls == calls and fast.answered == 1


@pytest.mark.parametrize(
    ("middle", "answered"),
    [(request("/slow", PERSON), 2), (request("/slow", PERSON, method="DELETE"), 1)],
    ids=["relayed", "asgi"],
)
def test_pipelined_requests_are_answered_in_order_and_the_connection_kept(
    tmp_path, middle: bytes, answered: int
) -> None:
    """A hit answered at once, then a person's request the origin takes 1.5 s with (a GET
    passed through by a relay, or a DELETE the ASGI way), then a hit, in one write: in
    order; and the keep-alive timeout (1 s here) started by the first answer does not cut
    off the second."""
    with hit_server(tmp_path, timeout_keep_alive=1) as (base, fast):
        got = exchange(base, [request("/page"), middle, request("/page")])
    assert [r.status_code for r, _ in got[:3]] == [200, 200, 200]
    assert got[0][1].startswith(b"<html>") and got[2][1] == got[0][1]
    assert got[1][1] == b"origin /slow"
    assert got[3:] == ["closed"]  # by the keep-alive timeout, once all is answered
    assert fast.answered == answered  # the last waited for the second: the ASGI way, in turn


def test_http_1_0_and_connection_close_end_the_connection_after_a_hit(tmp_path) -> None:
    with hit_server(tmp_path) as (base, fast):
        old = exchange(base, [request("/page", version="1.0"), request("/page")])
        close = exchange(base, [request("/page", extra="Connection: close\r\n")])
    assert len(old) == 2 and old[0][0].status_code == 200 and old[1] == "closed"
    assert (dict(old[0][0].headers)[b"connection"]) == b"close"
    assert len(close) == 2 and close[0][1] == old[0][1] and close[1] == "closed"
    assert fast.answered == 2


def test_a_client_that_sends_without_reading_meets_flow_control(tmp_path) -> None:
    """300 hits of a 60 KB page (18 MB) pipelined by a client that reads nothing for a
    second: some are answered at once, until the unread answers fill the connection's
    buffers (a few MB); the rest wait their turn the ASGI way, whose flow control stops
    reading the client, and every answer comes back, in order."""
    page = "<html><body><pre>" + os.urandom(22_000).hex() + "</pre></body></html>"
    with hit_server(tmp_path, page) as (base, fast):
        got = exchange(base, [request("/page")] * 300, read_after=1.0)
    assert len(got) == 300 and all(r.status_code == 200 for r, _ in got)
    assert {body for _, body in got} == {page.encode()}
    assert 0 < fast.answered < 150 < fast.calls


def test_nothing_after_a_closing_answer_is_taken_nor_passed_to_the_origin(tmp_path) -> None:
    """HTTP/1.0 asking for keep-alive: uvicorn closes the connection after the answer; the
    requests sent behind it in the same write are neither answered nor forwarded."""
    with hit_server(tmp_path) as (base, fast):
        ORIGIN_SAW.clear()
        got = exchange(base, [
            request("/page", version="1.0", extra="Connection: keep-alive\r\n"),
            request("/page"),
            request("/order", PERSON, "Content-Length: 3\r\n", method="POST") + b"abc",
        ])
        time.sleep(0.3)
    assert len(got) == 2 and got[0][0].status_code == 200 and got[1] == "closed"
    assert fast.answered == 1 and ORIGIN_SAW == []


def test_a_rewritten_path_is_logged_as_asked_and_a_fault_goes_the_asgi_way(
    tmp_path, caplog
) -> None:
    import logging

    db = str(tmp_path / "s.db")
    store_page(db, "/page", HTML)
    rules = "RewriteEngine On\nRewriteRule ^/old$ /page"
    with serve_asgi(origin_app) as origin:
        fast = Counted(db, origin, at_once=True, rules=rules)
        plain = Counted(db, origin, at_once=False, rules=rules)
        with (
            serve_asgi(fast, at_once=fast.at_once) as fast_url,
            serve_asgi(plain) as plain_url,
            caplog.at_level(logging.INFO),
        ):
            lines = []
            for url in (fast_url, plain_url):
                httpx.get(url + "/old", headers={"User-Agent": BOT}, trust_env=False)
                caplog.clear()
                r = httpx.get(url + "/old", headers={"User-Agent": BOT}, trust_env=False)
                assert r.headers["x-snapshotd-cache"] == "HIT"
                lines += [r.getMessage() for r in caplog.records if r.name == "snapshotd.access"]
            assert fast.answered == 1
            # ... then the time, the crawler claim and the client's address.
            assert [line.rsplit(" ", 3)[0] for line in lines] == [
                "Googlebot default /old HIT 200"
            ] * 2
            fast.fail = True
            caplog.clear()
            r = httpx.get(fast_url + "/old", headers={"User-Agent": BOT}, trust_env=False)
            assert r.status_code == 200 and r.headers["x-snapshotd-cache"] == "HIT"
            assert any("answering at once failed" in m for m in caplog.messages)
