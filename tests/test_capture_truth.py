"""Snapshots never lie: a capture that lost a request to its origin is an error, and no
document or data answer one capture fetched is served to the next from the browser's cache
(static assets may be, as their origin allows).

Real Chromium, real SQLite, the example SPA (which answers its shell and scripts with
``Last-Modified``, so a browser may keep them) as the origin on loopback.
"""

from __future__ import annotations

import sqlite3
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, contextmanager

import httpx
import pytest
import pytest_asyncio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route

from examples.spa.app import create_app as create_spa
from snapshotd.config.settings import BrowserSettings, Settings, SiteSettings
from snapshotd.render import BrowserPool, pauses
from snapshotd.server.app import create_app
from tests.chromium import PAGES, require_chromium, wait_until
from tests.servers import serve_asgi

BOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"

pytestmark = pytest.mark.browser

BROWSER = BrowserSettings(concurrency=1, javascript_timeout=0.3, render_timeout=45)


class CountingSpa:
    """The example SPA, counting the requests it answers by path; ``/drop/...`` paths are
    answered by closing the connection (a network-level failure)."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        spa = create_spa()

        async def counting(scope, receive, send):  # type: ignore[no-untyped-def]
            if scope["type"] == "http":
                self.hits.append(scope["path"])
            await spa(scope, receive, send)

        async def page(request: Request) -> Response:
            name = request.path_params["name"]
            return Response((PAGES / f"{name}.html").read_text(), media_type="text/html")

        async def dropped(scope, receive, send):  # type: ignore[no-untyped-def]
            # Headers promise a body that never comes: the connection is closed mid-answer.
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", b"100")]})
            await send({"type": "http.response.body", "body": b'{"text":', "more_body": True})
            raise ConnectionResetError("dropped on purpose")

        self.app = Starlette(
            routes=[
                Route("/p/{name}", page),
                Mount("/drop", dropped),
                Mount("/", counting),
            ]
        )


def _row(db: str, path: str) -> tuple[str, int | None, str | None]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(
            "SELECT state, status, error FROM paths WHERE path = ?", (path,)
        ).fetchone()
    finally:
        conn.close()


def _expire(db: str, path: str) -> None:
    conn = sqlite3.connect(db)
    try:
        conn.execute("UPDATE paths SET expires_at = ? WHERE path = ?", (time.time() - 1, path))
        conn.commit()
    finally:
        conn.close()


@contextmanager
def _snapshotd(origin: str, db: str) -> Iterator[httpx.Client]:
    """snapshotd with its crawler, one capture slot (so every capture shares one browser
    context, and whatever it could keep), links not followed."""
    browser = BrowserSettings(
        concurrency=1, executable=require_chromium(), javascript_timeout=0.3, render_timeout=45
    )
    site = SiteSettings(
        name="shop", origin=origin, seeds=(), crawl_links=False, obey_robots=False
    )
    settings = Settings(db=db, miss_wait=50.0, browser=browser, sites=(site,))
    renderer = BrowserPool(browser, spares=0)
    app = create_app(settings, renderer=renderer, crawler=True)
    with serve_asgi(app) as base, httpx.Client(base_url=base, timeout=60, trust_env=False) as c:
        yield c


def test_a_recapture_with_the_origin_down_keeps_the_snapshot_and_serves_it_stale(
    tmp_path,
) -> None:
    db = str(tmp_path / "snap.db")
    spa = CountingSpa()
    with ExitStack() as origin:
        origin_url = origin.enter_context(serve_asgi(spa.app))
        with _snapshotd(origin_url, db) as client:
            first = client.get("/items/3", headers={"User-Agent": BOT})
            assert first.headers["x-snapshotd-cache"] == "MISS", first.text
            assert first.status_code == 200 and "Item 3 is a sturdy thing" in first.text
            origin.close()  # the origin goes down; its port now refuses connections
            _expire(db, "/items/3")
            stale = client.get("/items/3", headers={"User-Agent": BOT})
            assert stale.headers["x-snapshotd-cache"] == "STALE"
            # The crawler recaptures it: the shell may come from nowhere but the origin.
            assert wait_until(lambda: _row(db, "/items/3")[0] in ("error", "processed"), 30)
            state, _status, error = _row(db, "/items/3")
            assert state == "error", (state, _status, error)
            assert error is not None and error.startswith("origin unreachable: "), error
            assert "SOCKS" not in error
            after = client.get("/items/3", headers={"User-Agent": BOT})
            assert after.headers["x-snapshotd-cache"] == "STALE"
            assert after.status_code == 200 and after.text == first.text


@pytest.fixture(scope="module")
def spa() -> Iterator[tuple[CountingSpa, SiteSettings]]:
    require_chromium()
    counting = CountingSpa()
    with serve_asgi(counting.app) as origin:
        yield counting, SiteSettings(origin=origin)


@pytest_asyncio.fixture
async def solo() -> AsyncIterator[BrowserPool]:
    """One slot and no spare: every capture shares one browser context."""
    pool = BrowserPool(BROWSER, spares=0)
    await pool.start()
    yield pool
    await pool.close()


async def test_a_data_request_cut_off_by_the_origin_fails_the_capture(spa, solo) -> None:
    counting, site = spa
    result = await solo.capture(f"{site.origin}/p/lostdata", site)
    assert result.error is not None and result.error.startswith("origin unreachable: net::ERR_")
    assert result.error.endswith("(GET /drop/data.json)"), result.error
    assert result.html == ""


async def test_no_document_or_data_answer_crosses_from_one_capture_to_the_next(
    spa, solo
) -> None:
    counting, site = spa
    for round_ in range(3):
        before = len(counting.hits)
        result = await solo.capture(f"{site.origin}/items/7", site)
        assert result.ok, result
        assert "Item 7 is a sturdy thing" in result.html
        asked = counting.hits[before:]
        assert asked.count("/items/7") == 1, (round_, asked)
        assert asked.count("/api/items/7") == 1, (round_, asked)


ASSETS_PAGE = """<!doctype html><html><head><title>assets</title>
<script src="/assets/kept.js"></script><script src="/assets/nostore.js"></script>
<script src="/assets/revalidated.js"></script></head>
<body><p id="out">loading</p><script>
fetch("/assets/data.json").then((r) => r.json()).then((d) => {
  document.getElementById("out").textContent = d.text + " " + kept + nostore + revalidated;
  window.onCaptureReady();
});
</script></body></html>"""


@pytest.mark.parametrize("remembered", [256, 1])
async def test_only_static_assets_cross_from_one_capture_to_the_next(
    solo, remembered, monkeypatch
) -> None:
    """The slot keeps its HTTP cache between captures for scripts the origin lets browsers
    keep; the document and its data come from the origin every time, whatever their
    headers say, and so do scripts marked no-store or no-cache. Past the URLs a slot
    remembers, its cache is emptied: the kept script is fetched again too."""
    monkeypatch.setattr(pauses, "REMEMBERED", remembered)
    hits: Counter[str] = Counter()
    year = {"Cache-Control": "max-age=31536000"}
    answers: dict[str, tuple[str, str, dict[str, str]]] = {
        "/assets/page": (ASSETS_PAGE, "text/html", year),
        "/assets/kept.js": ("var kept = 'k';", "text/javascript", year),
        "/assets/nostore.js": ("var nostore = 'n';", "text/javascript",
                               {"Cache-Control": "no-store"}),
        "/assets/revalidated.js": ("var revalidated = 'r';", "text/javascript",
                                   {"Cache-Control": "no-cache", "ETag": '"r1"'}),
        "/assets/data.json": ('{"text": "fresh data"}', "application/json", year),
    }

    async def answer(request: Request) -> Response:
        hits[request.url.path] += 1
        body, kind, headers = answers[request.url.path]
        return Response(body, media_type=kind, headers=headers)

    app = Starlette(routes=[Route(path, answer) for path in answers])
    with serve_asgi(app) as origin:
        site = SiteSettings(origin=origin, wait_for_capture_ready=True)
        for _ in range(3):
            result = await solo.capture(f"{origin}/assets/page", site)
            assert result.ok, result
            assert "fresh data knr" in result.html
    assert hits["/assets/kept.js"] == (1 if remembered > 2 else 3), hits
    for path in ("/assets/page", "/assets/data.json", "/assets/nostore.js",
                 "/assets/revalidated.js"):
        assert hits[path] == 3, (path, hits)


async def test_a_script_asked_for_later_as_data_comes_from_the_origin(solo) -> None:
    """What the cache kept as a script is not what a later capture's data request gets."""
    hits: Counter[str] = Counter()
    pages = {
        "/script": '<script src="/shared.js"></script><p>script page</p>',
        "/data": '<p id="out">loading</p><script>fetch("/shared.js").then((r) => r.text())'
        '.then((t) => { document.getElementById("out").textContent = t; '
        "window.onCaptureReady(); });</script>",
    }

    async def answer(request: Request) -> Response:
        path = request.url.path
        hits[path] += 1
        if path == "/shared.js":
            body = f"var shared = 'answer {hits[path]}';"
            return Response(body, media_type="text/javascript",
                            headers={"Cache-Control": "max-age=31536000"})
        return Response(f"<!doctype html><title>p</title>{pages[path]}", media_type="text/html")

    app = Starlette(routes=[Route(path, answer) for path in [*pages, "/shared.js"]])
    with serve_asgi(app) as origin:
        first = await solo.capture(f"{origin}/script", SiteSettings(origin=origin))
        assert first.ok, first
        site = SiteSettings(origin=origin, wait_for_capture_ready=True)
        second = await solo.capture(f"{origin}/data", site)
        assert second.ok, second
    assert "answer 2" in second.html, second.html
    assert hits["/shared.js"] == 2, hits
