"""Admission: what becomes of a site path that is asked for, decided in one place.

Every way a path reaches snapshotd goes through :func:`decide`: a bot's request (the proxy,
the render endpoint and screenshots), the API (paths and sitemap uploads), and the crawler (seeds,
sitemaps, links, canonicals, redirects). ``decide`` is pure, in the style of h11: it is a
generator that *yields* the facts it needs as questions (:class:`Captured`, :class:`Known`,
:class:`Stored`, :class:`Size`, :class:`NewLately`, :class:`RobotsAllow`) and *returns* a
:class:`Decision`; :func:`admit` answers the questions from a :class:`Facts` (the store, by
default) and does no other I/O. Table-driven tests drive ``decide`` with plain data.

The rules of admission, in order:

1. The site's rewrite rules, for every source. A rules redirect or status is the answer for
   a bot and for the API; the crawler follows a redirect within the site (at most
   ``MAX_RULE_REDIRECTS`` times) and skips a status.
2. A path longer than a request target may be is refused (``too long``).
3. The ignore list, unless a rule said ``C``: a bot gets the origin's page, the API reports
   ``ignored``, the crawler records the path as ignored (which counts against ``max_pages``).
4. Crawler sources only: robots.txt (``obey_robots``), then ``max_hops``.
5. A bot's path with a snapshot is served: ``HIT`` while fresh, else ``STALE`` (and queued
   again when ``capture_expired`` and its retry time has come); one that owes the bot's
   device profile has that profile rendered first (``fill``), unless the site is paused.
   A bot's path without one that the site does not process (its URL process pattern, or
   rendered and left ``crawled``) gets the origin's page.
6. A path the store does not know is added only within ``max_pages``; for a bot also within
   ``new_paths_per_minute``, unless its crawler is trusted (below); links, canonicals and
   redirects only when ``capture_new``.
   The API, which is authenticated, is not bounded by either.
   A bot's path that would be captured is refused (``paused``) while the site is paused:
   no capture starts for it (SPEC 2.2). A pause does not stop paths being queued (the API,
   the crawler's sources): whether a queued path is claimed is the crawler's scheduling
   (:mod:`snapshotd.crawl.engine`), and a paused job's rounds stand still
   (:mod:`snapshotd.crawl.rounds`).
7. A known path is queued again only when it is due (expired, or changed per its sitemap
   ``lastmod``); pending and processing paths keep their place.

A bot's claim to be its crawler (:class:`Claim`, SPEC 3.4) is asked only where it changes
the decision, so a hit never waits on it: with ``verify_bots = "strict"`` first of all (a
claimant not trusted is passed through as a person, ``person``); with ``"on"`` when a bot's
path is new. A crawler is *trusted* when verified, or unverifiable and the site judges such
families ``verified`` (``unverifiable_bots``). A trusted crawler's new path is held only to
``max_pages``, queued at ``PRIORITY_BOT``, and queued even when it cannot be rendered now
(``queue``: no miss place, or the site paused). A request that claims no crawler (an
``_escaped_fragment_`` request of a person) is judged as an unverified one, never passed
through as a person.

A path is *due* when it has no expiry time or that time has come (:func:`is_due`): the one
freshness test for snapshots, records and retry delays alike.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, Protocol

from snapshotd.config.settings import SiteSettings
from snapshotd.crawlers.devices import profiles_served
from snapshotd.http_text.urls import MAX_PATH, MAX_QUERY
from snapshotd.rewrite import RuleSet
from snapshotd.rewrite.decision import RulesOutcome
from snapshotd.sites import path_policy
from snapshotd.store.interface import (
    PRIORITY_BOT,
    PRIORITY_EXPIRED,
    PathRecord,
    Snapshot,
    Store,
)

__all__ = [
    "CRAWL_SOURCES",
    "Captured",
    "Claim",
    "Decision",
    "Facts",
    "Known",
    "NewLately",
    "PRIORITY_NEW",
    "RobotsAllow",
    "Size",
    "Source",
    "StoreFacts",
    "Stored",
    "admit",
    "decide",
    "decide_now",
    "is_due",
]

# Who asks: a bot (the proxy, the render and screenshot endpoints), the API, or the
# crawler's sources.
Source = Literal["bot", "api", "seed", "sitemap", "link", "canonical", "redirect"]
CRAWL_SOURCES = frozenset({"seed", "sitemap", "link", "canonical", "redirect"})
# Sources that find a path by following a page: they add new paths only with capture_new.
_FOLLOWED = frozenset({"link", "canonical", "redirect"})
MAX_RULE_REDIRECTS = 5
# A new path a bot asked for is rendered by its own miss; its row waits behind every path
# already known, so a flood of new ones cannot keep the crawler from those.
PRIORITY_NEW = PRIORITY_EXPIRED


def is_due(expires_at: float | None, now: float) -> bool:
    """Whether something that expires at ``expires_at`` is due again at ``now``."""
    return expires_at is None or expires_at <= now


# ---------------------------------------------------------------------------- questions


@dataclass(frozen=True, slots=True)
class Captured:
    """The rules' ``NF`` question: has this path of the site ever been captured? -> bool"""

    path: str


