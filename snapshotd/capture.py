"""One capture of one claimed path: render, judge, store; shared by the proxy and the crawler.

Invariants:
- a path is rendered only while this process holds its lease (``store.claim*``);
- a failed render never replaces a stored snapshot (``store.fail`` keeps it);
- concurrent proxy misses for one path share a single render (``capture_now``);
- proxy misses hold at most ``browser.miss_slots`` render slots (one is left to the crawler
  when there are several), and at most ``browser.miss_queue`` more wait for one
  (``start_miss``): past that a miss is refused rather than queued.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from snapshotd.config import Settings, SiteSettings
from snapshotd.metrics import Metrics
from snapshotd.render.base import CaptureResult, Renderer
from snapshotd.store.base import PathRecord, Store, content_hash

log = logging.getLogger("snapshotd.capture")

LEASE_SECONDS_MARGIN = 60.0
RETRY_LIMIT = 5
RETRY_BASE = 60.0


@dataclass(frozen=True)
class Outcome:
    """What became of one capture."""

    record: PathRecord
    result: CaptureResult
    stored: bool
    duplicate_of: str | None = None


# Called after a successful capture is stored, to follow its links (the crawler sets it).
AfterCapture = Callable[[SiteSettings, PathRecord, CaptureResult, str | None], Awaitable[None]]


def retry_delay(attempts: int, expire_after: float) -> float:
    """Backoff after the n-th failed attempt: 1, 2, 4, 8 minutes, then wait for expiry."""
    if attempts >= RETRY_LIMIT:
        return expire_after
    return min(RETRY_BASE * 2 ** max(attempts - 1, 0), expire_after)


class CaptureService:
    def __init__(
        self,
        settings: Settings,
        store: Store,
        renderer: Renderer,
        *,
        metrics: Metrics | None = None,
        owner: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.store = store
        self.renderer = renderer
        self.metrics = metrics or Metrics()
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{id(self):x}"
        self.clock = clock
        self.after_capture: AfterCapture | None = None
        self._inflight: dict[tuple[str, str], asyncio.Future[Outcome]] = {}
        # Proxy misses rendering or waiting for one of their slots.
        self._misses: dict[tuple[str, str], asyncio.Future[Outcome | None]] = {}
        self._miss_slots = asyncio.Semaphore(settings.browser.miss_slots)
        self._miss_places = settings.browser.miss_slots + settings.browser.miss_queue
        # Judging "same HTML as another path" and storing must not interleave, or two copies
        # captured at once would each miss the other.
        self._store_lock = asyncio.Lock()

    @property
    def lease_seconds(self) -> float:
        return self.settings.browser.render_timeout + LEASE_SECONDS_MARGIN

    async def run(self, site: SiteSettings, record: PathRecord) -> Outcome:
        """Render a claimed path and store the outcome; proxy misses for it wait on this."""
        key = (site.name, record.path)
        future = asyncio.ensure_future(self._run(site, record))
        self._inflight[key] = future
        future.add_done_callback(lambda _f: self._inflight.pop(key, None))
        return await asyncio.shield(future)

    async def _run(self, site: SiteSettings, record: PathRecord) -> Outcome:
        url = site.url_for(record.path)
        started = time.monotonic()
        try:
            result = await self.renderer.capture(url, site)
        except Exception as exc:
            # A renderer fault is a failed capture like any other: the path must not stay
            # leased until the lease runs out.
            log.warning("renderer fault site=%s path=%s error=%r", site.name, record.path, exc)
            result = CaptureResult(
                url=url, final_url=url, status=0, error=f"renderer fault: {type(exc).__name__}"
            )
        self.metrics.render_seconds.observe(time.monotonic() - started)
        now = self.clock()
        if not result.ok:
            delay = retry_delay(record.attempts, site.expire_after)
            await self.store.fail(
                site.name,
                record.path,
                self.owner,
                error=result.error or "failed",
                retry_at=now + delay,
                status=result.status if result.status >= 400 else None,
            )
            self.metrics.captures.labels("error").inc()
            log.info(
                "capture failed site=%s path=%s error=%r retry_in=%ds",
                site.name, record.path, result.error, delay,
            )
            return Outcome(record, result, stored=False)

        async with self._store_lock:
            duplicate_of = None
            if 200 <= result.status < 300:
                duplicate_of = await self.store.find_same_content(
                    site.name, content_hash(result.html), record.path
                )
            stored = await self.store.complete(
                site.name,
                record.path,
                self.owner,
                html=result.html,
                status=result.status,
                headers=result.headers,
                final_url=result.final_url,
                expires_at=now + site.expire_after,
                duplicate_of=duplicate_of,
                links_due=self.after_capture is not None,
            )
        self.metrics.captures.labels("duplicate" if duplicate_of else "ok").inc()
        log.info(
            "captured site=%s path=%s status=%d %.2fs%s",
            site.name, record.path, result.status, result.elapsed,
            f" duplicate_of={duplicate_of}" if duplicate_of else "",
        )
        if stored and self.after_capture is not None:
            await self.after_capture(site, record, result, duplicate_of)
            # Not reached if that failed or was cut short: the crawler follows them at start.
            await self.store.links_followed(site.name, record.path)
        return Outcome(record, result, stored=stored, duplicate_of=duplicate_of)

    async def cancel_all(self) -> int:
        """Cancel every capture under way (shutdown); their leases stay for the caller."""
        futures: list[asyncio.Future[Outcome] | asyncio.Future[Outcome | None]] = [
            *self._inflight.values(),
            *self._misses.values(),
        ]
        for future in futures:
            future.cancel()
        await asyncio.gather(*futures, return_exceptions=True)
        return len(futures)

    def start_miss(
        self, site: SiteSettings, path: str, priority: int
    ) -> tuple[asyncio.Future[Outcome | None] | asyncio.Future[Outcome], bool] | None:
        """The capture a proxy miss waits for, and whether it is a new one; None when every
        miss place is taken (nothing is queued then).

        A miss joins the capture under way for its path. Otherwise, when a place is free, the
        path is queued at ``priority`` and captured as soon as a miss slot is free. The
        capture goes on when the request stops waiting, and holds its place until it ends.
        """
        key = (site.name, path)
        joined = self._misses.get(key) or self._inflight.get(key)
        if joined is not None:
            return joined, False
        if len(self._misses) >= self._miss_places:
            return None
        future = asyncio.ensure_future(self._miss(site, path, priority))
        self._misses[key] = future
        future.add_done_callback(lambda _f: self._misses.pop(key, None))
        return future, True

    async def _miss(self, site: SiteSettings, path: str, priority: int) -> Outcome | None:
        await self.store.enqueue(site.name, path, priority)
        async with self._miss_slots:
            return await self.capture_now(site, path)

    async def capture_now(self, site: SiteSettings, path: str) -> Outcome | None:
        """Capture a pending path at once, or join the render already under way for it.

        Returns None when another process holds the path; the caller polls the store.
        """
        future = self._inflight.get((site.name, path))
        if future is not None:
            return await asyncio.shield(future)
        record = await self.store.claim_path(site.name, path, self.owner, self.lease_seconds)
        if record is None:
            future = self._inflight.get((site.name, path))
            return await asyncio.shield(future) if future is not None else None
        return await self.run(site, record)
