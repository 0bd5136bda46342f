"""The renders a path's snapshot owes (:mod:`snapshotd.store.profile_snapshots`), made when a
bot of the owed profile asks: :class:`OwedRenders`, part of
:class:`~snapshotd.capture.service.CaptureService`.

Invariants:
- concurrent requests in one process for one path and profile share one render; it takes
  a miss place (``CaptureService.places_taken``) and holds a miss slot (``MissSlots.miss``)
  like a miss, and goes on when the request stops waiting; a profile settled meanwhile (by
  another process) is read from the store, without a slot;
- the owed profile is rendered from the page whose snapshot owes it (a copy's master),
  compared with that snapshot (``ProfileRenders.render_owed``) and settled in the store only
  while that snapshot is still the one compared with (``Store.settle_owed``);
- a render that failed (or faulted) stores nothing, and none starts again for that path and
  profile, nor for its master through another copy, for ``RETRY_AFTER`` seconds (the last
  ``FAILED_KEPT`` failures are remembered);
- once the service stops, none starts;
- one the capture service starts itself (:meth:`settle_soon`) is made as if a bot had asked.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from typing import TYPE_CHECKING

from snapshotd.config.settings import SiteSettings
from snapshotd.store.interface import Snapshot

if TYPE_CHECKING:
    from snapshotd.capture.service import CaptureService

__all__ = ["FAILED_KEPT", "RETRY_AFTER", "OwedRenders"]

log = logging.getLogger("snapshotd.capture.service")

RETRY_AFTER = 60.0  # after an owed profile's render failed, before one is tried again
FAILED_KEPT = 4096  # failed owed renders remembered; the oldest go first

Key = tuple[str, str, str]  # site, path, profile


class OwedRenders:
    def __init__(self, service: CaptureService) -> None:
        self.service = service
        self._under_way: dict[Key, asyncio.Future[Snapshot | None]] = {}
        self._failed: OrderedDict[Key, float] = OrderedDict()  # when one may start again

    def under_way(self) -> list[asyncio.Future[Snapshot | None]]:
        """The owed renders rendering or waiting for a miss slot."""
        return list(self._under_way.values())

    def start(
        self, site: SiteSettings, path: str, profile: str
    ) -> asyncio.Future[Snapshot | None] | None:
        """The render of ``profile`` the snapshot of ``path`` owes, for a bot of that profile
        to wait for: the snapshot it is served once rendered, None when that failed. None
        when every miss place is taken, or a render of it failed lately (nothing starts)."""
        key = (site.name, path, profile)
        joined = self._under_way.get(key)
        if joined is not None:
            return joined
        if self.service.places_taken() or self._failed.get(key, 0.0) > time.monotonic():
            return None
        future = asyncio.ensure_future(self._render(site, path, profile))
        self._under_way[key] = future
        future.add_done_callback(lambda _f: self._under_way.pop(key, None))
        return future

    def settle_soon(self, site: SiteSettings, path: str, profile: str) -> None:
        """Render ``profile``, owed by the snapshot of ``path`` just stored, now, with no bot
        waiting for it (:meth:`start`; nothing starts when every miss place is taken)."""
        future = self.start(site, path, profile)
        if future is not None:
            future.add_done_callback(self._settled)

    @staticmethod
    def _settled(future: asyncio.Future[Snapshot | None]) -> None:
        if not future.cancelled() and future.exception() is not None:
            log.warning("owed capture failed: %s", future.exception())

    async def _render(self, site: SiteSettings, path: str, profile: str) -> Snapshot | None:
        service = self.service
        snapshot = await service.store.get_snapshot(site.name, path, profile)
        if snapshot is not None and snapshot.unrendered:  # else settled: no slot taken
            async with service.miss_slots.miss():
                if service.stopping.is_set():
                    return None
                # Read again: it may have been settled while this waited for its slot.
                snapshot = await service.store.get_snapshot(site.name, path, profile)
                if snapshot is not None and snapshot.unrendered:
                    await self._settle(site, path, profile, snapshot)
                    snapshot = await service.store.get_snapshot(site.name, path, profile)
        return None if snapshot is None or snapshot.unrendered else snapshot

    async def _settle(
        self, site: SiteSettings, path: str, profile: str, snapshot: Snapshot
    ) -> None:
        """Render ``profile`` of the page whose ``snapshot`` owes it and settle it."""
        service, store = self.service, self.service.store
        # A copy owes what its master owes: the master's page is rendered.
        own = await store.own_profiles(site.name, [path])
        record = None if path in own else await store.get_path(site.name, path)
        target = record.duplicate_of if record and record.duplicate_of else path
        keys = {(site.name, path, profile), (site.name, target, profile)}
        if any(self._failed.get(key, 0.0) > time.monotonic() for key in keys):
            return  # the master's render failed lately, asked through another copy
        started = time.monotonic()
        try:
            result, variant = await service.profiles.render_owed(
                site.url_for(target), site, profile, snapshot
            )
            error = result.error if not result.ok else None
        except Exception as exc:
            error, variant = f"renderer fault: {type(exc).__name__}", None
        service.count_render(site, started)
        if error is not None:
            for key in keys:
                self._failed_now(key)
            log.info("owed capture failed site=%s path=%s profile=%s error=%r",
                     site.name, target, profile, error)
            return
        settled = await store.settle_owed(
            site.name, target, profile, snapshot.captured_at, variant
        )
        log.info(
            "captured site=%s path=%s profile=%s status=%d %.2fs%s%s", site.name, target,
            profile, result.status, result.elapsed, "" if variant else " alike",
            "" if settled else " not kept (the path's snapshot changed meanwhile)",
        )
        if variant is not None and settled and service.links is not None:
            service.links.put_nowait((site.name, target))

    def _failed_now(self, key: Key) -> None:
        self._failed[key] = time.monotonic() + RETRY_AFTER
        self._failed.move_to_end(key)
        while len(self._failed) > FAILED_KEPT:
            self._failed.popitem(last=False)
