"""The crawler: claim a pending path, capture it, follow its links; keep every page fresh.

Invariants:
- a path is captured only under its lease (``store.claim``); a lease left by a dead worker
  goes back to pending (the capture service's periodic reclaim, or at once for a dead
  process on this host), so a crash loses nothing and nothing stored is captured twice;
- at most ``browser.concurrency`` captures run at once; a site with ``crawl_delay`` has one
  capture at a time, started at least ``crawl_delay`` seconds after the previous one ended;
- every path set pending by the crawler first went through the site's rewrite rules, the
  ignore list, robots.txt, ``max_hops`` and ``max_pages``, in that order (``_admit``);
- links are followed only from a stored 2xx capture that is not a duplicate; a stored 3xx
  queues its target instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlsplit

from snapshotd.admission import Source, StoreFacts, admit, decide
from snapshotd.capture import STOP_GRACE, CaptureService, retry_delay
from snapshotd.config import Settings, SiteSettings
from snapshotd.fetch import Fetcher
from snapshotd.links import extract_links, normalize_url
from snapshotd.metrics import Metrics
from snapshotd.render.base import CaptureResult, Renderer
from snapshotd.rewrite import RuleSet
from snapshotd.robots import ROBOTS_USER_AGENT, RobotsCache
from snapshotd.sitemaps import SitemapEntry, fetch_sitemap
from snapshotd.store.base import (
    PRIORITY_LINK,
    PathRecord,
    Store,
)

__all__ = ["CrawlStats", "Crawler", "run_crawl", "run_worker"]

log = logging.getLogger("snapshotd.crawler")

POLL_SECONDS = 1.0  # how soon paths queued by another process (proxy, API) are seen when idle
MAINTENANCE_SECONDS = 10.0
SITEMAP_RETRY = 300.0


@dataclass
class CrawlStats:
    """What this crawler did since it started."""

    captured: int = 0
    duplicates: int = 0
    errors: int = 0
    ignored: int = 0
    queued: int = 0
    started: float = 0.0

    @property
    def done(self) -> int:
        return self.captured + self.errors


def _owner_is_dead_here(owner: str) -> bool:
    """Whether a lease owner (``host:pid:id``) is a process of this host that no longer runs."""
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :].startswith("Z")


def _robots_tag_nofollow(value: str) -> bool:
    """Whether an ``X-Robots-Tag`` value says ``nofollow`` (or ``none``, which implies it),
    for every crawler or under a ``name:`` prefix."""
    for part in value.lower().split(","):
        token = part.rsplit(":", 1)[-1].strip()
        if token in ("nofollow", "none"):
            return True
    return False


class _CrawlFacts(StoreFacts):
    """Admission's facts as the crawler has them: its own count of each site's pages, and
    robots.txt as last read."""

    def __init__(self, crawler: Crawler, site: SiteSettings) -> None:
        super().__init__(crawler.store, site.name)
        self.crawler, self.site_settings = crawler, site

    async def size(self) -> int:
        return self.crawler._size.get(self.site, 0)

    def robots_allow(self, path: str) -> bool:
        robots = self.crawler.robots
        return robots is None or robots.allowed(self.site_settings, path)


class Crawler:
    """Claims and captures pending paths of every configured site until stopped.

    ``once``: the ``snapshotd crawl`` mode, which ends by itself (``finished`` is set) when
    nothing is pending or being captured, and does not requeue expired paths after start.
    ``rules`` defaults to loading each site's rules file; ``http`` (for robots.txt and
    sitemaps, under the address policy of each site) defaults to a :class:`Fetcher` made here
    and closed by :meth:`stop`.
    """

    def __init__(
        self,
        settings: Settings,
        store: Store,
        capture: CaptureService,
        *,
        metrics: Metrics | None = None,
        rules: dict[str, RuleSet] | None = None,
        http: Fetcher | None = None,
        once: bool = False,
        seeds: dict[str, Sequence[str]] | None = None,
        clock: Callable[[], float] = time.time,
        grace: float = STOP_GRACE,
        maintenance_every: float = MAINTENANCE_SECONDS,
    ) -> None:
        self.settings = settings
        self.store = store
        self.capture = capture
        self.metrics = metrics or capture.metrics
        if rules is None:
            from snapshotd.app import load_site_rules

            rules = load_site_rules(settings)
        self.rules = rules
        self._own_http = http is None
        self.http = http
        self.once = once
        self.seeds = seeds if seeds is not None else {s.name: s.seeds for s in settings.sites}
        self.clock = clock
        self.grace = grace
        self.maintenance_every = maintenance_every
        self.sites = {s.name: s for s in settings.sites}
        self.stats = CrawlStats()
        self.finished = asyncio.Event()
        self.robots: RobotsCache | None = None
        self._stopping = False
        self._stopped = False
        self._booted = False  # seeds and sitemaps all queued
        self._tasks: list[asyncio.Task[None]] = []
        self._workers: list[asyncio.Task[None]] = []
        self._active = 0
        self._claim_lock = asyncio.Lock()
        self._busy: dict[str, int] = {name: 0 for name in self.sites}
        self._next_start: dict[str, float] = {name: 0.0 for name in self.sites}
        self._size: dict[str, int] = {}
        self._canonical_copies: set[tuple[str, str]] = set()
        self._generation = 0
        self._wake = asyncio.Event()
        capture.after_capture = self._after_capture

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Start in the background: robots.txt and seeds, then the workers and sitemaps."""
        self.stats = CrawlStats(started=time.monotonic())
        if self.http is None:
            self.http = Fetcher(headers={"User-Agent": ROBOTS_USER_AGENT, "X-Snapshotd": "1"})
        self.robots = RobotsCache(self.http, clock=self.clock)
        self._tasks.append(asyncio.create_task(self._main(), name="crawler"))

    async def stop(self) -> None:
        """Stop claiming; let captures under way finish for ``grace`` seconds, then cancel
        them and give their paths back to the queue. Calling it again does nothing."""
        if self._stopped:
            return
        self._stopped = True
        self._stopping = True
        self._notify()
        if self._workers:
            _done, running = await asyncio.wait(self._workers, timeout=self.grace)
            if running:
                await self.capture.cancel_all()
                for task in running:
                    task.cancel()
                await asyncio.gather(*running, return_exceptions=True)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        self._workers.clear()
        with contextlib.suppress(Exception):
            released = await self.store.release_leases(self.capture.owner)
            if released:
                log.info("released %d leases on stop", released)
        if self._own_http and self.http is not None:
            await self.http.aclose()
            self.http = None
        if self.capture.after_capture == self._after_capture:
            self.capture.after_capture = None

    async def _main(self) -> None:
        try:
            await self._boot()
        except Exception as exc:
            log.error("crawler start-up failed: %s", exc)
            self.finished.set()
            return
        self._workers = [
            asyncio.create_task(self._worker(), name=f"crawler-worker-{n}")
            for n in range(self.settings.browser.concurrency)
        ]
        log.info(
            "crawler started sites=%s workers=%d%s",
            ",".join(self.sites),
            len(self._workers),
            " once" if self.once else "",
        )
        # Sitemaps can list many thousands of URLs: the seeds are being captured meanwhile.
        for site in self.sites.values():
            try:
                await self._sitemaps(site)
            except Exception as exc:
                log.error("sitemaps failed site=%s: %s", site.name, exc)
        self._booted = True
        self._notify()
        while not self._stopping:
            await asyncio.sleep(self.maintenance_every)
            try:
                await self._maintain()
            except Exception as exc:
                log.error("crawler maintenance failed: %s", exc)

    async def _boot(self) -> None:
        for owner in await self.store.lease_owners():
            if _owner_is_dead_here(owner):
                n = await self.store.release_leases(owner)
                log.info("released %d leases of dead worker %s", n, owner)
        for site in self.sites.values():
            self._size[site.name] = await self.store.site_size(site.name)
            if site.obey_robots:
                await self._robots(site)
            for seed in self.seeds.get(site.name, ()):
                await self._admit(site, seed, hops=0, priority=PRIORITY_LINK, source="seed")
            await self._follow_due_links(site)
            await self._requeue_expired(site)
        self._notify()

    async def _follow_due_links(self, site: SiteSettings) -> None:
        """Follow the links of captures stored without them having been followed: the worker
        that stored them stopped or died in between. One pass over what was stored before this
        start; a live worker's newer captures are its own to follow."""
        started = self.clock()
        followed = last = 0
        while batch := await self.store.links_due(site.name, after=last, captured_before=started):
            last = batch[-1][0]
            for _id, path in batch:
                try:
                    followed += await self._follow_stored(site, path)
                except Exception as exc:
                    # Left marked: the next start tries again.
                    log.warning(
                        "could not follow stored links site=%s path=%s: %s", site.name, path, exc
                    )
        if followed:
            log.info("followed the links of %d stored captures site=%s", followed, site.name)

    async def _follow_stored(self, site: SiteSettings, path: str) -> bool:
        record = await self.store.get_path(site.name, path)
        snapshot = await self.store.get_snapshot(site.name, path)
        if record is not None and snapshot is not None:
            url = site.url_for(path)
            result = CaptureResult(
                url=url,
                final_url=snapshot.final_url or url,
                status=snapshot.status,
                headers=snapshot.headers,
                html=snapshot.html,
            )
            duplicate_of = record.duplicate_of
            if duplicate_of is not None:
                # A copy by its canonical link is followed again, which queues the canonical;
                # only a copy by content has nothing to follow.
                canonical = extract_links(result.html, result.final_url).canonical
                if canonical and site.path_of(canonical) == duplicate_of:
                    duplicate_of = None
            await self._after_capture(site, record, result, duplicate_of)
        await self.store.links_followed(site.name, path)
        return record is not None and snapshot is not None

    async def _maintain(self) -> None:
        for site in self.sites.values():
            self._size[site.name] = await self.store.site_size(site.name)
            if self.once:
                continue
            if site.obey_robots:
                await self._robots(site)
            await self._sitemaps(site)
            await self._requeue_expired(site)
        depth = await self.store.queue_depth()
        for priority, n in depth.items():
            self.metrics.queue_depth.labels(str(priority)).set(n)

    async def _robots(self, site: SiteSettings) -> None:
        assert self.robots is not None
        await self.robots.refresh(site)

    async def _requeue_expired(self, site: SiteSettings) -> None:
        # Failed captures come back when their backoff is over even without capture_expired.
        states = ("processed", "error") if site.capture_expired else ("error",)
        total = 0
        while True:
            n = await self.store.requeue_expired(site.name, states=states)
            total += n
            if n < 1000:
                break
        if total:
            log.info("requeued %d expired paths site=%s", total, site.name)
            self._notify()

    # ------------------------------------------------------------------ sitemaps

    async def _sitemaps(self, site: SiteSettings) -> None:
        if not site.sitemaps:
            return
        key = f"sitemaps:{site.name}"
        now = self.clock()
        raw = await self.store.get_meta(key)
        if raw:
            with contextlib.suppress(ValueError, TypeError, KeyError):
                if float(json.loads(raw)["next_fetch"]) > now:
                    return
        assert self.http is not None
        errors = 0
        for ref in site.sitemaps:
            url = normalize_url(ref, site.origin.rstrip("/") + "/")
            if url is None:
                continue
            queued = 0

            async def admit(entries: tuple[SitemapEntry, ...]) -> None:
                nonlocal queued
                for entry in entries:
                    outcome = await self._admit(
                        site,
                        entry.loc,
                        hops=0,
                        priority=PRIORITY_LINK,
                        source="sitemap",
                        lastmod=entry.lastmod,
                    )
                    queued += outcome in ("queued", "requeued")

            fetched = await fetch_sitemap(
                self.http,
                url,
                admit,
                origin=site.origin,
                same_site=lambda u: site.path_of(u) is not None,
            )
            for error in fetched.errors:
                log.warning("sitemap site=%s %s", site.name, error)
            errors += fetched.failed
            log.info(
                "sitemap read site=%s url=%s files=%d urls=%d queued=%d",
                site.name,
                url,
                fetched.files,
                fetched.urls,
                queued,
            )
        wait = min(SITEMAP_RETRY, site.expire_after) if errors else site.expire_after
        await self.store.set_meta(key, json.dumps({"fetched_at": now, "next_fetch": now + wait}))

    # ------------------------------------------------------------------ admission

    async def _admit(
        self,
        site: SiteSettings,
        url: str,
        *,
        hops: int,
        priority: int,
        source: Source,
        lastmod: float | None = None,
    ) -> str:
        """Set one URL of ``site`` pending if admission allows it (:mod:`snapshotd.admission`).
        Answers what happened: queued, requeued, pending, fresh, ignored, skipped, external."""
        path = site.path_of(url)
        if path is None:
            return "external"
        decision = await admit(
            decide(
                site,
                self.rules.get(site.name),
                path,
                source=source,
                now=self.clock(),
                priority=priority,
                host=site.request_host,
                hops=hops,
                lastmod=lastmod,
            ),
            _CrawlFacts(self, site),
        )
        path = decision.path
        if decision.kind == "refused":
            return self._skip(site, path, decision.reason)
        if decision.kind == "known":
            return decision.reason
        if decision.kind == "ignored":
            if await self.store.add_ignored(site.name, path, hops=hops, reason="ignored"):
                self.stats.ignored += 1
                self._size[site.name] = self._size.get(site.name, 0) + 1
                log.debug("ignored site=%s path=%s from=%s", site.name, path, source)
                return "ignored"
            return "known"
        outcome = await self.store.enqueue(
            site.name, path, decision.priority, hops=hops, force=decision.force
        )
        if outcome == "queued":
            self._size[site.name] = self._size.get(site.name, 0) + 1
        if outcome in ("queued", "requeued", "reprioritised"):
            self.stats.queued += outcome == "queued"
            log.debug("%s site=%s path=%s hops=%d from=%s", outcome, site.name, path, hops, source)
            self._notify()
        return outcome

    def _skip(self, site: SiteSettings, path: str, why: str) -> str:
        log.debug("skipped site=%s path=%s reason=%s", site.name, path, why)
        return "skipped"

    # ------------------------------------------------------------------ after a capture

    async def _after_capture(
        self,
        site: SiteSettings,
        record: PathRecord,
        result: CaptureResult,
        duplicate_of: str | None,
    ) -> None:
        """Follow what a stored capture points to: its redirect, canonical, links."""
        page_url = result.final_url or site.url_for(record.path)
        hops = record.hops + 1
        if 300 <= result.status < 400:
            location = result.headers.get("Location") or result.headers.get("location")
            if location and site.crawl_links:
                target = normalize_url(location, page_url)
                if target:
                    # The target stands for the same page, one redirect away: same depth.
                    await self._admit(
                        site, target, hops=record.hops, priority=PRIORITY_LINK, source="redirect"
                    )
            return
        if not 200 <= result.status < 300 or duplicate_of is not None:
            return
        page = extract_links(result.html, page_url)
        nofollow = page.nofollow or _robots_tag_nofollow(result.headers.get("X-Robots-Tag", ""))
        own = {record.path, site.path_of(page_url)}
        links = list(page.links)
        if page.canonical:
            canonical = site.path_of(page.canonical)
            if canonical is not None and canonical not in own:
                if site.use_canonical:
                    await self.store.set_duplicate(site.name, record.path, canonical)
                    self._canonical_copies.add((site.name, record.path))
                    log.info(
                        "duplicate site=%s path=%s canonical=%s", site.name, record.path, canonical
                    )
                    if site.crawl_links and not nofollow:
                        await self._admit(
                            site,
                            canonical,
                            hops=record.hops,
                            priority=PRIORITY_LINK,
                            source="canonical",
                        )
                    return
                links.append(page.canonical)
        if nofollow or not site.crawl_links:
            return
        for url in links:
            path = site.path_of(url)
            if path is None or path in own:
                continue
            await self._admit(site, url, hops=hops, priority=PRIORITY_LINK, source="link")

    # ------------------------------------------------------------------ workers

    def wake(self) -> None:
        """Look for pending paths now: this process has just queued some."""
        self._notify()

    def _notify(self) -> None:
        self._generation += 1
        wake, self._wake = self._wake, asyncio.Event()
        wake.set()

    def _eligible(self, now: float) -> list[str]:
        return [
            name
            for name, site in self.sites.items()
            if site.crawl_delay <= 0 or (self._busy[name] == 0 and self._next_start[name] <= now)
        ]

    async def _claim(self) -> tuple[SiteSettings, PathRecord] | None:
        # One claim at a time, so "a site with crawl_delay has one capture at a time" holds.
        async with self._claim_lock:
            names = self._eligible(time.monotonic())
            if not names or self.capture.stopping.is_set():
                return None
            record = await self.store.claim(
                self.capture.owner, self.capture.lease_seconds, sites=names
            )
            if record is None:
                return None
            self._busy[record.site] += 1
            self._active += 1
            return self.sites[record.site], record

    def _release(self, site: SiteSettings) -> None:
        self._busy[site.name] -= 1
        self._active -= 1
        self._next_start[site.name] = time.monotonic() + site.crawl_delay

    async def _idle_wait(self, generation: int) -> None:
        if generation != self._generation:
            return
        timeout = POLL_SECONDS
        now = time.monotonic()
        delayed = [
            t - now for name, t in self._next_start.items() if self._busy[name] == 0 and t > now
        ]
        if delayed:
            timeout = max(min(timeout, *delayed), 0.0)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout)

    async def _worker(self) -> None:
        while not self._stopping:
            generation = self._generation
            try:
                claimed = await self._claim()
            except Exception as exc:
                log.error("claim failed: %s", exc)
                await asyncio.sleep(POLL_SECONDS)
                continue
            if claimed is None:
                if self.once and await self._all_done():
                    self.finished.set()
                    self._notify()
                    return
                await self._idle_wait(generation)
                continue
            site, record = claimed
            try:
                await self._capture(site, record)
            finally:
                self._release(site)
                self._notify()

    async def _capture(self, site: SiteSettings, record: PathRecord) -> None:
        try:
            outcome = await self.capture.run(site, record)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.stats.errors += 1
            log.error(
                "capture crashed site=%s path=%s error=%s: %s",
                site.name,
                record.path,
                type(exc).__name__,
                exc,
            )
            with contextlib.suppress(Exception):
                await self.store.fail(
                    site.name,
                    record.path,
                    self.capture.owner,
                    error=f"internal error: {type(exc).__name__}",
                    retry_at=self.clock() + retry_delay(record.attempts, site.expire_after),
                )
            return
        if outcome.cut_short:
            return
        if not outcome.result.ok:
            self.stats.errors += 1
        elif outcome.stored:
            self.stats.captured += 1
            copy = (site.name, record.path) in self._canonical_copies
            self._canonical_copies.discard((site.name, record.path))
            if outcome.duplicate_of or copy:
                self.stats.duplicates += 1

    async def _all_done(self) -> bool:
        if self._active or not self._booted:
            return False
        counts = await self.store.counts()
        for name in self.sites:
            site_counts = counts.get(name, {})
            if site_counts.get("pending", 0) or site_counts.get("processing", 0):
                return False
        return not self._active

    @property
    def active(self) -> int:
        """Captures under way in this crawler."""
        return self._active


