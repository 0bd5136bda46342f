"""The counts of paths per site, state and priority that the database keeps as paths change
(``snapshotd.store.path_counts``): always what a scan of every path shows, on both engines,
whatever changed them, from several connections at once, and in a store upgraded to them."""

from __future__ import annotations

import asyncio
import random
import sqlite3
from typing import Any

import pytest

from snapshotd.store.device_kinds import DEVICE_KINDS
from snapshotd.store.found_urls import FOUND_URLS
from snapshotd.store.interface import PRIORITY_LINK
from snapshotd.store.outcome import CaptureOutcome
from snapshotd.store.owed_profiles import OWED_COLUMN
from snapshotd.store.path_counts import FOLD_AFTER, POSTGRES_PATH_COUNTS, SQLITE_PATH_COUNTS
from snapshotd.store.profile_snapshots import SQLITE_PROFILES
from snapshotd.store.sqlite import SQLiteStore
from tests.conftest import upgrade

pytestmark = pytest.mark.asyncio
SITES = ("a", "b", "c")
DAY = 86400.0


async def scan(store: Any, query: str) -> list[tuple[Any, ...]]:
    """Rows of ``query`` read straight from the database, beside the store."""
    if isinstance(store, SQLiteStore):
        conn = sqlite3.connect(store.path)
        try:
            return [tuple(row) for row in conn.execute(query)]
        finally:
            conn.close()
    return [tuple(row) for row in await store._db.fetch(query)]


async def assert_counts_are_a_scan(store: Any) -> None:
    counts: dict[str, dict[str, int]] = {}
    for site, state, n in await scan(
        store, "SELECT site, state, COUNT(*) FROM paths GROUP BY site, state"
    ):
        counts.setdefault(site, {})[state] = n
    read = await store.counts()
    assert read == counts
    assert all(type(n) is int for of_site in read.values() for n in of_site.values())
    depth = {p: 0 for p in range(4)}
    depth.update(
        await scan(
            store,
            "SELECT priority, COUNT(*) FROM paths WHERE state = 'pending' GROUP BY priority",
        )
    )
    assert await store.queue_depth() == depth
    for site in SITES:
        of_site = counts.get(site, {})
        assert await store.site_size(site) == sum(of_site.values())
        assert await store.counts(site) == ({site: of_site} if of_site else {})
        assert await store.processed(site) == of_site.get("processed", 0)


async def change_at_random(store: Any, rng: random.Random, owner: str) -> None:
    """One of the ways the store changes paths, with arguments drawn from ``rng``."""
    site = rng.choice(SITES)
    path = f"/{rng.randrange(40)}"
    step = rng.randrange(12)
    clock = store.clock
    if step == 0:
        await store.enqueue(site, path, rng.randrange(4), force=rng.random() < 0.2)
    elif step == 1:
        paths = [(f"/{rng.randrange(40)}", 1) for _ in range(rng.randrange(1, 6))]
        await store.enqueue_many(site, paths, rng.randrange(4), force=rng.random() < 0.2)
    elif step == 2:
        await store.add_ignored(site, path)
    elif step in (3, 4, 5):
        record = await store.claim(owner, 60, sites=rng.choice([None, [site]]))
        if record is None:
            return
        if rng.random() < 0.7:
            await store.complete(
                record.site, record.path, owner, CaptureOutcome(
                    html=f"<p>{record.path}</p>", status=200,
                    headers={}, final_url="http://127.0.0.1" + record.path,
                    expires_at=clock() + rng.choice([-1, DAY]), keep=rng.random() < 0.8),
            )
        elif rng.random() < 0.7:
            await store.fail(record.site, record.path, owner, error="x", retry_at=clock() - 1)
    elif step == 6:
        await store.requeue_expired(site, limit=rng.randrange(1, 20))
    elif step == 7:
        await store.release_leases(owner)
    elif step == 8:
        await store.delete_path(site, path)
    elif step == 9 and rng.random() < 0.2:
        await store.clear_site(site, remove=rng.random() < 0.5)
    elif step == 10:
        store.test_clock.now += 61
        await store.release_expired_leases()
    else:
        await store.claim_path(site, path, owner, 60)


async def test_the_counts_are_what_a_scan_of_every_path_shows_after_any_change(store) -> None:  # type: ignore[no-untyped-def]
    rng = random.Random(7)
    await assert_counts_are_a_scan(store)
    for step in range(600):
        await change_at_random(store, rng, "me")
        if step % 25 == 0:
            await assert_counts_are_a_scan(store)
    await assert_counts_are_a_scan(store)
    assert sum(n for c in (await store.counts()).values() for n in c.values()) > 0


