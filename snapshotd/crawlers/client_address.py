"""The client's address of a request: the peer's, or the one a trusted front server added.

Invariants:
- one header names the addresses a request was forwarded for: the one the trusted front
  servers write (``[server] forwarded_header``: ``X-Forwarded-For``, which every shipped
  recipe appends to, or ``Forwarded``); the other is the client's own text, passed on
  untouched, and is never read;
- that header is read only when the peer is one of the front servers the operator trusts
  (``[server] trusted_proxies``: addresses and networks); from anyone else it is ignored,
  whatever it says;
- of the addresses a trusted peer forwards, the client is the last one that is not itself a
  trusted front server (reading from the right, so each front server in a trusted chain is
  passed over and nothing a client wrote to the left of them is believed);
- of ``Forwarded``, the ``for=`` parameters are read; a value that is no address
  (``unknown``, an obfuscated ``_name``, garbage) ends the walk at the address before it: the
  peer, or the last trusted hop;
- nothing here raises on what a client sent, and the answer is always an address text in
  its compressed form (IPv4-mapped IPv6 as IPv4), so one client has one spelling.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from functools import lru_cache

__all__ = ["FORWARDED_HEADERS", "TrustedProxies", "parse_networks"]

# The headers a front server may write the client's address in (lower-case).
FORWARDED_HEADERS = ("x-forwarded-for", "forwarded")

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def parse_networks(values: Iterable[str]) -> tuple[Network, ...]:
    """Addresses and networks (``127.0.0.1``, ``10.0.0.0/8``, ``::1``); ValueError names the
    first that is neither."""
    out = []
    for value in values:
        try:
            out.append(ipaddress.ip_network(value.strip(), strict=False))
        except ValueError:
            raise ValueError(
                f"{value!r:.60} is not an address or network (like 10.0.0.0/8)"
            ) from None
    return tuple(out)


@lru_cache(maxsize=4096)
def _address(text: str) -> Address | None:
    """An address as a header or a peer writes it (``[::1]:80``, ``1.2.3.4:5``, ``"[::1]"``),
    or None when it is none."""
    text = text.strip().strip('"').strip()
    if text.startswith("["):
        text = text[1:].split("]", 1)[0]
    elif text.count(":") == 1:  # IPv4 with a port
        text = text.split(":", 1)[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


@lru_cache(maxsize=4096)
def canonical(text: str) -> str:
    """An address in one spelling (``::ffff:127.0.0.1`` is ``127.0.0.1``); ``text`` itself
    when it is no address."""
    address = _address(text)
    return str(address) if address is not None else text


class TrustedProxies:
    """The front servers whose forwarding header (``header``, one of
    :data:`FORWARDED_HEADERS`) is believed."""

    def __init__(self, networks: Iterable[str] = (), header: str = "x-forwarded-for") -> None:
        if header not in FORWARDED_HEADERS:
            raise ValueError(f"expected x-forwarded-for or forwarded, got {header!r:.40}")
        self.networks = parse_networks(networks)
        self.header = header
        self._trusted: dict[str, bool] = {}

    def trusts(self, address: Address) -> bool:
        key = str(address)
        found = self._trusted.get(key)
        if found is None:
            found = any(address in n for n in self.networks if n.version == address.version)
            if len(self._trusted) >= 4096:
                self._trusted.clear()
            self._trusted[key] = found
        return found

    def client(self, peer: str, headers: Mapping[str, str]) -> str:
        """The client's address of a request from ``peer`` with ``headers`` (lower-case
        names)."""
        if not self.networks:
            return canonical(peer)
        peer_address = _address(peer)
        if peer_address is None:
            return peer
        if not self.trusts(peer_address):
            return canonical(peer)
        hops = _forwarded_for(headers, self.header)
        client = peer_address
        for hop in reversed(hops):
            address = _address(hop)
            if address is None:
                break
            client = address
            if not self.trusts(address):
                break
        return str(client)


def _forwarded_for(headers: Mapping[str, str], header: str) -> list[str]:
    """The addresses ``header`` says the request was forwarded for, first to last."""
    value = headers.get(header)
    if value is None:
        return []
    if header == "x-forwarded-for":
        return [part for part in value.split(",") if part.strip()]
    hops = []
    for element in value.split(","):
        for pair in element.split(";"):
            name, _, value = pair.partition("=")
            if name.strip().lower() == "for":
                hops.append(value)
    return hops
