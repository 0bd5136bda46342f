"""What the stores keep for knowing a page by what it shows: the fingerprints of each
snapshot (:mod:`snapshotd.pages.fingerprints`), and the query parameters a site learned or was
told to
ignore, with the evidence behind them (:mod:`snapshotd.sites.param_learner`). Mixins of both
engines.

Invariants:
- a parameter's evidence is one row per (site, name, base path): whether the variants of that
  page differing in it showed the same page; once one did not, the row says so for good;
- a decision (``ignored`` or ``kept``, its scope, whether an operator pinned it) is one row
  per (site, name), removed with the site.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from snapshotd.pages.fingerprints import Print
from snapshotd.store.counters import row_count, sqlite_transaction
from snapshotd.store.learnt import ParamRow
from snapshotd.store.pg_retry import transaction_retried

__all__ = ["POSTGRES_VARIANTS_INDEX", "PRINTS_AND_PARAMS", "PostgresParams", "SQLiteParams"]

# A schema step of both engines.
PRINTS_AND_PARAMS = """
    ALTER TABLE snapshots ADD COLUMN text_hash TEXT;
    ALTER TABLE snapshots ADD COLUMN simhash BIGINT;
    ALTER TABLE snapshots ADD COLUMN words INTEGER;
    CREATE INDEX snapshots_text ON snapshots (text_hash);
    CREATE TABLE param_evidence (
        site TEXT    NOT NULL,
        name TEXT    NOT NULL,
        base TEXT    NOT NULL,
        same INTEGER NOT NULL,
        PRIMARY KEY (site, name, base)
    );
    CREATE TABLE params (
        site       TEXT             NOT NULL,
        name       TEXT             NOT NULL,
        state      TEXT             NOT NULL,
        scope      TEXT             NOT NULL,
        pinned     INTEGER          NOT NULL DEFAULT 0,
        updated_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (site, name)
    );
"""

# Once a page's variants differed in a parameter, its evidence says so for good.
_EVIDENCE = (
    "INSERT INTO param_evidence (site, name, base, same) VALUES ({0}1, {0}2, {0}3, {0}4) "
    "ON CONFLICT (site, name, base) DO UPDATE SET same = param_evidence.same * excluded.same"
)
_PUT = (
    "INSERT INTO params (site, name, state, scope, pinned, updated_at) "
    "VALUES ({0}1, {0}2, {0}3, {0}4, {0}5, {0}6) ON CONFLICT (site, name) DO UPDATE SET "
    "state = excluded.state, scope = excluded.scope, pinned = excluded.pinned, "
    "updated_at = excluded.updated_at"
)
_PRINT_OF = (
    "SELECT p.path, s.text_hash, s.simhash, s.words FROM paths p JOIN snapshots s "
    "ON s.path_id = p.id WHERE p.site = {0}1 AND p.path ANY_OF AND s.text_hash IS NOT NULL"
)
_FOUND_ONLY = " AND p.found = 1"
# A schema step of PostgreSQL's: the paths in byte order, whatever the database's collation,
# for the variants of a page (SQLite's paths index is in byte order already).
POSTGRES_VARIANTS_INDEX = 'CREATE INDEX paths_bytes ON paths (site, path COLLATE "C")'
# The paths that are a page with a query: from "<page>?" up to, not including, "<page>@"
# ("@" follows "?"), compared byte by byte.
_VARIANTS_OF = (
    "SELECT p.path, s.text_hash, s.simhash, s.words FROM paths p JOIN snapshots s "
    "ON s.path_id = p.id WHERE p.site = {0}1 AND p.path {1} >= {0}2 AND p.path {1} < {0}3 "
    "AND s.text_hash IS NOT NULL AND p.found = 1 ORDER BY p.path LIMIT {0}4"
)


def _query_range(page: str) -> tuple[str, str]:
    return f"{page}?", f"{page}@"


def _print(row: Any) -> Print:
    return Print(row[1], int(row[2]), int(row[3]))


class SQLiteParams:
    """Fingerprints and parameters of :class:`~snapshotd.store.sqlite.SQLiteStore`."""

    _reader: Any
    clock: Any

    async def prints(
        self, site: str, paths: Sequence[str], *, found: bool = False
    ) -> dict[str, Print]:
        """The fingerprints of the snapshots of ``paths`` that have one; with ``found``,
        of those the crawler found only."""
        if not paths:
            return {}
        marks = ",".join(f"?{n}" for n in range(2, len(paths) + 2))
        sql = _PRINT_OF.format("?").replace("ANY_OF", f"IN ({marks})") + _FOUND_ONLY * found
        async with self._reader.execute(sql, (site, *paths)) as cursor:
            return {row[0]: _print(row) for row in await cursor.fetchall()}

    async def variant_prints(self, site: str, page: str, limit: int) -> dict[str, Print]:
        """The fingerprints of at most ``limit`` snapshots of found paths that are ``page``
        with a query."""
        sql = _VARIANTS_OF.format("?", "")  # BINARY: the paths index's own order
        async with self._reader.execute(sql, (site, *_query_range(page), limit)) as cursor:
            return {row[0]: _print(row) for row in await cursor.fetchall()}

    async def add_param_evidence(self, site: str, name: str, base: str, same: bool) -> None:
        async with sqlite_transaction(self) as wr:
            await wr.execute(_EVIDENCE.format("?"), (site, name, base, int(same)))

    async def param_evidence(self, site: str) -> dict[str, list[tuple[str, bool]]]:
        """Each parameter's evidence: (base path, same) pairs, by parameter name."""
        out: dict[str, list[tuple[str, bool]]] = {}
        async with self._reader.execute(
            "SELECT name, base, same FROM param_evidence WHERE site = ? ORDER BY name, base",
            (site,),
        ) as cursor:
            for name, base, same in await cursor.fetchall():
                out.setdefault(name, []).append((base, bool(same)))
        return out

    async def list_params(self, site: str | None = None) -> list[ParamRow]:
        where, args = ("WHERE site = ?", (site,)) if site is not None else ("", ())
        async with self._reader.execute(
            f"SELECT site, name, state, scope, pinned, updated_at FROM params {where} "
            "ORDER BY site, name", args,
        ) as cursor:
            return [ParamRow(r[0], r[1], r[2], r[3], bool(r[4]), r[5])
                    for r in await cursor.fetchall()]

    async def put_param(
        self, site: str, name: str, state: str, scope: str, *, pinned: bool
    ) -> None:
        async with sqlite_transaction(self) as wr:
            await wr.execute(
                _PUT.format("?"), (site, name, state, scope, int(pinned), self.clock())
            )

    async def delete_param(self, site: str, name: str) -> bool:
        """Forget the decision and the evidence on a parameter: learning starts again."""
        async with sqlite_transaction(self) as wr:
            await wr.execute(
                "DELETE FROM param_evidence WHERE site = ? AND name = ?", (site, name))
            cursor = await wr.execute(
                "DELETE FROM params WHERE site = ? AND name = ?", (site, name))
            return bool(cursor.rowcount)