async def test_changes_from_several_connections_at_once_are_all_counted(store) -> None:  # type: ignore[no-untyped-def]
    """Writers and readers at once (on PostgreSQL each its own connection, folding while the
    others append): no change is lost or counted twice."""

    async def writer(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(150):
            await change_at_random(store, rng, f"w{seed}")

    async def reader() -> None:
        for _ in range(40):
            await store.counts()
            await asyncio.sleep(0)

    await asyncio.gather(*(writer(seed) for seed in range(4)), reader(), reader())
    await assert_counts_are_a_scan(store)


async def test_a_count_reads_a_few_rows_however_many_changes_came_before(store) -> None:  # type: ignore[no-untyped-def]
    for i in range(FOLD_AFTER + 200):
        await store.enqueue("a", f"/{i}", PRIORITY_LINK)
        if i % 3 == 0:
            await store.claim_path("a", f"/{i}", "me", 60)
    await store.counts()
    (rows,) = await scan(store, "SELECT COUNT(*) FROM path_counts")
    assert rows[0] <= 2
    await assert_counts_are_a_scan(store)


async def test_many_sites_are_folded_only_when_changes_pile_up(store) -> None:  # type: ignore[no-untyped-def]
    """More keys than FOLD_AFTER (many sites): a count folds once, then not again until as
    many changes more have come."""
    sites = [f"s{i}" for i in range(FOLD_AFTER // 4 + 50)]
    for site in sites:
        for priority in range(4):
            await store.enqueue_many(site, [(f"/{priority}", 1)], priority)
    keys = len(sites) * 4
    await store.counts()
    assert (await scan(store, "SELECT COUNT(*) FROM path_counts"))[0][0] == keys
    for i in range(10):
        await store.enqueue(sites[0], f"/new{i}", 0)
    await store.counts()
    await store.counts("s1")
    assert (await scan(store, "SELECT COUNT(*) FROM path_counts"))[0][0] == (
        keys if isinstance(store, SQLiteStore) else keys + 10
    )
    await assert_counts_are_a_scan(store)


# The columns of paths that schema steps after the kept counts add.
LATER_COLUMNS = (
    "found INTEGER NOT NULL DEFAULT 1",
    "readiness_limit BOOLEAN NOT NULL DEFAULT FALSE",
    "not_found TEXT",
)
# The other schema steps after the kept counts, each undone by the statement beside it.
LATER_STEPS = (
    (
        "ALTER TABLE snapshots ADD COLUMN profile TEXT NOT NULL DEFAULT 'desktop'",
        "ALTER TABLE snapshots DROP COLUMN profile",
    ),
    (
        SQLITE_PROFILES.split(";")[1] + ";",
        "DROP TABLE profile_snapshots",
    ),
    (
        "ALTER TABLE snapshots ADD COLUMN text_changed_at DOUBLE PRECISION",
        "ALTER TABLE snapshots DROP COLUMN text_changed_at",
    ),
    *((f"{table};", "DROP TABLE " + table.split()[2]) for table in FOUND_URLS["postgres"]
      .split(";")[:2]),
    (DEVICE_KINDS.split(";")[0] + ";", "DROP TABLE device_kinds"),
    (OWED_COLUMN, "ALTER TABLE snapshots DROP COLUMN owed"),
)


async def _run(store: Any, statement: str) -> None:
    if isinstance(store, SQLiteStore):
        async with store._lock:
            await store._writer.execute(statement)
    else:
        await store._db.execute(
            statement.replace(" BLOB ", " BYTEA ").replace(" REAL ", " DOUBLE PRECISION ")
        )


async def _alter(store: Any, change: str) -> None:
    if isinstance(store, SQLiteStore):
        async with store._lock:
            await store._writer.execute(f"ALTER TABLE paths {change}")
    else:
        await store._db.execute(f"ALTER TABLE paths {change}")


@pytest.mark.parametrize("engine", ["sqlite", "postgres"])
async def test_a_store_upgraded_to_kept_counts_starts_from_its_paths(  # type: ignore[no-untyped-def]
    engine, tmp_path, monkeypatch
) -> None:
    async with upgrade(engine, tmp_path) as db:
        module, full, make = db.module, db.full, db.make
        # The schema before the step that keeps the counts.
        step = full.index(SQLITE_PATH_COUNTS if engine == "sqlite" else POSTGRES_PATH_COUNTS)
        monkeypatch.setattr(module, "MIGRATIONS", full[:step])
        old = make()
        await old.open()
        old.test_clock = old.clock
        # Today's writes need the columns later steps add: there while they run, not after.
        for column in LATER_COLUMNS:
            await _alter(old, f"ADD COLUMN {column}")
        for step_in, _ in LATER_STEPS:
            await _run(old, step_in)
        rng = random.Random(3)
        for _ in range(200):
            await change_at_random(old, rng, "me")
        for column in LATER_COLUMNS:
            await _alter(old, f"DROP COLUMN {column.split()[0]}")
        for _, step_out in reversed(LATER_STEPS):
            await _run(old, step_out)
        await old.close()
        monkeypatch.setattr(module, "MIGRATIONS", full)
        new = make()
        await new.open()
        try:
            assert await new.schema_version() == len(full)
            assert await new.counts()
            await assert_counts_are_a_scan(new)
        finally:
            await new.close()

