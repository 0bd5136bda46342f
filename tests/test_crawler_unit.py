"""Crawler decisions that need no browser: which site path a URL is, seeds, lease owners."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys

import pytest

from snapshotd.capture.service import CaptureService, retry_delay
from snapshotd.cli.crawl import _crawl_seeds
from snapshotd.config.settings import Settings, SiteSettings
from snapshotd.crawl.engine import Crawler, _owner_is_dead_here
from snapshotd.crawlers.devices import PROFILE_NAMES
from snapshotd.rewrite import RuleSet
from snapshotd.sites import path_policy
from snapshotd.sites.registry import SiteRegistry
from snapshotd.store.outcome import CaptureOutcome

SITE = SiteSettings(name="s", origin="http://127.0.0.1:3000", hosts=("shop.example.com",))
OTHER = SiteSettings(name="o", origin="https://other.example.org")
SETTINGS = Settings(sites=(SITE, OTHER))


async def _crawler(settings, store, renderer=None):  # type: ignore[no-untyped-def]
    """A crawler on ``store`` for site "s", rules empty, as it stands after its start."""
    capture = CaptureService(settings, store, renderer)
    crawler = Crawler(SiteRegistry(settings, store, rules={"s": RuleSet.empty()}), store, capture)
    crawler.frontier.size["s"] = await store.site_size("s")
    return crawler


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("/a", "/a"),
        ("http://127.0.0.1:3000/x?y=1#frag", "/x?y=1"),
        ("https://shop.example.com/z#!/q", "/z#!/q"),  # the site's public host
        ("http://127.0.0.1:3000/?_escaped_fragment_=/faq", "/#!/faq"),
        ("/p?_escaped_fragment_=", "/p"),
        ("/?a=1&_escaped_fragment_=key%3Dvalue", "/?a=1#!key=value"),
        ("/x?utm_source=n&y=1&fbclid=2#!/q", "/x?y=1#!/q"),  # tracking parameters dropped
        ("/?_escaped_fragment_=/faq&gclid=1", "/#!/faq"),
        ("http://127.0.0.1:3001/x", None),  # another port is another origin
        ("https://127.0.0.1:3000/x", None),
        ("https://other.example.org/x", None),
        ("/bad%zz", None),
        ("mailto:a@b.c", None),
    ],
)
def test_site_path(url, path):
    assert path_policy.path_of(SITE, url) == path


def test_crawl_seeds():
    assert _crawl_seeds(SETTINGS, None) is None  # each site its own seeds
    assert _crawl_seeds(SETTINGS, ["/x", "https://other.example.org/y", "http://nowhere/z"]) == {
        "s": ["/x"],
        "o": ["/x", "https://other.example.org/y"],
    }


def test_owner_is_dead_here():
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    host = socket.gethostname()
    assert _owner_is_dead_here(f"{host}:{gone.pid}:1")
    assert not _owner_is_dead_here(f"{host}:{os.getpid()}:1")  # this process
    assert not _owner_is_dead_here(f"{host}:{os.getppid()}:1")  # alive
    assert not _owner_is_dead_here(f"elsewhere.example:{gone.pid}:1")  # cannot tell
    assert not _owner_is_dead_here("garbage")


async def test_ignored_links_count_against_max_pages(store):
    site = SiteSettings(name="s", origin="http://127.0.0.1:3000", ignore=("/cart",), max_pages=3)
    settings = Settings(sites=(site,))
    crawler = await _crawler(settings, store)
    assert await crawler.frontier.admit(site, "/a", hops=0, priority=1, source="seed") == "queued"
    outcomes = [
        await crawler.frontier.admit(site, f"/cart?item={i}", hops=1, priority=1, source="link")
        for i in range(10)
    ]
    assert outcomes[:2] == ["ignored", "ignored"]
    assert set(outcomes[2:]) == {"skipped"}
    assert await store.site_size("s") == 3


async def test_x_robots_tag_none_stops_links_like_the_meta_tag(store):
    from snapshotd.render.renderer import CaptureResult

    site = SiteSettings(name="s", origin="http://127.0.0.1:3000")
    settings = Settings(sites=(site,))
    crawler = await _crawler(settings, store)
    await crawler.frontier.admit(site, "/page", hops=0, priority=1, source="seed")
    record = await store.get_path("s", "/page")
    html = '<a href="/linked">x</a><link rel="next" href="/next">'
    for value in ("none", "noindex, nofollow", "snapshotd: NONE"):
        result = CaptureResult(
            url="http://127.0.0.1:3000/page",
            final_url="http://127.0.0.1:3000/page",
            headers={"X-Robots-Tag": value},
            html=html,
        )
        await crawler.follower.follow(site, record, result, None)
        assert await store.site_size("s") == 1, value
    # Without the header the links are followed.
    result = CaptureResult(url="", final_url="http://127.0.0.1:3000/page", html=html)
    await crawler.follower.follow(site, record, result, None)
    assert await store.get_path("s", "/linked") is not None


def test_failed_captures_back_off_then_wait_for_expiry():
    week = 7 * 86400.0
    assert [retry_delay(n, week) for n in range(1, 7)] == [60, 120, 240, 480, week, week]
    assert [retry_delay(n, 150.0) for n in range(1, 6)] == [60, 120, 150, 150, 150]


async def test_links_of_a_capture_stored_before_a_crash_are_followed_at_start(store):
    from snapshotd.render.renderer import CaptureResult

    # It counts renders: none to learn a not-found view (tests/test_soft404_*).
    site = SiteSettings(name="s", origin="http://127.0.0.1:3000", soft_404="off")
    settings = Settings(sites=(site,))
    renders: list[str] = []

    class Renderer:
        async def capture(
            self, url: str, site: SiteSettings, profile: str = "desktop"
        ) -> CaptureResult:
            renders.append(url)
            html = '<a href="/linked">x</a><link rel="next" href="/next">'
            return CaptureResult(url=url, final_url=url, html=html)

    first = await _crawler(settings, store, Renderer())

    async def dies(*_args: object) -> None:
        raise RuntimeError("the worker died here")

    first.follower.follow = dies  # type: ignore[method-assign]
    await store.enqueue("s", "/page", 1)
    record = await store.claim_path("s", "/page", first.capture.owner, 60)
    await first._capture(site, record)
    assert first.stats.errors == 1  # "capture crashed", one log line
    assert (await store.get_path("s", "/page")).state == "processed"
    assert [p for _i, p in await store.links_due("s", captured_before=9e9)] == ["/page"]

    crawler = await _crawler(settings, store, Renderer())
    await crawler.follower.follow_due_links(site)
    assert await store.links_due("s", captured_before=9e9) == []
    for path in ("/linked", "/next"):
        linked = await store.get_path("s", path)
        assert (linked.state, linked.hops) == ("pending", 1), path
    # Followed from the stored snapshot: only the one capture rendered it (each profile once).
    assert renders == ["http://127.0.0.1:3000/page"] * len(PROFILE_NAMES)


async def test_links_followed_after_a_capture_are_not_due(store):
    from snapshotd.render.renderer import CaptureResult

    site = SiteSettings(name="s", origin="http://127.0.0.1:3000")
    settings = Settings(sites=(site,))

    class Renderer:
        async def capture(
            self, url: str, site: SiteSettings, profile: str = "desktop"
        ) -> CaptureResult:
            return CaptureResult(url=url, final_url=url, html='<a href="/linked">x</a>')

    crawler = await _crawler(settings, store, Renderer())
    capture = crawler.capture
    await store.enqueue("s", "/page", 1)
    record = await store.claim_path("s", "/page", capture.owner, 60)
    await crawler._capture(site, record)
    assert await store.links_due("s", captured_before=9e9) == []
    assert (await store.get_path("s", "/linked")).state == "pending"


async def _stored(store, path: str, html: str, *, duplicate_of: str | None = None) -> None:
    await store.enqueue("s", path, 1)
    await store.claim_path("s", path, "dead", 60)
    await store.complete(
        "s", path, "dead", CaptureOutcome(html=html, status=200, headers={},
            final_url=f"http://127.0.0.1:3000{path}", expires_at=9e9, links_due=True,
            duplicate_of=duplicate_of),
    )


async def test_a_stored_page_that_cannot_be_followed_does_not_stop_the_start(store, caplog):
    site = SiteSettings(name="s", origin="http://127.0.0.1:3000")
    settings = Settings(sites=(site,))
    crawler = await _crawler(settings, store)
    await _stored(store, "/bad", '<a href="/from-bad">x</a>')
    await _stored(store, "/good", '<a href="/from-good">x</a>')
    follow = crawler.follower.follow

    async def fails_for_bad(site, record, result, duplicate_of, others):  # type: ignore[no-untyped-def]
        if record.path == "/bad":
            raise OSError("disk I/O error")
        await follow(site, record, result, duplicate_of, others)

    crawler.follower.follow = fails_for_bad  # type: ignore[method-assign]
    await crawler.follower.follow_due_links(site)
    assert (await store.get_path("s", "/from-good")).state == "pending"
    assert await store.get_path("s", "/from-bad") is None
    # Still due, for the next start; the failure is one log line.
    assert [p for _i, p in await store.links_due("s", captured_before=9e9)] == ["/bad"]
    assert "could not follow stored links site=s path=/bad: disk I/O error" in caplog.text


async def test_a_canonical_copy_cut_short_queues_its_canonical_at_start(store):
    site = SiteSettings(name="s", origin="http://127.0.0.1:3000")
    settings = Settings(sites=(site,))
    crawler = await _crawler(settings, store)
    # Marked a copy of its canonical, then the process died before queueing the canonical.
    html = '<link rel="canonical" href="/main"><a href="/other">x</a>'
    await _stored(store, "/copy", html, duplicate_of="/main")
    # A copy by content has nothing to follow.
    await _stored(store, "/same", '<a href="/from-same">x</a>', duplicate_of="/copy")
    await crawler.follower.follow_due_links(site)
    assert (await store.get_path("s", "/main")).state == "pending"
    # A copy by its canonical link has its own links followed too.
    assert (await store.get_path("s", "/other")).state == "pending"
    assert await store.get_path("s", "/from-same") is None
    assert (await store.get_path("s", "/copy")).duplicate_of == "/main"
    assert await store.links_due("s", captured_before=9e9) == []


async def test_a_page_whose_canonical_is_elsewhere_has_its_other_links_followed(store):
    from snapshotd.render.renderer import CaptureResult

    site = SiteSettings(name="s", origin="http://127.0.0.1:3000")
    settings = Settings(sites=(site,))

    class Renderer:
        async def capture(
            self, url: str, site: SiteSettings, profile: str = "desktop"
        ) -> CaptureResult:
            html = '<link rel="canonical" href="/main"><a href="/only-here">x</a>'
            return CaptureResult(url=url, final_url=url, html=html)

    crawler = await _crawler(settings, store, Renderer())
    await store.enqueue("s", "/copy", 1)
    record = await store.claim_path("s", "/copy", crawler.capture.owner, 60)
    await crawler._capture(site, record)
    assert (await store.get_path("s", "/copy")).duplicate_of == "/main"
    main = await store.get_path("s", "/main")
    assert main.state == "pending" and main.hops == 0  # the same page: the same depth
    only_here = await store.get_path("s", "/only-here")
    assert only_here is not None and only_here.state == "pending" and only_here.hops == 1


async def test_a_copy_by_content_follows_none_of_its_own_links(store):
    """SPEC 5: a page that shows a reader the page another path shows (5.2) is that page's
    copy, and what only its own markup links to is not followed; a canonical copy's is."""
    from snapshotd.render.renderer import CaptureResult

    site = SiteSettings(name="s", origin="http://127.0.0.1:3000")
    settings = Settings(sites=(site,))
    text = " ".join(f"word{n}" for n in range(20))

    class Renderer:
        async def capture(
            self, url: str, site: SiteSettings, profile: str = "desktop"
        ) -> CaptureResult:
            nav = url.rsplit("/", 1)[-1]  # each page's own navigation links elsewhere
            html = f'<nav><a href="/nav-{nav}">x</a></nav><main><p>{text}</p></main>'
            return CaptureResult(url=url, final_url=url, html=html)

    crawler = await _crawler(settings, store, Renderer())
    for path in ("/first", "/second"):
        await store.enqueue("s", path, 1)
        record = await store.claim_path("s", path, crawler.capture.owner, 60)
        await crawler._capture(site, record)
    assert (await store.get_path("s", "/second")).duplicate_of == "/first"
    assert (await store.get_path("s", "/nav-first")).state == "pending"
    assert await store.get_path("s", "/nav-second") is None


