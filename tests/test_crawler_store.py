"""The store operations the crawler adds: filtered claims, lease take-over, requeue by state."""

from __future__ import annotations

from snapshotd.store.outcome import CaptureOutcome


async def test_claim_for_some_sites_reaches_past_a_queue_head_of_other_sites(store):
    clock = store.test_clock
    await store.enqueue_many("big", [(f"/b/{i}", 1) for i in range(600)], 2)
    clock.now += 1
    await store.enqueue("small", "/s/old", 0)
    clock.now += 1
    await store.enqueue("small", "/s/new", 0)
    await store.enqueue("small", "/s/high", 1)
    order = []
    while (record := await store.claim("w", 60, sites=["small"])) is not None:
        order.append(record.path)
    assert order == ["/s/high", "/s/old", "/s/new"]
    first = await store.claim("w", 60, sites=["small", "big"])
    assert first is not None and first.path == "/b/0"
    assert await store.claim("w", 60, sites=[]) is None


async def test_claim_for_some_sites_within_a_short_queue(store):
    await store.enqueue("a", "/a", 3)
    await store.enqueue("b", "/b", 0)
    assert (await store.claim("w", 60, sites=["b"])).path == "/b"
    assert await store.claim("w", 60, sites=["b"]) is None
    assert (await store.claim("w", 60, sites=["a", "b"])).path == "/a"


async def test_lease_owners_and_release(store):
    await store.enqueue_many("s", [("/1", 0), ("/2", 0), ("/3", 0)], 1)
    await store.claim_path("s", "/1", "host:1:a", 60)
    await store.claim_path("s", "/2", "host:1:a", 60)
    await store.claim_path("s", "/3", "host:2:b", 60)
    assert sorted(await store.lease_owners()) == ["host:1:a", "host:2:b"]
    assert await store.release_leases("host:1:a") == 2
    assert (await store.get_path("s", "/1")).state == "pending"
    assert (await store.get_path("s", "/1")).lease_owner is None
    assert (await store.get_path("s", "/3")).state == "processing"
    # Released paths can be completed by no one until claimed again.
    assert not await store.fail("s", "/1", "host:1:a", error="x", retry_at=0)


async def test_a_lease_handed_back_by_its_owner_is_not_a_counted_attempt(store):
    await store.enqueue_many("s", [("/1", 0), ("/2", 0), ("/3", 0)], 1)
    for path in ("/1", "/2", "/3"):
        assert (await store.claim_path("s", path, "me", 60)).attempts == 1
    assert not await store.release("s", "/1", "someone else")
    assert await store.release("s", "/1", "me")
    assert not await store.release("s", "/1", "me")  # no longer leased
    released = await store.get_path("s", "/1")
    assert (released.state, released.attempts, released.lease_owner) == ("pending", 0, None)
    assert (await store.get_path("s", "/2")).state == "processing"
    assert await store.release_leases("me") == 2
    for path in ("/2", "/3"):
        assert (await store.get_path("s", path)).attempts == 0, path
    # A failure still counts: the next claim is the first attempt again, then failed.
    assert (await store.claim_path("s", "/1", "me", 60)).attempts == 1
    assert await store.fail("s", "/1", "me", error="timeout", retry_at=0)
    assert (await store.get_path("s", "/1")).attempts == 1


async def test_requeue_expired_by_state(store):
    clock = store.test_clock
    await store.enqueue_many("s", [("/ok", 0), ("/bad", 0)], 1)
    await store.claim_path("s", "/ok", "w", 60)
    await store.claim_path("s", "/bad", "w", 60)
    await store.complete(
        "s",
        "/ok",
        "w",
        CaptureOutcome(html="<p>x</p>",
            status=200,
            headers={},
            final_url="",
            expires_at=clock.now + 10),
    )
    await store.fail("s", "/bad", "w", error="timeout", retry_at=clock.now + 10)
    clock.now += 11
    assert await store.requeue_expired("s", states=("error",)) == 1
    assert (await store.get_path("s", "/bad")).state == "pending"
    assert (await store.get_path("s", "/ok")).state == "processed"
    assert await store.requeue_expired("s", states=()) == 0
    assert await store.requeue_expired("s") == 1
    assert (await store.get_path("s", "/ok")).priority == 0
