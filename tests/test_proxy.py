"""The proxy end to end: real uvicorn, real SQLite, real Chromium, the example SPA as origin."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import select
import socket
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import replace

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route

from examples.spa.app import create_app as create_spa
from snapshotd.config.settings import BrowserSettings, Settings, SiteSettings
from snapshotd.crawlers.devices import PROFILE_NAMES
from snapshotd.render import BrowserPool
from snapshotd.server.app import create_app
from snapshotd.store.outcome import CaptureOutcome
from tests.chromium import require_chromium
from tests.servers import serve_asgi

BOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
PERSON = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/120 Safari/537.36"

pytestmark = pytest.mark.browser


class Origin:
    """The example SPA plus a few routes to watch pass-through."""

    def __init__(self) -> None:
        self.hits: list[str] = []

        async def echo(request: Request) -> Response:
            body = await request.body()
            return JSONResponse(
                {
                    "method": request.method,
                    "path": request.url.path,
                    "query": request.url.query,
                    "headers": dict(request.headers),
                    "body": body.decode("latin-1"),
                }
            )

        async def stream(request: Request) -> Response:
            async def chunks():  # type: ignore[no-untyped-def]
                for i in range(5):
                    yield f"chunk{i};".encode()
                    await asyncio.sleep(0.01)

            return StreamingResponse(chunks(), media_type="text/plain")

        async def broken(request: Request) -> Response:
            return HTMLResponse("<html><body><h1>origin error page</h1></body></html>", 500)

        spa = create_spa()

        async def counting(scope, receive, send):  # type: ignore[no-untyped-def]
            if scope["type"] == "http":
                self.hits.append(scope["path"])
            await spa(scope, receive, send)

        self.app = Starlette(
            routes=[
                Route("/echo/{rest:path}", echo, methods=["GET", "POST", "PUT", "HEAD"]),
                Route("/stream", stream),
                Route("/broken", broken),
                Mount("/", counting),
            ]
        )


class CountingRenderer(BrowserPool):
    def __init__(self, browser: BrowserSettings) -> None:
        super().__init__(browser)
        self.urls: list[str] = []
        self.renders: list[tuple[str, str]] = []  # (url, profile)

    async def capture(self, url, site, profile="desktop"):  # type: ignore[no-untyped-def]
        self.urls.append(url)
        self.renders.append((url, profile))
        return await super().capture(url, site, profile)


class Env:
    def __init__(self, base: str, origin: str, db: str, renderer: CountingRenderer) -> None:
        self.base, self.origin, self.db, self.renderer = base, origin, db, renderer
        self.client = httpx.Client(base_url=base, timeout=60, trust_env=False)

    def bot(self, path: str, **headers: str) -> httpx.Response:
        return self.client.get(path, headers={"User-Agent": BOT, **headers})

    def rows(self) -> dict[str, tuple]:
        conn = sqlite3.connect(self.db)
        try:
            return {r[0]: r[1:] for r in conn.execute("SELECT path, state, priority FROM paths")}
        finally:
            conn.close()


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> Iterator[Env]:
    chromium = require_chromium()
    origin = Origin()
    db = str(tmp_path_factory.mktemp("proxy") / "snap.db")
    with serve_asgi(origin.app) as origin_url:
        browser = BrowserSettings(
            concurrency=2, executable=chromium, javascript_timeout=0.3, render_timeout=45
        )
        site = SiteSettings(name="shop", origin=origin_url, ignore=("/cart",))
        other = SiteSettings(name="blog", origin=origin_url, hosts=("blog.test",))
        settings = Settings(db=db, miss_wait=50.0, browser=browser, sites=(other, site))
        renderer = CountingRenderer(browser)
        app = create_app(settings, renderer=renderer, crawler=False)
        with serve_asgi(app) as base:
            e = Env(base, origin_url, db, renderer)
            e.hits = origin.hits  # type: ignore[attr-defined]
            yield e
            e.client.close()


def test_bot_gets_a_rendered_snapshot_then_a_hit_and_a_person_gets_the_app(env: Env) -> None:
    first = env.bot("/items/3")
    assert first.status_code == 200
    assert first.headers["x-snapshotd-cache"] == "MISS"
    assert "Item 3 is a sturdy thing" in first.text
    assert "<script" not in first.text  # executable scripts are stripped
    assert first.headers["content-type"] == "text/html; charset=utf-8"
    assert "User-Agent" in first.headers["vary"]
    assert first.headers["last-modified"].endswith("GMT")

    second = env.bot("/items/3")
    assert second.headers["x-snapshotd-cache"] == "HIT"
    assert second.text == first.text
    assert env.renderer.urls.count(env.origin + "/items/3") == len(PROFILE_NAMES)

    person = env.client.get("/items/3", headers={"User-Agent": PERSON})
    assert "x-snapshotd-cache" not in person.headers
    assert "Loading" in person.text and "<script" in person.text
    # A new path a bot asked for is queued behind every known one (the miss renders it).
    assert env.rows()["/items/3"] == ("processed", 0)


def test_etag_304_and_gzip(env: Env) -> None:
    r = env.bot("/items/4")
    etag = r.headers["etag"]
    again = env.bot("/items/4", **{"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b""
    raw = env.client.get(
        "/items/4", headers={"User-Agent": BOT, "Accept-Encoding": "gzip"}, extensions={}
    )
    assert raw.headers["content-encoding"] == "gzip"
    plain = env.client.get("/items/4", headers={"User-Agent": BOT, "Accept-Encoding": "identity"})
    assert "content-encoding" not in plain.headers
    assert plain.text == raw.text
    assert int(plain.headers["content-length"]) == len(plain.content)
    head = env.client.head("/items/4", headers={"User-Agent": BOT})
    assert head.status_code == 200 and head.content == b""


def test_concurrent_misses_share_one_render(env: Env) -> None:
    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=env.base, timeout=60, trust_env=False) as c:
            return await asyncio.gather(
                *(c.get("/items/5", headers={"User-Agent": BOT}) for _ in range(6))
            )

    responses = asyncio.run(burst())
    assert all(r.status_code == 200 for r in responses)
    assert all("Item 5 is a sturdy" in r.text for r in responses)
    assert {r.headers["x-snapshotd-cache"] for r in responses} == {"MISS"}
    # One capture: the first profile once, another at most once.
    profiles = [p for u, p in env.renderer.renders if u == env.origin + "/items/5"]
    assert profiles[:1] == [PROFILE_NAMES[0]] and sorted(set(profiles)) == sorted(profiles)


def test_expired_snapshot_is_served_stale_and_requeued(env: Env) -> None:
    env.bot("/items/6")
    conn = sqlite3.connect(env.db)
    conn.execute("UPDATE paths SET expires_at = ? WHERE path = '/items/6'", (time.time() - 1,))
    conn.commit()
    conn.close()
    r = env.bot("/items/6")
    assert r.headers["x-snapshotd-cache"] == "STALE"
    assert "Item 6 is a sturdy" in r.text
    assert env.rows()["/items/6"] == ("pending", 0)


def test_meta_status_404_is_served_as_404(env: Env) -> None:
    r = env.bot("/no/such/page")
    assert r.status_code == 404
    assert "Page not found" in r.text
    assert "prerender-status-code" not in r.text


def test_escaped_fragment_maps_to_hashbang(env: Env) -> None:
    r = env.client.get("/?_escaped_fragment_=/faq", headers={"User-Agent": PERSON})
    assert r.status_code == 200 and r.headers["x-snapshotd-cache"] == "MISS"
    assert "This page lives at a hashbang URL" in r.text
    assert env.renderer.urls[-1] == env.origin + "/#!/faq"
    assert "/#!/faq" in env.rows()
    # the bot's own pretty URL and the ugly one share the cache entry
    again = env.client.get("/?_escaped_fragment_=%2Ffaq")
    assert again.headers["x-snapshotd-cache"] == "HIT"


def test_failed_render_fails_open_to_the_origin(env: Env) -> None:
    r = env.bot("/broken")
    assert r.status_code == 500
    assert r.headers["x-snapshotd-cache"] == "BYPASS"
    assert "origin error page" in r.text
    assert env.rows()["/broken"][0] == "error"


def test_pass_through_keeps_method_body_and_headers(env: Env) -> None:
    body = b"x" * 300_000
    r = env.client.post(
        "/echo/a%20b?q=1&q=2",
        content=body,
        headers={
            "User-Agent": BOT,
            "Connection": "keep-alive, X-Drop",
            "X-Drop": "1",
            "X-Keep": "yes",
            "Host": "shop.test",
        },
    )
    data = r.json()
    assert data["method"] == "POST" and data["body"].encode("latin-1") == body
    assert data["path"] == "/echo/a b" and data["query"] == "q=1&q=2"
    h = data["headers"]
    assert h["x-keep"] == "yes" and "x-drop" not in h
    assert h["x-forwarded-for"] == "127.0.0.1"
    assert h["x-forwarded-proto"] == "http" and h["x-forwarded-host"] == "shop.test"
    assert "x-snapshotd-cache" not in r.headers


def test_a_front_servers_forwarding_headers_are_extended_not_repeated(env: Env) -> None:
    """Behind a front server on this host (nginx's recipe): the origin sees the client, then
    the front server, in X-Forwarded-For, and the scheme the client used at the front."""
    fronted = {"X-Forwarded-For": "203.0.113.9", "X-Forwarded-Proto": "https"}
    h = env.client.get("/echo/x", headers={"User-Agent": PERSON, **fronted}).json()["headers"]
    assert h["x-forwarded-for"] == "203.0.113.9, 127.0.0.1"
    assert h["x-forwarded-proto"] == "https"
    # A made-up scheme is not passed on.
    made_up = {"X-Forwarded-Proto": "gopher"}
    h = env.client.get("/echo/x", headers={"User-Agent": PERSON, **made_up}).json()["headers"]
    assert h["x-forwarded-for"] == "127.0.0.1" and h["x-forwarded-proto"] == "http"


def test_pass_through_streams_and_static_assets_go_to_origin(env: Env) -> None:
    with env.client.stream("GET", "/stream") as r:
        chunks = list(r.iter_raw())
    assert b"".join(chunks) == b"".join(f"chunk{i};".encode() for i in range(5))
    js = env.bot("/app.js")
    assert "x-snapshotd-cache" not in js.headers and "onCaptureReady" in js.text
    assert "/app.js" not in env.rows()


def test_ignored_paths_and_own_renders_are_passed_through(env: Env) -> None:
    r = env.bot("/cart/checkout")
    assert "x-snapshotd-cache" not in r.headers
    r = env.bot("/about", **{"X-Snapshotd": "1"})
    assert "x-snapshotd-cache" not in r.headers and "Loading" in r.text
    rows = env.rows()
    assert "/cart/checkout" not in rows and "/about" not in rows


def test_sites_are_chosen_by_host(env: Env) -> None:
    r = env.bot("/items/7", Host="blog.test")
    assert r.headers["x-snapshotd-cache"] == "MISS"
    conn = sqlite3.connect(env.db)
    sites = {row[0] for row in conn.execute("SELECT site FROM paths WHERE path = '/items/7'")}
    conn.close()
    assert sites == {"blog"}


@pytest.mark.parametrize(
    "target,status",
    [
        ("/items/%01x", 400),  # encoded control character
        ("/items/%FF%FE", 400),  # not UTF-8
        ("/items/%zz", 400),  # broken escape
        ("/?_escaped_fragment_=%E0%A4", 400),  # fragment that does not decode
        ("/?_escaped_fragment_=%0a", 400),
        ("/items?" + "q=" + "a" * 9000, 414),
    ],
)
def test_bad_input_is_a_clear_4xx_and_queues_nothing(env: Env, target: str, status: int) -> None:
    before = env.rows()
    r = env.bot(target)
    assert r.status_code == status
    assert env.rows() == before


def _raw_request(base: str, request: bytes) -> bytes:
    """Every byte the server sends back to ``request`` (which says ``Connection: close``)
    until it closes. The client keeps its end open: a server may close on a client that
    half-closed before it wrote its answer. A server that refuses early closes with the
    rest unread, which resets the connection: a send that meets the reset ends the sending,
    and what the server wrote before it is still read."""
    host, port = base.removeprefix("http://").split(":")
    data = b""
    with socket.create_connection((host, int(port)), timeout=10) as s:
        try:
            # Send in pieces and stop as soon as the server answers (it may refuse early).
            for i in range(0, len(request), 65536):
                s.sendall(request[i : i + 65536])
                if select.select([s], [], [], 0.005)[0]:
                    break
        except (ConnectionResetError, BrokenPipeError):
            pass
        try:
            while chunk := s.recv(65536):
                data += chunk
        except ConnectionResetError:
            pass
    return data


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /items/1 HTTP/1.1\r\nHost: bad host!\r\nUser-Agent: Googlebot\r\n\r\n",
        b"GET /items/1 HTTP/1.1\r\nHost: a/b\r\nUser-Agent: Googlebot\r\n\r\n",
        b"GET /it\x01ems HTTP/1.1\r\nHost: x\r\nUser-Agent: Googlebot\r\n\r\n",
        b"GET /items/\xff HTTP/1.1\r\nHost: x\r\nUser-Agent: Googlebot\r\n\r\n",
        b"GET /items?q=" + b"a" * 10_000_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    ],
    ids=["host-space", "host-slash", "control-char", "non-utf8", "10mb-query"],
)
def test_malformed_requests_are_4xx(env: Env, request_bytes: bytes) -> None:
    before = env.rows()
    ask = request_bytes.replace(b"\r\n", b"\r\nConnection: close\r\n", 1)
    answer = _raw_request(env.base, ask)
    status = int(answer.split(b" ", 2)[1])
    assert 400 <= status < 500, answer[:200]
    assert env.rows() == before


def test_502_page_when_origin_is_down(tmp_path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    settings = Settings(db=str(tmp_path / "d.db"), sites=(SiteSettings(origin=dead),))

    class NoRender:
        async def start(self) -> None: ...
        async def close(self) -> None: ...
        async def capture(self, url, site, profile="desktop"):  # type: ignore[no-untyped-def]
            raise AssertionError("nothing renders here")

    with serve_asgi(create_app(settings, renderer=NoRender(), crawler=False)) as base:
        r = httpx.get(base + "/anything", headers={"User-Agent": PERSON}, trust_env=False)
    assert r.status_code == 502
    assert "text/html" in r.headers["content-type"] and "Bad Gateway" in r.text
    assert "Traceback" not in r.text


def test_gzip_body_is_what_is_stored(env: Env) -> None:
    env.bot("/items/3")  # captured by now, whichever test ran first
    raw = httpx.get(
        env.base + "/items/3",
        headers={"User-Agent": BOT, "Accept-Encoding": "gzip"},
        trust_env=False,
    )
    # httpx decodes; check the bytes on the wire are gzip by asking for the raw stream
    with (
        httpx.Client(trust_env=False) as c,
        c.stream(
            "GET", env.base + "/items/3", headers={"User-Agent": BOT, "Accept-Encoding": "gzip"}
        ) as r,
    ):
        wire = b"".join(r.iter_raw())
    assert gzip.decompress(wire).decode() == raw.text
    assert json.dumps(raw.headers.get("x-snapshotd-cache")) == '"HIT"'


def test_settings_are_frozen() -> None:
    s = Settings()
    with pytest.raises(AttributeError):
        s.port = 1  # type: ignore[misc]
    assert replace(s, port=1).port == 1


def test_a_store_fault_fails_open_to_the_origin(tmp_path) -> None:
    class BrokenStore:
        """A real SQLite store whose snapshot reads fail, as a corrupt file would."""

        def __init__(self, inner):  # type: ignore[no-untyped-def]
            self.inner = inner

        def __getattr__(self, name):  # type: ignore[no-untyped-def]
            return getattr(self.inner, name)

        async def get_snapshot(self, site, path):  # type: ignore[no-untyped-def]
            raise sqlite3.DatabaseError("database disk image is malformed")

    from snapshotd.store.sqlite import SQLiteStore

    origin = Origin()
    with serve_asgi(origin.app) as origin_url:
        settings = Settings(db=str(tmp_path / "b.db"), sites=(SiteSettings(origin=origin_url),))
        store = BrokenStore(SQLiteStore(settings.db))

        class NoRender:
            async def start(self) -> None: ...
            async def close(self) -> None: ...

        app = create_app(settings, store=store, renderer=NoRender(), crawler=False)  # type: ignore[arg-type]
        with serve_asgi(app) as base:
            r = httpx.get(base + "/about", headers={"User-Agent": BOT}, trust_env=False)
    assert r.status_code == 200
    assert r.headers["x-snapshotd-cache"] == "BYPASS"
    assert "Loading" in r.text


def _no_render_app(tmp_path, origin_url: str):  # type: ignore[no-untyped-def]
    class NoRender:
        async def start(self) -> None: ...
        async def close(self) -> None: ...
        async def capture(self, url, site, profile="desktop"):  # type: ignore[no-untyped-def]
            raise AssertionError("nothing renders here")

    settings = Settings(db=str(tmp_path / "p.db"), sites=(SiteSettings(origin=origin_url),))
    return create_app(settings, renderer=NoRender(), crawler=False)


def test_pass_through_adds_no_headers_and_shares_no_cookies(tmp_path) -> None:
    async def login(request: Request) -> Response:
        response = JSONResponse({"ok": True})
        response.set_cookie("session", "alice-secret")
        response.set_cookie("theme", "dark")
        return response

    async def echo(request: Request) -> Response:
        return JSONResponse({"headers": [[k, v] for k, v in request.headers.items()]})

    origin = Starlette(
        routes=[Route("/login", login), Route("/echo", echo, methods=["GET", "POST"])]
    )
    with serve_asgi(origin) as origin_url, serve_asgi(_no_render_app(tmp_path, origin_url)) as base:
        raw = b"GET /login HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n"
        answer = _raw_request(base, raw)
        assert answer.count(b"set-cookie:") == 2, answer
        # Several requests, over the session's pooled connections.
        answers = [
            _raw_request(base, raw.replace(b"/login", b"/echo"))
            for _ in range(16)
        ]
        # A body without a Content-Type is not given one.
        post = b"POST /echo HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n"
        bodies = (b"Content-Length: 5\r\n\r\nhello", b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
        for body in bodies:
            answers.append(_raw_request(base, post + body))
    sent = [json.loads(a.split(b"\r\n\r\n", 1)[1])["headers"] for a in answers]
    assert ["content-length", "5"] in sent[-2]
    assert not {k for k, _ in sent[-2] + sent[-1]} & {"content-type"}
    assert not [h for h in sent if any(k == "cookie" for k, _ in h)]
    for headers in sent:
        assert not {k for k, _ in headers} & {"accept", "accept-encoding", "user-agent"}, headers


def _stored(db: str, path: str, html: str, *, status: int = 200, expires_in: float = 3600,
            headers: dict[str, str] | None = None) -> None:
    from snapshotd.store.sqlite import SQLiteStore

    async def put() -> None:
        async with SQLiteStore(db) as store:
            await store.enqueue("default", path, 2)
            await store.claim_path("default", path, "test", 60)
            await store.complete(
                "default", path, "test", CaptureOutcome(
                    html=html, status=status, headers=headers or {},
                    final_url="http://origin" + path, expires_at=time.time() + expires_in),
            )

    asyncio.run(put())


@pytest.mark.parametrize(
    ("accept_encoding", "gzipped"),
    [
        ("gzip", True),
        ("gzip;q=0", False),
        ("GZIP;Q=0", False),
        ("gzip; q=0.000", False),
        ("gzip;q=0.5;foo=bar", True),
        ("gzip;q=bogus, deflate", False),
        ("*;q=0, gzip", True),
        ("gzip;q=0, *", False),
        ("identity", False),
        ("br, *;q=0.1", True),
    ],
)
def test_accept_encoding_q_values(tmp_path, accept_encoding: str, gzipped: bool) -> None:
    html = "<html><body><h1>stored page</h1></body></html>"
    origin = Starlette(routes=[Route("/", lambda r: HTMLResponse("origin"))])
    with serve_asgi(origin) as origin_url:
        app = _no_render_app(tmp_path, origin_url)
        _stored(str(tmp_path / "p.db"), "/", html)
        with serve_asgi(app) as base, httpx.Client(trust_env=False) as c:
            headers = {"User-Agent": BOT, "Accept-Encoding": accept_encoding}
            with c.stream("GET", base + "/", headers=headers) as r:
                wire = b"".join(r.iter_raw())
    assert r.headers["x-snapshotd-cache"] == "HIT"
    assert ("content-encoding" in r.headers) is gzipped
    assert (gzip.decompress(wire) if gzipped else wire).decode() == html


class _CountingNoRender:
    def __init__(self) -> None:
        self.urls: list[str] = []

    async def start(self) -> None: ...
    async def close(self) -> None: ...

    async def capture(self, url, site, profile="desktop"):  # type: ignore[no-untyped-def]
        from snapshotd.render.renderer import CaptureResult

        self.urls.append(url)
        return CaptureResult(url=url, final_url=url, status=0, html="", error="origin down")


def _failed(db: str, path: str, retry_in: float) -> None:
    from snapshotd.store.sqlite import SQLiteStore

    async def fail() -> None:
        async with SQLiteStore(db) as store:
            await store.enqueue("default", path, 2, force=True)
            await store.claim_path("default", path, "test", 60)
            await store.fail(
                "default", path, "test", error="timed out", retry_at=time.time() + retry_in
            )

    asyncio.run(fail())


def test_bot_requests_do_not_skip_the_retry_backoff_of_a_failed_capture(tmp_path) -> None:
    db = str(tmp_path / "p.db")
    origin = Starlette(routes=[Route("/{p:path}", lambda r: HTMLResponse("origin page"))])
    renderer = _CountingNoRender()
    with serve_asgi(origin) as origin_url:
        settings = Settings(db=db, miss_wait=5, sites=(SiteSettings(origin=origin_url),))
        app = create_app(settings, renderer=renderer, crawler=False)  # type: ignore[arg-type]
        _stored(db, "/kept", "<html><body><h1>old snapshot</h1></body></html>")
        _failed(db, "/kept", 600)
        _failed(db, "/never", 600)
        with serve_asgi(app) as base, httpx.Client(base_url=base, trust_env=False) as c:
            kept = [c.get("/kept", headers={"User-Agent": BOT}) for _ in range(3)]
            never = [c.get("/never", headers={"User-Agent": BOT}) for _ in range(3)]
    assert [r.headers["x-snapshotd-cache"] for r in kept] == ["STALE"] * 3
    assert "old snapshot" in kept[0].text
    assert [r.headers["x-snapshotd-cache"] for r in never] == ["BYPASS"] * 3
    assert never[0].text == "origin page"
    assert renderer.urls == []
    conn = sqlite3.connect(db)
    try:
        states = dict(conn.execute("SELECT path, state FROM paths"))
    finally:
        conn.close()
    assert states == {"/kept": "error", "/never": "error"}


def test_pass_through_stream_stops_when_the_client_goes_away(tmp_path) -> None:
    import threading

    ended = threading.Event()

    async def endless(request: Request) -> Response:
        async def chunks():  # type: ignore[no-untyped-def]
            try:
                while True:
                    yield b"data: tick\n\n"
                    await asyncio.sleep(0.05)
            finally:
                ended.set()

        return StreamingResponse(chunks(), media_type="text/event-stream")

    origin = Starlette(routes=[Route("/events", endless)])
    with serve_asgi(origin) as origin_url, serve_asgi(_no_render_app(tmp_path, origin_url)) as base:
        host, port = base.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(b"GET /events HTTP/1.1\r\nHost: a.test\r\n\r\n")
            assert b"tick" in s.recv(65536) + s.recv(65536)
        assert ended.wait(5), "the origin kept streaming to a client that had gone"


@pytest.mark.parametrize("sized", [True, False])
def test_an_origin_that_breaks_mid_body_gives_a_cut_off_answer(tmp_path, sized: bool) -> None:
    async def breaks(scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] != "http":
            return
        headers = [(b"content-length", b"100000")] if sized else []
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"x" * 1000, "more_body": True})
        await asyncio.sleep(0.1)
        raise ConnectionError("the origin fell over")

    ask = b"GET /page HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n"
    with serve_asgi(breaks) as origin_url, serve_asgi(_no_render_app(tmp_path, origin_url)) as base:
        answer = _raw_request(base, ask)
        # The proxy goes on serving.
        after = _raw_request(base, ask)
    head, body = answer.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200")
    assert b"x" * 1000 in body
    # Never a whole-looking answer: the connection closes short of the length, or with no
    # last chunk.
    assert len(body) < 100000 if sized else not body.endswith(b"0\r\n\r\n")
    assert after.startswith(b"HTTP/1.1 200")


def test_a_renderer_fault_fails_open_and_leaves_the_path_in_error(tmp_path) -> None:
    """A renderer that raises (not one reporting a failure) still frees the path."""
    origin = Origin()
    with serve_asgi(origin.app) as origin_url:
        app = _no_render_app(tmp_path, origin_url)  # its renderer raises on capture
        with serve_asgi(app) as base:
            r = httpx.get(base + "/about", headers={"User-Agent": BOT}, trust_env=False)
    assert r.status_code == 200 and r.headers["x-snapshotd-cache"] == "BYPASS"
    conn = sqlite3.connect(str(tmp_path / "p.db"))
    state, error, lease = conn.execute(
        "SELECT state, error, lease_owner FROM paths WHERE path = '/about'"
    ).fetchone()
    conn.close()
    assert state == "error" and error.startswith("renderer fault") and lease is None


def test_a_bot_is_served_from_postgresql(tmp_path) -> None:
    from tests.conftest import drop_postgres_schema, postgres_schema

    name, db = asyncio.run(postgres_schema())
    try:
        origin = Origin()
        with serve_asgi(origin.app) as origin_url:
            browser = BrowserSettings(
                concurrency=1, executable=require_chromium(), javascript_timeout=0.3,
                render_timeout=60,
            )
            settings = Settings(db=db, browser=browser, sites=(SiteSettings(origin=origin_url),))
            with serve_asgi(create_app(settings, crawler=False)) as base:
                get = lambda: httpx.get(  # noqa: E731
                    base + "/items/3", headers={"User-Agent": BOT}, timeout=60, trust_env=False
                )
                first, second = get(), get()
                person = httpx.get(base + "/items/3", trust_env=False)
        assert first.headers["x-snapshotd-cache"] == "MISS"
        assert second.headers["x-snapshotd-cache"] == "HIT"
        assert "Item 3 is a sturdy thing" in second.text and "Loading" in person.text
        # One render per device profile, one person.
        assert origin.hits.count("/items/3") == len(PROFILE_NAMES) + 1
    finally:
        asyncio.run(drop_postgres_schema(name))


class RawOrigin:
    """An origin that records each request as bytes and answers as its path asks."""

    def __init__(self) -> None:
        self.seen: list[dict[str, object]] = []

    async def __call__(self, scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        if scope["type"] != "http":
            return
        record: dict[str, object] = {"headers": list(scope["headers"]), "body": b""}
        self.seen.append(record)
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                record["complete"] = False
                return
            record["body"] += message.get("body", b"")  # type: ignore[operator]
            if not message.get("more_body"):
                record["complete"] = True
                break
        if scope["path"] == "/not-modified":
            headers = [(b"content-length", b"1234"), (b"etag", b'"v1"')]
            await send({"type": "http.response.start", "status": 304, "headers": headers})
            await send({"type": "http.response.body", "body": b""})
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


def _raw_origin_server():  # type: ignore[no-untyped-def]
    """A loopback server speaking raw HTTP/1.1 to the proxy, for headers uvicorn would refuse
    to send: it answers each connection's first request with one fixed answer carrying a
    control character in a header."""
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)

    def serve(conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nX-Ok: 1\r\nX-Bad: a\x01b\r\nContent-Length: 2\r\n\r\nok"
            )

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return listener, f"http://127.0.0.1:{listener.getsockname()[1]}"


def test_pass_through_sends_header_bytes_as_they_came_and_no_expect(tmp_path) -> None:
    origin = RawOrigin()
    with serve_asgi(origin) as origin_url, serve_asgi(_no_render_app(tmp_path, origin_url)) as base:
        host, port = base.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(
                b"POST /upload HTTP/1.1\r\nHost: a.test\r\nX-Name: J\xc3\xb6rg\r\n"
                b"Expect: 100-continue\r\nContent-Length: 5\r\nConnection: close\r\n\r\n"
            )
            assert s.recv(65536).startswith(b"HTTP/1.1 100 Continue")
            s.sendall(b"hello")
            answer = b""
            while chunk := s.recv(65536):
                answer += chunk
    assert answer.startswith(b"HTTP/1.1 200"), answer
    headers = dict(origin.seen[0]["headers"])  # type: ignore[arg-type]
    assert headers[b"x-name"] == b"J\xc3\xb6rg"
    assert b"expect" not in headers
    assert origin.seen[0]["body"] == b"hello"


def test_an_upload_the_client_abandons_is_not_completed_for_the_origin(tmp_path) -> None:
    origin = RawOrigin()
    with serve_asgi(origin) as origin_url, serve_asgi(_no_render_app(tmp_path, origin_url)) as base:
        host, port = base.removeprefix("http://").split(":")
        for framing in (b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
                        b"Content-Length: 10\r\n\r\nhello"):
            with socket.create_connection((host, int(port)), timeout=10) as s:
                s.sendall(b"POST /upload HTTP/1.1\r\nHost: a.test\r\n" + framing)
                time.sleep(0.3)
        deadline = time.monotonic() + 10
        while len([r for r in origin.seen if "complete" in r]) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        after = httpx.get(base + "/after", trust_env=False)
    assert [r["complete"] for r in origin.seen[:2]] == [False, False], origin.seen
    assert after.status_code == 200


def test_not_modified_and_invalid_origin_headers_pass_cleanly(tmp_path) -> None:
    origin = RawOrigin()
    raw_listener, raw_url = _raw_origin_server()
    try:
        with serve_asgi(origin) as origin_url, serve_asgi(
            _no_render_app(tmp_path, origin_url)
        ) as base, serve_asgi(_no_render_app(tmp_path / "raw", raw_url)) as raw_base:
            with httpx.Client(base_url=base, trust_env=False) as client:
                # Twice on one connection: the 304's Content-Length must not make the
                # server wait for a body.
                for _ in range(2):
                    r = client.get("/not-modified")
                    assert r.status_code == 304 and r.headers["etag"] == '"v1"'
            bad = httpx.get(raw_base + "/bad-header", trust_env=False)
    finally:
        with contextlib.suppress(OSError):
            raw_listener.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in accept()
        raw_listener.close()
    assert bad.status_code == 200 and bad.text == "ok"
    assert bad.headers["x-ok"] == "1" and "x-bad" not in bad.headers


def test_an_origin_answering_while_the_upload_goes_on_gets_all_of_it(tmp_path) -> None:
    """Full duplex: each piece of the upload is echoed while the next is still to come."""

    async def echo(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            if message.get("body"):
                await send({"type": "http.response.body", "body": b"got:" + message["body"],
                            "more_body": True})
            if not message.get("more_body"):
                await send({"type": "http.response.body", "body": b"end"})
                return

    with serve_asgi(echo) as origin_url, serve_asgi(_no_render_app(tmp_path, origin_url)) as base:
        host, port = base.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(b"POST /duplex HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n"
                      b"Transfer-Encoding: chunked\r\n\r\n")
            received = b""
            for piece in (b"one", b"two", b"three"):
                s.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
                while b"got:" + piece not in received:
                    chunk = s.recv(65536)
                    assert chunk, received
                    received += chunk
            s.sendall(b"0\r\n\r\n")
            while chunk := s.recv(65536):
                received += chunk
    assert b"end" in received


class Sentinel:
    """A server that counts every request it gets (one that must never be reached, or an
    origin to watch) and answers with its name."""

    def __init__(self, name: bytes = b"sentinel") -> None:
        self.name = name
        self.hits: list[str] = []

    async def __call__(self, scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        if scope["type"] != "http":
            return
        self.hits.append(f"{scope['method']} {scope['path']}")
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": self.name + b" reached"})


@contextlib.contextmanager
def _guarded_proxy(tmp_path, *, http: str = "auto"):  # type: ignore[no-untyped-def]
    """snapshotd in front of a counting origin on 127.0.0.1, with a sentinel on 127.0.0.2:
    yields (snapshotd URL, sentinel host:port, origin hits, sentinel hits)."""
    origin = Sentinel(b"origin")
    sentinel = Sentinel()
    with serve_asgi(sentinel, host="127.0.0.2") as sentinel_url, serve_asgi(
        origin
    ) as origin_url, serve_asgi(_no_render_app(tmp_path, origin_url), http=http) as base:
        yield base, sentinel_url.removeprefix("http://"), origin.hits, sentinel.hits


def _answer(raw: bytes) -> tuple[int, dict[bytes, bytes], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    return int(lines[0].split(b" ", 2)[1]), headers, body


@pytest.mark.parametrize("http", ["httptools", "h11"])
def test_a_target_that_is_not_a_path_is_400_and_reaches_no_server(tmp_path, http: str) -> None:
    with _guarded_proxy(tmp_path, http=http) as (base, sentinel, origin_hits, sentinel_hits):
        targets = [f"*@{sentinel}/x", f"*@{sentinel}", "*", "*/x", "**", "*?x", "*/_snapshotd/x"]
        answers = []
        for target in targets:
            for agent in (PERSON, BOT):
                start = (
                    f"{{}} {target} HTTP/1.1\r\nHost: a.test\r\nUser-Agent: {agent}\r\n"
                    "Connection: close\r\n"
                )
                answers.append(_raw_request(base, start.format("GET").encode() + b"\r\n"))
                post = start.format("POST").encode() + b"Content-Length: 5\r\n\r\nhello"
                answers.append(_raw_request(base, post))
            delete = f"DELETE {target} HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n"
            answers.append(_raw_request(base, delete.encode()))
    assert sentinel_hits == [] and origin_hits == []
    for raw in answers:
        status, headers, body = _answer(raw)
        assert status == 400, raw[:300]
        assert headers[b"content-type"].startswith(b"text/plain")
        assert body.count(b"\n") == 1 and b"Traceback" not in body, body


@pytest.mark.parametrize("http", ["httptools", "h11"])
def test_options_asterisk_is_answered_here(tmp_path, http: str) -> None:
    with _guarded_proxy(tmp_path, http=http) as (base, _sentinel, origin_hits, sentinel_hits):
        raw = _raw_request(base, b"OPTIONS * HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n")
    status, headers, body = _answer(raw)
    assert status == 200, raw[:300]
    assert {m.strip() for m in headers[b"allow"].split(b",")} >= {b"GET", b"HEAD", b"OPTIONS"}
    assert body == b"" and origin_hits == [] and sentinel_hits == []


@pytest.mark.parametrize("http", ["httptools", "h11"])
def test_an_absolute_form_target_reaches_only_the_sites_origin(tmp_path, http: str) -> None:
    with _guarded_proxy(tmp_path, http=http) as (base, sentinel, origin_hits, sentinel_hits):
        answers = {
            target: _raw_request(
                base,
                f"GET {target} HTTP/1.1\r\nHost: a.test\r\nUser-Agent: {PERSON}\r\n"
                "Connection: close\r\n\r\n".encode(),
            )
            for target in (
                f"http://{sentinel}/x",
                f"http://{sentinel}/_snapshotd/healthz",
                f"HTTP://{sentinel}/y?q=1",
                f"//{sentinel}/z",
            )
        }
        authority_form = [
            _raw_request(base, f"{method} {sentinel} HTTP/1.1\r\nHost: {sentinel}\r\n"
                         "Connection: close\r\n\r\n".encode())
            for method in ("CONNECT", "GET")
        ]
    assert sentinel_hits == []
    assert [_answer(raw)[0] for raw in authority_form] == [400, 400]
    for target, raw in answers.items():
        status, _headers, body = _answer(raw)
        assert status in (200, 400), (target, raw[:300])
        assert b"Traceback" not in body and b"sentinel" not in body
    # A path that starts with '//' is a path: the site's origin gets it as such.
    assert f"GET //{sentinel}/z" in origin_hits
    # httptools hands the app the path of an absolute-form target (the origin gets that
    # path); h11 hands over the whole URL, which is refused.
    expected = ["GET /x", "GET /y"] if http == "httptools" else []
    assert sorted(h for h in origin_hits if "//" not in h) == expected
    healthz = _answer(answers[f"http://{sentinel}/_snapshotd/healthz"])[0]
    assert healthz == (200 if http == "httptools" else 400)


def test_upstream_refuses_a_target_that_is_not_a_path(tmp_path) -> None:
    from snapshotd.proxy.passthrough import Upstream

    sentinel = Sentinel()
    origin = Sentinel(b"origin")
    with serve_asgi(sentinel, host="127.0.0.2") as sentinel_url, serve_asgi(
        origin
    ) as origin_url:
        hostport = sentinel_url.removeprefix("http://")

        async def forward(raw_path: bytes) -> list[dict]:
            sent: list[dict] = []
            requests = [{"type": "http.request", "body": b"", "more_body": False}]

            async def receive() -> dict:
                if requests:
                    return requests.pop()
                await asyncio.Event().wait()  # as a server does until the client leaves
                raise AssertionError("unreachable")

            async def send(message) -> None:  # type: ignore[no-untyped-def]
                sent.append(message)

            scope = {
                "type": "http", "method": "GET", "scheme": "http", "path": raw_path.decode(),
                "raw_path": raw_path, "query_string": b"", "root_path": "",
                "headers": [(b"host", b"a.test")], "client": ("127.0.0.1", 1),
            }
            upstream = Upstream()
            try:
                status = await upstream.forward(origin_url, scope, receive, send)
            finally:
                await upstream.close()
            assert status == sent[0]["status"]
            return sent

        refused = asyncio.run(forward(f"*@{hostport}/x".encode()))
        passed = asyncio.run(forward(b"/fine"))
    assert refused[0]["status"] == 400 and sentinel.hits == []
    assert b"".join(m.get("body", b"") for m in refused[1:]).count(b"\n") == 1
    assert passed[0]["status"] == 200 and origin.hits == ["GET /fine"]
