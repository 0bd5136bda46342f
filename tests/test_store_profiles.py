"""Snapshots known by (site, path, device profile), on SQLite and PostgreSQL alike."""

from __future__ import annotations

import asyncio
import sqlite3
from typing import Any

from snapshotd.store.outcome import CaptureOutcome, Variant
from snapshotd.store.profile_snapshots import SQLITE_PROFILES
from snapshotd.store.sqlite import MIGRATIONS, SQLiteStore


async def _capture(store: Any, path: str, html: str, **kw: Any) -> bool:
    await store.enqueue("site", path, 1, force=True)
    assert await store.claim_path("site", path, "me", 60)
    return bool(
        await store.complete(
            "site", path, "me", CaptureOutcome(html=html, status=200, headers={}, final_url="u",
                expires_at=9e9, **kw),
        )
    )


async def _profile_rows(store: Any) -> int:
    sql = "SELECT COUNT(*) FROM profile_snapshots"
    if hasattr(store, "_db"):
        return int(await store._db.fetchval(sql))
    return int((await store._one(sql, ()))[0])


async def test_a_profile_that_differs_has_its_own_snapshot_and_the_others_the_path_s(store):
    desktop = Variant("desktop", "<p>wide layout</p>", 200, {"X-Robots-Tag": "noarchive"}, "w")
    assert await _capture(store, "/a", "<p>phone layout</p>", profile="mobile", variants=[desktop])
    mobile = await store.get_snapshot("site", "/a", "mobile")
    assert (mobile.html, mobile.profile) == ("<p>phone layout</p>", "mobile")
    wide = await store.get_snapshot("site", "/a", "desktop")
    assert (wide.html, wide.profile, wide.headers) == (
        "<p>wide layout</p>", "desktop", {"X-Robots-Tag": "noarchive"},
    )
    assert wide.etag != mobile.etag
    # Without a profile: the path's own snapshot.
    assert (await store.get_snapshot("site", "/a")).html == "<p>phone layout</p>"


async def test_a_page_that_renders_the_same_in_both_profiles_keeps_one_copy(store):
    desktop = Variant("desktop", "<p>wide</p>", 200, {}, "w")
    assert await _capture(store, "/b", "<p>narrow</p>", profile="mobile", variants=[desktop])
    assert await _profile_rows(store) == 1
    # The next capture finds both the same: the desktop row goes, one copy serves both.
    assert await _capture(store, "/b", "<p>same</p>", profile="mobile")
    assert await _profile_rows(store) == 0
    both = [await store.get_snapshot("site", "/b", p) for p in ("mobile", "desktop")]
    assert [(s.html, s.profile) for s in both] == [("<p>same</p>", "mobile")] * 2


async def test_a_copy_is_served_its_master_s_snapshot_of_each_profile(store):
    desktop = Variant("desktop", "<p>master wide</p>", 200, {}, "w")
    assert await _capture(store, "/master", "<p>master</p>", profile="mobile", variants=[desktop])
    assert await _capture(
        store, "/copy", "<p>master</p>", profile="mobile", duplicate_of="/master", shared=True,
        variants=[Variant("desktop", "<p>never kept</p>", 200, {}, "w")],
    )
    assert (await store.get_snapshot("site", "/copy", "desktop")).html == "<p>master wide</p>"
    assert (await store.get_snapshot("site", "/copy", "mobile")).html == "<p>master</p>"
    assert await _profile_rows(store) == 1


async def test_removing_a_path_or_keeping_it_crawled_only_removes_its_profile_rows(store):
    desktop = Variant("desktop", "<p>wide</p>", 200, {}, "w")
    assert await _capture(store, "/c", "<p>narrow</p>", profile="mobile", variants=[desktop])
    assert await _capture(store, "/c", "<p>narrow</p>", profile="mobile", keep=False)
    assert await _profile_rows(store) == 0
    assert await _capture(store, "/d", "<p>narrow</p>", profile="mobile", variants=[desktop])
    assert await store.delete_path("site", "/d")
    assert await _profile_rows(store) == 0


async def test_snapshots_stored_before_profiles_become_desktop_and_serve_every_profile(
    tmp_path,
):
    db = str(tmp_path / "v11.db")
    async with SQLiteStore(db) as s:
        assert await s.schema_version() == len(MIGRATIONS)
    # Back to the schema before profiles (and the steps after it), with a snapshot stored then.
    conn = sqlite3.connect(db)
    conn.execute("DROP TABLE profile_snapshots")
    conn.execute("ALTER TABLE snapshots DROP COLUMN profile")
    conn.execute("ALTER TABLE snapshots DROP COLUMN text_changed_at")
    conn.execute("DROP TABLE found_urls")
    conn.execute("DROP TABLE found_url_counts")
    conn.execute("DROP INDEX paths_not_found")
    conn.execute("ALTER TABLE paths DROP COLUMN not_found")
    conn.execute("DROP TABLE device_kinds")
    conn.execute("ALTER TABLE snapshots DROP COLUMN owed")
    conn.execute(
        "DELETE FROM schema_migrations WHERE version > ?", (MIGRATIONS.index(SQLITE_PROFILES),)
    )
    conn.execute(
        "INSERT INTO paths (site, path, state, priority, created_at, queued_at, expires_at) "
        "VALUES ('site', '/old', 'processed', 1, 0, 0, 9e9)"
    )
    conn.execute(
        "INSERT INTO snapshots (path_id, body_gz, status, headers, etag, content_hash, "
        "final_url, captured_at) VALUES (1, ?, 200, '{}', '\"e\"', 'h', 'u', 1)",
        (__import__("gzip").compress(b"<p>old</p>"),),
    )
    conn.commit()
    conn.close()
    async with SQLiteStore(db) as s:
        assert await s.schema_version() == len(MIGRATIONS)
        for profile in (None, "mobile", "desktop"):
            old = await s.get_snapshot("site", "/old", profile)
            assert (old.html, old.profile) == ("<p>old</p>", "desktop")
        # Its main text is taken to have changed when it was captured.
        assert await s.sitemap_pages("site", 0, 10) == [("/old", 1.0)]


