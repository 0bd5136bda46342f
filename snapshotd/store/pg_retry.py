"""PostgreSQL writes done again when the server gives them up.

Writers that lock several rows take them in one order where they can (a site's paths by
path, by code point; counters by key), but some cannot (a capture that takes over a master's
snapshot locks its own path, then the master's; a worker's leases are of any site). When two
transactions wait on each other, PostgreSQL gives one of them up (a deadlock, ``40P01``), or
refuses a change to a row another changed first (``40001``). Such a transaction changed
nothing, so every write transaction of the store, and every statement that locks several
rows in an order of its own, runs through :func:`transaction_retried`: begun again, a few
times, after a short pause that grows.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import asyncpg

__all__ = ["RETRIES", "transaction_retried"]

RETRIES = 5
T = TypeVar("T")


async def transaction_retried(db: Any, work: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
    """``work`` run in a transaction of a connection from the pool ``db``, begun again while
    the server gives it up, at most :data:`RETRIES` times in all (the last error raised)."""
    for attempt in range(RETRIES):
        try:
            async with db.acquire() as conn, conn.transaction():
                return await work(conn)
        except (asyncpg.DeadlockDetectedError, asyncpg.SerializationError):
            if attempt == RETRIES - 1:
                raise
            await asyncio.sleep(0.01 * (attempt + 1))
    raise AssertionError("unreachable")
