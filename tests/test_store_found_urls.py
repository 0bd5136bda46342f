"""The URLs a crawl job found, on SQLite and PostgreSQL alike (store/found_urls): each once,
whichever store or process adds it, bounded, and gone with the site."""

from __future__ import annotations

import asyncio

from snapshotd.store import open_store
from snapshotd.store.found_urls import MAX_FOUND_URLS


async def test_each_url_counts_once_per_site(store) -> None:  # type: ignore[no-untyped-def]
    await store.add_found_urls("a", ["http://s.test/1", "http://s.test/2", "http://s.test/1"])
    await store.add_found_urls("a", ["http://s.test/2", "http://o.test/3"])
    await store.add_found_urls("b", ["http://s.test/1"])
    await store.add_found_urls("a", [])
    assert (await store.found_urls("a"), await store.found_urls("b")) == (3, 1)
    assert await store.found_urls("none") == 0


async def test_stores_adding_at_once_count_each_url_once(store, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Two stores on one database (two processes) adding overlapping batches at once."""
    other = open_store(store.dsn if hasattr(store, "dsn") else store.path)
    await other.open()
    try:
        urls = [f"http://s.test/{n}" for n in range(300)]
        await asyncio.gather(*(
            s.add_found_urls("a", urls[start::3] + urls[::7])
            for start in range(3) for s in (store, other)
        ))
        assert await store.found_urls("a") == await other.found_urls("a") == 300
    finally:
        await other.close()


async def test_past_the_bound_no_url_is_added(store, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr("snapshotd.store.found_urls.MAX_FOUND_URLS", 5)
    assert MAX_FOUND_URLS > 5
    await store.add_found_urls("a", [f"http://s.test/{n}" for n in range(4)])
    await store.add_found_urls("a", [f"http://s.test/{n}" for n in range(4, 7)])  # crosses it
    await store.add_found_urls("a", ["http://s.test/more"])
    assert await store.found_urls("a") == 7


async def test_a_site_cleared_or_removed_has_found_none(store) -> None:  # type: ignore[no-untyped-def]
    await store.put_site("a", "{}")
    await store.add_found_urls("a", ["http://s.test/1", "http://s.test/2"])
    await store.clear_site("a")
    assert await store.found_urls("a") == 0
    await store.add_found_urls("a", ["http://s.test/1"])
    assert await store.found_urls("a") == 1
    await store.clear_site("a", remove=True)
    assert await store.found_urls("a") == 0