async def test_own_profiles_name_the_profiles_each_path_holds_a_snapshot_for(store):
    desktop = Variant("desktop", "<p>wide</p>", 200, {}, "w")
    assert await _capture(store, "/two", "<p>narrow</p>", profile="mobile", variants=[desktop])
    assert await _capture(store, "/one", "<p>alike</p>", profile="mobile")
    await store.enqueue("site", "/none", 1)
    many = [f"/n{i}" for i in range(1200)]  # past one batch of the query
    assert await store.own_profiles("site", ["/two", "/one", "/none", *many]) == {
        "/two": ("mobile", "desktop"),
        "/one": ("mobile",),
    }
    assert await store.own_profiles("site", []) == {}


async def test_a_snapshot_says_which_profile_the_path_s_own_was_rendered_as(store):
    desktop = Variant("desktop", "<p>wide</p>", 200, {}, "w")
    assert await _capture(store, "/e", "<p>narrow</p>", profile="mobile", variants=[desktop])
    wide = await store.get_snapshot("site", "/e", "desktop")
    assert (wide.profile, wide.own_profile) == ("desktop", "mobile")
    own = await store.get_snapshot("site", "/e")
    assert (own.profile, own.own_profile) == ("mobile", "mobile")


async def test_the_copies_of_a_site_are_counted(store):
    assert await store.count_copies("site") == 0
    assert await _capture(store, "/one", "<p>one</p>", profile="mobile")
    assert await _capture(store, "/two", "<p>one</p>", profile="mobile", duplicate_of="/one",
                          shared=True)
    assert await _capture(store, "/three", "<p>one</p>", profile="mobile",
                          duplicate_of="/one", shared=True)
    assert await store.count_copies("site") == 2
    assert await store.count_copies("other") == 0


async def test_an_owed_profile_settled_while_a_capture_is_stored_never_outlives_it(store):
    # A capture being stored and an owed profile settled at once, on two connections: the
    # settle waits for the capture and keeps nothing, and the capture's own rows stand.
    clock = store.test_clock
    assert await _capture(store, "/a", "<p>phone</p>", owed=["desktop"])
    owing = await store.get_snapshot("site", "/a", "desktop")
    assert owing.unrendered
    clock.now += 10
    await store.enqueue("site", "/a", 1, force=True)
    assert await store.claim_path("site", "/a", "me", 60)
    wide = Variant("desktop", "<p>new wide layout</p>", 200, {}, "u")
    outcome = CaptureOutcome(html="<p>new phone</p>", status=200, headers={}, final_url="u",
                             expires_at=9e9, variants=[wide])
    stale = Variant("desktop", "<p>wide layout of the capture before</p>", 200, {}, "u")
    if not hasattr(store, "_db"):  # SQLite: one writer, the two cannot interleave
        assert await store.complete("site", "/a", "me", outcome)
        assert not await store.settle_owed("site", "/a", "desktop", owing.captured_at, stale)
    else:
        from snapshotd.store.outcome import capture_writes, mark_path_stored

        async with store._db.acquire() as conn:
            tx = conn.transaction()
            await tx.start()
            sql, args = mark_path_stored("site", "/a", "me", outcome, clock.now, "$")
            pid = await conn.fetchval(sql, *args)
            writes = capture_writes("site", "/a", pid, outcome, clock.now, "$")
            await conn.execute(writes[0][0], *writes[0][1])  # its profile rows deleted
            settle = asyncio.ensure_future(
                store.settle_owed("site", "/a", "desktop", owing.captured_at, stale)
            )
            for _ in range(200):  # until the settle is done, or waits on a lock
                waiting = await store._db.fetchval(
                    "SELECT count(*) FROM pg_locks WHERE NOT granted")
                if settle.done() or waiting:
                    break
                await asyncio.sleep(0.05)
            for sql, args in writes[1:]:
                await conn.execute(sql, *args)
            await tx.commit()
        assert not await settle
    desktop = await store.get_snapshot("site", "/a", "desktop")
    assert desktop.html == "<p>new wide layout</p>" and not desktop.unrendered
    assert await _profile_rows(store) == 1
