"""Learning which query parameters do not change a page (SPEC 5.3).

Per site, snapshotd gathers evidence on each query parameter, page by page (a page being a
path without its query), from what the crawler found on the site only: a path a bot's request
named and the crawler never found (``PathRecord.found``) is captured and served, but what its
capture shows is no evidence, so a stranger's made-up URLs teach the site nothing:

- *rendered*: a capture of ``/p?name=v`` shows a reader the same page as the capture of
  ``/p`` without that parameter (:func:`snapshotd.pages.fingerprints.same_page`), or not;
- *declared*: ``/p`` links to ``/p?name=v`` where ``v`` is the id of one of its own headings,
  sections or anchors: the link only scrolls the page there, as documentation apps' routers
  do (such a link is not queued either, :mod:`snapshotd.crawl.follow`).

A parameter whose variants showed the same page on ``LEARN_FROM`` different pages, and a
different page on none, is learned *ignored*, under the longest directory prefix those pages
share; it is then dropped from every path under it, as ``ignore_params`` drops a name (the
site registry hands it to :class:`~snapshotd.http_text.urls.IgnoredParams`), and the variants
already
pending are taken off the queue. One page where its variants differ makes it *kept* for
good, even one learned ignored before: while a learned parameter has evidence on fewer than
``MAX_PAGES`` pages, a variant carrying it that the crawler finds on a page without evidence is
captured as it is (:meth:`ParamLearner.checks`), so a page where it does matter overturns the
decision. An operator's decision (``pinned``) is never changed by learning, nor checked.
Learning is bounded: ``MAX_PARAMS`` parameters a site, ``MAX_PAGES`` pages of evidence each.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import replace
from urllib.parse import unquote

from selectolax.lexbor import LexborHTMLParser

from snapshotd.config.settings import SiteSettings
from snapshotd.http_text.urls import split_site_path
from snapshotd.pages.fingerprints import Print, same_page
from snapshotd.sites import path_policy
from snapshotd.store.interface import PRIORITY_LINK, PathRecord, Store

__all__ = [
    "LEARN_FROM",
    "ParamLearner",
    "replace_variant",
    "scroll_targets",
    "without_each_param",
]

log = logging.getLogger("snapshotd.sites.param_learner")

LEARN_FROM = 3
MAX_PARAMS = 64
MAX_PAGES = 16


def _name(part: str) -> str:
    return unquote(part.partition("=")[0].replace("+", " "))


def without_each_param(path: str) -> Iterator[tuple[str, str]]:
    """For each parameter of a site path's query: (its name, the path without it)."""
    base, query, fragment = split_site_path(path)
    parts = [p for p in query.split("&") if p] if query else []
    tail = f"#!{fragment}" if fragment is not None else ""
    for i, part in enumerate(parts):
        rest = "&".join(parts[:i] + parts[i + 1 :])
        yield _name(part), base + (f"?{rest}" if rest else "") + tail


# What a link's parameter may scroll to: a heading, a section or an anchor with that id.
_TARGETS = ", ".join(f"{tag}[id]" for tag in ("h1", "h2", "h3", "h4", "h5", "h6", "section", "a"))


def scroll_targets(html: str) -> set[str]:
    """The ids of a page's headings, sections and anchors."""
    return {
        node.attributes.get("id") or "" for node in LexborHTMLParser(html).css(_TARGETS)
    } - {""}


def _scope(pages: list[str]) -> str:
    """The longest directory prefix that ``pages`` share (at least ``/``)."""
    first, last = min(pages), max(pages)
    common = first[: next((i for i, (a, b) in enumerate(zip(first, last, strict=False))
                           if a != b), min(len(first), len(last)))]
    return common[: common.rfind("/") + 1] or "/"


