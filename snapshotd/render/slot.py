"""A capture slot: one browser context and one page, reused capture after capture.

Invariants:

- Each capture starts from a clean slate, as :mod:`.wipe` says (and is done there); a
  capture and its wait until the page is ready are :mod:`.page_capture`'s, which says what
  is loaded, when a page is ready and when its origin was lost.
- The page speaks to its capture through :mod:`.channel` alone: no function of the capture's
  is on the page's window, and what it can say is bounded. A page that says too much is no
  longer heard, and its slot is replaced after the capture.
- No wait is unbounded: opening a slot (context, page, DevTools session) by
  :data:`OPEN_TIMEOUT`, a capture by ``render_timeout``, the wipe by ``_RESET_TIMEOUT``,
  closing the context by ``_CLOSE_TIMEOUT``; the caller closes a slot that did not open.
- Every TCP connection of the context goes through the slot's egress guard, which decides
  what the page may reach. Requests of ``block_resources`` types in the page's own process
  are failed before they are sent. Only the requests :mod:`.pauses` names are paused, each
  for a round trip to Python (Playwright's route() would pause every request).
  When the site changes, the guard drops its open tunnels so no kept-alive socket opened for
  one origin serves another.
- A slot renders one device profile (:mod:`snapshotd.crawlers.devices`) with one user agent, set
  on its context: the page's ``navigator.userAgent`` is the crawler's, every request's
  ``User-Agent`` the one :meth:`~snapshotd.crawlers.devices.Profile.header_agent` gives for the
  site (set on the context's extra headers and, where Chromium ignores those, at a pause:
  :mod:`.pauses`), and every request carries ``X-Snapshotd: 1`` and ``X-Prerender: 1``.
  What the page reads, or its answers say, that differs between profiles is reported with the
  capture (:mod:`.device_probe`). The page is put in the crawler's tall viewport
  (:mod:`.viewport`) before any readiness rule can end the wait, so what the taller view
  brings in (IntersectionObserver, ``loading="lazy"``) is waited for like the rest; it is
  back at the normal height before the slot's next capture.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from playwright.async_api import (
    Browser,
    BrowserContext,
    CDPSession,
    Page,
    Request,
    Response,
)
from playwright.async_api import Error as PlaywrightError

from snapshotd.config.settings import BrowserSettings, SiteSettings
from snapshotd.crawlers.devices import PROFILES, Profile
from snapshotd.render import readiness
from snapshotd.render.channel import BINDING, Channel, page_script
from snapshotd.render.device_probe import BUILDS_THE_PAGE, PROBE_SCRIPT, varies_by_device
from snapshotd.render.guard import EgressGuard, Resolver
from snapshotd.render.page_capture import CaptureCrashed, PageCapture, consume
from snapshotd.render.page_output import QUIET_SCRIPT
from snapshotd.render.pauses import Pauses
from snapshotd.render.renderer import CaptureResult, Shot, first_line
from snapshotd.render.shadow import SHADOW_SCRIPT
from snapshotd.render.signals import PAGE_SCRIPT, Signals, settle
from snapshotd.render.viewport import GROW_SCRIPT, Viewport
from snapshotd.render.wipe import Wipe

__all__ = ["OPEN_TIMEOUT", "CaptureCrashed", "Slot"]

log = logging.getLogger("snapshotd.render")

OPEN_TIMEOUT = 20.0  # seconds a new context and page may take to be ready
_CLOSE_TIMEOUT = 10.0
_RESET_TIMEOUT = 10.0


_WORKERS = [{"type": "worker"}, {"type": "shared_worker"}]  # the targets discovered


def _is_main_frame(request: Request, page: Page) -> bool:
    try:
        return request.frame == page.main_frame
    except PlaywrightError:  # service worker requests have no frame
        return False


def _marked(agent: str) -> dict[str, str]:
    """A capture's extra request headers: its ``User-Agent``, and the marks that tell
    snapshotd's renderer (``X-Snapshotd``) and any Prerender-style middleware
    (``X-Prerender``) that it is not a crawler to render for."""
    return {"User-Agent": agent, "X-Snapshotd": "1", "X-Prerender": "1"}


class Slot:
    """One context and page of a browser, capturing one URL at a time."""

    def __init__(
        self,
        browser: Browser,
        settings: BrowserSettings,
        *,
        resolve: Resolver | None = None,
        profile: Profile = PROFILES["desktop"],
        agent: str = "",
    ) -> None:
        self.browser = browser
        self.settings = settings
        self.profile = profile
        self.agent = agent  # the site's override of the profile's user agent, or ""
        self.kind = (profile, agent)  # what a capture asks a slot to be (render/pool)
        self._viewport = Viewport(profile)
        self.captures = 0
        self.usable = False
        self._wipe = Wipe()
        self._guard = EgressGuard("", resolve=resolve)
        self._context: BrowserContext | None = None
        self._page: Page | None = None
        self._cdp: CDPSession | None = None
        self._signals = Signals()
        self._channel = Channel()
        self._pauses = Pauses(settings.block_resources)
        self._header_agent = self._agent_for(crawler=False)  # what requests carry
        self._patterns: list[dict[str, str]] = []  # what Fetch was last told to pause
        self._tasks: set[asyncio.Future[None]] = set()

    def _agent_for(self, *, crawler: bool) -> str:
        return self.profile.header_agent(self.browser.version, self.agent, crawler=crawler)

    @property
    def collections(self) -> int:
        """Garbage collections asked of V8 (:mod:`.wipe`)."""
        return self._wipe.collections

    async def open(self) -> None:
        """Open the slot's context and page; raises ``TimeoutError`` past
        :data:`OPEN_TIMEOUT` (the caller closes the slot)."""
        try:
            async with asyncio.timeout(OPEN_TIMEOUT):
                await self._open()
        except TimeoutError:
            raise TimeoutError(f"no page opened in {OPEN_TIMEOUT:g} s") from None

    async def _open(self) -> None:
        await self._guard.start()
        context = self._context = await self.browser.new_context(
            proxy={"server": self._guard.proxy_server},
            service_workers="block",
            extra_http_headers=_marked(self._header_agent),
            accept_downloads=False,
            **self.profile.context_options(self.browser.version, self.agent),
        )
        await context.add_init_script(
            page_script(
                PAGE_SCRIPT,
                GROW_SCRIPT,
                PROBE_SCRIPT,
                SHADOW_SCRIPT,
                QUIET_SCRIPT,
                readiness.settle_script(self.settings.javascript_timeout),
            )
        )
        context.on("request", self._on_request)
        context.on("requestfinished", lambda r: self._signals.ended(r))
        context.on("requestfailed", lambda r: self._signals.failed(r))
        page = self._page = await context.new_page()
        page.on("response", self._on_response)
        page.on("load", lambda _: self._signals.loaded.set())
        page.on("crash", lambda _: self._signals.crash("page crashed"))
        page.on("close", lambda _: self._signals.crash("page closed"))
        self._cdp = self._viewport.session = await context.new_cdp_session(page)
        # The page's channel (.channel): a native binding of this session alone. Runtime
        # stays enabled on this session, or new documents do not get it.
        self._cdp.on("Runtime.bindingCalled", self._on_binding)
        await self._cdp.send("Runtime.enable")
        await self._cdp.send("Runtime.addBinding", {"name": BINDING})
        await self._intercept(self._cdp)
        info = await self._cdp.send("Target.getTargetInfo")
        self._wipe.context_id = info["targetInfo"].get("browserContextId", "")
        # The browser reports every worker as it starts and ends, in any frame; the filter
        # keeps other targets' events (pages, navigations) off this session.
        self._cdp.on("Target.targetCreated", self._on_target_created)
        self._cdp.on("Target.targetDestroyed", self._on_target_destroyed)
        await self._cdp.send("Target.setDiscoverTargets", {"discover": True, "filter": _WORKERS})
        self.usable = True

    async def close(self, *, context: bool = True) -> None:
        """Close the context (unless its browser is closing anyway) and the guard."""
        self.usable = False
        self._signals.crash("slot closed")
        try:
            if context and self._context is not None and self.browser.is_connected():
                try:
                    async with asyncio.timeout(_CLOSE_TIMEOUT):
                        await self._context.close()
                except (TimeoutError, PlaywrightError) as exc:
                    if self.browser.is_connected():
                        log.warning("closing a browser context: %s", first_line(exc))
        finally:
            self._context = None
            await self._guard.close()

    async def shows(self, html: str, selector: str) -> str:
        """The text of ``selector``'s element once ``html`` is the page, read by a script."""
        assert self._page is not None
        await self._page.set_content(html)
        read = "s => document.querySelector(s).textContent"
        return str(await self._page.evaluate(read, selector))

    # --------------------------------------------------------------- event handlers

    async def _intercept(self, cdp: CDPSession) -> None:
        """Answer Fetch's pauses as :class:`~snapshotd.render.pauses.Pauses` says; nothing
        else is ever paused."""

        async def answer(event: dict[str, Any]) -> None:
            command, params = self._pauses.answer(event)
            if command == "Fetch.failRequest":
                self._signals.blocked += 1
            with contextlib.suppress(PlaywrightError):
                await cdp.send(command, params)

        def on_paused(event: dict[str, Any]) -> None:
            task = asyncio.ensure_future(answer(event))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        cdp.on("Fetch.requestPaused", on_paused)
        await self._pause()

    async def _pause(self) -> None:
        """Tell Fetch what to pause, when that changed."""
        patterns = self._pauses.patterns()
        if patterns != self._patterns and self._cdp is not None:
            await self._cdp.send("Fetch.enable", {"patterns": patterns})
            self._patterns = patterns

    def _on_request(self, request: Request) -> None:
        self._signals.started(request)
        self._pauses.remember(request.url, request.resource_type)

    async def _forget_fetched(self, cdp: CDPSession) -> None:
        """Past the URLs a context remembers, empty its HTTP cache; then have Fetch pause
        what the cache may hold."""
        if self._pauses.full:
            await cdp.send("Network.clearBrowserCache")
            self._pauses.forget()
        await self._pause()

    def _on_binding(self, event: dict[str, Any]) -> None:
        channel = self._channel
        message = channel.hear(event)
        if channel.deaf and self.usable:
            log.info("a page said too much through its channel; its slot will be replaced")
            self.usable = False  # its context, and the binding with it, go after the capture
            if self._cdp is not None:
                stop = self._cdp.send("Runtime.removeBinding", {"name": BINDING})
                consume(asyncio.ensure_future(stop))
        if message is not None:
            self._signals.heard(*message, normal_height=self.profile.height)

    def _on_target_created(self, event: dict[str, Any]) -> None:
        info = event.get("targetInfo", {})
        if info.get("browserContextId") != self._wipe.context_id:
            return
        if self._signals.worker_started(str(info.get("targetId", ""))) and self._cdp is not None:
            # The page is stopped at once, before its capture ends and its context goes: no
            # script of it runs again, so it starts nothing more meanwhile.
            self.usable = False
            stop = self._cdp.send("Emulation.setScriptExecutionDisabled", {"value": True})
            consume(asyncio.ensure_future(stop))

    def _on_target_destroyed(self, event: dict[str, Any]) -> None:
        self._signals.worker_ended(str(event.get("targetId", "")))

    def _on_response(self, response: Response) -> None:
        request = response.request
        page = self._page
        signals = self._signals
        if request.resource_type in BUILDS_THE_PAGE and varies_by_device(
            response.headers.get("vary", "")
        ):
            signals.device_read("vary")
        if page is None or not request.is_navigation_request():
            return
        if not _is_main_frame(request, page):
            return
        if signals.first_document is None:
            signals.first_document = response
            if 300 <= response.status < 400:
                signals.device_read("redirect")
                settle(signals.redirected, response)
                return
        if not 300 <= response.status < 400:
            signals.document = response

    # --------------------------------------------------------------- capture

    async def capture(
        self, url: str, site: SiteSettings, shot: Shot | None = None
    ) -> CaptureResult:
        """Capture ``url`` (in ``shot``'s viewport, and its screenshot); raises
        :class:`CaptureCrashed`, reports everything else.

        The slot stays usable only after a clean capture and a clean reset (the viewport
        back at the profile's size).
        """
        started = time.monotonic()
        assert self._page is not None
        self.captures += 1
        if site.origin != self._guard.origin:
            # Kept-alive tunnels were judged for the previous site's origin.
            self._guard.drop_connections()
            self._guard.origin = self._pauses.origin = site.origin
        self._guard.refused.clear()
        self._guard.unreachable.clear()
        signals = self._signals = Signals(origin=site.origin)
        self._channel = Channel()

        def on_disconnect(_: Browser) -> None:
            signals.crash("browser disconnected")

        self.browser.on("disconnected", on_disconnect)
        clean = False
        try:
            async with asyncio.timeout(self.settings.timeouts(site)[1]):
                agent = self._agent_for(crawler=site.origin_user_agent == "crawler")
                if agent != self._header_agent and self._context is not None:
                    await self._context.set_extra_http_headers(_marked(agent))
                    self._header_agent = agent
                page_agent = self.profile.agent(self.browser.version, self.agent)
                paused_agent = "" if agent == page_agent else agent
                if (site.headers, paused_agent) != (self._pauses.headers, self._pauses.agent):
                    self._pauses.headers, self._pauses.agent = site.headers, paused_agent
                    await self._pause()
                if shot is not None:
                    await self._viewport.screen(self._page, shot.width, shot.height)
                taking = PageCapture(
                    self.settings, self.profile, self._guard, self._viewport, self._cdp
                )
                result = await taking(self._page, url, site, signals, started, shot)
                if not taking.usable:
                    self.usable = False
                if shot is not None:
                    await self._viewport.reset(self._page)
            clean = result.error is None or result.error.startswith(("http ", "empty body"))
            return result
        except TimeoutError:
            return CaptureResult.failed(url, "timeout", started)
        except PlaywrightError as exc:
            if signals.crashed.done() or not self.browser.is_connected():
                why = signals.crashed.result() if signals.crashed.done() else "browser gone"
                raise CaptureCrashed(why) from None
            return CaptureResult.failed(url, f"browser error: {first_line(exc)}", started)
        finally:
            self.browser.remove_listener("disconnected", on_disconnect)
            if not clean:
                self.usable = False

    # --------------------------------------------------------------- between captures

    async def reset(self) -> bool:
        """Wipe what the last capture left; False (and the slot unusable) if that failed."""
        if not self.usable or self._page is None or self._context is None:
            self.usable = False
            return False
        page, context, cdp = self._page, self._context, self._cdp
        assert cdp is not None
        origins = set(self._signals.origins)
        try:
            async with asyncio.timeout(_RESET_TIMEOUT):
                if not await self._wipe.storage(page, context, cdp, origins):
                    self.usable = False
                    return False
                # One concurrent round: the cache, the viewport and the heap are none of the
                # storage's business, nor of each other's.
                await asyncio.gather(
                    self._forget_fetched(cdp),
                    self._viewport.reset(page),
                    self._wipe.collect_garbage(cdp),
                )
            return True
        except (TimeoutError, PlaywrightError) as exc:
            reason = first_line(exc)
            # A browser closing under the slot (shutdown, recycle) is no news for the log.
            closing = not self.browser.is_connected() or "has been closed" in reason
            log.log(
                logging.DEBUG if closing else logging.INFO,
                "could not reset a capture slot, replacing it: %s",
                reason,
            )
            self.usable = False
            return False
