"""A semaphore whose holders take several units at once.

Invariants:

- A holder waits until all the units it asks for are free and takes them in one step, so
  no two holders each wait holding part of what they need; waiters are served in the order
  they came (one that asks for more is not overtaken forever by smaller ones).
- Units are given back synchronously when the holder leaves, cancelled or not; a waiter
  cancelled while waiting takes nothing.
- Asking for more units than there are is asking for all of them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator

__all__ = ["WeightedSemaphore"]


class WeightedSemaphore:
    def __init__(self, units: int) -> None:
        self.units = units
        self.free = units
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    @contextlib.asynccontextmanager
    async def take(self, units: int) -> AsyncIterator[None]:
        units = max(min(units, self.units), 1)
        if self._waiters or self.free < units:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            entry = (units, waiter)
            self._waiters.append(entry)
            try:
                await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    self.free += units  # granted as it was cancelled: given back
                else:
                    with contextlib.suppress(ValueError):  # a cancelled one may be gone
                        self._waiters.remove(entry)
                self._wake()
                raise
        else:
            self.free -= units
        try:
            yield
        finally:
            self.free += units
            self._wake()

    def _wake(self) -> None:
        """Grant the waiters at the head of the line whose units are free."""
        while self._waiters and self._waiters[0][0] <= self.free:
            units, waiter = self._waiters.popleft()
            if waiter.done():
                continue
            self.free -= units
            waiter.set_result(None)
