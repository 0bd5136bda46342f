"""What only the PostgreSQL store has to show: several processes (hosts) on one database.

Every test of tests/test_store.py runs on PostgreSQL too (the ``store`` fixture); these add
separate connection pools standing for separate hosts, the schema's creation by processes
starting together, and its errors.
"""

from __future__ import annotations

import asyncio
import socket

import asyncpg
import pytest

from snapshotd.store import StoreError, open_store
from snapshotd.store.outcome import CaptureOutcome
from snapshotd.store.postgres import MIGRATIONS, PostgresStore
from tests.conftest import drop_postgres_schema, postgres_schema


@pytest.fixture
async def schema():
    name, url = await postgres_schema()
    yield url
    await drop_postgres_schema(name)


async def test_a_postgresql_url_selects_the_postgresql_store(schema):
    store = open_store(schema)
    assert isinstance(store, PostgresStore)
    await store.open()
    try:
        assert await store.ping()
        assert await store.schema_version() == len(MIGRATIONS)
    finally:
        await store.close()


async def test_processes_starting_together_create_the_schema_once(schema):
    stores = [PostgresStore(schema, pool_size=2) for _ in range(4)]
    await asyncio.gather(*(s.open() for s in stores))
    try:
        conn = await asyncpg.connect(schema)
        try:
            assert await conn.fetchval("SELECT COUNT(*) FROM schema_migrations") == len(MIGRATIONS)
        finally:
            await conn.close()
    finally:
        await asyncio.gather(*(s.close() for s in stores))


async def test_workers_on_several_hosts_never_claim_the_same_path(schema):
    hosts = [PostgresStore(schema, pool_size=3) for _ in range(3)]
    for store in hosts:
        await store.open()
    try:
        await hosts[0].enqueue_many("s", [(f"/{i}", 0) for i in range(120)], 1)
        claims = await asyncio.gather(
            *(hosts[i % 3].claim(f"host{i % 3}:w{i}", 60) for i in range(150))
        )
        paths = [c.path for c in claims if c is not None]
        assert len(paths) == 120 and len(set(paths)) == 120
        # Each can complete only what it claimed.
        record = next(c for c in claims if c is not None)
        owner = int(record.lease_owner[4])
        other = hosts[(owner + 1) % 3]
        assert not await other.complete(
            "s", record.path, "someone-else", CaptureOutcome(
                html="x", status=200, headers={}, final_url="",
                expires_at=0),
        )
        assert await hosts[owner].complete(
            "s", record.path, record.lease_owner, CaptureOutcome(
                html="<p>x</p>", status=200, headers={},
                final_url="", expires_at=9e9),
        )
        assert (await other.get_snapshot("s", record.path)).html == "<p>x</p>"
    finally:
        for store in hosts:
            await store.close()


async def test_enqueueing_the_same_new_paths_from_two_hosts_queues_each_once(schema):
    a, b = PostgresStore(schema, pool_size=2), PostgresStore(schema, pool_size=2)
    await a.open()
    await b.open()
    try:
        paths = [(f"/p{i}", 1) for i in range(100)]
        first, second = await asyncio.gather(
            a.enqueue_many("s", paths, 1), b.enqueue_many("s", list(reversed(paths)), 2)
        )
        # Every path is new to exactly one of them.
        outcomes = list(zip(first, reversed(second), strict=True))
        allowed = (["queued", "reprioritised"], ["pending", "queued"])
        assert all(sorted(o) in allowed for o in outcomes)
        assert await a.site_size("s") == 100
    finally:
        await a.close()
        await b.close()


async def test_a_newer_schema_is_refused(schema):
    async with PostgresStore(schema):
        pass
    conn = await asyncpg.connect(schema)
    try:
        await conn.execute("INSERT INTO schema_migrations VALUES (99, 0)")
    finally:
        await conn.close()
    with pytest.raises(StoreError, match="schema version 99 is newer"):
        await PostgresStore(schema).open()


async def test_a_server_that_does_not_answer_is_one_clear_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here
    store = PostgresStore(f"postgresql://snap:secret@127.0.0.1:{port}/snapshots")
    with pytest.raises(StoreError) as caught:
        await store.open()
    message = str(caught.value)
    assert message.startswith(f"postgresql://127.0.0.1:{port}/snapshots: ")
    assert "secret" not in message and "snap:" not in message


