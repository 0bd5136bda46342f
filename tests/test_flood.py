"""Floods of bot requests: real uvicorn, real SQLite, a small renderer with render slots.

The renderer serves a fixed page through ``concurrency`` slots (like the browser pool) and
records every URL it renders, so the tests count renders and rows rather than time.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

from snapshotd.config.settings import BrowserSettings, Settings, SiteSettings
from snapshotd.render.renderer import CaptureResult
from snapshotd.server.app import create_app
from tests.servers import serve_asgi

BOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
TOKEN = "flood-test-token"
PAGE = "<html><head><title>t</title></head><body><h1>rendered</h1></body></html>"


class SlotRenderer:
    """A fixed page through ``slots`` render slots; ``gate`` (when set) holds renders."""

    def __init__(self, slots: int, delay: float = 0.0) -> None:
        self.slots = slots
        self.delay = delay
        self.urls: list[str] = []
        self.gate = threading.Event()
        self.gate.set()
        self._sem: asyncio.Semaphore | None = None

    async def start(self) -> None:
        self._sem = asyncio.Semaphore(self.slots)

    async def close(self) -> None:
        self.gate.set()

    async def capture(
        self, url: str, site: SiteSettings, profile: str = "desktop"
    ) -> CaptureResult:
        assert self._sem is not None
        async with self._sem:
            self.urls.append(url)
            if not self.gate.is_set():
                await asyncio.to_thread(self.gate.wait)
            await asyncio.sleep(self.delay)
            return CaptureResult(url=url, final_url=url, status=200, html=PAGE)


def _origin() -> Starlette:
    async def page(request: Request) -> HTMLResponse:
        return HTMLResponse("<html><body>origin page</body></html>")

    return Starlette(routes=[Route("/{rest:path}", page)])


@dataclass
class Env:
    base: str
    db: str
    renderer: SlotRenderer
    client: httpx.Client

    def bot(self, path: str) -> httpx.Response:
        return self.client.get(path, headers={"User-Agent": BOT})

    def rows(self) -> list[str]:
        conn = sqlite3.connect(self.db)
        try:
            return sorted(r[0] for r in conn.execute("SELECT path FROM paths"))
        finally:
            conn.close()

    def refused(self) -> dict[str, int]:
        text = self.client.get(
            "/_snapshotd/metrics", headers={"Authorization": f"Bearer {TOKEN}"}
        ).text
        out = {}
        for line in text.splitlines():
            if line.startswith("snapshotd_refused_total{"):
                reason = line.split('reason="', 1)[1].split('"', 1)[0]
                if count := int(float(line.rsplit(" ", 1)[1])):  # the rest are there at 0
                    out[reason] = count
        return out


@contextmanager
def flood_env(
    tmp_path,
    *,
    concurrency: int = 2,
    delay: float = 0.0,
    miss_wait: float = 30.0,
    crawler: bool = False,
    browser: dict | None = None,
    **site: object,
) -> Iterator[Env]:
    db = str(tmp_path / f"flood-{uuid.uuid4().hex[:8]}.db")
    renderer = SlotRenderer(concurrency, delay)
    with serve_asgi(_origin()) as origin_url:
        settings = Settings(
            db=db,
            api_tokens=(TOKEN,),
            miss_wait=miss_wait,
            browser=BrowserSettings(concurrency=concurrency, **(browser or {})),
            sites=(
                SiteSettings(
                    name="s",
                    origin=origin_url,
                    devices="mobile",  # one render a capture: these count captures
                    seeds=(),
                    obey_robots=False,
                    crawl_links=False,
                    **site,  # type: ignore[arg-type]
                ),
            ),
        )
        app = create_app(settings, renderer=renderer, crawler=crawler)
        with serve_asgi(app) as base, httpx.Client(
            base_url=base, timeout=20, trust_env=False
        ) as client:
            yield Env(base, db, renderer, client)


def test_tracking_variants_of_a_page_are_one_row_and_one_render(tmp_path) -> None:
    with flood_env(tmp_path) as env:
        results = []
        for i in range(200):
            param = ("utm_source", "utm_campaign", "fbclid", "gclid")[i % 4]
            results.append(env.bot(f"/about?{param}=v{i}").headers["x-snapshotd-cache"])
        assert env.rows() == ["/about"]
        assert len(env.renderer.urls) == 1
        assert results[0] == "MISS" and set(results[1:]) == {"HIT"}
        print(f"\n200 tracking variants: {len(env.renderer.urls)} renders, {len(env.rows())} rows")


def test_other_parameters_keep_their_order_and_bytes_around_stripped_ones(tmp_path) -> None:
    with flood_env(tmp_path) as env:
        assert env.bot("/p?b=2&utm_medium=x&a=%2F+1").headers["x-snapshotd-cache"] == "MISS"
        assert env.rows() == ["/p?b=2&a=%2F+1"]
        assert env.renderer.urls[0].endswith("/p?b=2&a=%2F+1")


def test_random_queries_stop_at_max_pages_and_bypass_at_once(tmp_path) -> None:
    with flood_env(tmp_path, max_pages=20) as env:
        results = [env.bot(f"/search?q={uuid.uuid4().hex}") for _ in range(1000)]
        caches = [r.headers["x-snapshotd-cache"] for r in results]
        assert caches[:20] == ["MISS"] * 20
        assert set(caches[20:]) == {"BYPASS"}
        assert "origin page" in results[-1].text
        assert len(env.rows()) == 20
        assert len(env.renderer.urls) == 20
        # A known path is not limited.
        assert env.bot(env.rows()[0]).headers["x-snapshotd-cache"] == "HIT"
        assert env.refused() == {"max_pages": 980}
        print(f"\n1,000 random queries: {len(env.renderer.urls)} renders, {len(env.rows())} rows")


def test_new_paths_are_limited_per_minute(tmp_path) -> None:
    with flood_env(tmp_path, new_paths_per_minute=5) as env:
        caches = [
            env.client.get(f"/x{i}?_escaped_fragment_=").headers["x-snapshotd-cache"]
            for i in range(30)
        ]
        assert caches == ["MISS"] * 5 + ["BYPASS"] * 25
        assert env.rows() == [f"/x{i}" for i in range(5)]
        assert len(env.renderer.urls) == 5
        assert env.refused() == {"rate": 25}


def test_refusals_are_logged_once_in_a_while_not_once_each(tmp_path, caplog) -> None:
    with caplog.at_level(logging.INFO, logger="snapshotd"), flood_env(
        tmp_path, new_paths_per_minute=1
    ) as env:
        for i in range(50):
            env.bot(f"/r{i}")
    lines = [
        r.getMessage() for r in caplog.records
        if r.name == "snapshotd.proxy.handler" and "refused" in r.getMessage()
    ]
    assert 1 <= len(lines) <= 2
    assert "reason=rate" in lines[0] and "site=s" in lines[0]


def test_a_full_miss_queue_bypasses_at_once(tmp_path) -> None:
    # One render slot, two misses may wait: the fourth concurrent miss is refused at once,
    # though miss_wait is far longer than the client waits.
    with flood_env(tmp_path, concurrency=1, miss_wait=300, browser={"miss_queue": 2}) as env:
        env.renderer.gate.clear()
        with ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(env.bot, f"/q{i}") for i in range(8)]
            bypassed = []
            # Refused misses answer while every render is still held by the gate.
            while len(bypassed) < 5:
                time.sleep(0.01)
                done = [f for f in futures if f.done()]
                for f in done:
                    futures.remove(f)
                    bypassed.append(f.result().headers["x-snapshotd-cache"])
            env.renderer.gate.set()
            served = [f.result().headers["x-snapshotd-cache"] for f in futures]
        assert bypassed == ["BYPASS"] * 5
        assert served == ["MISS"] * 3
        assert len(env.rows()) == 3
        assert env.refused() == {"miss_queue": 5}


def _until(condition, seconds: float = 30.0) -> bool:
    """Wait for ``condition`` (the bound only stops a hang)."""
    ends = time.monotonic() + seconds
    while not condition() and time.monotonic() < ends:
        time.sleep(0.01)
    return condition()


def test_misses_use_every_render_slot_while_the_crawler_has_no_work(tmp_path) -> None:
    with flood_env(tmp_path, concurrency=2) as env:
        env.renderer.gate.clear()
        with ThreadPoolExecutor(2) as pool:
            futures = [pool.submit(env.bot, f"/m{i}") for i in range(2)]
            # Both misses render at once: no slot idles for a crawler without work.
            both = _until(lambda: len(env.renderer.urls) == 2)
            env.renderer.gate.set()
            assert both, env.renderer.urls
            assert [f.result().headers["x-snapshotd-cache"] for f in futures] == ["MISS"] * 2


def test_a_crawler_capture_gets_the_next_slot_before_new_misses(tmp_path) -> None:
    # Two misses hold both slots; the crawler then has a path to capture, and waits for the
    # first slot given back; a third miss, come after it, waits for the next.
    with flood_env(tmp_path, concurrency=2, crawler=True, miss_wait=60) as env:
        env.renderer.gate.clear()
        with ThreadPoolExecutor(3) as pool:
            first = [pool.submit(env.bot, f"/m{i}") for i in range(2)]
            assert _until(lambda: len(env.renderer.urls) == 2), env.renderer.urls
            answer = env.client.post(
                "/_snapshotd/api/v1/sites/s/paths",
                json={"paths": ["/known"]},
                headers={"Authorization": f"Bearer {TOKEN}"},
            )
            assert answer.json()["results"][0]["result"] == "queued"
            rows = sqlite3.connect(env.db)
            try:
                # The crawler has claimed it: it waits for a slot.
                assert _until(lambda: rows.execute(
                    "SELECT state FROM paths WHERE path = '/known'").fetchone()[0]
                    == "processing")
            finally:
                rows.close()
            third = pool.submit(env.bot, "/m2")
            assert _until(lambda: "/m2" in env.rows())
            env.renderer.gate.set()
            for f in [*first, third]:
                assert f.result().headers["x-snapshotd-cache"] == "MISS"
        names = [u.rsplit("/", 1)[1] for u in env.renderer.urls]
        assert names.index("known") < names.index("m2"), names


def test_a_known_pending_path_is_captured_during_a_flood_of_unknown_ones(tmp_path) -> None:
    with flood_env(
        tmp_path, concurrency=2, delay=0.02, crawler=True, new_paths_per_minute=100000
    ) as env:
        stop = threading.Event()

        def flood() -> None:
            with httpx.Client(base_url=env.base, timeout=60, trust_env=False) as client:
                while not stop.is_set():
                    client.get(f"/f/{uuid.uuid4().hex}", headers={"User-Agent": BOT})

        with ThreadPoolExecutor(12) as pool:
            floods = [pool.submit(flood) for _ in range(12)]
            while len(env.renderer.urls) < 20:  # the flood holds the renders
                time.sleep(0.01)
            answer = env.client.post(
                "/_snapshotd/api/v1/sites/s/paths",
                json={"paths": ["/known"]},
                headers={"Authorization": f"Bearer {TOKEN}"},
            )
            before = len(env.renderer.urls)
            assert answer.json()["results"][0]["result"] == "queued"
            # Bounded: a starved path would wait for as long as the flood goes on.
            while len(env.renderer.urls) < before + 200 and not any(
                u.endswith("/known") for u in env.renderer.urls
            ):
                time.sleep(0.01)
            stop.set()
            known = [u.endswith("/known") for u in env.renderer.urls]
            assert any(known), "the known path was not captured during the flood"
            position = known.index(True)
            for f in floods:
                f.result()
        # Renders started after the path was queued and before it: at most those under way
        # in both slots, and what the flood may hold at once (1 miss slot + 8 waiting).
        print(f"\nknown path: render {position - before + 1} after it was queued")
        assert position - before <= 1 + 8 + 2


def test_a_person_whose_query_merely_mentions_escaped_fragment_is_passed_through(
    tmp_path,
) -> None:
    person = {"User-Agent": "Mozilla/5.0 (X11; Linux x86_64) Firefox/120.0"}
    with flood_env(tmp_path) as env:
        for target in ("/items?q=_escaped_fragment_", "/items?x_escaped_fragment_=1"):
            r = env.client.get(target, headers=person)
            assert r.status_code == 200 and "origin page" in r.text
            assert "x-snapshotd-cache" not in r.headers
        assert env.rows() == [] and env.renderer.urls == []


def test_a_hashbang_page_is_one_row_however_a_bot_escapes_it(tmp_path) -> None:
    with flood_env(tmp_path) as env:
        first = env.client.get("/?_escaped_fragment_=/caf%C3%A9")
        assert first.headers["x-snapshotd-cache"] == "MISS"
        # Google's escaping of the fragment a browser holds (/caf%C3%A9), and hex case
        for same in ("/?_escaped_fragment_=/caf%25C3%25A9", "/?_escaped_fragment_=/caf%25c3%25a9"):
            assert env.client.get(same).headers["x-snapshotd-cache"] == "HIT"
        assert env.bot("/a/../%7Eb").headers["x-snapshotd-cache"] == "MISS"
        assert env.bot("/~b").headers["x-snapshotd-cache"] == "HIT"
        assert env.rows() == ["/#!/caf%C3%A9", "/~b"]
        assert len(env.renderer.urls) == 2


def test_in_app_browsers_get_the_app_and_categories_are_the_sites(tmp_path) -> None:
    snapchat = (
        "Mozilla/5.0 (iPhone; CPU iPhone OS 17_2 like Mac OS X) AppleWebKit/605.1.15 (KHTML, "
        "like Gecko) Mobile/15E148 Snapchat/12.71.0.37 (like Safari/8617.1.17.10.9, panda)"
    )
    gptbot = "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; GPTBot/1.2)"
    with flood_env(tmp_path, bots_categories=("search", "social")) as env:
        for ua in (snapchat, gptbot):
            r = env.client.get("/a", headers={"User-Agent": ua})
            assert "origin page" in r.text and "x-snapshotd-cache" not in r.headers, ua
        assert env.bot("/a").headers["x-snapshotd-cache"] == "MISS"
        assert env.rows() == ["/a"]
