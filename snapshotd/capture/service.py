"""One capture of one claimed path: render, judge, store; shared by the proxy and the crawler.

Invariants:
- a path is rendered only while this process holds its lease (``store.claim*``);
- a failed render never replaces a stored snapshot (``store.fail`` keeps it);
- a path is rendered for the device profiles its site serves as :mod:`.profiles` decides
  (a page that read nothing of its device, once); the first profile's capture is the path's
  snapshot and decides everything below, and another profile's is kept beside it only when
  it shows a crawler something else, so a page that renders the same keeps one copy;
- a page that shows what another shows (the same HTML, or with ``dedup = "content"`` the
  same page to a reader, :mod:`snapshotd.pages.fingerprints`) is stored as that page's
  duplicate; with
  ``dedup = "content"`` it keeps no snapshot of its own and is served that page's;
- of a group of copies, the one served for all (its master) is the path the crawler found
  rather than one only a bot's request named, else the one with fewer query parameters, else
  the first captured; a path is never a copy of its own query variant (:func:`.masters.takes_over`):
  a capture that ranks before the group's master takes its place;
- a page rendered well is processed (its snapshot kept) only when the site's process
  patterns take it and ``max_to_process`` is not reached; otherwise it is stored as
  ``crawled``: its links are followed, no snapshot is kept;
- concurrent proxy misses for one path share a single render (``capture_now``); a miss
  renders its bot's profile and owes the others the page may show something else
  (:mod:`.profiles`); a bot of a profile its path's snapshot owes waits for that profile's
  render (``owed.start``, :mod:`.owed`), which takes a miss place and slot like a miss;
- proxy misses hold every render slot while no crawler capture is under way here, and all
  but ``browser.crawler_reserve`` of them while one is (:mod:`.miss_slots`), one each (a
  capture renders its profiles one after another), and at most ``browser.miss_queue`` more
  wait for one (``start_miss``): past that a miss is refused rather than queued;
- between ``start`` and ``close``, leases past their deadline (whoever held them) go back to
  pending every ``reclaim_every`` seconds;
- once ``stop`` is called no capture starts and no one waits on one; a capture cut short by
  the stop (cancelled, or failing while the renderer closes) hands its path back to pending,
  its claim not counted as an attempt: it is never stored as an error;
- a stop ends work one way, here and in the crawler (:func:`wind_down`): what is under way
  has ``grace`` seconds to finish, the rest is cut short, then every lease of the process's
  owner goes back to pending;
- a capture answered 2xx whose page did not say its status is judged against its site's
  not-found view (:mod:`.soft_404`) before anything else: one that shows it is stored with
  the status it is answered with (404 or 410; with ``soft_404 = "report"`` its own), its other
  profiles' captures dropped, never as a copy, and not counted among the site's processed
  pages; a real page that shows it is captured again first (``CONFIRM``);
- whose links are followed is decided at construction and by each call, never by what else
  exists: a capture run for the crawler (``run(..., follow_links=True)``) is stored marked as
  having its links due, and the crawler follows them from the outcome; a capture started here
  on its own (a proxy miss, the render endpoint) is stored marked too and handed over, as
  (site, path), to the ``links`` queue the service was built with, which the crawler built on
  this service drains (:mod:`snapshotd.services` gives one to processes that run a crawler);
  built without one, the service stores such captures unmarked. A mark stays until the links
  are queued, so a capture stored before a crash is followed at the next start.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from snapshotd.capture.copy_of import copy_of
from snapshotd.capture.masters import takes_over
from snapshotd.capture.miss_slots import MissSlots
from snapshotd.capture.owed import OwedRenders
from snapshotd.capture.profiles import ProfileRenders
from snapshotd.capture.soft_404 import CONFIRM, NotFoundViews
from snapshotd.capture.stopping import STOP_GRACE, wind_down
from snapshotd.config.settings import Settings, SiteSettings
from snapshotd.crawlers.devices import profiles_served
from snapshotd.observe import logs
from snapshotd.observe.metrics import Metrics
from snapshotd.pages.fingerprints import fingerprint
from snapshotd.render.renderer import CaptureResult, Renderer
from snapshotd.search.indexnow import IndexNow, indexnow_due
from snapshotd.sites import path_policy
from snapshotd.sites.param_learner import ParamLearner
from snapshotd.store.count_cache import CountCache
from snapshotd.store.interface import PathRecord, Store
from snapshotd.store.outcome import CaptureOutcome, Variant

log = logging.getLogger("snapshotd.capture.service")

LEASE_SECONDS_MARGIN = 60.0
RECLAIM_SECONDS = 5.0  # how often expired leases are taken back
RETRY_LIMIT = 5
RETRY_BASE = 60.0


@dataclass(frozen=True)
class Outcome:
    """What became of one capture."""

    record: PathRecord
    result: CaptureResult
    stored: bool
    duplicate_of: str | None = None
    cut_short: bool = False  # by a stop: the path is pending again, nothing was recorded
    variants: tuple[Variant, ...] = ()  # other profiles' captures kept beside the result
    not_found: str | None = None  # why it is answered as its site's not-found view


# Captures (site name, path) stored here on their own, whose links the crawler of this
# process is to follow.
LinksToFollow = asyncio.Queue[tuple[str, str]]


def retry_delay(attempts: int, expire_after: float) -> float:
    """Backoff after the n-th failed attempt: 1, 2, 4, 8 minutes, then wait for expiry."""
    if attempts >= RETRY_LIMIT:
        return expire_after
    return min(RETRY_BASE * 2 ** max(attempts - 1, 0), expire_after)


class CaptureService:
    def __init__(
        self,
        settings: Settings,
        store: Store,
        renderer: Renderer,
        *,
        metrics: Metrics | None = None,
        owner: str | None = None,
        clock: Callable[[], float] = time.time,
        reclaim_every: float = RECLAIM_SECONDS,
        links: LinksToFollow | None = None,
        indexnow: IndexNow | None = None,
        learner: ParamLearner | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.renderer = renderer
        self.metrics = metrics or Metrics()
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{id(self):x}"
        self.clock = clock
        self.links = links
        self.learner = learner or ParamLearner(store)
        # Told of each stored capture that is news to search engines (search.indexnow).
        self.indexnow = indexnow or IndexNow(settings, metrics=self.metrics)
        self.profiles = ProfileRenders(renderer, store)
        self.not_found = NotFoundViews(store, renderer, clock=clock)
        self._inflight: dict[tuple[str, str], asyncio.Future[Outcome]] = {}
        # Proxy misses rendering or waiting for one of their slots.
        self._misses: dict[tuple[str, str], asyncio.Future[Outcome | None]] = {}
        # Owed profiles rendering for the bots asking for them.
        self.owed = OwedRenders(self)
        browser = settings.browser
        self.miss_slots = MissSlots(browser.concurrency, browser.crawler_reserve)
        self._miss_places = browser.concurrency + browser.miss_queue
        # Judging "same HTML as another path" and storing must not interleave, or two copies
        # captured at once would each miss the other.
        self._store_lock = asyncio.Lock()
        # Sites' processed pages, for their max_to_process.
        self._processed = CountCache(self._pages)
        self.reclaim_every = reclaim_every
        self._reclaimer: asyncio.Task[None] | None = None
        # Set by ``stop``: no capture starts, and whoever waits on one stops waiting.
        self.stopping = asyncio.Event()

    def lease_seconds(self, *sites: SiteSettings) -> float:
        """A lease long enough for a capture of any of ``sites`` (their render timeouts)."""
        timeouts = [self.settings.browser.timeouts(site)[1] for site in sites]
        return max(timeouts, default=self.settings.browser.render_timeout) + LEASE_SECONDS_MARGIN

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Take back expired leases now, then every ``reclaim_every`` seconds until closed."""
        await self._reclaim()
        self._reclaimer = asyncio.create_task(self._reclaim_loop(), name="lease-reclaim")

    async def _reclaim(self) -> None:
        released = await self.store.release_expired_leases()
        if released:
            log.info("released %d expired leases", released)

    async def _reclaim_loop(self) -> None:
        while True:
            await asyncio.sleep(self.reclaim_every)
            try:
                await self._reclaim()
            except Exception as exc:
                logs.throttled(log, logging.ERROR, "releasing expired leases failed: %s", exc)

    def stop(self) -> None:
        """Start no capture from now on; requests waiting on one stop waiting (and fail
        open). Calling it again does nothing."""
        self.stopping.set()

    async def close(self, grace: float = STOP_GRACE) -> None:
        """Stop; let the captures under way finish for ``grace`` seconds, then cut the rest
        short and hand every lease this process holds back to pending. Call it before the
        renderer and the store close; calling it again does nothing more."""
        self.stop()

        async def cut_short(running: set[asyncio.Future[Any]]) -> None:
            await self.cancel_all()
            log.info("cut short %d captures on stop", len(running))

        under_way: list[asyncio.Future[Any]] = [
            *self._inflight.values(), *self._misses.values(), *self.owed.under_way(),
        ]
        await wind_down(under_way, grace, cut_short, self.store, self.owner)
        if self._reclaimer is not None:
            self._reclaimer.cancel()
            await asyncio.gather(self._reclaimer, return_exceptions=True)
            self._reclaimer = None
        await self.indexnow.aclose()
        await self.not_found.aclose()

    # ------------------------------------------------------------------ captures

    async def run(
        self, site: SiteSettings, record: PathRecord, *, follow_links: bool = False,
        asked: str | None = None,
    ) -> Outcome:
        """Render a claimed path and store the outcome; proxy misses for it wait on this.

        ``follow_links``: the caller follows the links of what is stored (the crawler), so it
        is stored marked as having its links due, and not handed to ``links``. ``asked``:
        the profile of the bot whose request started it (:mod:`.profiles`)."""
        if self.stopping.is_set():
            return await self._cut_short(site, record, site.url_for(record.path), "not started")
        key = (site.name, record.path)
        future = asyncio.ensure_future(
            self._crawler_run(site, record) if follow_links
            else self._run(site, record, False, asked)
        )
        self._inflight[key] = future
        future.add_done_callback(lambda _f: self._inflight.pop(key, None))
        return await asyncio.shield(future)

    async def _crawler_run(self, site: SiteSettings, record: PathRecord) -> Outcome:
        async with self.miss_slots.crawling():
            return await self._run(site, record, True)

    async def _run(
        self, site: SiteSettings, record: PathRecord, follow_links: bool, asked: str | None = None
    ) -> Outcome:
        url = site.url_for(record.path)
        started = time.monotonic()
        profiles = profiles_served(site.devices)
        # Learnt only in the crawler's captures of pages it found: never for a bot's request.
        may_learn = follow_links and record.found
        settle: tuple[str, ...] = ()  # of the profiles owed, those rendered once it is stored
        try:
            before = await self.profiles.kept_before(site, record, profiles)
            renders = await self.profiles.render(
                url, site, profiles, before, may_learn=may_learn, asked=asked
            )
            result, variants, owed = renders.first, list(renders.variants), renders.owed
            settle = renders.settle
        except Exception as exc:
            if self.stopping.is_set():
                return await self._cut_short(site, record, url, type(exc).__name__)
            # A renderer fault is a failed capture like any other: the path must not stay
            # leased until the lease runs out.
            log.warning("renderer fault site=%s path=%s error=%r", site.name, record.path, exc)
            result = CaptureResult(
                url=url, final_url=url, status=0, error=f"renderer fault: {type(exc).__name__}"
            )
            variants, owed = [], ()
        self.count_render(site, started)
        now = self.clock()
        if not result.ok and self.stopping.is_set():
            # The renderer may be closing under it: nothing says the page is to blame.
            return await self._cut_short(site, record, url, result.error or "failed")
        if not result.ok:
            delay = retry_delay(record.attempts, site.refresh_after)
            await self.store.fail(
                site.name,
                record.path,
                self.owner,
                error=result.error or "failed",
                retry_at=now + delay,
                status=result.status if result.status >= 400 else None,
            )
            self.metrics.captures.labels("error").inc()
            self.metrics.minutes.capture(site.name, "error")
            log.info(
                "capture failed site=%s path=%s error=%r retry_in=%ds",
                site.name, record.path, result.error, delay,
            )
            return Outcome(record, result, stored=False)
        verdict = await self.not_found.judge(site, record, result, may_learn=may_learn)
        if verdict is not None and verdict.confirm:
            return await self._to_confirm(site, record, result)
        answered = verdict is not None and verdict.status != result.status
        if verdict is not None and answered:
            # Every profile is answered as the app would: the path's own snapshot, its status.
            result, variants, owed = replace(result, status=verdict.status), [], ()

        async with self._store_lock:
            unprocessed = await self._unprocessed(site, record.path, result.html)
            duplicate_of = print_ = None
            if 200 <= result.status < 300 and not unprocessed:
                print_ = fingerprint(result.html)
                duplicate_of = await copy_of(self.store, site, record.path, result.html, print_)
            # What search engines were last told of, read only for a site that tells them.
            last_print = (
                (await self.store.prints(site.name, [record.path])).get(record.path)
                if site.indexnow_key else None
            )
            replaces = None
            if duplicate_of is not None:
                master = await self.store.get_path(site.name, duplicate_of)
                if master is None or takes_over(record, master):
                    replaces, duplicate_of = duplicate_of, None
            kind = ("crawled" if unprocessed else "not_found" if answered
                    else "duplicate" if duplicate_of else "ok")
            # Counted before the store shows it (taken back if the store fails): a job's
            # report reads the paths, then the captures counted.
            self.metrics.minutes.capture(site.name, kind)
            try:
                outcome = CaptureOutcome(
                    html=result.html,
                    status=result.status,
                    headers=result.headers,
                    final_url=result.final_url,
                    expires_at=now + site.expire_after,
                    duplicate_of=duplicate_of,
                    links_due=follow_links or self.links is not None,
                    keep=not unprocessed,
                    shared=site.dedup == "content",
                    print_=print_,
                    readiness_limit=result.readiness_limit,
                    profile=profiles[0],
                    variants=variants,
                    owed=owed,
                    takes_over=replaces,
                    not_found=verdict.why if verdict else None,
                )
                stored = await self.store.complete(site.name, record.path, self.owner, outcome)
            except Exception:
                self.metrics.minutes.capture(site.name, kind, -1)
                raise
            if stored and not unprocessed and not answered:
                self._processed.add(site.name)
            listed = not unprocessed and duplicate_of is None
            if stored and indexnow_due(
                record.status, last_print, result.status, print_, listed=listed
            ):
                self.indexnow.tell(site, record.path)
            if stored and replaces is not None:
                log.info("master site=%s path=%s of the copies of %s",
                         site.name, record.path, replaces)
            self.metrics.captures.labels(kind).inc()
            if stored and result.readiness_limit:
                self.metrics.readiness_limits.inc()
        if stored and print_ is not None:
            try:
                await self.learner.rendered(site, record, print_)
            except Exception as exc:  # learning is a bonus: the capture is stored already
                log.warning("could not learn from site=%s path=%s: %s", site.name, record.path, exc)
        log.info(
            "%s site=%s path=%s status=%d %.2fs%s",
            "crawled" if unprocessed else "captured",
            site.name, record.path, result.status, result.elapsed,
            (f" duplicate_of={duplicate_of}" if duplicate_of
             else f" not processed ({unprocessed})" if unprocessed else "")
            + (f" not_found ({verdict.why})" if verdict else "")
            + (" readiness_limit" if result.readiness_limit else ""),
        )
        if stored and not follow_links and self.links is not None:
            self.links.put_nowait((site.name, record.path))
        for profile in settle if stored and listed and owed else ():
            self.owed.settle_soon(site, record.path, profile)
        return Outcome(
            record, result, stored=stored, duplicate_of=duplicate_of, variants=tuple(variants),
            not_found=verdict.why if verdict and answered else None,
        )

    def count_render(self, site: SiteSettings, started: float) -> None:
        """Count a capture's renders of ``site`` begun at ``started`` (``time.monotonic``) in
        the metrics and the site's minute counters."""
        seconds = time.monotonic() - started
        self.metrics.render_seconds.observe(seconds)
        self.metrics.minutes.render(site.name, seconds)

    async def _to_confirm(self, site: SiteSettings, record: PathRecord, result: CaptureResult
                          ) -> Outcome:
        """A real page that now shows its site's not-found view: kept, captured again."""
        delay = retry_delay(record.attempts, site.refresh_after)
        await self.store.fail(site.name, record.path, self.owner, error=CONFIRM,
                              retry_at=self.clock() + delay)
        log.info("not-found view site=%s path=%s: captured again in %ds before it is answered so",
                 site.name, record.path, delay)
        return Outcome(record, result, stored=False)

    async def _pages(self, site: str) -> int:
        """The site's processed pages less those answered as its not-found view."""
        return await self.store.processed(site) - (await self.store.not_found_count(site))[1]

    async def reached_max(self, site: SiteSettings) -> bool:
        """Whether the site has ``max_to_process`` processed pages already (never when it
        is -1, unlimited), by a :class:`CountCache` of them."""
        if not path_policy.limits_processing(site):
            return False
        if not path_policy.full(site, await self._processed.get(site.name)):
            return False
        # This process's captures may count a page twice (captured again): confirm.
        return path_policy.full(site, await self._processed.get(site.name, fresh=True))

    async def _unprocessed(self, site: SiteSettings, path: str, html: str) -> str:
        """Why a page rendered well is crawled only, its snapshot not kept (the site's process
        patterns, or ``max_to_process`` reached); "" when it is processed."""
        if not path_policy.processes(site, path):
            return "url_process_pattern"
        if not path_policy.processes_html(site, html):
            return "page_process_pattern"
        if await self.reached_max(site):
            return "max_to_process"
        return ""

    async def _cut_short(
        self, site: SiteSettings, record: PathRecord, url: str, why: str
    ) -> Outcome:
        """A capture the stop cut short: its path goes back to pending, uncounted."""
        await self.store.release(site.name, record.path, self.owner)
        log.info("capture cut short by the stop site=%s path=%s (%s)", site.name, record.path, why)
        result = CaptureResult(url=url, final_url=url, status=0, error="stopped")
        return Outcome(record, result, stored=False, cut_short=True)

    async def cancel_all(self) -> int:
        """Cancel every capture under way (shutdown); their leases stay for the caller."""
        futures: list[asyncio.Future[Any]] = [
            *self._inflight.values(), *self._misses.values(), *self.owed.under_way(),
        ]
        for future in futures:
            future.cancel()
        await asyncio.gather(*futures, return_exceptions=True)
        return len(futures)

    def places_taken(self) -> bool:
        """Whether every miss place is taken: no miss or owed render starts now."""
        return len(self._misses) + len(self.owed.under_way()) >= self._miss_places

    def start_miss(
        self, site: SiteSettings, path: str, priority: int, profile: str | None = None
    ) -> tuple[asyncio.Future[Outcome | None] | asyncio.Future[Outcome], bool] | None:
        """The capture a proxy miss waits for, and whether it is a new one; None when every
        miss place is taken (nothing is queued then).

        A miss joins the capture under way for its path. Otherwise, when a place is free, the
        path is queued at ``priority`` and captured as soon as a miss slot is free, for the
        bot's ``profile`` (:meth:`run`'s ``asked``). The capture goes on when the request
        stops waiting, and holds its place until it ends.
        """
        key = (site.name, path)
        joined = self._misses.get(key) or self._inflight.get(key)
        if joined is not None:
            return joined, False
        if self.places_taken():
            return None
        future = asyncio.ensure_future(self._miss(site, path, priority, profile))
        self._misses[key] = future
        future.add_done_callback(lambda _f: self._misses.pop(key, None))
        return future, True

    async def _miss(
        self, site: SiteSettings, path: str, priority: int, profile: str | None
    ) -> Outcome | None:
        # A bot's request: it does not make the path one the crawler found.
        await self.store.enqueue(site.name, path, priority, found=False)
        async with self.miss_slots.miss():
            return await self.capture_now(site, path, profile)

    async def capture_now(
        self, site: SiteSettings, path: str, profile: str | None = None
    ) -> Outcome | None:
        """Capture a pending path at once, for a bot of ``profile`` (:meth:`run`'s
        ``asked``), or join the render already under way for it.

        Returns None when another process holds the path (the caller polls the store), or
        when the service is stopping and no render of it is under way here.
        """
        future = self._inflight.get((site.name, path))
        if future is not None:
            return await asyncio.shield(future)
        if self.stopping.is_set():
            return None
        record = await self.store.claim_path(site.name, path, self.owner, self.lease_seconds(site))
        if record is None:
            future = self._inflight.get((site.name, path))
            return await asyncio.shield(future) if future is not None else None
        return await self.run(site, record, asked=profile)

