"""The PostgreSQL store's schema, version by version (the database records the one it is
at); :mod:`snapshotd.store.postgres` applies the ones a database lacks, under an advisory
lock."""

from __future__ import annotations

from snapshotd.store.base import CRAWLED_EXPIRY_INDEX, READINESS_LIMIT_COLUMN
from snapshotd.store.copies import PATHS_FOUND
from snapshotd.store.counters import COUNTERS_TABLE, POSTGRES_RECENT_TABLE
from snapshotd.store.lastmod import TEXT_CHANGED
from snapshotd.store.path_counts import POSTGRES_PATH_COUNTS
from snapshotd.store.profiles import POSTGRES_PROFILES
from snapshotd.store.query_params import PRINTS_AND_PARAMS
from snapshotd.store.sites import (
    EXPIRE_AFTER_FLOOR,
    POSTGRES_NOTIFIED_ROUNDS,
    SITE_TOKENS,
    SITES_TABLE,
)

__all__ = ["MIGRATIONS"]

# Each entry upgrades the schema by one version; never edit an entry once released.
MIGRATIONS: list[str] = [
    """
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
    COUNTERS_TABLE,
    SITES_TABLE,
    POSTGRES_RECENT_TABLE,
    CRAWLED_EXPIRY_INDEX,
    PRINTS_AND_PARAMS,
    POSTGRES_PATH_COUNTS,
    POSTGRES_NOTIFIED_ROUNDS,
    PATHS_FOUND,
    READINESS_LIMIT_COLUMN,
    SITE_TOKENS["postgres"],
    EXPIRE_AFTER_FLOOR["postgres"],
    POSTGRES_PROFILES,
    TEXT_CHANGED,
]
