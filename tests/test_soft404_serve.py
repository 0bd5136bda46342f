"""Soft 404s end to end in real Chromium: ``serve`` crawls the React Router shop of the
soft-404 corpus, and then a crawler asking for a page that draws the app's not-found view is
answered 404 as the app would, its thin real pages 200; the API, the console and the URL
report list each soft 404 with why, and the site's own sitemap lists none. A bot's request
teaches nothing: before the crawler learned the view, a miss renders only its own page."""

from __future__ import annotations

import asyncio
import contextlib
import csv
import io
import re

import httpx
import pytest
from playwright.async_api import async_playwright, expect

from snapshotd.cli import main
from snapshotd.config.settings import BrowserSettings, Settings, SiteSettings
from snapshotd.render.chromium import LAUNCH_ARGS
from snapshotd.server.app import create_app
from tests.chromium import require_chromium
from tests.corpus.devices.fixtures import serve_corpus
from tests.corpus.soft404.server import NODE_MODULES, PACKAGES, REAL, SOFT_404, THIN, Corpus
from tests.servers import serve_asgi
from tests.test_console import TOKEN, WAIT_MS, sign_in

pytestmark = pytest.mark.browser

BOT = {"User-Agent": "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"}
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def settings(origin: str, db: str, **site: object) -> Settings:
    return Settings(
        db=db, api_tokens=(TOKEN,), miss_wait=30.0,
        browser=BrowserSettings(concurrency=2, executable=require_chromium(),
                                javascript_timeout=0.5, render_timeout=45.0),
        sites=(SiteSettings(name="shop", origin=origin, sitemap_path="/sitemap.xml",
                            obey_robots=False, **site),),  # type: ignore[arg-type]
    )


async def test_served_soft_404s_are_answered_404_and_listed_with_why(tmp_path) -> None:
    db = str(tmp_path / "s.db")
    with serve_corpus(NODE_MODULES, PACKAGES, Corpus("react").create_app()) as origin, \
            serve_asgi(create_app(settings(origin, db))) as base:
        async with httpx.AsyncClient(base_url=base, timeout=60) as client:
            api = f"{base}/_snapshotd/api/v1/sites/shop"
            async with asyncio.timeout(WAIT_MS / 1000):
                while True:
                    site = (await client.get(api, headers=AUTH)).json()
                    counts = site["counts"]
                    if site["not_found"]["answered"] == len(SOFT_404) and \
                            counts["pending"] + counts["processing"] == 0:
                        break
                    await asyncio.sleep(0.5)
            view = site["not_found"]["view"]
            assert view["state"] == "learned" and "page not found" in view["text"], view
            for path in SOFT_404:
                answer = await client.get(path, headers=BOT)
                assert answer.status_code == 404, path
                assert "Page not found" in answer.text
            for path in THIN:
                assert (await client.get(path, headers=BOT)).status_code == 200, path
            listed = (await client.get(f"{api}/paths?not_found=true&limit=100",
                                       headers=AUTH)).json()["paths"]
            assert sorted(p["path"] for p in listed) == sorted(SOFT_404)
            assert all(p["status"] == 404 and "not-found view" in p["not_found"] for p in listed)
            one = (await client.get(f"{api}/paths/about", headers=AUTH)).json()
            assert one["status"] == 200 and one["not_found"] is None
            sitemap = (await client.get("/sitemap.xml", headers=BOT)).text
            assert not [p for p in SOFT_404 if f"{p}<" in sitemap]
            assert all(f"{p}<".replace("&", "&amp;") in sitemap for p in REAL if "?" not in p)

            async with async_playwright() as p:
                browser = await p.chromium.launch(executable_path=require_chromium(),
                                                  args=list(LAUNCH_ARGS))
                page = await browser.new_page()
                await page.goto(f"{base}/_snapshotd/console")
                await sign_in(page)
                await expect(page.locator("#job-counters")).to_contain_text(
                    "Not-found viewlearned", timeout=WAIT_MS)
                await expect(page.locator("#job-counters")).to_contain_text(
                    f"Soft 404s answered / shown{len(SOFT_404)} / {len(SOFT_404)}")
                await page.click('#tabs button[data-state="not_found"]')
                rows = page.locator("#paths tbody tr")
                await expect(rows).to_have_count(len(SOFT_404), timeout=WAIT_MS)
                await expect(rows.first).to_contain_text("not-found view: shows")
                await browser.close()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):  # the command runs its own event loop
        assert await asyncio.to_thread(main, ["report", "--db", db]) == 0
    rows = {r["path"]: r for r in csv.DictReader(io.StringIO(out.getvalue()))}
    assert all(rows[p]["status"] == "404" and rows[p]["not_found"] for p in SOFT_404)
    assert all(rows[p]["not_found"] == "" for p in REAL)


async def test_a_bots_request_teaches_nothing(tmp_path) -> None:
    app = Corpus("react")
    db = str(tmp_path / "s.db")
    seen: list[str] = []
    inner = app.create_app()

    async def counting(scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] == "http" and not scope["path"].startswith(("/api/", "/node_modules/",
                                                                     "/assets/")):
            seen.append(scope["path"])
        await inner(scope, receive, send)

    # Nothing crawls: the site's seeds are none, and the crawler has nothing to claim.
    with serve_corpus(NODE_MODULES, PACKAGES, counting) as origin, \
            serve_asgi(create_app(settings(origin, db, seeds=()))) as base:
        async with httpx.AsyncClient(base_url=base, timeout=60) as client:
            for path in ("/no-such-page", "/about"):
                assert (await client.get(path, headers=BOT)).status_code == 200, path
            site = (await client.get("/_snapshotd/api/v1/sites/shop", headers=AUTH)).json()
    # The pages asked for were rendered, and the crawler may capture what they link to (a
    # page only a bot's request named is not found on the site): no path was made up to
    # learn from.
    assert {"/about", "/no-such-page"} <= set(seen)
    assert not [p for p in seen if re.fullmatch(r"/[0-9a-f]{32}", p)], seen
    assert site["not_found"]["view"]["state"] == "not learned yet"
