"""A site's own sitemap, built from its snapshots (SPEC 5.4).

Invariants:
- it lists what the store lists (:mod:`snapshotd.store.lastmod`): the site's 200 pages that
  are no copy, each at the site's public address, ``lastmod`` when its main text last changed;
- a site with no page to list has no sitemap (``None``: the schema wants one ``<url>`` at
  least), and a URL longer than :data:`MAX_LOC` characters (the schema's bound) is left out;
- at most :data:`PART_URLS` URLs a file: a site with more is a sitemap index whose files are
  the same address with ``?part=1``, ``?part=2``…, each ``lastmod`` its newest page's; a part
  past the last is ``None`` (the caller's 404);
- ``gzip`` only when the asker accepts it, and then ``Vary: Accept-Encoding`` is said.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass

from snapshotd.config.settings import SiteSettings
from snapshotd.pages.sitemap_xml import sitemap_index, urlset
from snapshotd.store.interface import Store

__all__ = ["PART_URLS", "SitemapFile", "build_sitemap", "part_of", "wants_gzip"]

PART_URLS = 50_000
MAX_LOC = 2048


@dataclass(frozen=True)
class SitemapFile:
    body: bytes
    headers: dict[str, str]


def part_of(query: str) -> int | None:
    """The part a sitemap's query asks for: None for no query, else ``part=N`` (1 to 10^6);
    ValueError for any other query."""
    if not query:
        return None
    name, _, value = query.partition("=")
    if name != "part" or not value.isascii() or not value.isdigit() or len(value) > 7:
        raise ValueError("a sitemap takes only ?part=N")
    return int(value)


def wants_gzip(accept_encoding: str) -> bool:
    """Whether an ``Accept-Encoding`` takes gzip (with a q above 0)."""
    for item in accept_encoding.lower().split(","):
        name, _, params = item.strip().partition(";")
        if name.strip() in ("gzip", "x-gzip", "*"):
            q = params.strip().removeprefix("q=")
            try:
                return not params.strip() or float(q) > 0
            except ValueError:
                return False
    return False


async def build_sitemap(
    store: Store,
    site: SiteSettings,
    address: str,
    part: int | None,
    *,
    gzipped: bool,
    part_urls: int = PART_URLS,
) -> SitemapFile | None:
    """The sitemap file served at ``address`` (absolute, no query): the whole sitemap, or its
    index when longer than ``part_urls``, without ``part``; one part (from 1) with it."""
    count = await store.sitemap_count(site.name)
    if count == 0:
        return None
    parts = -(-count // part_urls)
    if part is None and parts > 1:
        newest = []
        for n in range(parts):
            pages = await store.sitemap_pages(site.name, n * part_urls, part_urls)
            if pages:  # none when pages went since they were counted
                newest.append((f"{address}?part={n + 1}", max(at for _, at in pages)))
        body = sitemap_index(newest)
    else:
        n = 1 if part is None else part
        if not 1 <= n <= parts:
            return None
        pages = await store.sitemap_pages(site.name, (n - 1) * part_urls, part_urls)
        base = site.public_base
        body = urlset((base + p, at) for p, at in pages if len(base + p) <= MAX_LOC)
    headers = {"Content-Type": "application/xml; charset=utf-8", "Vary": "Accept-Encoding"}
    if gzipped:
        body = gzip.compress(body, mtime=0)
        headers["Content-Encoding"] = "gzip"
    return SitemapFile(body, headers)
