"""A capture slot's viewport: the crawler's screen at its normal height, then its tall one.

Invariants:

- A page is laid out at the profile's normal height until its document has parsed and
  painted a frame, then in the crawler's tall viewport; :meth:`Viewport.grow` returns once
  two frames have been drawn at that height, so what came into view has been told
  (IntersectionObserver notifies in a task after the frame) and what it starts is seen by
  the readiness rules.
- Nothing scrolls unless the site opts in (``scroll``): then down to the document's end, a
  viewport at a time, two frames apart, ``SCROLL_STEPS`` viewports at most, so an endless
  list ends.
- A site whose tall height is at or below the profile's normal height keeps its pages in the
  normal viewport: no resize, no frames waited for.
- :meth:`Viewport.reset` puts the page back at the normal height, for the next capture.
- A wait for the page's frames lasts ``FRAME_WAIT`` at most; a navigation that replaces the
  document meanwhile ends it.
"""

from __future__ import annotations

import asyncio
import contextlib

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Page

from snapshotd.crawlers.devices import Profile

__all__ = ["FRAME_WAIT", "SCROLL_STEPS", "Viewport"]

FRAME_WAIT = 2.0  # seconds a capture waits for the page's next frames around the resize
SCROLL_STEPS = 20  # viewports a site's ``scroll`` goes down at most
_ONE_FRAME = "() => new Promise(r => requestAnimationFrame(() => r()))"
_TWO_FRAMES = "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))"
_SCROLL = """async (steps) => {
  const frames = () => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
  for (let i = 0; i < steps; i++) {
    const before = scrollY;
    scrollBy(0, innerHeight);
    await frames();
    if (scrollY === before) break;
  }
}"""


async def _frames(page: Page, script: str) -> None:
    with contextlib.suppress(TimeoutError, PlaywrightError):
        await asyncio.wait_for(page.evaluate(script), FRAME_WAIT)


class Viewport:
    """The viewport of one slot's page, rendering ``profile``."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self.size = (profile.width, profile.height)  # the page's viewport now

    async def grow(self, page: Page, height: int) -> None:
        """Lay the page out in the crawler's tall viewport ``height`` (the module's rule); a
        height at or below the profile's normal one leaves the page as it is, waiting for
        nothing."""
        if height <= self.profile.height:
            return
        with contextlib.suppress(PlaywrightError):  # a navigation replaced the document
            await page.wait_for_load_state("domcontentloaded")
            await _frames(page, _ONE_FRAME)
        await self._set(page, self.profile.width, max(height, self.profile.height))
        await _frames(page, _TWO_FRAMES)

    async def screen(self, page: Page, width: int, height: int) -> None:
        """A screenshot's viewport, ``width`` by ``height``: its first screen, not the tall
        one."""
        await self._set(page, width, height)

    async def scroll(self, page: Page) -> None:
        """Scroll to the document's end (a site's ``scroll`` opt-in)."""
        with contextlib.suppress(PlaywrightError, TimeoutError):
            await asyncio.wait_for(page.evaluate(_SCROLL, SCROLL_STEPS), SCROLL_STEPS * 0.5)

    async def reset(self, page: Page) -> None:
        """Back at the profile's normal size."""
        await self._set(page, self.profile.width, self.profile.height)

    async def _set(self, page: Page, width: int, height: int) -> None:
        if (width, height) != self.size:
            await page.set_viewport_size({"width": width, "height": height})
            self.size = (width, height)
