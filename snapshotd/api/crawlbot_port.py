"""Crawlbot's API on a port of its own (``[server] crawlbot_port``, SPEC 7.2): Crawlbot's
paths at the root, so a Crawlbot script changes its host and its token, nothing else.

Invariants:
- every request taken on that port is this module's, whatever its Host: Crawlbot's three
  endpoints, ``/v3/crawl``, ``/v3/crawl/data`` and ``/v3/crawl/download/<file>``, are the
  API's ``/_snapshotd/v3/...`` (the same handlers, tokens and answers); anything else is
  404 in Diffbot's error form, and nothing of the proxy, the rest of the API or the
  console is reached there;
- a path's leading slashes count as one (a client whose base URL ends in ``/`` asks for
  ``//v3/...``, as Diffbot's own Python client does for downloads);
- the API is told the endpoints' root (:data:`ROOT`), so the links a job's JSON gives
  (``downloadJson``, ``downloadUrls``) are on this port too.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from snapshotd.api.shared import PREFIX, error_response

__all__ = ["ROOT", "CrawlbotPort", "crawlbot_root"]

# The scope key holding the path before ``/v3`` under which Crawlbot's endpoints were asked.
ROOT = "snapshotd.crawlbot_root"
_ENDPOINTS = ("/v3/crawl", "/v3/crawl/data")
_DOWNLOADS = "/v3/crawl/download/"


def crawlbot_root(scope: Scope) -> str:
    """Where the request found Crawlbot's endpoints: ``/_snapshotd`` on serve's port, the
    root on ``crawlbot_port``."""
    return str(scope.get(ROOT, PREFIX))


class CrawlbotPort:
    """The application of ``crawlbot_port``: Crawlbot's endpoints of ``api``."""

    def __init__(self, api: ASGIApp) -> None:
        self.api = api

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        path = "/" + scope["path"].lstrip("/")
        if path not in _ENDPOINTS and not (
            path.startswith(_DOWNLOADS) and "/" not in path.removeprefix(_DOWNLOADS)
        ):
            response = error_response(
                404, "no such endpoint: this port serves Crawlbot's /v3/crawl, "
                "/v3/crawl/data and /v3/crawl/download/", error_code=True,
            )
            await response(scope, receive, send)
            return
        raw = b"/" + (scope.get("raw_path") or scope["path"].encode("utf-8")).lstrip(b"/")
        await self.api({
            **scope, "path": PREFIX + path, "raw_path": PREFIX.encode() + raw, ROOT: "",
        }, receive, send)
