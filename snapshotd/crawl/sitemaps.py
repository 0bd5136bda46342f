"""Sitemaps: XML ``urlset`` and ``sitemapindex`` files, gzip or not, and plain-text lists.

Parsing is pure (:func:`parse_sitemap`); fetching (:func:`fetch_sitemap`) takes the
:class:`~snapshotd.net.fetch.Fetcher` in and judges every file, child sitemaps included, with the
site's origin. Bounds, as the sitemap protocol sets them: a file is at most 50 MB once
uncompressed and lists at most 50,000 URLs; entries past that are dropped with a note.
XML goes through defusedxml, so entity expansion and external entities are refused.
"""

from __future__ import annotations

import io
import logging
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import httpx
from defusedxml import DefusedXmlException
from defusedxml.ElementTree import iterparse

from snapshotd.net.fetch import Fetcher, describe, read_body
from snapshotd.pages.links import normalize_url

__all__ = [
    "MAX_SITEMAP_BYTES",
    "MAX_SITEMAP_URLS",
    "Sitemap",
    "SitemapEntry",
    "SitemapError",
    "SitemapFetch",
    "fetch_sitemap",
    "parse_sitemap",
]

log = logging.getLogger("snapshotd.crawler")

MAX_SITEMAP_BYTES = 50 * 1024 * 1024
MAX_SITEMAP_URLS = 50_000
MAX_INDEX_DEPTH = 2  # an index of indexes is off-protocol but common enough to read one level


class SitemapError(ValueError):
    """A sitemap that cannot be read: one line saying why."""


@dataclass(frozen=True)
class SitemapEntry:
    loc: str
    lastmod: float | None = None


@dataclass(frozen=True)
class Sitemap:
    """``kind`` is ``urlset``, ``sitemapindex`` or ``text``; ``truncated`` when entries were
    dropped past the URL bound."""

    kind: str
    entries: tuple[SitemapEntry, ...]
    truncated: bool = False


def parse_lastmod(value: str) -> float | None:
    """A W3C datetime (``2024-05-01``, ``2024-05-01T10:00:00+02:00``, ``...Z``) as a timestamp."""
    value = value.strip()
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def decompress(data: bytes, *, limit: int = MAX_SITEMAP_BYTES) -> bytes:
    """``data`` gunzipped when it is gzip, refusing more than ``limit`` bytes of output."""
    if not data.startswith(b"\x1f\x8b"):
        if len(data) > limit:
            raise SitemapError(f"larger than {limit // (1024 * 1024)} MB")
        return data
    out = bytearray()
    stream = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        chunk = stream.decompress(data, limit + 1)
        out += chunk
        # Concatenated gzip members are allowed; read each one the same bounded way.
        while stream.eof and stream.unused_data and len(out) <= limit:
            rest = stream.unused_data
            stream = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
            out += stream.decompress(rest, limit + 1 - len(out))
    except zlib.error as exc:
        raise SitemapError(f"bad gzip data ({exc})") from None
    if len(out) > limit:
        raise SitemapError(f"larger than {limit // (1024 * 1024)} MB once uncompressed")
    return bytes(out)


def _local(tag: object) -> str:
    return tag.rsplit("}", 1)[-1].lower() if isinstance(tag, str) else ""


def parse_sitemap(
    data: bytes, *, max_bytes: int = MAX_SITEMAP_BYTES, max_urls: int = MAX_SITEMAP_URLS
) -> Sitemap:
    """Entries of a sitemap file (gzip or not). Raises :class:`SitemapError`."""
    data = decompress(data, limit=max_bytes)
    head = data[:512].lstrip(b"\xef\xbb\xbf \t\r\n")
    if not head.startswith(b"<"):
        return _parse_text(data, max_urls)
    kind = ""
    entries: list[SitemapEntry] = []
    truncated = False
    loc: str | None = None
    lastmod: float | None = None
    root = None
    depth = 0  # of the element just opened or closed: the root is 1, an entry 2, its loc 3
    try:
        for event, elem in iterparse(io.BytesIO(data), events=("start", "end")):
            name = _local(elem.tag)
            if event == "start":
                depth += 1
                if root is None:
                    if name not in ("urlset", "sitemapindex"):
                        raise SitemapError(f"not a sitemap: root element is <{name}>")
                    kind, root = name, elem
                elif depth == 2:
                    loc, lastmod = None, None
                continue
            depth -= 1
            # Only an entry's own <loc> and <lastmod>, not an extension's (<image:loc>).
            if depth == 2 and name == "loc":
                loc = (elem.text or "").strip() or None
            elif depth == 2 and name == "lastmod":
                lastmod = parse_lastmod(elem.text or "")
            elif depth == 1 and root is not None:
                if name in ("url", "sitemap") and loc:
                    if len(entries) >= max_urls:
                        truncated = True
                        break
                    entries.append(SitemapEntry(loc, lastmod))
                root.clear()  # what was read is not kept: memory stays flat
    except DefusedXmlException as exc:
        raise SitemapError(f"refused XML ({type(exc).__name__})") from None
    except SyntaxError as exc:  # ElementTree.ParseError
        raise SitemapError(f"bad XML ({exc})") from None
    if not kind:
        raise SitemapError("empty document")
    return Sitemap(kind, tuple(entries), truncated)


