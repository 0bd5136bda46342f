"""A scratch PostgreSQL schema for a benchmark: created on entry, dropped on exit."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator

import asyncpg


@contextlib.asynccontextmanager
async def scratch_schema(url: str, prefix: str) -> AsyncIterator[str]:
    """A new schema on ``url``'s server; yields a URL whose tables live in it."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(url)
    try:
        await admin.execute(f"CREATE SCHEMA {name}")
        try:
            yield f"{url}{'&' if '?' in url else '?'}search_path={name}"
        finally:
            await admin.execute(f"DROP SCHEMA {name} CASCADE")
    finally:
        await admin.close()
