"""What search engines are told, end to end in real Chromium: a crawled single-page app's
pages reach a real IndexNow endpoint on loopback as the documented JSON, its public sitemap
lists them and follows the sitemaps.org schema, and the console shows both."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from playwright.async_api import async_playwright, expect
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from examples.spa.app import create_app as create_spa
from snapshotd.config.settings import BrowserSettings, Settings, SiteSettings
from snapshotd.render.chromium import LAUNCH_ARGS
from snapshotd.server.app import create_app
from tests.chromium import require_chromium
from tests.servers import serve_asgi
from tests.test_console import TOKEN, WAIT_MS, sign_in
from tests.test_search_sitemap import entries, valid

pytestmark = pytest.mark.browser

KEY = "a1b2c3d4e5f6a7b8"


async def test_a_crawled_app_is_told_to_indexnow_listed_in_its_sitemap_and_shown(
    tmp_path, httpserver: HTTPServer
) -> None:
    chromium = require_chromium()
    posts: list[dict[str, object]] = []

    def answer(request: Request) -> Response:
        posts.append(json.loads(request.data))
        return Response("", status=200)

    httpserver.expect_request("/indexnow", method="POST").respond_with_handler(answer)
    browser_settings = BrowserSettings(
        concurrency=1, executable=chromium, javascript_timeout=0.3, render_timeout=10
    )
    with serve_asgi(create_spa()) as spa:
        site = SiteSettings(
            name="spa", origin=spa, hosts=("shop.test",), max_pages=5, obey_robots=False,
            sitemap_path="/sitemap.xml", indexnow_key=KEY,
            indexnow_endpoint=httpserver.url_for("/indexnow"),
        )
        settings = Settings(
            db=str(tmp_path / "s.db"), api_tokens=(TOKEN,), browser=browser_settings,
            sites=(site,), indexnow_private=True,
        )
        with serve_asgi(create_app(settings)) as base:
            async with asyncio.timeout(90):
                while not posts:
                    await asyncio.sleep(0.1)
            told = posts[0]
            assert (told["host"], told["key"], told["keyLocation"]) == (
                "shop.test", KEY, f"http://shop.test/{KEY}.txt",
            )
            assert "http://shop.test/" in told["urlList"]  # type: ignore[operator]
            async with httpx.AsyncClient(base_url=base) as client:
                host = {"Host": "shop.test"}
                assert (await client.get(f"/{KEY}.txt", headers=host)).text == KEY
                sitemap = await client.get("/sitemap.xml", headers=host)
                listed = [loc for loc, _ in entries(valid(sitemap.content, "sitemap.xsd"))]
                assert set(told["urlList"]) <= set(listed)  # type: ignore[arg-type]
            async with async_playwright() as p:
                browser = await p.chromium.launch(
                    executable_path=chromium, args=list(LAUNCH_ARGS)
                )
                page = await browser.new_page()
                await page.goto(f"{base}/_snapshotd/console")
                await sign_in(page)
                counters = page.locator("#job-counters")
                await expect(counters).to_contain_text("Public sitemap/sitemap.xml")
                await expect(counters).to_contain_text(
                    "IndexNow URLs sent / failed / waiting", timeout=WAIT_MS
                )
                await expect(counters).to_contain_text("answered 200", timeout=WAIT_MS)
                await browser.close()
