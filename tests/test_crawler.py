"""The crawler against a real site on loopback, rendered by real Chromium.

The site (tests/sites/shop.py) counts every document request, so each test proves what was
fetched and how often as well as what the store ends with.
"""

from __future__ import annotations

import asyncio
import io
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from snapshotd.capture.service import CaptureService, retry_delay
from snapshotd.cli.crawl import run_crawl
from snapshotd.config.settings import BrowserSettings, Settings, SiteSettings
from snapshotd.crawl.engine import Crawler
from snapshotd.render import BrowserPool
from snapshotd.sites.registry import SiteRegistry
from snapshotd.store import open_store
from snapshotd.store.sqlite import SQLiteStore
from tests.chromium import require_chromium
from tests.conftest import drop_postgres_schema, postgres_schema
from tests.servers import serve_asgi
from tests.sites.shop import RULES, Shop

pytestmark = pytest.mark.browser


def browser(concurrency: int = 2) -> BrowserSettings:
    return BrowserSettings(
        concurrency=concurrency,
        executable=require_chromium(),
        javascript_timeout=0.2,
        render_timeout=60.0,
        block_resources=(),
    )


@pytest.fixture
def shop() -> Iterator[tuple[Shop, str]]:
    site = Shop()
    with serve_asgi(site.app) as origin:
        yield site, origin


async def records(db: str) -> dict[tuple[str, str], object]:
    store = open_store(db)
    await store.open()
    try:
        return {(r.site, r.path): r async for r in store.iter_paths()}
    finally:
        await store.close()


# Every path the full crawl must know, with (state, status, priority, hops, duplicate_of).
EXPECTED = {
    "/bot-asked": ("processed", 200, 3, 0, None),
    "/api-asked": ("processed", 200, 2, 0, None),
    "/": ("processed", 200, 1, 0, None),
    "/from-sitemap-1": ("processed", 200, 1, 0, None),
    "/from-sitemap-2": ("processed", 200, 1, 0, None),
    "/a": ("processed", 200, 1, 0, None),  # in the sitemap too: hops 0
    "/a/1": ("processed", 200, 1, 1, None),
    "/a/2": ("processed", 200, 1, 1, None),
    "/a/3": ("processed", 200, 1, 1, None),
    "/deep/1": ("processed", 200, 1, 2, None),
    "/deep/2": ("processed", 200, 1, 3, None),
    "/deep/3": ("processed", 200, 1, 4, None),
    "/deep/4": ("processed", 200, 1, 5, None),
    "/b": ("processed", 200, 1, 1, None),
    "/b/1": ("processed", 200, 1, 2, None),
    "/b/2": ("processed", 200, 1, 2, None),
    "/spa#!/one": ("processed", 200, 1, 1, None),
    "/spa#!/two": ("processed", 200, 1, 3, None),
    "/moved": ("processed", 301, 1, 1, None),
    "/target": ("processed", 200, 1, 1, None),  # the redirect's target: same depth
    "/missing": ("processed", 404, 1, 1, None),
    "/broken": ("error", 500, 1, 1, None),
    "/dup-1": ("processed", 200, 1, 1, None),
    "/dup-2": ("processed", 200, 1, 2, "/dup-1"),
    "/from-dup": ("processed", 200, 1, 2, None),
    "/canon-copy": ("processed", 200, 1, 1, "/canon-main"),
    "/canon-main": ("processed", 200, 1, 1, None),
    "/from-copy": ("processed", 200, 1, 2, None),  # a canonical copy's links are followed
    "/nofollow": ("processed", 200, 1, 1, None),
    "/admin/keep": ("processed", 200, 1, 1, None),  # ignored fragment, but a C rule
    "/admin/panel": ("ignored", None, 0, 1, None),
    "/new/page": ("processed", 200, 1, 1, None),  # /old/page through the rules' 301
}
NEVER_FETCHED = [
    "/from-404",
    "/nf-meta",
    "/nf-link",
    "/private/secret",
    "/private/in-sitemap",
    "/admin/panel",
    "/old/page",
    "/gone",
    "/a?utm_source=news",
]


def shop_site(origin: str, **kw: object) -> SiteSettings:
    values: dict[str, object] = dict(
        name="shop",
        origin=origin,
        rules=str(RULES),
        seeds=("/",),
        sitemaps=("/sitemap_index.xml.gz",),
        ignore=("/admin/",),
        devices="mobile",  # one render a capture: these tests count the origin's documents
        soft_404="off",  # and no render to learn a not-found view (tests/test_soft404_*)
    )
    values.update(kw)
    return SiteSettings(**values)  # type: ignore[arg-type]


