"""An excluded page asked for under another spelling: the checks judge the path a browser
loads, so what they refuse is never rendered, stored or served (real ``serve``, real
Chromium, a sentinel origin counting the requests for its excluded page)."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections import Counter
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from snapshotd.crawlers.devices import PROFILE_NAMES
from snapshotd.store.sqlite import SQLiteStore
from tests.chromium import require_chromium, wait_until
from tests.servers import serve_asgi
from tests.test_crawler_process import _rows
from tests.test_serve_process import serving

pytestmark = pytest.mark.browser

BOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
# Each names /admin/ once a browser's URL parser has read it (WHATWG, special schemes).
SPELLINGS = [
    "/x\\..\\admin/",
    "/x/..\\admin/",
    "/x\\%2e%2E\\admin/",
    "/x\\..\\%61dmin/",
    "/a/b\\..\\..\\admin/",
]


class Origin:
    """Every path is a page; counts the requests for each path as the server reads it."""

    def __init__(self) -> None:
        self.hits: Counter[str] = Counter()
        self._lock = threading.Lock()

        async def page(request: Request) -> Response:
            with self._lock:
                self.hits[request.url.path] += 1
            return HTMLResponse(f"<!doctype html><html><body><p>page {request.url.path}</p>"
                                "<p>secret admin page</p></body></html>")

        self.app = Starlette(routes=[Route("/{rest:path}", page)])


def write_config(tmp_path: Path, origin: str, db: Path) -> Path:
    rules = tmp_path / "shop.rules"
    rules.write_text("^/admin [R=403]\n")
    config = tmp_path / "serve.toml"
    config.write_text(
        f'[server]\ndb = "{db}"\nmiss_wait = 60.0\n'
        f'[browser]\nexecutable = "{require_chromium()}"\njavascript_timeout = 0.2\n'
        f'[[site]]\nname = "shop"\norigin = "{origin}"\nseeds = []\nsitemaps = []\n'
        f'ignore = ["/admin/"]\nrules = "{rules}"\nurl_process_pattern = "!/admin"\n'
    )
    return config


def raw_get(base: str, target: str) -> bytes:
    """The answer to a GET of ``target`` sent byte for byte, as no HTTP client would."""
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=90) as conn:
        conn.sendall(
            f"GET {target} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: {BOT}\r\n"
            "Connection: close\r\n\r\n".encode()
        )
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    return answer


def test_a_bot_asking_for_an_excluded_page_under_another_spelling_gets_no_render(
    tmp_path: Path,
) -> None:
    origin = Origin()
    db = tmp_path / "spell.db"
    with serve_asgi(origin.app) as origin_url, serving(
        "--config", str(write_config(tmp_path, origin_url, db)), "--no-crawler"
    ) as serve:
        base = serve.url()
        for target in SPELLINGS:
            answer = raw_get(base, target)
            assert answer.startswith(b"HTTP/1.1 403"), (target, answer[:300])
            assert b"secret admin page" not in answer, target
        # A page that is not excluded is rendered and served as ever.
        page = raw_get(base, "/shop/1")
        assert page.startswith(b"HTTP/1.1 200") and b"page /shop/1" in page, page[:300]
        stored = _rows(db, "SELECT path FROM paths")
        loaded = _rows(db, "SELECT final_url FROM snapshots")
    assert origin.hits["/admin/"] == 0, origin.hits
    assert [p for (p,) in stored] == ["/shop/1"], stored
    assert [u for (u,) in loaded if "admin" in str(u)] == []


def test_a_path_stored_under_another_spelling_goes_through_admission_again(
    tmp_path: Path,
) -> None:
    """A path stored before its spelling had one form is not rendered: the crawler reads it
    in today's form, and that page is admitted in its place, or not."""
    origin = Origin()
    db = tmp_path / "legacy.db"
    legacy = "/x\\..\\admin/"

    async def store_old_rows() -> None:
        store = SQLiteStore(str(db))
        await store.open()
        try:
            await store.enqueue("shop", legacy, 1)
            await store.enqueue("shop", "/shop/a{b}", 1)
        finally:
            await store.close()

    asyncio.run(store_old_rows())
    with serve_asgi(origin.app) as origin_url, serving(
        "--config", str(write_config(tmp_path, origin_url, db)), "--workers", "1"
    ) as serve:
        serve.url()

        def states() -> dict[str, str]:
            return {str(p): str(s) for p, s in _rows(db, "SELECT path, state FROM paths")}

        assert wait_until(lambda: states() == {"/shop/a%7Bb%7D": "processed"}, 60), (
            states(), serve.stderr
        )
        # The site's first page is checked in every profile once it is stored.
        assert wait_until(lambda: origin.hits["/shop/a{b}"] >= len(PROFILE_NAMES), 60), (
            origin.hits, serve.stderr
        )
    assert origin.hits["/admin/"] == 0, origin.hits
    assert origin.hits["/shop/a{b}"] == len(PROFILE_NAMES), origin.hits  # one capture


async def test_chromium_is_not_sent_to_a_url_it_reads_as_another_path() -> None:
    """The renderer's own check, behind the site path's form: Chromium's reading of the URL
    must name the path and query it was given, or nothing is loaded."""
    from snapshotd.config.settings import BrowserSettings, SiteSettings
    from snapshotd.render import BrowserPool

    origin = Origin()
    with serve_asgi(origin.app) as origin_url:
        site = SiteSettings(name="shop", origin=origin_url)
        pool = BrowserPool(BrowserSettings(executable=require_chromium(), concurrency=1))
        await pool.start()
        try:
            for target in SPELLINGS:
                result = await pool.capture(origin_url + target, site)
                assert (result.error or "").startswith("refused: Chromium would load /"), (
                    target, result
                )
            fine = await pool.capture(origin_url + "/shop/a%7Bb%7D?q=%27x%27", site)
            assert fine.ok and "page /shop/a{b}" in fine.html, fine
        finally:
            await pool.close()
    assert origin.hits["/admin/"] == 0, origin.hits
