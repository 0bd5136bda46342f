"""Shares of crawler verification per network, so that one network cannot take the DNS
look-ups or the cache of answers from the others.

Invariants:
- an address counts under its networks (:func:`networks_of`), each with its share of the
  whole: its IPv4 /24 or IPv6 /64 (what one host, or one customer of a hosting provider,
  commonly holds) 1/32; of IPv6, its /48 too (a site or a customer is commonly given one, and
  with it 65,536 /64s) 1/8;
- :class:`NetworkCache` holds at most ``size`` entries, and of any one network at most its
  share of ``size``; a network at its share replaces its own least recently used entry, and
  a full cache drops its least recently used entry (a hit counts as a use), so a network
  sending new addresses without end only ever replaces its own entries;
- every operation is a few dictionary operations per network: no I/O, no await.
"""

from __future__ import annotations

import ipaddress
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["LEVELS", "Network", "NetworkCache", "networks_of", "share_of"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

# Per IP version: (prefix length, share of the whole), narrowest first.
LEVELS = {4: ((24, 1 / 32),), 6: ((64, 1 / 32), (48, 1 / 8))}

Network = tuple[str, float]  # the network's key, its share


def networks_of(address: str) -> tuple[Network, ...]:
    """The networks ``address`` (an address text) counts under, narrowest first."""
    ip = ipaddress.ip_address(address)
    return tuple(
        (f"{ip.version}/{bits}:{int(ip) >> (ip.max_prefixlen - bits)}", share)
        for bits, share in LEVELS[ip.version]
    )


def share_of(whole: int, share: float) -> int:
    """How many of ``whole`` a network with ``share`` may hold (at least one)."""
    return max(1, int(whole * share))


class NetworkCache(Generic[K, V]):
    """Values by key, each key counted under its networks; least recently used first out."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[K, tuple[tuple[str, ...], V]] = OrderedDict()
        self._networks: dict[str, OrderedDict[K, None]] = {}

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: K) -> V | None:
        found = self._items.get(key)
        if found is None:
            return None
        self._items.move_to_end(key)
        for network in found[0]:
            self._networks[network].move_to_end(key)
        return found[1]

    def put(self, key: K, networks: tuple[Network, ...], value: V) -> None:
        self.pop(key)
        for network, share in networks:
            mine = self._networks.get(network)
            if mine is not None and len(mine) >= share_of(self.size, share):
                self.pop(next(iter(mine)))
        while len(self._items) >= self.size:
            self.pop(next(iter(self._items)))
        for network, _share in networks:
            self._networks.setdefault(network, OrderedDict())[key] = None
        self._items[key] = (tuple(n for n, _ in networks), value)

    def pop(self, key: K) -> None:
        found = self._items.pop(key, None)
        if found is None:
            return
        for network in found[0]:
            mine = self._networks[network]
            del mine[key]
            if not mine:
                del self._networks[network]
