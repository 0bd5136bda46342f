"""Which URLs and addresses the browser may reach: the SSRF guard.

Pure: no DNS, no sockets. Invariants:

- Only ``http``, ``https``, ``data`` and ``blob`` URLs are ever allowed.
- A host is read the way a browser reads it (WHATWG URL): ``2130706433``, ``0x7f.1``,
  ``017700000001`` and ``127.1`` are all 127.0.0.1; a trailing dot and an IPv6 zone id change
  nothing; an IPv6 address that embeds an IPv4 one (``::ffff:127.0.0.1``, 6to4, NAT64, Teredo)
  is judged by the IPv4 address it carries.
- Any address that is not globally routable is refused (loopback, private, link-local,
  metadata, CGNAT, unique-local, multicast, unspecified, reserved), except the site's own
  origin: the same scheme, host and port.
- ``localhost`` and ``*.localhost`` are loopback. Other names are allowed here; the caller that
  resolves them (:func:`snapshotd.net.egress.judge`, for the browser's egress guard and the
  process's own fetches) judges the addresses they resolve to with :func:`check_address`.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

__all__ = [
    "InvalidHost",
    "check_address",
    "check_host",
    "check_url",
    "is_origin",
    "is_origin_url",
    "parse_host",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_DEFAULT_PORTS = {"http": 80, "https": 443}
_ALLOWED_SCHEMES = {"http", "https", "data", "blob"}
_METADATA = {
    ipaddress.ip_address("169.254.169.254"),
    ipaddress.ip_address("169.254.170.2"),
    ipaddress.ip_address("100.100.100.200"),
    ipaddress.ip_address("fd00:ec2::254"),
}
_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")


class InvalidHost(ValueError):
    """A host a browser would refuse to parse (e.g. ``1.2.3.256``)."""


def _ipv4_number(part: str) -> int | None:
    """One dotted part the WHATWG way: ``0x`` hex, leading-zero octal, else decimal."""
    if part[:2] in ("0x", "0X"):
        digits, base = part[2:], 16
        if digits == "":
            return 0
    elif len(part) > 1 and part[0] == "0":
        digits, base = part[1:], 8
    else:
        digits, base = part, 10
    allowed = {16: "0123456789abcdefABCDEF", 8: "01234567", 10: "0123456789"}[base]
    if not digits or any(c not in allowed for c in digits):
        return None
    return int(digits, base)


def _parse_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """The WHATWG IPv4 parser; None when ``host`` is a domain name."""
    parts = host.split(".")
    if parts[-1] == "" and len(parts) > 1:
        parts.pop()
    if not parts or len(parts) > 4:
        return None
    last = parts[-1]
    # A host ends in a number only when its last part reads as one; otherwise it is a name.
    if _ipv4_number(last) is None:
        return None
    numbers = [_ipv4_number(p) for p in parts]
    if any(n is None for n in numbers):
        raise InvalidHost(host)
    values = [n for n in numbers if n is not None]
    if any(n > 255 for n in values[:-1]) or values[-1] >= 256 ** (5 - len(values)):
        raise InvalidHost(host)
    ipv4 = values[-1]
    for i, n in enumerate(values[:-1]):
        ipv4 += n * 256 ** (3 - i)
    return ipaddress.IPv4Address(ipv4)


def parse_host(host: str) -> IPAddress | str:
    """A URL host as an address when it is a literal one, else as a lower-case name.

    Raises :class:`InvalidHost` for hosts a browser would refuse.
    """
    host = host.strip().lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if ":" in host:
        host = re.split(r"%(?:25)?", host, maxsplit=1)[0]
        try:
            return ipaddress.IPv6Address(host)
        except ValueError:
            raise InvalidHost(host) from None
    if not host:
        raise InvalidHost(host)
    ipv4 = _parse_ipv4(host)
    if ipv4 is not None:
        return ipv4
    return host.rstrip(".")


def _embedded_ipv4(addr: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    if addr.sixtofour is not None:
        return addr.sixtofour
    if addr.teredo is not None:
        return addr.teredo[1]
    if addr in _NAT64 or addr in _NAT64_LOCAL:
        return ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
    # IPv4-compatible (::a.b.c.d), deprecated but still parsed by some stacks.
    if int(addr) >> 32 == 0 and int(addr) > 1:
        return ipaddress.IPv4Address(int(addr))
    return None


def check_address(addr: IPAddress) -> str | None:
    """None when ``addr`` is a public address; else why it is refused."""
    if isinstance(addr, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(addr)
        if embedded is not None:
            reason = check_address(embedded)
            return f"{reason} (in {addr})" if reason else None
    if addr in _METADATA:
        return f"metadata address {addr}"
    if addr.is_loopback:
        return f"loopback address {addr}"
    if addr.is_unspecified:
        return f"unspecified address {addr}"
    if addr.is_link_local:
        return f"link-local address {addr}"
    if isinstance(addr, ipaddress.IPv4Address) and addr in _CGNAT:
        return f"shared (CGNAT) address {addr}"
    if addr.is_multicast:
        return f"multicast address {addr}"
    if addr.is_private or not addr.is_global or addr.is_reserved:
        return f"private address {addr}"
    if isinstance(addr, ipaddress.IPv6Address) and addr.is_site_local:
        return f"private address {addr}"
    return None


def _same_host(a: IPAddress | str, b: IPAddress | str) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return str(a) == str(b)
    return a == b


def _origin_parts(origin: str) -> tuple[str, IPAddress | str, int] | None:
    try:
        parts = urlsplit(origin)
        scheme = parts.scheme.lower()
        if scheme not in _DEFAULT_PORTS or not parts.hostname:
            return None
        return scheme, parse_host(parts.hostname), parts.port or _DEFAULT_PORTS[scheme]
    except ValueError:
        return None


def is_origin(host: str, port: int, origin: str, scheme: str | None = None) -> bool:
    """Whether ``scheme://host:port`` is ``origin`` (``scheme`` None: any scheme)."""
    own = _origin_parts(origin)
    if own is None:
        return False
    own_scheme, own_host, own_port = own
    try:
        parsed = parse_host(host)
    except InvalidHost:
        return False
    return (
        (scheme is None or scheme == own_scheme)
        and port == own_port
        and _same_host(parsed, own_host)
    )


