"""Crawler claims of snapshot requests: who sent one, and what its claim is worth.

Invariants:
- a request's client is the address :class:`~snapshotd.crawlers.client_address.TrustedProxies`
  gives (the peer's, or the one a trusted front server forwarded); its bot is the bot-list
  entry its User-Agent matched, or "" (an ``_escaped_fragment_`` request of a person, which
  claims no crawler: ``none``);
- :meth:`Claims.now` never waits, and asks nothing for a site that verifies no bot;
  :meth:`Claims.claim` waits at most ``wait`` seconds;
- a claim is counted under its crawler family's name, else the bot's
  (:func:`~snapshotd.crawlers.families.claim_family`);
- the first bot request of a process that carries a forwarding header (``X-Forwarded-For``,
  ``Forwarded``) from a peer not in ``trusted_proxies``, on a site that verifies crawlers,
  is logged once: every crawler behind that peer seems to be the peer, and none is verified.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from snapshotd.crawlers.client_address import TrustedProxies
from snapshotd.crawlers.verification import Verifier

__all__ = ["VERIFY_WAIT", "Claims", "Who", "after_refusal"]

log = logging.getLogger("snapshotd.verify")

# The longest a new path's admission waits for DNS to verify its crawler (a hit never does).
VERIFY_WAIT = 2.0


class Who(NamedTuple):
    """Who sent a snapshot request: its bot ("" for none) and its client's address."""

    bot: str
    client: str


def after_refusal(claim: str, reason: str) -> str:
    """The claim counted for a request refused for ``reason``: ``refused`` when it was not
    trusted and a trusted crawler would have had what it asked (every reason but
    ``max_pages``, which binds everyone alike)."""
    if claim in ("unverified", "unverifiable") and reason != "max_pages":
        return "refused"
    return claim


class Claims:
    """The claims of one process's snapshot requests."""

    def __init__(
        self,
        verifier: Verifier,
        trusted: TrustedProxies,
        bot_of: Callable[[str, str], str | None],
    ) -> None:
        self.verifier, self.trusted = verifier, trusted
        self._bot_of = bot_of  # (site, User-Agent) -> the bot-list entry matched
        self._told_untrusted = False  # the forwarding headers of an untrusted peer, logged

    def who(
        self, site: str, headers: Mapping[str, str], scope: Mapping[str, Any], verify: str = "on"
    ) -> Who:
        peer = scope.get("client")
        client = self.trusted.client(peer[0], headers) if peer else "-"
        bot = self._bot_of(site, headers.get("user-agent", "")) or ""
        if bot and peer and verify != "off" and not self._told_untrusted:
            self._tell_untrusted(str(peer[0]), headers)
        return Who(bot, client)

    def _tell_untrusted(self, peer: str, headers: Mapping[str, str]) -> None:
        """Log, once, a forwarding header from ``peer`` when it is no trusted front server."""
        if "x-forwarded-for" not in headers and "forwarded" not in headers:
            return
        try:
            address = ipaddress.ip_address(peer)
        except ValueError:
            return
        if address.version == 6 and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        if self.trusted.trusts(address):
            return
        self._told_untrusted = True
        log.warning(
            "forwarded headers from %s, which is not in trusted_proxies: every crawler behind "
            "it is judged by its address, and none is verified (set --trusted-proxies to the "
            "front server's address)", peer,
        )

    def now(self, who: Who, verify: str = "on") -> str | None:
        """The claim as known without waiting; None while DNS is being asked; ``-`` when
        the site's ``verify_bots`` (``crawlers.verification``) is off."""
        if verify == "off":
            return "-"
        return self.verifier.now(who.bot, who.client) if who.bot else "none"

    async def claim(self, who: Who, wait: float = VERIFY_WAIT) -> str:
        if not who.bot:
            return "none"
        return await self.verifier.claim(who.bot, who.client, wait)
