"""DNS for crawler verification: the resolver seam, and dnspython behind it.

Invariants:
- :class:`Resolver` is what verification asks: a reverse look-up (PTR names) and a forward
  one (A and AAAA addresses), each with the TTL its answer may be kept for. A name that
  does not exist, or has no such record, is an answer (no names, kept for the negative
  TTL); a time-out or a server failure raises :class:`DnsFailure`;
- :class:`SystemResolver` asks the system's configured name servers through dnspython's
  asyncio resolver, or, when given (``[server] dns_servers``, :func:`parse_servers`), those
  servers and no other; each query bounded by ``timeout``; it never asks about an address
  that is not globally routable (loopback, private, link-local...): no crawler comes from
  one, so the answer is "no names" at once;
- tests hand in a table (:class:`TableResolver`) and never resolve made-up names through the
  system's resolver.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Mapping, Sequence
from typing import NamedTuple, Protocol

from snapshotd.config.values import parse_servers

__all__ = [
    "NEGATIVE_TTL",
    "Answer",
    "DnsFailure",
    "Resolver",
    "SystemResolver",
    "TableResolver",
]

# How long "no such name" is kept (RFC 2308 caps negative caching at 3 hours; a crawler's
# new address deserves a look again sooner).
NEGATIVE_TTL = 600.0


class Answer(NamedTuple):
    values: tuple[str, ...]  # names (reverse) or addresses (forward)
    ttl: float


class DnsFailure(Exception):
    """No answer could be had (time-out, server failure): nothing is known."""


class Resolver(Protocol):
    async def reverse(self, address: str) -> Answer: ...

    async def forward(self, name: str) -> Answer: ...


class SystemResolver:
    """The system's name servers (``/etc/resolv.conf``), or ``nameservers`` (as
    :func:`parse_servers` reads them) and no other, through dnspython (imported on first
    use)."""

    def __init__(self, timeout: float = 2.0, *, nameservers: Sequence[str] = ()) -> None:
        self.timeout = timeout
        self.servers = parse_servers(nameservers)
        self._resolver = None

    def _get(self):  # type: ignore[no-untyped-def]
        if self._resolver is None:
            import dns.asyncresolver
            import dns.nameserver

            if self.servers:
                resolver = dns.asyncresolver.Resolver(configure=False)
                resolver.nameservers = [
                    dns.nameserver.Do53Nameserver(address, port) for address, port in self.servers
                ]
            else:
                resolver = dns.asyncresolver.Resolver()
            self._resolver = resolver
        return self._resolver

    async def reverse(self, address: str) -> Answer:
        if not ipaddress.ip_address(address).is_global:
            return Answer((), NEGATIVE_TTL)
        import dns.reversename

        names = await self._query(dns.reversename.from_address(address).to_text(), "PTR")
        return Answer(tuple(n.removesuffix(".") for n in names.values), names.ttl)

    async def forward(self, name: str) -> Answer:
        a, aaaa = await asyncio.gather(self._query(name, "A"), self._query(name, "AAAA"))
        ttls = [x.ttl for x in (a, aaaa) if x.values] or [NEGATIVE_TTL]
        return Answer(a.values + aaaa.values, min(ttls))

    async def _query(self, name: str, rdtype: str) -> Answer:
        import dns.exception
        import dns.resolver

        try:
            answer = await self._get().resolve(name, rdtype, lifetime=self.timeout)
        except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
            return Answer((), NEGATIVE_TTL)
        except (dns.exception.Timeout, dns.resolver.NoNameservers) as exc:
            raise DnsFailure(type(exc).__name__) from None
        except dns.exception.DNSException as exc:
            raise DnsFailure(type(exc).__name__) from None
        ttl = float(answer.rrset.ttl) if answer.rrset is not None else NEGATIVE_TTL
        return Answer(tuple(r.to_text() for r in answer), ttl)


class TableResolver:
    """Answers from tables: ``ptr`` (address -> names) and ``addresses`` (name -> addresses),
    each answer kept ``ttl`` seconds; ``delay`` before each answer; ``fail``: addresses and
    names whose look-up raises :class:`DnsFailure` (after the delay); ``hang``: ones that
    never answer. Counts its queries."""

    def __init__(
        self,
        ptr: Mapping[str, Sequence[str]] | None = None,
        addresses: Mapping[str, Sequence[str]] | None = None,
        *,
        ttl: float = 300.0,
        delay: float = 0.0,
        fail: Sequence[str] = (),
        hang: Sequence[str] = (),
    ) -> None:
        self.ptr = {k: tuple(v) for k, v in (ptr or {}).items()}
        self.addresses = {k.lower(): tuple(v) for k, v in (addresses or {}).items()}
        self.ttl, self.delay = ttl, delay
        self.fail, self.hang = set(fail), set(hang)
        self.queries: list[str] = []

    async def _answer(self, key: str, table: Mapping[str, tuple[str, ...]]) -> Answer:
        self.queries.append(key)
        if key in self.hang:
            await asyncio.Event().wait()
        if self.delay:
            await asyncio.sleep(self.delay)
        if key in self.fail:
            raise DnsFailure("SERVFAIL")
        values = table.get(key, ())
        return Answer(values, self.ttl if values else NEGATIVE_TTL)

    async def reverse(self, address: str) -> Answer:
        return await self._answer(address, self.ptr)

    async def forward(self, name: str) -> Answer:
        return await self._answer(name.lower(), self.addresses)
