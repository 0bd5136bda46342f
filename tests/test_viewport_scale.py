"""The tall viewport drawn at a reduced scale (snapshotd.render.viewport): the page sees
exactly what it sees at full scale, on real Chromium through Playwright, for each profile; a
Chromium that refuses the scale gets full scale. What the scale saves is Chromium's time on
long pages, measured by ``bench/bench_apps.py`` (docsify's)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from playwright.async_api import Browser, Page, async_playwright
from playwright.async_api import Error as PlaywrightError

from snapshotd.crawlers.devices import PROFILES
from snapshotd.render.chromium import LAUNCH_ARGS
from snapshotd.render.viewport import Viewport
from tests.chromium import require_chromium

TALL = 12_000

# A page as long as a long article, with what a page may read of its viewport.
PAGE = (
    "<!doctype html><html><head><meta name=viewport content='width=device-width'></head>"
    "<body style='margin:0'>" + "<p>a line of text in a long document</p>" * 600
    + "<div id=near style='position:absolute;top:11000px;height:10px;width:10px'></div>"
    "<div id=far style='position:absolute;top:12500px;height:10px;width:10px'></div>"
    "<img id=lazy loading=lazy width=20 height=20 style='position:absolute;top:11500px'"
    " src='data:image/gif;base64,R0lGODlhAQABAAAAACw='></body></html>"
)

# What the page sees, once the IntersectionObserver has told of both targets; the lazy image
# is waited for ``wait`` ms at most (it is fetched a moment after it comes into view).
SEES = """wait => new Promise(done => {
  const seen = {};
  const img = document.getElementById('lazy');
  const loaded = () => img.complete || new Promise(r => {
    img.addEventListener('load', () => r(true));
    img.addEventListener('error', () => r(true));  // fetched, whatever it holds
    setTimeout(() => r(img.complete), wait);
  });
  const io = new IntersectionObserver(async entries => {
    for (const e of entries) seen[e.target.id] = [e.isIntersecting, e.rootBounds.width,
                                                 e.rootBounds.height];
    if (Object.keys(seen).length < 2) return;
    io.disconnect();
    const vv = visualViewport;
    done({
      ...seen,
      inner: [innerWidth, innerHeight], outer: [outerWidth, outerHeight],
      screen: [screen.width, screen.height, screen.availWidth, screen.availHeight,
               screen.orientation.type, screen.orientation.angle],
      dpr: devicePixelRatio, visual: [vv.width, vv.height, vv.scale],
      client: [document.documentElement.clientWidth, document.documentElement.clientHeight],
      media: ['(max-width: 500px)', '(min-height: 9000px)', '(min-resolution: 2dppx)',
              '(orientation: portrait)', '(pointer: coarse)', '(hover: none)',
              '(min-device-height: 9000px)', '(device-aspect-ratio: 412/732)']
             .map(q => matchMedia(q).matches),
      lazy: await loaded(),
    });
  });
  io.observe(document.getElementById('near'));
  io.observe(document.getElementById('far'));
})"""


@contextlib.asynccontextmanager
async def _browser() -> AsyncIterator[Browser]:
    """The suite's Chromium, launched as the pool launches it."""
    async with async_playwright() as p:
        browser = await p.chromium.launch(
            executable_path=require_chromium(), args=list(LAUNCH_ARGS)
        )
        try:
            yield browser
        finally:
            await browser.close()


async def _grow(viewport: Viewport, page: Page) -> None:
    """The page in the tall viewport, as a capture grows it once the page has painted."""
    done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    done.set_result(None)
    await viewport.grow(page, TALL, done, done)


async def _seen(page: Page, *, tall: bool = False) -> dict[str, Any]:
    """What the page sees; in the tall viewport, once its lazy image loaded (10 s at most: a
    hang's bound), in the normal one at once (the image lies far out of its reach)."""
    await page.set_content(PAGE)
    return dict(await page.evaluate(SEES, 10_000 if tall else 0))


@pytest.mark.parametrize("name", ["mobile", "desktop"])
async def test_the_page_sees_the_tall_viewport_drawn_small_as_it_sees_it_at_full_scale(
    name: str,
) -> None:
    """What a page reads of its viewport, screen and pixel ratio, which media queries match
    and what intersects the viewport are the same in the scaled tall viewport as in the one
    Playwright sets alone, and back at the normal height."""
    profile = PROFILES[name]
    seen: dict[str, list[dict[str, Any]]] = {}
    async with _browser() as browser:
        for way in ("full", "scaled"):
            context = await browser.new_context(**profile.context_options(browser.version))
            page = await context.new_page()
            session = await context.new_cdp_session(page)
            viewport = Viewport(profile)
            if way == "scaled":
                viewport.session = session
            await _grow(viewport, page)
            tall = await _seen(page, tall=True)
            await viewport.reset(page)
            seen[way] = [tall, await _seen(page)]
            await context.close()
    assert seen["scaled"] == seen["full"]
    tall, normal = seen["full"]
    assert tall["near"][0] and not tall["far"][0] and tall["lazy"]
    assert not normal["near"][0]


async def test_a_chromium_that_refuses_the_scale_gets_full_scale_and_it_is_said_once(
    monkeypatch, caplog
) -> None:
    """When Chromium refuses the view scale, the page is sized as Playwright sizes it and
    every viewport from then on is drawn at full scale; one warning says so."""
    monkeypatch.setattr(Viewport, "scaled", True)

    class Refusing:
        def __init__(self) -> None:
            self.asked = 0

        async def send(self, method: str, params: Any = None) -> Any:
            self.asked += 1
            raise PlaywrightError("Protocol error (Emulation.setDeviceMetricsOverride): no")

    profile = PROFILES["mobile"]
    caplog.set_level(logging.WARNING, "snapshotd.render")
    async with _browser() as browser:
        context = await browser.new_context(**profile.context_options(browser.version))
        page = await context.new_page()
        refusing = Refusing()
        for _ in range(2):
            viewport = Viewport(profile)
            viewport.session = refusing  # type: ignore[assignment]
            await _grow(viewport, page)
            assert (await _seen(page))["inner"][1] > profile.height
            await viewport.reset(page)
    assert Viewport.scaled is False
    assert refusing.asked == 1
    warnings = [r for r in caplog.records if "view scale" in r.getMessage()]
    assert len(warnings) == 1


async def test_a_page_that_fails_while_sized_leaves_the_scale_to_other_pages(monkeypatch) -> None:
    """A failure that is no refusal (the page crashed as it was sized) fails that page's
    capture, and every other page is still drawn small."""
    monkeypatch.setattr(Viewport, "scaled", True)

    class Crashed:
        async def send(self, method: str, params: Any = None) -> Any:
            raise PlaywrightError("Target crashed")

    profile = PROFILES["mobile"]
    async with _browser() as browser:
        context = await browser.new_context(**profile.context_options(browser.version))
        page = await context.new_page()
        viewport = Viewport(profile)
        viewport.session = Crashed()  # type: ignore[assignment]
        with pytest.raises(PlaywrightError):
            await _grow(viewport, page)
    assert Viewport.scaled is True