async def test_full_crawl_ends_with_exactly_the_expected_states(shop, tmp_path):
    site, origin = shop
    db = str(tmp_path / "crawl.db")
    async with SQLiteStore(db) as store:  # asked for before the crawl: they go first
        await store.enqueue("shop", "/bot-asked", 3)
        await store.enqueue("shop", "/api-asked", 2)
    settings = Settings(db=db, browser=browser(), sites=(shop_site(origin),))
    out, progress = io.StringIO(), io.StringIO()
    started = time.time()

    status = await run_crawl(settings, out=out, progress=progress, tty=False)
    ended = time.time()

    assert status == 0
    got = await records(db)
    assert {path for _site, path in got} == set(EXPECTED)
    for path, (state, code, priority, hops, duplicate_of) in EXPECTED.items():
        r = got[("shop", path)]
        assert (r.state, r.status, r.priority, r.hops, r.duplicate_of) == (
            state,
            code,
            priority,
            hops,
            duplicate_of,
        ), path
    broken = got[("shop", "/broken")]
    assert broken.error == "http 500"
    # Retried one backoff after its failure, which came during the crawl.
    delay = retry_delay(1, 7 * 86400)
    assert started + delay <= broken.expires_at <= ended + delay, (started, ended, broken)

    hits = site.counts()
    for path, (state, *_rest) in EXPECTED.items():
        if state != "ignored" and not path.startswith("/spa") and path != "/target":
            assert hits[path] == 1, path
    # Chromium may already be following /moved's 301 when the renderer stops it there.
    assert hits["/target"] in (1, 2)
    assert hits["/spa"] == 2  # /spa#!/one and /spa#!/two, one document request each
    assert not [p for p in NEVER_FETCHED if hits[p]]
    assert set(hits) <= set(EXPECTED) | {"/spa"}
    # Priorities 3 and 2 are claimed before the seed (1); the seed may start as soon as one
    # of them is done, but nothing found by a link can be fetched before both have started.
    order = [path for path, _ in site.hits]
    first_link = next(i for i, p in enumerate(order) if p not in {"/", "/bot-asked", "/api-asked"})
    assert {"/bot-asked", "/api-asked"} <= set(order[:first_link])
    assert site.other == {"robots.txt": 1, "sitemap": 3}

    summary = dict(line.split(None, 1) for line in out.getvalue().splitlines())
    assert summary["captured"] == "30"
    assert summary["duplicates"] == "2"
    assert summary["errors"] == "1"
    assert summary["ignored"] == "1"
    assert summary["time"].endswith("pages/s)")
    assert "crawled 31/31 pages" in progress.getvalue()

    # A second crawl finds everything fresh: nothing is fetched again, and it still succeeds.
    before = len(site.hits)
    assert await run_crawl(settings, out=io.StringIO(), progress=io.StringIO(), tty=False) == 0
    assert len(site.hits) == before


async def test_a_crawl_on_postgresql_ends_with_the_same_states(shop, tmp_path):
    site, origin = shop
    name, db = await postgres_schema()
    try:
        settings = Settings(db=db, browser=browser(), sites=(shop_site(origin),))
        status = await run_crawl(settings, out=io.StringIO(), progress=io.StringIO(), tty=False)
        assert status == 0
        got = await records(db)
        expected = {p: v for p, v in EXPECTED.items() if not p.endswith("-asked")}
        assert {path for _site, path in got} == set(expected)
        for path, (state, code, _priority, hops, duplicate_of) in expected.items():
            r = got[("shop", path)]
            assert (r.state, r.status, r.hops, r.duplicate_of) == (
                state, code, hops, duplicate_of
            ), path
        store = open_store(db)
        await store.open()
        try:
            snapshot = await store.get_snapshot("shop", "/a/1")
        finally:
            await store.close()
        assert snapshot is not None and "<html" in snapshot.html
    finally:
        await drop_postgres_schema(name)


async def test_hops_pages_delay_and_switches_per_site(shop, tmp_path):
    site, origin = shop
    slow = Shop()
    with serve_asgi(slow.app) as slow_origin:
        sites = (
            SiteSettings(name="hops", origin=origin, seeds=("/b",), max_hops=1),
            SiteSettings(name="fixed", origin=origin, seeds=("/b/2",), capture_new=False),
            SiteSettings(name="nolinks", origin=origin, seeds=("/a/2",), crawl_links=False),
            SiteSettings(name="canon", origin=origin, seeds=("/canon-copy",), use_canonical=False),
            SiteSettings(  # one render a capture: its documents' times are its captures'
                name="paced", origin=slow_origin, seeds=("/a",), max_pages=3, crawl_delay=0.4,
                devices="mobile", soft_404="off",
            ),
        )
        db = str(tmp_path / "sites.db")
        settings = Settings(db=db, browser=browser(), sites=sites)
        bar = io.StringIO()
        assert await run_crawl(settings, out=io.StringIO(), progress=bar, tty=True) == 0
    assert "crawling" in bar.getvalue() and "pages/s" in bar.getvalue()  # the rich bar

    got = await records(db)
    by_site: dict[str, dict[str, str]] = {}
    for (name, path), r in got.items():
        by_site.setdefault(name, {})[path] = r.state
    assert by_site["hops"] == {"/b": "processed", "/b/1": "processed", "/b/2": "processed"}
    assert by_site["fixed"] == {"/b/2": "processed"}
    assert by_site["nolinks"] == {"/a/2": "processed"}
    assert by_site["canon"] == {
        "/canon-copy": "processed",
        "/canon-main": "processed",
        "/from-copy": "processed",
    }
    assert got[("canon", "/canon-copy")].duplicate_of is None
    assert by_site["paced"] == {"/a": "processed", "/a/1": "processed", "/a/2": "processed"}

    # crawl_delay: one capture of the site at a time, each 0.4 s after the previous one.
    times = [t for _path, t in slow.hits]
    assert len(times) == 3
    assert all(b - a >= 0.4 for a, b in zip(times, times[1:], strict=False)), times


