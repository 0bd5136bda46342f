"""What a capture slot pauses at Fetch's request stage, and how it sends each request on.

Invariants:

- Requests of the ``block_resources`` types are paused everywhere and failed.
- No document or data answer crosses from one capture to the next. Only a URL the context has
  asked for before can be in its HTTP cache, so only such a URL is paused when asked for as a
  document or data (``NEVER_CACHED``), and sent on with ``Cache-Control: no-cache``: a
  page's first capture costs no pause. Static assets are never marked, and may come from the
  cache as their origin's headers allow. Past ``REMEMBERED`` URLs the slot empties its cache
  and the list (:meth:`Pauses.forget`).
- While the site has ``custom_headers``, every request to its origin is paused and sent on
  with them.
- While the requests' ``User-Agent`` header is to differ from the page's user agent
  (:attr:`Pauses.agent`), every document and every request of kind ``Other`` (a worker's
  script) is paused and sent on with it: Chromium puts the page's user agent on those, whatever
  the context's extra headers say, and its extra headers on every other request.
"""

from __future__ import annotations

import re
from typing import Any

from snapshotd.net.address_policy import is_origin_url

__all__ = ["NEVER_CACHED", "REMEMBERED", "Pauses"]

# Playwright's resource type names, as the DevTools protocol spells them.
_CDP_TYPES = {
    "xhr": "XHR",
    "texttrack": "TextTrack",
    "eventsource": "EventSource",
    "websocket": "WebSocket",
    "signedexchange": "SignedExchange",
    "cspviolationreport": "CSPViolationReport",
}
# Documents and data, in Playwright's names: the requests the HTTP cache never answers.
NEVER_CACHED = frozenset(
    {"document", "xhr", "fetch", "eventsource", "other", "ping", "media", "cspviolationreport"}
)
_NEVER_CACHED_CDP = sorted(_CDP_TYPES.get(t, t.capitalize()) for t in NEVER_CACHED)
# How many URLs a context remembers before its HTTP cache is emptied.
REMEMBERED = 256
# The kinds of request Chromium sends with the page's user agent, not the extra headers'.
_PAGE_AGENT = ("Document", "Other")
# With it, Chromium fetches a request from the origin whatever its HTTP cache holds.
_NO_CACHE = {"Cache-Control": "no-cache", "Pragma": "no-cache"}


def _cdp_type(playwright_type: str) -> str:
    return _CDP_TYPES.get(playwright_type, playwright_type.capitalize())


def _pattern(url: str) -> str:
    """A Fetch URL pattern matching ``url`` alone (``*`` and ``?`` are its wildcards)."""
    return re.sub(r"([\\*?])", r"\\\1", url)


def _over(headers: dict[str, str], extra: dict[str, str]) -> dict[str, str]:
    """``headers`` with ``extra`` over them (whatever the case of their names)."""
    replaced = {k.lower() for k in extra}
    return {**{k: v for k, v in headers.items() if k.lower() not in replaced}, **extra}


def _with(headers: dict[str, str], extra: dict[str, str]) -> list[dict[str, str]]:
    """A request's headers with ``extra`` over them, as Fetch takes them."""
    return [{"name": k, "value": v} for k, v in _over(headers, extra).items()]


class Pauses:
    """One browser context's pauses: what Fetch is told to pause, and each pause's answer."""

    def __init__(self, block_resources: tuple[str, ...] | list[str]) -> None:
        self.blocked = frozenset(_cdp_type(t) for t in block_resources)
        self.origin = ""  # the site's
        self.headers: dict[str, str] = {}  # the site's custom_headers, on its own requests
        self.agent = ""  # the User-Agent header every request carries; "": the page's
        # URLs (no fragment) the context asked for since its HTTP cache was last empty.
        self._data_urls: set[str] = set()
        self._asset_urls: set[str] = set()

    def remember(self, url: str, resource_type: str) -> None:
        """The context asked for ``url`` as a ``resource_type`` (Playwright's name). A blocked
        request never reaches the cache and is not remembered."""
        if _cdp_type(resource_type) in self.blocked:
            return
        url = url.partition("#")[0]
        (self._data_urls if resource_type in NEVER_CACHED else self._asset_urls).add(url)

    @property
    def full(self) -> bool:
        """More URLs remembered than ``REMEMBERED``: time to empty the cache."""
        return len(self._data_urls) + len(self._asset_urls) > REMEMBERED

    def forget(self) -> None:
        """The context's HTTP cache was emptied."""
        self._data_urls.clear()
        self._asset_urls.clear()

    def patterns(self) -> list[dict[str, str]]:
        """Fetch's patterns: the blocked kinds, the remembered URLs (those of assets only when
        asked for as documents or data), and the site's origin while it has custom headers."""
        stage = {"requestStage": "Request"}
        patterns = [{"urlPattern": "*", "resourceType": k, **stage} for k in sorted(self.blocked)]
        patterns += [{"urlPattern": _pattern(u), **stage} for u in sorted(self._data_urls)]
        patterns += [
            {"urlPattern": _pattern(u), "resourceType": k, **stage}
            for u in sorted(self._asset_urls - self._data_urls)
            for k in _NEVER_CACHED_CDP
        ]
        if self.headers:
            patterns.append({"urlPattern": self.origin + "/*", **stage})
        if self.agent:
            patterns += [{"urlPattern": "*", "resourceType": k, **stage} for k in _PAGE_AGENT]
        return patterns

    def answer(self, event: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """The Fetch command and its parameters for a ``Fetch.requestPaused`` event."""
        request = {"requestId": event["requestId"]}
        kind = str(event.get("resourceType"))
        if kind in self.blocked:
            return "Fetch.failRequest", {**request, "errorReason": "BlockedByClient"}
        url = event["request"]["url"]
        extra = {"User-Agent": self.agent} if self.agent else {}
        if is_origin_url(url, self.origin):
            extra = _over(extra, self.headers)
        if kind.lower() in NEVER_CACHED:
            extra = _over(extra, _NO_CACHE)
        headers = _with(event["request"]["headers"], extra)
        return "Fetch.continueRequest", {**request, "headers": headers}
