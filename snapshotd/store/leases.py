"""Leases: a pending path claimed by one worker for a while, and given back. Mixins of both
engines.

Invariants:
- a claim is one atomic step: the path of highest priority (then the longest queued) of the
  sites asked for goes from ``pending`` to ``processing`` with the claimer's lease and one
  more attempt, and no two claims take the same path;
- only the lease's owner gives a path back before its deadline (:meth:`release`); a lease
  past its deadline (a dead worker's) goes back to pending at its priority; a claim given
  back is not counted as an attempt.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from snapshotd.store.counters import row_count
from snapshotd.store.interface import PATH_COLUMNS, PathRecord, path_record
from snapshotd.store.pg_retry import transaction_retried

__all__ = ["PostgresLeases", "SQLiteLeases"]

# ---------------------------------------------------------------------------- SQLite

_SQLITE_CLAIM_WINDOW = 256
_SQLITE_NEXT_PENDING = (
    "SELECT id FROM paths WHERE state = 'pending' ORDER BY priority DESC, queued_at, id LIMIT 1"
)
_SQLITE_NEXT_PENDING_OF = (
    "SELECT id FROM (SELECT id, site, priority, queued_at FROM paths WHERE state = 'pending' "
    f"ORDER BY priority DESC, queued_at, id LIMIT {_SQLITE_CLAIM_WINDOW}) "
    "WHERE site IN ({}) ORDER BY priority DESC, queued_at, id LIMIT 1"
)
_SQLITE_PENDING_WINDOW = (
    "SELECT COUNT(*) FROM (SELECT 1 FROM paths WHERE state = 'pending' "
    f"LIMIT {_SQLITE_CLAIM_WINDOW})"
)
# The UNIQUE (site, path) index: every row of the asked sites, whatever the queue holds.
_SQLITE_NEXT_PENDING_BY_SITE = (
    "SELECT id FROM paths INDEXED BY sqlite_autoindex_paths_1 WHERE site IN ({}) "
    "AND state = 'pending' ORDER BY priority DESC, queued_at, id LIMIT 1"
)


class SQLiteLeases:
    """Claims and leases of :class:`~snapshotd.store.sqlite.SQLiteStore`."""

    _lock: Any
    _writer: Any
    _reader: Any
    clock: Any

    async def claim(
        self, owner: str, lease_seconds: float, *, sites: Sequence[str] | None = None
    ) -> PathRecord | None:
        now = self.clock()
        update = (
            "UPDATE paths SET state = 'processing', lease_owner = ?, lease_until = ?, "
            "attempts = attempts + 1 WHERE id = ({}) "
            f"RETURNING {PATH_COLUMNS}"
        )
        if sites is None:
            async with self._lock:
                async with self._writer.execute(
                    update.format(_SQLITE_NEXT_PENDING), (owner, now + lease_seconds)
                ) as c:
                    row = await c.fetchone()
            return path_record(row) if row else None
        if not sites:
            return None
        marks = ",".join("?" * len(sites))
        params = (owner, now + lease_seconds, *sites)
        async with self._lock:
            wr = self._writer
            # Usually the next pending paths overall belong to the sites asked for: look
            # among the first few in queue order (the pending index), a constant cost.
            first = update.format(_SQLITE_NEXT_PENDING_OF.format(marks))
            async with wr.execute(first, params) as c:
                row = await c.fetchone()
            if row is None:
                async with wr.execute(_SQLITE_PENDING_WINDOW) as c:
                    window_row = await c.fetchone()
                window = window_row[0] if window_row else 0
                if window >= _SQLITE_CLAIM_WINDOW:
                    # Other sites fill the head of the queue (one waiting on crawl_delay):
                    # walk the asked sites' own rows instead of the whole queue.
                    async with wr.execute(
                        update.format(_SQLITE_NEXT_PENDING_BY_SITE.format(marks)), params
                    ) as c:
                        row = await c.fetchone()
        return path_record(row) if row else None

    async def claim_path(
        self, site: str, path: str, owner: str, lease_seconds: float
    ) -> PathRecord | None:
        now = self.clock()
        async with self._lock:
            async with self._writer.execute(
                "UPDATE paths SET state = 'processing', lease_owner = ?, lease_until = ?, "
                "attempts = attempts + 1 WHERE site = ? AND path = ? AND state = 'pending' "
                f"RETURNING {PATH_COLUMNS}",
                (owner, now + lease_seconds, site, path),
            ) as c:
                row = await c.fetchone()
        return path_record(row) if row else None

    async def release_expired_leases(self) -> int:
        """Leases past their deadline (a dead worker's) go back to pending, same priority."""
        async with self._lock:
            cur = await self._writer.execute(
                "UPDATE paths SET state = 'pending', lease_owner = NULL, lease_until = NULL "
                "WHERE state = 'processing' AND lease_until < ?",
                (self.clock(),),
            )
            return cur.rowcount

    async def lease_owners(self) -> list[str]:
        """The owners of the leases held now."""
        async with self._reader.execute(
            "SELECT DISTINCT lease_owner FROM paths WHERE state = 'processing'"
        ) as c:
            return [row[0] for row in await c.fetchall() if row[0]]

    async def release_leases(self, owner: str) -> int:
        """Every path leased by ``owner`` goes back to pending (a worker that stopped or died),
        its claim not counted as an attempt."""
        async with self._lock:
            cur = await self._writer.execute(
                "UPDATE paths SET state = 'pending', lease_owner = NULL, lease_until = NULL, "
                "attempts = MAX(attempts - 1, 0) WHERE state = 'processing' AND lease_owner = ?",
                (owner,),
            )
            return cur.rowcount

    async def release(self, site: str, path: str, owner: str) -> bool:
        """A claimed path goes back to pending (its capture was cut short), its claim not
        counted as an attempt. False if ``owner`` does not hold its lease."""
        async with self._lock:
            cur = await self._writer.execute(
                "UPDATE paths SET state = 'pending', lease_owner = NULL, lease_until = NULL, "
                "attempts = MAX(attempts - 1, 0) "
                "WHERE site = ? AND path = ? AND state = 'processing' AND lease_owner = ?",
                (site, path, owner),
            )
            return cur.rowcount > 0


# ---------------------------------------------------------------------------- PostgreSQL

_PG_NEXT_PENDING = (
    "SELECT id FROM paths WHERE state = 'pending' "
    "ORDER BY priority DESC, queued_at, id LIMIT 1 FOR UPDATE SKIP LOCKED"
)
# Each asked site's own head (its index: a constant cost per site), then the best of those.
_PG_HEADS_OF = (
    "SELECT head.id FROM unnest($3::text[]) AS asked (site) CROSS JOIN LATERAL ("
    "SELECT id, priority, queued_at FROM paths WHERE state = 'pending' AND site = asked.site "
    "ORDER BY priority DESC, queued_at, id LIMIT 1 FOR UPDATE SKIP LOCKED) AS head "
    "ORDER BY head.priority DESC, head.queued_at, head.id LIMIT 1"
)
# Locking only the row taken (a lock is a write): the first 8 of each site's queue read
# unlocked, then the best one no other claim holds; else ``_PG_HEADS_OF``.
CLAIM_CANDIDATES = 8
_PG_NEXT_PENDING_OF = (
    "SELECT id FROM paths WHERE id = ANY(ARRAY("
    "SELECT head.id FROM unnest($3::text[]) AS asked (site) CROSS JOIN LATERAL ("
    "SELECT id, priority, queued_at FROM paths WHERE state = 'pending' AND site = asked.site "
    f"ORDER BY priority DESC, queued_at, id LIMIT {CLAIM_CANDIDATES}) AS head "
    f"ORDER BY head.priority DESC, head.queued_at, head.id LIMIT {CLAIM_CANDIDATES})) "
    "AND state = 'pending' ORDER BY priority DESC, queued_at, id LIMIT 1 FOR UPDATE SKIP LOCKED"
)


class PostgresLeases:
    """Claims and leases of :class:`~snapshotd.store.postgres.PostgresStore`."""

    _db: Any
    clock: Any

    async def claim(
        self, owner: str, lease_seconds: float, *, sites: Sequence[str] | None = None
    ) -> PathRecord | None:
        if sites is not None and not sites:
            return None
        now = self.clock()
        params: list[Any] = [owner, now + lease_seconds]
        queries = [_PG_NEXT_PENDING]
        if sites is not None:
            params.append(list(dict.fromkeys(sites)))
            queries = [_PG_NEXT_PENDING_OF, _PG_HEADS_OF]
        for query in queries:
            if row := await self._db.fetchrow(
                "UPDATE paths SET state = 'processing', lease_owner = $1, lease_until = $2, "
                f"attempts = attempts + 1 WHERE id = ({query}) RETURNING {PATH_COLUMNS}",
                *params,
            ):
                return path_record(row)
        return None

    async def claim_path(
        self, site: str, path: str, owner: str, lease_seconds: float
    ) -> PathRecord | None:
        row = await self._db.fetchrow(
            "UPDATE paths SET state = 'processing', lease_owner = $1, lease_until = $2, "
            "attempts = attempts + 1 WHERE site = $3 AND path = $4 AND state = 'pending' "
            f"RETURNING {PATH_COLUMNS}",
            owner,
            self.clock() + lease_seconds,
            site,
            path,
        )
        return path_record(row) if row else None

    async def release_expired_leases(self) -> int:
        """Leases past their deadline (a dead worker's) go back to pending, same priority.
        A sweep: rows another transaction holds are left to the next one, so it waits on no
        lock and never deadlocks with the statements that change many paths at once."""
        return row_count(
            await self._db.execute(
                "UPDATE paths SET state = 'pending', lease_owner = NULL, lease_until = NULL "
                "WHERE id IN (SELECT id FROM paths WHERE state = 'processing' "
                "AND lease_until < $1 FOR UPDATE SKIP LOCKED)",
                self.clock(),
            )
        )

    async def lease_owners(self) -> list[str]:
        """The owners of the leases held now."""
        rows = await self._db.fetch(
            "SELECT DISTINCT lease_owner FROM paths WHERE state = 'processing'"
        )
        return [row[0] for row in rows if row[0]]

    async def release_leases(self, owner: str) -> int:
        """Every path leased by ``owner`` goes back to pending (a worker that stopped or died),
        its claim not counted as an attempt. Its paths may be of any site, taken in the order
        read, so a deadlock with a site's clearing or a batch is done again."""
        return row_count(await transaction_retried(self._db, lambda conn: conn.execute(
            "UPDATE paths SET state = 'pending', lease_owner = NULL, lease_until = NULL, "
            "attempts = GREATEST(attempts - 1, 0) "
            "WHERE state = 'processing' AND lease_owner = $1",
            owner,
        )))

    async def release(self, site: str, path: str, owner: str) -> bool:
        """A claimed path goes back to pending (its capture was cut short), its claim not
        counted as an attempt. False if ``owner`` does not hold its lease."""
        result = await self._db.execute(
            "UPDATE paths SET state = 'pending', lease_owner = NULL, lease_until = NULL, "
            "attempts = GREATEST(attempts - 1, 0) "
            "WHERE site = $1 AND path = $2 AND state = 'processing' AND lease_owner = $3",
            site,
            path,
            owner,
        )
        return row_count(result) > 0
