"""Crawl jobs' rounds, processing and custom headers (SPEC 7.2): rounds moved on by
``jobs.advance`` over real stores (both engines), and real crawls through the Crawlbot
endpoint (real Chromium, real SQLite, loopback origins)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.routing import Route

from snapshotd.capture.service import CaptureService
from snapshotd.config.settings import BrowserSettings, Settings, SiteSettings
from snapshotd.crawl.engine import Crawler
from snapshotd.crawl.job_json import describe_job
from snapshotd.crawl.rounds import DAY, advance, start_round
from snapshotd.server.app import create_app
from snapshotd.sites.registry import SiteRegistry
from snapshotd.store.interface import PRIORITY_LINK
from snapshotd.store.job_state import claim_notification, is_notified, job_state
from snapshotd.store.outcome import CaptureOutcome
from snapshotd.store.postgres import PostgresStore
from snapshotd.store.site_rows import POSTGRES_NOTIFIED_ROUNDS, SQLITE_NOTIFIED_ROUNDS
from snapshotd.store.sqlite import SQLiteStore
from tests.chromium import require_chromium
from tests.conftest import drop_postgres_schema, postgres_schema
from tests.servers import serve_asgi
from tests.sites.shop import Shop
from tests.test_cli import run
from tests.test_crawlbot import TOKEN, job, wait_status
from tests.test_crawler_process import crawl_db  # noqa: F401 (a fixture)

ORIGIN = "http://127.0.0.1:9"
BOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"


async def settle(store, site: str, path: str, outcome: str) -> None:  # type: ignore[no-untyped-def]
    """``path`` captured: ``processed``, ``crawled`` (its snapshot not kept) or ``error``."""
    await store.enqueue(site, path, PRIORITY_LINK)
    record = await store.claim_path(site, path, "me", 60)
    assert record is not None, path
    if outcome == "error":
        assert await store.fail(site, path, "me", error="timeout", retry_at=0)
        return
    assert await store.complete(
        site, path, "me", CaptureOutcome(html=f"<p>{path}</p>", status=200, headers={},
            final_url=ORIGIN + path, expires_at=store.test_clock() + 10 * DAY,
            keep=outcome == "processed"),
    )


async def states(store, site: str) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {r.path: r.state async for r in store.iter_paths(site)}


async def status(store, registry, site) -> tuple[int, str, int]:  # type: ignore[no-untyped-def]
    described = await describe_job(
        store, site, paused=registry.is_paused(site.name), created=registry.created[site.name],
        v3_url="http://127.0.0.1:8080/_snapshotd/v3",
    )
    return (described["jobStatus"]["status"], described["jobStatus"]["message"],
            described["roundsCompleted"])


async def test_rounds_repeat_on_schedule_until_max_rounds(store) -> None:  # type: ignore[no-untyped-def]
    site = SiteSettings(name="shop", origin=ORIGIN, seeds=("/",), repeat=1.0, max_rounds=2)
    registry = SiteRegistry(Settings(sites=(site,)), store)
    await registry.open()
    try:
        for path, outcome in (("/", "crawled"), ("/p", "processed"), ("/c", "crawled"),
                              ("/e", "error")):
            await settle(store, "shop", path, outcome)
        t0 = time.time()
        # The round is over: its end is recorded once, the next is 1 day away.
        assert await status(store, registry, site) == (
            4, "Next round to start in 86400 seconds", 1)
        assert not await advance(store, registry, site, now=t0)
        first = await job_state(store, "shop", 0)
        assert (first.rounds, first.ended) == (1, t0)
        assert not await advance(store, registry, site, now=t0 + DAY - 1)
        assert (await job_state(store, "shop", 0)) == first

        # A day later the second round starts: only what no round processed is rendered
        # again (only_process_if_new), the seed included.
        assert await advance(store, registry, site, now=t0 + DAY)
        assert await states(store, "shop") == {
            "/": "pending", "/p": "processed", "/c": "pending", "/e": "pending"}
        second = await job_state(store, "shop", 0)
        assert second.rounds == 1 and second.ended == 0 and second.started > first.started
        assert (await status(store, registry, site))[0] == 7

        for path in ("/", "/c", "/e"):
            assert await store.claim_path("shop", path, "me", 60)
            assert await store.complete(
                "shop", path, "me", CaptureOutcome(
                    html="<p>again</p>", status=200, headers={}, final_url=ORIGIN + path,
                    expires_at=store.test_clock() + DAY, keep=path != "/c"),
            )
        t1 = time.time()
        assert not await advance(store, registry, site, now=t1)
        assert await status(store, registry, site) == (1, "Job has reached maxRounds limit", 2)
        # No third round, however long it waits.
        assert not await advance(store, registry, site, now=t1 + 30 * DAY)
        assert (await job_state(store, "shop", 0)).rounds == 2

        # Paused: 6, and no round is moved on.
        await registry.set_paused("shop", True)
        assert (await status(store, registry, site))[0] == 6
        # Restarted: no path, no round completed; a round starts now.
        await registry.set_paused("shop", False)
        await registry.restart("shop")
        restarted = await job_state(store, "shop", 0)
        assert restarted.rounds == 0 and restarted.started >= t1
        assert await states(store, "shop") == {}
        assert (await status(store, registry, site))[:2] == (0, "Job is initializing")
    finally:
        await registry.close()


async def test_a_round_of_a_job_that_processes_again_renders_every_page(store) -> None:  # type: ignore[no-untyped-def]
    site = SiteSettings(name="shop", origin=ORIGIN, seeds=("/",), only_process_if_new=False)
    for path, outcome in (("/", "processed"), ("/p", "processed"), ("/c", "crawled")):
        await settle(store, "shop", path, outcome)
    await store.add_ignored("shop", "/admin", reason="ignore")
    state = await job_state(store, "shop", 0)
    assert await start_round(store, site, state) == 3
    assert await states(store, "shop") == {
        "/": "pending", "/p": "pending", "/c": "pending", "/admin": "ignored"}
    # A snapshot stays served while its page waits to be rendered again.
    assert (await store.get_snapshot("shop", "/p")).html == "<p>/p</p>"


async def test_the_seeds_are_recrawled_on_their_own_schedule(store) -> None:  # type: ignore[no-untyped-def]
    site = SiteSettings(name="shop", origin=ORIGIN, seeds=("/", ORIGIN + "/new"),
                        seed_recrawl_frequency=2.0)
    registry = SiteRegistry(Settings(sites=(site,)), store)
    await registry.open()
    try:
        for path in ("/", "/new", "/p"):
            await settle(store, "shop", path, "processed")
        started = (await job_state(store, "shop", registry.created["shop"])).started
        await advance(store, registry, site, now=started + 1)  # records the round's end
        assert not await advance(store, registry, site, now=started + 2 * DAY - 1)
        assert await advance(store, registry, site, now=started + 2 * DAY)
        assert await states(store, "shop") == {"/": "pending", "/new": "pending",
                                               "/p": "processed"}
        # The next time is counted from then.
        assert not await advance(store, registry, site, now=started + 3 * DAY)
    finally:
        await registry.close()


async def test_a_crawled_page_keeps_no_snapshot_and_expires_like_a_processed_one(store) -> None:  # type: ignore[no-untyped-def]
    await settle(store, "shop", "/c", "processed")
    assert await store.get_snapshot("shop", "/c") is not None
    await store.enqueue("shop", "/c", PRIORITY_LINK, force=True)
    await store.claim_path("shop", "/c", "me", 60)
    assert await store.complete(
        "shop", "/c", "me", CaptureOutcome(
            html="<p>list</p>", status=200, headers={}, final_url=ORIGIN + "/c",
            expires_at=store.test_clock() + 5, keep=False),
    )
    assert (await store.get_path("shop", "/c")).state == "crawled"
    assert await store.get_snapshot("shop", "/c") is None
    assert (await store.counts())["shop"] == {"crawled": 1}
    store.test_clock.now += 6
    assert await store.requeue_expired("shop") == 1
    assert (await store.get_path("shop", "/c")).state == "pending"


def crawlbot_app(db: str):  # type: ignore[no-untyped-def]
    browser = BrowserSettings(
        concurrency=2, executable=require_chromium(), javascript_timeout=0.2, render_timeout=60
    )
    # A maintenance each second: a round's end is seen within one.
    return create_app(
        Settings(db=db, api_tokens=(TOKEN,), browser=browser, maintenance_every=1.0)
    )


@pytest.mark.browser
def test_pages_crawled_but_not_processed_are_rendered_for_links_only(crawl_db) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    shop = Shop()
    with serve_asgi(shop.app) as origin, serve_asgi(crawlbot_app(str(crawl_db))) as base, \
            httpx.Client(base_url=base, timeout=30, trust_env=False) as client:
        host = {"Host": origin.removeprefix("http://")}
        created = client.post("/_snapshotd/v3/crawl", data={
            "token": TOKEN, "name": "shop", "seeds": origin + "/", "obeyRobots": "0",
            "urlProcessPattern": "/a/", "pageProcessPattern": "Page /a/1||Page /a/2",
        })
        assert created.status_code == 200, created.text
        done = wait_status(client, "shop", 9, [])
        # Every page was crawled, links of unprocessed ones followed (/a/3 leads to /deep/);
        # only /a/1 and /a/2 were processed.
        assert shop.counts()["/deep/4"] >= 1 and shop.counts()["/a/3"] >= 1
        assert done["objectsFound"] == 2 == done["pageProcessSuccesses"]
        assert done["pageCrawlSuccesses"] > done["pageProcessSuccesses"]
        assert done["pageProcessAttempts"] == done["pageCrawlAttempts"] - (
            done["pageCrawlSuccesses"] - done["pageProcessSuccesses"])
        assert done["urlProcessPattern"] == "/a/"
        pages = client.get("/_snapshotd/v3/crawl/data",
                           params={"token": TOKEN, "name": "shop"}).json()
        assert sorted(p["path"] for p in pages) == ["/a/1", "/a/2"]
        report = client.get("/_snapshotd/v3/crawl/data", params={
            "token": TOKEN, "name": "shop", "type": "urls", "format": "json"}).json()
        state = {r["path"]: r["state"] for r in report}
        assert state["/"] == state["/a/3"] == state["/deep/1"] == "crawled"

        # Bots: a processed page is served; a crawled one and one the URL pattern leaves
        # out get the origin's page, and nothing is added or rendered for them.
        hit = client.get("/a/1", headers={**host, "User-Agent": BOT})
        assert hit.headers["x-snapshotd-cache"] == "HIT" and "Page /a/1" in hit.text
        before = shop.counts()
        for path in ("/a/3", "/api-asked"):
            passed = client.get(path, headers={**host, "User-Agent": BOT})
            assert passed.headers["x-snapshotd-cache"] == "BYPASS", path
            assert f"Page {path}" in passed.text
        assert shop.counts() - before == {"/a/3": 1, "/api-asked": 1}  # the pass-through
        assert job(client, "shop")["urlsHarvested"] == done["urlsHarvested"]

        # maxToProcess: the job ends when it is reached (3), pending pages left unclaimed.
        client.post("/_snapshotd/v3/crawl", data={
            "token": TOKEN, "name": "capped", "seeds": origin + "/", "obeyRobots": "0",
            "maxToProcess": "3",
        })
        capped = wait_status(client, "capped", 3, [])
        assert capped["jobStatus"]["message"] == "Job has reached maxToProcess limit"
        time.sleep(2)
        assert job(client, "capped")["objectsFound"] == 3

        # A job that repeats waits for its next round (4); restrictDomain=0 cannot be
        # carried out; a per-subdomain maximum is the job's own (one host).
        repeat = client.post("/_snapshotd/v3/crawl", data={
            "token": TOKEN, "name": "shop", "repeat": "1", "maxToCrawlPerSubdomain": "500",
        }).json()["jobs"][0]
        assert repeat["jobStatus"] == {"status": 4, "message": "Next round to start in "
                                       f"{repeat['jobStatus']['message'].split()[5]} seconds"}
        assert 86000 < int(repeat["jobStatus"]["message"].split()[5]) <= 86400
        assert repeat["maxToCrawl"] == repeat["maxToCrawlPerSubdomain"] == 500
        wide = client.post("/_snapshotd/v3/crawl", data={
            "token": TOKEN, "name": "shop", "restrictDomain": "0"})
        assert wide.status_code == 400 and wide.json()["field"] == "restrictDomain"


class Echo:
    """An origin that records the headers of every request: a page, its script and its
    data request, the page showing what the server and the data request saw."""

    def __init__(self) -> None:
        self.seen: dict[str, dict[str, str]] = {}

        def keep(request: Request) -> dict[str, str]:
            self.seen[request.url.path] = dict(request.headers)
            return self.seen[request.url.path]

        async def page(request: Request) -> Response:
            lang = keep(request).get("accept-language", "")
            return HTMLResponse(
                f'<html><body><p id="server">server saw {lang}</p><p id="data"></p>'
                '<script src="/app.js"></script></body></html>'
            )

        async def script(request: Request) -> Response:
            keep(request)
            return Response(
                "fetch('/data').then(r => r.text()).then(t => {"
                "document.getElementById('data').textContent = 'data saw ' + t;"
                "window.onCaptureReady && window.onCaptureReady(); });",
                media_type="application/javascript",
            )

        async def data(request: Request) -> Response:
            headers = keep(request)
            key, lang = headers.get("x-shop-key"), headers.get("accept-language")
            return PlainTextResponse(f"{key} {lang}")

        self.app = Starlette(routes=[Route("/", page), Route("/app.js", script),
                                     Route("/data", data)])


@pytest.mark.browser
def test_custom_headers_go_with_every_request_to_the_sites_origin(tmp_path) -> None:
    echo = Echo()
    with serve_asgi(echo.app) as origin, serve_asgi(crawlbot_app(str(tmp_path / "h.db"))) as base, \
            httpx.Client(base_url=base, timeout=30, trust_env=False) as client:
        # Crawlbot's form: one customHeaders argument per header.
        created = client.post("/_snapshotd/v3/crawl", content=(
            f"token={TOKEN}&name=echo&seeds={origin}/&obeyRobots=0"
            "&customHeaders=Accept-Language%3Afr-CH&customHeaders=X-Shop-Key%3A%20k1"
        ), headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert created.status_code == 200, created.text
        assert created.json()["jobs"][0]["customHeaders"] == [
            "Accept-Language:fr-CH", "X-Shop-Key: k1"]
        wait_status(client, "echo", 9, [])
        [page] = client.get("/_snapshotd/v3/crawl/data",
                            params={"token": TOKEN, "name": "echo", "html": "1"}).json()
        assert "server saw fr-CH" in page["html"] and "data saw k1 fr-CH" in page["html"]
        assert echo.seen["/app.js"]["accept-language"] == "fr-CH"
        assert echo.seen["/app.js"]["x-shop-key"] == "k1"
        bad = client.post("/_snapshotd/v3/crawl", data={
            "token": TOKEN, "name": "echo", "customHeaders": "Host:evil.test"})
        assert bad.status_code == 400 and "Host cannot be set" in bad.json()["error"]


@pytest.mark.browser
def test_the_command_line_sets_what_a_crawl_processes_and_starts_rounds(tmp_path) -> None:
    require_chromium()
    db = str(tmp_path / "c.db")
    with serve_asgi(Shop().app) as origin:
        bad = run("crawl", "--origin", origin, "--db", db, "--set", "max_to_process=lots")
        assert bad.returncode == 2, bad.stderr
        assert bad.stderr == (
            "snapshotd: --set.max_to_process: expected an integer, got 'lots'\n")
        done = run("crawl", "--origin", origin, "--db", db, "--set", "url_process_pattern=/a/",
                   "--set", "obey_robots=false")
        assert done.returncode == 0, done.stderr
    shown = json.loads(run("site", "show", "default", "--db", db).stdout)
    counts = shown["counts"]
    assert counts["processed"] == 3 and counts["crawled"] >= 10, counts
    assert shown["job"]["jobStatus"]["status"] == 9 and shown["job"]["objectsFound"] == 3
    rounded = run("site", "round", "default", "--db", db)
    assert rounded.stdout == (
        f"started a new round of site default: {counts['crawled'] + counts['error']} pages "
        "queued again\n")
    again = json.loads(run("site", "show", "default", "--db", db).stdout)
    assert again["counts"]["processed"] == 3
    assert again["counts"]["pending"] == counts["crawled"] + counts["error"]
    assert again["job"]["jobStatus"]["status"] == 7


async def test_a_round_goes_on_while_a_captures_links_are_still_to_follow(store) -> None:  # type: ignore[no-untyped-def]
    site = SiteSettings(name="shop", origin=ORIGIN, seeds=("/",))
    registry = SiteRegistry(Settings(sites=(site,)), store)
    await registry.open()
    try:
        await store.enqueue("shop", "/", PRIORITY_LINK)
        await store.claim_path("shop", "/", "me", 60)
        assert await store.complete(
            "shop", "/", "me", CaptureOutcome(html="<p>home</p>", status=200, headers={},
                final_url=ORIGIN + "/", expires_at=store.test_clock() + DAY, links_due=True),
        )
        # Stored, its links not queued yet: not done, and no round end is recorded.
        assert (await status(store, registry, site))[0] == 7
        assert not await advance(store, registry, site)
        assert (await job_state(store, "shop", 0)).rounds == 0
        await store.links_followed("shop", "/")
        assert (await status(store, registry, site))[0] == 9
    finally:
        await registry.close()


async def test_a_maintenance_counts_sizes_rounds_and_full_sites(store) -> None:  # type: ignore[no-untyped-def]
    """One maintenance counts each site's paths, ends the rounds that are over, and notes the
    sites at ``max_to_process``; the check after a stored capture counts processed pages
    from a tally, and a count of now decides when the tally says full."""
    limited = SiteSettings(name="a", origin=ORIGIN, obey_robots=False, max_to_process=2)
    sites = (limited, *(SiteSettings(name=n, origin=ORIGIN, obey_robots=False) for n in "bc"))
    settings = Settings(sites=sites)
    registry = SiteRegistry(settings, store)
    await registry.open()
    try:
        for path, outcome in (("/1", "processed"), ("/2", "processed"), ("/3", "crawled")):
            await settle(store, "a", path, outcome)
        await settle(store, "b", "/", "processed")
        reads = 0
        processed = store.processed

        async def counted(site: str) -> int:
            nonlocal reads
            reads += 1
            return await processed(site)

        store.processed = counted
        capture = CaptureService(settings, store, None)
        crawler = Crawler(registry, store, capture)
        await crawler._maintain()  # the rounds of "a" and "b" end
        assert (await job_state(store, "b", 0)).ended
        assert not (await job_state(store, "c", 0)).ended  # no path yet: no round
        assert crawler.frontier.size == {"a": 3, "b": 1, "c": 0}
        assert crawler.scheduler.full == {"a"}
        assert (await processed("a"), await processed("c")) == (2, 0)
        assert reads == 0
        assert await capture.reached_max(limited)  # the tally's first read, confirmed by one
        assert not await capture.reached_max(sites[1])  # unlimited
        # This process's count may pass the limit by pages it captured again: a count of now
        # decides.
        higher = SiteSettings(name="a", origin=ORIGIN, max_to_process=3)
        capture._processed.add("a", 2)
        assert not await capture.reached_max(higher)
        assert reads == 3  # none for the unlimited site, one of now for the full tally
    finally:
        await registry.close()


async def test_a_round_begun_after_one_ended_is_not_taken_for_over(store) -> None:  # type: ignore[no-untyped-def]
    site = SiteSettings(name="shop", origin=ORIGIN, seeds=("/",))
    registry = SiteRegistry(Settings(sites=(site,)), store)
    await registry.open()
    try:
        await settle(store, "shop", "/", "crawled")
        assert not await advance(store, registry, site)  # the first round is over
        ended = await job_state(store, "shop", 0)
        assert ended.rounds == 1 and ended.ended
        # A new round begins (a restart, elsewhere) just after the paths were counted.
        counts = store.counts
        begun_between = False

        async def counted(*args):  # type: ignore[no-untyped-def]
            nonlocal begun_between
            result = await counts(*args)
            if not begun_between:
                begun_between = True
                await start_round(store, site, await job_state(store, "shop", 0))
            return result

        store.counts = counted
        assert not await advance(store, registry, site)
        assert begun_between
        begun = await job_state(store, "shop", 0)
        assert (begun.rounds, begun.ended) == (1, 0.0)
        assert (await status(store, registry, site))[0] == 7
    finally:
        await registry.close()


async def test_a_round_begun_while_the_notifier_describes_the_last_is_notified_at_its_end(
    store,
) -> None:  # type: ignore[no-untyped-def]
    """The end of a round is notified once; a round that begins while that notification is
    being made up is not marked notified, so its own end is notified too."""
    from snapshotd.crawl.notify import Notifier
    from snapshotd.observe.minute_counts import MinuteCounters

    site = SiteSettings(name="shop", origin=ORIGIN, seeds=("/",), obey_robots=False,
                        notify_webhook="http://127.0.0.1:9/hook")
    settings = Settings(sites=(site,))
    registry = SiteRegistry(settings, store)
    await registry.open()
    try:
        await settle(store, "shop", "/", "crawled")
        await advance(store, registry, site)  # the first round ends
        minutes = MinuteCounters()
        flush = minutes.flush
        begun = False

        async def flush_then_begin(target):  # type: ignore[no-untyped-def]
            nonlocal begun
            await flush(target)
            if not begun:  # a new round, from the API of another process, at this moment
                begun = True
                await start_round(store, site, await job_state(store, "shop", 0))

        minutes.flush = flush_then_begin  # type: ignore[method-assign]
        notifier = Notifier(settings, store, registry, minutes=minutes)
        calls: list[str] = []

        async def call(site, job, state=None):  # type: ignore[no-untyped-def]
            calls.append(job["roundStartTime"])

        notifier._call = call  # type: ignore[method-assign]
        await notifier.check()
        await asyncio.sleep(0)
        assert begun and len(calls) == 1
        assert not await is_notified(store, "shop", await job_state(store, "shop", 0))
        await settle(store, "shop", "/", "crawled")  # the second round runs to its end
        await advance(store, registry, site)
        await notifier.check()
        await asyncio.sleep(0)
        assert len(calls) == 2
    finally:
        await registry.close()


async def test_two_hosts_notify_the_end_of_a_round_once(store) -> None:  # type: ignore[no-untyped-def]
    """Each host's crawler checks for ended rounds; on one store, one of them notifies."""
    from snapshotd.crawl.notify import Notifier
    from snapshotd.observe.minute_counts import MinuteCounters

    site = SiteSettings(name="shop", origin=ORIGIN, seeds=("/",), obey_robots=False,
                        notify_webhook="http://127.0.0.1:9/hook")
    settings = Settings(sites=(site,))
    if isinstance(store, SQLiteStore):
        other_store: Any = SQLiteStore(store.path, clock=store.test_clock)
    else:
        other_store = PostgresStore(store.dsn, clock=store.test_clock, pool_size=2)
    await other_store.open()
    registries = [SiteRegistry(settings, store), SiteRegistry(settings, other_store)]
    for registry in registries:
        await registry.open()
    try:
        await settle(store, "shop", "/", "crawled")
        await advance(store, registries[0], site)  # the round ends
        calls: list[str] = []

        async def call(site, job, state=None):  # type: ignore[no-untyped-def]
            calls.append(job["roundStartTime"])

        notifiers = [
            Notifier(settings, s, r, minutes=MinuteCounters())
            for s, r in zip((store, other_store), registries, strict=True)
        ]
        for notifier in notifiers:
            notifier._call = call  # type: ignore[method-assign]
        for _ in range(3):
            await asyncio.gather(*(n.check() for n in notifiers))
            await asyncio.sleep(0)
        assert len(calls) == 1
        state = await job_state(store, "shop", 0)
        assert await is_notified(other_store, "shop", state)
        await start_round(store, site, state)  # the next round is notified at its end
        await settle(store, "shop", "/", "crawled")
        await advance(store, registries[1], site)
        for _ in range(3):
            await asyncio.gather(*(n.check() for n in notifiers))
            await asyncio.sleep(0)
        assert len(calls) == 2 and calls[0] != calls[1]
    finally:
        for registry in registries:
            await registry.close()
        await other_store.close()


