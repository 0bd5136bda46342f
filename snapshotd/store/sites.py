"""Sites in the store: each site's settings as JSON (the keys of a ``[[site]]`` table), and
whether its crawl is paused. Every process reads them (:mod:`snapshotd.sites.registry`), so a site
created, changed or removed through the API or the command line is seen by all of them
without a restart.

Removing a site's paths removes their snapshots with them (``ON DELETE CASCADE``), its
counters and its recent bot requests; removing the site removes its row as well. Both are
one transaction.
"""

from __future__ import annotations

from typing import Any

from snapshotd.store.base import SiteRow
from snapshotd.store.counters import sqlite_transaction

__all__ = ["SITES_TABLE", "PostgresSites", "SQLiteSites"]

SITES_TABLE = """
    CREATE TABLE sites (
        name       TEXT             PRIMARY KEY,
        settings   TEXT             NOT NULL,
        paused     INTEGER          NOT NULL DEFAULT 0,
        created_at DOUBLE PRECISION NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL
    )
"""

_COLUMNS = "name, settings, paused, created_at, updated_at"
# Name, settings, now: the site created, or its settings replaced when they differ.
_PUT = (
    "INSERT INTO sites (name, settings, paused, created_at, updated_at) "
    "VALUES ({0}1, {0}2, 0, {0}3, {0}3) "
    "ON CONFLICT (name) DO UPDATE SET settings = excluded.settings, updated_at = {0}3 "
    "WHERE sites.settings <> excluded.settings"
)
# The round whose end was notified, once a flag of the job's row (``"notified": true``), is a
# row of its own (snapshotd.store.job_state): the start of that round, as the job's row writes it
# (its first key, ``{"started": 1764085934.25, ...``), so no notification is sent again.
_NOTIFIED_ROUNDS = (
    "INSERT INTO meta (key, value) "
    "SELECT 'job-notified:' || substr(key, 5), substr(value, 13, {position} - 13) FROM meta "
    "WHERE key LIKE 'job:%' AND {notified} ON CONFLICT (key) DO NOTHING"
)
SQLITE_NOTIFIED_ROUNDS = _NOTIFIED_ROUNDS.format(
    position="instr(value, ',')", notified="json_extract(value, '$.notified') = 1"
)
POSTGRES_NOTIFIED_ROUNDS = _NOTIFIED_ROUNDS.format(
    position="strpos(value, ',')", notified="(value::json ->> 'notified')::boolean"
)
# What removing a site's pages deletes, in order (snapshots go with their paths).
_CLEAR = (
    "DELETE FROM paths WHERE site = {0}",
    "DELETE FROM counters WHERE site = {0}",
    "DELETE FROM recent_requests WHERE site = {0}",
    "DELETE FROM meta WHERE key = 'job:' || {0}",  # its rounds (snapshotd.store.job_state)
    "DELETE FROM meta WHERE key = 'job-notified:' || {0}",  # the round last notified
    "DELETE FROM param_evidence WHERE site = {0}",
    "DELETE FROM params WHERE site = {0}",
)


def _row(r: Any) -> SiteRow:
    return SiteRow(r[0], r[1], bool(r[2]), float(r[3]), float(r[4]))


class SQLiteSites:
    """The sites of :class:`~snapshotd.store.sqlite.SQLiteStore`."""

    _reader: Any
    clock: Any

    async def _write(self, *statements: tuple[str, tuple[Any, ...]]) -> list[int]:
        """Run ``statements`` in one transaction; how many rows each changed."""
        async with sqlite_transaction(self) as wr:
            return [int((await wr.execute(sql, args)).rowcount or 0) for sql, args in statements]

    async def list_sites(self) -> list[SiteRow]:
        async with self._reader.execute(
            f"SELECT {_COLUMNS} FROM sites ORDER BY name"
        ) as cursor:
            return [_row(r) for r in await cursor.fetchall()]

    async def put_site(self, name: str, settings: str) -> None:
        await self._write((_PUT.format("?"), (name, settings, self.clock())))

    async def set_site_paused(self, name: str, paused: bool) -> bool:
        sql = "UPDATE sites SET paused = ? WHERE name = ?"
        return (await self._write((sql, (int(paused), name))))[0] > 0

    async def clear_site(self, name: str, *, remove: bool = False) -> int:
        """Remove the site's paths, snapshots and counters (and the site itself when
        ``remove``); how many paths went."""
        statements: list[tuple[str, tuple[Any, ...]]] = [
            (sql.format("?"), (name,)) for sql in _CLEAR
        ]
        if remove:
            statements.append(("DELETE FROM sites WHERE name = ?", (name,)))
        else:
            statements.append(("UPDATE sites SET updated_at = ? WHERE name = ?",
                               (self.clock(), name)))
        return (await self._write(*statements))[0]


class PostgresSites:
    """The sites of :class:`~snapshotd.store.postgres.PostgresStore`."""

    _db: Any
    clock: Any

    async def list_sites(self) -> list[SiteRow]:
        return [_row(r) for r in await self._db.fetch(
            f"SELECT {_COLUMNS} FROM sites ORDER BY name"
        )]

    async def put_site(self, name: str, settings: str) -> None:
        await self._db.execute(_PUT.format("$"), name, settings, self.clock())

    async def set_site_paused(self, name: str, paused: bool) -> bool:
        done = await self._db.execute(
            "UPDATE sites SET paused = $1 WHERE name = $2", int(paused), name
        )
        return int(done.split()[-1]) > 0

    async def clear_site(self, name: str, *, remove: bool = False) -> int:
        async with self._db.acquire() as conn, conn.transaction():
            done = await conn.execute(_CLEAR[0].format("$1::text"), name)
            for sql in _CLEAR[1:]:
                await conn.execute(sql.format("$1::text"), name)
            if remove:
                await conn.execute("DELETE FROM sites WHERE name = $1", name)
            else:
                await conn.execute(
                    "UPDATE sites SET updated_at = $1 WHERE name = $2", self.clock(), name
                )
            return int(done.split()[-1])
