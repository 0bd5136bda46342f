"""Site paths: validation, the cache key, and the AJAX crawling scheme's URL mapping.

A *site path* is what a path is stored and looked up as: the raw (still percent-encoded)
URL path, then ``?query`` when there is one, then ``#!fragment`` for hashbang pages, e.g.
``/p/index?x=1#!/catalog/145``.

:func:`site_path_from_request` is the one place a request target becomes a site path; every
other way in (:func:`site_path_from_url`, the API, the crawler, the render endpoint, ``rules
eval``) goes through it, so one page has one site path whichever way it is named. It takes the
site's ignored query parameters (:class:`IgnoredParams`, tracking parameters by default) out
of the query, keeping the others' order, and writes percent-encoding in one form
(:func:`normalise_escapes`) and the path without dot segments.

Invariant: a site path is the path and query a browser loads for it. Chromium reads
``origin + site path`` as the same path and query (``\\`` and dot segments resolved, the
characters it encodes encoded), so what the checks judge is what is rendered.
"""

from __future__ import annotations

import functools
import re
import string
from collections.abc import Iterable
from urllib.parse import unquote, unquote_to_bytes, urlsplit

__all__ = [
    "TRACKING",
    "TRACKING_PARAMS",
    "BadRequest",
    "KEEP_ALL",
    "IgnoredParams",
    "check_origin_form",
    "has_escaped_fragment",
    "hashbang",
    "normalise_escapes",
    "site_path_from_request",
    "site_path_from_url",
    "split_site_path",
    "valid_host",
]

MAX_PATH = 2048
MAX_QUERY = 8192

_CONTROL = re.compile(r"[\x00-\x20\x7f]")
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_ESCAPE_OR_UNSAFE = re.compile(r"%[0-9A-Fa-f]{2}|[^\x21-\x7e]+|%")
_UNRESERVED = frozenset(string.ascii_letters + string.digits + "-._~")
# What Chromium's URL parser (WHATWG's, for http and https) writes otherwise than it is given,
# in a path: a backslash is a separator, and these characters are percent-encoded; in a query,
# these. (Tabs and newlines, which it drops, are refused before.)
_BROWSER_PATH = str.maketrans({"\\": "/"} | {c: f"%{ord(c):02X}" for c in '"<>`{}|^'})
_BROWSER_QUERY = str.maketrans({c: f"%{ord(c):02X}" for c in "\"<>'"})
ESCAPED_FRAGMENT = "_escaped_fragment_"
_HOST = re.compile(
    r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}"
    r"[A-Za-z0-9])?)*\.?|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?$"
)

# Query parameters that say where a visitor came from, not which page they see: the default
# of a site's ``ignore_params`` (where ``@tracking`` stands for them). ``*`` is a glob.
TRACKING_PARAMS: tuple[str, ...] = (
    "utm_*",  # Google Analytics and most others
    "gclid", "gclsrc", "dclid", "gbraid", "wbraid", "_ga", "_gl",  # Google
    "fbclid", "igshid",  # Meta
    "msclkid",  # Microsoft Ads
    "twclid",  # X (Twitter)
    "ttclid",  # TikTok
    "li_fat_id",  # LinkedIn
    "yclid", "ysclid",  # Yandex
    "mc_cid", "mc_eid",  # Mailchimp
    "_hsenc", "_hsmi", "__hssc", "__hstc", "__hsfp", "hsCtaTracking",  # HubSpot
    "mkt_tok",  # Marketo
    "oly_anon_id", "oly_enc_id",  # Omeda
    "vero_id", "vero_conv",  # Vero
    "rb_clickid",  # Rakuten
    "s_cid",  # Adobe
    "ref_src", "ref_url",  # Twitter embeds
    "srsltid",  # Google Merchant
    "_kx",  # Klaviyo
    "wickedid",  # Wicked Reports
    "irclickid",  # Impact
)
TRACKING_WORD = "@tracking"


class IgnoredParams:
    """Query parameter names a site ignores: names with ``*`` globs, matched case-sensitively
    against the percent-decoded name; ``@tracking`` stands for :data:`TRACKING_PARAMS`.
    ``learned`` adds (name, scope) pairs: that name ignored in paths under that prefix."""

    def __init__(
        self, patterns: Iterable[str] = (TRACKING_WORD,), learned: Iterable[tuple[str, str]] = ()
    ) -> None:
        names: list[str] = []
        for pattern in patterns:
            names.extend(TRACKING_PARAMS if pattern == TRACKING_WORD else (pattern,))
        self.patterns = tuple(dict.fromkeys(names))
        globs = "|".join(re.escape(p).replace(r"\*", ".*") for p in self.patterns)
        self._match = re.compile(globs).fullmatch if self.patterns else None
        self.learned = tuple(learned)

    def __bool__(self) -> bool:
        return self._match is not None or bool(self.learned)

    def __call__(self, raw_name: str, path: str = "/") -> bool:
        """Whether a parameter, its name as it stands in the query, is ignored in ``path``."""
        name = unquote(raw_name.replace("+", " "))
        if self._match is not None and self._match(name) is not None:
            return True
        return any(name == n and path.startswith(scope) for n, scope in self.learned)


