"""The store and the claim loop at millions of paths on PostgreSQL, with 1 to 8 worker
processes, each figure beside the one-process run of the same size in the same run.

    python bench/bench_scale.py                              # 1M and 10M paths, 1 2 4 8 processes
    python bench/bench_scale.py --sizes 1000000,3000000 --duration 15
    python bench/bench_scale.py --postgres postgresql://postgres@127.0.0.1:5432/test

Each size is written with COPY into a schema of its own (dropped afterwards): 10 sites of
unequal size (the first holds about a third of the paths), 60% captured with expiries spread
over the next 7 days and 3% expired, 32% pending at priorities 0-3 (most at 1), 5% failed.
Then for each process count, every process runs ``--tasks`` claim loops for ``--duration``
seconds, each doing what a crawler worker does with a renderer that returns a fixed page at
once: ``claim`` (the crawler's site filter: all 10), then ``complete`` (the snapshot
stored); the first process also runs the expiry sweep of every site every 10 s, as the
crawler's maintenance does. The first sweep, which finds the 3% expired, is timed on its
own before the runs, then one crawler maintenance, and each count the product reads
beside the same count by a scan of every path (the answers checked equal). Printed: claims
per second and its ratio to one process, the median and p99 claim latency, and the database
size per 1M paths (the paths table with its indexes, and the snapshots stored per capture).
Last, one process runs again with the store's counts not kept (its triggers off): what
keeping them costs a claim.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import random
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from snapshotd.store.outcome import CaptureOutcome
from snapshotd.store.postgres import PostgresStore  # noqa: E402

SITES = [f"site{n}" for n in range(10)]
WEIGHTS = [1 / (n + 1) for n in range(10)]
COLUMNS = [
    "site", "path", "state", "priority", "hops", "status", "created_at", "queued_at",
    "captured_at", "expires_at",
]
WEEK = 7 * 86400.0
PAGE = (
    "<!doctype html><html><head><title>Item</title></head><body><main>"
    + "".join(f"<p><a href='/items/{i}'>Item {i}</a> a sturdy thing</p>" for i in range(120))
    + "</main></body></html>"
)
SWEEP_SECONDS = 10.0


def rows(start: int, count: int, now: float) -> list[tuple[object, ...]]:
    rng = random.Random(start)
    out: list[tuple[object, ...]] = []
    for i in range(start, start + count):
        site = rng.choices(SITES, WEIGHTS)[0]
        roll = rng.random()
        if roll < 0.60:
            captured = now - rng.random() * WEEK
            out.append((site, f"/p/{i}", "processed", 1, 2, 200, captured - 60, captured - 1,
                        captured, captured + WEEK))
        elif roll < 0.63:
            captured = now - WEEK - rng.random() * 3600
            out.append((site, f"/p/{i}", "processed", 1, 2, 200, captured - 60, captured - 1,
                        captured, captured + WEEK))
        elif roll < 0.95:
            prio = rng.choice((0, 1, 1, 1, 2, 3))
            out.append((site, f"/p/{i}", "pending", prio, 3, None, now - 3600,
                        now - rng.random() * 86400, None, None))
        else:
            out.append((site, f"/p/{i}", "error", 1, 3, 500, now - 3600, now - 3600, None,
                        now + rng.random() * 3600))
    return out


async def fill(dsn: str, size: int) -> float:
    import asyncpg

    started = time.perf_counter()
    now = time.time()
    conn = await asyncpg.connect(dsn)
    try:
        chunk = 250_000
        for start in range(0, size, chunk):
            await conn.copy_records_to_table(
                "paths", records=rows(start, min(chunk, size - start), now), columns=COLUMNS
            )
        await conn.execute("VACUUM ANALYZE paths")
    finally:
        await conn.close()
    return time.perf_counter() - started


async def worker_main(dsn: str, index: int, tasks: int, duration: float) -> tuple[int, list[float]]:
    latencies: list[float] = []
    claimed = 0
    async with PostgresStore(dsn) as store:
        deadline = time.monotonic() + duration

        async def loop(n: int) -> None:
            nonlocal claimed
            owner = f"bench:{index}:{n}"
            while time.monotonic() < deadline:
                t = time.perf_counter()
                record = await store.claim(owner, 60.0, sites=SITES)
                latencies.append(time.perf_counter() - t)
                if record is None:
                    await asyncio.sleep(0.05)
                    continue
                claimed += 1
                await store.complete(
                    record.site, record.path, owner, CaptureOutcome(
                        html=PAGE, status=200, headers={},
                        final_url="", expires_at=time.time() + WEEK),
                )

        async def sweep() -> None:
            while time.monotonic() < deadline:
                for site in SITES:
                    while await store.requeue_expired(site) >= 1000:
                        pass
                await asyncio.sleep(SWEEP_SECONDS)

        jobs = [loop(n) for n in range(tasks)] + ([sweep()] if index == 0 else [])
        await asyncio.gather(*jobs)
    return claimed, latencies


def run_worker(args: tuple[str, int, int, float]) -> tuple[int, list[float]]:
    return asyncio.run(worker_main(*args))


async def sweep_once(dsn: str) -> tuple[int, float]:
    """The crawler's first maintenance: every site's expired paths queued again."""
    started = time.perf_counter()
    swept = 0
    async with PostgresStore(dsn) as store:
        for site in SITES:
            while (n := await store.requeue_expired(site)) > 0:
                swept += n
                if n < 1000:
                    break
    return swept, time.perf_counter() - started


# Each count the product reads, through the store (as rows: key..., n) and by a scan of
# every path, its baseline.
COUNTS: list[tuple[str, Callable[[PostgresStore], Awaitable[list[tuple[Any, ...]]]], str]] = [
    (
        "paths per site and state (the API, /metrics, the maintenance)",
        lambda store: _rows(store.counts()),
        "SELECT site, state, COUNT(*) FROM paths GROUP BY site, state",
    ),
    (
        "queue depth by priority (the API, /metrics)",
        lambda store: _rows(store.queue_depth()),
        "SELECT priority, COUNT(*) FROM paths WHERE state = 'pending' GROUP BY priority",
    ),
    (
        "the largest site's paths (a bot's new path, max_pages)",
        lambda store: _rows(store.site_size(SITES[0])),
        f"SELECT COUNT(*) FROM paths WHERE site = '{SITES[0]}'",
    ),
    (
        "the largest site's processed paths (max_to_process)",
        lambda store: _rows(store.processed(SITES[0])),
        f"SELECT COUNT(*) FROM paths WHERE site = '{SITES[0]}' AND state = 'processed'",
    ),
]


async def _rows(answer: Awaitable[Any]) -> list[tuple[Any, ...]]:
    """A count read through the store as a scan's rows: (key..., n), none of n = 0."""
    got = await answer
    if isinstance(got, int):
        return [(got,)]
    return [
        (key, *sub, n)
        for key, value in got.items()
        for *sub, n in (value.items() if isinstance(value, dict) else [(value,)])
        if n
    ]