def test_links_of_a_proxy_miss_are_followed_by_the_crawler_of_its_process(tmp_path):
    """A capture made for a bot's miss is handed to the crawler running in the same process,
    which queues its links and clears the capture's mark."""
    import sqlite3
    import time

    import httpx
    from starlette.applications import Starlette
    from starlette.responses import HTMLResponse
    from starlette.routing import Route

    from snapshotd.render.renderer import CaptureResult
    from snapshotd.server.app import create_app
    from tests.servers import serve_asgi

    class Renderer:
        async def start(self) -> None: ...

        async def close(self) -> None: ...

        async def capture(
            self, url: str, site: SiteSettings, profile: str = "desktop"
        ) -> CaptureResult:
            html = '<a href="/linked">x</a>' if url.endswith("/page") else "<p>leaf</p>"
            return CaptureResult(url=url, final_url=url, html=html)

    async def page(request):  # type: ignore[no-untyped-def]
        return HTMLResponse("<p>the app</p>")

    origin_app = Starlette(routes=[Route("/{path:path}", page)])
    db = str(tmp_path / "miss.db")

    def rows() -> dict[str, tuple]:
        conn = sqlite3.connect(db)
        try:
            query = "SELECT path, state, hops, links_due FROM paths"
            return {r[0]: r[1:] for r in conn.execute(query)}
        finally:
            conn.close()

    with serve_asgi(origin_app) as origin:
        site = SiteSettings(name="s", origin=origin, seeds=(), obey_robots=False)
        settings = Settings(db=db, miss_wait=10.0, sites=(site,))
        app = create_app(settings, renderer=Renderer(), crawler=True)  # type: ignore[arg-type]
        with serve_asgi(app) as base:
            bot = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
            reply = httpx.get(f"{base}/page", headers={"User-Agent": bot}, trust_env=False)
            assert reply.headers["x-snapshotd-cache"] == "MISS"
            assert '<a href="/linked">' in reply.text
            deadline = time.monotonic() + 30
            while "/linked" not in rows() and time.monotonic() < deadline:
                time.sleep(0.05)
            found = rows()
    assert found["/linked"][1] == 1, found  # one hop from the page the bot asked for
    assert found["/page"][2] == 0, found  # its links followed: no longer marked


