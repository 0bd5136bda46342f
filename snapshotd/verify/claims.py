"""Crawler claims of snapshot requests: who sent one, and what its claim is worth.

Invariants:
- a request's client is the address :class:`~snapshotd.web.client_address.TrustedProxies`
  gives (the peer's, or the one a trusted front server forwarded); its bot is the bot-list
  entry its User-Agent matched, or "" (an ``_escaped_fragment_`` request of a person, which
  claims no crawler: ``none``);
- :meth:`Claims.now` never waits, and asks nothing for a site that verifies no bot;
  :meth:`Claims.claim` waits at most ``wait`` seconds;
- a claim is counted under its crawler family's name, else the bot's
  (:func:`~snapshotd.web.crawler_families.claim_family`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from snapshotd.verify import Verifier
from snapshotd.web.client_address import TrustedProxies

__all__ = ["VERIFY_WAIT", "Claims", "Who", "after_refusal"]

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

    def who(self, site: str, headers: Mapping[str, str], scope: Mapping[str, Any]) -> Who:
        peer = scope.get("client")
        client = self.trusted.client(peer[0], headers) if peer else "-"
        return Who(self._bot_of(site, headers.get("user-agent", "")) or "", client)

    def now(self, who: Who, verify: str = "on") -> str | None:
        """The claim as known without waiting; None while DNS is being asked; ``-`` when
        the site's ``verify_bots`` (``verify``) is off."""
        if verify == "off":
            return "-"
        return self.verifier.now(who.bot, who.client) if who.bot else "none"

    async def claim(self, who: Who, wait: float = VERIFY_WAIT) -> str:
        if not who.bot:
            return "none"
        return await self.verifier.claim(who.bot, who.client, wait)
