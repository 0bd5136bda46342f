"""robots.txt of each site's origin, fetched under the address policy and read with protego.

Invariants:
- ``allowed`` never does I/O: it answers from the rules last fetched, and allows everything
  for a site whose robots.txt has not been read yet or is absent (4xx);
- a robots.txt that cannot be fetched (5xx, network error) keeps the rules read before, if
  any, and is tried again after ``retry`` seconds; a good one is kept for ``ttl`` seconds;
- only the origin's own ``/robots.txt`` is fetched, at most 500 KiB of it (as Google reads).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx
from protego import Protego

from snapshotd.config.settings import SiteSettings
from snapshotd.http_text.urls import split_site_path
from snapshotd.net.fetch import Fetcher, describe, read_body

__all__ = ["ROBOTS_USER_AGENT", "RobotsCache"]

log = logging.getLogger("snapshotd.crawler")

ROBOTS_USER_AGENT = "snapshotd"
MAX_ROBOTS_BYTES = 500 * 1024


@dataclass
class _Entry:
    parser: Protego | None  # None: everything allowed
    next_fetch: float


class RobotsCache:
    """The robots.txt rules of every site, refreshed when they expire."""

    def __init__(
        self,
        client: Fetcher,
        *,
        clock: Callable[[], float] = time.time,
        ttl: float = 86400.0,
        retry: float = 300.0,
        user_agent: str = ROBOTS_USER_AGENT,
    ) -> None:
        self.client = client
        self.clock = clock
        self.ttl = ttl
        self.retry = retry
        self.user_agent = user_agent
        self._entries: dict[str, _Entry] = {}

    def due(self, site: SiteSettings) -> bool:
        entry = self._entries.get(site.name)
        return entry is None or entry.next_fetch <= self.clock()

    async def refresh(self, site: SiteSettings, *, force: bool = False) -> None:
        """Fetch the site's robots.txt if it was never read or has expired."""
        if not force and not self.due(site):
            return
        url = site.origin.rstrip("/") + "/robots.txt"
        previous = self._entries.get(site.name)
        kept = previous.parser if previous else None
        now = self.clock()
        try:
            async with self.client.stream(url, origin=site.origin) as response:
                body = b""
                if response.status_code == 200:  # its first MAX_ROBOTS_BYTES, as RFC 9309 allows
                    body, _ = await read_body(response, MAX_ROBOTS_BYTES)
        except httpx.HTTPError as exc:
            log.warning("robots.txt unreachable site=%s: %s", site.name, describe(exc))
            self._entries[site.name] = _Entry(kept, now + self.retry)
            return
        if response.status_code >= 500:
            log.warning("robots.txt answered %d site=%s", response.status_code, site.name)
            self._entries[site.name] = _Entry(kept, now + self.retry)
            return
        if response.status_code != 200:
            log.info("robots.txt absent (%d) site=%s", response.status_code, site.name)
            self._entries[site.name] = _Entry(None, now + self.ttl)
            return
        self._entries[site.name] = _Entry(
            Protego.parse(body.decode("utf-8", "replace")), now + self.ttl
        )
        log.info("robots.txt read site=%s bytes=%d", site.name, len(body))

    def allowed(self, site: SiteSettings, path: str) -> bool:
        """Whether robots.txt lets the crawler fetch a site path (``#!`` part ignored)."""
        entry = self._entries.get(site.name)
        if entry is None or entry.parser is None:
            return True
        base, query, _fragment = split_site_path(path)
        target = site.origin.rstrip("/") + base + (f"?{query}" if query else "")
        return bool(entry.parser.can_fetch(target, self.user_agent))
