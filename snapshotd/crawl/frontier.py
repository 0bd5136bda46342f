"""The crawl frontier: a URL of a site becomes an admitted, queued path.

:meth:`Frontier.admit` is the crawler's one way into the queue; the seeds and sitemaps feed it
here, the links, canonicals and redirects of stored captures from :mod:`snapshotd.crawl.follow`.
The frontier also holds what admission needs to know: robots.txt as last read, each site's
count of pages, the crawl's counters.

Invariants:
- every path set pending by the crawler first went through the site's rewrite rules, the
  ignore list, robots.txt, ``max_hops`` and ``max_pages``, in that order
  (:mod:`snapshotd.sites.admission` decides, ``admit`` applies);
- a path admitted from a page the crawler found (or from a seed or a sitemap) is marked found,
  new or known; one admitted from a page only a bot's request named is not (its links are
  that stranger's choice as much as the site's), and a known one keeps its mark;
- a link carrying a parameter the site learned to ignore is also admitted as it is when the
  learner checks that decision there (:meth:`~snapshotd.sites.param_learner.ParamLearner.check_of`),
  at the priority of a variant;
- every URL a seed, a sitemap or a followed page names is counted as found by the site's
  job (:meth:`Frontier.found`), whatever admission makes of it;
- a site's count is read from the store at start and at each maintenance, and grows by each
  path added here in between, so ``max_pages`` holds without a query per link;
- the crawl regex searches of one sitemap file's entries share ``SITEMAP_REGEX`` seconds of
  matching time (:mod:`snapshotd.patterns.crawl_patterns`);
- a site's sitemaps are read again only when they are due (``sitemaps:<site>`` in the store's
  meta): ``expire_after`` after a good read, at most ``SITEMAP_RETRY`` seconds after a failed
  one;
- robots.txt and sitemaps are fetched through one :class:`~snapshotd.net.fetch.Fetcher`, under the
  address policy of each site; a Fetcher made here is closed by :meth:`Frontier.close`.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from snapshotd.config.settings import SiteSettings
from snapshotd.crawl.robots import ROBOTS_USER_AGENT, RobotsCache
from snapshotd.crawl.sitemaps import SitemapEntry, fetch_sitemap
from snapshotd.net.fetch import Fetcher
from snapshotd.pages.links import normalize_url
from snapshotd.patterns.crawl_patterns import regex_budget
from snapshotd.sites import path_policy
from snapshotd.sites.admission import Source, StoreFacts, admit, decide
from snapshotd.sites.param_learner import ParamLearner
from snapshotd.sites.view import SiteView
from snapshotd.store.interface import PRIORITY_EXPIRED, PRIORITY_LINK, PathRecord, Store

log = logging.getLogger("snapshotd.crawler")

# A link with a query waits behind those without one (and a check of a learned parameter).
PRIORITY_VARIANT = PRIORITY_EXPIRED

SITEMAP_RETRY = 300.0
# URLs counted as found in one transaction at most (a sitemap file lists up to 50,000).
FOUND_BATCH = 5000
# The crawl regex's matching time for all the entries of one sitemap file (up to 50,000).
SITEMAP_REGEX = 1.0


@dataclass
class CrawlStats:
    """What this crawler did since it started."""

    captured: int = 0
    duplicates: int = 0
    not_found: int = 0  # answered as their site's not-found view: no page
    errors: int = 0
    ignored: int = 0
    queued: int = 0
    started: float = 0.0

    @property
    def done(self) -> int:
        return self.captured + self.not_found + self.errors


class _CrawlFacts(StoreFacts):
    """Admission's facts as the frontier has them: its own count of each site's pages, and
    robots.txt as last read."""

    def __init__(self, frontier: Frontier, site: SiteSettings) -> None:
        super().__init__(frontier.store, site.name)
        self.frontier, self.site_settings = frontier, site
        self.known: PathRecord | None = None

    async def record(self, path: str) -> PathRecord | None:
        self.known = await super().record(path)
        return self.known

    async def size(self) -> int:
        return self.frontier.size.get(self.site, 0)

    def robots_allow(self, path: str) -> bool:
        robots = self.frontier.robots
        return robots is None or robots.allowed(self.site_settings, path)


class Frontier:
    """Admits URLs of the configured sites into the queue; ``wake`` is called whenever a
    path is set pending, so idle workers look at once."""

    def __init__(
        self,
        store: Store,
        view_of: Callable[[SiteSettings], SiteView],
        *,
        clock: Callable[[], float],
        wake: Callable[[], None],
        http: Fetcher | None = None,
        learner: ParamLearner | None = None,
    ) -> None:
        self.store = store
        self.learner = learner
        self.view_of = view_of  # a site's current view (SiteRegistry.view_of)
        self.clock = clock
        self.wake = wake
        self._own_http = http is None
        self.http = http
        self.robots: RobotsCache | None = None
        self.size: dict[str, int] = {}
        self.stats = CrawlStats()

    async def open(self) -> None:
        """Make the Fetcher if none was given, and the robots.txt cache on it."""
        if self.http is None:
            self.http = Fetcher(headers={"User-Agent": ROBOTS_USER_AGENT, "X-Snapshotd": "1"})
        self.robots = RobotsCache(self.http, clock=self.clock)

    async def close(self) -> None:
        if self._own_http and self.http is not None:
            await self.http.aclose()
            self.http = None

    async def count(self, site: SiteSettings) -> None:
        """Read the site's count of pages again."""
        self.size[site.name] = await self.store.site_size(site.name)

    async def refresh_robots(self, site: SiteSettings) -> None:
        assert self.robots is not None
        await self.robots.refresh(site)

    async def seed(self, site: SiteSettings, seeds: Sequence[str]) -> None:
        await self.found(site, seeds)
        for seed in seeds:
            await self.admit(site, seed, hops=0, priority=PRIORITY_LINK, source="seed")

    async def found(self, site: SiteSettings, urls: Sequence[str]) -> None:
        """Count ``urls`` (absolute, or paths of the site) as found by the site's job, admitted
        or not (Crawlbot's ``urlsHarvested``, :mod:`snapshotd.store.found_urls`)."""
        base = site.origin.rstrip("/") + "/"
        found = [u for url in urls if (u := normalize_url(url, base)) is not None]
        for start in range(0, len(found), FOUND_BATCH):  # short transactions, one a batch
            await self.store.add_found_urls(site.name, found[start : start + FOUND_BATCH])

    # ------------------------------------------------------------------ sitemaps

    async def sitemaps(self, site: SiteSettings) -> None:
        """Read the site's sitemaps if they are due, admitting every URL they list."""
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
                await self.found(site, [entry.loc for entry in entries])
                with regex_budget(f"a sitemap file of site={site.name}", SITEMAP_REGEX):
                    for entry in entries:
                        outcome = await self.admit(
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
                same_site=lambda u: path_policy.path_of(site, u) is not None,
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
        wait = min(SITEMAP_RETRY, site.refresh_after) if errors else site.refresh_after
        await self.store.set_meta(key, json.dumps({"fetched_at": now, "next_fetch": now + wait}))

    # ------------------------------------------------------------------ admission

    async def admit(
        self,
        site: SiteSettings,
        url: str,
        *,
        hops: int,
        priority: int,
        source: Source,
        lastmod: float | None = None,
        found: bool = True,
    ) -> str:
        """Set one URL of ``site`` pending if admission allows it
        (:mod:`snapshotd.sites.admission`). Answers what happened: queued, requeued, pending, fresh,
        ignored, skipped, external. ``found``: the page it is on was found by the crawler (see the
        module's rules). It is judged by the site's current view, its settings and rules of
        one version."""
        view = self.view_of(site)
        site = view.settings
        path = path_policy.path_of(site, url)
        if path is None:
            return "external"
        outcome = await self._admit_path(view, path, hops, priority, source, lastmod, found)
        if found and self.learner is not None:
            check = await self.learner.check_of(site, url)
            if check is not None:
                await self._admit_path(view, check, hops, PRIORITY_VARIANT, source, lastmod, True)
        return outcome

    async def _admit_path(
        self,
        view: SiteView,
        path: str,
        hops: int,
        priority: int,
        source: Source,
        lastmod: float | None,
        found: bool,
    ) -> str:
        site = view.settings
        facts = _CrawlFacts(self, site)
        decision = await admit(
            decide(
                site,
                view.rules,
                path,
                source=source,
                now=self.clock(),
                priority=priority,
                host=site.request_host,
                hops=hops,
                lastmod=lastmod,
            ),
            facts,
        )
        path = decision.path
        known = facts.known
        if found and known is not None and not known.found and decision.kind != "capture":
            await self.store.mark_found(site.name, known.path)
        if decision.kind == "refused":
            log.debug("skipped site=%s path=%s reason=%s", site.name, path, decision.reason)
            return "skipped"
        if decision.kind == "known":
            return decision.reason
        if decision.kind == "ignored":
            if await self.store.add_ignored(site.name, path, hops=hops, reason="ignored"):
                self.stats.ignored += 1
                self.size[site.name] = self.size.get(site.name, 0) + 1
                log.debug("ignored site=%s path=%s from=%s", site.name, path, source)
                return "ignored"
            return "known"
        outcome = await self.store.enqueue(
            site.name, path, decision.priority, hops=hops, force=decision.force, found=found
        )
        if outcome == "queued":
            self.size[site.name] = self.size.get(site.name, 0) + 1
        if outcome in ("queued", "requeued", "reprioritised"):
            self.stats.queued += outcome == "queued"
            log.debug("%s site=%s path=%s hops=%d from=%s", outcome, site.name, path, hops, source)
            self.wake()
        return outcome
