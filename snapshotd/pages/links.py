"""Links out of captured HTML: what the crawler may follow, and the page's canonical URL.

Pure: HTML and the page's URL in, absolute URLs out. Invariants:

- every URL returned is absolute http(s), with a lowercase scheme and host, no default port,
  a path that starts with ``/``, and unsafe characters percent-encoded;
- a ``\\`` before the query is read as ``/``, as browsers read http(s) URLs;
- a plain ``#fragment`` is dropped (it names a place in a page), a ``#!`` hashbang is kept
  (it names a page of its own);
- relative references resolve against ``<base href>`` when the page has one, else against the
  page's final URL;
- links are read in the flat tree a renderer shows (:func:`snapshotd.pages.flat_tree.composed`):
  those of every declarative shadow root too;
- ``rel="nofollow"`` anchors are left out; ``<meta name="robots" content="nofollow">`` (or
  ``none``) is reported in ``nofollow`` and the caller decides.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote, urljoin, urlsplit, urlunsplit

from snapshotd.pages.flat_tree import composed

__all__ = ["PageLinks", "extract_links", "normalize_url"]

# Characters left as they are when re-encoding a path, query or fragment: RFC 3986's
# unreserved and sub-delims, ':' '@' '/' '?', and '%' so existing escapes survive.
_PATH_SAFE = "/%:@!$&'()*+,;=-._~"
_QUERY_SAFE = _PATH_SAFE + "?"
_FOLLOWED_LINK_RELS = frozenset({"prev", "next"})


@dataclass(frozen=True)
class PageLinks:
    """What one page links to. ``links`` keeps document order, without repeats."""

    links: tuple[str, ...] = ()
    canonical: str | None = None
    nofollow: bool = False


def normalize_url(url: str, base: str | None = None) -> str | None:
    """``url`` resolved against ``base`` and normalised; None if it is not http(s)."""
    url = url.strip()
    if not url:
        return None
    # As a browser reads an http(s) URL: a "\" before the query is a "/" (so "\\host\p" is
    # another host's page, and "/x\..\y" is "/y").
    cut = min((i for i in (url.find("?"), url.find("#")) if i >= 0), default=len(url))
    url = url[:cut].replace("\\", "/") + url[cut:]
    try:
        joined = urljoin(base, url) if base else url
        parts = urlsplit(joined)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        return None
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    if port is not None and port != (80 if scheme == "http" else 443):
        host = f"{host}:{port}"
    path = quote(parts.path or "/", safe=_PATH_SAFE)
    query = quote(parts.query, safe=_QUERY_SAFE)
    fragment = ""
    if parts.fragment.startswith("!"):
        fragment = quote(parts.fragment, safe=_QUERY_SAFE + "#")
    return urlunsplit((scheme, host, path, query, fragment))


def _rels(value: str | None) -> set[str]:
    return {token.lower() for token in (value or "").split()}


def extract_links(html: str, page_url: str) -> PageLinks:
    """The followable links, canonical URL and robots ``nofollow`` of a captured page."""
    tree = composed(html)
    base = page_url
    for node in tree.css("base[href]"):
        resolved = normalize_url(node.attributes.get("href") or "", page_url)
        if resolved:
            base = resolved
        break

    nofollow = False
    for node in tree.css("meta[name]"):
        if (node.attributes.get("name") or "").strip().lower() != "robots":
            continue
        tokens = {t.strip().lower() for t in (node.attributes.get("content") or "").split(",")}
        if tokens & {"nofollow", "none"}:
            nofollow = True

    seen: set[str] = set()
    links: list[str] = []
    canonical: str | None = None

    def add(url: str | None) -> None:
        if url and url not in seen:
            seen.add(url)
            links.append(url)

    for node in tree.css("a[href], area[href], link[href]"):
        attrs = node.attributes
        rels = _rels(attrs.get("rel"))
        href = attrs.get("href") or ""
        if node.tag == "link":
            if "canonical" in rels and canonical is None:
                canonical = normalize_url(href, base)
            elif rels & _FOLLOWED_LINK_RELS:
                add(normalize_url(href, base))
        elif "nofollow" not in rels:
            add(normalize_url(href, base))
    return PageLinks(links=tuple(links), canonical=canonical, nofollow=nofollow)
