"""What a capture slot does between captures (:class:`Wipe`): the last capture's document
left, what it stored wiped, and V8's garbage collected now and then.

Invariants:

- Each capture starts from a clean slate. After a capture the page is sent to about:blank
  (which ends the document, its timers, workers and sockets); once the context's workers are
  gone (a shared worker outlives its document by a few milliseconds), cookies and every kind of
  storage of every origin the capture touched are wiped, session storage and history
  included. If any of that fails, or the capture ended badly (timeout, crash, browser error),
  the slot is closed and the next capture gets a new context. The wipe also has V8 collect
  the old documents' garbage once it passes ``_COLLECT_ABOVE``, so a renderer reused for
  hundreds of captures stays small.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Iterable
from typing import Any

from playwright.async_api import BrowserContext, CDPSession, Page
from playwright.async_api import Error as PlaywrightError

__all__ = ["Wipe"]

log = logging.getLogger("snapshotd.render")

# V8 collects lazily while memory is plentiful: each capture leaves its documents' garbage in
# the renderer's heap (about 1 MB a page on the example app), and without a collection it
# piles up to some 70 MB a renderer before V8 acts. A collection asked for through DevTools
# is V8's last-resort one, which also throws compiled code away, so the captures after it cost
# more; SPEC 4.1 gives what this bound and a lower one cost in memory and CPU.
_COLLECT_ABOVE = 32 * 2**20


class Wipe:
    """The wipe of one slot's context (``context_id``, its DevTools id, to find its workers)
    and the garbage collections asked of its renderer (``collections``)."""

    def __init__(self) -> None:
        self.context_id = ""
        self.collections = 0  # garbage collections asked of V8
        self._heap_kept = 0  # V8 heap bytes left by the last collection

    async def storage(
        self, page: Page, context: BrowserContext, cdp: CDPSession, origins: Iterable[str]
    ) -> bool:
        """Leave the last capture's document and wipe what it left in ``origins`` and the
        context; False when a shared worker ran (its context is to be replaced instead)."""
        # A shared worker's last writes can land after any wipe, even once it is gone:
        # its context is replaced instead, and with it all the storage it could reach.
        if "shared_worker" in await self._workers(cdp):
            log.debug("a shared worker ran in the last capture; replacing its context")
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
                return False
            await asyncio.sleep(0.005)
        # One concurrent round: the blank page has no script left to race with.
        clears: list[Awaitable[Any]] = [
            context.clear_cookies(),
            self._reset_history(cdp),
            page.evaluate("() => { window.name = ''; }"),
        ]
        # "all" covers cookies, local and session storage, IndexedDB, Cache Storage,
        # service workers, file systems and the rest, for that origin.
        clears += [
            cdp.send("Storage.clearDataForOrigin", {"origin": o, "storageTypes": "all"})
            for o in origins
        ]
        await asyncio.gather(*clears)
        return True

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
            if t.get("browserContextId") == self.context_id
            and ("worker" in (kind := t.get("type", "")) or "worklet" in kind)
        ]

    async def collect_garbage(self, cdp: CDPSession) -> None:
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
