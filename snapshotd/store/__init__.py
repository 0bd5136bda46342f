"""Storage engines behind one ``Store`` interface."""

from __future__ import annotations

from snapshotd.config import ConfigError
from snapshotd.store.base import STATES, PathRecord, Snapshot, Store
from snapshotd.store.sqlite import SQLiteStore

__all__ = ["STATES", "PathRecord", "Snapshot", "SQLiteStore", "Store", "open_store"]


def open_store(db: str) -> Store:
    """The store a ``db`` setting names (not yet opened)."""
    if db.startswith(("postgresql://", "postgres://")):
        where = db.split("@")[-1]
        raise ConfigError(f"db: the PostgreSQL store is not part of this build ({where})")
    return SQLiteStore(db)
