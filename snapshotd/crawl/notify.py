"""What a crawl job's end sends (SPEC 7.2): a POST to the site's ``notify_webhook`` with the
job's JSON, and a mail to its ``notify_email`` through the configured SMTP server,
Crawlbot's way.

Invariants:
- a job's end is notified once a round: the round is claimed in the store before the webhook
  is called (:func:`snapshotd.store.job_state.claim_notification`, one compare-and-set), so of the
  crawlers of every host, each checking at its maintenances, one sends it, and it is not
  sent again after a restart;
- the webhook's address is judged by the address policy like every fetch the process makes:
  only public addresses, unless ``[server] notify_private`` lets the operator's own private
  or loopback addresses through;
- the SMTP server is the operator's own (``[server] smtp``), reached as configured;
- a failed call or mail (an error status, no answer) is tried again after 1, 4 and 16 s,
  then given up with one log line; a refused webhook is not tried again;
- a notification refused or given up is recorded for its round (``notificationError`` of the
  job, which then says ``sentJobDoneNotification`` 0); a webhook the policy will never let
  through is refused when it is set (:func:`snapshotd.api.sites.site_from_body`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from email.message import EmailMessage
from typing import Any
from urllib.parse import unquote, urlsplit

import aiosmtplib
import httpx

from snapshotd.config.settings import Settings, SiteSettings
from snapshotd.crawl.job_json import V3, describe_job
from snapshotd.crawl.rounds import ROUND_OVER
from snapshotd.http_text.urls import redact
from snapshotd.net.fetch import Fetcher, Refused, describe
from snapshotd.observe.minute_counts import MinuteCounters
from snapshotd.sites.registry import SiteRegistry
from snapshotd.store.interface import Store
from snapshotd.store.job_state import (
    JobState,
    claim_notification,
    is_notified,
    job_state,
    record_notification_failure,
)

__all__ = ["Notifier"]

log = logging.getLogger("snapshotd.crawl.notify")

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
        minutes: MinuteCounters | None = None,
        http: Fetcher | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.sites = sites
        self.minutes = minutes  # this process's capture counts, added to a job when told
        self.retries = tuple(retries)
        self.http = http or Fetcher()  # the tests' may resolve names from a table
        self._sending: set[asyncio.Task[None]] = set()
        host = "127.0.0.1" if settings.host in ("", "0.0.0.0", "::") else settings.host
        self.v3_url = f"http://{host}:{settings.port}{V3}"

    async def check(self) -> None:
        """Notify every site with a webhook whose round is over and was not notified."""
        for site in self.sites.sites:
            if not (site.notify_webhook or site.notify_email):
                continue
            created = self.sites.created.get(site.name, 0.0)
            state = await job_state(self.store, site.name, created)
            if await is_notified(self.store, site.name, state):
                continue
            job = await describe_job(
                self.store, site, paused=self.sites.is_paused(site.name), created=created,
                v3_url=self.v3_url, minutes=self.minutes,
            )
            if job["jobStatus"]["status"] not in ROUND_OVER:
                continue
            # The round that was read, even when a new one began meanwhile.
            if not await claim_notification(self.store, site.name, state):
                continue  # notified by another process or host
            job["sentJobDoneNotification"] = 1
            sends = [self._call(site, job, state)] if site.notify_webhook else []
            if site.notify_email:
                sends.append(self._mail(site, job, state))
            for send in sends:
                task = asyncio.create_task(send, name="notify")
                self._sending.add(task)
                task.add_done_callback(self._sending.discard)

    async def _retried(
        self, what: str, site: SiteSettings, attempt: Any, state: JobState | None
    ) -> None:
        """``attempt()`` until it answers None (done), with the retry delays; it answers
        why it failed otherwise, and the last reason is recorded for the round's job. Refused
        raises out: no retry."""
        why = ""
        for delay in (0.0, *self.retries):
            await asyncio.sleep(delay)
            why = await attempt()
            if why is None:
                return
        log.warning("%s failed site=%s: %s", what, site.name, why)
        await self._failed(site, state, f"{what} failed: {why}")

    async def _failed(self, site: SiteSettings, state: JobState | None, error: str) -> None:
        """The job's record of why its round's end could not be told."""
        if state is None or self.store is None:
            return
        try:
            await record_notification_failure(self.store, site.name, state, error)
        except Exception as exc:  # the store away: the log line above says it already
            log.warning("could not record the failure site=%s: %s", site.name, exc)

    async def _call(
        self, site: SiteSettings, job: dict[str, Any], state: JobState | None = None
    ) -> None:
        headers = {"X-Crawl-Name": site.name, "X-Crawl-Status": job["jobStatus"]["message"]}
        url = site.notify_webhook
        parts = urlsplit(url)
        # The webhook's own origin is let through only when the operator allows private ones.
        origin = f"{parts.scheme}://{parts.netloc}" if self.settings.notify_private else ""

        async def attempt() -> str | None:
            try:
                answer = await self.http.post_json(url, job, origin=origin, headers=headers)
            except httpx.HTTPError as exc:
                if isinstance(exc, Refused):
                    raise
                return describe(exc)
            return None if answer.is_success else f"answered {answer.status_code}"

        try:
            await self._retried("webhook", site, attempt, state)
        except Refused as exc:
            log.warning("webhook not called site=%s url=%s: %s", site.name, redact(url), exc)
            await self._failed(site, state, f"webhook not called: {exc}")
            return
        log.debug("webhook done site=%s", site.name)

    async def _mail(
        self, site: SiteSettings, job: dict[str, Any], state: JobState | None = None
    ) -> None:
        smtp = urlsplit(self.settings.smtp)
        if not smtp.hostname:
            log.warning("no mail sent site=%s: no [server] smtp in the config", site.name)
            return
        message = EmailMessage()
        message["From"] = self.settings.smtp_from
        message["To"] = site.notify_email
        message["Subject"] = f"snapshotd crawl job {site.name}: {job['jobStatus']['message']}"
        message.set_content(
            f"The crawl job {site.name} has ended: {job['jobStatus']['message']}.\n"
            f"Pages kept: {job['objectsFound']}; URLs found: {job['urlsHarvested']}.\n\n"
            + json.dumps(job, indent=2)
        )

        async def attempt() -> str | None:
            try:
                await aiosmtplib.send(
                    message, hostname=smtp.hostname, port=smtp.port or 25,
                    username=unquote(smtp.username) if smtp.username else None,
                    password=unquote(smtp.password) if smtp.password else None,
                    use_tls=smtp.scheme == "smtps", timeout=30,
                )
            except (aiosmtplib.SMTPException, OSError) as exc:
                return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
            return None

        await self._retried("mail", site, attempt, state)

    async def aclose(self) -> None:
        for task in list(self._sending):
            task.cancel()
        await asyncio.gather(*self._sending, return_exceptions=True)
        await self.http.aclose()
