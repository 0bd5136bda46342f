"""Which sites' queues the crawler's workers claim from, and when: :class:`Scheduler`.

Invariants:
- a claim is made only from a site that is not paused, has not reached ``max_to_process``
  (:attr:`Scheduler.full`), and, with ``crawl_delay``, has no capture under way and whose delay
  since its last capture ended is past;
- one claim at a time in a process, so "a site with ``crawl_delay`` has one capture at a
  time" holds;
- a worker with nothing to claim waits until it is woken (this process queued something or
  a capture ended), a site's ``crawl_delay`` is past, or ``POLL_SECONDS`` went by (paths
  queued by another process).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import defaultdict

from snapshotd.capture.service import CaptureService
from snapshotd.config.settings import SiteSettings
from snapshotd.sites.registry import SiteRegistry
from snapshotd.store.interface import PathRecord, Store

__all__ = ["POLL_SECONDS", "Scheduler"]

POLL_SECONDS = 1.0  # how soon paths queued by another process (proxy, API) are seen when idle


class Scheduler:
    """The claims of one crawler's workers, from the sites of ``registry``."""

    def __init__(self, registry: SiteRegistry, store: Store, capture: CaptureService) -> None:
        self.registry = registry
        self.store = store
        self.capture = capture
        self.active = 0  # captures under way
        self.busy: defaultdict[str, int] = defaultdict(int)  # captures under way, by site
        self.full: set[str] = set()  # sites that reached max_to_process
        self.generation = 0  # how many times the workers were woken
        self._next_start: defaultdict[str, float] = defaultdict(float)
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()

    def wake(self) -> None:
        """Have the waiting workers look for pending paths now."""
        self.generation += 1
        wake, self._wake = self._wake, asyncio.Event()
        wake.set()

    def eligible(self, now: float) -> list[SiteSettings]:
        """The sites whose queues may be claimed from at ``now`` (monotonic): not paused,
        not full, and past their ``crawl_delay``."""
        return [
            site
            for site in self.registry.sites
            if not self.registry.is_paused(site.name)
            and site.name not in self.full
            and (
                site.crawl_delay <= 0
                or (self.busy[site.name] == 0 and self._next_start[site.name] <= now)
            )
        ]

    async def claim(self) -> tuple[SiteSettings, PathRecord] | None:
        """The next path to capture, leased, with its site; None when there is none."""
        async with self._lock:
            eligible = self.eligible(time.monotonic())
            if not eligible or self.capture.stopping.is_set():
                return None
            record = await self.store.claim(
                self.capture.owner,
                self.capture.lease_seconds(*eligible),
                sites=[s.name for s in eligible],
            )
            if record is None:
                return None
            site = self.registry.site(record.site)
            if site is None:  # removed meanwhile
                await self.store.release(record.site, record.path, self.capture.owner)
                return None
            self.busy[record.site] += 1
            self.active += 1
            return site, record

    def release(self, site: SiteSettings) -> None:
        """A capture of ``site`` ended: its ``crawl_delay`` runs from now."""
        self.busy[site.name] -= 1
        self.active -= 1
        self._next_start[site.name] = time.monotonic() + site.crawl_delay

    async def idle_wait(self, generation: int) -> None:
        """Wait for something to claim, unless the workers were woken since ``generation``."""
        if generation != self.generation:
            return
        timeout = POLL_SECONDS
        now = time.monotonic()
        delayed = [
            t - now for name, t in self._next_start.items() if self.busy[name] == 0 and t > now
        ]
        if delayed:
            timeout = max(min(timeout, *delayed), 0.0)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout)