@dataclass(frozen=True, slots=True)
class Known:
    """The store's record of this path of the site. -> PathRecord | None"""

    path: str


@dataclass(frozen=True, slots=True)
class Stored:
    """The snapshot of this path of the site. -> Snapshot | None"""

    path: str


@dataclass(frozen=True, slots=True)
class Size:
    """How many paths the site has, in any state. -> int"""


@dataclass(frozen=True, slots=True)
class NewLately:
    """How many new paths bots added to the site in the last minute. -> int"""


@dataclass(frozen=True, slots=True)
class RobotsAllow:
    """Whether the site's robots.txt lets the crawler fetch this path. -> bool"""

    path: str


@dataclass(frozen=True, slots=True)
class Claim:
    """The bot's claim to be its crawler, judged from its client address. -> ``verified``,
    ``unverified``, ``unverifiable`` or ``none`` (the request claims no crawler)"""


Question = Captured | Known | Stored | Size | NewLately | RobotsAllow | Claim


# ---------------------------------------------------------------------------- decisions


class Decision(NamedTuple):
    """What becomes of a path.

    ``kind`` is one of:

    - ``redirect`` (``status``, ``location``) and ``status`` (``status``): the rules answer;
    - ``ignored``: on the ignore list;
    - ``refused`` (``reason``): a bound or a crawl rule keeps it out; nothing is written;
    - ``serve`` (``snapshot``, ``fresh``, ``requeue``): a bot gets the stored snapshot;
    - ``fill`` (``snapshot``, ``requeue``): the path's snapshot owes the bot's device profile
      (store/profile_snapshots): that profile is rendered for it;
    - ``capture`` (``priority``, ``force``, ``queue``): set the path pending (a bot's miss
      renders it; with ``queue``, it is set pending even when no render can start now);
    - ``pass``: a bot gets the origin's page, nothing is refused (``reason`` says why);
    - ``person``: an untrusted claimant on a strict site, passed through as a person;
    - ``known`` (``reason`` is the record's state, or ``fresh``): nothing to do.

    ``path`` is the site path after the rules; ``new`` tells that the store has no record of
    it (a ``capture`` that adds a row).
    """

    kind: str
    path: str
    status: int | None = None
    location: str | None = None
    reason: str = ""
    priority: int = 0
    force: bool = False
    new: bool = False
    snapshot: Snapshot | None = None
    fresh: bool = False
    requeue: bool = False
    queue: bool = False
    claim: str = ""  # the bot's claim, when it was asked (Claim)


