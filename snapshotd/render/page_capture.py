"""One capture on a slot's open page (:class:`PageCapture`): the URL loaded, the wait until the
page is ready, its HTML (and screenshot) taken, and what the page answered judged. The slot
(:mod:`.slot`) makes one for each capture, on its page, guard and viewport.

Invariants:

- A URL is loaded only when Chromium reads it as the same path and query (``new URL()`` in
  the page, before the navigation): the site path's form resolves what Chromium would
  (:mod:`snapshotd.http_text.urls`), and a path it would read otherwise is refused unloaded.
- Ready is the first of: ``window.onCaptureReady()`` from the page's main frame; unless
  ``wait_for_capture_ready``, the readiness's rules (:mod:`.readiness`: ``settled`` and its
  ``limit`` for adaptive, ``quiet`` for quiet), held while the page has declared it will say
  when it is ready. ``render_timeout`` bounds the capture, serialisation included. Both
  timeouts are the site's own when it sets them (``BrowserSettings.timeouts``); the tasks'
  quiet period, set in the context's init script, stays the ``[browser]``
  ``javascript_timeout``. A capture a rule ended while the page was still at work says so
  (``readiness_limit``).
- A request to the site's own origin that fails at the network level ends the capture as
  ``origin unreachable: …``: what the page shows was built without it. Documents and data
  requests never read the HTTP cache, so no such answer of one capture is served to the
  next; static assets may be, as their origin's cache headers allow (:mod:`.pauses`).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Awaitable
from typing import Any
from urllib.parse import urlsplit

from playwright.async_api import CDPSession, Page
from playwright.async_api import Error as PlaywrightError

from snapshotd.config.settings import BrowserSettings, SiteSettings
from snapshotd.crawlers.devices import Profile
from snapshotd.net.address_policy import is_origin_url
from snapshotd.render import cleanup, readiness
from snapshotd.render.guard import EgressGuard
from snapshotd.render.renderer import CaptureResult, Shot, first_line
from snapshotd.render.shadow import serialize
from snapshotd.render.signals import UNREACHABLE, Signals, document_shell, settle
from snapshotd.render.viewport import Viewport

__all__ = ["CaptureCrashed", "PageCapture", "consume"]

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


async def _first(*futures: asyncio.Future[Any]) -> None:
    """Wait for the first of ``futures`` to be done; leave the others as they are."""
    await asyncio.wait(futures, return_when=asyncio.FIRST_COMPLETED)


def consume(task: asyncio.Future[Any]) -> None:
    """Retrieve a background task's outcome so a late failure is not reported as lost."""
    task.add_done_callback(lambda t: t.cancelled() or t.exception())


class PageCapture:
    """One capture of a slot: its browser settings and device ``profile``, the slot's egress
    ``guard``, ``viewport`` and DevTools session. ``usable`` turns False when the page may
    still be at work after it (a redirect's target loading): the slot is not used again."""

    def __init__(
        self,
        settings: BrowserSettings,
        profile: Profile,
        guard: EgressGuard,
        viewport: Viewport,
        cdp: CDPSession | None,
    ) -> None:
        self.settings = settings
        self.profile = profile
        self._guard = guard
        self._viewport = viewport
        self._cdp = cdp
        self.usable = True

    async def __call__(
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
        consume(goto)
        await _first(goto, signals.redirected, signals.crashed, signals.overrun)
        if signals.crashed.done():
            raise CaptureCrashed(signals.crashed.result())
        if signals.overrun.done():
            return result(status=0, error=signals.overrun.result())
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

        waits: list[asyncio.Future[Any]] = [
            signals.ready, signals.crashed, signals.lost, signals.overrun
        ]
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
        if signals.overrun.done():
            return result(status=0, error=signals.overrun.result())
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
        # The page said its status itself: a tag, or onCaptureReady with a code or a redirect.
        declared = cleaned.status is not None or (
            signals.ready.done() and signals.ready.result() != (None, None)
        )
        return result(
            status=status, headers=headers, html=cleaned.html, readiness_limit=cut, png=png,
            declared=declared, shell=await document_shell(document),
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