# ---------------------------------------------------------------------------- commands


def _crawl_seeds(settings: Settings, seeds: Sequence[str] | None) -> dict[str, Sequence[str]]:
    """``--seed`` values per site: a path seeds every site, a URL the site it belongs to."""
    if not seeds:
        return {s.name: s.seeds for s in settings.sites}
    out: dict[str, list[str]] = {s.name: [] for s in settings.sites}
    for seed in seeds:
        if seed.startswith("/"):
            for names in out.values():
                names.append(seed)
            continue
        host = (urlsplit(seed).netloc or "").lower()
        site = settings.site_for_url_host(host) or settings.site_for_url_host(
            host.rsplit(":", 1)[0]
        )
        if site is not None:
            out[site.name].append(seed)
        else:
            log.warning("seed %s belongs to no configured site; skipped", seed)
    return dict(out)


_CAPTURE_LOGGERS = ("snapshotd.capture", "snapshotd.render")


class _Progress:
    """A rich progress bar with rate and ETA on a terminal; a plain line every few seconds
    otherwise."""

    PLAIN_EVERY = 5.0

    def __init__(self, stream: TextIO, tty: bool) -> None:
        self.stream = stream
        self.tty = tty
        self._bar: Any = None
        self._task: Any = None
        self._last_line = 0.0
        self._last_counts: tuple[int, int] | None = None
        self._handlers: list[logging.Handler] = []
        self._levels: dict[str, int] = {}

    def __enter__(self) -> _Progress:
        if self.tty:
            from rich.console import Console
            from rich.logging import RichHandler
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            console = Console(file=self.stream)
            self._bar = Progress(
                TextColumn("crawling"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[rate]:.1f} pages/s"),
                TimeElapsedColumn(),
                TextColumn("eta"),
                TimeRemainingColumn(),
                console=console,
                transient=False,
            )
            self._bar.start()
            self._task = self._bar.add_task("crawl", total=None, rate=0.0)
            # Log lines print above the bar instead of through it.
            root = logging.getLogger()
            self._handlers = list(root.handlers)
            for handler in self._handlers:
                root.removeHandler(handler)
            level = self._handlers[0].level if self._handlers else logging.NOTSET
            root.addHandler(RichHandler(console=console, show_path=False, level=level))
            # The bar says what each capture line would; keep them for -v.
            if root.level > logging.DEBUG:
                for name in _CAPTURE_LOGGERS:
                    logger = logging.getLogger(name)
                    self._levels[name] = logger.level
                    logger.setLevel(logging.WARNING)
        return self

    def update(self, stats: CrawlStats, pending: int, active: int, final: bool = False) -> None:
        elapsed = max(time.monotonic() - stats.started, 1e-6)
        rate = stats.done / elapsed
        total = stats.done + pending + active
        if self._bar is not None:
            self._bar.update(self._task, completed=stats.done, total=total, rate=rate)
            return
        now = time.monotonic()
        if not final and now - self._last_line < self.PLAIN_EVERY:
            return
        self._last_line = now
        left = pending + active
        if final and (stats.done, total) == self._last_counts:
            return  # the last line already said it
        self._last_counts = (stats.done, total)
        eta = f"{left / rate:.0f}s" if rate > 0 else "?"
        self.stream.write(
            f"crawled {stats.done}/{total} pages, {rate:.1f} pages/s, {left} to go, eta {eta}\n"
        )
        self.stream.flush()

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()
            root = logging.getLogger()
            for handler in list(root.handlers):
                root.removeHandler(handler)
            for handler in self._handlers:
                root.addHandler(handler)
            for name, level in self._levels.items():
                logging.getLogger(name).setLevel(level)


