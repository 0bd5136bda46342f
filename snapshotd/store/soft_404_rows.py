"""What the stores keep of soft 404s (SPEC 5.6): why a path's last capture was taken for its
site's not-found view, and the view each site learned. Mixins of both engines.

Invariants:
- ``paths.not_found`` is written by the one statement that stores a capture
  (:mod:`snapshotd.store.outcome`): a capture that shows the view sets it, any other clears
  it; a failed capture leaves it as it was;
- a site's learned view is one ``meta`` row (:func:`view_key`), removed with the site's paths
  (:mod:`snapshotd.store.site_rows`);
- counting a site's not-found paths reads its partial index alone.
"""

from __future__ import annotations

from typing import Any

__all__ = ["NOT_FOUND_COLUMN", "PostgresNotFound", "SQLiteNotFound", "view_key"]

# A schema step of both engines.
NOT_FOUND_COLUMN = """
    ALTER TABLE paths ADD COLUMN not_found TEXT;
    CREATE INDEX paths_not_found ON paths (site) WHERE not_found IS NOT NULL;
"""
# Its answered ones: stored with a 4xx, where "report" stores them with the page's own status.
_COUNT = (
    "SELECT COUNT(*), COUNT(*) FILTER (WHERE status >= 400) FROM paths "
    "WHERE site = {0}1 AND not_found IS NOT NULL"
)


def view_key(site: str) -> str:
    """The ``meta`` key of the view ``site`` learned (its JSON, capture/not_found)."""
    return f"not-found-view:{site}"


class SQLiteNotFound:
    """The soft-404 reads of :class:`~snapshotd.store.sqlite.SQLiteStore`."""

    _reader: Any

    async def not_found_count(self, site: str) -> tuple[int, int]:
        """How many of the site's paths last showed its not-found view, and how many of
        those are answered so (a 4xx)."""
        async with self._reader.execute(_COUNT.format("?"), (site,)) as cursor:
            row = await cursor.fetchone()
        return int(row[0]), int(row[1])


class PostgresNotFound:
    """The soft-404 reads of :class:`~snapshotd.store.postgres.PostgresStore`."""

    _db: Any

    async def not_found_count(self, site: str) -> tuple[int, int]:
        row = await self._db.fetchrow(_COUNT.format("$"), site)
        return int(row[0]), int(row[1])
