"""The SQLite store on a real file."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

from snapshotd.store.interface import StoreError
from snapshotd.store.outcome import CaptureOutcome
from snapshotd.store.sqlite import MIGRATIONS, SQLiteStore


async def test_schema_is_versioned_and_reopening_keeps_data(tmp_path):
    db = str(tmp_path / "s.db")
    async with SQLiteStore(db) as s:
        assert await s.schema_version() == len(MIGRATIONS) == 19
        await s.enqueue("site", "/a", 1)
    async with SQLiteStore(db) as s:
        assert await s.schema_version() == 19
        assert (await s.get_path("site", "/a")).state == "pending"
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("SELECT COUNT(*) FROM schema_migrations").fetchone()[0] == 19


async def test_a_version_1_file_is_upgraded_with_its_rows(tmp_path):
    db = str(tmp_path / "v1.db")
    conn = sqlite3.connect(db)
    conn.executescript(MIGRATIONS[0])
    conn.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at REAL)")
    conn.execute("INSERT INTO schema_migrations VALUES (1, 0)")
    conn.execute(
        "INSERT INTO paths (site, path, state, priority, created_at, queued_at) "
        "VALUES ('site', '/old', 'processed', 1, 0, 0)"
    )
    conn.commit()
    conn.close()
    async with SQLiteStore(db) as s:
        assert await s.schema_version() == 19
        assert (await s.get_path("site", "/old")).state == "processed"
        # Stored before the crawler's findings were told from bots' requests: found.
        assert (await s.get_path("site", "/old")).found
        assert (await s.get_path("site", "/old")).readiness_limit is False
        assert await s.counts() == {"site": {"processed": 1}}
        await s.add_counters([(1, "site", "capture:ok", 1)])
        assert await s.counters(0) == [(1, "site", "capture:ok", 1)]
        # Stored before links were tracked: nothing to follow again.
        assert await s.links_due("site", captured_before=9e9) == []


async def test_a_capture_cut_by_a_readiness_limit_is_marked_until_the_next_capture(store):
    await store.enqueue("site", "/clock", 1)
    await store.claim_path("site", "/clock", "me", 60)
    assert await store.complete(
        "site", "/clock", "me", CaptureOutcome(
            html="<p>tick</p>", status=200, headers={}, final_url="u",
            expires_at=9e9, readiness_limit=True),
    )
    assert (await store.get_path("site", "/clock")).readiness_limit is True
    listed, _ = await store.list_paths("site", state=None, prefix=None, limit=10, cursor=None)
    assert [r.readiness_limit for r in listed] == [True]
    assert [r.readiness_limit async for r in store.iter_paths("site")] == [True]
    await store.enqueue("site", "/clock", 0, force=True)
    await store.claim_path("site", "/clock", "me", 60)
    assert await store.complete(
        "site", "/clock", "me", CaptureOutcome(
            html="<p>tock</p>", status=200, headers={}, final_url="u",
            expires_at=9e9),
    )
    assert (await store.get_path("site", "/clock")).readiness_limit is False


async def test_links_due_until_followed(store):
    for path in ("/a", "/b", "/c"):
        await store.enqueue("site", path, 1)
        await store.claim_path("site", path, "me", 60)
    await store.complete(
        "site", "/a", "me", CaptureOutcome(
            html="<p>a</p>", status=200, headers={}, final_url="u", expires_at=9e9,
            links_due=True),
    )
    await store.complete(
        "site", "/b", "me", CaptureOutcome(
            html="<p>b</p>", status=200, headers={}, final_url="u", expires_at=9e9)
    )
    await store.complete(
        "site", "/c", "me", CaptureOutcome(
            html="<p>c</p>", status=200, headers={}, final_url="u", expires_at=9e9,
            links_due=True),
    )
    due = await store.links_due("site", captured_before=9e9)
    assert [path for _id, path in due] == ["/a", "/c"]
    assert await store.links_due("site", after=due[0][0], captured_before=9e9) == due[1:]
    assert await store.links_due("site", captured_before=store.test_clock.now) == []
    assert await store.links_due("other", captured_before=9e9) == []
    await store.links_followed("site", "/a")
    assert await store.links_due("site", captured_before=9e9) == due[1:]
    # A capture stored by a process without a crawler keeps a due mark for the next crawler.
    await store.enqueue("site", "/c", 0, force=True)
    await store.claim_path("site", "/c", "other", 60)
    await store.complete(
        "site", "/c", "other", CaptureOutcome(
            html="<p>c2</p>", status=200, headers={}, final_url="u",
            expires_at=9e9),
    )
    assert await store.links_due("site", captured_before=9e9) == due[1:]


async def test_newer_schema_is_refused(tmp_path):
    db = str(tmp_path / "s.db")
    async with SQLiteStore(db):
        pass
    conn = sqlite3.connect(db)
    conn.execute("INSERT INTO schema_migrations VALUES (99, 0)")
    conn.commit()
    with pytest.raises(StoreError, match="s.db: schema version 99 is newer"):
        await SQLiteStore(db).open()


async def test_a_file_that_is_not_a_database_is_one_clear_error(tmp_path):
    db = tmp_path / "notes.db"
    db.write_text("not a database, just text\n" * 200)
    with pytest.raises(StoreError, match="notes.db: file is not a database"):
        await SQLiteStore(str(db)).open()
    assert db.read_text().startswith("not a database")  # left as it was


async def test_claim_order_is_priority_then_oldest(store):
    clock = store.test_clock
    for path, prio in [("/link1", 1), ("/old", 0), ("/api", 2), ("/bot", 3), ("/link2", 1)]:
        await store.enqueue("s", path, prio)
        clock.now += 1
    order = []
    while (r := await store.claim("w", 60)) is not None:
        order.append(r.path)
    assert order == ["/bot", "/api", "/link1", "/link2", "/old"]


async def test_enqueue_answers(store):
    clock = store.test_clock
    assert await store.enqueue("s", "/a", 1) == "queued"
    assert await store.enqueue("s", "/a", 1) == "pending"
    assert await store.enqueue("s", "/a", 3) == "reprioritised"
    assert (await store.get_path("s", "/a")).priority == 3
    r = await store.claim("w", 60)
    assert await store.enqueue("s", "/a", 2) == "processing"
    assert await store.complete(
        "s",
        r.path,
        "w",
        CaptureOutcome(html="<p>x</p>",
            status=200,
            headers={},
            final_url="u",
            expires_at=clock.now + 100),
    )
    assert await store.enqueue("s", "/a", 2) == "fresh"
    assert await store.enqueue("s", "/a", 2, force=True) == "requeued"
    with pytest.raises(ValueError):
        await store.enqueue("s", "/b", 7)


async def test_concurrent_claims_never_share_a_path(store):
    for i in range(50):
        await store.enqueue("s", f"/{i}", 1)
    claims = await asyncio.gather(*(store.claim(f"w{i}", 60) for i in range(60)))
    paths = [c.path for c in claims if c is not None]
    assert len(paths) == 50 and len(set(paths)) == 50


async def test_expired_leases_return_to_pending_and_old_owner_cannot_complete(store):
    clock = store.test_clock
    await store.enqueue("s", "/a", 3)
    r = await store.claim("dead", 30)
    clock.now += 31
    assert await store.release_expired_leases() == 1
    rec = await store.get_path("s", "/a")
    assert rec.state == "pending" and rec.priority == 3
    r2 = await store.claim("alive", 30)
    assert r2.path == r.path
    assert not await store.complete(
        "s", "/a", "dead", CaptureOutcome(
            html="x", status=200, headers={}, final_url="", expires_at=0)
    )
    assert await store.complete(
        "s", "/a", "alive", CaptureOutcome(
            html="x", status=200, headers={}, final_url="", expires_at=0)
    )


async def test_snapshot_roundtrip_compressed_and_failure_keeps_it(store):
    clock = store.test_clock
    html = "<html><body>" + "é" * 5000 + "</body></html>"
    await store.enqueue("s", "/a", 1)
    await store.claim("w", 60)
    await store.complete(
        "s",
        "/a",
        "w",
        CaptureOutcome(html=html,
            status=200,
            headers={"Link": "<x>"},
            final_url="http://o/a",
            expires_at=clock.now + 10),
    )
    snap = await store.get_snapshot("s", "/a")
    assert snap.html == html and snap.headers == {"Link": "<x>"} and snap.etag.startswith('"')
    assert len(snap.body_gz) < len(html.encode()) / 10
    clock.now += 11
    assert await store.requeue_expired("s") == 1
    rec = await store.get_path("s", "/a")
    assert (rec.state, rec.priority) == ("pending", 0)
    await store.claim("w", 60)
    assert await store.fail("s", "/a", "w", error="timeout", retry_at=clock.now + 60)
    assert (await store.get_snapshot("s", "/a")).html == html
    rec = await store.get_path("s", "/a")
    assert (rec.state, rec.error) == ("error", "timeout")


async def test_list_paths_cursor_is_stable_while_adding(store):
    for i in range(10):
        await store.enqueue("s", f"/p{i}", 1)
    page1, cursor = await store.list_paths("s", limit=4)
    assert [r.path for r in page1] == ["/p9", "/p8", "/p7", "/p6"]
    for i in range(10, 15):
        await store.enqueue("s", f"/p{i}", 1)
    page2, cursor = await store.list_paths("s", limit=4, cursor=cursor)
    assert [r.path for r in page2] == ["/p5", "/p4", "/p3", "/p2"]
    page3, cursor = await store.list_paths("s", limit=4, cursor=cursor)
    assert [r.path for r in page3] == ["/p1", "/p0"] and cursor is None
    pre, _ = await store.list_paths("s", prefix="/p1")
    assert {r.path for r in pre} == {"/p1", "/p10", "/p11", "/p12", "/p13", "/p14"}


async def test_delete_removes_path_and_snapshot(store):
    await store.enqueue("s", "/a", 1)
    await store.claim("w", 60)
    await store.complete(
        "s", "/a", "w", CaptureOutcome(html="x", status=200, headers={}, final_url="", expires_at=0)
    )
    assert await store.delete_path("s", "/a")
    assert await store.get_snapshot("s", "/a") is None
    assert not await store.delete_path("s", "/a")


@pytest.mark.parametrize("steps", [0, 1, 2, 3, 4, 6])
async def test_a_write_cancelled_mid_transaction_leaves_no_transaction_open(tmp_path, steps):
    db = str(tmp_path / "s.db")
    async with SQLiteStore(db) as s:
        task = asyncio.ensure_future(s.enqueue_many("site", [("/a", 0), ("/b", 0)], 1))
        for _ in range(steps):
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # The store goes on working, and what it writes is committed for other readers.
        await s.enqueue("site", "/c", 1)
        await s.claim_path("site", "/c", "me", 60)
        conn = sqlite3.connect(db)
        try:
            assert conn.execute("SELECT state FROM paths WHERE path = '/c'").fetchone() == (
                "processing",
            )
        finally:
            conn.close()


async def test_a_batch_is_claimed_in_its_own_order(store):
    await store.enqueue_many("s", [("/z", 0), ("/b", 0), ("/m", 0), ("/a", 0)], 1)
    claimed = [(await store.claim("w", 60)).path for _ in range(4)]
    assert claimed == ["/z", "/b", "/m", "/a"]


async def test_a_site_behind_a_full_queue_is_claimed_at_once(store):
    await store.enqueue_many("big", [(f"/{i}", 0) for i in range(600)], 2)
    await store.enqueue("small", "/only", 0)
    record = await store.claim("w", 60, sites=["small"])
    assert (record.site, record.path) == ("small", "/only")
    assert await store.claim("w", 60, sites=["small"]) is None
    both = await store.claim("w", 60, sites=["small", "big"])
    assert (both.site, both.path) == ("big", "/0")


async def test_replace_meta_sets_a_value_only_while_it_is_the_one_expected(store) -> None:  # type: ignore[no-untyped-def]
    assert await store.replace_meta("k", None, "1")
    assert not await store.replace_meta("k", None, "2")  # set already
    assert not await store.replace_meta("k", "0", "2")  # not what it is
    assert await store.get_meta("k") == "1"
    assert await store.replace_meta("k", "1", "2")
    assert await store.get_meta("k") == "2"


async def test_a_capture_of_a_site_whose_snapshots_never_expire_is_never_queued_again(store):
    import math

    from snapshotd.config.settings import SiteSettings

    site = SiteSettings(name="site", expire_after=math.inf)  # expire_after = "never"
    await store.enqueue("site", "/kept", 1)
    await store.claim_path("site", "/kept", "me", 60)
    now = store.test_clock()
    assert await store.complete(
        "site", "/kept", "me", CaptureOutcome(
            html="<p>kept</p>", status=200, headers={}, final_url="u",
            expires_at=now + site.expire_after),
    )
    store.test_clock.now += 100 * 365 * 86400
    assert await store.requeue_expired("site", limit=10) == 0
    record = await store.get_path("site", "/kept")
    assert record.state == "processed" and record.expires_at == math.inf
