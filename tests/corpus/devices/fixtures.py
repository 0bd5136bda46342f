"""The device corpus served on loopback and a browser pool for it, as module-scoped pytest
fixtures of the test modules that import them (the web-component corpus's too: its pool is
this one, its origin served by :func:`serve_corpus`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
import pytest_asyncio
from starlette.applications import Starlette

from snapshotd.config.settings import BrowserSettings
from snapshotd.render import BrowserPool
from tests.chromium import require_chromium
from tests.corpus.devices.server import NODE_MODULES, create_app
from tests.servers import serve_asgi

_PACKAGES = ("lozad", "react-responsive", "lazysizes", "swiper", "ua-parser-js")


def serve_corpus(
    node_modules: Path, packages: Iterable[str], app: Starlette
) -> AbstractContextManager[str]:
    """A corpus's app on loopback, once Chromium and its npm packages are there (one of each
    the pages load: missing, `make test` was not run)."""
    require_chromium()
    for package in packages:
        if not (node_modules / package).is_dir():
            pytest.fail(f"the corpus's npm packages are missing: make {node_modules}")
    return serve_asgi(app)


@pytest.fixture(scope="module")
def origin() -> Iterator[str]:
    with serve_corpus(NODE_MODULES, _PACKAGES, create_app()) as url:
        yield url


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pool(origin: str) -> AsyncIterator[BrowserPool]:
    pool = BrowserPool(BrowserSettings(concurrency=2, javascript_timeout=1.0, render_timeout=45))
    await pool.start()
    yield pool
    await pool.close()
