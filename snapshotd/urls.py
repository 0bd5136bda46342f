"""Site paths: validation, the cache key, and the AJAX crawling scheme's URL mapping.

A *site path* is what a path is stored and looked up as: the raw (still percent-encoded)
URL path, then ``?query`` when there is one, then ``#!fragment`` for hashbang pages, e.g.
``/p/index?x=1#!/catalog/145``.
"""

from __future__ import annotations

import re
from urllib.parse import unquote_to_bytes, urlsplit

__all__ = [
    "BadRequest",
    "check_origin_form",
    "escaped_fragment_url",
    "join_site_path",
    "site_path_from_request",
    "site_path_from_url",
    "split_site_path",
    "valid_host",
]

MAX_PATH = 2048
MAX_QUERY = 8192

_CONTROL = re.compile(r"[\x00-\x20\x7f]")
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_HOST = re.compile(
    r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}"
    r"[A-Za-z0-9])?)*\.?|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?$"
)
# Characters the AJAX crawling scheme escapes when it moves a fragment into the query.
_FRAGMENT_SAFE = re.compile(r"[\x00-\x20#%&+\x7f-\xff]")


class BadRequest(ValueError):
    """A request that can't name a site path; ``status`` is the 4xx to answer."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def check_origin_form(raw_path: str) -> None:
    """Raise :class:`BadRequest` unless a request target's path is in origin form, that is
    starts with ``/`` (ASGI hands the query over apart). Nothing else is ever forwarded:
    not ``*`` nor ``*@host/x``, nor an absolute URL or an authority a server left whole."""
    if not raw_path.startswith("/"):
        raise BadRequest("the request target must be a path starting with '/'")


def valid_host(host: str) -> bool:
    return len(host) <= 255 and bool(_HOST.match(host))


def _check_component(name: str, raw: str, limit: int) -> None:
    if len(raw) > limit:
        raise BadRequest(f"{name} is longer than {limit} characters", 414)
    if _CONTROL.search(raw):
        raise BadRequest(f"{name} holds control characters or spaces")
    if _BAD_ESCAPE.search(raw):
        raise BadRequest(f"{name} holds a '%' that is not a percent-escape")
    decoded = unquote_to_bytes(raw)
    try:
        text = decoded.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequest(f"{name} is not UTF-8 once decoded") from None
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in text):
        raise BadRequest(f"{name} holds encoded control characters")


def _decode_fragment(value: str) -> str:
    """The ``_escaped_fragment_`` value back to the fragment it stands for."""
    if _BAD_ESCAPE.search(value):
        raise BadRequest("_escaped_fragment_ holds a '%' that is not a percent-escape")
    try:
        text = unquote_to_bytes(value).decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequest("_escaped_fragment_ is not UTF-8 once decoded") from None
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in text):
        raise BadRequest("_escaped_fragment_ holds control characters")
    return text


def site_path_from_request(raw_path: str, query: str) -> tuple[str, bool]:
    """``(site path, escaped)`` for a request target; raises :class:`BadRequest`.

    ``escaped`` is true when the query carried ``_escaped_fragment_``, which is mapped to
    ``#!`` as the AJAX crawling scheme specifies: the parameter is removed from the query and
    its unescaped value becomes the fragment; an empty value stands for the path itself.
    """
    if not raw_path.startswith("/"):
        raise BadRequest("the path must start with '/'")
    _check_component("the path", raw_path, MAX_PATH)
    _check_component("the query", query, MAX_QUERY)
    fragment = None
    if "_escaped_fragment_" in query:
        kept = []
        for part in query.split("&"):
            name, eq, value = part.partition("=")
            if name == "_escaped_fragment_" and fragment is None:
                fragment = _decode_fragment(value)
            elif part:
                kept.append(part)
        query = "&".join(kept)
    path = raw_path + (f"?{query}" if query else "")
    if fragment:
        path += "#!" + fragment
    return path, fragment is not None


def split_site_path(site_path: str) -> tuple[str, str, str | None]:
    """``/a?b#!c`` -> ``("/a", "b", "c")``; the fragment is None without ``#!``."""
    rest, bang, fragment = site_path.partition("#!")
    path, _, query = rest.partition("?")
    return path, query, (fragment if bang else None)


def join_site_path(path: str, query: str = "", fragment: str | None = None) -> str:
    return path + (f"?{query}" if query else "") + (f"#!{fragment}" if fragment is not None else "")


def escaped_fragment_url(site_path: str) -> str:
    """The ugly URL the AJAX crawling scheme gives a hashbang site path (the inverse map)."""
    path, query, fragment = split_site_path(site_path)
    if fragment is None:
        return join_site_path(path, query)
    escaped = _FRAGMENT_SAFE.sub(
        lambda m: "".join(f"%{b:02X}" for b in m.group().encode("utf-8")), fragment
    )
    query = f"{query}&" if query else ""
    return f"{path}?{query}_escaped_fragment_={escaped}"


def site_path_from_url(url: str) -> str | None:
    """The site path of an absolute URL (or path), keeping ``#!`` and dropping ``#frag``."""
    parts = urlsplit(url)
    if parts.scheme and parts.scheme not in ("http", "https"):
        return None
    path = parts.path or "/"
    fragment = parts.fragment[1:] if parts.fragment.startswith("!") else None
    return join_site_path(path, parts.query, fragment)
