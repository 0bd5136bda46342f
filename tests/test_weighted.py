"""The semaphore whose holders take several units at once (snapshotd.capture.weighted)."""

from __future__ import annotations

import asyncio

from snapshotd.capture.weighted import WeightedSemaphore


async def test_a_holder_waits_for_all_its_units_and_takes_them_at_once() -> None:
    slots = WeightedSemaphore(3)
    order: list[str] = []
    first_in, release_first = asyncio.Event(), asyncio.Event()

    async def hold(name: str, units: int, until: asyncio.Event | None = None) -> None:
        async with slots.take(units):
            order.append(f"{name} in ({slots.free} free)")
            if name == "a":
                first_in.set()
            if until is not None:
                await until.wait()
        order.append(f"{name} out")

    a = asyncio.ensure_future(hold("a", 2, release_first))
    await first_in.wait()
    b = asyncio.ensure_future(hold("b", 2))
    c = asyncio.ensure_future(hold("c", 1))  # fits, but comes after b: it waits its turn
    await asyncio.sleep(0.01)
    assert order == ["a in (1 free)"] and slots.free == 1
    release_first.set()
    await asyncio.gather(a, b, c)
    # Both granted in one step as a left (b sees c's unit taken already): b first, then c.
    assert order == [
        "a in (1 free)", "a out", "b in (0 free)", "b out", "c in (2 free)", "c out",
    ]
    assert slots.free == 3


async def test_a_cancelled_waiter_takes_nothing_and_more_than_all_is_all() -> None:
    slots = WeightedSemaphore(2)
    async with slots.take(5):
        assert slots.free == 0
        waiting = asyncio.ensure_future(slots.take(1).__aenter__())
        await asyncio.sleep(0.01)
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
    assert slots.free == 2
    async with slots.take(1), slots.take(1):
        assert slots.free == 0
    assert slots.free == 2
