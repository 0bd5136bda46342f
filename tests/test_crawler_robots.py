"""robots.txt handling against a real server on loopback, with a clock the test moves."""

from __future__ import annotations

import pytest
from pytest_httpserver import HTTPServer

from snapshotd.config.settings import SiteSettings
from snapshotd.crawl.robots import RobotsCache
from snapshotd.net.fetch import Fetcher


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def server():
    s = HTTPServer(host="127.0.0.1", port=0)
    s.start()
    yield s
    s.clear()
    s.stop()


def answer(server: HTTPServer, body: str, status: int = 200) -> None:
    server.clear()
    server.expect_request("/robots.txt").respond_with_data(
        body, status=status, content_type="text/plain"
    )


async def test_rules_are_read_kept_and_refreshed(server):
    site = SiteSettings(name="s", origin=f"http://127.0.0.1:{server.port}")
    clock = Clock()
    answer(
        server,
        "User-agent: *\nDisallow: /private/\nDisallow: /*?sort=\n\n"
        "User-agent: snapshotd\nDisallow: /not-for-us\nDisallow: /private/\n",
    )
    async with Fetcher() as client:
        robots = RobotsCache(client, clock=clock, ttl=100, retry=10)
        assert robots.allowed(site, "/private/x")  # nothing read yet: allowed
        await robots.refresh(site)
        assert not robots.allowed(site, "/private/x")
        assert not robots.allowed(site, "/not-for-us")  # the group naming snapshotd
        assert robots.allowed(site, "/items?sort=price")  # only the * group says so
        assert robots.allowed(site, "/#!/private/x")  # the fragment is not what is fetched
        assert not robots.allowed(site, "/private/y#!/z")

        # A server error keeps what was read, and is tried again soon.
        answer(server, "oops", status=503)
        clock.now += 101
        await robots.refresh(site)
        assert not robots.allowed(site, "/private/x")
        assert not robots.due(site)
        clock.now += 11
        assert robots.due(site)

        # Gone (4xx): everything is allowed, for a full ttl.
        answer(server, "", status=404)
        await robots.refresh(site)
        assert robots.allowed(site, "/private/x")
        clock.now += 50
        await robots.refresh(site)  # not due: no request
        assert len(server.log) == 1  # the 404 alone since the last clear()


async def test_unreachable_robots_allows_until_read():
    site = SiteSettings(name="s", origin="http://127.0.0.1:9")
    async with Fetcher() as client:
        robots = RobotsCache(client, clock=Clock())
        await robots.refresh(site)
        assert robots.allowed(site, "/anything")
        assert not robots.due(site)


async def test_an_endless_robots_txt_is_read_only_as_far_as_the_bound():
    import asyncio

    from snapshotd.crawl.robots import MAX_ROBOTS_BYTES
    from tests.servers import serve_asgi

    sent = {"bytes": 0}

    async def endless(scope, receive, send):
        assert scope["type"] == "http"
        gone = asyncio.Event()

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()

        watcher = asyncio.ensure_future(watch())
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send(
            {
                "type": "http.response.body",
                "body": b"User-agent: *\nDisallow: /private/\n",
                "more_body": True,
            }
        )
        chunk = b"# " + b"x" * 8190 + b"\n"
        # Sends after the client has gone are dropped by the server, so stop counting then
        # (a turn of the loop after each send lets the watcher see it go).
        while not gone.is_set() and sent["bytes"] < 200 * 1024 * 1024:
            sent["bytes"] += len(chunk)
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await asyncio.sleep(0)
        watcher.cancel()

    with serve_asgi(endless, lifespan="off") as base:
        site = SiteSettings(name="s", origin=base)
        async with Fetcher() as client:
            robots = RobotsCache(client, clock=Clock())
            await asyncio.wait_for(robots.refresh(site), 20)
            read = sent["bytes"]
        assert not robots.allowed(site, "/private/x")
        assert robots.allowed(site, "/public")
        assert read < 20 * MAX_ROBOTS_BYTES