def decide(
    site: SiteSettings,
    rules: RuleSet | None,
    path: str,
    *,
    source: Source,
    now: float,
    priority: int = PRIORITY_BOT,
    host: str = "",
    headers: Mapping[str, str] | None = None,
    hops: int = 0,
    force: bool = False,
    lastmod: float | None = None,
    paused: bool = False,
) -> Generator[Question, Any, Decision]:
    """The admission of ``path`` of ``site`` asked for by ``source`` (``bot``, ``api``, or a
    crawler source of :data:`CRAWL_SOURCES`); yields questions, returns the decision.
    ``paused``: whether the site is paused now (the process's registry has it at hand)."""
    crawling = source in CRAWL_SOURCES
    capture_flag = False
    claim = ""
    if source == "bot" and site.verify_bots == "strict":
        claim = yield Claim()
        if claim != "none" and not _trusted(site, claim):
            return Decision("person", path, reason=claim, claim=claim)
    if rules is not None and len(rules):
        for _ in range(MAX_RULE_REDIRECTS):
            ruled = yield from _ruling(rules, path, host, headers)
            if ruled.action == "redirect":
                location = ruled.location or ruled.path
                if not crawling:
                    return Decision("redirect", path, status=ruled.status, location=location)
                target = path_policy.path_of(site, location)
                if target is None or target == path:
                    return Decision("refused", path, reason="rules redirect off-site or to itself")
                path = target
                continue
            if ruled.action == "status":
                if not crawling:
                    return Decision("status", path, status=ruled.status)
                return Decision("refused", path, reason=f"rules answer {ruled.status}")
            path, capture_flag = ruled.path, ruled.capture
            break
        else:
            return Decision("refused", path, reason="too many rules redirects")
    if len(path) > MAX_PATH + MAX_QUERY:
        return Decision("refused", path, reason="too long")

    if path_policy.is_ignored(site, path) and not capture_flag:
        if crawling and path_policy.at_max_pages(site, (yield Size())):
            return Decision("refused", path, reason="max_pages")
        return Decision("ignored", path)
    if source == "api":
        return Decision("capture", path, priority=priority, force=force)
    if crawling:
        if source != "seed" and not path_policy.crawls(site, path):
            return Decision("refused", path, reason="url_crawl_pattern")
        if site.obey_robots and not (yield RobotsAllow(path)):
            return Decision("refused", path, reason="robots.txt")
        if site.max_hops >= 0 and hops > site.max_hops:
            return Decision("refused", path, reason="max_hops")
    else:
        snapshot: Snapshot | None = yield Stored(path)
        if snapshot is not None:
            # Rendered as the site's first device profile, or under settings since changed
            # (before profiles, or another ``devices``): served, and made again.
            current = snapshot.own_profile == profiles_served(site.devices)[0]
            fresh = (
                current and snapshot.state == "processed" and not is_due(snapshot.expires_at, now)
            )
            # A failed recapture waits out its retry delay (``expires_at``) like any other.
            requeue = (
                not fresh
                and site.capture_expired
                and (
                    (snapshot.state in ("processed", "error") and is_due(snapshot.expires_at, now))
                    or (not current and snapshot.state == "processed")
                )
            )
            if snapshot.unrendered:
                if paused:  # no render starts for a paused site
                    return Decision("refused", path, reason="paused")
                return Decision("fill", path, snapshot=snapshot, requeue=requeue)
            return Decision("serve", path, snapshot=snapshot, fresh=fresh, requeue=requeue)
        if not path_policy.processes(site, path):
            return Decision("pass", path, reason="not processed")

    record: PathRecord | None = yield Known(path)
    if crawling:
        if record is None:
            return (yield from _new_path(site, path, source, priority, force))
        return _known_path(site, record, priority, now, lastmod)
    if record is None:
        admitted = yield from _new_path(site, path, source, priority, force, claim)
    elif record.state == "crawled":
        return Decision("pass", path, reason="not processed")
    elif record.state == "error" and not is_due(record.expires_at, now):
        return Decision("pass", path, reason="retry later")
    elif not site.capture_new:
        return Decision("pass", path, reason="capture_new is off")
    else:
        admitted = Decision("capture", path, priority=PRIORITY_BOT)
    if paused and admitted.kind == "capture":
        # No capture starts for a paused site: the bot gets the origin's page; a trusted
        # crawler's new path is queued all the same (a pause does not stop queueing).
        return Decision("refused", path, reason="paused", queue=admitted.queue,
                        priority=admitted.priority, claim=admitted.claim, new=admitted.new)
    return admitted


def _trusted(site: SiteSettings, claim: str) -> bool:
    """Whether a claim is trusted as the crawler's own on ``site``."""
    return claim == "verified" or (
        claim == "unverifiable" and site.unverifiable_bots == "verified"
    )


def _ruling(
    rules: RuleSet, path: str, host: str, headers: Mapping[str, str] | None
) -> Generator[Question, Any, RulesOutcome]:
    """The rules' outcome for ``path``, their ``NF`` questions passed on as :class:`Captured`."""
    ruling = rules.ruling(path, host=host, headers=headers)
    try:
        asked = next(ruling)
        while True:
            asked = ruling.send(bool((yield Captured(asked))))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def _new_path(
    site: SiteSettings, path: str, source: str, priority: int, force: bool, claim: str = ""
) -> Generator[Question, Any, Decision]:
    if source in _FOLLOWED and not site.capture_new:
        return Decision("refused", path, reason="capture_new is off")
    if source == "bot" and not site.capture_new:
        return Decision("pass", path, reason="capture_new is off")
    if path_policy.at_max_pages(site, (yield Size())):
        return Decision("refused", path, reason="max_pages")
    if source == "bot":
        if site.verify_bots != "off" and not claim:
            claim = yield Claim()
        if _trusted(site, claim):
            return Decision("capture", path, priority=PRIORITY_BOT, new=True, queue=True,
                            claim=claim)
        if (yield NewLately()) >= site.new_paths_per_minute:
            return Decision("refused", path, reason="rate", claim=claim)
        return Decision("capture", path, priority=PRIORITY_NEW, new=True, claim=claim)
    return Decision("capture", path, priority=priority, force=force, new=True)


