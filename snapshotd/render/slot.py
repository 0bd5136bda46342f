"""A capture slot: one browser context and one page, reused capture after capture.

Invariants:

- Each capture starts from a clean slate. After a capture the page is sent to about:blank
  (which ends the document, its timers, workers and sockets); once the context's workers are
  gone (a shared worker outlives its document by a few milliseconds), cookies and every kind of
  storage of every origin the capture touched are wiped, session storage and history
  included. If any of that fails, or the capture ended badly (timeout, crash, browser error),
  the slot is closed and the next capture gets a new context. The wipe also has V8 collect
  the old documents' garbage once it passes ``_COLLECT_ABOVE``, so a renderer reused for
  hundreds of captures stays small.
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
- Ready is the first of: ``window.onCaptureReady()`` from the page's main frame; unless
  ``wait_for_capture_ready``, the readiness's rules (:mod:`.readiness`: ``settled`` and its
  ``limit`` for adaptive, ``quiet`` for quiet), held while the page has declared it will say
  when it is ready. ``render_timeout`` bounds the capture, serialisation included. Both
  timeouts are the site's own when it sets them (``BrowserSettings.timeouts``); the tasks'
  quiet period, set in the context's init script, stays the ``[browser]``
  ``javascript_timeout``. A capture a rule ended while the page was still at work says so
  (``readiness_limit``).
- A URL is loaded only when Chromium reads it as the same path and query (``new URL()`` in
  the page, before the navigation): the site path's form resolves what Chromium would
  (:mod:`snapshotd.web.urls`), and a path it would read otherwise is refused unloaded.
- A slot renders one device profile (:mod:`snapshotd.web.devices`) with one user agent, set
  on its context: the page's ``navigator.userAgent`` is the crawler's, every request's
  ``User-Agent`` the one :meth:`~snapshotd.web.devices.Profile.header_agent` gives for the
  site (set on the context's extra headers and, where Chromium ignores those, at a pause:
  :mod:`.pauses`), and every request carries ``X-Snapshotd: 1`` and ``X-Prerender: 1``.
  What the page reads, or its answers say, that differs between profiles is reported with the
  capture (:mod:`.device_probe`). The page is put in the crawler's tall viewport
  (:mod:`.viewport`) before any readiness rule can end the wait, so what the taller view
  brings in (IntersectionObserver, ``loading="lazy"``) is waited for like the rest; it is
  back at the normal height before the slot's next capture.
- A request to the site's own origin that fails at the network level ends the capture as
  ``origin unreachable: …``: what the page shows was built without it. Documents and data
  requests never read the HTTP cache, so no such answer of one capture is served to the
  next; static assets may be, as their origin's cache headers allow (:mod:`.pauses`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Awaitable
from typing import Any
from urllib.parse import urlsplit

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
from snapshotd.net.address_policy import is_origin_url
from snapshotd.render import cleanup, readiness
from snapshotd.render.base import CaptureResult, Shot, first_line
from snapshotd.render.channel import BINDING, Channel, page_script
from snapshotd.render.device_probe import BUILDS_THE_PAGE, PROBE_SCRIPT, varies_by_device
from snapshotd.render.guard import EgressGuard, Resolver
from snapshotd.render.pauses import Pauses
from snapshotd.render.shadow import SHADOW_SCRIPT, serialize
from snapshotd.render.signals import PAGE_SCRIPT, UNREACHABLE, Signals, settle
from snapshotd.render.viewport import GROW_SCRIPT, Viewport
from snapshotd.web.devices import PROFILES, Profile

__all__ = ["OPEN_TIMEOUT", "CaptureCrashed", "Slot"]

log = logging.getLogger("snapshotd.render")

OPEN_TIMEOUT = 20.0  # seconds a new context and page may take to be ready
_CLOSE_TIMEOUT = 10.0
_RESET_TIMEOUT = 10.0
# V8 collects lazily while memory is plentiful: each capture leaves its documents' garbage in
# the renderer's heap (about 1 MB a page on the example app), and without a collection at this
# size it piles up to some 70 MB a renderer before V8 acts.
_COLLECT_ABOVE = 16 * 2**20
_NET_ERROR = re.compile(r"net::ERR_[A-Z_0-9]+")
class CaptureCrashed(Exception):
    """The page or the whole browser died during a capture."""


def _rule(page: Page, rule: Awaitable[None]) -> asyncio.Future[None]:
    """A readiness rule that, once met, still waits for a page that declared it will say
    when it is ready."""

    async def run() -> None:
        await rule
        await readiness.undeclared(page)

    return asyncio.ensure_future(run())


def _target(url: str) -> str:
    """The path and query a URL asks its server for."""
    parts = urlsplit(url)
    return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


def _int_status(value: Any) -> int | None:
    try:
        code = int(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return code if 200 <= code <= 599 else None


def _is_main_frame(request: Request, page: Page) -> bool:
    try:
        return request.frame == page.main_frame
    except PlaywrightError:  # service worker requests have no frame
        return False


async def _first(*futures: asyncio.Future[Any]) -> None:
    """Wait for the first of ``futures`` to be done; leave the others as they are."""
    await asyncio.wait(futures, return_when=asyncio.FIRST_COMPLETED)


def _consume(task: asyncio.Future[Any]) -> None:
    """Retrieve a background task's outcome so a late failure is not reported as lost."""
    task.add_done_callback(lambda t: t.cancelled() or t.exception())


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
        self.collections = 0  # garbage collections asked of V8
        self.usable = False
        self._heap_kept = 0  # V8 heap bytes left by the last collection
        self._guard = EgressGuard("", resolve=resolve)
        self._context: BrowserContext | None = None
        self._page: Page | None = None
        self._cdp: CDPSession | None = None
        self._context_id = ""  # the DevTools id of the context, to find its workers
        self._signals = Signals()
        self._channel = Channel()
        self._pauses = Pauses(settings.block_resources)
        self._header_agent = self._agent_for(crawler=False)  # what requests carry
        self._patterns: list[dict[str, str]] = []  # what Fetch was last told to pause
        self._tasks: set[asyncio.Future[None]] = set()

    def _agent_for(self, *, crawler: bool) -> str:
        return self.profile.header_agent(self.browser.version, self.agent, crawler=crawler)

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
        self._cdp = await context.new_cdp_session(page)
        # The page's channel (.channel): a native binding of this session alone. Runtime
        # stays enabled on this session, or new documents do not get it.
        self._cdp.on("Runtime.bindingCalled", self._on_binding)
        await self._cdp.send("Runtime.enable")
        await self._cdp.send("Runtime.addBinding", {"name": BINDING})
        await self._intercept(self._cdp)
        info = await self._cdp.send("Target.getTargetInfo")
        self._context_id = info["targetInfo"].get("browserContextId", "")
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
                _consume(asyncio.ensure_future(stop))
        if message is not None:
            self._signals.heard(*message, normal_height=self.profile.height)

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
                result = await self._capture(self._page, url, site, signals, started, shot)
                if shot is not None:
                    await self._viewport.reset(self._page)
            clean = result.error is None or result.error.startswith(("http ", "empty body"))
            return result
        except TimeoutError:
            return self._failed(url, "timeout", started)
        except PlaywrightError as exc:
            if signals.crashed.done() or not self.browser.is_connected():
                why = signals.crashed.result() if signals.crashed.done() else "browser gone"
                raise CaptureCrashed(why) from None
            return self._failed(url, f"browser error: {first_line(exc)}", started)
        finally:
            self.browser.remove_listener("disconnected", on_disconnect)
            if not clean:
                self.usable = False

    def _failed(self, url: str, error: str, started: float, final_url: str = "") -> CaptureResult:
        return CaptureResult(
            url=url,
            final_url=final_url or url,
            status=0,
            error=error,
            elapsed=time.monotonic() - started,
        )

    async def _capture(
        self,
        page: Page,
        url: str,
        site: SiteSettings,
        signals: Signals,
        started: float,
        shot: Shot | None = None,
    ) -> CaptureResult:
        def result(**kw: Any) -> CaptureResult:
            kw.setdefault("final_url", page.url if page.url != "about:blank" else url)
            kw.setdefault("device", frozenset(signals.device))
            return CaptureResult(url=url, elapsed=time.monotonic() - started, **kw)

        # Chromium's own reading of the URL: a path it would resolve otherwise (a "\", a dot
        # segment) is not the one the site's checks judged, and is not loaded.
        loads = _target(await page.evaluate("u => new URL(u).href", url))
        if loads != _target(url):
            return result(status=0, error=f"refused: Chromium would load {loads[:300]} instead")
        goto = asyncio.ensure_future(page.goto(url, wait_until="commit", timeout=0))
        _consume(goto)
        await _first(goto, signals.redirected, signals.crashed)
        if signals.crashed.done():
            raise CaptureCrashed(signals.crashed.result())
        if signals.redirected.done():
            response = signals.redirected.result()
            self.usable = False  # the redirect target may still be loading
            location = response.headers.get("location", "")
            if not location:
                return result(status=0, error=f"http {response.status} without Location")
            return result(status=response.status, headers={"Location": location}, final_url=url)
        try:
            goto.result()
        except PlaywrightError as exc:
            if signals.crashed.done():
                raise CaptureCrashed(signals.crashed.result()) from None
            if self._guard.refused:
                return result(status=0, error=f"refused: {self._guard.refused[0]}", final_url=url)
            lost = UNREACHABLE.search(str(exc))
            if lost and is_origin_url(url, site.origin):
                settle(signals.lost, (lost.group(0), f"GET {urlsplit(url).path or '/'}"))
            if signals.lost.done():
                return result(status=0, error=self._unreachable(signals), final_url=url)
            match = _NET_ERROR.search(str(exc))
            why = match.group(0) if match else first_line(exc)
            return result(status=0, error=f"navigation failed: {why}", final_url=url)
        document = signals.document
        if document is not None and document.status >= 500:
            return result(status=document.status, error=f"http {document.status}")
        if shot is None:  # a screenshot is of its own first screen
            tall = int(getattr(site, self.profile.tall_setting))
            await self._viewport.grow(page, tall, signals.painted, signals.grown)
            if site.scroll:
                await self._viewport.scroll(page)

        waits: list[asyncio.Future[Any]] = [signals.ready, signals.crashed, signals.lost]
        rules: list[asyncio.Future[None]] = []
        if not site.wait_for_capture_ready:
            seconds, total = self.settings.timeouts(site)
            if site.readiness == "adaptive":
                left = readiness.hard_limit(total) - (time.monotonic() - started)
                rules.append(_rule(page, readiness.settled(signals, page)))
                rules.append(_rule(page, readiness.limit(signals, page, seconds)))
                rules.append(_rule(page, readiness.hard(left)))
            else:
                rules.append(_rule(page, readiness.quiet(signals, seconds)))
        try:
            await _first(*waits, *rules)
        finally:
            for rule in rules:
                rule.cancel()
        if signals.crashed.done():
            raise CaptureCrashed(signals.crashed.result())
        if signals.lost.done():
            # What the page shows was built without an answer from its origin.
            return result(status=0, error=self._unreachable(signals))
        # Ended by a limit while the page was still at work: said with the snapshot. The hard
        # limit ends only a page whose requests never stopped.
        adaptive = site.readiness == "adaptive" and bool(rules)
        by_page = signals.ready.done() or (adaptive and rules[0].done())
        held = adaptive and rules[2].done() and not rules[1].done()
        cut = not by_page and (held or await readiness.still_working(signals, page))

        html = await self._serialize(page, signals)
        # What the page shows now, as its HTML was taken (the first screen, no scrolling).
        # In CSS pixels: the size asked for, whatever the profile's device scale factor.
        png = (
            await page.screenshot(type="png", animations="disabled", scale="css") if shot else b""
        )
        # The document now shown: a client-side navigation may have replaced the first one.
        document = signals.document
        status = document.status if document is not None else 200
        if status >= 500:
            return result(status=status, error=f"http {status}")
        cleaned = cleanup.clean(html, strip_scripts=site.strip_scripts)
        headers = dict(cleaned.headers)
        if cleaned.status is not None:
            status = cleaned.status
        if signals.ready.done():
            asked, redirect = signals.ready.result()
            code = _int_status(asked)
            if redirect:
                headers["Location"] = redirect
                status = code if code is not None and 300 <= code < 400 else 302
            elif code is not None:
                status = code
        if 300 <= status < 400 and not headers.get("Location"):
            # A redirect with nowhere to go is no redirect: keep the document's own status.
            status = document.status if document is not None and document.status < 300 else 200
        if 300 <= status < 400:
            return result(status=status, headers=headers, html="")
        if status >= 500:
            return result(status=status, headers=headers, error=f"http {status}")
        if status < 300 and cleaned.empty:
            return result(status=status, headers=headers, error="empty body")
        return result(
            status=status, headers=headers, html=cleaned.html, readiness_limit=cut, png=png
        )

    def _unreachable(self, signals: Signals) -> str:
        """The error of a capture that lost a request to its origin: what the guard saw when
        it tried to connect, else Chromium's error for the request."""
        error, request = signals.lost.result()
        why = self._guard.unreachable[0] if self._guard.unreachable else error
        return f"origin unreachable: {why} ({request})"

    async def _serialize(self, page: Page, signals: Signals) -> str:
        """The serialised DOM (:mod:`.shadow`); retried when a navigation replaces the
        document meanwhile."""
        assert self._cdp is not None
        for attempt in range(5):
            try:
                return await serialize(
                    page, self._cdp, signals.shadow_roots, signals.document
                )
            except PlaywrightError as exc:
                if signals.crashed.done():
                    raise CaptureCrashed(signals.crashed.result()) from None
                gone = ("navigat", "destroyed", "Cannot find context", "No node with given id")
                if attempt == 4 or not any(word in str(exc) for word in gone):
                    raise
                with contextlib.suppress(PlaywrightError):
                    await page.wait_for_load_state("domcontentloaded")
        raise AssertionError("unreachable")

    # --------------------------------------------------------------- between captures

    @staticmethod
    async def _reset_history(cdp: CDPSession) -> None:
        # Refused for a moment while the blank page is being swapped in.
        for attempt in range(10):
            try:
                await cdp.send("Page.resetNavigationHistory")
                return
            except PlaywrightError:
                if attempt == 9:
                    raise
                await asyncio.sleep(0.02)

    async def _workers(self, cdp: CDPSession) -> list[str]:
        """The types of the context's workers still running (dedicated, shared, worklets)."""
        targets = (await cdp.send("Target.getTargets"))["targetInfos"]
        return [
            kind
            for t in targets
            if t.get("browserContextId") == self._context_id
            and ("worker" in (kind := t.get("type", "")) or "worklet" in kind)
        ]

    async def _collect_garbage(self, cdp: CDPSession) -> None:
        """Have V8 collect once the heap outgrows both the bound and twice what the last
        collection kept (so a page that keeps much alive is not collected after every capture).
        The slot is clean already: a failure here only skips the collection."""
        with contextlib.suppress(PlaywrightError):
            heap = await cdp.send("Runtime.getHeapUsage")
            if heap.get("usedSize", 0) > max(_COLLECT_ABOVE, 2 * self._heap_kept):
                await cdp.send("HeapProfiler.collectGarbage")
                self.collections += 1
                heap = await cdp.send("Runtime.getHeapUsage")
                self._heap_kept = int(heap.get("usedSize", 0))

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
                # A shared worker's last writes can land after any wipe, even once it is gone:
                # its context is replaced instead, and with it all the storage it could reach.
                if "shared_worker" in await self._workers(cdp):
                    log.debug("a shared worker ran in the last capture; replacing its context")
                    self.usable = False
                    return False
                for extra in context.pages:
                    if extra is not page:
                        await extra.close()
                # Leaving the document runs its unload handlers before storage is wiped. The
                # page itself leaves, so the blank page keeps its origin and its renderer
                # process, which the next capture of the same site then reuses.
                with contextlib.suppress(PlaywrightError):
                    await page.evaluate("() => location.replace('about:blank')")
                await page.wait_for_url("about:blank", wait_until="commit")
                # Dedicated workers end with their document, a moment after it.
                while workers := await self._workers(cdp):
                    if "shared_worker" in workers:  # started as the page left
                        self.usable = False
                        return False
                    await asyncio.sleep(0.005)
                # One concurrent round: the blank page has no script left to race with, and
                # the cache, the viewport and the heap are none of the storage's business.
                clears: list[Awaitable[Any]] = [
                    context.clear_cookies(),
                    self._reset_history(cdp),
                    page.evaluate("() => { window.name = ''; }"),
                    self._forget_fetched(cdp),
                    self._viewport.reset(page),
                    self._collect_garbage(cdp),
                ]
                # "all" covers cookies, local and session storage, IndexedDB, Cache Storage,
                # service workers, file systems and the rest, for that origin.
                clears += [
                    cdp.send("Storage.clearDataForOrigin", {"origin": o, "storageTypes": "all"})
                    for o in origins
                ]
                await asyncio.gather(*clears)
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
