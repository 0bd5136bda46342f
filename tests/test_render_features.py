"""The Chromium features a capture's browser runs without (snapshotd.render.features), read
off the command line of real browsers: Playwright's own launch beside the pool's.

The only page rendered is served on 127.0.0.1.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, async_playwright
from pytest_httpserver import HTTPServer

from snapshotd.config.settings import BrowserSettings, SiteSettings
from snapshotd.render import BrowserPool
from snapshotd.render import features as features_module
from tests.chromium import require_chromium

pytestmark = pytest.mark.browser


@pytest.fixture
def origin() -> Iterator[str]:
    server = HTTPServer(host="127.0.0.1", port=0)
    server.expect_request("/").respond_with_data(
        "<!doctype html><title>t</title><p id=x></p>"
        "<script>document.getElementById('x').textContent = 'drawn'</script>",
        content_type="text/html",
    )
    server.start()
    yield f"http://127.0.0.1:{server.port}"
    server.clear()
    server.stop()


async def _switches(browser: Browser, name: str) -> list[str]:
    """The values of the ``name`` switches on ``browser``'s own command line."""
    session = await browser.new_browser_cdp_session()
    processes = (await session.send("SystemInfo.getProcessInfo"))["processInfo"]
    pid = next(p["id"] for p in processes if p["type"] == "browser")
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    return [a.removeprefix(f"{name}=") for a in argv if a.startswith(f"{name}=")]


async def _playwright_features() -> list[str]:
    """The features Playwright itself switches off, on a plain launch of its own."""
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=require_chromium())
        try:
            [features] = await _switches(browser, "--disable-features")
        finally:
            await browser.close()
    return features.split(",")


async def _pool_switches(origin: str) -> tuple[list[str], str]:
    """The pool's browser's --disable-features switches, and what it rendered."""
    pool = BrowserPool(BrowserSettings(concurrency=1, executable=require_chromium()), spares=0)
    await pool.start()
    try:
        assert pool._current is not None
        switches = await _switches(pool._current.browser, "--disable-features")
        result = await pool.capture(f"{origin}/", SiteSettings(origin=origin))
        assert result.ok, result
        return switches, result.html
    finally:
        await pool.close()


async def test_the_pool_keeps_every_feature_playwright_switches_off_and_adds_its_own(
    origin,
) -> None:
    theirs = await _playwright_features()
    assert theirs and "RenderDocument" not in theirs  # a plain launch keeps it on
    switches, html = await _pool_switches(origin)
    # Chromium keeps only the last switch: there is one, Playwright's features first.
    assert len(switches) == 1, switches
    assert switches[0].split(",") == [*theirs, *features_module.DISABLED]
    assert "drawn" in html


@pytest.mark.parametrize("why", ["records nothing", "has no directory"])
async def test_a_recorder_that_tells_nothing_leaves_playwright_s_launch_as_it_is(
    origin, monkeypatch, caplog, tmp_path, why
) -> None:
    if why == "records nothing":
        monkeypatch.setattr(features_module, "_RECORDER", "#!/bin/sh\nexit 1\n")
    else:  # no temporary directory to write it in: an OSError, not a failed start
        monkeypatch.setattr(features_module.tempfile, "tempdir", str(tmp_path / "gone"))
    caplog.set_level(logging.INFO, logger="snapshotd")
    theirs = await _playwright_features()
    switches, html = await _pool_switches(origin)
    assert switches == [",".join(theirs)]
    assert "drawn" in html
    said = [r.getMessage() for r in caplog.records if "RenderDocument" in r.getMessage()]
    assert said == [
        "chromium runs with RenderDocument on: Playwright's launch switches could not be read"
    ]