class PostgresParams:
    """Fingerprints and parameters of :class:`~snapshotd.store.postgres.PostgresStore`."""

    _db: Any
    clock: Any

    async def prints(
        self, site: str, paths: Sequence[str], *, found: bool = False
    ) -> dict[str, Print]:
        if not paths:
            return {}
        sql = _PRINT_OF.format("$").replace("ANY_OF", "= ANY($2::text[])") + _FOUND_ONLY * found
        return {row[0]: _print(row) for row in await self._db.fetch(sql, site, list(paths))}

    async def variant_prints(self, site: str, page: str, limit: int) -> dict[str, Print]:
        # COLLATE "C": byte order whatever the database's collation (paths_bytes's order).
        sql = _VARIANTS_OF.format("$", 'COLLATE "C"')
        rows = await self._db.fetch(sql, site, *_query_range(page), limit)
        return {row[0]: _print(row) for row in rows}

    async def add_param_evidence(self, site: str, name: str, base: str, same: bool) -> None:
        await self._db.execute(_EVIDENCE.format("$"), site, name, base, int(same))

    async def param_evidence(self, site: str) -> dict[str, list[tuple[str, bool]]]:
        out: dict[str, list[tuple[str, bool]]] = {}
        for name, base, same in await self._db.fetch(
            "SELECT name, base, same FROM param_evidence WHERE site = $1 ORDER BY name, base",
            site,
        ):
            out.setdefault(name, []).append((base, bool(same)))
        return out

    async def list_params(self, site: str | None = None) -> list[ParamRow]:
        where, args = ("WHERE site = $1", (site,)) if site is not None else ("", ())
        rows = await self._db.fetch(
            f"SELECT site, name, state, scope, pinned, updated_at FROM params {where} "
            "ORDER BY site, name", *args,
        )
        return [ParamRow(r[0], r[1], r[2], r[3], bool(r[4]), r[5]) for r in rows]

    async def put_param(
        self, site: str, name: str, state: str, scope: str, *, pinned: bool
    ) -> None:
        await self._db.execute(
            _PUT.format("$"), site, name, state, scope, int(pinned), self.clock())

    async def delete_param(self, site: str, name: str) -> bool:

        async def delete(conn: Any) -> int:
            await conn.execute(
                "DELETE FROM param_evidence WHERE site = $1 AND name = $2", site, name)
            return row_count(await conn.execute(
                "DELETE FROM params WHERE site = $1 AND name = $2", site, name))

        return await transaction_retried(self._db, delete) > 0
