"""Storage engines behind one ``Store`` interface, and which of their errors say the store
cannot be used now (:func:`unavailable`): what the API answers with a 503 and the proxy by
passing bots through, instead of treating it as a fault of the request."""

from __future__ import annotations

import sqlite3
import sys

from snapshotd.store.interface import STATES, PathRecord, SiteRow, Snapshot, Store, StoreError
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
    "raised_by_stores",
    "unavailable",
]

# SQLite's primary result codes that are about the database's file, disk or locks, not the
# statement: BUSY, LOCKED, NOMEM, READONLY, IOERR, CORRUPT, FULL, CANTOPEN, PROTOCOL, NOTADB.
_SQLITE_UNAVAILABLE = frozenset({5, 6, 7, 8, 10, 11, 13, 14, 15, 26})


def is_postgres(db: str) -> bool:
    return db.startswith(("postgresql://", "postgres://"))


def open_store(db: str) -> Store:
    """The store a ``db`` setting names (not yet opened)."""
    if is_postgres(db):
        from snapshotd.store.postgres import PostgresStore

        return PostgresStore(db)
    return SQLiteStore(db)


def unavailable(exc: BaseException) -> bool:
    """Whether ``exc``, raised by a store's method, says the store cannot be used now (its
    server gone, refusing or shutting down, its disk full or unwritable, its database locked
    too long) rather than that the call itself was wrong."""
    if isinstance(exc, (OSError, TimeoutError, StoreError)):
        return True
    if isinstance(exc, sqlite3.Error):
        return (getattr(exc, "sqlite_errorcode", 0) & 0xFF) in _SQLITE_UNAVAILABLE
    if "asyncpg" in sys.modules:  # a PostgreSQL store is in use
        import asyncpg

        return isinstance(
            exc,
            (
                asyncpg.PostgresConnectionError,  # class 08: the connection
                asyncpg.InsufficientResourcesError,  # class 53: disk full, too many clients
                asyncpg.OperatorInterventionError,  # class 57: shutting down, cannot connect
                asyncpg.PostgresSystemError,  # class 58: I/O error
                asyncpg.ReadOnlySQLTransactionError,  # a standby after a failover
            ),
        )
    return False


def raised_by_stores() -> tuple[type[Exception], ...]:
    """The exception types among which :func:`unavailable` finds its yes (PostgreSQL's once a
    PostgreSQL store was made)."""
    found: tuple[type[Exception], ...] = (OSError, TimeoutError, StoreError, sqlite3.Error)
    if "asyncpg" in sys.modules:
        import asyncpg

        found += (asyncpg.PostgresError,)
    return found
