"""What a crawl job's end sends (SPEC 7.2): a POST to the site's ``notify_webhook`` with the
job's JSON, Crawlbot's way.

Invariants:
- a job's end is notified once a round: the round it ended is recorded in the store before
  the webhook is called, so one crawler (one per host) checks at each of its maintenances
  and the notification is not sent again after a restart of the process;
- the webhook's address is judged by the address policy like every fetch the process makes:
  only public addresses, unless ``[server] notify_private`` lets the operator's own private
  or loopback addresses through;
- a failed call (an error status, a refusal, no answer) is tried again after 1, 4 and 16 s,
  then given up with one log line.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from urllib.parse import urlsplit

import httpx

from snapshotd.config import Settings, SiteSettings
from snapshotd.fetch import Fetcher, Refused, describe
from snapshotd.jobs import ENDED, describe_job, notified, round_start, set_notified
from snapshotd.sites import SiteRegistry
from snapshotd.store.base import Store

__all__ = ["Notifier"]

log = logging.getLogger("snapshotd.notify")

RETRIES = (1.0, 4.0, 16.0)


class Notifier:
    """Sends the notifications of the jobs that have ended, once a round each."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        sites: SiteRegistry,
        *,
        retries: Sequence[float] = RETRIES,
    ) -> None:
        self.settings = settings
        self.store = store
        self.sites = sites
        self.retries = tuple(retries)
        self.http = Fetcher()
        self._sending: set[asyncio.Task[None]] = set()
        host = "127.0.0.1" if settings.host in ("", "0.0.0.0", "::") else settings.host
        self.base_url = f"http://{host}:{settings.port}"

    async def check(self) -> None:
        """Notify every site with a webhook whose job has ended and was not notified."""
        for site in self.sites.sites:
            if not site.notify_webhook:
                continue
            started = await round_start(
                self.store, site.name, self.sites.created.get(site.name, 0.0)
            )
            if await notified(self.store, site.name, started):
                continue
            job = await describe_job(self.store, self.sites, site, self.base_url)
            if job["jobStatus"]["status"] not in ENDED:
                continue
            await set_notified(self.store, site.name, started)
            job["sentJobDoneNotification"] = 1
            task = asyncio.create_task(self._send(site, job), name="notify")
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _send(self, site: SiteSettings, job: dict[str, object]) -> None:
        status = job["jobStatus"]
        assert isinstance(status, dict)
        headers = {"X-Crawl-Name": site.name, "X-Crawl-Status": str(status["message"])}
        url = site.notify_webhook
        parts = urlsplit(url)
        # The webhook's own origin is let through only when the operator allows private ones.
        origin = f"{parts.scheme}://{parts.netloc}" if self.settings.notify_private else ""
        why = ""
        for delay in (0.0, *self.retries):
            await asyncio.sleep(delay)
            try:
                answer = await self.http.post_json(url, job, origin=origin, headers=headers)
            except Refused as exc:
                log.warning("webhook not called site=%s url=%s: %s", site.name, url, exc)
                return
            except httpx.HTTPError as exc:
                why = describe(exc)
                continue
            if answer.is_success:
                log.info("webhook called site=%s status=%s", site.name, status["status"])
                return
            why = f"answered {answer.status_code}"
        log.warning("webhook failed site=%s url=%s: %s", site.name, url, why)

    async def aclose(self) -> None:
        for task in list(self._sending):
            task.cancel()
        await asyncio.gather(*self._sending, return_exceptions=True)
        await self.http.aclose()
