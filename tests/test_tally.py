"""Counts read from a real store (both engines) only when due: ``snapshotd.store.count_cache``."""

from __future__ import annotations

import asyncio

from snapshotd.store.count_cache import SLOWER, CountCache


async def test_a_count_is_read_again_only_when_due_and_adds_this_process_s_paths(store) -> None:  # type: ignore[no-untyped-def]
    now = [1000.0]
    reads: list[str] = []

    async def size(site: str) -> int:
        reads.append(site)
        now[0] += 0.25  # the read takes a quarter of a second
        return await store.site_size(site)

    for n in range(3):
        await store.enqueue("s", f"/{n}", 1)
    tally = CountCache(size, every=1.0, clock=lambda: now[0])
    assert await tally.get("s") == 3
    await store.enqueue("s", "/3", 1)
    tally.add("s")  # added here
    await store.enqueue("s", "/4", 1)  # added by another process: seen at the next read
    now[0] += 0.25 * SLOWER - 0.01  # not due yet: 20 times the read, more than `every`
    assert await tally.get("s") == 4 and reads == ["s"]
    now[0] += 0.01
    assert await tally.get("s") == 5 and reads == ["s", "s"]
    tally.add("t")  # never read: nothing to add to
    assert await tally.get("t") == 0 and reads == ["s", "s", "t"]


async def test_a_quick_count_is_read_again_after_every_seconds(store) -> None:  # type: ignore[no-untyped-def]
    now = [0.0]
    tally = CountCache(store.site_size, every=1.0, clock=lambda: now[0])
    assert await tally.get("s") == 0
    await store.enqueue("s", "/", 1)
    now[0] += 0.99
    assert await tally.get("s") == 0
    now[0] += 0.01
    assert await tally.get("s") == 1


async def test_callers_wait_for_the_read_under_way_and_fresh_reads_at_once(store) -> None:  # type: ignore[no-untyped-def]
    reads = 0
    gate = asyncio.Event()

    async def size(site: str) -> int:
        nonlocal reads
        reads += 1
        await gate.wait()
        return await store.site_size(site)

    tally = CountCache(size, every=60.0)
    waiting = [asyncio.ensure_future(tally.get("s")) for _ in range(5)]
    await asyncio.sleep(0.01)
    gate.set()
    assert await asyncio.gather(*waiting) == [0] * 5 and reads == 1
    await store.enqueue("s", "/", 1)
    assert await tally.get("s") == 0 and reads == 1
    assert await tally.get("s", fresh=True) == 1 and reads == 2
