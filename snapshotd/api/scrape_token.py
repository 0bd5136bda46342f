"""The metrics token: a read-only token for ``/_snapshotd/metrics`` alone, kept in the store
so a Prometheus scrape survives restarts (the token ``serve`` draws when none is configured
changes on every start).

Invariants:
- the store keeps only the token's SHA-256 (meta key :data:`KEY`), never the token: it is
  shown once, when made (``serve``'s first start logs it; ``snapshotd metrics-token``
  prints a new one);
- of several processes or hosts making it at once, one does (``replace_meta`` from unset);
  the others take that one;
- it opens ``GET /_snapshotd/metrics`` and nothing else; a rotated token stops working in
  every process within :data:`REREAD` seconds;
- a given token is compared with the stored digest in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable

from snapshotd.store.interface import Store

KEY = "metrics-token-sha256"
REREAD = 5.0


def digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


async def make(store: Store, *, rotate: bool = False) -> str | None:
    """A new metrics token, stored; with ``rotate`` it replaces the one there. Without it,
    None when there is one already (made by this call's rival, or before)."""
    token = secrets.token_urlsafe(32)
    if rotate:
        await store.set_meta(KEY, digest(token))
        return token
    return token if await store.replace_meta(KEY, None, digest(token)) else None


class ScrapeToken:
    """Checks a token against the stored digest, read again every :data:`REREAD` seconds."""

    def __init__(self, store: Store, clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.clock = clock
        self._digest: str | None = None
        self._read_at = -REREAD

    async def matches(self, token: str) -> bool:
        now = self.clock()
        if now - self._read_at >= REREAD:
            self._digest = await self.store.get_meta(KEY)
            self._read_at = now
        stored = self._digest
        return stored is not None and hmac.compare_digest(digest(token), stored)
