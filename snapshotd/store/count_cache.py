"""Counts read from the store no more often than they are worth.

The store keeps its counts (``store.path_counts``), so a read is a few rows; still, a busy
proxy would ask for one on every new path. A :class:`CountCache` reads a count again only once
it is due: ``every`` seconds after the last read, and never sooner than ``SLOWER`` times
what that read took, one read at a time, so counting a key costs each process at most
1/``SLOWER`` of the database's time. Between reads it adds what this process reported
adding; what other processes added shows at the next read.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from snapshotd.store.shared_read import SharedRead

__all__ = ["SLOWER", "CountCache"]

SLOWER = 20


class CountCache:
    """Counts by key, each read with ``read(key)`` when due and kept up to date with
    :meth:`add` in between. Callers that find a count due while it is being read wait for
    that read."""

    def __init__(
        self,
        read: Callable[[str], Awaitable[int]],
        *,
        every: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.read, self.every, self.clock = read, every, clock
        self._counts: dict[str, tuple[float, int]] = {}  # key -> (when due, count)
        self._read: SharedRead[str, int] = SharedRead(self._read_now)

    async def get(self, key: str, *, fresh: bool = False) -> int:
        """The count of ``key``; read now when ``fresh``."""
        due, count = self._counts.get(key, (0.0, 0))
        if not fresh and self.clock() < due:
            return count
        return await self._read(key)

    async def _read_now(self, key: str) -> int:
        started = self.clock()
        count = await self.read(key)
        took = self.clock() - started
        self._counts[key] = (self.clock() + max(self.every, took * SLOWER), count)
        return count

    def add(self, key: str, n: int = 1) -> None:
        """Count ``n`` more for ``key`` (added by this process) until the next read."""
        if (counted := self._counts.get(key)) is not None:
            self._counts[key] = (counted[0], counted[1] + n)