def _summary(stats: CrawlStats, out: TextIO) -> None:
    elapsed = time.monotonic() - stats.started
    rate = stats.done / elapsed if elapsed > 0 else 0.0
    out.write(
        f"captured    {stats.captured}\n"
        f"duplicates  {stats.duplicates}\n"
        f"errors      {stats.errors}\n"
        f"ignored     {stats.ignored}\n"
        f"time        {elapsed:.1f}s ({rate:.2f} pages/s)\n"
    )
    out.flush()


async def _serve_crawler(
    settings: Settings,
    *,
    once: bool,
    seeds: dict[str, Sequence[str]] | None,
    renderer: Renderer | None,
    store: Store | None,
    body: Callable[[Crawler, asyncio.Event], Any],
) -> int:
    """Open the store and the renderer, run ``body`` with a started crawler, close all."""
    from snapshotd.store import open_store

    store = store or open_store(settings.db)
    if renderer is None:
        from snapshotd.render import BrowserPool

        renderer = BrowserPool(settings.browser)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)
    for sig in signals:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await store.open()
        try:
            try:
                await renderer.start()
            except Exception as exc:
                log.error("cannot start the browser: %s", exc)
                return 2
            try:
                capture = CaptureService(settings, store, renderer)
                await capture.start()
                crawler: Crawler | None = None
                try:
                    crawler = Crawler(settings, store, capture, once=once, seeds=seeds)
                    await crawler.start()
                    return int(await body(crawler, stop))
                finally:
                    await capture.close()
                    if crawler is not None:
                        await crawler.stop()
            finally:
                await renderer.close()
        finally:
            await store.close()
    finally:
        for sig in signals:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)