async def maintenance_once(dsn: str) -> float:
    """Seconds of one crawler maintenance (every 10 s): each site's due work, its job's
    round, the sites at ``max_to_process``."""
    from snapshotd.capture.service import CaptureService
    from snapshotd.config.settings import Settings, SiteSettings
    from snapshotd.crawl.engine import Crawler
    from snapshotd.sites.registry import SiteRegistry

    sites = tuple(
        SiteSettings(
            name=name, origin="http://127.0.0.1:9", obey_robots=False,
            max_to_process=100_000 if name == SITES[0] else -1,
        )
        for name in SITES
    )
    settings = Settings(sites=sites)
    async with PostgresStore(dsn) as store:
        crawler = Crawler(
            SiteRegistry(settings, store), store, CaptureService(settings, store, None)
        )
        started = time.perf_counter()
        await crawler._maintain()
        return time.perf_counter() - started


async def counts_beside_scans(dsn: str) -> list[tuple[str, float, float]]:
    """Each count through the store and by a scan of every path: (what, seconds kept,
    seconds scanned), the two answers checked equal."""
    import asyncpg

    out = []
    async with PostgresStore(dsn) as store:
        conn = await asyncpg.connect(dsn)
        try:
            for what, read, scan in COUNTS:
                started = time.perf_counter()
                kept = await read(store)
                kept_took = time.perf_counter() - started
                started = time.perf_counter()
                scanned = [tuple(row) for row in await conn.fetch(scan)]
                scan_took = time.perf_counter() - started
                assert sorted(kept) == sorted(scanned), what
                out.append((what, kept_took, scan_took))
        finally:
            await conn.close()
    return out


