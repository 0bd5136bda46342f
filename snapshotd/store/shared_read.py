"""Concurrent asks for the same thing share one read.

:class:`SharedRead` starts a read for a key when none is under way and lets every caller that
asks meanwhile wait for it. A caller that goes away does not cancel the read the others wait
for; a read that fails fails for each of them, and the next ask starts another.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["SharedRead"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class SharedRead(Generic[K, V]):
    """Reads by key, with ``read(key)``, one at a time for each key."""

    def __init__(self, read: Callable[[K], Awaitable[V]]) -> None:
        self.read = read
        self._reads: dict[K, asyncio.Future[V]] = {}

    async def __call__(self, key: K) -> V:
        reading = self._reads.get(key)
        if reading is None:
            reading = self._reads[key] = asyncio.ensure_future(self.read(key))
            reading.add_done_callback(lambda done: self._done(key, done))
        return await asyncio.shield(reading)

    def _done(self, key: K, reading: asyncio.Future[V]) -> None:
        if self._reads.get(key) is reading:
            del self._reads[key]
        if not reading.cancelled():
            reading.exception()  # each caller has it; retrieved so none is reported as lost
