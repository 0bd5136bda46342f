"""The web-component corpus served on loopback, a browser pool, and a browser to render
what the crawler's renderer shows, as module-scoped pytest fixtures."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio
from playwright.async_api import Browser, async_playwright

from snapshotd.config.settings import BrowserSettings
from snapshotd.render import BrowserPool
from tests.chromium import require_chromium
from tests.corpus.webcomponents.server import NODE_MODULES, create_app
from tests.servers import serve_asgi

# One of each npm package the pages load: missing, `make test` was not run.
_PACKAGES = ("lit", "@shoelace-style/shoelace", "@ionic/core", "@microsoft/fast-element",
             "@material/web")


@pytest.fixture(scope="module")
def origin() -> Iterator[str]:
    require_chromium()
    for package in _PACKAGES:
        if not (NODE_MODULES / package).is_dir():
            pytest.fail(f"the corpus's npm packages are missing: make {NODE_MODULES}")
    with serve_asgi(create_app()) as url:
        yield url


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pool(origin: str) -> AsyncIterator[BrowserPool]:
    pool = BrowserPool(BrowserSettings(concurrency=2, javascript_timeout=1.0, render_timeout=45))
    await pool.start()
    yield pool
    await pool.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser(origin: str) -> AsyncIterator[Browser]:
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=require_chromium())
        yield browser
        await browser.close()