def _known_path(
    site: SiteSettings, record: PathRecord, priority: int, now: float, lastmod: float | None
) -> Decision:
    path = record.path
    if record.state == "pending":
        # Only the hops can shrink: a path keeps the priority it was queued with.
        return Decision("capture", path, priority=record.priority)
    if record.state == "ignored" and not path_policy.is_ignored(site, path):
        # Ignored under an older `ignore` list: a page like any new one now.
        return Decision("capture", path, priority=priority)
    if record.state in ("processing", "ignored"):
        return Decision("known", path, reason=record.state)
    captured_at = record.captured_at
    changed = lastmod is not None and captured_at is not None and lastmod > captured_at
    if not (is_due(record.expires_at, now) or changed):
        return Decision("known", path, reason="fresh")
    if record.state == "processed" and not site.capture_expired:
        return Decision("known", path, reason="fresh")
    return Decision("capture", path, priority=PRIORITY_EXPIRED, force=changed)


# ---------------------------------------------------------------------------- the driver


class Facts(Protocol):
    """Answers to :func:`decide`'s questions for one site."""

    async def captured(self, path: str) -> bool: ...

    async def record(self, path: str) -> PathRecord | None: ...

    async def snapshot(self, path: str) -> Snapshot | None: ...

    async def size(self) -> int: ...

    async def new_lately(self) -> int: ...

    def robots_allow(self, path: str) -> bool: ...

    async def claim(self) -> str: ...


class StoreFacts:
    """The facts of one site as the store has them; callers override what they keep
    themselves (a cache of snapshots, a count of pages, robots.txt)."""

    def __init__(self, store: Store, site: str) -> None:
        self.store, self.site = store, site

    async def captured(self, path: str) -> bool:
        record = await self.store.get_path(self.site, path)
        return record is not None and record.captured_at is not None

    async def record(self, path: str) -> PathRecord | None:
        return await self.store.get_path(self.site, path)

    async def snapshot(self, path: str) -> Snapshot | None:
        return await self.store.get_snapshot(self.site, path)

    async def size(self) -> int:
        return await self.store.site_size(self.site)

    async def new_lately(self) -> int:
        return 0

    def robots_allow(self, path: str) -> bool:
        return True

    async def claim(self) -> str:
        return "none"


async def admit(gen: Generator[Question, Any, Decision], facts: Facts) -> Decision:
    """Run :func:`decide` to its decision, answering each question from ``facts``."""
    try:
        question = next(gen)
        while True:
            question = gen.send(await _ANSWER[type(question)](facts, question))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def decide_now(
    gen: Generator[Question, Any, Decision],
    stored: Callable[[str], Snapshot | None],
    claim: Callable[[], str | None] = lambda: None,
) -> Decision | None:
    """Run :func:`decide` to its decision when the only facts it asks are a snapshot that
    ``stored`` has at hand and a claim ``claim`` knows without waiting; None as soon as it
    asks anything else or either has no answer (the caller then goes the awaited way, with
    :func:`admit`)."""
    try:
        question = next(gen)
        while True:
            if isinstance(question, Stored):
                answer: Any = stored(question.path)
            elif type(question) is Claim:
                answer = claim()
            else:
                return None
            if answer is None:
                return None
            question = gen.send(answer)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def _robots_allow(facts: Facts, question: Any) -> bool:
    return facts.robots_allow(question.path)


# How each question is answered: a lookup by its type (on the path of every bot request).
_ANSWER: dict[type, Callable[[Facts, Any], Awaitable[Any]]] = {
    Captured: lambda facts, q: facts.captured(q.path),
    Known: lambda facts, q: facts.record(q.path),
    Stored: lambda facts, q: facts.snapshot(q.path),
    Size: lambda facts, q: facts.size(),
    NewLately: lambda facts, q: facts.new_lately(),
    RobotsAllow: _robots_allow,
    Claim: lambda facts, q: facts.claim(),
}
