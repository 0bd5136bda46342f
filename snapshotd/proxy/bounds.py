"""The counts behind the flood bounds of bots' requests: a site's new paths (how many it has,
how many bots added in the last minute) and the refusals' log lines.

Invariants:
- a site's size is the store's count, read again only when due, plus the paths added here
  since; the last minute's new paths are counted in this process, one of ``processes``
  sharing the budget evenly;
- one log line per site and reason at most every ``every`` seconds, telling how many were
  not logged in between.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque

from snapshotd.store.count_cache import CountCache
from snapshotd.store.interface import Store

__all__ = ["NewPaths", "RefusalLog"]

log = logging.getLogger("snapshotd.proxy.handler")


class NewPaths:
    """What admission needs to bound a site's new paths: how many it has (a :class:`CountCache`
    of the store's count, read again ``count_ttl`` seconds or more after the last time, plus
    the ones added here since) and how many bots added in the last 60 s. That one is
    counted in this process, one of ``processes`` sharing the budget evenly (the workers of
    one ``serve``), so each path added here counts ``processes`` times."""

    def __init__(self, store: Store, count_ttl: float = 1.0, processes: int = 1) -> None:
        self.processes = processes
        self._sizes = CountCache(store.site_size, every=count_ttl)
        self._added: dict[str, deque[float]] = {}

    async def size(self, site: str) -> int:
        return await self._sizes.get(site)

    def lately(self, site: str) -> int:
        added = self._added.setdefault(site, deque())
        while added and added[0] <= time.monotonic() - 60.0:
            added.popleft()
        return len(added) * self.processes

    def add(self, site: str, *, lately: bool = True) -> None:
        """Count a path just added; ``lately``: against the minute's budget too (not for a
        trusted crawler's, which is held to ``max_pages`` alone)."""
        if lately:
            self.spent(site)
        self._sizes.add(site)

    def spent(self, site: str) -> None:
        """Count a new path rendered but not kept (a screenshot) against the minute's
        budget."""
        self._added.setdefault(site, deque()).append(time.monotonic())


class RefusalLog:
    """One log line for a site's refusals of one reason at most every ``every`` seconds,
    telling how many were not logged in between."""

    def __init__(self, every: float = 10.0) -> None:
        self.every = every
        self._last: dict[tuple[str, str], tuple[float, int]] = {}

    def __call__(self, site: str, reason: str, path: str) -> None:
        now = time.monotonic()
        at, unlogged = self._last.get((site, reason), (-math.inf, 0))
        if now - at < self.every:
            self._last[(site, reason)] = (at, unlogged + 1)
            return
        self._last[(site, reason)] = (now, 0)
        log.warning(
            "refused new capture, passing through site=%s reason=%s path=%.200s unlogged=%d",
            site, reason, path, unlogged,
        )