async def sizes_of(dsn: str) -> tuple[int, int, int]:
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        paths = await conn.fetchval("SELECT pg_total_relation_size('paths')")
        snaps = await conn.fetchval("SELECT pg_total_relation_size('snapshots')")
        count = await conn.fetchval("SELECT count(*) FROM snapshots")
        return int(paths), int(snaps), int(count)
    finally:
        await conn.close()


async def run_sql(dsn: str, statement: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


def measure(dsn: str, procs: int, tasks: int, duration: float) -> tuple[float, float, float]:
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(procs) as pool:
        results = pool.map(run_worker, [(dsn, i, tasks, duration) for i in range(procs)])
    claimed = sum(c for c, _ in results)
    ms = sorted(t * 1000 for _, lat in results for t in lat)
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))] if ms else float("nan")
    return claimed / duration, statistics.median(ms) if ms else float("nan"), p99


async def one_size(url: str, size: int, args: argparse.Namespace) -> list[str]:
    from pg_schema import scratch_schema

    lines = []
    async with scratch_schema(url, "bench_scale") as dsn:
        async with PostgresStore(dsn):  # creates the schema
            pass
        took = await fill(dsn, size)
        paths_bytes, _, _ = await sizes_of(dsn)
        print(f"\n{size:,} paths written in {took:.0f} s; paths table and indexes "
              f"{paths_bytes / 2**20 / (size / 1e6):.0f} MiB per 1M paths", flush=True)
        swept, took = await sweep_once(dsn)
        print(f"  expiry sweep of the expired paths, 1,000 a statement: {swept:,} in "
              f"{took:.1f} s ({swept / took:,.0f} paths/s)", flush=True)
        maintenance = await maintenance_once(dsn)
        await run_sql(dsn, "VACUUM paths")  # what autovacuum does soon after a sweep
        vacuumed = await maintenance_once(dsn)
        print(f"  one crawler maintenance (every 10 s) {maintenance * 1000:.0f} ms right after "
              f"the sweep (its index still visits the rows it moved), {vacuumed * 1000:.0f} ms "
              "once they are vacuumed", flush=True)
        for what, kept, scan in await counts_beside_scans(dsn):
            print(f"  count of {what}: {kept * 1000:.1f} ms kept by the store, "
                  f"{scan * 1000:.0f} ms by a scan of every path (x{scan / kept:,.0f})",
                  flush=True)
        base = None
        for procs in (int(p) for p in args.procs.split(",")):
            rate, p50, p99 = measure(dsn, procs, args.tasks, args.duration)
            base = base or rate
            line = (f"  {size:>11,} paths  {procs} processes x {args.tasks} loops: "
                    f"{rate:8.0f} claims/s (x{rate / base:.2f} of 1 process)   "
                    f"claim median {p50:6.2f} ms  p99 {p99:7.2f} ms")
            print(line, flush=True)
            lines.append(line)
        # The baseline of what keeping the counts costs a claim: the same run without them
        # (last, since the counts are wrong from then on).
        await run_sql(dsn, "ALTER TABLE paths DISABLE TRIGGER USER")
        rate, p50, p99 = measure(dsn, 1, args.tasks, args.duration)
        print(f"  {size:>11,} paths  1 processes x {args.tasks} loops, counts not kept "
              f"(triggers off): {rate:8.0f} claims/s   claim median {p50:6.2f} ms  "
              f"p99 {p99:7.2f} ms; kept, 1 process did x{(base or rate) / rate:.2f} of that",
              flush=True)
        paths_bytes, snap_bytes, snaps = await sizes_of(dsn)
        print(f"  after the runs: paths {paths_bytes / 2**20 / (size / 1e6):.0f} MiB per 1M "
              f"paths; snapshots {snap_bytes / max(snaps, 1):.0f} bytes per stored capture "
              f"({snaps:,} stored, a {len(PAGE):,}-byte page) = "
              f"{snap_bytes / max(snaps, 1) * 1e6 / 2**30:.1f} GiB per 1M captures", flush=True)
    return lines


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--sizes", default="1000000,10000000")
    parser.add_argument("--procs", default="1,2,4,8")
    parser.add_argument("--tasks", type=int, default=4, help="claim loops per process")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per run")
    args = parser.parse_args()
    print(f"claim + complete loops, {args.duration:.0f} s per run, {args.tasks} per process; "
          f"PostgreSQL at {args.postgres.rsplit('@', 1)[-1]}")
    for size in (int(s) for s in args.sizes.split(",")):
        await one_size(args.postgres, size, args)


if __name__ == "__main__":
    asyncio.run(main())
