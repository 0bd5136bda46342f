"""A site's path policy: which URLs name its pages, and which of its paths it crawls,
processes or ignores, and when it is full (of processed pages, or of paths). Each question
is answered here, in one function, for admission, the crawler, its rounds and the capture
service alike; a site's settings (:class:`~snapshotd.config.settings.SiteSettings`) hold
only the values.

Invariants:
- nothing here does I/O or keeps state (a site's regexes are compiled once, with its
  settings: ``SiteSettings.url_regexes``);
- a question about a path is answered from the site's settings and the path alone (``full``
  from the number of processed pages its caller counted, ``at_max_pages`` from the number
  of paths);
- nothing outside this module judges by the settings these questions read
  (``tests/test_architecture.py``).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from snapshotd.config.settings import SiteSettings
from snapshotd.http_text.urls import BadRequest, site_path_from_url
from snapshotd.pages.links import normalize_url
from snapshotd.patterns.crawl_patterns import url_matches

__all__ = [
    "at_max_pages",
    "crawls",
    "full",
    "is_ignored",
    "limits_processing",
    "path_of",
    "processes",
    "processes_html",
]


def path_of(site: SiteSettings, url: str) -> str | None:
    """The site path of a URL or path of ``site``; None when it is on another site or cannot
    name a page (a link, a canonical, a redirect's location, a sitemap entry)."""
    absolute = normalize_url(url, site.origin.rstrip("/") + "/")
    if absolute is None:
        return None
    parts = urlsplit(absolute)
    origin = urlsplit(normalize_url(site.origin) or site.origin)
    same = (parts.scheme, parts.netloc) == (origin.scheme, origin.netloc) or (
        (parts.hostname or "") in site.hosts
    )
    if not same:
        return None
    try:
        # Validates, maps an ugly ?_escaped_fragment_= link to its #! path, and drops the
        # parameters the site ignores.
        return site_path_from_url(absolute, site.ignored_params)
    except BadRequest:
        return None


def crawls(site: SiteSettings, path: str) -> bool:
    """Whether a discovered path is one to crawl (``url_crawl_pattern`` and ``_regex``,
    matched against its whole URL)."""
    if not (site.url_crawl_pattern or site.url_crawl_regex):
        return True
    return url_matches(site.url_for(path), site.url_crawl_pattern, site.url_regexes[0])


def processes(site: SiteSettings, path: str) -> bool:
    """Whether a crawled page's URL lets it be processed (its snapshot kept): under
    ``url_process_pattern`` / ``_regex``; its HTML must pass :func:`processes_html`."""
    if not (site.url_process_pattern or site.url_process_regex):
        return True
    return url_matches(
        site.url_for(path), site.url_process_pattern, site.url_regexes[1]
    )


def processes_html(site: SiteSettings, html: str) -> bool:
    """Whether a crawled page's HTML lets it be processed: under ``page_process_pattern``
    (any of its ``||``-separated strings)."""
    if not site.page_process_pattern:
        return True
    return any(t in html for t in site.page_process_pattern.split("||") if t.strip())


def is_ignored(site: SiteSettings, path: str) -> bool:
    """Whether the path holds one of the site's ``ignore`` strings."""
    return bool(site.ignore) and any(f and f in path for f in site.ignore)


def limits_processing(site: SiteSettings) -> bool:
    """Whether the site stops processing pages at some number (``max_to_process`` is not -1):
    else it is never :func:`full`, and its processed pages need no counting."""
    return site.max_to_process >= 0


def full(site: SiteSettings, processed: int) -> bool:
    """Whether ``processed`` pages reach ``max_to_process`` (never when it is -1)."""
    return limits_processing(site) and site.max_to_process <= processed


def at_max_pages(site: SiteSettings, paths: int) -> bool:
    """Whether a site of ``paths`` paths (of any state) has all it may have (``max_pages``):
    no new path is added to it."""
    return paths >= site.max_pages
