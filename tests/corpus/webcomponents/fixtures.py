"""The web-component corpus served on loopback, a browser pool (the device corpus's), and a
browser to render what the crawler's renderer shows, as module-scoped pytest fixtures."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio
from playwright.async_api import Browser, async_playwright

from tests.chromium import require_chromium
from tests.corpus.devices.fixtures import pool, serve_corpus
from tests.corpus.webcomponents.server import NODE_MODULES, create_app

_PACKAGES = ("lit", "@shoelace-style/shoelace", "@ionic/core", "@microsoft/fast-element",
             "@material/web")


@pytest.fixture(scope="module")
def origin() -> Iterator[str]:
    with serve_corpus(NODE_MODULES, _PACKAGES, create_app()) as url:
        yield url


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser(origin: str) -> AsyncIterator[Browser]:
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=require_chromium())
        yield browser
        await browser.close()


__all__ = ["browser", "origin", "pool"]