@pytest.mark.parametrize("engine", ["sqlite", "postgres"])
async def test_a_round_notified_before_an_upgrade_is_not_notified_again(  # type: ignore[no-untyped-def]
    engine, tmp_path, monkeypatch
) -> None:
    """Job rows written when a round's notification was a flag of the row keep it."""
    from snapshotd.store import sqlite as sqlite_module

    module: Any = sqlite_module
    schema = None
    if engine == "sqlite":

        def make() -> Any:
            return SQLiteStore(str(tmp_path / "s.db"))
    else:
        from snapshotd.store import postgres as module

        schema, url = await postgres_schema()

        def make() -> Any:
            return PostgresStore(url, pool_size=2)

    full = list(module.MIGRATIONS)
    # The schema before the step that made a notified round a row of its own.
    step = full.index(SQLITE_NOTIFIED_ROUNDS if engine == "sqlite" else POSTGRES_NOTIFIED_ROUNDS)
    try:
        monkeypatch.setattr(module, "MIGRATIONS", full[:step])
        old = make()
        await old.open()
        rows = {  # as the job rows were written then: json.dumps of the state, flag and all
            "shop": {"started": 1764085934.1234567, "rounds": 1, "ended": 1764089534.5,
                     "notified": True, "seeds_at": 0.0},
            "blog": {"started": 1764085934.5, "rounds": 0, "ended": 1764089534.5,
                     "notified": False, "seeds_at": 0.0},
        }
        for name, row in rows.items():
            await old.set_meta(f"job:{name}", json.dumps(row))
        await old.close()
        monkeypatch.setattr(module, "MIGRATIONS", full)
        new = make()
        await new.open()
        try:
            assert await is_notified(new, "shop", await job_state(new, "shop", 0))
            assert not await is_notified(new, "blog", await job_state(new, "blog", 0))
            assert await claim_notification(new, "blog", await job_state(new, "blog", 0))
        finally:
            await new.close()
    finally:
        if schema is not None:
            await drop_postgres_schema(schema)


