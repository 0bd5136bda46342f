"""What the stores keep for a site's own sitemap (SPEC 5.4): when each snapshot's main text
last changed, and the pages a sitemap lists. Mixins of both engines.

Invariants:
- ``text_changed_at`` is the capture time of the snapshot that first showed its main text
  (``text_hash``); a recapture showing the same text keeps it (:data:`TEXT_CHANGED_AT`, applied
  by the one statement that stores a snapshot); a capture without a text hash counts as a change;
- a sitemap lists a site's paths that have a snapshot answered 200 and are no copy of another
  path (a duplicate, or a page whose canonical is another), in the order they were first
  added (path id), so a part of 50,000 keeps its pages from one read to the next.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "PostgresLastmod",
    "SQLiteLastmod",
    "TEXT_CHANGED",
    "TEXT_CHANGED_AT",
]

# A schema step of both engines; a snapshot stored before it takes its capture time.
TEXT_CHANGED = """
    ALTER TABLE snapshots ADD COLUMN text_changed_at DOUBLE PRECISION;
    UPDATE snapshots SET text_changed_at = captured_at;
"""
# The value ``text_changed_at`` takes when a snapshot row is replaced (an ON CONFLICT's SET).
TEXT_CHANGED_AT = (
    "text_changed_at = CASE WHEN snapshots.text_hash = excluded.text_hash "
    "AND snapshots.text_changed_at IS NOT NULL "
    "THEN snapshots.text_changed_at ELSE excluded.captured_at END"
)
_LISTED = (
    "FROM paths p JOIN snapshots s ON s.path_id = p.id "
    "WHERE p.site = {0}1 AND s.status = 200 AND p.duplicate_of IS NULL"
)
_PAGE = "SELECT p.path, s.text_changed_at " + _LISTED + " ORDER BY p.id LIMIT {0}2 OFFSET {0}3"
_COUNT = "SELECT COUNT(*) " + _LISTED


class SQLiteLastmod:
    """The sitemap's reads of :class:`~snapshotd.store.sqlite.SQLiteStore`."""

    _reader: Any

    async def sitemap_count(self, site: str) -> int:
        """How many pages the site's sitemap lists."""
        async with self._reader.execute(_COUNT.format("?"), (site,)) as cursor:
            row = await cursor.fetchone()
        return int(row[0])

    async def sitemap_pages(self, site: str, offset: int, limit: int) -> list[tuple[str, float]]:
        """(path, when its main text last changed) of the listed pages, ``offset`` on."""
        async with self._reader.execute(_PAGE.format("?"), (site, limit, offset)) as cursor:
            return [(row[0], float(row[1])) for row in await cursor.fetchall()]


class PostgresLastmod:
    """The sitemap's reads of :class:`~snapshotd.store.postgres.PostgresStore`."""

    _db: Any

    async def sitemap_count(self, site: str) -> int:
        return int(await self._db.fetchval(_COUNT.format("$"), site))

    async def sitemap_pages(self, site: str, offset: int, limit: int) -> list[tuple[str, float]]:
        rows = await self._db.fetch(_PAGE.format("$"), site, limit, offset)
        return [(row[0], float(row[1])) for row in rows]
