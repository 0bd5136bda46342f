"""Time to claim the next path with 1,000,000 pending rows in SQLite (and PostgreSQL).

    python bench/bench_claim.py                       # 1,000,000 rows, 2,000 claims
    python bench/bench_claim.py --rows 100000 --claims 500
    python bench/bench_claim.py --postgres postgresql://postgres@127.0.0.1:5432/test

With ``--postgres`` the same rows and claims run on that server too, in a schema of their
own that is dropped afterwards.

The rows are spread over priorities 0-3 with random queue times, in one site, as a large
crawl leaves them. Three claim shapes are timed, each through ``SQLiteStore.claim`` on a
file in a temporary directory: no site filter; the filter the crawler always passes (its
configured sites); and the worst case, a filter naming only a small second site while the
big one waits (a ``crawl_delay`` site between two captures).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from snapshotd.store.postgres import PostgresStore  # noqa: E402
from snapshotd.store.sqlite import SQLiteStore  # noqa: E402


def fill(db: str, rows: int, small: int) -> None:
    """``rows`` pending paths of site "big" and ``small`` low-priority ones of site "small"."""
    rng = random.Random(7)
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA synchronous = OFF")
    now = time.time()
    with conn:
        conn.executemany(
            "INSERT INTO paths (site, path, state, priority, hops, created_at, queued_at) "
            "VALUES (?, ?, 'pending', ?, 1, ?, ?)",
            (
                ("big", f"/p/{i}", rng.choice((0, 1, 1, 1, 2, 3)), now, now - rng.random() * 1e6)
                for i in range(rows)
            ),
        )
        conn.executemany(
            "INSERT INTO paths (site, path, state, priority, hops, created_at, queued_at) "
            "VALUES ('small', ?, 'pending', 0, 1, ?, ?)",
            ((f"/s/{i}", now, now) for i in range(small)),
        )
    conn.execute("ANALYZE")
    conn.close()


def rows_for(rows: int, small: int) -> list[tuple[object, ...]]:
    """The same rows as ``fill``: (site, path, state, priority, hops, created_at, queued_at)."""
    rng = random.Random(7)
    now = time.time()
    out: list[tuple[object, ...]] = [
        (
            "big",
            f"/p/{i}",
            "pending",
            rng.choice((0, 1, 1, 1, 2, 3)),
            1,
            now,
            now - rng.random() * 1e6,
        )
        for i in range(rows)
    ]
    out += [("small", f"/s/{i}", "pending", 0, 1, now, now) for i in range(small)]
    return out


async def postgres(url: str, rows: int, claims: int) -> None:
    import asyncpg
    from pg_schema import scratch_schema

    async with scratch_schema(url, "bench_claim") as dsn:
        async with PostgresStore(dsn) as store:
            started = time.perf_counter()
            conn = await asyncpg.connect(dsn)
            try:
                await conn.copy_records_to_table(
                    "paths",
                    records=rows_for(rows, claims),
                    columns=[
                        "site",
                        "path",
                        "state",
                        "priority",
                        "hops",
                        "created_at",
                        "queued_at",
                    ],
                )
                await conn.execute("ANALYZE paths")
            finally:
                await conn.close()
            print(
                f"\nPostgreSQL: {rows:,} pending rows written in "
                f"{time.perf_counter() - started:.1f} s"
            )
            await time_claims(store, 50, None)
            print(f"claim, {claims} times each, target < 2 ms:")
            report("any site", await time_claims(store, claims, None))
            report(
                "sites=['big', 'small'] (the crawler)",
                await time_claims(store, claims, ["big", "small"]),
            )
            report(
                "sites=['small'] (big one delayed)",
                await time_claims(store, min(claims, 50), ["small"]),
            )


async def time_claims(
    store: SQLiteStore | PostgresStore, claims: int, sites: list[str] | None
) -> list[float]:
    out = []
    for _ in range(claims):
        started = time.perf_counter()
        record = await store.claim("bench", 60.0, sites=sites)
        out.append(time.perf_counter() - started)
        assert record is not None
    return out


def report(name: str, times: list[float]) -> None:
    ms = sorted(t * 1000 for t in times)
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    print(
        f"  {name:<38} median {statistics.median(ms):7.3f} ms   p99 {p99:7.3f} ms   "
        f"max {ms[-1]:7.3f} ms"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--claims", type=int, default=2000)
    parser.add_argument("--postgres", default="", help="a PostgreSQL URL to measure as well")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "claim.db")
        async with SQLiteStore(db):  # creates the schema
            pass
        started = time.perf_counter()
        fill(db, args.rows, small=args.claims)
        print(f"{args.rows:,} pending rows written in {time.perf_counter() - started:.1f} s")
        async with SQLiteStore(db) as store:
            await time_claims(store, 50, None)  # warm the page cache
            print(f"claim, {args.claims} times each, target < 2 ms:")
            report("any site", await time_claims(store, args.claims, None))
            report(
                "sites=['big', 'small'] (the crawler)",
                await time_claims(store, args.claims, ["big", "small"]),
            )
            report(
                "sites=['small'] (big one delayed)",
                await time_claims(store, min(args.claims, 50), ["small"]),
            )
    if args.postgres:
        await postgres(args.postgres, args.rows, args.claims)


if __name__ == "__main__":
    asyncio.run(main())