async def test_links_queued_while_a_round_is_counted_keep_it_going(store) -> None:  # type: ignore[no-untyped-def]
    """A capture's links are queued (then its mark cleared) between the reads that tell
    whether the round is over: it is not over, for the API nor for the rounds."""
    site = SiteSettings(name="shop", origin=ORIGIN, seeds=("/",), obey_robots=False)
    registry = SiteRegistry(Settings(sites=(site,)), store)
    await registry.open()
    links_due = store.links_due
    follow = True

    async def captured_with_links_due() -> None:
        nonlocal follow
        await store.clear_site("shop")
        await store.enqueue("shop", "/", PRIORITY_LINK)
        assert await store.claim_path("shop", "/", "me", 60) is not None
        assert await store.complete(
            "shop", "/", "me", CaptureOutcome(
                html="<a href='/next'>next</a>", status=200, headers={},
                final_url=ORIGIN + "/", expires_at=store.test_clock() + DAY, keep=False,
                links_due=True),
        )
        follow = True

    async def followed_first(*args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal follow
        if follow:  # the crawler follows the links at this moment
            follow = False
            await store.enqueue("shop", "/next", PRIORITY_LINK)
            await store.links_followed("shop", "/")
        return await links_due(*args, **kwargs)

    store.links_due = followed_first
    try:
        await captured_with_links_due()
        assert (await status(store, registry, site))[0] != 9
        assert not follow
        await captured_with_links_due()
        assert not await advance(store, registry, site)
        assert not follow and not (await job_state(store, "shop", 0)).ended
    finally:
        await registry.close()
