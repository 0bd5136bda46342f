"""A bot's answer: what the proxy sends a snapshot request (a bot's, or one with
``_escaped_fragment_``), from admission's decision to the access line (SPEC section 3).
:class:`BotAnswers` is the part of :class:`~snapshotd.proxy.handler.Proxy` that answers them;
where a request goes is the handler's.

Snapshot answers fail open: when no snapshot can be had in time, the origin's own response
goes out, marked ``BYPASS``. Requests of the SEO4Ajax face
(:mod:`snapshotd.proxy.seo4ajax_face`) take the same way, found by their token, and get its
503 instead of the origin's page.

Floods are bounded: a miss for a path the store does not know adds it only within the site's
``max_pages`` and ``new_paths_per_minute`` (:class:`~snapshotd.proxy.bounds.NewPaths`), and
only while a miss place is free (``CaptureService.start_miss``); otherwise the bot gets
``BYPASS`` at once and nothing is queued or stored. Every refusal is counted; the log gets
a line now and then. A trusted crawler's new path
(:mod:`snapshotd.crawlers.verification.claims`) is queued even when no render starts now; a
path queued but not had in time gets ``miss_answer``: 503 (``RETRY``) or origin.

Memory per snapshot, whatever the number of clients: concurrent requests for one snapshot
share one store read and one ``Snapshot`` object, the in-process cache holds at most
``max_bytes`` of ``Snapshot.footprint`` (:mod:`snapshotd.proxy.snapshots`), and a body goes
out in pieces of ``CHUNK`` bytes (decompressed piece by piece when large), so the server's
flow control holds back each slow client after a piece rather than after the whole body.

A request is answered by one version of its site (a
:class:`~snapshotd.sites.view.SiteView`: its settings, rules, bots and pause), taken once
before anything is awaited and held to the end, whatever the registry reads meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import zlib
from collections.abc import Generator, MutableMapping
from typing import Any

from starlette.types import Receive, Scope, Send

from snapshotd.capture.service import CaptureService
from snapshotd.config.settings import SiteSettings
from snapshotd.crawlers.client_address import TrustedProxies
from snapshotd.crawlers.devices import PROFILE_NAMES, served_profile
from snapshotd.crawlers.verification import Verifier
from snapshotd.crawlers.verification.claims import Claims, Who, after_refusal
from snapshotd.observe import logs
from snapshotd.observe.metrics import Metrics
from snapshotd.proxy.bounds import NewPaths, RefusalLog
from snapshotd.proxy.passthrough import Upstream
from snapshotd.proxy.passthrough import send_text as _send_simple
from snapshotd.proxy.seo4ajax_face import unavailable
from snapshotd.proxy.snapshots import SnapshotCache, rule_answer, snapshot_answer
from snapshotd.sites.admission import Decision, Question, StoreFacts, admit, decide
from snapshotd.sites.registry import SiteRegistry
from snapshotd.sites.view import SiteView
from snapshotd.store import unavailable as store_unavailable
from snapshotd.store.interface import PRIORITY_EXPIRED, Snapshot, Store
from snapshotd.store.shared_read import SharedRead

__all__ = ["WORKER_HEADER", "BotAnswers", "access_log"]

# The proxy's log (the handler's name, which operators filter by).
log = logging.getLogger("snapshotd.proxy.handler")
# One line per snapshot request (bots and _escaped_fragment_, the render endpoint's too).
access_log = logging.getLogger("snapshotd.access")

# On snapshot answers and health checks, with the ``worker_header`` setting: the pid of the
# worker process that answered.
WORKER_HEADER = "x-snapshotd-worker"
# A crawler's page queued but not had in time, with miss_answer = "503".
RETRY_TEXT = "Service Unavailable: this page is being prepared, ask again later\n"
RETRY_HEADERS = [(b"retry-after", b"60"), (b"x-snapshotd-cache", b"RETRY")]


class _BotFacts(StoreFacts):
    """Admission's facts for a bot: snapshots through the cache, pages and new paths as
    :class:`NewPaths` counts them, its claim as the verifier judges it."""

    def __init__(self, proxy: BotAnswers, site: SiteSettings, who: Who, profile: str) -> None:
        super().__init__(proxy.store, site.name)
        self.proxy = proxy
        self.who = who
        self.profile = profile

    async def claim(self) -> str:
        return await self.proxy.claims.claim(self.who)

    async def snapshot(self, path: str) -> Snapshot | None:
        return await self.proxy._snapshot(self.site, path, self.profile)

    async def size(self) -> int:
        return await self.proxy.new_paths.size(self.site)

    async def new_lately(self) -> int:
        return self.proxy.new_paths.lately(self.site)


class BotAnswers:
    """The bot answers of one process: its snapshot cache, the counts behind the flood
    bounds, the claims of its requests. ``verifier``: the crawler verifier its claims ask
    (started and closed by whoever made it, :mod:`snapshotd.services`)."""

    def __init__(
        self,
        sites: SiteRegistry,
        store: Store,
        capture: CaptureService,
        upstream: Upstream,
        *,
        metrics: Metrics | None = None,
        processes: int = 1,
        verifier: Verifier | None = None,
    ) -> None:
        self.sites = sites
        self.store = store
        self.capture = capture
        self.upstream = upstream
        settings = sites.settings
        self.claims = Claims(
            verifier or Verifier(),
            TrustedProxies(settings.trusted_proxies, settings.forwarded_header),
            self._bot_family,
        )
        self.metrics = metrics or capture.metrics
        self.miss_wait = sites.settings.miss_wait
        self.cache = SnapshotCache()
        self._worker = (
            [(WORKER_HEADER.encode(), str(os.getpid()).encode())]
            if sites.settings.worker_header
            else []
        )
        self.new_paths = NewPaths(store, processes=processes)
        self.refusal_log = RefusalLog()
        self._read_snapshot: SharedRead[tuple[str, str, str], Snapshot | None] = SharedRead(
            self._read
        )

    def _bot_family(self, site: str, agent: str) -> str | None:
        """The bot-list entry ``agent`` matches by the site's current bots."""
        view = self.sites.view(site)
        return None if view is None else view.bots.family(agent)

    @staticmethod
    def profile_for(site: SiteSettings, headers: dict[str, str]) -> str:
        """The device profile a request is served
        (:func:`snapshotd.crawlers.devices.served_profile`)."""
        return served_profile(site.devices, headers.get("user-agent", ""))

    async def _snapshot(self, site: str, path: str, profile: str) -> Snapshot | None:
        """The snapshot of ``profile`` from the cache, else from the store: one read for
        concurrent asks."""
        key = (site, path, profile)
        snapshot = self.cache.get(key)
        if snapshot is not None:
            return snapshot
        return await self._read_snapshot(key)

    async def _read(self, key: tuple[str, str, str]) -> Snapshot | None:
        snapshot = await self.store.get_snapshot(*key)
        if snapshot is not None:
            self.cache.put(key, snapshot)
        return snapshot

    async def _pass(self, site: SiteSettings, scope: Scope, receive: Receive, send: Send) -> int:
        self.metrics.request("PASS")
        return await self.upstream.forward(site.origin, scope, receive, send)

    async def snapshot_request(
        self,
        view: SiteView,
        path: str,
        headers: dict[str, str],
        scope: Scope,
        receive: Receive,
        send: Send,
        *,
        fail_open: bool = True,
        profile: str | None = None,
    ) -> None:
        """Answer a bot's request for a site path (rules, then the store, then fail-open),
        then log one access line: bot, site, path, result, status and milliseconds. A fault
        before the answer starts (the store, a capture) fails open too: the bot gets the
        origin's page, marked ``BYPASS`` (without ``fail_open``, the SEO4Ajax face's 503).
        It is served the snapshot of ``profile``, by default the one its user agent gets
        (:meth:`profile_for`).

        ``scope`` must name the same path, as pass-through forwards it. ``view``: the site's
        settings, rules and bots, all of one version, which the whole answer goes by (the
        route's, or :meth:`SiteRegistry.view_of
        <snapshotd.sites.registry.SiteRegistry.view_of>` for a caller that holds the site's
        settings)."""
        site = view.settings
        started = time.monotonic()
        result, status = "BYPASS", 0  # what the answer is when this raises (fail-open)
        who = self.claims.who(site.name, headers, scope, site.verify_bots)
        claim = ""  # the claim admission asked, else as known now
        profile = profile or self.profile_for(site, headers)
        try:
            result, status, claim = await self._answer(
                view, path, headers, scope, receive, send, who, profile, fail_open
            )
        except Exception as exc:
            if store_unavailable(exc):  # every bot's request says it while the store is away
                logs.throttled(
                    log, logging.WARNING, "store unavailable, bots get the origin's page: %s", exc
                )
            else:
                log.warning("snapshot request failed, passing through path=%s error=%r", path, exc)
            result, status = await self._no_snapshot(site, scope, receive, send, fail_open)
        finally:
            ms = round((time.monotonic() - started) * 1000)
            claim = self._claim_said(claim, who, site)
            self._log_access(site, who, path, result, status, ms, claim)

    def _claim_said(self, asked: str, who: Who, site: SiteSettings) -> str:
        """The claim a request's access line says: the one admission asked, else the
        claim as known now (``pending`` while its look-up is under way)."""
        return asked or self.claims.now(who, site.verify_bots) or "pending"

    def _log_access(
        self, site: SiteSettings, who: Who, path: str, result: str, status: int, ms: int,
        claim: str,
    ) -> None:
        """The access line of a bot's request, and its count in the minute counters and the
        metrics (its claim by crawler family)."""
        bot = who.bot or "-"
        self.metrics.minutes.request(site.name, bot, path, result, status, ms)
        self.metrics.claim(site.name, who.bot, claim)
        logs.info(
            access_log,
            f"{bot} {site.name} {path} {result} {status or '-'} {ms}ms {claim} {who.client}",
            {
                "bot": bot, "site": site.name, "path": path, "result": result,
                "status": status or None, "ms": ms, "claim": claim, "client": who.client,
            },
        )

    async def _answer(
        self,
        view: SiteView,
        path: str,
        headers: dict[str, str],
        scope: Scope,
        receive: Receive,
        send: Send,
        who: Who,
        profile: str,
        fail_open: bool = True,
    ) -> tuple[str, int, str]:
        """The answer of :meth:`snapshot_request`: its result (``HIT``, ``STALE``, ``MISS``,
        ``RETRY``, ``BYPASS``, ``UNAVAILABLE``, ``RULE`` or ``PASS``), status, and the claim
        admission asked (``refused`` when it was not trusted and was refused). What raises
        has sent nothing."""
        site = view.settings
        decision = await self._admit(view, path, headers, who, profile)
        path, claim = decision.path, decision.claim
        if decision.kind == "person":  # on the face, its 503: never the origin's page
            if not fail_open:
                return *await self._no_snapshot(site, scope, receive, send, False), "refused"
            return "PASS", await self._pass(site, scope, receive, send), "refused"
        if decision.kind in ("redirect", "status"):
            self.metrics.request("RULE")
            status, out, body = rule_answer(decision, scope["method"], self._worker)
            await send({"type": "http.response.start", "status": status, "headers": out})
            await send({"type": "http.response.body", "body": body})
            return "RULE", status, claim
        if decision.kind == "ignored":
            return "PASS", await self._pass(site, scope, receive, send), claim
        if decision.requeue:
            await self.store.enqueue(site.name, path, PRIORITY_EXPIRED, found=False)
            for each in PROFILE_NAMES:
                self.cache.evict((site.name, path, each))
        if decision.kind == "serve":
            assert decision.snapshot is not None
            result = "HIT" if decision.fresh else "STALE"
            status = await self._send_snapshot(decision.snapshot, result, headers, scope, send)
            return result, status, claim
        refusal = decision.reason if decision.kind == "refused" else None
        queued = False  # the path waits in the queue: the next visit gets it
        deadline = time.monotonic() + self.miss_wait
        if decision.kind == "fill":
            snapshot, refusal = await self._filled(site, path, profile, deadline)
            if snapshot is not None:
                status = await self._send_snapshot(snapshot, "MISS", headers, scope, send)
                return "MISS", status, claim
        if decision.kind == "capture":
            # From admission's last question to the miss's start nothing awaits, so the
            # limits hold under a flood.
            started = self.capture.start_miss(site, path, decision.priority, profile)
            if started is None:
                refusal = "miss_queue"
            else:
                future, new = started
                if new and decision.new:
                    self.new_paths.add(site.name, lately=not decision.queue)
                snapshot, queued = await self._wait_for_capture(site, path, future, profile)
                if snapshot is not None and snapshot.unrendered:  # joined another bot's miss
                    snapshot, _ = await self._filled(site, path, profile, deadline)
                if snapshot is not None:
                    status = await self._send_snapshot(snapshot, "MISS", headers, scope, send)
                    return "MISS", status, claim
        if refusal is not None and decision.queue:  # queued, though no render starts now
            if decision.new and await self.store.enqueue(
                site.name, path, decision.priority, found=False
            ) == "queued":
                self.new_paths.add(site.name, lately=False)
            queued = True
        elif refusal is not None:
            self.metrics.refused.labels(refusal).inc()
            self.refusal_log(site.name, refusal, path)
            claim = after_refusal(claim, refusal)
        if queued and fail_open and site.miss_answer == "503":
            self.metrics.request("RETRY")
            await _send_simple(send, 503, RETRY_TEXT, [*RETRY_HEADERS, *self._worker])
            return "RETRY", 503, claim
        result, status = await self._no_snapshot(site, scope, receive, send, fail_open)
        return result, status, claim

    async def _filled(
        self, site: SiteSettings, path: str, profile: str, deadline: float
    ) -> tuple[Snapshot | None, str | None]:
        """The snapshot of ``profile``, which the path's snapshot owed, once rendered by
        ``deadline``; else None and the refusal when none could start (the render goes on
        when time is up, and the next bot gets it)."""
        future = self.capture.owed.start(site, path, profile)
        if future is None:  # every place taken, or it failed lately
            return None, "miss_queue" if self.capture.places_taken() else None
        ended, snapshot = await self._awaited(future, path, deadline - time.monotonic())
        if ended and snapshot is not None:
            self.cache.put((site.name, path, profile), snapshot)
        return snapshot, None

    async def _no_snapshot(
        self, site: SiteSettings, scope: Scope, receive: Receive, send: Send, fail_open: bool
    ) -> tuple[str, int]:
        """A bot's answer when no snapshot can be had in time: the origin's page (``BYPASS``),
        or without ``fail_open`` (the SEO4Ajax face) 503 (``UNAVAILABLE``)."""
        if not fail_open:
            self.metrics.request("UNAVAILABLE")
            return "UNAVAILABLE", await unavailable(send)
        self.metrics.request("BYPASS")
        status = await self.upstream.forward(
            site.origin, scope, receive, _with_header(send, b"x-snapshotd-cache", b"BYPASS")
        )
        return "BYPASS", status

    async def admission(
        self, site: SiteSettings, path: str, headers: dict[str, str], who: Who, profile: str
    ) -> Decision:
        """Admission's decision for a bot's request for ``path`` of ``site``, by the site's
        current view: the one the proxy, the render endpoint and the screenshot endpoint
        answer by."""
        return await self._admit(self.sites.view_of(site), path, headers, who, profile)

    async def _admit(
        self, view: SiteView, path: str, headers: dict[str, str], who: Who, profile: str
    ) -> Decision:
        facts = _BotFacts(self, view.settings, who, profile)
        return await admit(self.decide(view, path, headers), facts)

    def decide(
        self, view: SiteView, path: str, headers: dict[str, str]
    ) -> Generator[Question, Any, Decision]:
        """Admission of a bot's request for ``path`` of a site, by its settings, rules and
        pause of one version (``view``), to be answered."""
        return decide(
            view.settings,
            view.rules,
            path,
            source="bot",
            now=time.time(),
            host=headers.get("host", ""),
            headers=headers,
            paused=view.paused,
        )

    async def _wait_for_capture(
        self, site: SiteSettings, path: str, task: asyncio.Future[Any], profile: str
    ) -> tuple[Snapshot | None, bool]:
        """The snapshot of ``profile`` of a path being captured, within ``miss_wait``, and
        whether its path stays queued without it (time was up); (None, False) on failure, and
        at once on shutdown, so the bot gets the origin's page before the server stops."""
        stopping = self.capture.stopping
        if stopping.is_set():
            return None, False
        deadline = time.monotonic() + self.miss_wait
        ended, outcome = await self._awaited(task, path, self.miss_wait)
        if ended is None:
            return None, not stopping.is_set()
        if not ended:
            return None, False
        if outcome is not None:
            if not outcome.stored:
                return None, False
            return await self.store.get_snapshot(site.name, path, profile), False
        # Another process holds the lease: watch the store until it lands or time is up.
        while time.monotonic() < deadline and not stopping.is_set():
            record = await self.store.get_path(site.name, path)
            if record is None or record.state in ("error", "ignored"):
                return None, False
            if record.state == "processed":
                return await self.store.get_snapshot(site.name, path, profile), False
            await asyncio.sleep(min(0.2, max(deadline - time.monotonic(), 0)))
        return None, not stopping.is_set()

    async def _awaited(
        self, task: asyncio.Future[Any], path: str, timeout: float
    ) -> tuple[bool | None, Any]:
        """Whether a capture of ``path`` (a miss's, or an owed profile's render) ended well
        within ``timeout`` seconds, before a stop, and its result: (None, None) when it goes
        on (the next bot gets it; a failure then is logged), (False, None) when it failed."""
        stopped = asyncio.ensure_future(self.capture.stopping.wait())
        try:
            done, _ = await asyncio.wait(
                {task, stopped}, timeout=max(timeout, 0), return_when="FIRST_COMPLETED"
            )
        finally:
            stopped.cancel()
        if task not in done:
            task.add_done_callback(lambda t: _log_late_failure(t, path))
            return None, None
        if task.cancelled() or task.exception() is not None:
            log.warning(
                "capture failed path=%s error=%r",
                path,
                "cancelled" if task.cancelled() else task.exception(),
            )
            return False, None
        return True, task.result()

    async def _send_snapshot(
        self,
        snapshot: Snapshot,
        result: str,
        headers: dict[str, str],
        scope: Scope,
        send: Send,
    ) -> int:
        """Send ``snapshot`` (:func:`~snapshotd.proxy.snapshots.snapshot_answer`); the status
        sent. A body damaged past its first piece is cut off, and logged."""
        self.metrics.request(result)
        status, out, pieces = snapshot_answer(
            snapshot, result, headers, scope["method"], self._worker
        )
        # A damaged body fails here, before the answer starts, so it still fails open.
        last = next(pieces, b"")
        await send({"type": "http.response.start", "status": status, "headers": out})
        try:
            # One message per piece: each waits while the client is slow.
            for piece in pieces:
                await send({"type": "http.response.body", "body": last, "more_body": True})
                last = piece
        except (zlib.error, EOFError) as exc:
            # The answer is left unfinished, so the server drops the connection.
            log.warning(
                "snapshot body damaged, answer cut off site=%s path=%s error=%s",
                snapshot.site, snapshot.path, exc,
            )
            return status
        await send({"type": "http.response.body", "body": last})
        return status


def _log_late_failure(task: asyncio.Future[Any], path: str) -> None:
    """One line for a capture no request waits on any more that ended in an exception."""
    if not task.cancelled() and task.exception() is not None:
        log.warning("capture failed path=%s error=%r", path, task.exception())


def _with_header(send: Send, name: bytes, value: bytes) -> Send:
    async def wrapped(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), (name, value)]}
        await send(message)

    return wrapped
