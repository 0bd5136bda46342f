"""The SQLite store (aiosqlite), the default engine.

Two connections: one for writes, serialised by a lock so a multi-statement transaction is
never interleaved with another coroutine's statements, and one for reads, which in WAL mode
never waits for the writer. Claims are one ``UPDATE ... RETURNING`` statement.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import aiosqlite

from snapshotd.store.copies import SQLiteCopies
from snapshotd.store.counters import SQLiteCounters
from snapshotd.store.device_kinds import SQLiteDeviceKinds
from snapshotd.store.found_urls import SQLiteFoundUrls
from snapshotd.store.interface import CRAWL_ORDER as _CRAWL_ORDER
from snapshotd.store.interface import (
    PATH_COLUMNS,
    SNAPSHOT_OF,
    PathRecord,
    Snapshot,
    StoreError,
    expiring,
    path_record,
    snapshot_from_row,
)
from snapshotd.store.lastmod import SQLiteLastmod
from snapshotd.store.leases import SQLiteLeases
from snapshotd.store.outcome import (
    CaptureOutcome,
    capture_writes,
    mark_path_failed,
    mark_path_stored,
)
from snapshotd.store.owed_profiles import SQLiteOwed
from snapshotd.store.path_counts import COUNTS, PROCESSED, QUEUE_DEPTH, SITE_COUNTS, SITE_SIZE
from snapshotd.store.prints_and_params import SQLiteParams
from snapshotd.store.profile_snapshots import SNAPSHOT_OF_PROFILE, SQLiteProfiles
from snapshotd.store.queueing import check_priority, queueing
from snapshotd.store.schema import migrations, versions_after
from snapshotd.store.site_rows import SQLiteSites
from snapshotd.store.soft_404_rows import SQLiteNotFound

__all__ = ["SQLiteStore"]

# Its versions, in order (store/schema).
MIGRATIONS = migrations("sqlite")


def _statements(script: str) -> Iterator[str]:
    """The statements of a migration, each whole (a trigger's body holds semicolons)."""
    statement = ""
    for part in script.split(";"):
        statement += part + ";"
        if sqlite3.complete_statement(statement):
            if statement.strip("; \n"):
                yield statement
            statement = ""


async def _rollback(conn: aiosqlite.Connection) -> None:
    """End whatever transaction is open on ``conn``.

    Runs after every statement already handed to the connection's thread, including one
    whose caller was cancelled while waiting (it still runs): a ``BEGIN`` whose await was
    cut short is rolled back, a ``COMMIT`` that went through leaves nothing to roll back.
    """
    try:
        await conn.execute("ROLLBACK")
    except sqlite3.OperationalError as exc:
        if "no transaction is active" not in str(exc):
            raise


class SQLiteStore(
    SQLiteCounters, SQLiteSites, SQLiteParams, SQLiteCopies, SQLiteLeases, SQLiteProfiles,
    SQLiteLastmod, SQLiteFoundUrls, SQLiteNotFound, SQLiteDeviceKinds, SQLiteOwed,
):
    """``Store`` on a SQLite file. ``clock`` is injectable so tests can move time."""

    def __init__(self, path: str, *, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self.clock = clock
        self._wr: aiosqlite.Connection | None = None
        self._rd: aiosqlite.Connection | None = None
        self._lock = asyncio.Lock()

    # ------------------------------------------------------------------ lifecycle

    async def _connect(self) -> aiosqlite.Connection:
        conn = await aiosqlite.connect(self.path, isolation_level=None)
        try:
            await conn.execute("PRAGMA busy_timeout = 10000")
            await conn.execute("PRAGMA foreign_keys = ON")
            await conn.execute("PRAGMA synchronous = NORMAL")
        except BaseException:
            # Its thread would keep the process alive.
            await conn.close()
            raise
        return conn

    async def open(self) -> None:
        try:
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            self._wr = await self._connect()
            try:
                await self._wr.execute("PRAGMA journal_mode = WAL")
                await self._migrate()
                self._rd = await self._connect() if self.path != ":memory:" else self._wr
            except BaseException:
                await self._wr.close()
                self._wr = None
                raise
        except (sqlite3.Error, OSError, StoreError) as exc:
            raise StoreError(f"{self.path}: {exc}") from None

    async def close(self) -> None:
        for conn in {id(c): c for c in (self._rd, self._wr) if c is not None}.values():
            await conn.close()
        self._rd = self._wr = None

    async def __aenter__(self) -> SQLiteStore:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _migrate(self) -> None:
        wr = self._writer
        try:
            await wr.execute("BEGIN IMMEDIATE")
            await wr.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations "
                "(version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)"
            )
            async with wr.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations") as c:
                row = await c.fetchone()
            for version, script in versions_after(MIGRATIONS, row[0] if row else 0):
                for statement in _statements(script):
                    await wr.execute(statement)
                await wr.execute(
                    "INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)",
                    (version, self.clock()),
                )
            await wr.execute("COMMIT")
        except BaseException:
            await _rollback(wr)
            raise

    @property
    def _writer(self) -> aiosqlite.Connection:
        if self._wr is None:
            raise RuntimeError("store is not open")
        return self._wr

    @property
    def _reader(self) -> aiosqlite.Connection:
        if self._rd is None:
            raise RuntimeError("store is not open")
        return self._rd

    async def schema_version(self) -> int:
        async with self._reader.execute("SELECT MAX(version) FROM schema_migrations") as c:
            row = await c.fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    async def ping(self) -> bool:
        try:
            async with self._reader.execute("SELECT 1") as c:
                await c.fetchone()
            return True
        except Exception:
            return False

    # ------------------------------------------------------------------ reads

    async def _one(self, sql: str, params: Sequence[Any]) -> Any:
        rows = await self._reader.execute_fetchall(sql, params)
        return next(iter(rows), None)

    async def get_path(self, site: str, path: str) -> PathRecord | None:
        row = await self._one(
            f"SELECT {PATH_COLUMNS} FROM paths WHERE site = ? AND path = ?", (site, path)
        )
        return path_record(row) if row else None

    async def get_snapshot(
        self, site: str, path: str, profile: str | None = None
    ) -> Snapshot | None:
        if profile is None:
            row = await self._one(SNAPSHOT_OF.format("?"), (site, path))
        else:
            row = await self._one(SNAPSHOT_OF_PROFILE.format("?"), (site, path, profile))
        return None if row is None else snapshot_from_row(site, path, row, profile)

    async def counts(self, site: str | None = None) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        query, args = (COUNTS, ()) if site is None else (SITE_COUNTS.format("?"), (site,))
        async with self._reader.execute(query, args) as c:
            async for site, state, n, _ in c:
                out.setdefault(site, {})[state] = n
        return out

    async def queue_depth(self) -> dict[int, int]:
        out = {p: 0 for p in range(4)}
        async with self._reader.execute(QUEUE_DEPTH) as c:
            async for prio, n, _ in c:
                out[prio] = n
        return out

    async def site_size(self, site: str) -> int:
        row = await self._one(SITE_SIZE.format("?"), (site,))
        return int(row[0])

    async def processed(self, site: str) -> int:
        row = await self._one(PROCESSED.format("?"), (site,))
        return int(row[0])

    async def list_paths(
        self,
        site: str,
        *,
        state: str | None = None,
        prefix: str | None = None,
        limit: int = 50,
        cursor: int | None = None,
        crawl_order: bool = False,
        not_found: bool = False,
    ) -> tuple[list[PathRecord], int | None]:
        """Newest first by insertion id; the cursor is the last id seen, so paths added
        while paging (higher ids) never shift later pages. With ``crawl_order``, in the
        order claims take them (priority, queued_at, id), the cursor an offset."""
        where: list[str] = ["site = ?"] + ["not_found IS NOT NULL"] * not_found
        params: list[Any] = [site]
        if state:
            where.append("state = ?")
            params.append(state)
        if prefix:
            where.append("substr(path, 1, ?) = ?")
            params.extend([len(prefix), prefix])
        if cursor is not None and not crawl_order:
            where.append("id < ?")
            params.append(cursor)
        skip = int(cursor or 0) if crawl_order else 0
        sql = (
            f"SELECT {PATH_COLUMNS} FROM paths WHERE {' AND '.join(where)} "
            f"ORDER BY {_CRAWL_ORDER if crawl_order else 'id DESC'} LIMIT ? OFFSET ?"
        )
        async with self._reader.execute(sql, (*params, limit + 1, skip)) as c:
            rows = [path_record(r) for r in await c.fetchall()]
        more = len(rows) > limit
        return rows[:limit], (skip + limit if crawl_order else rows[limit - 1].id) if more else None

    async def iter_paths(self, site: str | None = None) -> AsyncIterator[PathRecord]:
        last = 0
        while True:
            sql = f"SELECT {PATH_COLUMNS} FROM paths WHERE id > ?"
            params: list[Any] = [last]
            if site is not None:
                sql += " AND site = ?"
                params.append(site)
            async with self._reader.execute(sql + " ORDER BY id LIMIT 1000", params) as c:
                rows = await c.fetchall()
            if not rows:
                return
            for row in rows:
                yield path_record(row)
            last = list(rows)[-1][0]

    async def get_meta(self, key: str) -> str | None:
        row = await self._one("SELECT value FROM meta WHERE key = ?", (key,))
        return row[0] if row else None

    # ------------------------------------------------------------------ writes

    async def set_meta(self, key: str, value: str) -> None:
        async with self._lock:
            await self._writer.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, value),
            )

    async def replace_meta(self, key: str, old: str | None, new: str) -> bool:
        async with self._lock:
            if old is None:
                cursor = await self._writer.execute(
                    "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING",
                    (key, new),
                )
            else:
                cursor = await self._writer.execute(
                    "UPDATE meta SET value = ? WHERE key = ? AND value = ?", (new, key, old)
                )
            return cursor.rowcount == 1

    async def _enqueue_one(
        self, site: str, path: str, priority: int, hops: int, force: bool, now: float, found: bool
    ) -> str:
        wr = self._writer
        async with wr.execute(
            "SELECT id, state, priority, expires_at, hops, found FROM paths "
            "WHERE site = ? AND path = ?",
            (site, path),
        ) as c:
            row = await c.fetchone()
        if row is None:
            await wr.execute(
                "INSERT INTO paths (site, path, state, priority, hops, created_at, queued_at, "
                "found) VALUES (?, ?, 'pending', ?, ?, ?, ?, ?)",
                (site, path, priority, hops, now, now, int(found)),
            )
            return "queued"
        pid, state, old_priority, expires_at, old_hops, was_found = row
        if found and not was_found:
            await wr.execute("UPDATE paths SET found = 1 WHERE id = ?", (pid,))
        decided = queueing(
            state, old_priority, old_hops, expires_at,
            priority=priority, hops=hops, force=force, now=now,
        )
        if decided.change == "raise":
            await wr.execute(
                "UPDATE paths SET priority = MAX(priority, ?), hops = ? WHERE id = ?",
                (priority, decided.hops, pid),
            )
        elif decided.change == "requeue":
            await wr.execute(
                "UPDATE paths SET state = 'pending', priority = ?, hops = ?, queued_at = ?, "
                "lease_owner = NULL, lease_until = NULL WHERE id = ?",
                (priority, decided.hops, now, pid),
            )
        return decided.answer

    async def enqueue(
        self, site: str, path: str, priority: int, *, hops: int = 0, force: bool = False,
        found: bool = True,
    ) -> str:
        return (await self.enqueue_many(site, [(path, hops)], priority, force=force,
                                        found=found))[0]

    async def enqueue_many(
        self, site: str, paths: Sequence[tuple[str, int]], priority: int, *, force: bool = False,
        found: bool = True,
    ) -> list[str]:
        check_priority(priority)
        now = self.clock()
        async with self._lock:
            wr = self._writer
            try:
                await wr.execute("BEGIN IMMEDIATE")
                out = [
                    await self._enqueue_one(site, p, priority, h, force, now, found)
                    for p, h in paths
                ]
                await wr.execute("COMMIT")
            except BaseException:
                await _rollback(wr)
                raise
        return out

    async def add_ignored(self, site: str, path: str, *, hops: int = 0, reason: str = "") -> bool:
        now = self.clock()
        async with self._lock:
            cur = await self._writer.execute(
                "INSERT INTO paths (site, path, state, priority, hops, created_at, queued_at, "
                "error) VALUES (?, ?, 'ignored', 0, ?, ?, ?, ?) "
                "ON CONFLICT (site, path) DO NOTHING",
                (site, path, hops, now, now, reason or None),
            )
            return cur.rowcount > 0

    async def complete(self, site: str, path: str, owner: str, outcome: CaptureOutcome) -> bool:
        now = self.clock()
        stored = mark_path_stored(site, path, owner, outcome, now, "?")
        async with self._lock:
            wr = self._writer
            try:
                await wr.execute("BEGIN IMMEDIATE")
                async with wr.execute(*stored) as c:
                    row = await c.fetchone()
                if row is None:
                    await _rollback(wr)
                    return False
                for sql, args in capture_writes(site, path, row[0], outcome, now, "?"):
                    await wr.execute(sql, args)
                await wr.execute("COMMIT")
            except BaseException:
                await _rollback(wr)
                raise
        return True

    async def fail(
        self,
        site: str,
        path: str,
        owner: str,
        *,
        error: str,
        retry_at: float,
        status: int | None = None,
    ) -> bool:
        """Mark a claimed path ``error`` until ``retry_at``; its old snapshot stays."""
        failed = mark_path_failed(
            site, path, owner, error=error, retry_at=retry_at, status=status, mark="?"
        )
        async with self._lock:
            cur = await self._writer.execute(*failed)
            return cur.rowcount > 0

    async def links_due(
        self, site: str, *, after: int = 0, captured_before: float, limit: int = 100
    ) -> list[tuple[int, str]]:
        """``(id, path)`` of the captures of ``site`` stored with their links not yet followed,
        captured before ``captured_before``, with ids above ``after``, in id order."""
        async with self._reader.execute(
            "SELECT id, path FROM paths WHERE site = ? AND links_due = 1 AND id > ? "
            "AND captured_at < ? ORDER BY id LIMIT ?",
            (site, after, captured_before, limit),
        ) as c:
            return [(row[0], row[1]) for row in await c.fetchall()]

    async def links_followed(self, site: str, path: str) -> None:
        async with self._lock:
            await self._writer.execute(
                "UPDATE paths SET links_due = 0 WHERE site = ? AND path = ? AND links_due = 1",
                (site, path),
            )

    async def requeue_expired(
        self, site: str, *, limit: int = 1000, states: Sequence[str] | None = None
    ) -> int:
        states = expiring(states)
        if not states:
            return 0
        now = self.clock()
        marks = ",".join("?" * len(states))
        async with self._lock:
            cur = await self._writer.execute(
                "UPDATE paths SET state = 'pending', priority = 0, queued_at = ? "
                "WHERE id IN (SELECT id FROM paths WHERE site = ? "
                f"AND state IN ({marks}) AND expires_at <= ? LIMIT ?)",
                (now, site, *states, now, limit),
            )
            return cur.rowcount

    async def delete_path(self, site: str, path: str) -> bool:
        async with self._lock:
            cur = await self._writer.execute(
                "DELETE FROM paths WHERE site = ? AND path = ?", (site, path)
            )
            return cur.rowcount > 0
