"""What the stores keep for telling copies apart and who found a path: the copies of a page
(``duplicate_of``) and the path each group stands under, and whether the crawler found a path
on the site or only a bot's request named it (``found``). Mixins of both engines.

Invariants:
- a path is ``found`` once the crawler found it on the site (a link, a sitemap, a canonical,
  a redirect, a seed) or an operator queued it; a bot's request never sets it, and once set
  it stays;
- a group of copies stands under one path, its *master*, itself no copy: the others name it
  in ``duplicate_of``. A group moves to a new master in the transaction that stores the new
  master's capture (``CaptureOutcome.takes_over``, with the statements of :func:`take_master`),
  so no copy is ever left naming a path that is itself a copy, and no reader sees the new
  master processed while the group still stands under the old one.
"""

from __future__ import annotations

from typing import Any

from snapshotd.store.counters import sqlite_transaction

__all__ = ["PATHS_FOUND", "PostgresCopies", "SQLiteCopies", "take_master"]

# The processed paths of a site that are copies of another.
_COPIES = (
    "SELECT COUNT(*) FROM paths WHERE site = {0}1 AND state = 'processed' "
    "AND duplicate_of IS NOT NULL"
)
# A schema step of both engines: the paths stored before are taken as found.
PATHS_FOUND = "ALTER TABLE paths ADD COLUMN found INTEGER NOT NULL DEFAULT 1"

_SAME_CONTENT = (
    "SELECT p.path FROM snapshots s JOIN paths p ON p.id = s.path_id "
    "WHERE s.content_hash = {0}1 AND p.site = {0}2 AND p.path <> {0}3 "
    "AND p.duplicate_of IS NULL ORDER BY p.id LIMIT 1"
)
_SAME_TEXT = _SAME_CONTENT.replace("s.content_hash", "s.text_hash")
_SET_DUPLICATE = "UPDATE paths SET duplicate_of = {0}1 WHERE site = {0}2 AND path = {0}3"
_MARK_FOUND = "UPDATE paths SET found = 1 WHERE site = {0}1 AND path = {0}2 AND found = 0"
# Site, new master, old master: the old one and its copies become copies of the new one.
_REPOINT = (
    "UPDATE paths SET duplicate_of = {0}2 WHERE site = {0}1 AND path <> {0}2 "
    "AND (path = {0}3 OR duplicate_of = {0}3)"
)
_MASTER = "UPDATE paths SET duplicate_of = NULL WHERE site = {0}1 AND path = {0}2"
_DROP_OWN_PROFILES = (
    "DELETE FROM profile_snapshots WHERE path_id = (SELECT id FROM paths WHERE site = {0}1 "
    "AND path = {0}2)"
)
_DROP_OWN = (
    "DELETE FROM snapshots WHERE path_id = (SELECT id FROM paths WHERE site = {0}1 "
    "AND path = {0}2)"
)


def take_master(
    site: str, path: str, old: str, *, shared: bool, mark: str
) -> list[tuple[str, tuple[str, ...]]]:
    """The statements, with their arguments, by which ``path`` stands for the group ``old``
    stood for: ``old`` and its copies become copies of it; with ``shared``, ``old`` keeps no
    snapshot of its own any more. ``mark``: the engine's parameter mark (``?`` or ``$``)."""
    steps = [(_REPOINT, (site, path, old)), (_MASTER, (site, path))]
    if shared:
        steps += [(_DROP_OWN_PROFILES, (site, old)), (_DROP_OWN, (site, old))]
    return [(sql.format(mark), args) for sql, args in steps]


class SQLiteCopies:
    """Copies and finders of :class:`~snapshotd.store.sqlite.SQLiteStore`."""

    _reader: Any

    async def _first(self, sql: str, args: tuple[Any, ...]) -> str | None:
        async with self._reader.execute(sql.format("?"), args) as cursor:
            row = await cursor.fetchone()
        return row[0] if row else None

    async def find_same_content(self, site: str, content_hash: str, path: str) -> str | None:
        """Another path of the site, not itself a copy, whose snapshot has the same HTML."""
        return await self._first(_SAME_CONTENT, (content_hash, site, path))

    async def find_same_text(self, site: str, text_hash: str, path: str) -> str | None:
        """Another path of the site, not itself a copy, whose snapshot shows the same main
        text."""
        return await self._first(_SAME_TEXT, (text_hash, site, path))

    async def set_duplicate(self, site: str, path: str, of: str | None) -> None:
        async with sqlite_transaction(self) as wr:
            await wr.execute(_SET_DUPLICATE.format("?"), (of, site, path))

    async def mark_found(self, site: str, path: str) -> None:
        """The crawler found the path on the site (or an operator asked for it)."""
        async with sqlite_transaction(self) as wr:
            await wr.execute(_MARK_FOUND.format("?"), (site, path))

    async def count_copies(self, site: str) -> int:
        """How many of the site's processed paths are copies of another."""
        return int(await self._first(_COPIES, (site,)) or 0)



class PostgresCopies:
    """Copies and finders of :class:`~snapshotd.store.postgres.PostgresStore`."""

    _db: Any

    async def _first(self, sql: str, *args: Any) -> str | None:
        value = await self._db.fetchval(sql.format("$"), *args)
        return str(value) if value is not None else None

    async def find_same_content(self, site: str, content_hash: str, path: str) -> str | None:
        return await self._first(_SAME_CONTENT, content_hash, site, path)

    async def find_same_text(self, site: str, text_hash: str, path: str) -> str | None:
        return await self._first(_SAME_TEXT, text_hash, site, path)

    async def set_duplicate(self, site: str, path: str, of: str | None) -> None:
        await self._db.execute(_SET_DUPLICATE.format("$"), of, site, path)

    async def mark_found(self, site: str, path: str) -> None:
        await self._db.execute(_MARK_FOUND.format("$"), site, path)

    async def count_copies(self, site: str) -> int:
        return int(await self._first(_COPIES, site) or 0)

