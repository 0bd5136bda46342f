"""A capture slot's viewport: the crawler's screen at its normal height, then its tall one.

Invariants:

- A page is laid out at the profile's normal height until its document has parsed and
  painted a frame, then in the crawler's tall viewport; :meth:`Viewport.grow` returns once
  two frames have been drawn at that height, so what came into view has been told
  (IntersectionObserver notifies in a task after the frame) and what it starts is seen by
  the readiness rules.
- The page's side (:data:`GROW_SCRIPT`, in the main frame's init script) says both moments
  through the capture's channel as they happen (``painted``: the document parsed and a frame
  drawn; ``grown``: two frames drawn after the browser's own resize event), so no round trip
  to the page waits for them. It reads nothing of the device, and its frames are the
  browser's own, unseen by the readiness's tasks. A page that is not heard (its channel
  gone deaf) is resized ``FRAME_WAIT`` after its document parsed, and waited for
  ``FRAME_WAIT`` at most once resized.
- Nothing scrolls unless the site opts in (``scroll``): then down to the document's end, a
  viewport at a time, two frames apart, ``SCROLL_STEPS`` viewports at most, so an endless
  list ends.
- A site whose tall height is at or below the profile's normal height keeps its pages in the
  normal viewport: no resize, no frames waited for.
- The tall viewport is drawn at a reduced scale (DevTools' view scale, ``scale`` of
  ``Emulation.setDeviceMetricsOverride``): its pixels cost what the normal viewport's do,
  where at full scale a long page costs Chromium more to raster than to lay out. The page
  sees nothing of it: its viewport, screen, pixel ratio, media queries and what intersects
  its viewport are those of the tall viewport at full scale (``tests/test_viewport_scale.py``
  holds Chromium and Playwright to that). A screenshot's viewport and the normal one are at
  full scale.
- The sizes a screenshot is taken at (a shot's, and the normal one after it) are set through
  Playwright (its own idea of the viewport, which its screenshots clip to) and then with the
  slot's DevTools session, whose metrics are the ones Chromium applies. The tall viewport,
  never shot, is set with the session's metrics alone, and a desktop page's window with the
  same session (:meth:`Viewport._window_at`). If Chromium refuses the session's metrics, this
  process sets sizes through Playwright alone from then on (at full scale), and says so
  once.
- :meth:`Viewport.reset` puts the page back at the normal height, for the next capture.
- A wait for the page's frames lasts ``FRAME_WAIT`` at most; a navigation that replaces the
  document meanwhile ends it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable
from typing import Any

from playwright.async_api import CDPSession, Page
from playwright.async_api import Error as PlaywrightError

from snapshotd.crawlers.devices import Profile

__all__ = ["FRAME_WAIT", "GROW_SCRIPT", "SCROLL_STEPS", "Viewport"]

log = logging.getLogger("snapshotd.render")

# How Chromium's refusal of the metrics reads through Playwright (a method or parameter it
# does not take); a crashed or closed page fails otherwise, and only its slot goes.
_REFUSED = "Protocol error (Emulation.setDeviceMetricsOverride)"

FRAME_WAIT = 2.0  # seconds a capture waits for the page's next frames around the resize
SCROLL_STEPS = 20  # viewports a site's ``scroll`` goes down at most
# Run inside :func:`.channel.page_script`, before the device probe's and the readiness's
# wrappers: the main frame's document says when it has parsed and drawn a frame, with its
# height then, and when two frames were drawn after the browser resized it (an event a
# script cannot fake). It reads the height, draws frames and listens as the browser's own
# functions do, so the page's reads and tasks are not told of it.
GROW_SCRIPT = """
(() => {
  if (!heard || window !== window.top) return;
  const height = Object.getOwnPropertyDescriptor(window, "innerHeight").get.bind(window);
  const frame = requestAnimationFrame.bind(window);
  let painted = false, grown = false;
  // Listened to first, in the capture phase: no page script can keep either from us.
  addEventListener("DOMContentLoaded", () => frame(() => {
    painted = true;
    say("painted", String(height()));
  }), { capture: true, once: true });
  addEventListener("resize", (e) => {
    if (!painted || grown || !e.isTrusted) return;
    grown = true;
    frame(() => frame(() => say("grown", "")));
  }, { capture: true });
})();
"""
_SCROLL = """async (steps) => {
  const frames = () => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
  for (let i = 0; i < steps; i++) {
    const before = scrollY;
    scrollBy(0, innerHeight);
    await frames();
    if (scrollY === before) break;
  }
}"""


async def _heard(said: asyncio.Future[Any], bound: Awaitable[Any] | None = None) -> None:
    """Wait for the page to say ``said``, ``FRAME_WAIT`` at most (after ``bound``, if any)."""
    if bound is not None:
        waiter = asyncio.ensure_future(bound)
        try:
            await asyncio.wait([said, waiter], return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(said), FRAME_WAIT)


async def _parsed(page: Page) -> None:
    with contextlib.suppress(PlaywrightError):  # a navigation replaced the document
        await page.wait_for_load_state("domcontentloaded")


class Viewport:
    """The viewport of one slot's page, rendering ``profile``; ``session``, the slot's
    DevTools session on that page, once it is open."""

    scaled = True  # False once Chromium refused a view scale: full scale from then on

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self.session: CDPSession | None = None
        self.size = (profile.width, profile.height)  # the page's viewport now
        self.told = self.size  # the viewport Playwright was told of last
        self.window = self.size  # the browser window's size
        self._window_id: int | None = None
        self.scale = 1.0  # the scale it is drawn at
        self._set_here = False  # the session's metrics are the ones Chromium applies

    async def grow(
        self, page: Page, height: int, painted: asyncio.Future[int], grown: asyncio.Future[None]
    ) -> None:
        """Lay the page out in the crawler's tall viewport ``height`` (the module's rule),
        once the page said it ``painted``, until it says it has ``grown``; a height at or
        below the profile's normal one leaves the page as it is, waiting for nothing."""
        if height <= self.profile.height:
            return
        await _heard(painted, _parsed(page))
        await self._set(page, self.profile.width, height, self.profile.height / height,
                        shown=False)
        await _heard(grown)

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

    async def _set(
        self, page: Page, width: int, height: int, scale: float = 1.0, *, shown: bool = True
    ) -> None:
        """The page's viewport ``width`` by ``height``, drawn at ``scale`` (the module's
        rule); ``shown``: Playwright is told the size too (a screenshot is taken at it), where
        the tall viewport, never shot, is the session's alone."""
        if (width, height) == self.size and scale == self.scale:
            return
        size = (width, height)
        if shown or self.session is None or not Viewport.scaled:
            await self._tell(page, size)
        self.size = size
        if self.session is None or not Viewport.scaled:
            return
        try:
            await self.session.send(
                "Emulation.setDeviceMetricsOverride", self._metrics(width, height, scale)
            )
        except PlaywrightError as exc:
            if self._set_here or _REFUSED not in str(exc):
                raise  # the page is gone, or held at metrics set here before: the slot goes
            Viewport.scaled = False
            log.warning("Chromium refused a view scale (%s): tall viewports are drawn at "
                        "full scale", str(exc).splitlines()[0])
            await self._tell(page, size)  # Playwright's alone, from now on
            return
        self._set_here = True
        self.scale = scale
        await self._window_at(size)

    async def _tell(self, page: Page, size: tuple[int, int]) -> None:
        """Playwright's viewport (and with it the window) ``size``, unless it is already."""
        if size != self.told:
            await page.set_viewport_size({"width": size[0], "height": size[1]})
            self.told = self.window = size

    async def _window_at(self, size: tuple[int, int]) -> None:
        """The browser window ``size``, as Playwright sizes it with the viewport: a desktop
        page reads it as ``outerWidth`` and ``outerHeight``. A phone's page reads its screen
        there, which the metrics set, so a phone's window is left as it is: resizing it to
        the tall viewport and back costs a capture a tenth or more of its CPU (SPEC 4.2), and
        the page sees nothing of it (``tests/test_viewport_scale.py``)."""
        if size == self.window or self.session is None or self.profile.is_mobile:
            return
        if self._window_id is None:
            found = await self.session.send("Browser.getWindowForTarget")
            self._window_id = int(found["windowId"])
        bounds = {"width": size[0], "height": size[1]}
        await self.session.send(
            "Browser.setWindowBounds", {"windowId": self._window_id, "bounds": bounds}
        )
        self.window = size

    def _metrics(self, width: int, height: int, scale: float) -> dict[str, Any]:
        """The device metrics Playwright gives Chromium for the profile at ``width`` by
        ``height`` (the screen as large as the viewport, a phone's orientation its shape),
        drawn at ``scale``."""
        phone, wide = self.profile.is_mobile, width > height
        return {
            "width": width,
            "height": height,
            "deviceScaleFactor": self.profile.device_scale_factor,
            "mobile": phone,
            "screenWidth": width,
            "screenHeight": height,
            "screenOrientation": (
                {"angle": 90, "type": "landscapePrimary"} if phone and wide
                else {"angle": 0, "type": "portraitPrimary"} if phone
                else {"angle": 0, "type": "landscapePrimary"}
            ),
            "scale": scale,
        }