async def run_worker(
    settings: Settings, *, renderer: Renderer | None = None, store: Store | None = None
) -> int:
    """``snapshotd worker``: crawl until SIGTERM or Ctrl-C, then shut down cleanly."""

    async def body(crawler: Crawler, stop: asyncio.Event) -> int:
        await stop.wait()
        log.info("stopping the crawler")
        return 0

    return await _serve_crawler(
        settings, once=False, seeds=None, renderer=renderer, store=store, body=body
    )


async def run_crawl(
    settings: Settings,
    seeds: Sequence[str] | None = None,
    max_pages: int | None = None,
    *,
    renderer: Renderer | None = None,
    store: Store | None = None,
    out: TextIO | None = None,
    progress: TextIO | None = None,
    tty: bool | None = None,
) -> int:
    """``snapshotd crawl``: crawl from the seeds until nothing is pending, print a summary.

    Exit status 0; 1 when nothing could be captured (no capture succeeded in this run and
    no crawled site holds a captured path); 130 when interrupted.
    """
    out = out or sys.stdout
    progress = progress or sys.stderr
    tty = progress.isatty() if tty is None else tty
    if max_pages is not None:
        settings = replace(
            settings, sites=tuple(replace(s, max_pages=max_pages) for s in settings.sites)
        )
    interrupted = False

    async def body(crawler: Crawler, stop: asyncio.Event) -> int:
        nonlocal interrupted
        with _Progress(progress, tty) as bar:
            while not crawler.finished.is_set():
                waiter = asyncio.ensure_future(crawler.finished.wait())
                stopper = asyncio.ensure_future(stop.wait())
                await asyncio.wait({waiter, stopper}, timeout=0.5, return_when="FIRST_COMPLETED")
                waiter.cancel()
                stopper.cancel()
                await asyncio.gather(waiter, stopper, return_exceptions=True)
                depth = await crawler.store.queue_depth()
                bar.update(crawler.stats, sum(depth.values()), crawler.active)
                if stop.is_set():
                    interrupted = True
                    log.info("interrupted: finishing the captures under way")
                    await crawler.stop()  # so the summary counts what they stored
                    break
            depth = await crawler.store.queue_depth()
            bar.update(crawler.stats, sum(depth.values()), 0, final=True)
        stats = crawler.stats
        _summary(stats, out)
        if interrupted:
            return 130
        if stats.captured:
            return 0
        counts = await crawler.store.counts()
        held = sum(counts.get(name, {}).get("processed", 0) for name in crawler.sites)
        return 0 if held and not stats.errors else 1

    return await _serve_crawler(
        settings,
        once=True,
        seeds=_crawl_seeds(settings, seeds),
        renderer=renderer,
        store=store,
        body=body,
    )
