"""The render slots proxy misses may hold: :class:`MissSlots`.

Invariants:
- while no crawler capture is under way in this process, misses may hold every render slot
  of the pool: with the crawler off or idle, no slot idles while a bot waits;
- while one is (:meth:`MissSlots.crawling`), misses may hold all but ``reserved`` of them, so
  the crawler's capture waits at most for one render to end, never for a flood of misses; a
  miss that holds a slot keeps it until its render ends, and new misses wait until they are
  below the lower bound again;
- waiting misses are let in first come, first served; a miss cancelled while it waits takes
  no slot, and one cancelled just as it was let in gives its slot to the next.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class MissSlots:
    def __init__(self, slots: int, reserved: int) -> None:
        self.slots = slots
        self.reserved = reserved
        self.held = 0
        self._crawling = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    def limit(self) -> int:
        """Slots misses may hold now."""
        return self.slots - (self.reserved if self._crawling else 0)

    def _let_in(self) -> None:
        while self._waiters and self.held < self.limit():
            waiter = self._waiters.popleft()
            if not waiter.done():
                self.held += 1
                waiter.set_result(None)

    async def _acquire(self) -> None:
        if not self._waiters and self.held < self.limit():
            self.held += 1
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._release()  # let in as it was cancelled: the slot goes to the next
            else:
                self._waiters.remove(waiter)
            raise

    def _release(self) -> None:
        self.held -= 1
        self._let_in()

    @asynccontextmanager
    async def miss(self) -> AsyncIterator[None]:
        """Hold a slot for one miss's render."""
        await self._acquire()
        try:
            yield
        finally:
            self._release()

    @asynccontextmanager
    async def crawling(self) -> AsyncIterator[None]:
        """A crawler capture is under way: keep ``reserved`` slots from new misses."""
        self._crawling += 1
        try:
            yield
        finally:
            self._crawling -= 1
            self._let_in()
