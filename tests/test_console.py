"""The web console in real Chromium (Playwright) against snapshotd on uvicorn.

snapshotd runs with its crawler on (real SQLite, real Chromium renderer); the example SPA
is the origin of site ``spa``, and site ``down`` points at a closed loopback port so its
captures fail and fill the errors view. Seeds and link-following are off, so only what the
test queues gets captured.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from playwright.async_api import Browser, Page, async_playwright, expect

from examples.spa.app import create_app as create_spa
from snapshotd.config.settings import BrowserSettings, Settings, SiteSettings
from snapshotd.render.chromium import LAUNCH_ARGS
from snapshotd.server.app import create_app
from snapshotd.store.sqlite import SQLiteStore
from tests.chromium import require_chromium
from tests.servers import serve_asgi

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="module")]

TOKEN = "console-token"
WAIT_MS = 120_000  # stops a hang; a loaded machine's crawl takes what it takes


@dataclass
class Env:
    base: str
    db: str
    chromium: str


@contextmanager
def serve_console(
    folder: Path, *, crawler: bool = True, concurrency: int = 1, crawl_links: bool = False
) -> Iterator[Env]:
    """snapshotd with sites ``spa`` and ``down``, its database in ``folder``."""
    chromium = require_chromium()
    db = str(folder / "snap.db")
    quiet = {"seeds": (), "sitemaps": (), "crawl_links": crawl_links, "obey_robots": False}
    with serve_asgi(create_spa()) as spa:
        sites = (
            SiteSettings(name="spa", origin=spa, **quiet),  # type: ignore[arg-type]
            SiteSettings(name="down", origin="http://127.0.0.1:1", **quiet),  # type: ignore[arg-type]
        )
        browser = BrowserSettings(
            concurrency=concurrency, executable=chromium, javascript_timeout=0.3,
            render_timeout=60,
        )
        settings = Settings(db=db, api_tokens=(TOKEN,), browser=browser, sites=sites)
        with serve_asgi(create_app(settings, crawler=crawler)) as base:
            yield Env(base, db, chromium)


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> Iterator[Env]:
    with serve_console(tmp_path_factory.mktemp("console")) as served:
        yield served


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser(env: Env) -> AsyncIterator[Browser]:
    async with async_playwright() as p:
        b = await p.chromium.launch(executable_path=env.chromium, args=list(LAUNCH_ARGS))
        try:
            yield b
        finally:
            await b.close()


@pytest_asyncio.fixture(loop_scope="module")
async def page(browser: Browser, env: Env) -> AsyncIterator[Page]:
    context = await browser.new_context()
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    await page.goto(f"{env.base}/_snapshotd/console")
    yield page
    await context.close()
    assert errors == []


async def sign_in(page: Page) -> None:
    await page.fill("#token", TOKEN)
    await page.click("#signin-form button")
    await expect(page.locator("#app")).to_be_visible()


def api_get(env: Env, path: str) -> httpx.Response:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    return httpx.get(f"{env.base}/_snapshotd/api/v1{path}", headers=headers, trust_env=False)


async def test_sign_in_queue_watch_it_captured_view_and_delete(page: Page, env: Env) -> None:
    await expect(page.locator("#signin")).to_be_visible()
    await page.fill("#token", "wrong")
    await page.click("#signin-form button")
    await expect(page.locator("#signin-error")).to_contain_text("not accepted")
    assert await page.evaluate("sessionStorage.getItem('snapshotd.token')") is None
    await sign_in(page)
    assert await page.evaluate("sessionStorage.getItem('snapshotd.token')") == TOKEN
    await expect(page.locator('#counts tr[data-site="spa"]')).to_be_visible()

    # Queue a path at priority 3 and watch the crawler capture it.
    await page.fill("#queue-paths", "/items/5")
    await page.select_option("#queue-priority", "3")
    await page.click("#queue-form button")
    await expect(page.locator("#message")).to_contain_text("1 queued")
    await page.click('#tabs button[data-state="processed"]')
    row = page.locator('#paths tr[data-path="/items/5"]')
    await expect(row).to_be_visible(timeout=WAIT_MS)
    await expect(row.locator("td.state")).to_have_text("processed")
    await expect(page.locator('#counts tr[data-site="spa"] .count-processed')).to_have_text("1")
    await expect(page.locator("#rate")).to_contain_text("all processes: ok 1", timeout=WAIT_MS)

    # One snapshot beside its details, in a sandboxed frame.
    await row.locator("button.link").click()
    await expect(page.locator("#detail-path")).to_have_text("/items/5")
    await expect(page.locator('#detail-fields dd[data-field="state"]')).to_have_text("processed")
    await expect(page.locator('#detail-fields dd[data-field="status"]')).to_have_text("200")
    frame = page.frame_locator("#snapshot-frame")
    await expect(frame.locator("body")).to_contain_text("Item 5 is a sturdy thing")
    assert await page.get_attribute("#snapshot-frame", "sandbox") == ""
    # The page renders alike on both devices: one snapshot of its own serves both.
    await expect(page.locator('#detail-fields dd[data-field="profiles"]')).to_have_text("mobile")
    await page.select_option("#detail-profile", "desktop")
    await expect(frame.locator("body")).to_contain_text("Item 5 is a sturdy thing")

    # The prefix filter.
    await page.fill("#prefix", "/about")
    await page.click("#filter-form button[type=submit]")
    await expect(page.locator("#empty")).to_be_visible()
    await page.fill("#prefix", "/items/")
    await page.click("#filter-form button[type=submit]")
    await expect(row).to_be_visible()

    # Recapture: the fresh path is queued again and captured again.
    await page.click("#detail-recapture")
    await expect(page.locator("#message")).to_contain_text("1 requeued")

    # Delete it.
    page.once("dialog", lambda dialog: asyncio.ensure_future(dialog.accept()))
    await page.click('#tabs button[data-state=""]')
    await row.locator("button.danger").click()
    await expect(page.locator("#message")).to_contain_text("Deleted /items/5")
    await expect(row).to_have_count(0)
    await expect(page.locator("#detail")).to_be_hidden()
    assert api_get(env, "/sites/spa/paths/items/5").status_code == 404


async def test_errors_view_paging_and_sitemap_upload(page: Page, env: Env, tmp_path) -> None:
    # 60 ignored paths, which the crawler leaves alone, to page through.
    store = SQLiteStore(env.db)
    await store.open()
    try:
        for i in range(60):
            await store.add_ignored("down", f"/ignored/{i:02d}", reason="test")
    finally:
        await store.close()

    await sign_in(page)
    await expect(page.locator("#site-picker")).to_be_visible()
    await page.select_option("#site", "down")
    await page.fill("#queue-paths", "/broken-a\n/broken-b")
    await page.click("#queue-form button")
    await expect(page.locator("#message")).to_contain_text("2 queued")
    await page.click('#tabs button[data-state="error"]')
    rows = page.locator("#paths tbody tr")
    await expect(rows).to_have_count(2, timeout=WAIT_MS)
    await expect(rows.first.locator("td.error-text")).not_to_be_empty()

    await page.click('#tabs button[data-state=""]')
    await page.fill("#prefix", "/ignored/")
    await page.click("#filter-form button[type=submit]")
    await expect(rows).to_have_count(50)
    await expect(rows.first).to_have_attribute("data-path", "/ignored/59")
    await expect(page.locator("#first")).to_be_disabled()
    await page.click("#next")
    await expect(rows).to_have_count(10)
    await expect(rows.first).to_have_attribute("data-path", "/ignored/09")
    await expect(page.locator("#next")).to_be_disabled()
    await page.click("#first")
    await expect(rows).to_have_count(50)

    # A sitemap upload, at the priority chosen.
    sitemap = tmp_path / "sitemap.xml"
    sitemap.write_text(
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
        "<url><loc>http://127.0.0.1:1/from-sitemap</loc></url>"
        "<url><loc>http://elsewhere.test/x</loc></url></urlset>"
    )
    await page.select_option("#queue-priority", "1")
    await page.set_input_files("#sitemap-file", str(sitemap))
    await page.click("#sitemap-form button")
    await expect(page.locator("#message")).to_contain_text("2 URLs; 1 queued, 1 skipped")
    record = api_get(env, "/sites/down/paths/from-sitemap").json()
    assert record["priority"] == 1

    # A bad sitemap is reported, not thrown.
    sitemap.write_text("<urlset><url>")
    await page.set_input_files("#sitemap-file", str(sitemap))
    await page.click("#sitemap-form button")
    await expect(page.locator("#message")).to_contain_text("not a readable sitemap")

    # Signing out forgets the token.
    await page.click("#signout")
    await expect(page.locator("#signin")).to_be_visible()
    assert await page.evaluate("sessionStorage.getItem('snapshotd.token')") is None


async def test_without_tokens_the_logged_console_url_signs_in(
    browser: Browser, env: Env, tmp_path, caplog: pytest.LogCaptureFixture
) -> None:
    from tests.test_api import RefusingRenderer

    caplog.set_level(logging.INFO, logger="snapshotd")
    site = SiteSettings(name="solo", origin="http://127.0.0.1:1", seeds=())
    settings = Settings(db=str(tmp_path / "solo.db"), sites=(site,))
    app = create_app(settings, renderer=RefusingRenderer(), crawler=False)
    with serve_asgi(app) as base:
        (line,) = [r.getMessage() for r in caplog.records if "#token=" in r.getMessage()]
        # The logged URL names the configured port; this server listens on port 0's pick.
        fragment = line[line.index("#token=") :]
        token = fragment.removeprefix("#token=")

        # Opened without the token, a browser on loopback gets the sign-in form and no data.
        context = await browser.new_context()
        page = await context.new_page()
        await page.goto(f"{base}/_snapshotd/console")
        await expect(page.locator("#signin")).to_be_visible()
        await expect(page.locator("#signin-error")).to_be_empty()
        await expect(page.locator("#app")).to_be_hidden()
        await context.close()

        # Opened at the logged URL, it signs in, keeps the token for the tab and drops it
        # from the address bar; the token is never part of a requested URL.
        context = await browser.new_context()
        page = await context.new_page()
        requested: list[str] = []
        page.on("request", lambda request: requested.append(request.url))
        await page.goto(f"{base}/_snapshotd/console{fragment}")
        await expect(page.locator('#counts tr[data-site="solo"]')).to_be_visible()
        await expect(page.locator("#signin")).to_be_hidden()
        await expect(page.locator("#signout")).to_be_visible()
        assert await page.evaluate("sessionStorage.getItem('snapshotd.token')") == token
        assert page.url == f"{base}/_snapshotd/console"
        await page.reload()
        await expect(page.locator('#counts tr[data-site="solo"]')).to_be_visible()
        assert requested and not any(token in url for url in requested)
        await context.close()
