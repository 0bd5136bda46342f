"""Readiness against the truth corpus: real Chromium, the corpus's origin on loopback.

Each page of :mod:`tests.corpus` is captured, its snapshot rendered again with JavaScript off,
and the visible text compared with what the page is known to show once done.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio
from playwright.async_api import Browser, async_playwright

from snapshotd.config.settings import BrowserSettings, SiteSettings
from snapshotd.render import BrowserPool
from snapshotd.render.chromium import LAUNCH_ARGS
from tests.chromium import require_chromium, rules_met
from tests.corpus import CASES, Case, visible_text
from tests.corpus.server import NODE_MODULES, create_app
from tests.servers import serve_asgi

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="module")]

SETTINGS = BrowserSettings(concurrency=2, javascript_timeout=3.0, render_timeout=60.0)


@pytest.fixture(scope="module")
def origin() -> Iterator[str]:
    require_chromium()
    with serve_asgi(create_app(), ws="auto") as url:  # the corpus has a WebSocket page
        yield url


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pool(origin: str) -> AsyncIterator[BrowserPool]:
    pool = BrowserPool(SETTINGS)
    await pool.start()
    yield pool
    await pool.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def reader(origin: str) -> AsyncIterator[Browser]:
    """A Chromium that shows snapshots with JavaScript off, as a crawler that runs none would."""
    async with async_playwright() as p:
        browser = await p.chromium.launch(
            executable_path=require_chromium(), args=list(LAUNCH_ARGS)
        )
        yield browser
        await browser.close()


def require_apps(case: Case) -> None:
    """The frameworks' npm packages (``make test`` installs them)."""
    if case.app and not NODE_MODULES.is_dir():
        missing = f"npm packages are missing: run npm ci --prefix {NODE_MODULES.parent}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(missing)
        pytest.skip(missing)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_adaptive_captures_what_the_page_shows_once_done_and_says_when_a_limit_ended_it(
    pool, reader, origin, case: Case, monkeypatch
) -> None:
    require_apps(case)
    # A page whose requests never stop is held to the hard limit: a short render_timeout.
    site = SiteSettings(origin=origin, render_timeout=12.0 if case.held else -1.0)
    assert site.readiness == "adaptive"  # the default
    met = rules_met(monkeypatch)
    result = await pool.capture(origin + case.path, site)
    assert result.ok, result
    assert await visible_text(reader, result.html) == case.expected
    # Only a page that never stops changing, or asking, is captured at a limit, and said to be.
    assert result.readiness_limit is (case.endless or case.held)
    if case.endless:
        assert met == ["limit"], met  # javascript_timeout's, not render_timeout
    if case.held:
        assert met == ["hard"], met  # render_timeout's, captured all the same
    if case.app:  # nothing late: ready once settled after its last request, not at the limit
        assert met == ["settled"], met


FINISHING = [c for c in CASES if c.timers or c.declares]


@pytest.mark.parametrize("case", FINISHING, ids=[c.name for c in FINISHING])
async def test_quiet_readiness_shows_the_same_on_pages_finishing_within_its_window(
    pool, reader, origin, case: Case
) -> None:
    # What the adaptive rule must show is what SEO4Ajax's rule shows.
    site = SiteSettings(origin=origin, readiness="quiet")
    result = await pool.capture(origin + case.path, site)
    assert result.ok, result
    assert await visible_text(reader, result.html) == case.expected
    assert not result.readiness_limit


async def test_a_late_onCaptureReady_is_not_waited_for_when_the_page_did_not_declare_it(
    pool, reader, origin
) -> None:
    result = await pool.capture(origin + "/c/latecall", SiteSettings(origin=origin))
    assert result.ok, result
    assert await visible_text(reader, result.html) == "Shown at first"  # not its late call
    declared = SiteSettings(origin=origin, wait_for_capture_ready=True)
    result = await pool.capture(origin + "/c/latecall", declared)
    assert result.ok, result
    assert await visible_text(reader, result.html) == "Called after five seconds"


@pytest.mark.parametrize("path", ["/c/sharedworker", "/c/clock"])
async def test_quiet_readiness_still_waits_for_network_quiet(pool, reader, origin, path) -> None:
    # A shared worker's script request never reports its end: it must not hold the page. A
    # clock still ticking when the quiet period ended is said to have been cut.
    case = next(c for c in CASES if c.path == path)
    site = SiteSettings(origin=origin, readiness="quiet")
    result = await pool.capture(origin + case.path, site)
    assert result.ok, result
    assert await visible_text(reader, result.html) == case.expected
    assert result.readiness_limit is case.endless

