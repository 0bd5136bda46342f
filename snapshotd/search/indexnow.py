"""Telling search engines of a site's changes as they happen, by IndexNow (SPEC 5.5).

Invariants:
- a site is told nothing until it sets ``indexnow_key``; a page is told of when it appears,
  when its main text changes, or when it becomes 404 or 410 (:func:`indexnow_due`), never
  for a recapture that changed nothing;
- a site's URLs are sent in one ``POST`` of JSON ``{host, key, keyLocation, urlList}`` to its
  ``indexnow_endpoint``, at most :data:`MAX_URLS` URLs a POST and one POST a site each
  ``every`` seconds (the first after ``every`` s of gathering); a URL waiting is sent once
  however often it changed meanwhile; at most ``max_waiting`` URLs wait a site, the rest are
  dropped and counted;
- a POST that gets no answer, 429 or a 5xx is tried again after each of ``retries`` seconds,
  then given up; any other error status, or an address the policy refuses, is given up at once;
- the endpoint is reached through :class:`~snapshotd.net.fetch.Fetcher`, judged by the address
  policy as a public address (``[server] indexnow_private`` lets the operator's own private or
  loopback endpoint through);
- what happened is recorded per site in this process (:meth:`IndexNow.report`) and counted in
  ``snapshotd_indexnow_urls{result}``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import httpx

from snapshotd.config.settings import Settings, SiteSettings
from snapshotd.http_text.urls import redact
from snapshotd.net.fetch import Fetcher, Refused, describe
from snapshotd.observe.metrics import Metrics
from snapshotd.pages.fingerprints import Print

__all__ = ["MAX_URLS", "IndexNow", "indexnow_due", "key_location"]

log = logging.getLogger("snapshotd.search.indexnow")

MAX_URLS = 10_000
EVERY = 10.0
RETRIES = (1.0, 4.0, 16.0, 64.0)
MAX_WAITING = 100_000
GONE = (404, 410)


def key_location(site: SiteSettings) -> str:
    """The path of the site's IndexNow key file ("" when it has no key)."""
    return f"/{site.indexnow_key}.txt" if site.indexnow_key else ""


def indexnow_due(
    before_status: int | None,
    before: Print | None,
    status: int,
    after: Print | None,
    *,
    listed: bool,
) -> bool:
    """Whether a stored capture is news: the path now 404 or 410 and not before; or now a page
    the site's sitemap lists whose main text is new (``before``: the print of its snapshot
    before, None when it had none)."""
    if status in GONE:
        return before_status not in GONE
    if not listed or after is None:
        return False
    return before is None or before.text_hash != after.text_hash


class IndexNow:
    """The IndexNow sender of one process: each site's waiting URLs and its record."""

    def __init__(
        self,
        settings: Settings,
        *,
        metrics: Metrics | None = None,
        http: Fetcher | None = None,
        every: float = EVERY,
        retries: Sequence[float] = RETRIES,
        max_waiting: int = MAX_WAITING,
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.http = http or Fetcher()
        self.every = every
        self.retries = tuple(retries)
        self.max_waiting = max_waiting
        self._sites: dict[str, SiteSettings] = {}
        self._waiting: dict[str, dict[str, None]] = {}  # insertion-ordered sets of URLs
        self._senders: dict[str, asyncio.Task[None]] = {}
        self._records: dict[str, dict[str, Any]] = {}

    def tell(self, site: SiteSettings, path: str) -> None:
        """Queue a path of ``site`` to be told of (nothing when the site has no key)."""
        if not site.indexnow_key:
            return
        self._sites[site.name] = site
        waiting = self._waiting.setdefault(site.name, {})
        url = site.public_base + path
        if url not in waiting and len(waiting) >= self.max_waiting:
            self._count(site.name, "dropped", 1)
            return
        waiting[url] = None
        self._record(site.name)["waiting"] = len(waiting)
        sender = self._senders.get(site.name)
        if sender is None or sender.done():  # done: its loop saw nothing waiting, and ended
            task = asyncio.create_task(self._send_loop(site.name), name="indexnow")
            self._senders[site.name] = task
            task.add_done_callback(functools.partial(self._sent, site.name))

    def _sent(self, name: str, task: asyncio.Task[None]) -> None:
        if self._senders.get(name) is task:
            del self._senders[name]

    def report(self, site: str) -> dict[str, Any]:
        """The site's record: URLs sent, failed, dropped and waiting, POSTs, the last POST's
        time, status and error."""
        return dict(self._record(site))

    def _record(self, site: str) -> dict[str, Any]:
        return self._records.setdefault(site, {
            "sent": 0, "failed": 0, "dropped": 0, "waiting": 0, "posts": 0,
            "last_post_at": None, "last_status": None, "last_error": None,
        })

    def _count(self, site: str, result: str, n: int) -> None:
        self._record(site)[result] += n
        if self.metrics is not None:
            self.metrics.indexnow_urls.labels(result).inc(n)

    async def _send_loop(self, name: str) -> None:
        while self._waiting.get(name):
            await asyncio.sleep(self.every)
            waiting = self._waiting[name]
            batch = list(waiting)[:MAX_URLS]
            for url in batch:
                del waiting[url]
            site = self._sites[name]
            record = self._record(name)
            record["waiting"] = len(waiting)
            if site.indexnow_key:
                error = await self._post(site, batch)
                record.update(posts=record["posts"] + 1, last_post_at=time.time(),
                              last_error=error)
                self._count(name, "failed" if error else "sent", len(batch))

    async def _post(self, site: SiteSettings, urls: list[str]) -> str | None:
        """POST one batch, tried again as the module says; None when it was taken, else
        why not."""
        body = {
            "host": site.request_host,
            "key": site.indexnow_key,
            "keyLocation": site.public_base + key_location(site),
            "urlList": urls,
        }
        endpoint = site.indexnow_endpoint
        parts = urlsplit(endpoint)
        origin = f"{parts.scheme}://{parts.netloc}" if self.settings.indexnow_private else ""
        why = ""
        for delay in (0.0, *self.retries):
            await asyncio.sleep(delay)
            try:
                answer = await self.http.post_json(endpoint, body, origin=origin)
            except Refused as exc:
                why = str(exc)
                break
            except httpx.HTTPError as exc:
                why = describe(exc)
                continue
            self._record(site.name)["last_status"] = answer.status_code
            if answer.is_success:
                return None
            why = f"answered {answer.status_code}"
            if answer.status_code != 429 and answer.status_code < 500:
                break
        log.warning(
            "indexnow failed site=%s endpoint=%s urls=%d: %s",
            site.name, redact(endpoint), len(urls), why,
        )
        return why

    async def aclose(self) -> None:
        for task in list(self._senders.values()):
            task.cancel()
        await asyncio.gather(*self._senders.values(), return_exceptions=True)
        await self.http.aclose()