async def test_releasing_leases_while_a_batch_is_queued_never_deadlocks(schema):
    a, b = PostgresStore(schema, pool_size=2), PostgresStore(schema, pool_size=2)
    await a.open()
    await b.open()
    try:
        for round_ in range(3):
            # Two leases that have run out, "/b" stored before "/a".
            for path in (f"/b{round_}", f"/a{round_}"):
                await a.enqueue("s", path, 1)
                assert await a.claim_path("s", path, "dead", -1) is not None
            # Locked in path order, the new paths come between the two old ones.
            batch = [(f"/a{round_}", 0)] + [(f"/a{round_}-{i:04d}", 0) for i in range(3000)]
            batch.append((f"/b{round_}", 0))
            async def release_meanwhile() -> int:
                await asyncio.sleep(0.05)  # while the batch is under way
                return await a.release_expired_leases()

            queued, released = await asyncio.gather(
                b.enqueue_many("s", batch, 1), release_meanwhile()
            )
            assert released == 2
            assert queued[1:-1] == ["queued"] * 3000
            assert {queued[0], queued[-1]} <= {"processing", "pending"}
    finally:
        await a.close()
        await b.close()


async def test_a_claim_of_several_sites_writes_only_the_row_it_takes(schema):
    """Claims scale with the processes making them only if a claim locks nothing but its
    own row: a row lock is a write to that row, and the heads of the other sites would be
    written by every claim and fought over by every concurrent claimer."""
    store = PostgresStore(schema)
    await store.open()
    try:
        sites = [f"site{n}" for n in range(5)]
        for n, site in enumerate(sites):
            await store.enqueue_many(site, [(f"/{i}", 0) for i in range(3)], 3 if n == 2 else 1)
        record = await store.claim("w", 60, sites=sites)
        assert record is not None and record.site == "site2"
        conn = await asyncpg.connect(schema)
        try:
            touched = await conn.fetch(
                "SELECT site, path FROM paths WHERE xmax::text <> '0' ORDER BY site, path"
            )
        finally:
            await conn.close()
        others = [(r["site"], r["path"]) for r in touched if r["path"] != record.path or (
            r["site"] != record.site
        )]
        assert others == []
    finally:
        await store.close()


async def _blocked_by(conn: asyncpg.Connection, store: PostgresStore) -> None:
    """Until some statement of ``store`` waits on a lock ``conn`` holds (a bound stops a hang)."""
    for _ in range(400):
        if await store._db.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))",
            conn.get_server_pid(),
        ):
            return
        await asyncio.sleep(0.025)
    raise AssertionError("nothing waited on the lock")


async def test_clearing_a_site_locks_its_paths_in_the_order_a_batch_does(schema):
    """A batch locks paths in path order (by code point, as Python sorts them); clearing the
    site takes them in that order too, so while a batch holds one path the clearing holds
    none after it, and the batch goes on to the next instead of deadlocking."""
    store = PostgresStore(schema, pool_size=2)
    await store.open()
    try:
        # Stored out of order ("/B" sorts first by code point), and enough of them that the
        # whole site is read in the order stored rather than through the index.
        for path in ("/b", "/a"):
            await store.enqueue("s", path, 1)
        await store.enqueue_many("s", [(f"/c{i:04d}", 0) for i in range(2000)], 1)
        await store.enqueue("s", "/B", 1)
        conn = await asyncpg.connect(schema)
        try:
            await conn.execute("ANALYZE paths")
            plan = await conn.fetchval("EXPLAIN DELETE FROM paths WHERE site = 's'")
            assert "Index" not in plan
            tx = conn.transaction()
            await tx.start()
            await conn.execute("UPDATE paths SET priority = 2 WHERE path = '/B'")
            clearing = asyncio.ensure_future(store.clear_site("s"))
            await _blocked_by(conn, store)
            for later in ("/a", "/b"):  # held by no one: the clearing waits at "/B"
                await conn.execute(
                    "SELECT 1 FROM paths WHERE path = $1 FOR UPDATE NOWAIT", later
                )
            await tx.commit()
        finally:
            await conn.close()
        assert await asyncio.wait_for(clearing, 60) == 2003
        assert await store.counts("s") == {}
    finally:
        await store.close()


async def test_clearing_a_site_that_deadlocks_with_another_writer_is_done_again(schema):
    """A writer that takes two paths against that order (a capture that takes over its
    master's snapshot) can still deadlock with the clearing; PostgreSQL gives up one of
    them, and a clearing given up is done again once the other is through."""
    store = PostgresStore(schema, pool_size=2)
    await store.open()
    try:
        for path in ("/a", "/b"):
            await store.enqueue("s", path, 1)
        conn = await asyncpg.connect(schema)
        try:
            tx = conn.transaction()
            await tx.start()
            # This transaction is never the one given up.
            await conn.execute("SET LOCAL deadlock_timeout = '10min'")
            await conn.execute("UPDATE paths SET priority = 2 WHERE path = '/b'")
            clearing = asyncio.ensure_future(store.clear_site("s"))
            await _blocked_by(conn, store)  # holding "/a", waiting for "/b"
            await conn.execute("UPDATE paths SET priority = 3 WHERE path = '/a'")
            await tx.commit()
        finally:
            await conn.close()
        assert await asyncio.wait_for(clearing, 60) == 2
        assert await store.counts("s") == {}
    finally:
        await store.close()
