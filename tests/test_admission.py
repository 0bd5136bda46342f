"""Admission decided alone: data in, decision out, every question answered from a table."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from snapshotd.config.settings import SiteSettings
from snapshotd.rewrite import parse_rules
from snapshotd.sites import path_policy
from snapshotd.sites.admission import (
    PRIORITY_NEW,
    Captured,
    Claim,
    Decision,
    Known,
    NewLately,
    RobotsAllow,
    Size,
    Stored,
    admit,
    decide,
    is_due,
)
from snapshotd.store.interface import (
    PRIORITY_API,
    PRIORITY_BOT,
    PRIORITY_EXPIRED,
    PRIORITY_LINK,
    PathRecord,
    Snapshot,
)

NOW = 1_000_000.0
SITE = SiteSettings(
    name="s", origin="http://shop.test", ignore=("/cart",), max_pages=10, new_paths_per_minute=5
)


def record(path: str, state: str, **kw: Any) -> PathRecord:
    return PathRecord(site="s", path=path, state=state, priority=kw.pop("priority", 1), **kw)


def snapshot(
    path: str, state: str = "processed", expires_at: float | None = NOW + 60,
    profile: str = "mobile", own: str = "", owed: tuple[str, ...] = (),
    served_for: str | None = None,
) -> Snapshot:
    return Snapshot(
        site="s", path=path, body_gz=b"", status=200, state=state, expires_at=expires_at,
        profile=profile, own_profile=own or profile, owed=owed, served_for=served_for,
    )


def run(
    path: str,
    *,
    source: str,
    site: SiteSettings = SITE,
    rules: str = "",
    records: dict[str, PathRecord] | None = None,
    snapshots: dict[str, Snapshot] | None = None,
    size: int = 0,
    new_lately: int = 0,
    robots_disallow: tuple[str, ...] = (),
    captured: tuple[str, ...] = (),
    claim: str = "none",
    **kw: Any,
) -> tuple[Decision, list[Any]]:
    """Drive :func:`decide` to its end, answering from the tables; returns what it asked too."""
    records, snapshots = records or {}, snapshots or {}
    gen = decide(site, parse_rules(rules) if rules else None, path, source=source, now=NOW, **kw)
    asked: list[Any] = []
    try:
        question = next(gen)
        while True:
            asked.append(question)
            match question:
                case Captured(p):
                    answer: Any = p in captured
                case Known(p):
                    answer = records.get(p)
                case Stored(p):
                    answer = snapshots.get(p)
                case Size():
                    answer = size
                case NewLately():
                    answer = new_lately
                case RobotsAllow(p):
                    answer = not any(p.startswith(d) for d in robots_disallow)
                case Claim():
                    answer = claim
            question = gen.send(answer)
    except StopIteration as done:
        return done.value, asked


def brief(d: Decision) -> tuple[Any, ...]:
    """The parts of a decision a row pins."""
    if d.kind == "redirect":
        return ("redirect", d.status, d.location)
    if d.kind == "status":
        return ("status", d.status)
    if d.kind in ("refused", "pass", "known"):
        return (d.kind, d.path, d.reason)
    if d.kind == "serve":
        return ("serve", d.path, "fresh" if d.fresh else "stale", d.requeue)
    if d.kind == "fill":
        return ("fill", d.path, d.requeue)
    if d.kind == "capture":
        return ("capture", d.path, d.priority, d.force, d.new)
    return (d.kind, d.path)


ROWS: list[tuple[str, str, str, dict[str, Any], tuple[Any, ...]]] = [
    # --- a bot (the proxy, the render endpoint)
    ("bot: new path is rendered, queued last", "bot", "/a", {},
     ("capture", "/a", PRIORITY_NEW, False, True)),
    ("bot: fresh snapshot is a hit", "bot", "/a", {"snapshots": {"/a": snapshot("/a")}},
     ("serve", "/a", "fresh", False)),
    ("bot: a snapshot of another profile than the site's first is stale and made again", "bot",
     "/a", {"snapshots": {"/a": snapshot("/a", profile="desktop")}},
     ("serve", "/a", "stale", True)),
    ("bot: a profile's own snapshot beside the path's is fresh", "bot", "/a",
     {"snapshots": {"/a": snapshot("/a", profile="desktop", own="mobile")}},
     ("serve", "/a", "fresh", False)),
    ("bot: a site serving desktop to all has its desktop snapshot fresh", "bot", "/a",
     {"snapshots": {"/a": snapshot("/a", profile="desktop")},
      "site": replace(SITE, devices="desktop")}, ("serve", "/a", "fresh", False)),
    ("bot: a pending snapshot of another profile is not queued twice", "bot", "/a",
     {"snapshots": {"/a": snapshot("/a", state="pending", profile="desktop")}},
     ("serve", "/a", "stale", False)),
    ("bot: expired snapshot is stale and queued again", "bot", "/a",
     {"snapshots": {"/a": snapshot("/a", expires_at=NOW)}}, ("serve", "/a", "stale", True)),
    ("bot: expired snapshot, capture_expired off", "bot", "/a",
     {"snapshots": {"/a": snapshot("/a", expires_at=NOW - 1)},
      "site": replace(SITE, capture_expired=False)}, ("serve", "/a", "stale", False)),
    ("bot: failed recapture waits out its retry delay", "bot", "/a",
     {"snapshots": {"/a": snapshot("/a", state="error", expires_at=NOW + 30)}},
     ("serve", "/a", "stale", False)),
    ("bot: failed recapture due again", "bot", "/a",
     {"snapshots": {"/a": snapshot("/a", state="error", expires_at=NOW - 30)}},
     ("serve", "/a", "stale", True)),
    ("bot: pending snapshot is stale, not queued twice", "bot", "/a",
     {"snapshots": {"/a": snapshot("/a", state="pending", expires_at=NOW - 30)}},
     ("serve", "/a", "stale", False)),
    ("bot: failed first capture waits for its retry", "bot", "/a",
     {"records": {"/a": record("/a", "error", expires_at=NOW + 60)}},
     ("pass", "/a", "retry later")),
    ("bot: failed first capture due again", "bot", "/a",
     {"records": {"/a": record("/a", "error", expires_at=NOW - 60)}},
     ("capture", "/a", PRIORITY_BOT, False, False)),
    ("bot: known pending path jumps the queue", "bot", "/a",
     {"records": {"/a": record("/a", "pending")}, "size": 10},
     ("capture", "/a", PRIORITY_BOT, False, False)),
    ("bot: new path past max_pages", "bot", "/a", {"size": 10},
     ("refused", "/a", "max_pages")),
    ("bot: new path past the rate", "bot", "/a", {"new_lately": 5},
     ("refused", "/a", "rate")),
    ("bot: capture_new off", "bot", "/a", {"site": replace(SITE, capture_new=False)},
     ("pass", "/a", "capture_new is off")),
    ("bot: capture_new off, known path", "bot", "/a",
     {"site": replace(SITE, capture_new=False), "records": {"/a": record("/a", "pending")}},
     ("pass", "/a", "capture_new is off")),
    ("bot: ignored", "bot", "/cart/1", {}, ("ignored", "/cart/1")),
    ("bot: rules redirect answered", "bot", "/old/a",
     {"rules": r"^/old/(.*)$ /new/$1 [R=301]"}, ("redirect", 301, "/new/a")),
    ("bot: rules status answered", "bot", "/admin", {"rules": "^/admin [R=403]"},
     ("status", 403)),
    ("bot: rules rewrite, then the store", "bot", "/a/", {"rules": r"^/(.*)\/$ /$1",
     "snapshots": {"/a": snapshot("/a")}}, ("serve", "/a", "fresh", False)),
    ("bot: C captures an ignored path", "bot", "/cart", {"rules": "^/cart$ [C]"},
     ("capture", "/cart", PRIORITY_NEW, False, True)),
    ("bot: NF rule asks the store", "bot", "/p/a",
     {"rules": r"^/p/(.*)$ /q/$1 [NF]", "captured": ("/p/a",)},
     ("capture", "/p/a", PRIORITY_NEW, False, True)),
    ("bot: NF rule, not captured", "bot", "/p/a", {"rules": r"^/p/(.*)$ /q/$1 [NF]"},
     ("capture", "/q/a", PRIORITY_NEW, False, True)),
    ("bot: paused site starts no capture of a new path", "bot", "/a", {"paused": True},
     ("refused", "/a", "paused")),
    ("bot: paused site starts no capture of a known path", "bot", "/a",
     {"paused": True, "records": {"/a": record("/a", "pending")}},
     ("refused", "/a", "paused")),
    ("bot: paused site serves its snapshots, stale ones queued again", "bot", "/a",
     {"paused": True, "snapshots": {"/a": snapshot("/a", expires_at=NOW)}},
     ("serve", "/a", "stale", True)),
    ("bot: a profile the snapshot owes is rendered for its crawler", "bot", "/a",
     {"snapshots": {"/a": snapshot("/a", owed=("desktop",), served_for="desktop")}},
     ("fill", "/a", False)),
    ("bot: an owing snapshot is served to the profile it was rendered for", "bot", "/a",
     {"snapshots": {"/a": snapshot("/a", owed=("desktop",), served_for="mobile")}},
     ("serve", "/a", "fresh", False)),
    ("bot: an owed profile of a stale snapshot: rendered, the path queued again", "bot", "/a",
     {"snapshots": {"/a": snapshot("/a", expires_at=NOW, owed=("desktop",),
                                   served_for="desktop")}},
     ("fill", "/a", True)),
    ("bot: paused site renders no owed profile", "bot", "/a",
     {"paused": True,
      "snapshots": {"/a": snapshot("/a", owed=("desktop",), served_for="desktop")}},
     ("refused", "/a", "paused")),
    ("bot: paused site, a bound refuses first", "bot", "/a", {"paused": True, "size": 10},
     ("refused", "/a", "max_pages")),
    ("bot: paused site, a path it does not process", "bot", "/a",
     {"paused": True, "records": {"/a": record("/a", "crawled")}},
     ("pass", "/a", "not processed")),
    # --- the API (authenticated: no page bounds)
    ("api: queued with its priority and force", "api", "/a",
     {"priority": PRIORITY_API, "force": True, "size": 10},
     ("capture", "/a", PRIORITY_API, True, False)),
    ("api: ignored", "api", "/cart", {}, ("ignored", "/cart")),
    ("api: rules redirect reported", "api", "/old/a",
     {"rules": r"^/old/(.*)$ /new/$1 [R=301]"}, ("redirect", 301, "/new/a")),
    ("api: paused site still queues", "api", "/a", {"paused": True},
     ("capture", "/a", PRIORITY_BOT, False, False)),
    # --- the crawler
    ("link: new path queued with its priority", "link", "/a", {"priority": PRIORITY_LINK},
     ("capture", "/a", PRIORITY_LINK, False, True)),
    ("link: capture_new off", "link", "/a", {"site": replace(SITE, capture_new=False)},
     ("refused", "/a", "capture_new is off")),
    ("seed: capture_new does not apply", "seed", "/a",
     {"site": replace(SITE, capture_new=False), "priority": PRIORITY_LINK},
     ("capture", "/a", PRIORITY_LINK, False, True)),
    ("link: past max_pages", "link", "/a", {"size": 10}, ("refused", "/a", "max_pages")),
    ("link: paused site still queues, claimed once resumed", "link", "/a",
     {"paused": True, "priority": PRIORITY_LINK}, ("capture", "/a", PRIORITY_LINK, False, True)),
    ("link: the rate is for bots only", "link", "/a",
     {"new_lately": 99, "priority": PRIORITY_LINK}, ("capture", "/a", PRIORITY_LINK, False, True)),
    ("link: robots.txt", "link", "/private/a", {"robots_disallow": ("/private",)},
     ("refused", "/private/a", "robots.txt")),
    ("link: robots.txt not obeyed", "link", "/private/a",
     {"robots_disallow": ("/private",), "site": replace(SITE, obey_robots=False),
      "priority": PRIORITY_LINK}, ("capture", "/private/a", PRIORITY_LINK, False, True)),
    ("link: max_hops", "link", "/a", {"hops": 3, "site": replace(SITE, max_hops=2)},
     ("refused", "/a", "max_hops")),
    ("link: ignored is recorded", "link", "/cart", {}, ("ignored", "/cart")),
    ("link: ignored past max_pages", "link", "/cart", {"size": 10},
     ("refused", "/cart", "max_pages")),
    ("link: pending keeps its priority", "link", "/a",
     {"records": {"/a": record("/a", "pending", priority=3)}},
     ("capture", "/a", 3, False, False)),
    ("link: processing", "link", "/a", {"records": {"/a": record("/a", "processing")}},
     ("known", "/a", "processing")),
    ("link: fresh", "link", "/a",
     {"records": {"/a": record("/a", "processed", expires_at=NOW + 1)}},
     ("known", "/a", "fresh")),
    ("link: expired is queued again", "link", "/a",
     {"records": {"/a": record("/a", "processed", expires_at=NOW)}},
     ("capture", "/a", PRIORITY_EXPIRED, False, False)),
    ("link: expired, capture_expired off", "link", "/a",
     {"records": {"/a": record("/a", "processed", expires_at=NOW)},
      "site": replace(SITE, capture_expired=False)}, ("known", "/a", "fresh")),
    ("sitemap: lastmod after the capture forces it", "sitemap", "/a",
     {"records": {"/a": record("/a", "processed", captured_at=NOW - 10, expires_at=NOW + 99)},
      "lastmod": NOW - 5}, ("capture", "/a", PRIORITY_EXPIRED, True, False)),
    ("sitemap: lastmod before the capture", "sitemap", "/a",
     {"records": {"/a": record("/a", "processed", captured_at=NOW - 10, expires_at=NOW + 99)},
      "lastmod": NOW - 50}, ("known", "/a", "fresh")),
    ("link: no longer ignored", "link", "/a",
     {"records": {"/a": record("/a", "ignored")}, "priority": PRIORITY_LINK},
     ("capture", "/a", PRIORITY_LINK, False, False)),
    ("link: still ignored", "link", "/cart",
     {"records": {"/cart": record("/cart", "ignored")}, "rules": "^/cart$ [C]"},
     ("known", "/cart", "ignored")),
    ("link: rules redirect followed", "link", "/old/a",
     {"rules": r"^/old/(.*)$ /new/$1 [R=301]", "priority": PRIORITY_LINK},
     ("capture", "/new/a", PRIORITY_LINK, False, True)),
    ("link: rules redirect off-site", "link", "/old/a",
     {"rules": r"^/old/(.*)$ http://elsewhere.test/$1 [R=301]"},
     ("refused", "/old/a", "rules redirect off-site or to itself")),
    ("link: rules redirect loop", "link", "/a",
     {"rules": "^/a$ /b [R=301]\n^/b$ /a [R=301]"},
     ("refused", "/b", "too many rules redirects")),
    ("link: rules status", "link", "/admin", {"rules": "^/admin [R=403]"},
     ("refused", "/admin", "rules answer 403")),
    ("link: too long", "link", "/a?" + "x" * 11000, {},
     ("refused", "/a?" + "x" * 11000, "too long")),
    # --- a bot's claim to be its crawler (SPEC 3.4)
    ("bot: verified crawler's new path past the rate is queued first", "bot", "/a",
     {"claim": "verified", "new_lately": 5}, ("capture", "/a", PRIORITY_BOT, False, True)),
    ("bot: verified crawler is still held to max_pages", "bot", "/a",
     {"claim": "verified", "size": 10}, ("refused", "/a", "max_pages")),
    ("bot: unverified claimant is held to the rate", "bot", "/a",
     {"claim": "unverified", "new_lately": 5}, ("refused", "/a", "rate")),
    ("bot: unverified claimant within the rate renders, queued last", "bot", "/a",
     {"claim": "unverified"}, ("capture", "/a", PRIORITY_NEW, False, True)),
    ("bot: unverifiable family is judged unverified by default", "bot", "/a",
     {"claim": "unverifiable", "new_lately": 5}, ("refused", "/a", "rate")),
    ("bot: unverifiable family judged verified by the site", "bot", "/a",
     {"claim": "unverifiable", "new_lately": 5,
      "site": replace(SITE, unverifiable_bots="verified")},
     ("capture", "/a", PRIORITY_BOT, False, True)),
    ("bot: verification off is today's bound for all", "bot", "/a",
     {"claim": "verified", "new_lately": 5, "site": replace(SITE, verify_bots="off")},
     ("refused", "/a", "rate")),
    ("bot: strict site passes an unverified claimant through as a person", "bot", "/a",
     {"claim": "unverified", "snapshots": {"/a": snapshot("/a")},
      "site": replace(SITE, verify_bots="strict")}, ("person", "/a")),
    ("bot: strict site serves a verified crawler", "bot", "/a",
     {"claim": "verified", "snapshots": {"/a": snapshot("/a")},
      "site": replace(SITE, verify_bots="strict")}, ("serve", "/a", "fresh", False)),
    ("bot: strict site serves an _escaped_fragment_ request of a person", "bot", "/a",
     {"claim": "none", "snapshots": {"/a": snapshot("/a")},
      "site": replace(SITE, verify_bots="strict")}, ("serve", "/a", "fresh", False)),
]


@pytest.mark.parametrize(
    ("source", "path", "given", "expected"),
    [r[1:] for r in ROWS],
    ids=[r[0] for r in ROWS],
)
def test_admission(source, path, given, expected) -> None:
    decision, _asked = run(path, source=source, **given)
    assert brief(decision) == expected


def test_a_bot_asks_only_what_it_needs() -> None:
    _, asked = run("/a", source="bot", snapshots={"/a": snapshot("/a")})
    assert asked == [Stored("/a")]
    _, asked = run("/a", source="bot", records={"/a": record("/a", "pending")})
    assert asked == [Stored("/a"), Known("/a")]  # a known path is not counted


def test_a_hit_never_asks_for_the_claim_unless_the_site_is_strict() -> None:
    _, asked = run("/a", source="bot", snapshots={"/a": snapshot("/a")}, claim="verified")
    assert asked == [Stored("/a")]
    _, asked = run("/a", source="bot", claim="verified")
    assert asked == [Stored("/a"), Known("/a"), Size(), Claim()]
    strict = replace(SITE, verify_bots="strict")
    _, asked = run("/a", source="bot", site=strict, snapshots={"/a": snapshot("/a")},
                   claim="verified")
    assert asked == [Claim(), Stored("/a")]


def test_a_trusted_crawlers_new_path_on_a_paused_site_is_queued_not_rendered() -> None:
    decision, _ = run("/a", source="bot", claim="verified", paused=True)
    assert (decision.kind, decision.reason, decision.queue, decision.priority) == (
        "refused", "paused", True, PRIORITY_BOT
    )
    decision, _ = run("/a", source="bot", claim="unverified", paused=True)
    assert (decision.kind, decision.queue) == ("refused", False)


def test_the_crawler_never_asks_for_a_snapshot_and_the_api_asks_nothing() -> None:
    _, asked = run("/a", source="link")
    assert asked == [RobotsAllow("/a"), Known("/a"), Size()]
    _, asked = run("/a", source="api")
    assert asked == []


def test_due() -> None:
    assert is_due(None, NOW) and is_due(NOW, NOW) and not is_due(NOW + 1, NOW)


class _Facts:
    def __init__(self) -> None:
        self.asked: list[str] = []

    async def captured(self, path: str) -> bool:
        self.asked.append(path)
        return path == "/p/a"

    async def record(self, path: str) -> PathRecord | None:
        return None

    async def snapshot(self, path: str) -> Snapshot | None:
        return None

    async def size(self) -> int:
        return 0

    async def new_lately(self) -> int:
        return 0

    def robots_allow(self, path: str) -> bool:
        return True

    async def claim(self) -> str:
        return "none"


async def test_the_driver_answers_from_facts() -> None:
    facts = _Facts()
    gen = decide(SITE, parse_rules(r"^/p/(.*)$ /q/$1 [NF]"), "/p/a", source="bot", now=NOW)
    decision = await admit(gen, facts)
    assert facts.asked == ["/p/a"]
    assert brief(decision) == ("capture", "/p/a", PRIORITY_NEW, False, True)


@pytest.mark.parametrize(
    ("max_to_process", "processed", "limits", "full"),
    [(-1, 10**9, False, False), (0, 0, True, True), (5, 4, True, False), (5, 5, True, True)],
)
def test_when_a_site_is_full_of_processed_pages(max_to_process, processed, limits, full):
    site = replace(SITE, max_to_process=max_to_process)
    assert path_policy.limits_processing(site) is limits
    assert path_policy.full(site, processed) is full


@pytest.mark.parametrize(("paths", "at_max"), [(9, False), (10, True), (11, True)])
def test_when_a_site_has_all_the_paths_it_may_have(paths, at_max):
    assert path_policy.at_max_pages(SITE, paths) is at_max
