"""What the console's charts show: counts per minute and the recent bot requests, kept in
the store, so they add up over every process and host and outlive restarts.

Counted, per site and minute (names of :mod:`snapshotd.store.counters` rows):
- ``result:R`` for each snapshot request, R being ``HIT``, ``STALE``, ``MISS``, ``BYPASS``,
  ``RULE`` or ``PASS``; ``bot:NAME`` for its bot (``-`` for none);
- ``capture:ok``, ``capture:duplicate``, ``capture:error`` for each capture;
- ``render:B`` for each render time, B the upper bound in seconds of its bucket
  (:data:`RENDER_BUCKETS`, ``inf`` past the last).

Invariants:
- counting is in memory and never waits; :meth:`MinuteCounters.flush` adds what was counted
  to the store in one batch (and keeps it for the next flush when the store fails);
- the service flushes every 10 s and when it closes, and drops rows older than 7 days once
  an hour; the recent bot requests go to the store every :data:`RECENT_EVERY` seconds (the
  last :data:`RECENT` of them at most), so another process's show within that.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from snapshotd.observe import logs
from snapshotd.store.counters import RecentRow
from snapshotd.store.interface import Store

__all__ = ["RENDER_BUCKETS", "MinuteCounters"]

log = logging.getLogger("snapshotd.observe.minute_counts")

RENDER_BUCKETS = (0.25, 0.5, 1, 2, 3, 5, 8, 13, 20, 30, 60)
FLUSH_EVERY = 10.0
RECENT_EVERY = 2.0
KEEP_MINUTES = 7 * 24 * 60
RECENT = 100


def render_bucket(seconds: float) -> str:
    for bound in RENDER_BUCKETS:
        if seconds <= bound:
            return f"{bound:g}"
    return "inf"


class MinuteCounters:
    """Counts per (minute, site, name), and the bot requests not yet stored."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._counts: dict[tuple[int, str, str], int] = {}
        # Snapshot requests by (minute, site, result, bot): one count each, split at flush.
        self._requests: dict[tuple[int, str, str, str], int] = {}
        self._recent: deque[RecentRow] = deque(maxlen=RECENT)
        self._task: asyncio.Task[None] | None = None
        self._pruned = 0.0

    def add(self, site: str, name: str, n: int = 1, *, now: float | None = None) -> None:
        key = (int((self.clock() if now is None else now) // 60), site, name)
        self._counts[key] = self._counts.get(key, 0) + n

    def request(
        self, site: str, bot: str, path: str, result: str, status: int, ms: int
    ) -> None:
        """A snapshot request answered (on the way of every one: kept cheap)."""
        now = self.clock()
        key = (int(now // 60), site, result, bot)
        self._requests[key] = self._requests.get(key, 0) + 1
        self._recent.append((now, site, bot, path, result, status or None, ms))

    async def recent_requests(self, store: Store) -> list[dict[str, Any]]:
        """The last bot requests of every process, newest first (this one's stored first)."""
        await self.flush_recent(store)
        keys = ("time", "site", "bot", "path", "result", "status", "ms")
        rows = await store.recent(RECENT)
        return [dict(zip(keys, row, strict=True)) for row in rows]

    async def flush_recent(self, store: Store) -> None:
        rows = list(self._recent)
        self._recent.clear()
        try:
            await store.add_recent(rows)
        except BaseException:
            self._recent.extendleft(reversed(rows))  # kept (the newest) for the next flush
            raise

    def capture(self, site: str, outcome: str, n: int = 1) -> None:
        self.add(site, f"capture:{outcome}", n)

    def render(self, site: str, seconds: float) -> None:
        self.add(site, f"render:{render_bucket(seconds)}")

    async def flush(self, store: Store) -> None:
        """Add what was counted since the last flush to the store."""
        requests, self._requests = self._requests, {}
        for (minute, site, result, bot), n in requests.items():
            self.add(site, "result:" + result, n, now=minute * 60)
            self.add(site, "bot:" + bot, n, now=minute * 60)
        counts, self._counts = self._counts, {}
        if not counts:
            return
        try:
            await store.add_counters([(*key, value) for key, value in counts.items()])
        except BaseException:
            for key, value in counts.items():  # kept for the next flush
                self._counts[key] = self._counts.get(key, 0) + value
            raise

    def start(self, store: Store) -> None:
        self._task = asyncio.ensure_future(self._run(store))

    async def close(self, store: Store) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        try:
            await self.flush(store)
            await self.flush_recent(store)
        except Exception as exc:
            log.warning("could not store the last minute counters: %s", exc)

    async def _run(self, store: Store) -> None:
        flushed = time.monotonic()
        while True:
            await asyncio.sleep(RECENT_EVERY)
            try:
                await self.flush_recent(store)
                if time.monotonic() - flushed < FLUSH_EVERY:
                    continue
                flushed = time.monotonic()
                await self.flush(store)
                now = self.clock()
                if now - self._pruned > 3600:
                    self._pruned = now
                    await store.prune_counters(int(now // 60) - KEEP_MINUTES)
            except Exception as exc:
                logs.throttled(log, logging.WARNING, "storing minute counters failed: %s", exc)