async def test_worker_mode_recaptures_expired_and_takes_over_dead_leases(shop, tmp_path):
    site, origin = shop
    db = str(tmp_path / "serve.db")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    store = SQLiteStore(db)
    await store.open()
    # A worker on this host that died mid-capture, with a long lease left.
    await store.enqueue("fresh", "/deep/3", 1)
    await store.claim_path("fresh", "/deep/3", f"{socket.gethostname()}:{gone.pid}:1", 3600)
    # A worker elsewhere whose lease runs out soon.
    await store.enqueue("fresh", "/deep/2", 1)
    await store.claim_path("fresh", "/deep/2", "elsewhere:1:1", 0.5)

    # One render a capture, and none to learn a not-found view: the origin's documents count
    # the captures.
    sites = (
        SiteSettings(
            name="fresh", origin=origin, seeds=("/deep/4",), expire_after=1.0, devices="mobile",
            soft_404="off",
        ),
        SiteSettings(
            devices="mobile",
            soft_404="off",
            name="frozen",
            origin=origin,
            seeds=("/a/3",),
            expire_after=1.0,
            capture_expired=False,
            crawl_links=False,
        ),
    )
    settings = Settings(db=db, browser=browser(), sites=sites)
    pool = BrowserPool(settings.browser)
    await pool.start()
    capture = CaptureService(settings, store, pool, reclaim_every=0.2)
    await capture.start()
    crawler = Crawler(SiteRegistry(settings, store), store, capture, maintenance_every=0.2)
    await crawler.start()
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            record = await store.get_path("fresh", "/deep/4")
            if site.counts()["/deep/4"] >= 2 and record.state == "processed":
                break
            await asyncio.sleep(0.1)
        assert site.counts()["/deep/4"] >= 2
        assert record.priority == 0  # came back as expired
        for path in ("/deep/3", "/deep/2"):
            assert (await store.get_path("fresh", path)).captured_at is not None, path
        # capture_expired = false: expired, never requeued.
        assert site.counts()["/a/3"] == 1
        assert (await store.get_path("frozen", "/a/3")).state == "processed"
    finally:
        await capture.close()
        await crawler.stop()
        await pool.close()
        await store.close()
    assert not any(r.state == "processing" for r in (await records(db)).values())


async def test_a_worker_storing_what_it_rendered_leaves_the_render_slot_to_the_next_path(
    shop, tmp_path
):
    """One render slot: while the worker that rendered a page stores it, the next path is
    already being rendered, so the slot does not wait on the store."""
    site, origin = shop
    settings = Settings(
        db=str(tmp_path / "s.db"), browser=browser(concurrency=1),
        sites=(shop_site(origin, seeds=("/a/1", "/a/2"), sitemaps=(), crawl_links=False),),
    )
    store = SQLiteStore(settings.db)
    await store.open()
    storing_first = asyncio.Event()
    fetched_meanwhile: list[str] = []
    complete = store.complete

    async def complete_after_the_next_render_began(*args, **kwargs):  # type: ignore[no-untyped-def]
        if not storing_first.is_set():
            storing_first.set()
            before = set(site.counts())
            for _ in range(300):  # a bound only against a hang
                if new := sorted(set(site.counts()) - before):
                    fetched_meanwhile.extend(new)
                    break
                await asyncio.sleep(0.05)
        return await complete(*args, **kwargs)

    store.complete = complete_after_the_next_render_began  # type: ignore[method-assign]
    pool = BrowserPool(settings.browser)
    await pool.start()
    try:
        capture = CaptureService(settings, store, pool)
        crawler = Crawler(SiteRegistry(settings, store), store, capture, once=True)
        await crawler.start()
        await asyncio.wait_for(crawler.finished.wait(), 60)
        await crawler.stop()
        assert storing_first.is_set()
        assert len(fetched_meanwhile) == 1 and fetched_meanwhile[0] in ("/a/1", "/a/2")
        assert crawler.stats.captured == 2
        assert site.counts() == {"/a/1": 1, "/a/2": 1}
    finally:
        await pool.close()
        await store.close()
