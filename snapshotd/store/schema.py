"""The schema of both engines, one history: each step once, its two dialects side by side.

Invariants:
- a database records the last version it is at (``schema_migrations``); an engine applies the
  steps it lacks (:func:`versions_after`) in order, in one transaction, and refuses a
  database at a version it does not know;
- a step is never edited once released, and a new one goes at the end, for both engines at
  once;
- an engine's versions are its steps in order, a step it has no part in (``None``) counting
  for it no version: SQLite's version 2 (a capture's links due) was part of PostgreSQL's
  first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from snapshotd.store.copies import PATHS_FOUND
from snapshotd.store.counters import COUNTERS_TABLE, POSTGRES_RECENT_TABLE, SQLITE_RECENT_TABLE
from snapshotd.store.device_kinds import DEVICE_KINDS
from snapshotd.store.found_urls import FOUND_URLS
from snapshotd.store.interface import CRAWLED_EXPIRY_INDEX, READINESS_LIMIT_COLUMN, StoreError
from snapshotd.store.lastmod import TEXT_CHANGED
from snapshotd.store.owed_profiles import OWED_COLUMN
from snapshotd.store.path_counts import POSTGRES_PATH_COUNTS, SQLITE_PATH_COUNTS
from snapshotd.store.prints_and_params import POSTGRES_VARIANTS_INDEX, PRINTS_AND_PARAMS
from snapshotd.store.profile_snapshots import POSTGRES_PROFILES, SQLITE_PROFILES
from snapshotd.store.site_rows import (
    EXPIRE_AFTER_FLOOR,
    POSTGRES_NOTIFIED_ROUNDS,
    SITE_TOKENS,
    SITES_TABLE,
    SQLITE_NOTIFIED_ROUNDS,
)
from snapshotd.store.soft_404_rows import NOT_FOUND_COLUMN

__all__ = ["ENGINES", "HISTORY", "Step", "migrations", "versions_after"]

ENGINES = ("sqlite", "postgres")


class Step(NamedTuple):
    """One change of the schema: its SQL for each engine (None: not a version of it)."""

    sqlite: str | None
    postgres: str | None


def _both(sql: str) -> Step:
    return Step(sql, sql)


HISTORY: tuple[Step, ...] = (
    Step(
        sqlite="""
        CREATE TABLE paths (
            id           INTEGER PRIMARY KEY,
            site         TEXT    NOT NULL,
            path         TEXT    NOT NULL,
            state        TEXT    NOT NULL,
            priority     INTEGER NOT NULL,
            hops         INTEGER NOT NULL DEFAULT 0,
            status       INTEGER,
            created_at   REAL    NOT NULL,
            queued_at    REAL    NOT NULL,
            captured_at  REAL,
            expires_at   REAL,
            error        TEXT,
            duplicate_of TEXT,
            attempts     INTEGER NOT NULL DEFAULT 0,
            lease_owner  TEXT,
            lease_until  REAL,
            UNIQUE (site, path)
        );
        CREATE INDEX paths_pending ON paths (priority DESC, queued_at, id) WHERE state = 'pending';
        CREATE INDEX paths_expiry ON paths (site, expires_at) WHERE state IN ('processed', 'error');
        CREATE INDEX paths_lease ON paths (lease_until) WHERE state = 'processing';
        CREATE TABLE snapshots (
            path_id      INTEGER PRIMARY KEY REFERENCES paths (id) ON DELETE CASCADE,
            body_gz      BLOB    NOT NULL,
            status       INTEGER NOT NULL,
            headers      TEXT    NOT NULL,
            etag         TEXT    NOT NULL,
            content_hash TEXT    NOT NULL,
            final_url    TEXT    NOT NULL,
            captured_at  REAL    NOT NULL
        );
        CREATE INDEX snapshots_hash ON snapshots (content_hash);
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        """,
        postgres="""
        CREATE TABLE paths (
            id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            site         TEXT    NOT NULL,
            path         TEXT    NOT NULL,
            state        TEXT    NOT NULL,
            priority     INTEGER NOT NULL,
            hops         INTEGER NOT NULL DEFAULT 0,
            status       INTEGER,
            created_at   DOUBLE PRECISION NOT NULL,
            queued_at    DOUBLE PRECISION NOT NULL,
            captured_at  DOUBLE PRECISION,
            expires_at   DOUBLE PRECISION,
            error        TEXT,
            duplicate_of TEXT,
            attempts     INTEGER NOT NULL DEFAULT 0,
            lease_owner  TEXT,
            lease_until  DOUBLE PRECISION,
            links_due    BOOLEAN NOT NULL DEFAULT FALSE,
            UNIQUE (site, path)
        );
        CREATE INDEX paths_pending ON paths (priority DESC, queued_at, id) WHERE state = 'pending';
        CREATE INDEX paths_pending_site ON paths (site, priority DESC, queued_at, id)
            WHERE state = 'pending';
        CREATE INDEX paths_expiry ON paths (site, expires_at) WHERE state IN ('processed', 'error');
        CREATE INDEX paths_lease ON paths (lease_until) WHERE state = 'processing';
        CREATE INDEX paths_links_due ON paths (site, id) WHERE links_due;
        CREATE TABLE snapshots (
            path_id      BIGINT PRIMARY KEY REFERENCES paths (id) ON DELETE CASCADE,
            body_gz      BYTEA   NOT NULL,
            status       INTEGER NOT NULL,
            headers      TEXT    NOT NULL,
            etag         TEXT    NOT NULL,
            content_hash TEXT    NOT NULL,
            final_url    TEXT    NOT NULL,
            captured_at  DOUBLE PRECISION NOT NULL
        );
        CREATE INDEX snapshots_hash ON snapshots (content_hash);
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        """,
    ),
    # A stored capture whose links the crawler has still to follow (a stop or a crash between
    # storing it and queueing its links would otherwise lose them); PostgreSQL's first
    # version has it.
    Step(
        sqlite="""
        ALTER TABLE paths ADD COLUMN links_due INTEGER NOT NULL DEFAULT 0;
        CREATE INDEX paths_links_due ON paths (site, id) WHERE links_due = 1;
        """,
        postgres=None,
    ),
    _both(COUNTERS_TABLE),
    _both(SITES_TABLE),
    Step(sqlite=SQLITE_RECENT_TABLE, postgres=POSTGRES_RECENT_TABLE),
    _both(CRAWLED_EXPIRY_INDEX),
    _both(PRINTS_AND_PARAMS),
    Step(sqlite=SQLITE_PATH_COUNTS, postgres=POSTGRES_PATH_COUNTS),
    Step(sqlite=SQLITE_NOTIFIED_ROUNDS, postgres=POSTGRES_NOTIFIED_ROUNDS),
    _both(PATHS_FOUND),
    _both(READINESS_LIMIT_COLUMN),
    Step(sqlite=SITE_TOKENS["sqlite"], postgres=SITE_TOKENS["postgres"]),
    Step(sqlite=EXPIRE_AFTER_FLOOR["sqlite"], postgres=EXPIRE_AFTER_FLOOR["postgres"]),
    Step(sqlite=SQLITE_PROFILES, postgres=POSTGRES_PROFILES),
    _both(TEXT_CHANGED),
    Step(sqlite=FOUND_URLS["sqlite"], postgres=FOUND_URLS["postgres"]),
    _both(NOT_FOUND_COLUMN),
    Step(sqlite=None, postgres=POSTGRES_VARIANTS_INDEX),
    _both(DEVICE_KINDS),
    _both(OWED_COLUMN),
)


def migrations(engine: str) -> list[str]:
    """The engine's versions in order: its SQL of each step it has a part in."""
    steps = (getattr(step, engine) for step in HISTORY)
    return [sql for sql in steps if sql is not None]


def versions_after(versions: Sequence[str], current: int) -> list[tuple[int, str]]:
    """The versions a database at ``current`` lacks of an engine's ``versions``, each with its
    SQL, in order; StoreError for a database at a version this snapshotd does not know."""
    if current > len(versions):
        raise StoreError(f"schema version {current} is newer than this snapshotd knows")
    return list(enumerate(versions, 1))[current:]
