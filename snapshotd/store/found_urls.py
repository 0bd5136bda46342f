"""The URLs a crawl job found (Crawlbot's ``urlsHarvested``, SPEC 7.2): every distinct URL its
seeds, sitemaps and pages named, on its site or not, crawled or not. Mixins of both engines.

Invariants:
- a URL is kept as a 64-bit hash of its normalised form, once a site (the primary key), so a
  job counts each URL once however many pages link to it and whichever process found it;
- each site's count is one row, written in the transaction that adds the URLs with the
  number the insert actually added, so the count is what the table holds;
- a site keeps at most :data:`MAX_FOUND_URLS`: past it no URL is added (a batch that
  crosses it is added whole), so a site whose pages link to ever more URLs holds a bounded
  number of rows;
- inserts go in hash order, so processes adding URLs of one site at once never deadlock;
- removing or restarting a site removes its rows with its paths (:mod:`snapshotd.store.site_rows`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from snapshotd.store.counters import row_count, sqlite_transaction
from snapshotd.store.pg_retry import transaction_retried

__all__ = [
    "FOUND_URLS",
    "MAX_FOUND_URLS",
    "PostgresFoundUrls",
    "SQLiteFoundUrls",
    "url_hashes",
]

# A job's URLs counted at most: ten times Crawlbot's default maxToCrawl (100,000).
MAX_FOUND_URLS = 1_000_000

_TABLES = """
    CREATE TABLE found_urls (
        site     TEXT   NOT NULL,
        url_hash BIGINT NOT NULL,
        PRIMARY KEY (site, url_hash)
    ){options};
    CREATE TABLE found_url_counts (
        site TEXT   PRIMARY KEY,
        n    BIGINT NOT NULL
    );
"""
# A schema step: the URLs found before it are not known, so each job counts from then on.
FOUND_URLS = {
    "sqlite": _TABLES.format(options=" WITHOUT ROWID"),
    "postgres": _TABLES.format(options=""),
}

_COUNT = "SELECT n FROM found_url_counts WHERE site = {0}1"
_ADD_COUNT = (
    "INSERT INTO found_url_counts (site, n) VALUES ({0}1, {0}2) "
    "ON CONFLICT (site) DO UPDATE SET n = found_url_counts.n + excluded.n"
)


def url_hashes(urls: Iterable[str]) -> list[int]:
    """The distinct signed 64-bit hashes of ``urls``, in order."""
    return sorted({
        int.from_bytes(hashlib.blake2b(url.encode("utf-8"), digest_size=8).digest(), "big",
                       signed=True)
        for url in urls
    })


class SQLiteFoundUrls:
    """Found URLs of :class:`~snapshotd.store.sqlite.SQLiteStore`."""

    _reader: Any

    async def add_found_urls(self, site: str, urls: Iterable[str]) -> None:
        """Count ``urls`` (absolute, normalised) as found by ``site``'s job."""
        hashes = url_hashes(urls)
        if not hashes:
            return
        async with sqlite_transaction(self) as wr:
            async with wr.execute(_COUNT.format("?"), (site,)) as cursor:
                row = await cursor.fetchone()
            if row is not None and row[0] >= MAX_FOUND_URLS:
                return
            cursor = await wr.executemany(
                "INSERT OR IGNORE INTO found_urls (site, url_hash) VALUES (?, ?)",
                [(site, h) for h in hashes],
            )
            if added := int(cursor.rowcount or 0):
                await wr.execute(_ADD_COUNT.format("?"), (site, added))

    async def found_urls(self, site: str) -> int:
        """How many distinct URLs ``site``'s job found."""
        async with self._reader.execute(_COUNT.format("?"), (site,)) as cursor:
            row = await cursor.fetchone()
        return int(row[0]) if row else 0


class PostgresFoundUrls:
    """Found URLs of :class:`~snapshotd.store.postgres.PostgresStore`."""

    _db: Any

    async def add_found_urls(self, site: str, urls: Iterable[str]) -> None:
        hashes = url_hashes(urls)
        if not hashes:
            return

        async def add(conn: Any) -> None:
            if (await conn.fetchval(_COUNT.format("$"), site) or 0) >= MAX_FOUND_URLS:
                return
            done = await conn.execute(
                "INSERT INTO found_urls (site, url_hash) "
                "SELECT $1, h FROM unnest($2::bigint[]) AS h ORDER BY h "
                "ON CONFLICT DO NOTHING",
                site, hashes,
            )
            if added := row_count(done):
                await conn.execute(_ADD_COUNT.format("$"), site, added)

        await transaction_retried(self._db, add)

    async def found_urls(self, site: str) -> int:
        return int(await self._db.fetchval(_COUNT.format("$"), site) or 0)
