"""Crawler families: which bots a family's operator lets you verify, and how (data, not code).

Invariants:
- the families are ``families.json``, shipped with the package: each names the lower-case
  User-Agent texts that claim it, the domains its reverse DNS names end in with the operator's
  page that documents them (``dns_source``; a family with domains and no source is refused at
  load), and the address range lists its operator publishes (their URLs only; no address data
  is bundled). A domain or list is one the operator alone holds names or addresses in: never
  one its customers can (a cloud VM's default reverse name forward-confirms);
- a bot claims the first family one of whose ``agents`` its matched name starts with (the
  name as :meth:`snapshotd.crawlers.bots.BotMatcher.family` spells it, in any case); a bot of no
  family is *unverifiable*, as is a family with no DNS domain and no range list loaded;
- a name matches a DNS domain when it is that domain or ends in ``.`` + that domain, after
  a trailing dot is dropped and in any case, so ``evilgooglebot.com`` is no ``googlebot.com``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib.resources import files

__all__ = [
    "Family",
    "claim_family",
    "families",
    "family_of",
    "name_in",
    "parse_range_source",
]


@dataclass(frozen=True)
class Family:
    name: str
    agents: tuple[str, ...]
    dns: tuple[str, ...]
    published: tuple[str, ...]
    dns_source: str = ""  # the operator's page documenting ``dns``


@cache
def families() -> dict[str, Family]:
    """The shipped families by name."""
    data = json.loads((files("snapshotd.crawlers") / "families.json").read_text("utf-8"))
    out = {
        f["name"]: Family(
            f["name"], tuple(f["agents"]), tuple(d.lower() for d in f["dns"]),
            tuple(f["published"]), f.get("dns_source", ""),
        )
        for f in data["families"]
    }
    for family in out.values():
        if family.dns and not family.dns_source.startswith("https://"):
            raise ValueError(f"crawler family {family.name}: DNS domains without their source")
    return out


@lru_cache(maxsize=1024)
def family_of(bot: str) -> Family | None:
    """The family a bot's matched name (``Googlebot``, ``bingbot``) claims, or None."""
    low = bot.lower()
    for family in families().values():
        if any(low.startswith(agent) for agent in family.agents):
            return family
    return None


def name_in(name: str, domains: tuple[str, ...]) -> bool:
    """Whether a DNS name is one of ``domains`` or under one of them."""
    name = name.lower().removesuffix(".")
    return any(name == d or name.endswith("." + d) for d in domains)


def parse_range_source(text: str) -> tuple[str, tuple[str, ...]]:
    """A ``bot_ranges`` entry, ``family=URL``, ``family=/absolute/file`` or
    ``family=published`` (the family's own lists), as (family, sources); ValueError says
    why it is none."""
    name, eq, source = text.partition("=")
    name, source = name.strip().lower(), source.strip()
    if not eq or not source:
        raise ValueError(f"{text!r:.80} is not family=URL or family=/file or family=published")
    family = families().get(name)
    if family is None:
        raise ValueError(f"unknown family {name!r:.40} (one of {', '.join(families())})")
    if source == "published":
        if not family.published:
            raise ValueError(f"{name} publishes no range list")
        return name, family.published
    if not (source.startswith(("http://", "https://", "/"))):
        raise ValueError(f"{source!r:.80}: expected an http(s) URL or an absolute file path")
    return name, (source,)


def claim_family(bot: str) -> str:
    """The name a bot's claim is counted under: its family's, else its own (``-``: none)."""
    found = family_of(bot) if bot else None
    return found.name if found is not None else (bot or "-")
