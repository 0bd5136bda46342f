"""The browser pool: ``browser.concurrency`` captures at once on one Chromium at a time.

Invariants:

- At most ``concurrency`` captures run, each in a slot (a context and a page) of the current
  Chromium. A slot is wiped between captures (:meth:`Slot.reset`) and replaced when a
  capture ends badly. The wipe runs after the result is returned, before the slot's next use.
- There is one slot more than captures: while a slot is being wiped the next capture takes
  another, already wiped, so a capture seldom waits for a wipe. On the example app this took
  concurrency 1 from 0.89 to 0.97 of a plain Playwright loop's rate and concurrency 2 from
  0.80 to about 0.95, for one more renderer process (~100 MiB of RSS).
- A slot is of one kind (a device profile and a site's override of its user agent). Each
  kind may have ``concurrency`` + ``spares`` slots, and all kinds together ``concurrency`` +
  ``spares`` × (the kinds open, at most as many as there are profiles). Past that, a capture
  waits for a slot of its kind being wiped, else an idle slot of another kind is closed to
  make room. So a site that serves both profiles keeps a spare of each (one more renderer
  process) instead of closing one kind's slot to open the other's for each page. While one
  of its kind is being wiped, a capture whose kind's last capture waited for a wipe too
  still closes an idle slot of another kind that keeps a second idle one and stayed idle
  through the last ``SURPLUS_AFTER`` captures: a burst of one kind does not leave the other
  without its spare for good.
- One Chromium runs at a time. After ``recycle_after`` captures it is retired: new captures
  wait while its running captures finish, then it is closed and a new one launched, so memory
  never holds two.
- A Chromium found dead is replaced by the next capture that needs one; captures that were
  running on it are reported as ``crashed``. One that cannot open a slot, or does not within
  the slot's bound (:data:`~snapshotd.render.slot.OPEN_TIMEOUT`), is retired too.
- ``probe`` opens a slot as a capture does: the pool is ready exactly when a capture could
  get a page.
- ``close`` closes every Chromium and the Playwright driver; nothing is left running.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from playwright.async_api import Browser, Playwright, async_playwright
from playwright.async_api import Error as PlaywrightError

from snapshotd.config.settings import BrowserSettings, SiteSettings
from snapshotd.crawlers.devices import PROFILES, Profile
from snapshotd.net.address_policy import check_url
from snapshotd.render.chromium import (
    LAUNCH_ARGS,
    ChromiumNotFound,
    check_driver,
    find_chromium,
    launch_error,
    sandbox_choice,
)
from snapshotd.render.features import disabled_features_args
from snapshotd.render.guard import Resolver
from snapshotd.render.pool_state import Chromium, PoolStats
from snapshotd.render.renderer import CaptureResult, Shot, first_line
from snapshotd.render.slot import CaptureCrashed, Slot

__all__ = ["BrowserPool", "PoolStats"]

log = logging.getLogger("snapshotd.render")

_LAUNCH_TIMEOUT = 60.0
# Captures of the pool a slot of one kind stays idle, beside another idle one of its kind,
# before a capture of another kind waiting for a wipe may close it for a slot of its own.
SURPLUS_AFTER = 4


def _slot_kind(site: SiteSettings, profile: str) -> tuple[Profile, str]:
    """The slot a capture for ``profile`` on ``site`` needs: the profile and the site's
    override of its user agent."""
    chosen = PROFILES.get(profile, PROFILES["desktop"])
    return chosen, str(getattr(site, chosen.agent_setting))


class BrowserPool:
    """A pool of Chromium captures; implements :class:`snapshotd.render.renderer.Renderer`.

    ``playwright_factory`` makes the Playwright context manager (default
    ``async_playwright``); ``env`` is where ``$SNAPSHOTD_CHROMIUM`` and ``PATH`` are read;
    ``resolve`` resolves host names for the egress guard (default: the system resolver);
    ``spares`` is how many slots there are beyond one per concurrent capture.
    """

    screenshots = True  # it takes a capture's ``shot`` (snapshotd.api.screenshot)

    def __init__(
        self,
        browser: BrowserSettings,
        *,
        playwright_factory: Callable[[], Any] | None = None,
        env: Mapping[str, str] | None = None,
        resolve: Resolver | None = None,
        spares: int = 1,
    ) -> None:
        self.settings = browser
        self.stats = PoolStats()
        self.executable = ""
        self._factory = playwright_factory or async_playwright
        self._env = os.environ if env is None else env
        self._resolve = resolve
        self._manager: Any = None
        self._playwright: Playwright | None = None
        self._current: Chromium | None = None
        self._all: set[Chromium] = set()
        self._generation = 0
        self._slots = asyncio.Semaphore(browser.concurrency)
        # Spare slots, so that the next capture need not wait for a wipe.
        self._spares = spares
        self._lock = asyncio.Lock()
        self._background: set[asyncio.Future[None]] = set()  # wipes and closes
        self._closed = False
        self.sandbox: bool | None = None  # whether Chromium runs in its sandbox, once launched
        # The --disable-features switch each launch passes, and Playwright's own it leaves out
        # (snapshotd.render.features), read once, at the pool's first launch.
        self._features: tuple[list[str], list[str]] | None = None

    async def start(self) -> None:
        """Find and launch Chromium; raises :class:`ChromiumNotFound`, or
        :class:`~snapshotd.render.chromium.BrowserCannotStart` when the driver or the browser
        does not start."""
        self._closed = False
        self.executable = find_chromium(self.settings, self._env)
        if self._playwright is None and self._factory is async_playwright:
            await asyncio.to_thread(check_driver)
        async with self._lock:
            try:
                await self._ensure_current()
            except (PlaywrightError, TimeoutError) as exc:
                raise launch_error(exc, self.executable) from None

    async def close(self) -> None:
        """Close every Chromium and the driver; running captures end as failures."""
        self._closed = True
        async with self._lock:
            self._current = None
            for chromium in list(self._all):
                await self._shutdown(chromium)
            if self._background:
                await asyncio.gather(*self._background, return_exceptions=True)
            if self._manager is not None:
                with contextlib.suppress(Exception):
                    await self._manager.__aexit__(None, None, None)
            self._manager = None
            self._playwright = None

    async def capture(
        self,
        url: str,
        site: SiteSettings,
        profile: str = "desktop",
        shot: Shot | None = None,
    ) -> CaptureResult:
        """Render ``url`` for ``site`` as the crawler of ``profile`` renders it
        (:mod:`snapshotd.crawlers.devices`), with ``shot`` its screenshot too; every problem is
        reported in the result."""
        started = time.monotonic()
        reason = check_url(url, site.origin)
        if reason is not None:
            return self._finish(CaptureResult.failed(url, f"refused: {reason}", started))
        chromium: Chromium | None = None
        slot: Slot | None = None
        try:
            async with self._slots:
                if self._closed:
                    return self._finish(CaptureResult.failed(url, "renderer closed", started))
                try:
                    chromium, slot = await self._open_slot(_slot_kind(site, profile))
                except (ChromiumNotFound, PlaywrightError, TimeoutError, OSError) as exc:
                    error = f"browser unavailable: {first_line(exc)}"
                    return self._finish(CaptureResult.failed(url, error, started))
                self.stats.active += 1
                try:
                    result = await slot.capture(url, site, shot)
                except CaptureCrashed as exc:
                    log.warning("capture of %s crashed: %s", url, exc)
                    result = CaptureResult.failed(url, "crashed", started)
                finally:
                    self.stats.active -= 1
            return self._finish(result)
        except BaseException:
            if slot is not None:
                slot.usable = False  # cancelled mid-capture: its state is unknown
            raise
        finally:
            if chromium is not None:
                if slot is not None:
                    # Counted as being wiped from now: a capture taking a slot before the
                    # wipe starts waits for this one rather than trading another kind's.
                    chromium.wiping[slot.kind] += 1
                self._in_background(self._after(chromium, slot))

    async def probe(self, timeout: float = 15.0) -> str | None:
        """None when a page can be rendered now: on the current Chromium (launched again,
        as a capture would, if it is gone), a slot opened as a capture's is (within its
        bound), and its page renders a line of HTML and runs a script; else why not, in a
        few words. Takes no capture's slot."""
        if self._closed:
            return "renderer closed"
        chromium: Chromium | None = None
        slot: Slot | None = None
        try:
            async with asyncio.timeout(timeout):
                chromium = await self._acquire()
                chromium.started -= 1  # not a capture: it does not bring a recycle nearer
                slot = Slot(chromium.browser, self.settings, resolve=self._resolve)
                await slot.open()
                text = await slot.shows("<p id=probe>ready</p>", "#probe")
            return None if text == "ready" else f"the page showed {str(text)[:40]!r}"
        except TimeoutError as exc:  # the slot's own bound says which
            why = str(exc) or f"no page rendered in {timeout:g} s"
            return f"browser unavailable: {why}" if str(exc) else why
        except (ChromiumNotFound, PlaywrightError, OSError) as exc:
            return f"browser unavailable: {first_line(exc)}"
        finally:
            if slot is not None:
                await slot.close()
            if chromium is not None:
                self._release(chromium)

    # ------------------------------------------------------------------ internals

    def _in_background(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _after(self, chromium: Chromium, slot: Slot | None) -> None:
        """Wipe the slot for its next capture, or close it; whatever happens, it is counted
        as wiped and the Chromium released."""
        try:
            if slot is None:
                return
            kept = False
            try:
                collected = slot.collections
                usable = (
                    not chromium.retired
                    and not self._closed
                    and chromium.browser.is_connected()
                    and await slot.reset()
                )
                self.stats.collections += slot.collections - collected
                kept = usable and not chromium.retired  # retired while it was wiped
            finally:
                chromium.wiping[slot.kind] -= 1
                if kept:
                    chromium.idle.append(slot)
                    chromium.idle_since[slot] = self.stats.captures
                else:
                    chromium.kinds[slot.kind] -= 1
                chromium.freed.set()
            if not kept:
                # A retired Chromium is closed whole, its contexts with it.
                keep = chromium.browser.is_connected() and not chromium.retired
                await slot.close(context=keep)
        finally:
            self._release(chromium)

    async def _open_slot(self, kind: tuple[Profile, str]) -> tuple[Chromium, Slot]:
        """A Chromium and a slot of ``kind`` on it; a Chromium that cannot open a context is
        replaced."""
        for attempt in range(2):
            chromium = await self._acquire()
            try:
                return chromium, await self._take_slot(chromium, kind)
            except BaseException as exc:
                # Released whatever went wrong (a cancelled wait too), or it never drains.
                self._release(chromium)
                # Its death may not have been reported yet: a killed browser fails this first;
                # one that does not answer (stopped, wedged) is given up at the slot's bound.
                failed = isinstance(exc, (PlaywrightError, TimeoutError))
                if not failed or attempt == 1 or chromium.retired:
                    raise
                log.warning(
                    "chromium %d cannot open a page; launching another", chromium.generation
                )
                self.stats.restarts += 1
                self._retire(chromium)
        raise AssertionError("unreachable")

    async def _take_slot(self, chromium: Chromium, kind: tuple[Profile, str]) -> Slot:
        """The most recently wiped idle slot of ``kind`` (a profile and a user agent
        override), or a new one while :meth:`_room_for` allows; else an idle slot of another
        kind is closed to make room (while one of ``kind`` is being wiped, only a surplus
        one, and only when ``kind``'s last capture waited for a wipe too: :meth:`_surplus`),
        or the capture waits for a slot to come back."""
        waited = False  # for a slot of its kind being wiped
        while True:
            for slot in reversed(chromium.idle):
                if not slot.usable or slot.kind == kind:
                    chromium.idle.remove(slot)
                    chromium.idle_since.pop(slot, None)
                    if slot.usable:
                        (chromium.short.add if waited else chromium.short.discard)(kind)
                        return slot
                    chromium.kinds[slot.kind] -= 1
                    await slot.close()
                    break
            else:
                if self._room_for(chromium, kind):
                    break
                others = [s for s in chromium.idle if s.kind != kind]
                if chromium.wiping[kind]:
                    others = self._surplus(chromium, others) if kind in chromium.short else []
                if others and chromium.kinds[kind] < self._per_kind:
                    oldest = others[0]  # the oldest of another kind makes room
                    chromium.idle.remove(oldest)
                    chromium.idle_since.pop(oldest, None)
                    chromium.kinds[oldest.kind] -= 1
                    await oldest.close()
                    continue
                waited = waited or chromium.wiping[kind] > 0
                chromium.freed.clear()
                await chromium.freed.wait()
        chromium.kinds[kind] += 1
        profile, agent = kind
        slot = Slot(
            chromium.browser, self.settings, resolve=self._resolve, profile=profile, agent=agent
        )
        try:
            await slot.open()
        except BaseException:
            chromium.kinds[kind] -= 1
            await slot.close()
            raise
        self.stats.slots_opened += 1
        return slot

    def _surplus(self, chromium: Chromium, idle: list[Slot]) -> list[Slot]:
        """Of ``idle`` slots (of other kinds), those a capture of a kind short of slots (its
        last capture waited for a wipe, and so would this one) may close for a slot of its
        own: each of a kind that keeps another idle slot, and idle through the last
        ``SURPLUS_AFTER`` captures. So a kind left without its spare by a burst of another
        gets it back, while a kind asked for now and then waits for its wipe, and two kinds
        asked for in turn keep their slots rather than trade them."""
        count = Counter(s.kind for s in idle)
        return [
            s for s in idle
            if count[s.kind] > 1
            and self.stats.captures - chromium.idle_since.get(s, 0) >= SURPLUS_AFTER
        ]

    @property
    def _per_kind(self) -> int:
        """The slots one kind may have: one per concurrent capture, and the spares."""
        return self.settings.concurrency + self._spares

    def _room_for(self, chromium: Chromium, kind: tuple[Profile, str]) -> bool:
        """Whether a new slot of ``kind`` may open: ``kind`` is under its own bound, and all
        slots under theirs, counted for each kind open (up to as many as there are
        profiles)."""
        kinds = {k for k, n in chromium.kinds.items() if n > 0} | {kind}
        total = sum(chromium.kinds.values())
        bound = self.settings.concurrency + self._spares * min(len(kinds), len(PROFILES))
        return chromium.kinds[kind] < self._per_kind and total < bound

    def _finish(self, result: CaptureResult) -> CaptureResult:
        self.stats.captures += 1
        self.stats.render_seconds += result.elapsed
        if result.ok:
            log.debug("captured %s: status %s in %.2f s", result.url, result.status, result.elapsed)
        else:
            self.stats.failures += 1
            self.stats.errors[(result.error or "").split(":")[0]] += 1
            log.debug("capture of %s failed: %s (%.2f s)", result.url, result.error, result.elapsed)
        return result

    async def _acquire(self) -> Chromium:
        async with self._lock:
            chromium = self._current
            if chromium is not None and not chromium.browser.is_connected():
                log.warning("chromium %d is gone; launching another", chromium.generation)
                self.stats.restarts += 1
                self._retire(chromium)
            elif chromium is not None and chromium.started >= self.settings.recycle_after:
                log.info(
                    "recycling chromium %d after %d captures", chromium.generation, chromium.started
                )
                self.stats.recycles += 1
                self._retire(chromium)
                await chromium.drained.wait()
                await self._shutdown(chromium)
            chromium = await self._ensure_current()
            chromium.started += 1
            chromium.active += 1
            chromium.drained.clear()
            return chromium

    def _release(self, chromium: Chromium) -> None:
        chromium.active -= 1
        if chromium.active == 0:
            chromium.drained.set()
            if chromium.retired:
                self._in_background(self._shutdown(chromium))

    def _retire(self, chromium: Chromium) -> None:
        """Take ``chromium`` out of service; it is closed once its captures are done."""
        chromium.retired = True
        if self._current is chromium:
            self._current = None
        if chromium.active == 0:
            chromium.drained.set()
            self._in_background(self._shutdown(chromium))

    async def _shutdown(self, chromium: Chromium) -> None:
        if chromium not in self._all:
            return
        self._all.discard(chromium)
        chromium.retired = True
        try:
            async with asyncio.timeout(_LAUNCH_TIMEOUT):
                await chromium.browser.close()
        except (PlaywrightError, TimeoutError) as exc:
            log.warning("closing chromium %d: %s", chromium.generation, exc)
        # Their contexts went with the browser; this closes their guards.
        idle, chromium.idle = chromium.idle, []
        for slot in idle:
            chromium.kinds[slot.kind] -= 1
            await slot.close(context=False)
        chromium.freed.set()

    async def _ensure_current(self) -> Chromium:
        """The current Chromium, launched if there is none (call with the lock held)."""
        if self._current is not None:
            return self._current
        if not self.executable:
            self.executable = find_chromium(self.settings, self._env)
        if self._playwright is None:
            self._manager = self._factory()
            self._playwright = await self._manager.__aenter__()
        browser = await self._launch()
        self._generation += 1
        self.stats.launches += 1
        chromium = Chromium(browser, self._generation)
        self._all.add(chromium)
        self._current = chromium
        log.info("launched chromium %d (%s)", chromium.generation, self.executable)
        return chromium

    async def _launch(self) -> Browser:
        """Launch Chromium, in its sandbox as :func:`sandbox_choice` decides. The first launch
        decides it for the pool's life, and says so once: under ``auto``, one that cannot
        start in the sandbox starts without it."""
        first = self.sandbox is None
        sandbox, why = sandbox_choice(self.settings.sandbox, os.geteuid())
        if self.sandbox is not None:
            sandbox = self.sandbox
        try:
            browser = await self._launch_one(sandbox)
        except (PlaywrightError, TimeoutError) as exc:
            if not (first and sandbox and self.settings.sandbox == "auto"):
                raise
            log.warning("chromium cannot start in its sandbox here: %s", launch_error(exc, ""))
            sandbox, why = False, "its sandbox cannot start here; browser.sandbox = on refuses"
            browser = await self._launch_one(sandbox)
        if first:
            self.sandbox = sandbox
            log.info("chromium runs %s its sandbox (%s)", "in" if sandbox else "without", why)
        return browser

    async def _launch_one(self, sandbox: bool) -> Browser:
        assert self._playwright is not None
        if self._features is None:
            self._features = await disabled_features_args(self._playwright)
        switches, left_out = self._features
        async with asyncio.timeout(_LAUNCH_TIMEOUT):
            return await self._playwright.chromium.launch(
                executable_path=self.executable,
                args=[*LAUNCH_ARGS, *switches],
                ignore_default_args=left_out,
                headless=True,
                chromium_sandbox=sandbox,
            )
