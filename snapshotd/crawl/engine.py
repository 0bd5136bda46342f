"""The crawler: claim a pending path, capture it, follow its links; keep every page fresh.

The :class:`Crawler` holds the lifecycle, the workers and the maintenance; its workers claim
through its :class:`~snapshotd.crawl.scheduling.Scheduler`, it admits URLs through its
:class:`~snapshotd.crawl.frontier.Frontier` and follows stored captures through its
:class:`~snapshotd.crawl.follow.Follower`.

Invariants:
- a path is captured only under its lease (``store.claim``); a lease left by a dead worker
  goes back to pending (the capture service's periodic reclaim, or at once for a dead
  process on this host), so a crash loses nothing and nothing stored is captured twice;
- ``browser.concurrency`` + 1 workers claim and capture, at most ``browser.concurrency`` of
  them rendering at once (the pool's slots): the one more waits for a slot with the next path
  while another stores what it rendered and queues its links; a site with ``crawl_delay`` has
  one capture at a time, started at least ``crawl_delay`` seconds after the previous one ended;
- the crawler follows the links of every capture it runs (stored marked by
  ``capture.run(..., follow_links=True)``) as part of that capture, and of every capture the
  capture service hands over through its ``links`` queue (the proxy misses of this process);
  what a stop or a crash left marked is followed at the next start; with ``follow_others``
  (the workers of one ``serve``) what the other processes stored marked is followed at
  each maintenance;
- a site that reached ``max_to_process`` is not claimed from (its job has ended, SPEC 7.2)
  until its limit is raised or its paths removed, nor is a paused site (SPEC 2.2) until it is
  resumed: its paths stay pending. Which sites' queues are claimed from is scheduling, decided
  in one place (:meth:`.scheduling.Scheduler.eligible`); what becomes of a path asked for, a
  bot's of a paused site too, is admission's (:mod:`snapshotd.sites.admission`);
- each maintenance moves every job's rounds on (:func:`snapshotd.crawl.rounds.advance`): a round
  that is over is recorded, the next starts when ``repeat`` says so;
- ``once`` (``snapshotd crawl``) ends by itself only when start-up is done and nothing is
  pending or being captured, but for sites that reached ``max_to_process``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from snapshotd.capture.service import CaptureService, retry_delay
from snapshotd.capture.stopping import STOP_GRACE, wind_down
from snapshotd.config.settings import MAINTENANCE_EVERY, SiteSettings
from snapshotd.crawl.follow import Follower
from snapshotd.crawl.frontier import CrawlStats, Frontier
from snapshotd.crawl.notify import Notifier
from snapshotd.crawl.rounds import advance
from snapshotd.crawl.scheduling import POLL_SECONDS, Scheduler
from snapshotd.net.fetch import Fetcher
from snapshotd.observe import logs
from snapshotd.observe.metrics import Metrics
from snapshotd.sites import path_policy
from snapshotd.sites.registry import SiteRegistry
from snapshotd.store.interface import EXPIRING, PRIORITY_LINK, PathRecord, Store

__all__ = ["CrawlStats", "Crawler"]

log = logging.getLogger("snapshotd.crawler")


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


class Crawler:
    """Claims and captures pending paths of every configured site until stopped.

    ``once``: the ``snapshotd crawl`` mode, which ends by itself (``finished`` is set) when
    nothing is pending or being captured, and does not requeue expired paths after start.
    Sites, their rules and whether they are paused come from ``sites``, which tells the
    crawler of every site added or changed (restarted too), each then seeded again.
    ``http`` (for robots.txt and sitemaps, under the address policy of each site) defaults
    to a :class:`Fetcher` made at start and closed by :meth:`stop`.
    """

    def __init__(
        self,
        sites: SiteRegistry,
        store: Store,
        capture: CaptureService,
        *,
        metrics: Metrics | None = None,
        http: Fetcher | None = None,
        once: bool = False,
        seeds: dict[str, Sequence[str]] | None = None,
        clock: Callable[[], float] = time.time,
        grace: float = STOP_GRACE,
        maintenance_every: float = MAINTENANCE_EVERY,
        follow_others: bool = False,
        notifier: Notifier | None = None,
    ) -> None:
        self.registry = sites
        self.notifier = notifier
        self.follow_others = follow_others
        self.store = store
        self.capture = capture
        self.metrics = metrics or capture.metrics
        self.once = once
        self.seeds = seeds  # instead of each site's own
        self.clock = clock
        self.grace = grace
        self.maintenance_every = maintenance_every
        self.scheduler = Scheduler(sites, store, capture)
        self.frontier = Frontier(store, sites.view_of, clock=clock, wake=self.scheduler.wake,
                                 http=http, learner=capture.learner)
        self.follower = Follower(self.frontier, store, clock=clock, learner=capture.learner)
        self.finished = asyncio.Event()
        self._stopping = False
        self._stopped = False
        self._booted = False  # seeds and sitemaps all queued
        self._tasks: list[asyncio.Task[None]] = []
        self._workers: list[asyncio.Task[None]] = []
        sites.listen(self._sites_changed)

    @property
    def sites(self) -> dict[str, SiteSettings]:
        """The sites as they are now, by name."""
        return {s.name: s for s in self.registry.sites}

    def _seeds_of(self, site: SiteSettings) -> Sequence[str]:
        return site.seeds if self.seeds is None else self.seeds.get(site.name, ())

    def _sites_changed(self, changed: set[str], removed: set[str]) -> None:
        """Seed every site added or changed (a restarted one starts again from its seeds);
        once the captures under way of a removed site end, remove what they left."""
        if self._booted and not self._stopping:
            for work in (self._start_sites(changed) if changed else None,
                         self._clear_removed(removed) if removed else None):
                if work is not None:
                    task = asyncio.create_task(work, name="sites")
                    self._tasks.append(task)
                    task.add_done_callback(self._forget)
        self.scheduler.wake()

    async def _clear_removed(self, names: set[str]) -> None:
        """A capture of a removed site that was under way may still have queued its links
        after the removal: once none is under way, remove those too."""
        while any(self.scheduler.busy[name] for name in names):
            await asyncio.sleep(POLL_SECONDS / 10)
        for name in names:
            if self.registry.site(name) is None:
                await self.store.clear_site(name)

    def _forget(self, task: asyncio.Task[None]) -> None:
        if task in self._tasks:
            self._tasks.remove(task)

    async def _start_sites(self, names: set[str]) -> None:
        for name in sorted(names):
            site = self.sites.get(name)
            if site is None:
                continue
            try:
                await self._start_site(site)
                await self.frontier.sitemaps(site)
            except Exception as exc:
                log.error("could not start site=%s: %s", name, exc)
        self.scheduler.wake()

    async def _start_site(self, site: SiteSettings) -> None:
        await self.frontier.count(site)
        if site.obey_robots:
            await self.frontier.refresh_robots(site)
        await self.frontier.seed(site, self._seeds_of(site))

    @property
    def stats(self) -> CrawlStats:
        """What this crawler did since it started."""
        return self.frontier.stats

    @property
    def active(self) -> int:
        """Captures under way in this crawler."""
        return self.scheduler.active

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Start in the background: robots.txt and seeds, then the workers and sitemaps."""
        self.frontier.stats = CrawlStats(started=time.monotonic())
        await self.frontier.open()
        self._tasks.append(asyncio.create_task(self._main(), name="crawler"))

    async def stop(self) -> None:
        """Stop claiming; let captures under way finish for ``grace`` seconds, then cancel
        them and give their paths back to the queue. Calling it again does nothing."""
        if self._stopped:
            return
        self._stopped = True
        self._stopping = True
        self.scheduler.wake()

        async def cut_short(running: set[asyncio.Future[Any]]) -> None:
            await self.capture.cancel_all()
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)

        # Only the workers claim: the other tasks (maintenance, following) hold no lease.
        await wind_down(self._workers, self.grace, cut_short, self.store, self.capture.owner)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        self._workers.clear()
        await self.frontier.close()
        if self.notifier is not None:
            await self.notifier.aclose()

    async def _main(self) -> None:
        try:
            await self._boot()
        except Exception as exc:
            log.error("crawler start-up failed: %s", exc)
            self.finished.set()
            return
        self._workers = [
            asyncio.create_task(self._worker(), name=f"crawler-worker-{n}")
            for n in range(self.registry.settings.browser.concurrency + 1)
        ]
        if self.capture.links is not None:
            self._tasks.append(asyncio.create_task(self._follow_handed_over(), name="links"))
        log.info(
            "crawler started sites=%s workers=%d%s",
            ",".join(self.sites),
            len(self._workers),
            " once" if self.once else "",
        )
        # Sitemaps can list many thousands of URLs: the seeds are being captured meanwhile.
        for site in self.sites.values():
            try:
                await self.frontier.sitemaps(site)
            except Exception as exc:
                log.error("sitemaps failed site=%s: %s", site.name, exc)
        self._booted = True
        self.scheduler.wake()
        while not self._stopping:
            await asyncio.sleep(self.maintenance_every)
            try:
                await self._maintain()
            except Exception as exc:
                logs.throttled(log, logging.ERROR, "crawler maintenance failed: %s", exc)

    async def _boot(self) -> None:
        for owner in await self.store.lease_owners():
            if _owner_is_dead_here(owner):
                n = await self.store.release_leases(owner)
                log.info("released %d leases of dead worker %s", n, owner)
        for site in self.sites.values():
            await self._start_site(site)
            await self.follower.follow_due_links(site)
            await self._requeue_expired(site)
        self._mark_full(await self.store.counts())
        self.scheduler.wake()

    async def _follow_handed_over(self) -> None:
        """Follow the captures the capture service made on its own (proxy misses)."""
        assert self.capture.links is not None
        while True:
            name, path = await self.capture.links.get()
            site = self.sites.get(name)
            if site is None:
                continue
            try:
                await self.follower.follow_stored(site, path)
            except Exception as exc:
                # Left marked: the next start tries again.
                log.warning("could not follow stored links site=%s path=%s: %s", name, path, exc)

    async def _maintain(self) -> None:
        """Every site's due work and job rounds, then what follows from the paths per state
        of all sites: which are full, which were removed, which jobs to notify."""
        for site in [] if self.once else self.sites.values():
            if self.follow_others:
                # Older than one maintenance, so this process's own are followed already.
                await self.follower.follow_due_links(
                    site, captured_before=self.clock() - self.maintenance_every
                )
            if site.obey_robots:
                await self.frontier.refresh_robots(site)
            await self.frontier.sitemaps(site)
            await self._requeue_expired(site)
        began = False
        for site in self.sites.values():
            await self.frontier.count(site)
            if not self.once:
                began |= await advance(self.store, self.registry, site, now=self.clock())
        if began:
            self.scheduler.wake()
        counts = await self.store.counts()
        self._mark_full(counts)
        # What a capture under way queued after its site was removed, here or elsewhere.
        for name in self.registry.orphans(counts):
            n = await self.store.clear_site(name)
            log.info("removed %d paths of removed site=%s", n, name)
        if self.notifier is not None:
            await self.notifier.check()

    def _mark_full(self, counts: dict[str, dict[str, int]]) -> None:
        """Note which sites reached ``max_to_process`` (by the store's ``counts``): they are
        not claimed from."""
        self.scheduler.full = {
            s.name for s in self.sites.values()
            if path_policy.full(s, counts.get(s.name, {}).get("processed", 0))
        }

    async def _requeue_expired(self, site: SiteSettings) -> None:
        # Failed captures come back when their backoff is over even without capture_expired.
        states = EXPIRING if site.capture_expired else ("error",)
        total = 0
        while True:
            n = await self.store.requeue_expired(site.name, states=states)
            total += n
            if n < 1000:
                break
        if total:
            log.info("requeued %d expired paths site=%s", total, site.name)
            self.scheduler.wake()

    # ------------------------------------------------------------------ workers

    def wake(self) -> None:
        """Look for pending paths now: this process has just queued some."""
        self.scheduler.wake()

    async def _worker(self) -> None:
        while not self._stopping:
            generation = self.scheduler.generation
            try:
                claimed = await self.scheduler.claim()
            except Exception as exc:
                logs.throttled(log, logging.ERROR, "claim failed: %s", exc)
                await asyncio.sleep(POLL_SECONDS)
                continue
            if claimed is None:
                if self.once and await self._all_done():
                    self.finished.set()
                    self.scheduler.wake()
                    return
                await self.scheduler.idle_wait(generation)
                continue
            site, record = claimed
            try:
                await self._capture(site, record)
            finally:
                self.scheduler.release(site)
                self.scheduler.wake()

    async def _capture(self, site: SiteSettings, record: PathRecord) -> None:
        """Capture a path this crawler claimed, follow what it points to, count it."""
        site = self.registry.site(site.name) or site  # with what it learned meanwhile
        renamed = path_policy.path_of(site, record.path)
        if renamed is not None and renamed != record.path and not (
            record.found and await self.capture.learner.checks(site, record.path)
        ):
            # Queued before the site ignored one of its parameters (and no check of that
            # decision), or under a spelling the site path's form has since resolved: it is
            # not rendered, and the page it stands for goes through admission in its place
            # (it may be ignored, or refused), found as it was.
            await self.store.delete_path(site.name, record.path)
            await self.frontier.admit(
                site, renamed, hops=record.hops, priority=PRIORITY_LINK, source="redirect",
                found=record.found,
            )
            return
        try:
            outcome = await self.capture.run(site, record, follow_links=True)
            if outcome.stored and self.registry.site(site.name) is not None:
                await self.follower.follow_outcome(site, outcome)
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
                    retry_at=self.clock() + retry_delay(record.attempts, site.refresh_after),
                )
            return
        if outcome.cut_short:
            return
        if not outcome.result.ok:
            self.stats.errors += 1
        elif outcome.stored and outcome.not_found:
            self.stats.not_found += 1
        elif outcome.stored:
            self.stats.captured += 1
            if await self.capture.reached_max(site):
                self.scheduler.full.add(site.name)
            copy = self.follower.took_as_copy(site, record.path)
            if outcome.duplicate_of or copy:
                self.stats.duplicates += 1

    async def _all_done(self) -> bool:
        if self.scheduler.active or not self._booted:
            return False
        counts = await self.store.counts()
        for name in self.sites:
            if name in self.scheduler.full:
                continue
            site_counts = counts.get(name, {})
            if site_counts.get("pending", 0) or site_counts.get("processing", 0):
                return False
        return not self.scheduler.active
