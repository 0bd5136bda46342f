"""Per-minute counters in the store, added up across processes and kept across restarts;
listing pending paths in the order the crawler takes them."""

from __future__ import annotations

import asyncio

from snapshotd.store import open_store


async def test_counters_add_up_and_read_from_a_minute_on(store):
    await store.add_counters([(100, "shop", "result:HIT", 2), (100, "shop", "result:HIT", 1)])
    await store.add_counters([(100, "shop", "result:HIT", 4), (101, "shop", "bot:Googlebot", 1)])
    await store.add_counters([(99, "blog", "capture:ok", 5)])
    await store.add_counters([])
    assert await store.counters(100) == [
        (100, "shop", "result:HIT", 7),
        (101, "shop", "bot:Googlebot", 1),
    ]
    assert len(await store.counters(0)) == 3
    assert await store.prune_counters(100) == 1
    assert await store.counters(0) == await store.counters(100)


async def test_counters_of_several_processes_add_up_and_survive_a_restart(store, tmp_path):
    url = getattr(store, "dsn", None) or store.path
    others = [open_store(url) for _ in range(3)]
    for other in others:
        await other.open()
    try:
        rows = [(7, "shop", f"result:{r}", 1) for r in ("HIT", "MISS", "STALE", "BYPASS")]
        await asyncio.gather(
            *(s.add_counters(rows[i % 4 :] + rows[: i % 4]) for i, s in enumerate(others * 5))
        )
    finally:
        for other in others:
            await other.close()
    again = open_store(url)
    await again.open()
    try:
        assert await again.counters(7) == [
            (7, "shop", f"result:{r}", 15) for r in sorted(("HIT", "MISS", "STALE", "BYPASS"))
        ]
    finally:
        await again.close()


async def test_pending_paths_listed_in_crawl_order(store):
    for path, priority in (("/a", 1), ("/b", 3), ("/c", 1), ("/d", 2), ("/e", 3)):
        await store.enqueue("shop", path, priority)
        store.test_clock.now += 1
    page, cursor = await store.list_paths("shop", state="pending", limit=2, crawl_order=True)
    assert [r.path for r in page] == ["/b", "/e"]
    page, cursor = await store.list_paths(
        "shop", state="pending", limit=2, cursor=cursor, crawl_order=True
    )
    assert [r.path for r in page] == ["/d", "/a"]
    page, cursor = await store.list_paths(
        "shop", state="pending", limit=2, cursor=cursor, crawl_order=True
    )
    assert [r.path for r in page] == ["/c"] and cursor is None
    claimed = [(await store.claim("owner", 60)).path for _ in range(5)]
    assert claimed == ["/b", "/e", "/d", "/a", "/c"]
    newest, _ = await store.list_paths("shop", limit=5)
    assert [r.path for r in newest] == ["/e", "/d", "/c", "/b", "/a"]


async def test_recent_bot_requests_of_every_process_newest_first_the_last_kept(store):
    from snapshotd.store.counters import RECENT_KEPT

    await store.add_recent([(1.0, "shop", "Googlebot", "/a", "HIT", 200, 3)])
    await store.add_recent([(2.0, "shop", "Bingbot", "/b", "MISS", None, 900),
                            (3.0, "blog", "GPTBot", "/c", "BYPASS", 404, 12)])
    assert await store.recent(2) == [
        (3.0, "blog", "GPTBot", "/c", "BYPASS", 404, 12),
        (2.0, "shop", "Bingbot", "/b", "MISS", None, 900),
    ]
    await store.add_recent(
        [(10.0 + n, "shop", "Googlebot", f"/p{n}", "HIT", 200, 1) for n in range(RECENT_KEPT)]
    )
    rows = await store.recent(10 * RECENT_KEPT)
    assert [r for r in rows if r[1] == "shop"][-1][3] == "/p0"  # the older ones trimmed
    assert len([r for r in rows if r[1] == "shop"]) == RECENT_KEPT
    assert [r[3] for r in rows if r[1] == "blog"] == ["/c"]
