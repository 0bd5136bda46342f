"""The device corpus served on loopback and a browser pool for it, as module-scoped pytest
fixtures of the test modules that import them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio

from snapshotd.config.settings import BrowserSettings
from snapshotd.render import BrowserPool
from tests.chromium import require_chromium
from tests.corpus.devices.server import NODE_MODULES, create_app
from tests.servers import serve_asgi

# One of each npm package the pages load: missing, `make test` was not run.
_PACKAGES = ("lozad", "react-responsive", "lazysizes", "swiper", "ua-parser-js")


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