def _parse_text(data: bytes, max_urls: int) -> Sitemap:
    entries: list[SitemapEntry] = []
    truncated = False
    for line in data.decode("utf-8", "replace").splitlines():
        line = line.strip().lstrip("\ufeff")
        if not line.startswith(("http://", "https://")):
            continue
        if len(entries) >= max_urls:
            truncated = True
            break
        entries.append(SitemapEntry(line))
    return Sitemap("text", tuple(entries), truncated)


@dataclass
class SitemapFetch:
    """What fetching a sitemap (and the sitemaps its index names) gave."""

    urls: int = 0  # entries handed over
    files: int = 0
    failed: int = 0  # files that could not be fetched or read
    errors: list[str] = field(default_factory=list)


async def _download(client: Fetcher, url: str, origin: str, max_bytes: int) -> bytes:
    try:
        async with client.stream(url, origin=origin) as response:
            if response.status_code != 200:
                raise SitemapError(f"answered {response.status_code}")
            body, more = await read_body(response, max_bytes)
            if more:
                raise SitemapError(f"larger than {max_bytes // (1024 * 1024)} MB")
            return body
    except httpx.HTTPError as exc:
        raise SitemapError(describe(exc)) from None


async def fetch_sitemap(
    client: Fetcher,
    url: str,
    each: Callable[[tuple[SitemapEntry, ...]], Awaitable[None]],
    *,
    origin: str,
    same_site: Callable[[str], bool],
    max_bytes: int = MAX_SITEMAP_BYTES,
    max_urls: int = MAX_SITEMAP_URLS,
    max_files: int = 1000,
) -> SitemapFetch:
    """Fetch ``url`` and, for an index, the sitemaps it lists that ``same_site`` accepts,
    each under the address policy of the site at ``origin``.

    The URL entries of each file are handed to ``each`` as soon as that file is read, so an
    index of many large files never holds more than one in memory; the caller judges each
    entry. Errors are collected in ``errors`` (one line each) and never raised; one from
    ``each`` ends the fetch there.
    """
    out = SitemapFetch()
    todo: list[tuple[str, int]] = [(url, 0)]
    seen: set[str] = set()
    while todo and out.files < max_files:
        current, depth = todo.pop(0)
        if current in seen:
            continue
        seen.add(current)
        out.files += 1
        try:
            sitemap = parse_sitemap(
                await _download(client, current, origin, max_bytes),
                max_bytes=max_bytes,
                max_urls=max_urls,
            )
        except SitemapError as exc:
            out.failed += 1
            out.errors.append(f"{current}: {exc}")
            continue
        if sitemap.truncated:
            out.errors.append(f"{current}: more than {max_urls} entries, the rest were dropped")
        if sitemap.kind != "sitemapindex":
            try:
                await each(sitemap.entries)
            except Exception as exc:  # e.g. the store: end here, and say so like the rest
                out.failed += 1
                out.errors.append(f"{current}: handing over its entries failed: {exc}")
                break
            out.urls += len(sitemap.entries)
            continue
        if depth >= MAX_INDEX_DEPTH:
            out.errors.append(f"{current}: sitemap index nested too deep")
            continue
        for entry in sitemap.entries:
            child = normalize_url(entry.loc, current)
            if child is None or not same_site(child):
                out.errors.append(f"{current}: skipped sitemap on another site {entry.loc}")
                continue
            todo.append((child, depth + 1))
    return out
