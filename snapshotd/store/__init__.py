"""Storage engines behind one ``Store`` interface."""

from __future__ import annotations

from snapshotd.store.base import STATES, PathRecord, SiteRow, Snapshot, Store, StoreError
from snapshotd.store.sqlite import SQLiteStore

__all__ = [
    "STATES",
    "PathRecord",
    "Snapshot",
    "SQLiteStore",
    "SiteRow",
    "Store",
    "StoreError",
    "is_postgres",
    "open_store",
]


def is_postgres(db: str) -> bool:
    return db.startswith(("postgresql://", "postgres://"))


def open_store(db: str) -> Store:
    """The store a ``db`` setting names (not yet opened)."""
    if is_postgres(db):
        from snapshotd.store.postgres import PostgresStore

        return PostgresStore(db)
    return SQLiteStore(db)
