"""Learning which query parameters do not change a page (SPEC 5.3).

Per site, snapshotd gathers evidence on each query parameter, page by page (a page being a
path without its query):

- *rendered*: a capture of ``/p?name=v`` shows a reader the same page as the capture of
  ``/p`` without that parameter (:func:`snapshotd.content.same_page`), or not;
- *declared*: ``/p`` links to ``/p?name=v`` where ``v`` is the id of one of its own headings,
  sections or anchors: the link only scrolls the page there, as documentation apps' routers
  do (such a link is not queued either, :mod:`snapshotd.crawl.follow`).

A parameter whose variants showed the same page on ``LEARN_FROM`` different pages, and a
different page on none, is learned *ignored*, under the longest directory prefix those pages
share; it is then dropped from every path under it, as ``ignore_params`` drops a name (the
site registry hands it to :class:`~snapshotd.urls.IgnoredParams`), and the variants already
pending are taken off the queue. One page where its variants differ makes it *kept* for
good. An operator's decision (``pinned``) is never changed by learning. Learning is bounded:
``MAX_PARAMS`` parameters a site, ``MAX_PAGES`` pages of evidence each.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator
from urllib.parse import unquote

from selectolax.lexbor import LexborHTMLParser

from snapshotd.config import SiteSettings
from snapshotd.content import Print, same_page
from snapshotd.store.base import PRIORITY_LINK, Store
from snapshotd.urls import split_site_path

__all__ = [
    "LEARN_FROM",
    "ParamLearner",
    "replace_variant",
    "scroll_targets",
    "without_each_param",
]

log = logging.getLogger("snapshotd.params")

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
    store (so every process and host adds to the same evidence)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        # Called once a decision changed (the site registry's refresh, so this process uses
        # it at once; the others read it within their refresh).
        self.on_change: Callable[[], Awaitable[None]] | None = None

    async def rendered(self, site: SiteSettings, path: str, print_: Print) -> None:
        """A capture of ``path`` showing ``print_`` was stored: compare it with the capture
        of each path it makes without one of its parameters."""
        if not site.learn_params:
            return
        variants = list(without_each_param(path))
        if not variants:
            return
        prints = await self.store.prints(site.name, [p for _, p in variants])
        page = split_site_path(path)[0]
        for name, other in variants:
            if other in prints:
                await self.evidence(site, name, page, same_page(print_, prints[other]))

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
                log.info("kept parameter site=%s name=%s: its variants differ on %s",
                         site.name, name, differ[0])
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

    async def drop_pending(self, site: SiteSettings, name: str, scope: str) -> int:
        """Take the pending paths under ``scope`` that carry ``name`` off the queue; the page
        without it is queued in their place when the store does not know it."""
        variants = [
            (r.path, r.hops) async for r in self.store.iter_paths(site.name)
            if r.state == "pending" and r.path.startswith(scope)
            and any(n == name for n, _ in without_each_param(r.path))
        ]
        for path, hops in variants:
            page = dict(without_each_param(path))[name]
            await replace_variant(self.store, site.name, path, page, hops)
        return len(variants)


async def replace_variant(store: Store, site: str, variant: str, page: str, hops: int) -> None:
    """Take ``variant`` off the queue for good: the page it stands for is queued in its place
    when the store does not know it."""
    await store.delete_path(site, variant)
    if await store.get_path(site, page) is None:
        await store.enqueue(site, page, PRIORITY_LINK, hops=hops)
