"""A sitemap's XML as sitemaps.org's schema has it: a ``urlset`` of ``<url>`` entries, each a
``loc`` and a ``lastmod``, and a ``sitemapindex`` of the files of a longer one.

Invariants: every ``loc`` is XML-escaped; every ``lastmod`` is a W3C datetime in UTC to the
second (``2026-11-27T10:00:00+00:00``); the output is UTF-8 with its declaration.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from xml.sax.saxutils import escape

__all__ = ["sitemap_index", "urlset", "w3c_datetime"]

_NS = "http://www.sitemaps.org/schemas/sitemap/0.9"
_HEAD = '<?xml version="1.0" encoding="UTF-8"?>\n'


def w3c_datetime(seconds: float) -> str:
    return datetime.fromtimestamp(int(seconds), UTC).isoformat()


def urlset(entries: Iterable[tuple[str, float]]) -> bytes:
    """A sitemap of (absolute URL, when it last changed) pairs."""
    rows = "".join(
        f"<url><loc>{escape(loc)}</loc><lastmod>{w3c_datetime(at)}</lastmod></url>\n"
        for loc, at in entries
    )
    return f'{_HEAD}<urlset xmlns="{_NS}">\n{rows}</urlset>\n'.encode()


def sitemap_index(entries: Iterable[tuple[str, float]]) -> bytes:
    """A sitemap index of (a sitemap file's absolute URL, when it last changed) pairs."""
    rows = "".join(
        f"<sitemap><loc>{escape(loc)}</loc><lastmod>{w3c_datetime(at)}</lastmod></sitemap>\n"
        for loc, at in entries
    )
    return f'{_HEAD}<sitemapindex xmlns="{_NS}">\n{rows}</sitemapindex>\n'.encode()
