"""Verified crawlers: whether a request's client address belongs to the crawler family its
User-Agent claims (:class:`Verifier`).

Invariants:
- a claim is ``verified`` (the address is in the family's published ranges, or its reverse
  DNS name is under one of the family's domains and that name's forward look-up gives the
  address back), ``unverified`` (the family has a way and the address failed it, or the
  look-up failed), or ``unverifiable`` (no family, or a family with no way that is
  loaded); a family's ranges and its DNS both count: either one verifies;
- :meth:`Verifier.now` answers without I/O and without awaiting: from the ranges (what they
  say of an address kept until they are loaded again), then from the cache of DNS answers;
  an address is the text :mod:`snapshotd.crawlers.client_address` gives (one spelling per address);
  when DNS must be asked it starts the look-up in the background and answers None (not
  known yet), so a cache hit never waits on DNS;
- :meth:`Verifier.claim` waits for a look-up under way at most ``wait`` seconds (when its
  network's share of look-ups is taken, for one of its own network's to end); not known by
  then is ``unverified`` (the answer lands in the cache for the next request);
- fair per network (:mod:`snapshotd.crawlers.verification.fairness`: an IPv4 /24; an IPv6 /64
  and its
  /48): at most ``max_lookups`` look-ups run at once, of them at most each of the address's
  networks' share; past either an address is judged unverified for now and looked up again
  by a later request, so a hit starts at most one look-up, each bounded by twice
  ``timeout``, and one network's flood of new addresses holds only its own share;
- every DNS answer is cached for its TTL (clamped to ``MIN_TTL`` .. ``MAX_TTL``); a failure
  or time-out for ``FAILURE_TTL``; the cache holds at most ``max_entries`` addresses, and of
  one network at most its share (a network at its share replaces its own least recently
  used entry; a full cache drops the least recently used one).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import time

from snapshotd.crawlers.families import Family, family_of, name_in
from snapshotd.crawlers.verification.fairness import Network, NetworkCache, networks_of, share_of
from snapshotd.crawlers.verification.ranges import RangeLists
from snapshotd.crawlers.verification.resolver import DnsFailure, Resolver, SystemResolver
from snapshotd.observe import logs

__all__ = ["UNVERIFIABLE", "UNVERIFIED", "VERIFIED", "Verifier"]

log = logging.getLogger("snapshotd.verify")

VERIFIED, UNVERIFIED, UNVERIFIABLE = "verified", "unverified", "unverifiable"
MIN_TTL, MAX_TTL, FAILURE_TTL = 30.0, 86400.0, 30.0
# Reverse names looked up forward, at most, per address (a PTR set may hold several).
MAX_NAMES = 3


class Verifier:
    """Verification of crawler claims by ``ranges`` and DNS (``resolver``; the system's
    name servers by default)."""

    def __init__(
        self,
        ranges: RangeLists | None = None,
        resolver: Resolver | None = None,
        *,
        timeout: float = 2.0,
        max_entries: int = 65536,
        max_lookups: int = 256,
        clock=time.monotonic,  # type: ignore[no-untyped-def]
    ) -> None:
        self.ranges = ranges or RangeLists(())
        self.resolver: Resolver = resolver or SystemResolver(timeout)
        self.timeout = timeout
        self.max_entries, self.max_lookups = max_entries, max_lookups
        self.clock = clock
        self._cache: NetworkCache[tuple[str, str], tuple[str, float]] = NetworkCache(max_entries)
        self._lookups: dict[tuple[str, str], asyncio.Task[str]] = {}
        self._network_lookups: dict[str, set[asyncio.Task[str]]] = {}
        self._ranged: dict[tuple[str, str], str] = {}
        self._ranges_seen = -1
        self.looked_up = 0  # DNS look-ups started

    async def start(self) -> None:
        await self.ranges.start()

    async def close(self) -> None:
        lookups, self._lookups = list(self._lookups.values()), {}
        for task in lookups:
            task.cancel()
        await asyncio.gather(*lookups, return_exceptions=True)
        await self.ranges.close()

    def now(self, bot: str, address: str) -> str | None:
        """The claim of ``bot`` (its matched name) from ``address`` as known now; None while
        DNS is being asked (a look-up is started when none is under way)."""
        family = family_of(bot)
        if family is None:
            return UNVERIFIABLE
        if self._ranges_seen != self.ranges.loads:  # the lists were loaded (again)
            self._ranged.clear()
            self._ranges_seen = self.ranges.loads
        # What the ranges say of an address is kept until they are loaded again.
        key = (family.name, address)
        by_ranges = self._ranged.get(key)
        if by_ranges is None:
            by_ranges = self._by_ranges(family, address)
            if len(self._ranged) >= self.max_entries:
                self._ranged.clear()
            self._ranged[key] = by_ranges
        if by_ranges:
            return by_ranges
        cached = self._cache.get(key)
        if cached is not None:
            if cached[1] > self.clock():
                return cached[0]
            self._cache.pop(key)
        if key not in self._lookups:
            self._start(family, address)
        return None

    def _start(self, family: Family, address: str) -> None:
        """A look-up of ``address`` in the background, when a slot is free, overall and in
        each of its networks' share."""
        networks = networks_of(address)
        if len(self._lookups) >= self.max_lookups or any(
            len(self._network_lookups.get(n, ())) >= share_of(self.max_lookups, share)
            for n, share in networks
        ):
            return
        key = (family.name, address)
        task = asyncio.ensure_future(self._lookup(family, address, networks))
        self._lookups[key] = task
        for network, _share in networks:
            self._network_lookups.setdefault(network, set()).add(task)

        def done(_task: asyncio.Task[str]) -> None:
            self._lookups.pop(key, None)
            for network, _share in networks:
                mine = self._network_lookups.get(network)
                if mine is not None:
                    mine.discard(task)
                    if not mine:
                        del self._network_lookups[network]

        task.add_done_callback(done)

    def network_lookups(self, address: str) -> set[asyncio.Task[str]]:
        """The look-ups under way for ``address``'s networks."""
        return set().union(*(self._network_lookups.get(n, ()) for n, _ in networks_of(address)))

    def _by_ranges(self, family: Family, address: str) -> str:
        """``verified`` when the address is in the family's ranges; ``unverified`` or
        ``unverifiable`` when DNS cannot say otherwise (the family has no DNS domain or the
        address is none); "" when DNS is to be asked."""
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return UNVERIFIED
        in_ranges = self.ranges.lookup(family.name, ip)
        if in_ranges:
            return VERIFIED
        if not family.dns:
            return UNVERIFIABLE if in_ranges is None else UNVERIFIED
        return ""

    async def claim(self, bot: str, address: str, wait: float) -> str:
        """The claim, waiting at most ``wait`` seconds for DNS; ``unverified`` when the
        answer is not had by then."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while True:
            found = self.now(bot, address)
            if found is not None:
                return found
            family = family_of(bot)
            assert family is not None
            task = self._lookups.get((family.name, address))
            if task is not None:
                break
            # No slot: wait for one of its own networks' look-ups to end, then try again.
            mine = self.network_lookups(address)
            left = deadline - loop.time()
            if not mine or left <= 0:  # every slot taken by others, or the time is up
                return UNVERIFIED
            await asyncio.wait(mine, timeout=left, return_when=asyncio.FIRST_COMPLETED)
        done, _ = await asyncio.wait({task}, timeout=max(0.0, deadline - loop.time()))
        if task in done and not task.cancelled() and task.exception() is None:
            return task.result()
        return UNVERIFIED

    async def _lookup(self, family: Family, address: str, networks: tuple[Network, ...]) -> str:
        """Reverse, then forward DNS for ``address``; the claim, cached with its TTL."""
        self.looked_up += 1
        try:
            claim, ttl = await asyncio.wait_for(self._dns(family, address), self.timeout * 2)
        except (DnsFailure, TimeoutError, OSError) as exc:
            # One line now and then: under a flood of new addresses, failures come in runs.
            logs.throttled(
                log, logging.WARNING, "bot verification failed family=%s client=%s error=%s",
                family.name, address, type(exc).__name__ if not str(exc) else exc,
            )
            claim, ttl = UNVERIFIED, FAILURE_TTL
        expires = self.clock() + min(max(ttl, MIN_TTL), MAX_TTL)
        self._cache.put((family.name, address), networks, (claim, expires))
        return claim

    async def _dns(self, family: Family, address: str) -> tuple[str, float]:
        names = await self.resolver.reverse(address)
        ttl = names.ttl
        ip = ipaddress.ip_address(address)
        for name in [n for n in names.values if name_in(n, family.dns)][:MAX_NAMES]:
            forward = await self.resolver.forward(name)
            ttl = min(ttl, forward.ttl)
            if any(_same(ip, a) for a in forward.values):
                return VERIFIED, ttl
        return UNVERIFIED, ttl


def _same(ip: ipaddress.IPv4Address | ipaddress.IPv6Address, text: str) -> bool:
    try:
        return ipaddress.ip_address(text) == ip
    except ValueError:
        return False
