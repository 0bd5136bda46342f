"""What the stores keep of the kinds of pages that read their device
(:mod:`snapshotd.capture.profiles`): how many of a kind's pages rendered alike in every
profile, and whether one differed. Kept in the store so that every process of every
``serve`` and ``worker`` sharing it, and the next start, learn from one another. Mixins of
both engines.

Invariants:
- one row per (site, kind): ``kind`` is the kind's key (a hash of what identifies it within
  the site), so a row's size does not depend on what a page named;
- a check only adds to its row (one more page alike, or ``differs`` set for good), unless
  the row is stale (below);
- a row not told anything for :data:`KINDS_KEPT_FOR` is as good as none (the kind is learnt
  again, the row starting over from its next check); such rows of the site are deleted
  whenever one of its rows is told something, and all of them with the site. A check is a
  captured page, so a site has at most a row per page captured in that time;
- a tell waits for a lock only on its own row, before it holds any other (its upsert comes
  first; the stale rows it deletes then are only those no other transaction holds), so
  concurrent tells cannot deadlock.
"""

from __future__ import annotations

from typing import Any

from snapshotd.store.counters import sqlite_transaction
from snapshotd.store.pg_retry import transaction_retried

__all__ = ["DEVICE_KINDS", "KINDS_KEPT_FOR", "PostgresDeviceKinds", "SQLiteDeviceKinds"]

KINDS_KEPT_FOR = 7 * 86400.0  # seconds a kind's learning lasts without a check

# A schema step of both engines.
DEVICE_KINDS = """
    CREATE TABLE device_kinds (
        site     TEXT             NOT NULL,
        kind     TEXT             NOT NULL,
        alike    INTEGER          NOT NULL,
        differs  INTEGER          NOT NULL,
        told_at  DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (site, kind)
    );
    CREATE INDEX device_kinds_told ON device_kinds (site, told_at);
"""
_READ = (
    "SELECT alike, differs FROM device_kinds WHERE site = {0}1 AND kind = {0}2 "
    "AND told_at >= {0}3"
)
# A stale row starts over from this check.
_TELL = (
    "INSERT INTO device_kinds (site, kind, alike, differs, told_at) "
    "VALUES ({0}1, {0}2, {0}3, {0}4, {0}5) ON CONFLICT (site, kind) DO UPDATE SET "
    "alike = CASE WHEN device_kinds.told_at < {0}6 THEN excluded.alike "
    "ELSE device_kinds.alike + excluded.alike END, "
    "differs = CASE WHEN device_kinds.told_at < {0}6 THEN excluded.differs "
    "ELSE MAX_OF(device_kinds.differs, excluded.differs) END, "
    "told_at = excluded.told_at"
)
# Rows another transaction holds are left to the next tell (so this waits on no lock).
_FORGET = (
    "DELETE FROM device_kinds WHERE site = {0}1 AND kind IN (SELECT kind FROM device_kinds "
    "WHERE site = {0}1 AND told_at < {0}2 SKIP_LOCKED)"
)


def _told(row: Any) -> tuple[int, bool]:
    return int(row[0]), bool(row[1])


class SQLiteDeviceKinds:
    """The device kinds of :class:`~snapshotd.store.sqlite.SQLiteStore`."""

    _reader: Any
    clock: Any

    async def device_kind(self, site: str, kind: str) -> tuple[int, bool]:
        """(pages of the kind that rendered alike, whether one differed); (0, False) for a
        kind nothing is known of."""
        since = self.clock() - KINDS_KEPT_FOR
        async with self._reader.execute(_READ.format("?"), (site, kind, since)) as cursor:
            row = await cursor.fetchone()
        return _told(row) if row else (0, False)

    async def tell_device_kind(self, site: str, kind: str, *, differs: bool) -> None:
        """Add one check's result to the kind."""
        now = self.clock()
        since = now - KINDS_KEPT_FOR
        sql = _TELL.format("?").replace("MAX_OF", "MAX")
        async with sqlite_transaction(self) as wr:
            await wr.execute(sql, (site, kind, int(not differs), int(differs), now, since))
            await wr.execute(_FORGET.format("?").replace("SKIP_LOCKED", ""), (site, since))


class PostgresDeviceKinds:
    """The device kinds of :class:`~snapshotd.store.postgres.PostgresStore`."""

    _db: Any
    clock: Any

    async def device_kind(self, site: str, kind: str) -> tuple[int, bool]:
        since = self.clock() - KINDS_KEPT_FOR
        row = await self._db.fetchrow(_READ.format("$"), site, kind, since)
        return _told(row) if row else (0, False)

    async def tell_device_kind(self, site: str, kind: str, *, differs: bool) -> None:
        now = self.clock()
        since = now - KINDS_KEPT_FOR
        sql = _TELL.format("$").replace("MAX_OF", "GREATEST")

        async def tell(conn: Any) -> None:
            await conn.execute(sql, site, kind, int(not differs), int(differs), now, since)
            await conn.execute(
                _FORGET.format("$").replace("SKIP_LOCKED", "FOR UPDATE SKIP LOCKED"), site, since
            )

        await transaction_retried(self._db, tell)