def is_origin_url(url: str, origin: str) -> bool:
    """Whether ``url`` is on ``origin``: the same scheme, host and port."""
    try:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        port = parts.port or _DEFAULT_PORTS.get(scheme)
    except ValueError:
        return False
    if port is None or not parts.hostname:
        return False
    return is_origin(parts.hostname, port, origin, scheme)


def check_host(host: str, port: int, origin: str, scheme: str | None = None) -> str | None:
    """None when a connection to ``host:port`` is allowed; else why not.

    ``scheme`` is None at the socket level, where only host and port are known.
    """
    try:
        parsed = parse_host(host)
    except InvalidHost:
        return f"invalid host {host!r}"
    if is_origin(host, port, origin, scheme):
        return None
    if isinstance(parsed, str):
        if parsed == "localhost" or parsed.endswith(".localhost"):
            return f"loopback name {parsed}"
        return None
    return check_address(parsed)


def check_url(url: str, origin: str) -> str | None:
    """None when the browser may fetch ``url`` for a site at ``origin``; else why not."""
    scheme, sep, _ = url.partition(":")
    scheme = scheme.strip().lower()
    if not sep or not re.fullmatch(r"[a-z][a-z0-9+.-]*", scheme):
        return "not an absolute URL"
    if scheme not in _ALLOWED_SCHEMES:
        return f"scheme {scheme}"
    if scheme in ("data", "blob"):
        return None
    try:
        parts = urlsplit(url)
        port = parts.port or _DEFAULT_PORTS[scheme]
    except ValueError:
        return "invalid port"
    # urlsplit drops the brackets of IPv6 hosts and lowercases; keep the raw netloc's host.
    netloc = parts.netloc.rpartition("@")[2]
    if netloc.startswith("["):
        host = netloc[: netloc.find("]") + 1] if "]" in netloc else netloc
    else:
        host = netloc.rsplit(":", 1)[0] if ":" in netloc else netloc
    if not host:
        return "no host"
    return check_host(host, port, origin, scheme)