TRACKING = IgnoredParams()
KEEP_ALL = IgnoredParams(())


class BadRequest(ValueError):
    """A request that can't name a site path; ``status`` is the 4xx to answer."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


_USERINFO = re.compile(r"^([^/?#]*//)[^/?#]*@")


def redact(url: str) -> str:
    """A URL as a message shows it: without the user name and password it may hold."""
    return _USERINFO.sub(r"\1", url)


def check_origin_form(raw_path: str) -> None:
    """Raise :class:`BadRequest` unless a request target's path is in origin form, that is
    starts with ``/`` (ASGI hands the query over apart). Nothing else is ever forwarded:
    not ``*`` nor ``*@host/x``, nor an absolute URL or an authority a server left whole."""
    if not raw_path.startswith("/"):
        raise BadRequest("the request target must be a path starting with '/'")


@functools.lru_cache(maxsize=1024)  # a site is asked for by a few names, on every request
def valid_host(host: str) -> bool:
    return len(host) <= 255 and bool(_HOST.match(host))


@functools.lru_cache(maxsize=256)
def origin_parts(origin: str) -> tuple[str, str, int, bytes]:
    """The scheme, host (ASCII, no brackets), port and Host header of an origin URL, as the
    pass-through connects and writes them; raises ValueError (UnicodeError for a host IDNA
    cannot write, as for a label over 63 characters) when one cannot be."""
    parts = urlsplit(origin)
    host = (parts.hostname or "").encode("idna").decode("ascii")
    authority = f"[{host}]" if ":" in host else host
    if parts.port:
        authority += f":{parts.port}"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.scheme, host, port, authority.encode("ascii")


def _check_component(name: str, raw: str, limit: int) -> None:
    if len(raw) > limit:
        raise BadRequest(f"{name} is longer than {limit} characters", 414)
    if _CONTROL.search(raw):
        raise BadRequest(f"{name} holds control characters or spaces")
    if "%" not in raw:
        return  # nothing is encoded, so nothing decodes to what the checks above refused
    if _BAD_ESCAPE.search(raw):
        raise BadRequest(f"{name} holds a '%' that is not a percent-escape")
    decoded = unquote_to_bytes(raw)
    try:
        text = decoded.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequest(f"{name} is not UTF-8 once decoded") from None
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in text):
        raise BadRequest(f"{name} holds encoded control characters")


def normalise_escapes(text: str, encoding: str = "utf-8") -> str:
    """``text`` with its percent-encoding in one form (RFC 3986, 6.2.2): escapes of
    unreserved characters decoded (``%7e`` is ``~``), other escapes in upper-case hex, and
    spaces, control and non-ASCII characters and a ``%`` that starts no escape encoded
    (non-ASCII characters as ``encoding`` writes them). Raises :class:`BadRequest` for text
    ``encoding`` cannot write (a lone surrogate)."""
    if _ESCAPE_OR_UNSAFE.search(text) is None:
        return text  # most paths: nothing to change

    def one(m: re.Match[str]) -> str:
        token = m.group()
        if token[0] == "%" and len(token) == 3:
            char = chr(int(token[1:], 16))
            return char if char in _UNRESERVED else token.upper()
        return "".join(f"%{b:02X}" for b in token.encode(encoding))

    try:
        return _ESCAPE_OR_UNSAFE.sub(one, text)
    except UnicodeEncodeError:
        raise BadRequest(f"holds characters {encoding} cannot write") from None


def has_dot_segment(raw_path: str) -> bool:
    """Whether a raw path holds a ``.`` or ``..`` segment once percent-decoded, between
    ``/`` or ``\\`` (a browser's separators): a segment some client, server or browser on
    the way may resolve, so that the path would name another one."""
    return any(s in (".", "..") for s in re.split(r"[/\\]", unquote(raw_path)))


def _without_dot_segments(path: str) -> str:
    """RFC 3986's remove_dot_segments: ``/a/./b/../c`` is ``/a/c``; ``..`` stops at the root."""
    if "/." not in path:
        return path
    out: list[str] = []
    segments = path.split("/")[1:]
    for i, segment in enumerate(segments):
        last = i == len(segments) - 1
        if segment == "..":
            if out:
                out.pop()
            if last:
                out.append("")
        elif segment == ".":
            if last:
                out.append("")
        else:
            out.append(segment)
    return "/" + "/".join(out)


def _decoded(text: str, what: str) -> str:
    """``text`` percent-decoded as UTF-8; raises :class:`BadRequest` for control characters."""
    try:
        decoded = unquote_to_bytes(text).decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequest(f"{what} is not UTF-8 once decoded") from None
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in decoded):
        raise BadRequest(f"{what} holds control characters")
    return decoded


