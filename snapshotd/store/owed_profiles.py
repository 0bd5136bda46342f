"""The device profiles a path's own snapshot owes (``snapshots.owed``), and how one is
settled: shared by both engines. What is owed and why: :mod:`snapshotd.store.profile_snapshots`
and :mod:`snapshotd.capture.profiles`.

Invariants:

- a profile is owed by the capture that stored the own snapshot (``Store.complete``) and by
  nothing else; it is settled at most once for that capture: its capture stored as a row
  when it differs, and the profile taken off what is owed, in one transaction, only while
  the own snapshot is that capture (its capture time) and still owes it. On PostgreSQL the
  path's row is locked first, as storing a capture locks it, so the two never interleave.
"""

from __future__ import annotations

from typing import Any

from snapshotd.store.counters import sqlite_transaction
from snapshotd.store.outcome import Variant, variant_write
from snapshotd.store.pg_retry import transaction_retried

__all__ = ["OWED_COLUMN", "PostgresOwed", "SQLiteOwed"]

# Schema step: the profiles a path's own snapshot owes, space-separated (none for every
# snapshot before it).
OWED_COLUMN = "ALTER TABLE snapshots ADD COLUMN owed TEXT NOT NULL DEFAULT ''"

# Site, path, profile, the own snapshot's capture time: the profile off what the path's own
# snapshot owes, while it is that capture and owes it; its path id returned.
_SETTLE = (
    "UPDATE snapshots SET owed = TRIM(REPLACE(' ' || owed || ' ', ' ' || CAST({0}3 AS TEXT) "
    "|| ' ', ' ')) WHERE path_id = (SELECT id FROM paths WHERE site = {0}1 AND path = {0}2) "
    "AND captured_at = {0}4 AND ' ' || owed || ' ' LIKE '% ' || CAST({0}3 AS TEXT) || ' %' "
    "RETURNING path_id"
)


# Site, path: the path's row locked to the end of the transaction (PostgreSQL).
_PATH_LOCK = "SELECT 1 FROM paths WHERE site = $1 AND path = $2 FOR UPDATE"


class SQLiteOwed:
    """The owed profiles of :class:`~snapshotd.store.sqlite.SQLiteStore`'s snapshots."""

    _lock: Any
    _writer: Any
    clock: Any

    async def settle_owed(
        self, site: str, path: str, profile: str, captured_at: float, variant: Variant | None
    ) -> bool:
        """As ``Store.settle_owed``."""
        async with sqlite_transaction(self) as wr:
            async with wr.execute(_SETTLE.format("?"), (site, path, profile, captured_at)) as c:
                row = await c.fetchone()
            if row is None:
                return False
            if variant is not None:
                await wr.execute(*variant_write(row[0], variant, self.clock(), "?"))
        return True


class PostgresOwed:
    """The owed profiles of :class:`~snapshotd.store.postgres.PostgresStore`'s snapshots."""

    _db: Any
    clock: Any

    async def settle_owed(
        self, site: str, path: str, profile: str, captured_at: float, variant: Variant | None
    ) -> bool:
        """As ``Store.settle_owed``."""

        async def settle(conn: Any) -> bool:
            # The path's row first, as a capture being stored takes it (store/outcome): one
            # waits for the other, so a capture never keeps a row settled against the last.
            await conn.execute(_PATH_LOCK, site, path)
            pid = await conn.fetchval(_SETTLE.format("$"), site, path, profile, captured_at)
            if pid is None:
                return False
            if variant is not None:
                sql, args = variant_write(pid, variant, self.clock(), "$")
                await conn.execute(sql, *args)
            return True

        return await transaction_retried(self._db, settle)