class ParamLearner:
    """Gathers the evidence and makes the decisions; one per process, its state in the
    store (so every process and host adds to the same evidence). ``on_change`` is called
    once a decision changed (the site registry's refresh, so this process uses it at once;
    the others read it within their refresh)."""

    def __init__(
        self, store: Store, *, on_change: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        self.store = store
        self.on_change = on_change
        # Each site as it would be without what it learned: (the site, that copy).
        self._unlearned: dict[str, tuple[SiteSettings, SiteSettings]] = {}

    async def rendered(self, site: SiteSettings, record: PathRecord, print_: Print) -> None:
        """A capture of ``record`` showing ``print_`` was stored: compare it with the capture
        of each path it makes without one of its parameters, and with the capture of each
        path that is it with one more (at most ``MAX_PAGES`` of them), when the crawler found
        both; whichever of the two was captured first, the second compares them."""
        path = record.path
        if not site.learn_params or not record.found:
            return
        page = split_site_path(path)[0]
        fewer = list(without_each_param(path))
        prints = await self.store.prints(site.name, [p for _, p in fewer], found=True)
        for name, other in fewer:
            if other in prints:
                await self.evidence(site, name, page, same_page(print_, prints[other]))
        for variant, shown in (await self.store.variant_prints(
            site.name, page, MAX_PAGES
        )).items():
            for name, other in without_each_param(variant):
                if other == path:
                    await self.evidence(site, name, page, same_page(shown, print_))

    async def declared(self, site: SiteSettings, name: str, page: str) -> None:
        """``page`` links to itself with ``name`` naming one of its elements."""
        if site.learn_params:
            await self.evidence(site, name, page, True)

    async def evidence(self, site: SiteSettings, name: str, page: str, same: bool) -> None:
        """Record what one page says of a parameter, and decide on it again."""
        known = await self.store.param_evidence(site.name)
        pages = {p for p, _ in known.get(name, [])}
        if name not in known and len(known) >= MAX_PARAMS:
            return
        if page not in pages and len(pages) >= MAX_PAGES and same:
            return
        if page in pages and (page, same) in known[name]:
            return
        await self.store.add_param_evidence(site.name, name, page, same)
        await self._decide(site, name)

    async def _decide(self, site: SiteSettings, name: str) -> None:
        decided = {p.name: p for p in await self.store.list_params(site.name)}
        current = decided.get(name)
        if current is not None and current.pinned:
            return
        evidence = (await self.store.param_evidence(site.name)).get(name, [])
        differ = [p for p, same in evidence if not same]
        if differ:
            if current is None or current.state != "kept":
                await self.store.put_param(site.name, name, "kept", "/", pinned=False)
                if current is not None and self.on_change is not None:
                    await self.on_change()
                log.info("kept parameter site=%s name=%s: its variants differ on %s%s",
                         site.name, name, differ[0],
                         " (it was ignored)" if current is not None else "")
            return
        pages = [p for p, _ in evidence]
        if len(pages) < LEARN_FROM:
            return
        scope = _scope(pages)
        if current is not None and (current.state, current.scope) == ("ignored", scope):
            return
        await self.store.put_param(site.name, name, "ignored", scope, pinned=False)
        if self.on_change is not None:
            await self.on_change()
        dropped = await self.drop_pending(site, name, scope)
        log.info(
            "learned parameter site=%s name=%s scope=%s: the same page on %d pages; "
            "%d pending variants dropped", site.name, name, scope, len(pages), dropped,
        )

    def unlearned(self, site: SiteSettings) -> SiteSettings:
        """``site`` without the parameters it ignores by learning or an operator's word."""
        known = self._unlearned.get(site.name)
        if known is None or known[0] is not site:
            known = site, replace(site, learned_params=())
            self._unlearned[site.name] = known
        return known[1]

    async def check_of(self, site: SiteSettings, url: str) -> str | None:
        """The path of ``url`` as it is, when the crawler, having found it, is to capture it
        so although the site ignores one of its parameters (see :meth:`checks`); else None."""
        if not site.learn_params or not site.learned_params:
            return None
        path = path_policy.path_of(self.unlearned(site), url)
        if path is None or path == path_policy.path_of(site, url):
            return None
        if not await self.checks(site, path):
            return None
        return path

    async def checks(self, site: SiteSettings, path: str) -> bool:
        """Whether ``path``, found by the crawler, is captured as it is: it carries a
        parameter learned ignored (not pinned) that has evidence on fewer than ``MAX_PAGES``
        pages, none of them its page, so a page where the parameter matters is seen."""
        if not site.learn_params or path_policy.path_of(self.unlearned(site), path) != path:
            return False
        page = split_site_path(path)[0]
        decided = {p.name: p for p in await self.store.list_params(site.name)}
        evidence = await self.store.param_evidence(site.name)
        for name, _ in without_each_param(path):
            decision = decided.get(name)
            if (decision is None or decision.pinned or decision.state != "ignored"
                    or not path.startswith(decision.scope)):
                continue
            pages = {p for p, _ in evidence.get(name, [])}
            if page not in pages and len(pages) < MAX_PAGES:
                return True
        return False

    async def drop_pending(self, site: SiteSettings, name: str, scope: str) -> int:
        """Take the pending paths under ``scope`` that carry ``name`` off the queue; the page
        without it is queued in their place when the store does not know it."""
        variants = [
            r async for r in self.store.iter_paths(site.name)
            if r.state == "pending" and r.path.startswith(scope)
            and any(n == name for n, _ in without_each_param(r.path))
        ]
        for r in variants:
            page = dict(without_each_param(r.path))[name]
            await replace_variant(self.store, site.name, r, page)
        return len(variants)


async def replace_variant(store: Store, site: str, variant: PathRecord, page: str) -> None:
    """Take ``variant`` off the queue for good: the page it stands for is queued in its place
    when the store does not know it, found as the variant was."""
    await store.delete_path(site, variant.path)
    if await store.get_path(site, page) is None:
        await store.enqueue(site, page, PRIORITY_LINK, hops=variant.hops, found=variant.found)
