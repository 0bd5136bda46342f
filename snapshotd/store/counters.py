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

The recent bot requests of every process are kept beside them: ``add_recent`` stores a batch
and keeps the last :data:`RECENT_KEPT` of each site, ``recent`` reads the newest first.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncIterator, Sequence
from typing import Any

from snapshotd.store.pg_retry import transaction_retried

__all__ = [
    "COUNTERS_TABLE",
    "POSTGRES_RECENT_TABLE",
    "RECENT_KEPT",
    "SQLITE_RECENT_TABLE",
    "CounterRow",
    "PostgresCounters",
    "RecentRow",
    "SQLiteCounters",
]

CounterRow = tuple[int, str, str, int]  # minute, site, name, value
# time, site, bot, path, result, status (None: none sent), milliseconds
RecentRow = tuple[float, str, str, str, str, int | None, int]
RECENT_KEPT = 200
_RECENT_COLUMNS = """
        time   DOUBLE PRECISION NOT NULL,
        site   TEXT             NOT NULL,
        bot    TEXT             NOT NULL,
        path   TEXT             NOT NULL,
        result TEXT             NOT NULL,
        status INTEGER,
        ms     INTEGER          NOT NULL"""
SQLITE_RECENT_TABLE = (
    f"CREATE TABLE recent_requests (id INTEGER PRIMARY KEY,{_RECENT_COLUMNS});"
    "CREATE INDEX recent_requests_site ON recent_requests (site, id)"
)
POSTGRES_RECENT_TABLE = (
    f"CREATE TABLE recent_requests (id BIGSERIAL PRIMARY KEY,{_RECENT_COLUMNS});"
    "CREATE INDEX recent_requests_site ON recent_requests (site, id)"
)
_ADD_RECENT = (
    "INSERT INTO recent_requests (time, site, bot, path, result, status, ms) "
    "VALUES ({0}1, {0}2, {0}3, {0}4, {0}5, {0}6, {0}7)"
)
# Of one site, all but the newest RECENT_KEPT.
_TRIM_RECENT = (
    "DELETE FROM recent_requests WHERE site = {0}1 AND id <= (SELECT id FROM recent_requests "
    f"WHERE site = {{0}}1 ORDER BY id DESC LIMIT 1 OFFSET {RECENT_KEPT})"
)
_READ_RECENT = (
    "SELECT time, site, bot, path, result, status, ms FROM recent_requests "
    "ORDER BY id DESC LIMIT {0}1"
)

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


def row_count(status: str) -> int:
    """The row count of a PostgreSQL command tag such as ``UPDATE 3`` or ``INSERT 0 1``."""
    return int(status.rsplit(" ", 1)[-1])


@contextlib.asynccontextmanager
async def sqlite_transaction(store: Any) -> AsyncIterator[Any]:
    """The SQLite store's writer, under its lock, in one ``BEGIN IMMEDIATE`` transaction that
    is committed, or rolled back on any error (none is left open)."""
    async with store._lock:
        wr = store._writer
        try:
            await wr.execute("BEGIN IMMEDIATE")
            yield wr
            await wr.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.OperationalError):
                await wr.execute("ROLLBACK")
            raise


class SQLiteCounters:
    """The counters of :class:`~snapshotd.store.sqlite.SQLiteStore`."""

    _lock: Any
    _writer: Any
    _reader: Any

    async def add_counters(self, rows: Sequence[CounterRow]) -> None:
        rows = _merged(rows)
        if not rows:
            return
        async with sqlite_transaction(self) as wr:
            await wr.executemany(_ADD.format("?, ?, ?, ?"), rows)

    async def counters(self, since: int) -> list[CounterRow]:
        async with self._reader.execute(
            "SELECT minute, site, name, value FROM counters WHERE minute >= ? "
            "ORDER BY minute, site, name",
            (since,),
        ) as cursor:
            return [(int(m), s, n, int(v)) for m, s, n, v in await cursor.fetchall()]

    async def add_recent(self, rows: Sequence[RecentRow]) -> None:
        if not rows:
            return
        async with sqlite_transaction(self) as wr:
            await wr.executemany(_ADD_RECENT.format("?"), rows)
            for site in sorted({row[1] for row in rows}):
                await wr.execute(_TRIM_RECENT.format("?"), (site,))

    async def recent(self, limit: int) -> list[RecentRow]:
        async with self._reader.execute(_READ_RECENT.format("?"), (limit,)) as cursor:
            return [tuple(row) for row in await cursor.fetchall()]  # type: ignore[misc]

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

        async def add(conn: Any) -> None:
            await conn.executemany(_ADD.format("$1, $2, $3, $4"), rows)

        await transaction_retried(self._db, add)

    async def counters(self, since: int) -> list[CounterRow]:
        rows = await self._db.fetch(
            "SELECT minute, site, name, value FROM counters WHERE minute >= $1 "
            "ORDER BY minute, site, name",
            since,
        )
        return [(int(r[0]), r[1], r[2], int(r[3])) for r in rows]

    async def add_recent(self, rows: Sequence[RecentRow]) -> None:
        if not rows:
            return

        async def add(conn: Any) -> None:
            await conn.executemany(_ADD_RECENT.format("$"), rows)
            for site in sorted({row[1] for row in rows}):
                await conn.execute(_TRIM_RECENT.format("$"), site)

        await transaction_retried(self._db, add)

    async def recent(self, limit: int) -> list[RecentRow]:
        rows = await self._db.fetch(_READ_RECENT.format("$"), limit)
        return [tuple(row) for row in rows]  # type: ignore[misc]

    async def prune_counters(self, before: int) -> int:
        done = await self._db.execute("DELETE FROM counters WHERE minute < $1", before)
        return int(done.split()[-1])
