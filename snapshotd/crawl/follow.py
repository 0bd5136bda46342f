"""Following a stored capture: its redirect, its canonical link, its links, all sent to the
frontier's admission (:meth:`~snapshotd.crawl.frontier.Frontier.admit`).

Which captures are followed, and by whom (see :mod:`snapshotd.capture.service`): the crawler follows
the captures it runs itself from their outcome (:meth:`Follower.follow_outcome`), and the
captures the capture service hands over (proxy misses of this process) from the store
(:meth:`Follower.follow_stored`), like those left marked by a worker that stopped or died
(:meth:`Follower.follow_due_links`, one pass at start).

Invariants:
- links are followed only from a stored 2xx capture that is not a copy by content, those
  with a query at priority 0, behind those without; a stored 3xx
  queues its target instead, at the same hops (it stands for the same page);
- a page kept in more than one device profile is followed in each: the links of every
  profile's capture (a desktop layout's menu is found as a phone's is), its canonical link,
  ``nofollow`` and redirect in the first profile's, which decides the path's record;
- a page that says ``nofollow`` (its meta robots or ``X-Robots-Tag``), or of a site without
  ``crawl_links``, queues nothing;
- every URL a followed page the crawler found names (its links, canonical or redirect, on the
  site or not) is counted as found by the site's job, before admission decides on it;
- with ``use_canonical``, a page whose canonical link is another path of the site is marked a
  copy of it and queues the canonical as one more link, its own links as well (a page
  reachable only through it is still found);
- all the crawl regex searches of one capture's links share one budget of matching time;
- a capture's mark (``links_due``) is cleared only once all it points to went through
  admission: a failure or a stop in between leaves it for the next start;
- a link to the page itself with only a query added, each of whose values is the id of one
  of the page's elements, only scrolls the page: it is not queued, and it is evidence that
  those parameters do not change a page (:mod:`snapshotd.sites.param_learner`).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from urllib.parse import parse_qsl, urlsplit

from snapshotd.capture.service import Outcome
from snapshotd.config.settings import SiteSettings
from snapshotd.crawl.frontier import PRIORITY_VARIANT, Frontier
from snapshotd.http_text.urls import split_site_path
from snapshotd.pages.links import extract_links, normalize_url
from snapshotd.patterns.crawl_patterns import regex_budget
from snapshotd.render.renderer import CaptureResult
from snapshotd.sites import path_policy
from snapshotd.sites.param_learner import ParamLearner, scroll_targets
from snapshotd.store.interface import PRIORITY_LINK, PathRecord, Store

log = logging.getLogger("snapshotd.crawler")


def _robots_tag_nofollow(value: str) -> bool:
    """Whether an ``X-Robots-Tag`` value says ``nofollow`` (or ``none``, which implies it),
    for every crawler or under a ``name:`` prefix."""
    for part in value.lower().split(","):
        token = part.rsplit(":", 1)[-1].strip()
        if token in ("nofollow", "none"):
            return True
    return False


def _scroll_params(url: str, page_url: str) -> list[tuple[str, str]]:
    """The (name, value) parameters of a link to the page itself with only a query added:
    candidates for a scroll target; [] for any other link."""
    link, page = urlsplit(url), urlsplit(page_url)
    if (link.scheme, link.netloc, link.path) != (page.scheme, page.netloc, page.path):
        return []
    if not link.query or page.query or link.fragment.startswith("!"):
        return []
    return parse_qsl(link.query)


class Follower:
    """Sends what stored captures point to through ``frontier``."""

    def __init__(
        self,
        frontier: Frontier,
        store: Store,
        *,
        clock: Callable[[], float],
        learner: ParamLearner | None = None,
    ) -> None:
        self.frontier = frontier
        self.store = store
        self.clock = clock
        self.learner = learner or ParamLearner(store)
        self._canonical_copies: set[tuple[str, str]] = set()

    def took_as_copy(self, site: SiteSettings, path: str) -> bool:
        """Whether following ``path`` marked it a copy of its canonical (asked once)."""
        key = (site.name, path)
        copy = key in self._canonical_copies
        self._canonical_copies.discard(key)
        return copy

    async def follow_outcome(self, site: SiteSettings, outcome: Outcome) -> None:
        """Follow a capture just stored for the crawler, then clear its mark."""
        await self.follow(
            site, outcome.record, outcome.result, outcome.duplicate_of,
            [(v.status, v.html, v.final_url) for v in outcome.variants],
        )
        await self.store.links_followed(site.name, outcome.record.path)

    async def follow_due_links(
        self, site: SiteSettings, *, captured_before: float | None = None
    ) -> None:
        """Follow the links of captures stored without them having been followed: the worker
        that stored them stopped or died in between. One pass over what was stored before this
        start (or ``captured_before``); a live worker's newer captures are its own to follow."""
        started = self.clock() if captured_before is None else captured_before
        followed = last = 0
        while batch := await self.store.links_due(site.name, after=last, captured_before=started):
            last = batch[-1][0]
            for _id, path in batch:
                try:
                    followed += await self.follow_stored(site, path)
                except Exception as exc:
                    # Left marked: the next start tries again.
                    log.warning(
                        "could not follow stored links site=%s path=%s: %s", site.name, path, exc
                    )
        if followed:
            log.info("followed the links of %d stored captures site=%s", followed, site.name)

    async def follow_stored(self, site: SiteSettings, path: str) -> bool:
        """Follow a capture from what the store holds of it, then clear its mark. Answers
        whether there was a capture to follow."""
        record = await self.store.get_path(site.name, path)
        snapshot = await self.store.get_snapshot(site.name, path)
        if record is not None and snapshot is not None:
            url = site.url_for(path)
            others = []
            for profile in (await self.store.own_profiles(site.name, [path])).get(path, ())[1:]:
                other = await self.store.get_snapshot(site.name, path, profile)
                if other is not None and other.path == path:
                    others.append((other.status, other.html, other.final_url or url))
            result = CaptureResult(
                url=url,
                final_url=snapshot.final_url or url,
                status=snapshot.status,
                headers=snapshot.headers,
                html=snapshot.html,
            )
            duplicate_of = record.duplicate_of
            if duplicate_of is not None:
                # A copy by its canonical link is followed again, which queues the canonical
                # and its links; only a copy by content has nothing to follow.
                canonical = extract_links(result.html, result.final_url).canonical
                if canonical and path_policy.path_of(site, canonical) == duplicate_of:
                    duplicate_of = None
            await self.follow(site, record, result, duplicate_of, others)
        await self.store.links_followed(site.name, path)
        return record is not None and snapshot is not None

    async def follow(
        self,
        site: SiteSettings,
        record: PathRecord,
        result: CaptureResult,
        duplicate_of: str | None,
        others: Sequence[tuple[int, str, str]] = (),
    ) -> None:
        """Follow what a stored capture points to: its redirect, canonical, links, and the
        links of ``others``, its other profiles' captures (status, HTML, URL); what a page
        only a bot's request named points to is not found by the crawler. The site's crawl
        regex gets one budget of matching time for them all
        (:mod:`snapshotd.patterns.crawl_patterns`)."""
        with regex_budget(f"the links of site={site.name} path={record.path}"):
            await self._follow(site, record, result, duplicate_of, others)

    async def _follow(
        self,
        site: SiteSettings,
        record: PathRecord,
        result: CaptureResult,
        duplicate_of: str | None,
        others: Sequence[tuple[int, str, str]],
    ) -> None:
        admit = functools.partial(self.frontier.admit, found=record.found)
        page_url = result.final_url or site.url_for(record.path)
        hops = record.hops + 1
        if 300 <= result.status < 400:
            location = result.headers.get("Location") or result.headers.get("location")
            if location and site.crawl_links:
                target = normalize_url(location, page_url)
                if target:
                    if record.found:
                        await self.frontier.found(site, [target])
                    # The target stands for the same page, one redirect away: same depth.
                    await admit(
                        site, target, hops=record.hops, priority=PRIORITY_LINK, source="redirect"
                    )
            return
        if not 200 <= result.status < 300 or duplicate_of is not None:
            return
        page = extract_links(result.html, page_url)
        nofollow = page.nofollow or _robots_tag_nofollow(result.headers.get("X-Robots-Tag", ""))
        own = {record.path, path_policy.path_of(site, page_url)}
        links = list(page.links)
        for status, html, url in others:
            if 200 <= status < 300:
                links += extract_links(html, url).links
        links = list(dict.fromkeys(links))
        if page.canonical:
            canonical = path_policy.path_of(site, page.canonical)
            if canonical is not None and canonical not in own:
                if site.use_canonical:
                    await self.store.set_duplicate(site.name, record.path, canonical)
                    self._canonical_copies.add((site.name, record.path))
                    log.info(
                        "duplicate site=%s path=%s canonical=%s", site.name, record.path, canonical
                    )
                    if site.crawl_links and not nofollow:
                        await admit(
                            site,
                            canonical,
                            hops=record.hops,
                            priority=PRIORITY_LINK,
                            source="canonical",
                        )
                else:
                    links.append(page.canonical)
        if nofollow or not site.crawl_links:
            return
        if record.found:  # every URL it names, on the site or not, admitted or not
            await self.frontier.found(site, [*links, *([page.canonical] if page.canonical else [])])
        targets: set[str] | None = None
        for url in links:
            # Before the page's own paths are skipped: a parameter the site learned to ignore
            # gathers evidence still (its decision is checked, snapshotd.sites.param_learner).
            scroll = _scroll_params(url, page_url) if site.learn_params else []
            if scroll:
                targets = scroll_targets(result.html) if targets is None else targets
                if all(value in targets for _, value in scroll):
                    # The page's own router only scrolls it: not a page of its own.
                    for name, _ in scroll:
                        if record.found:
                            await self.learner.declared(
                                site, name, split_site_path(record.path)[0])
                    continue
            path = path_policy.path_of(site, url)
            if path is None or path in own:
                continue
            # A link with a query waits behind those without one: until its page is known, a
            # variant of it is more often the same page (snapshotd.sites.param_learner learns
            # which).
            priority = PRIORITY_VARIANT if "?" in path.partition("#!")[0] else PRIORITY_LINK
            await admit(site, url, hops=hops, priority=priority, source="link")
