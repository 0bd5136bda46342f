"""Read-your-write across processes for the API: before a call of the JSON API or of
Crawlbot's endpoints is handled, the process reads the sites again (``SiteRegistry.fresh``,
shared by concurrent calls), so a write made through any process's API (a site created, paused,
resumed, its token rotated) is what the next call shows, whichever process answers it.

Invariants:
- only calls that passed the token check cost a read; bots' requests, the render endpoint,
  health and the console's files never do;
- a store that cannot be read now leaves the sites as last read (one log line now and then),
  and the call goes on: what it asks of the store then answers for itself (503).
"""

from __future__ import annotations

import logging

from starlette.types import ASGIApp, Receive, Scope, Send

from snapshotd.observe import logs
from snapshotd.sites.registry import SiteRegistry

__all__ = ["FreshSites"]

log = logging.getLogger("snapshotd.api")

# The paths whose calls read the sites fresh: the JSON API and Crawlbot's endpoints.
FRESH_PREFIXES = ("/_snapshotd/api/v1/", "/_snapshotd/v3/")


class FreshSites:
    """ASGI middleware: the sites read again before each call under ``FRESH_PREFIXES``."""

    def __init__(self, app: ASGIApp, sites: SiteRegistry) -> None:
        self.app = app
        self.sites = sites

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith(FRESH_PREFIXES):
            try:
                await self.sites.fresh()
            except Exception as exc:
                logs.throttled(log, logging.WARNING, "could not read sites: %s", exc)
        await self.app(scope, receive, send)
