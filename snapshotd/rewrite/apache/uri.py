"""URIs as mod_rewrite handles them: decoding the URL-path, escaping results and back-references.

Invariants:
- the URL-path is normalised (dot segments, merged slashes) before it is decoded, with %XX of
  unreserved characters decoded first, so %2e%2e counts as ".."; a bad escape is a 400, an
  encoded slash or NUL a 404 (AllowEncodedSlashes Off);
- escaping works on the UTF-8 bytes (surrogate escapes kept) with lower-case hex, as
  httpd's ap_escape_uri and mod_rewrite's escape_backref do;
- a URI is absolute only when it starts with one of the schemes httpd knows.
"""

from __future__ import annotations

from snapshotd.rewrite.limits import Stop

# Characters ap_escape_uri leaves alone (besides letters and digits).
_URI_SAFE = frozenset(b"$-_.+!*'(),:;@&=/~")
_ALNUM = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
_UNRESERVED = frozenset(b"-._~") | _ALNUM
_HEX = "0123456789abcdefABCDEF"

_SCHEMES = (
    ("ajp://", True), ("balancer://", True), ("ftp://", False), ("fcgi://", True),
    ("gopher://", False), ("http://", True), ("https://", True), ("h2://", True),
    ("h2c://", True), ("ldap://", False), ("mailto:", True), ("news:", False),
    ("nntp://", False), ("scgi://", True), ("ws://", True), ("wss://", True),
)  # fmt: skip


def escape_uri(text: str) -> str:
    """ap_escape_uri: percent-encode (lower-case hex) what may not stand in a URL path."""
    out = []
    for b in text.encode("utf-8", "surrogateescape"):
        if b in _ALNUM or b in _URI_SAFE:
            out.append(chr(b))
        else:
            out.append(f"%{b:02x}")
    return "".join(out)


def escape_backref(text: str, escapes: str | None, noplus: bool) -> str:
    """The B flag: escape a back-reference as mod_rewrite's escape_backref does."""
    out = []
    chosen = escapes.encode() if escapes else None
    for b in text.encode("utf-8", "surrogateescape"):
        if chosen is None:
            escape = not (b in _ALNUM or b == 0x5F)
        else:
            escape = b in chosen
        if not escape:
            out.append(chr(b))
        elif b == 0x20 and not noplus:
            out.append("+")
        else:
            out.append(f"%{b:02x}")
    return "".join(out).encode("latin-1").decode("utf-8", "surrogateescape")


def absolute_scheme(uri: str) -> tuple[int, bool]:
    """Length of a known scheme prefix (0 when the URI is not absolute), query support."""
    if uri.startswith("/") or len(uri) <= 5:
        return 0, False
    low = uri[:12].lower()
    for prefix, qs in _SCHEMES:
        if low.startswith(prefix):
            return len(prefix), qs
    return 0, False


def escape_absolute(uri: str, skip: int) -> str:
    cp = skip
    if uri[skip - 1] == "/":
        while cp < len(uri) and uri[cp] != "/":
            cp += 1
        if cp >= len(uri) or cp + 1 >= len(uri):
            return uri
        cp += 1
    return uri[:cp] + escape_uri(uri[cp:])


def decode_path(raw: str) -> str:
    """The URL-path as Apache hands it to mod_rewrite: normalised, then decoded."""
    data = raw.encode("utf-8", "surrogateescape")
    # %XX of unreserved characters is decoded first, so %2e%2e counts as "..".
    out = bytearray()
    i = 0
    while i < len(data):
        if data[i] == 0x25:
            h = data[i + 1 : i + 3].decode("latin-1")
            if len(h) < 2 or h[0] not in _HEX or h[1] not in _HEX:
                raise Stop(400)
            v = int(h, 16)
            if v in _UNRESERVED:
                out.append(v)
            else:
                out += data[i : i + 3]
            i += 3
            continue
        out.append(data[i])
        i += 1
    segments: list[bytes] = []
    parts = bytes(out).split(b"/")
    for n, seg in enumerate(parts[1:], 1):
        last = n == len(parts) - 1
        if seg == b".":
            if last:
                segments.append(b"")
            continue
        if seg == b"..":
            if not segments:
                raise Stop(400)
            segments.pop()
            if last:
                segments.append(b"")
            continue
        if seg == b"" and not last:
            continue  # MergeSlashes
        segments.append(seg)
    path = b"/" + b"/".join(segments)
    decoded = bytearray()
    i = 0
    while i < len(path):
        if path[i] == 0x25:
            v = int(path[i + 1 : i + 3], 16)
            if v in (0x2F, 0x00):
                raise Stop(404)  # AllowEncodedSlashes Off; NUL is never allowed
            decoded.append(v)
            i += 3
            continue
        decoded.append(path[i])
        i += 1
    return decoded.decode("utf-8", "surrogateescape")
