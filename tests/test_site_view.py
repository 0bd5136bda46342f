"""A site's view is one immutable value the registry replaces whole: a reader holding one
holds a whole version of its site (settings, rules, bots), never half of an update; a reader
taking the current one gets the newest, the proxy and the crawler alike. Real SQLite and
PostgreSQL stores (the ``store`` fixture), the registry reading them."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from snapshotd.capture.service import CaptureService
from snapshotd.config.settings import Settings, SiteSettings
from snapshotd.crawl.engine import Crawler
from snapshotd.proxy.handler import Proxy
from snapshotd.proxy.passthrough import Upstream
from snapshotd.sites.registry import SiteRegistry, site_json

BOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"


def shop(version: int) -> SiteSettings:
    """The site at ``version``: each of its settings, rules and bots says which it is."""
    return SiteSettings(
        name="shop", origin="http://127.0.0.1:9", hosts=("shop.test",),
        rules_text=f"^/old$ /v{version} [R=301]\n", max_pages=100 + version,
        bots_add=(f"probe{version}",),
    )


def version_of(view) -> tuple[int, int, bool]:  # type: ignore[no-untyped-def]
    """The version its rules say, the one its settings say, and whether its bots are it."""
    location = view.rules.evaluate("/old").location
    by_rules = int(location.removeprefix("/v"))
    return by_rules, view.settings.max_pages - 100, bool(view.bots(f"probe{by_rules}/1.0"))


async def test_a_reader_holding_a_view_holds_one_version_across_updates(store) -> None:  # type: ignore[no-untyped-def]
    registry = SiteRegistry(Settings(sites=(shop(0),)), store, refresh_every=60)
    assert dict(registry.created) == {}  # nothing read of the store yet
    await registry.open()
    try:
        held, whole = registry.view("shop"), registry.now
        assert held is not None and registry.created == {"shop": held.created}
        assert held is not None and version_of(held) == (0, 0, True)
        seen: list[tuple[int, int, bool]] = []
        updating = True

        async def reader() -> None:
            while updating:
                view = registry.view("shop")  # the current one, held across an await
                await asyncio.sleep(0)
                seen.append(version_of(view))

        task = asyncio.create_task(reader())
        for version in range(1, 6):
            await registry.put(shop(version))  # the API's way
        await store.put_site("shop", site_json(shop(6)))  # another process's way
        await registry.refresh()
        updating = False
        await task
        assert version_of(held) == (0, 0, True)  # whole, after six updates
        assert whole.site("shop") is held and whole.settings.site("shop") is held.settings
        assert all(rules == settings and bots for rules, settings, bots in seen)
        assert len({rules for rules, _, _ in seen}) > 1, seen
        now = registry.view("shop")
        assert now is not None and version_of(now) == (6, 6, True)
        assert registry.site("shop") is now.settings is registry.settings.site("shop")
        with pytest.raises(dataclasses.FrozenInstanceError):
            now.rules = held.rules  # type: ignore[misc]
        with pytest.raises(TypeError):
            registry.now.by_name["shop"] = held  # type: ignore[index]
    finally:
        await registry.close()


async def test_an_update_of_rules_reaches_the_proxy_and_the_crawler(store) -> None:  # type: ignore[no-untyped-def]
    settings = Settings(sites=(shop(0),))
    registry = SiteRegistry(settings, store, refresh_every=60)
    await registry.open()
    capture = CaptureService(settings, store, None)  # type: ignore[arg-type]
    proxy = Proxy(registry, store, capture, Upstream())
    crawler = Crawler(registry, store, capture)
    scope = {"http_version": "1.1", "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 80)}
    headers = [(b"host", b"shop.test"), (b"user-agent", BOT.encode())]
    crawled = registry.site("shop")  # as the crawler holds a site across a capture
    assert crawled is not None
    try:
        for version in range(3):
            if version:
                await registry.put(shop(version))
            answer = proxy.answer_at_once("GET", "/old", "", headers, dict(scope))
            assert answer is not None
            status, out, _body = answer
            assert (status, dict(out)[b"location"]) == (301, f"/v{version}".encode())
            # The crawler follows a link to /old by the rules of now, whatever it holds.
            queued = await crawler.frontier.admit(
                crawled, "/old", hops=0, priority=1, source="link"
            )
            assert queued == "queued"
            assert (await store.get_path("shop", f"/v{version}")) is not None
    finally:
        await proxy.upstream.close()
        await registry.close()
