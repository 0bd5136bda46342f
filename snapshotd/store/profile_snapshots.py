"""What the stores keep per device profile (:mod:`snapshotd.crawlers.devices`): a path's snapshot is
known by (site, path, profile). Shared by both engines.

Invariants:

- A path's own snapshot (``snapshots``) is its capture for the first profile its site serves,
  and says which (``profile``). A path keeps a row in ``profile_snapshots`` for another
  profile only when that profile's capture differs from it (by main text, status or honoured
  headers); a profile without one is served the path's own snapshot, as is every profile of
  a path captured before profiles existed (those rows are ``desktop``: a desktop window
  rendered them).
- A path's own snapshot may owe profiles (``owed``, space-separated names): a capture that
  rendered only the profile a bot asked for, where the others might have shown something
  else, owes them. An owed profile holds no row, and its crawlers are not served the path's
  own snapshot: a request from one renders that profile first (``Store.settle_owed``, then
  stores its capture as a row when it differs and takes the profile off ``owed``, at once,
  and only while the own snapshot is the one it was compared with).
- A copy (``duplicate_of``, shared) has none of its own: it is served its master's, the
  master's row for the profile first, and owes what its master owes.
- A capture replaces all of a path's profile rows and what it owes at once, in the
  transaction that stores its own snapshot; removing the path or its snapshot removes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from snapshotd.store.interface import SNAPSHOT_COLUMNS

__all__ = [
    "POSTGRES_PROFILES",
    "PostgresProfiles",
    "SQLiteProfiles",
    "PROFILE_DELETE",
    "PROFILE_PUT",
    "SNAPSHOT_OF_PROFILE",
    "SQLITE_PROFILES",
]

_PROFILES = """
    ALTER TABLE snapshots ADD COLUMN profile TEXT NOT NULL DEFAULT 'desktop';
    CREATE TABLE profile_snapshots (
        path_id      {id} NOT NULL REFERENCES paths (id) ON DELETE CASCADE,
        profile      TEXT    NOT NULL,
        body_gz      {blob}  NOT NULL,
        status       INTEGER NOT NULL,
        headers      TEXT    NOT NULL,
        etag         TEXT    NOT NULL,
        content_hash TEXT    NOT NULL,
        final_url    TEXT    NOT NULL,
        captured_at  {real}  NOT NULL,
        PRIMARY KEY (path_id, profile)
    );
"""
# Schema steps: existing snapshots become the desktop profile's.
SQLITE_PROFILES = _PROFILES.format(id="INTEGER", blob="BLOB", real="REAL")
POSTGRES_PROFILES = _PROFILES.format(id="BIGINT", blob="BYTEA", real="DOUBLE PRECISION")


def _pick(column: str) -> str:
    # The path's own row for the profile, its own snapshot, its master's row, its master's.
    return f"COALESCE(v.{column}, s.{column}, w.{column}, c.{column})"


# Site, path, profile: the snapshot served for that profile, as SNAPSHOT_OF's columns (the
# profile it was rendered as, the profile of the path's own snapshot, what that owes).
SNAPSHOT_OF_PROFILE = (
    "SELECT "
    + ", ".join(_pick(c) for c in SNAPSHOT_COLUMNS[:7])
    + ", p.expires_at, p.state, "
    + _pick("profile")
    + ", COALESCE(s.profile, c.profile), COALESCE(s.owed, c.owed) "
    "FROM paths p LEFT JOIN snapshots s ON s.path_id = p.id "
    "LEFT JOIN profile_snapshots v ON v.path_id = s.path_id AND v.profile = {0}3 "
    "LEFT JOIN paths d ON s.path_id IS NULL AND d.site = p.site AND d.path = p.duplicate_of "
    "LEFT JOIN snapshots c ON c.path_id = d.id "
    "LEFT JOIN profile_snapshots w ON w.path_id = c.path_id AND w.profile = {0}3 "
    "WHERE p.site = {0}1 AND p.path = {0}2 AND (s.path_id IS NOT NULL OR c.path_id IS NOT NULL)"
)
PROFILE_DELETE = "DELETE FROM profile_snapshots WHERE path_id = {0}"
# Path id, profile, gzip body, status, headers, ETag, content hash, final URL, time.
PROFILE_PUT = (
    "INSERT INTO profile_snapshots (path_id, profile, body_gz, status, headers, etag, "
    "content_hash, final_url, captured_at) VALUES ({0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}, {8})"
)

# Site, then the paths: each path's own snapshot's profile and each of its profile rows'.
_OWN_PROFILES = (
    "SELECT p.path, s.profile, v.profile FROM paths p JOIN snapshots s ON s.path_id = p.id "
    "LEFT JOIN profile_snapshots v ON v.path_id = p.id WHERE p.site = {0}1 AND p.path ANY_OF "
    "ORDER BY p.path, v.profile"
)


def _gather(rows: Any) -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for path, own, other in rows:
        out.setdefault(path, (own,))
        if other is not None:
            out[path] += (other,)
    return out


class SQLiteProfiles:
    """The profiles of :class:`~snapshotd.store.sqlite.SQLiteStore`'s snapshots."""

    _reader: Any

    async def own_profiles(self, site: str, paths: Sequence[str]) -> dict[str, tuple[str, ...]]:
        """For each of ``paths`` that has a snapshot of its own: the profiles it holds one
        for, its own snapshot's first (a profile not named is served that one)."""
        out: dict[str, tuple[str, ...]] = {}
        for start in range(0, len(paths), 500):
            batch = paths[start : start + 500]
            marks = ",".join(f"?{n}" for n in range(2, len(batch) + 2))
            sql = _OWN_PROFILES.format("?").replace("ANY_OF", f"IN ({marks})")
            async with self._reader.execute(sql, (site, *batch)) as cursor:
                out.update(_gather(await cursor.fetchall()))
        return out


class PostgresProfiles:
    """The profiles of :class:`~snapshotd.store.postgres.PostgresStore`'s snapshots."""

    _db: Any

    async def own_profiles(self, site: str, paths: Sequence[str]) -> dict[str, tuple[str, ...]]:
        """As :meth:`SQLiteProfiles.own_profiles`."""
        if not paths:
            return {}
        sql = _OWN_PROFILES.format("$").replace("ANY_OF", "= ANY($2::text[])")
        return _gather(await self._db.fetch(sql, site, list(paths)))
