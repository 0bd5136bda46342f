"""Shares of crawler verification per network, so that one network cannot take the DNS
look-ups or the cache of answers from the others.

Invariants:
- a client's network is its IPv4 /24 or its IPv6 /64 (:func:`network_of`): what one host,
  or one customer of a hosting provider, commonly holds;
- :class:`NetworkCache` holds at most ``size`` entries and at most ``per_network`` of any one
  network; a network at its share replaces its own least recently used entry, and a full
  cache drops its least recently used entry (a hit counts as a use), so a network sending
  new addresses without end only ever replaces its own entries;
- every operation is a few dictionary operations: no I/O, no await.
"""

from __future__ import annotations

import ipaddress
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["NetworkCache", "network_of"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

PREFIX = {4: 24, 6: 64}


def network_of(address: str) -> str:
    """The network ``address`` (an address text) is counted under: its /24 or /64."""
    ip = ipaddress.ip_address(address)
    return f"{ip.version}:{int(ip) >> (ip.max_prefixlen - PREFIX[ip.version])}"


class NetworkCache(Generic[K, V]):
    """Values by key, each key counted under a network; least recently used first out."""

    def __init__(self, size: int, per_network: int) -> None:
        self.size, self.per_network = size, max(1, per_network)
        self._items: OrderedDict[K, tuple[str, V]] = OrderedDict()
        self._networks: dict[str, OrderedDict[K, None]] = {}

    def __len__(self) -> int:
        return len(self._items)

    def networks(self) -> int:
        return len(self._networks)

    def get(self, key: K) -> V | None:
        found = self._items.get(key)
        if found is None:
            return None
        self._items.move_to_end(key)
        self._networks[found[0]].move_to_end(key)
        return found[1]

    def put(self, key: K, network: str, value: V) -> None:
        self.pop(key)
        mine = self._networks.get(network)
        if mine is not None and len(mine) >= self.per_network:
            self.pop(next(iter(mine)))
        while len(self._items) >= self.size:
            self.pop(next(iter(self._items)))
        self._networks.setdefault(network, OrderedDict())[key] = None
        self._items[key] = (network, value)

    def pop(self, key: K) -> None:
        found = self._items.pop(key, None)
        if found is None:
            return
        mine = self._networks[found[0]]
        del mine[key]
        if not mine:
            del self._networks[found[0]]