async def test_a_capture_is_stored_and_followed_even_when_learning_from_it_fails(store, caplog):
    from snapshotd.render.renderer import CaptureResult

    site = SiteSettings(name="s", origin="http://127.0.0.1:3000")
    settings = Settings(sites=(site,))
    words = " ".join(f"word{i}" for i in range(40))

    class Renderer:
        async def capture(
            self, url: str, site: SiteSettings, profile: str = "desktop"
        ) -> CaptureResult:
            html = f'<main><p>{words}</p><a href="/linked">x</a></main>'
            return CaptureResult(url=url, final_url=url, html=html)

    crawler = await _crawler(settings, store, Renderer())

    async def store_down(*_args: object) -> None:
        raise OSError("the store went away")

    crawler.capture.learner.rendered = store_down  # type: ignore[method-assign]
    await store.enqueue("s", "/page?ref=nav", 1)
    record = await store.claim_path("s", "/page?ref=nav", crawler.capture.owner, 60)
    await crawler._capture(site, record)
    assert crawler.stats.errors == 0 and crawler.stats.captured == 1
    assert (await store.get_path("s", "/page?ref=nav")).state == "processed"
    assert (await store.get_path("s", "/linked")).state == "pending"
    assert "could not learn from site=s path=/page?ref=nav: the store went away" in caplog.text


