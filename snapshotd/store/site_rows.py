"""Sites in the store: each site's settings as JSON (the keys of a ``[[site]]`` table), and
whether its crawl is paused. Every process reads them (:mod:`snapshotd.sites.registry`), so a site
created, changed or removed through the API or the command line is seen by all of them
without a restart.

Removing a site's paths removes their snapshots with them (``ON DELETE CASCADE``), its
counters and its recent bot requests; removing the site removes its row as well. Both are
one transaction.
"""

from __future__ import annotations

import secrets
from typing import Any

from snapshotd.store.counters import row_count, sqlite_transaction
from snapshotd.store.interface import SiteRow
from snapshotd.store.pg_retry import transaction_retried

__all__ = [
    "EXPIRE_AFTER_FLOOR", "SITES_TABLE", "SITE_TOKENS", "PostgresSites", "SQLiteSites",
    "new_site_token",
]

SITES_TABLE = """
    CREATE TABLE sites (
        name       TEXT             PRIMARY KEY,
        settings   TEXT             NOT NULL,
        paused     INTEGER          NOT NULL DEFAULT 0,
        created_at DOUBLE PRECISION NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL
    )
"""

# Each site's own token, for the SEO4Ajax-compatible face (snapshotd.seo4ajax): a random
# 32 hex digits as SEO4Ajax's are, made by the database for the sites already stored and by
# new_site_token for those created later; a site keeps it until it is rotated.
SITE_TOKENS = {
    "sqlite": """
        ALTER TABLE sites ADD COLUMN site_token TEXT;
        UPDATE sites SET site_token = lower(hex(randomblob(16)));
        CREATE UNIQUE INDEX sites_token ON sites (site_token);
    """,
    "postgres": """
        ALTER TABLE sites ADD COLUMN site_token TEXT;
        UPDATE sites SET site_token = replace(gen_random_uuid()::text, '-', '');
        CREATE UNIQUE INDEX sites_token ON sites (site_token);
    """,
}
# ``expire_after`` below a minute is refused since ``"never"`` has a spelling of its own
# (config.MIN_EXPIRE_AFTER): a site stored with less keeps being read, with a minute.
EXPIRE_AFTER_FLOOR = {
    "sqlite": """
        UPDATE sites SET settings = json_set(settings, '$.expire_after', 60.0)
        WHERE json_valid(settings) AND json_type(settings, '$.expire_after') IN ('integer', 'real')
        AND json_extract(settings, '$.expire_after') < 60;
    """,
    "postgres": r"""
        UPDATE sites SET settings = regexp_replace(
            settings, '"expire_after":[0-9][0-9.eE+-]*([,}])', '"expire_after":60.0\1')
        WHERE CASE WHEN settings ~ '"expire_after":[0-9][0-9.eE+-]*[,}]'
            THEN substring(settings from '"expire_after":([0-9][0-9.eE+-]*)[,}]')::float8 < 60
            ELSE false END;
    """,
}

_COLUMNS = "name, settings, paused, created_at, updated_at, site_token"
# Name, settings, now, a new token: the site created, or its settings replaced when they differ
# (its token kept).
_PUT = (
    "INSERT INTO sites (name, settings, paused, created_at, updated_at, site_token) "
    "VALUES ({0}1, {0}2, 0, {0}3, {0}3, {0}4) "
    "ON CONFLICT (name) DO UPDATE SET settings = excluded.settings, updated_at = {0}3 "
    "WHERE sites.settings <> excluded.settings"
)
# A new token for a site: name, token, now (a change the registry reads, as settings are).
_ROTATE = "UPDATE sites SET site_token = {0}2, updated_at = {0}3 WHERE name = {0}1"


def new_site_token() -> str:
    """A site token: 128 random bits as 32 hex digits, as SEO4Ajax's site tokens look."""
    return secrets.token_hex(16)
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
    "DELETE FROM meta WHERE key = 'job-notify-failed:' || {0}",  # and why it could not be
    "DELETE FROM param_evidence WHERE site = {0}",
    "DELETE FROM params WHERE site = {0}",
    "DELETE FROM device_kinds WHERE site = {0}",  # what its pages taught of devices
    "DELETE FROM found_urls WHERE site = {0}",  # the URLs its job found
    "DELETE FROM found_url_counts WHERE site = {0}",
    "DELETE FROM meta WHERE key = 'not-found-view:' || {0}",  # store/soft_404_rows.view_key
)


_LOCK_PATHS = 'SELECT FROM paths WHERE site = $1 ORDER BY path COLLATE "C" FOR UPDATE'


def _row(r: Any) -> SiteRow:
    return SiteRow(r[0], r[1], bool(r[2]), float(r[3]), float(r[4]), r[5] or "")


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
        await self._write((_PUT.format("?"), (name, settings, self.clock(), new_site_token())))

    async def rotate_site_token(self, name: str) -> str | None:
        token = new_site_token()
        done = await self._write((_ROTATE.format("?"), (name, token, self.clock())))
        return token if done[0] else None

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
        await self._db.execute(_PUT.format("$"), name, settings, self.clock(), new_site_token())

    async def rotate_site_token(self, name: str) -> str | None:
        token = new_site_token()
        done = await self._db.execute(_ROTATE.format("$"), name, token, self.clock())
        return token if int(done.split()[-1]) else None

    async def set_site_paused(self, name: str, paused: bool) -> bool:
        done = await self._db.execute(
            "UPDATE sites SET paused = $1 WHERE name = $2", int(paused), name
        )
        return int(done.split()[-1]) > 0

    async def clear_site(self, name: str, *, remove: bool = False) -> int:
        async def clear(conn: Any) -> int:
            # Its paths locked in path order first, by code point whatever the database's
            # collation, as a batch locks them (PostgresStore.enqueue_many).
            await conn.execute(_LOCK_PATHS, name)
            done = await conn.execute(_CLEAR[0].format("$1::text"), name)
            for sql in _CLEAR[1:]:
                await conn.execute(sql.format("$1::text"), name)
            if remove:
                await conn.execute("DELETE FROM sites WHERE name = $1", name)
            else:
                await conn.execute(
                    "UPDATE sites SET updated_at = $1 WHERE name = $2", self.clock(), name
                )
            return row_count(done)

        return await transaction_retried(self._db, clear)
