"""Counters kept per minute in the store, for both engines (mixed into each store class).

A row is (minute, site, name, value): ``minute`` is a Unix time divided by 60, ``name`` says
what is counted (``result:HIT``, ``bot:Googlebot``, ``capture:ok``, ``render:2``, ...).
Adding is ``value = value + n``, so every process of every host adds to the same rows, and
they outlive restarts.

Invariants:
- ``add_counters`` adds a batch in one transaction, in key order (so processes adding
  batches at once never deadlock);
- ``counters`` reads every row from a minute on, oldest first;
- ``prune_counters`` removes the rows before a minute.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Sequence
from typing import Any

__all__ = ["COUNTERS_TABLE", "CounterRow", "PostgresCounters", "SQLiteCounters"]

CounterRow = tuple[int, str, str, int]  # minute, site, name, value

# The same statement upgrades both engines' schemas.
COUNTERS_TABLE = """
    CREATE TABLE counters (
        minute BIGINT NOT NULL,
        site   TEXT   NOT NULL,
        name   TEXT   NOT NULL,
        value  BIGINT NOT NULL,
        PRIMARY KEY (minute, site, name)
    )
"""

_ADD = (
    "INSERT INTO counters (minute, site, name, value) VALUES ({}) "
    "ON CONFLICT (minute, site, name) DO UPDATE SET value = counters.value + excluded.value"
)


def _merged(rows: Sequence[CounterRow]) -> list[CounterRow]:
    """One row per key, in key order."""
    sums: dict[tuple[int, str, str], int] = {}
    for minute, site, name, value in rows:
        key = (int(minute), site, name)
        sums[key] = sums.get(key, 0) + int(value)
    return [(*key, value) for key, value in sorted(sums.items())]


class SQLiteCounters:
    """The counters of :class:`~snapshotd.store.sqlite.SQLiteStore`."""

    _lock: Any
    _writer: Any
    _reader: Any

    async def add_counters(self, rows: Sequence[CounterRow]) -> None:
        rows = _merged(rows)
        if not rows:
            return
        async with self._lock:
            wr = self._writer
            try:
                await wr.execute("BEGIN IMMEDIATE")
                await wr.executemany(_ADD.format("?, ?, ?, ?"), rows)
                await wr.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.OperationalError):  # none left open
                    await wr.execute("ROLLBACK")
                raise

    async def counters(self, since: int) -> list[CounterRow]:
        async with self._reader.execute(
            "SELECT minute, site, name, value FROM counters WHERE minute >= ? "
            "ORDER BY minute, site, name",
            (since,),
        ) as cursor:
            return [(int(m), s, n, int(v)) for m, s, n, v in await cursor.fetchall()]

    async def prune_counters(self, before: int) -> int:
        async with self._lock:
            cursor = await self._writer.execute("DELETE FROM counters WHERE minute < ?", (before,))
            return int(cursor.rowcount or 0)


class PostgresCounters:
    """The counters of :class:`~snapshotd.store.postgres.PostgresStore`."""

    _db: Any

    async def add_counters(self, rows: Sequence[CounterRow]) -> None:
        rows = _merged(rows)
        if not rows:
            return
        async with self._db.acquire() as conn, conn.transaction():
            await conn.executemany(_ADD.format("$1, $2, $3, $4"), rows)

    async def counters(self, since: int) -> list[CounterRow]:
        rows = await self._db.fetch(
            "SELECT minute, site, name, value FROM counters WHERE minute >= $1 "
            "ORDER BY minute, site, name",
            since,
        )
        return [(int(r[0]), r[1], r[2], int(r[3])) for r in rows]

    async def prune_counters(self, before: int) -> int:
        done = await self._db.execute("DELETE FROM counters WHERE minute < $1", before)
        return int(done.split()[-1])