async def test_a_capture_is_counted_before_the_store_shows_it(store) -> None:  # type: ignore[no-untyped-def]
    """A job's report reads the paths first, then flushes the captures counted and reads them:
    a page the paths show processed must be counted by then. So a capture is counted before
    its store commits, and taken back when the store fails."""
    from snapshotd.render.renderer import CaptureResult

    site = SiteSettings(name="s", origin="http://127.0.0.1:3000")

    class Renderer:
        async def capture(
            self, url: str, site: SiteSettings, profile: str = "desktop"
        ) -> CaptureResult:
            return CaptureResult(url=url, final_url=url, html="<main><p>a page</p></main>")

    crawler = await _crawler(Settings(sites=(site,)), store, Renderer())
    minutes = crawler.capture.metrics.minutes
    complete = store.complete
    counted_when_stored: list[int] = []

    def captures() -> int:
        return sum(n for (_, _, name), n in minutes._counts.items() if name == "capture:ok")

    async def completing(*args: object, **kwargs: object) -> bool:
        stored = await complete(*args, **kwargs)
        counted_when_stored.append(captures())  # the commit is visible to readers now
        return stored

    store.complete = completing
    await store.enqueue("s", "/page", 1)
    record = await store.claim_path("s", "/page", crawler.capture.owner, 60)
    await crawler._capture(site, record)
    assert counted_when_stored == [1] and captures() == 1

    async def failing(*args: object, **kwargs: object) -> bool:
        raise OSError("the disk is full")

    store.complete = failing
    await store.enqueue("s", "/other", 1)
    record = await store.claim_path("s", "/other", crawler.capture.owner, 60)
    with contextlib.suppress(OSError):
        await crawler._capture(site, record)
    assert captures() == 1


