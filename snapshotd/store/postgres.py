"""The PostgreSQL store: the same paths and snapshots as SQLite, shared by many hosts.

Chosen by a ``db`` setting starting with ``postgresql://`` (or ``postgres://``); the rest of
the URL is asyncpg's (user, password, host, port, database, and query parameters, which
become session settings: ``?search_path=snapshotd`` keeps the tables in their own schema).

Invariants, beyond those of ``snapshotd.store.interface``:
- every statement that changes a path is one statement, or one transaction that locks the
  row first, so processes on several hosts may share the database;
- a claim takes the next pending row with ``FOR UPDATE SKIP LOCKED``: two workers claiming
  at once get two different paths, and neither waits for the other;
- the schema is created and upgraded under an advisory lock, so processes starting together
  upgrade it once.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

import asyncpg

from snapshotd.store.copies import PostgresCopies
from snapshotd.store.counters import PostgresCounters, row_count
from snapshotd.store.device_kinds import PostgresDeviceKinds
from snapshotd.store.found_urls import PostgresFoundUrls
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
from snapshotd.store.lastmod import PostgresLastmod
from snapshotd.store.leases import PostgresLeases
from snapshotd.store.outcome import (
    CaptureOutcome,
    capture_writes,
    mark_path_failed,
    mark_path_stored,
)
from snapshotd.store.owed_profiles import PostgresOwed
from snapshotd.store.path_counts import (
    COUNTS,
    FOLD,
    FOLD_AFTER,
    PROCESSED,
    QUEUE_DEPTH,
    SITE_COUNTS,
    SITE_SIZE,
)
from snapshotd.store.pg_retry import transaction_retried
from snapshotd.store.prints_and_params import PostgresParams
from snapshotd.store.profile_snapshots import SNAPSHOT_OF_PROFILE, PostgresProfiles
from snapshotd.store.queueing import check_priority, queueing
from snapshotd.store.schema import migrations, versions_after
from snapshotd.store.site_rows import PostgresSites
from snapshotd.store.soft_404_rows import PostgresNotFound

__all__ = ["CONNECT_ERRORS", "PostgresStore"]

# Any number, the same in every snapshotd: the lock taken while the schema is upgraded.
_MIGRATION_LOCK = 0x5A5053484F54  # "SNAPSHOT"-ish

# Its versions, in order (store/schema).
MIGRATIONS = migrations("postgres")

_RETRIES = 5
# What opening a connection can raise for a bad URL, an unreachable server or a refusal.
CONNECT_ERRORS = (OSError, TimeoutError, ValueError, asyncpg.PostgresError, asyncpg.InterfaceError)



class PostgresStore(
    PostgresCounters, PostgresSites, PostgresParams, PostgresCopies, PostgresLeases,
    PostgresProfiles, PostgresLastmod, PostgresFoundUrls, PostgresNotFound, PostgresDeviceKinds,
    PostgresOwed,
):
    """``Store`` on a PostgreSQL database. ``clock`` is injectable so tests can move time."""

    def __init__(
        self,
        dsn: str,
        *,
        clock: Callable[[], float] = time.time,
        pool_size: int = 10,
    ) -> None:
        self.dsn = dsn
        self.clock = clock
        self.pool_size = pool_size
        self._pool: asyncpg.Pool | None = None
        self._folded = 0  # rows of path_counts left by this store's last fold

    # ------------------------------------------------------------------ lifecycle

    @property
    def where(self) -> str:
        """The database's address for messages: no user name or password."""
        try:
            parts = urlsplit(self.dsn)
        except ValueError:
            return "postgresql://(malformed URL)"
        return f"postgresql://{parts.netloc.rpartition('@')[2]}{parts.path or '/'}"

    def failure(self, exc: BaseException) -> StoreError:
        """The one-line error for an exception of ``CONNECT_ERRORS``."""
        return StoreError(f"{self.where}: {str(exc) or type(exc).__name__}")

    async def open(self) -> None:
        try:
            self._pool = await asyncpg.create_pool(
                # No connection kept open for its own sake: during an outage asyncpg would
                # log a traceback for each attempt to restore it.
                self.dsn, min_size=0, max_size=self.pool_size, command_timeout=60, timeout=10
            )
            await self._migrate()  # the first connection: where a bad URL or server shows
        except BaseException as exc:
            if self._pool is not None:
                await self._pool.close()
                self._pool = None
            if isinstance(exc, CONNECT_ERRORS):
                raise self.failure(exc) from None
            raise

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    async def __aenter__(self) -> PostgresStore:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def _db(self) -> asyncpg.Pool:
        if self._pool is None:
            raise RuntimeError("store is not open")
        return self._pool

    async def _migrate(self) -> None:
        async with self._db.acquire() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", _MIGRATION_LOCK)
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations "
                "(version INTEGER PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)"
            )
            current = await conn.fetchval(
                "SELECT COALESCE(MAX(version), 0) FROM schema_migrations"
            )
            try:
                lacking = versions_after(MIGRATIONS, current)
            except StoreError as exc:
                raise StoreError(f"{self.where}: {exc}") from None
            for version, script in lacking:
                await conn.execute(script)
                await conn.execute(
                    "INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)",
                    version,
                    self.clock(),
                )

    async def schema_version(self) -> int:
        return int(await self._db.fetchval("SELECT MAX(version) FROM schema_migrations") or 0)

    async def ping(self) -> bool:
        try:
            return await self._db.fetchval("SELECT 1") == 1
        except Exception:
            return False

    # ------------------------------------------------------------------ reads

    async def get_path(self, site: str, path: str) -> PathRecord | None:
        row = await self._db.fetchrow(
            f"SELECT {PATH_COLUMNS} FROM paths WHERE site = $1 AND path = $2", site, path
        )
        return path_record(row) if row else None

    async def get_snapshot(
        self, site: str, path: str, profile: str | None = None
    ) -> Snapshot | None:
        if profile is None:
            row = await self._db.fetchrow(SNAPSHOT_OF.format("$"), site, path)
        else:
            row = await self._db.fetchrow(
                SNAPSHOT_OF_PROFILE.format("$"), site, path, profile
            )
        return None if row is None else snapshot_from_row(site, path, row, profile)

    async def counts(self, site: str | None = None) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        query, args = (COUNTS, ()) if site is None else (SITE_COUNTS.format("$"), (site,))
        for site, state, n, _ in await self._counted(query, *args):
            out.setdefault(site, {})[state] = n
        return out

    async def queue_depth(self) -> dict[int, int]:
        out = {p: 0 for p in range(4)}
        for prio, n, _ in await self._counted(QUEUE_DEPTH):
            out[prio] = n
        return out

    async def site_size(self, site: str) -> int:
        ((n, _),) = await self._counted(SITE_SIZE.format("$"), site)
        return int(n)

    async def processed(self, site: str) -> int:
        ((n, _),) = await self._counted(PROCESSED.format("$"), site)
        return int(n)

    async def _counted(self, query: str, *args: Any) -> list[asyncpg.Record]:
        """The rows of a read of ``path_counts``, whose last column is how many rows it
        summed; past :data:`FOLD_AFTER` more than the last fold left (one per key: many
        sites have many), the table is folded."""
        rows = await self._db.fetch(query, *args)
        if sum(row[-1] for row in rows) > self._folded + FOLD_AFTER:
            done = await self._db.execute(FOLD)  # "INSERT 0 <rows>"
            self._folded = int(done.rsplit(" ", 1)[-1])
        return rows

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
        where: list[str] = ["site = $1"] + ["not_found IS NOT NULL"] * not_found
        params: list[Any] = [site]
        if state:
            params.append(state)
            where.append(f"state = ${len(params)}")
        if prefix:
            params.append(prefix)
            where.append(f"starts_with(path, ${len(params)})")
        if cursor is not None and not crawl_order:
            params.append(cursor)
            where.append(f"id < ${len(params)}")
        skip = int(cursor or 0) if crawl_order else 0
        params.append(limit + 1)
        rows = [
            path_record(r)
            for r in await self._db.fetch(
                f"SELECT {PATH_COLUMNS} FROM paths WHERE {' AND '.join(where)} ORDER BY "
                f"{_CRAWL_ORDER if crawl_order else 'id DESC'} LIMIT ${len(params)} OFFSET {skip}",
                *params,
            )
        ]
        more = len(rows) > limit
        return rows[:limit], (skip + limit if crawl_order else rows[limit - 1].id) if more else None

    async def iter_paths(self, site: str | None = None) -> AsyncIterator[PathRecord]:
        last = 0
        while True:
            if site is None:
                rows = await self._db.fetch(
                    f"SELECT {PATH_COLUMNS} FROM paths WHERE id > $1 ORDER BY id LIMIT 1000",
                    last,
                )
            else:
                rows = await self._db.fetch(
                    f"SELECT {PATH_COLUMNS} FROM paths WHERE id > $1 AND site = $2 "
                    "ORDER BY id LIMIT 1000",
                    last,
                    site,
                )
            if not rows:
                return
            for row in rows:
                yield path_record(row)
            last = rows[-1]["id"]

    async def get_meta(self, key: str) -> str | None:
        value = await self._db.fetchval("SELECT value FROM meta WHERE key = $1", key)
        return str(value) if value is not None else None

    async def links_due(
        self, site: str, *, after: int = 0, captured_before: float, limit: int = 100
    ) -> list[tuple[int, str]]:
        """``(id, path)`` of the captures of ``site`` stored with their links not yet followed,
        captured before ``captured_before``, with ids above ``after``, in id order."""
        rows = await self._db.fetch(
            "SELECT id, path FROM paths WHERE site = $1 AND links_due AND id > $2 "
            "AND captured_at < $3 ORDER BY id LIMIT $4",
            site,
            after,
            captured_before,
            limit,
        )
        return [(row["id"], row["path"]) for row in rows]

    # ------------------------------------------------------------------ writes

    async def set_meta(self, key: str, value: str) -> None:
        await self._db.execute(
            "INSERT INTO meta (key, value) VALUES ($1, $2) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            key,
            value,
        )

    async def replace_meta(self, key: str, old: str | None, new: str) -> bool:
        if old is None:
            done = await self._db.execute(
                "INSERT INTO meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING",
                key,
                new,
            )
        else:
            done = await self._db.execute(
                "UPDATE meta SET value = $1 WHERE key = $2 AND value = $3", new, key, old
            )
        return done.endswith(" 1")  # "INSERT 0 1", "UPDATE 1"

    async def _enqueue_one(
        self,
        conn: asyncpg.Connection,
        new_id: int | None,
        site: str,
        path: str,
        priority: int,
        hops: int,
        force: bool,
        now: float,
        found: bool,
    ) -> str:
        """One path of a batch. Rows are not locked to be read: each change is a conditional
        UPDATE on the state that was read, tried again if another process changed it first,
        so a batch never holds a lock on a row it leaves alone."""
        for _attempt in range(_RETRIES):
            inserted = await conn.fetchval(
                # A batch gives ids reserved in its own order; one path takes the next.
                "INSERT INTO paths (id, site, path, state, priority, hops, created_at, "
                "queued_at, found) OVERRIDING SYSTEM VALUE VALUES (COALESCE($1, "
                "nextval(pg_get_serial_sequence('paths', 'id'))), $2, $3, 'pending', $4, $5, "
                "$6, $6, $7) ON CONFLICT (site, path) DO NOTHING RETURNING id",
                new_id, site, path, priority, hops, now, int(found),
            )
            if inserted is not None:
                return "queued"
            row = await conn.fetchrow(
                "SELECT id, state, priority, expires_at, hops, found FROM paths "
                "WHERE site = $1 AND path = $2",
                site,
                path,
            )
            if row is None:  # deleted in between
                continue
            pid, state, old_priority, expires_at, old_hops, was_found = row
            if found and not was_found:
                await conn.execute("UPDATE paths SET found = 1 WHERE id = $1", pid)
            decided = queueing(
                state, old_priority, old_hops, expires_at,
                priority=priority, hops=hops, force=force, now=now,
            )
            if decided.change is None:
                return decided.answer
            if decided.change == "raise":
                changed = await conn.execute(
                    "UPDATE paths SET priority = GREATEST(priority, $1), "
                    "hops = LEAST(hops, $2) WHERE id = $3 AND state = 'pending'",
                    priority, decided.hops, pid,
                )
            else:
                changed = await conn.execute(
                    "UPDATE paths SET state = 'pending', priority = $1, hops = $2, "
                    "queued_at = $3, lease_owner = NULL, lease_until = NULL "
                    "WHERE id = $4 AND state = $5 AND expires_at IS NOT DISTINCT FROM $6",
                    priority, decided.hops, now, pid, state, expires_at,
                )
            if row_count(changed):
                return decided.answer
        raise asyncpg.SerializationError(f"{path}: changed by others on every try")

    async def enqueue(
        self, site: str, path: str, priority: int, *, hops: int = 0, force: bool = False,
        found: bool = True,
    ) -> str:
        """One path (the crawler's every link): no transaction, no id reserved, usually one
        round trip. Each statement stands alone, as a batch's do."""
        check_priority(priority)
        async with self._db.acquire() as conn:
            return await self._enqueue_one(
                conn, None, site, path, priority, hops, force, self.clock(), found
            )

    async def enqueue_many(
        self, site: str, paths: Sequence[tuple[str, int]], priority: int, *, force: bool = False,
        found: bool = True,
    ) -> list[str]:
        check_priority(priority)
        now = self.clock()
        # Rows are locked in path order, the same in every process (and in a site's
        # clearing), so two batches sharing paths wait for each other instead of
        # deadlocking; a deadlock with some other statement is done again.
        order = sorted(range(len(paths)), key=lambda i: paths[i][0])

        async def batch(conn: asyncpg.Connection) -> list[str]:
            out: list[str] = [""] * len(paths)
            # Ids in the batch's own order: claims break ties by id, insertion order.
            ids = [
                row[0]
                for row in await conn.fetch(
                    "SELECT nextval(pg_get_serial_sequence('paths', 'id')) "
                    "FROM generate_series(1, $1) ORDER BY 1",
                    len(paths),
                )
            ]
            for i in order:
                path, hops = paths[i]
                out[i] = await self._enqueue_one(
                    conn, ids[i], site, path, priority, hops, force, now, found
                )
            return out

        return await transaction_retried(self._db, batch)

    async def add_ignored(self, site: str, path: str, *, hops: int = 0, reason: str = "") -> bool:
        now = self.clock()
        status = await self._db.execute(
            "INSERT INTO paths (site, path, state, priority, hops, created_at, queued_at, "
            "error) VALUES ($1, $2, 'ignored', 0, $3, $4, $4, $5) "
            "ON CONFLICT (site, path) DO NOTHING",
            site, path, hops, now, reason or None,
        )
        return row_count(status) > 0

    async def complete(self, site: str, path: str, owner: str, outcome: CaptureOutcome) -> bool:
        now = self.clock()
        sql, args = mark_path_stored(site, path, owner, outcome, now, "$")

        async def store(conn: asyncpg.Connection) -> bool:
            pid = await conn.fetchval(sql, *args)
            if pid is None:
                return False
            for write, values in capture_writes(site, path, pid, outcome, now, "$"):
                await conn.execute(write, *values)
            return True

        # A capture that takes over a master's snapshot locks its own path, then the master
        # and its copies: against path order, so a deadlock is done again.
        return await transaction_retried(self._db, store)

    async def fail(
        self, site: str, path: str, owner: str, *, error: str, retry_at: float,
        status: int | None = None,
    ) -> bool:
        """Mark a claimed path ``error`` until ``retry_at``; its old snapshot stays."""
        sql, args = mark_path_failed(
            site, path, owner, error=error, retry_at=retry_at, status=status, mark="$"
        )
        return row_count(await self._db.execute(sql, *args)) > 0

    async def links_followed(self, site: str, path: str) -> None:
        await self._db.execute(
            "UPDATE paths SET links_due = FALSE WHERE site = $1 AND path = $2 AND links_due",
            site,
            path,
        )

    async def requeue_expired(
        self, site: str, *, limit: int = 1000, states: Sequence[str] | None = None
    ) -> int:
        states = expiring(states)
        if not states:
            return 0
        now = self.clock()
        return row_count(
            await self._db.execute(
                "UPDATE paths SET state = 'pending', priority = 0, queued_at = $1 "
                "WHERE id IN (SELECT id FROM paths WHERE site = $2 "
                "AND state = ANY($3::text[]) AND expires_at <= $1 LIMIT $4 "
                "FOR UPDATE SKIP LOCKED)",
                now, site, states, limit,
            )
        )

    async def delete_path(self, site: str, path: str) -> bool:
        status = await self._db.execute(
            "DELETE FROM paths WHERE site = $1 AND path = $2", site, path
        )
        return row_count(status) > 0