def _normal_fragment(fragment: str) -> str:
    """A ``#!`` fragment in its one form; raises :class:`BadRequest` for control characters."""
    text = normalise_escapes(fragment)
    _decoded(text, "the #! fragment")
    return text


def _decode_fragment(value: str) -> str:
    """The ``_escaped_fragment_`` value back to the fragment it stands for."""
    if _BAD_ESCAPE.search(value):
        raise BadRequest("_escaped_fragment_ holds a '%' that is not a percent-escape")
    return _decoded(value, "_escaped_fragment_")


def has_escaped_fragment(query: str) -> bool:
    """Whether a query holds a parameter named exactly ``_escaped_fragment_`` (its name
    percent-decoded): ``q=_escaped_fragment_`` or ``x_escaped_fragment_=1`` do not."""
    if ESCAPED_FRAGMENT not in query and "%" not in query:
        return False
    return any(
        unquote(part.partition("=")[0]) == ESCAPED_FRAGMENT for part in query.split("&")
    )


def site_path_from_request(
    raw_path: str,
    query: str,
    ignore: IgnoredParams = TRACKING,
    fragment: str | None = None,
    encoding: str = "utf-8",
) -> tuple[str, bool]:
    """``(site path, escaped)`` for a request target; raises :class:`BadRequest`.

    ``escaped`` is true when the query carried a parameter named ``_escaped_fragment_``,
    which is mapped to ``#!`` as the AJAX crawling scheme specifies: the parameter is removed
    from the query and its unescaped value becomes the fragment; an empty value stands for
    the path itself. Otherwise ``fragment`` (the part after ``#!`` of a URL, if any) is the
    fragment. Parameters ``ignore`` names are removed too. When anything is removed, empty
    parameters (``&&``) go with it; the others keep their order. Path, query and fragment
    then have their percent-encoding in one form (:func:`normalise_escapes`; non-ASCII
    characters of the path and query are bytes read as ``encoding``), and the path has no
    dot segments, so ``/a/./caf%c3%a9`` and ``/a/café`` are both ``/a/caf%C3%A9``. Path and
    query are then as a browser loads them: ``\\`` in the path is ``/`` (before the dot
    segments go, so ``/x\\..\\admin/`` is ``/admin/``), and the characters Chromium encodes
    are encoded (``{`` in the path, ``'`` in the query).
    """
    if not raw_path.startswith("/"):
        raise BadRequest("the path must start with '/'")
    if not raw_path.isascii() or not query.isascii():
        raw_path = normalise_escapes(raw_path, encoding)
        query = normalise_escapes(query, encoding)
    _check_component("the path", raw_path, MAX_PATH)
    path = _without_dot_segments(normalise_escapes(raw_path).translate(_BROWSER_PATH))
    escaped = None
    if query:
        _check_component("the query", query, MAX_QUERY)
        query = normalise_escapes(query).translate(_BROWSER_QUERY)
    if query and (ignore or has_escaped_fragment(query)):
        kept, removed = [], False
        for part in query.split("&"):
            name, _eq, value = part.partition("=")
            if name == ESCAPED_FRAGMENT and escaped is None:
                escaped, removed = _decode_fragment(value), True
            elif part and ignore(name, path):
                removed = True
            elif part:
                kept.append(part)
        if removed:
            query = "&".join(kept)
    if query:
        path += f"?{query}"
    if escaped is not None:
        fragment = escaped
    if fragment:
        path += "#!" + _normal_fragment(fragment)
    return path, escaped is not None


def split_site_path(site_path: str) -> tuple[str, str, str | None]:
    """``/a?b#!c`` -> ``("/a", "b", "c")``; the fragment is None without ``#!``."""
    rest, bang, fragment = site_path.partition("#!")
    path, _, query = rest.partition("?")
    return path, query, (fragment if bang else None)


def site_path_from_url(url: str, ignore: IgnoredParams = TRACKING) -> str | None:
    """The site path of an absolute URL (or path), keeping ``#!`` and dropping ``#frag``.

    None when it is not an http(s) URL; raises :class:`BadRequest` as
    :func:`site_path_from_request` does."""
    parts = urlsplit(url)
    if parts.scheme and parts.scheme not in ("http", "https"):
        return None
    fragment = hashbang(parts.fragment)
    return site_path_from_request(parts.path or "/", parts.query, ignore, fragment)[0]


def hashbang(fragment: str) -> str | None:
    """The page a URL's fragment names: the part after ``#!``; None for a plain ``#frag``."""
    return fragment[1:] if fragment.startswith("!") else None