async def test_a_stored_capture_is_counted_before_anything_else_is_awaited(store) -> None:  # type: ignore[no-untyped-def]
    """A job's report reads the store's paths and the captures counted: a capture stored and
    not counted yet would show more pages processed than crawled."""
    from snapshotd.render.renderer import CaptureResult

    site = SiteSettings(name="s", origin="http://127.0.0.1:3000")
    words = " ".join(f"word{i}" for i in range(40))

    class Renderer:
        async def capture(
            self, url: str, site: SiteSettings, profile: str = "desktop"
        ) -> CaptureResult:
            return CaptureResult(url=url, final_url=url, html=f"<main><p>{words}</p></main>")

    crawler = await _crawler(Settings(sites=(site,)), store, Renderer())
    counted_then: list[dict[tuple[int, str, str], int]] = []
    learn = crawler.capture.learner.rendered

    async def learning(*args: object) -> None:
        counted_then.append(dict(crawler.capture.metrics.minutes._counts))
        await learn(*args)  # type: ignore[arg-type]

    crawler.capture.learner.rendered = learning  # type: ignore[method-assign]
    await store.enqueue("s", "/page", 1)
    record = await store.claim_path("s", "/page", crawler.capture.owner, 60)
    await crawler._capture(site, record)
    assert (await store.get_path("s", "/page")).state == "processed"
    assert [name for (_, _, name) in counted_then[0] if name.startswith("capture:")] == [
        "capture:ok"]
