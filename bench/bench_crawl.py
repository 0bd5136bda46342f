"""Crawl throughput: the whole example SPA from "/" against the renderer's floor.

    python bench/bench_crawl.py                 # concurrency 2, 5 rounds
    python bench/bench_crawl.py --rounds 1 --sitemap
    python bench/bench_crawl.py --postgres postgresql://postgres@127.0.0.1:5432/test

Crawl: ``Crawler`` in ``snapshotd crawl`` mode on a fresh SQLite file (or a fresh schema on
the ``--postgres`` server, dropped afterwards), seeded with "/" only,
so every page after the first is found as a link (``--sitemap`` also reads the app's
/sitemap.xml at start, as a configured site would); the clock runs from start to "nothing
pending". The browser pool is launched and warmed before the clock starts. Floor:
bench_phone's plain Playwright loop (one reused page per slot rendering what Googlebot
Smartphone sees, in its 12,000 px viewport from the start, content taken when the app calls
``window.onCaptureReady()``) over the same number of item pages, in the same run: a crawl of
a site of defaults renders the phone's profile (and the desktop's only where a page reads its
device).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_phone import TALL, floor  # noqa: E402
from bench_render import serve, urls  # noqa: E402
from pg_schema import scratch_schema  # noqa: E402

from examples.spa.app import ITEM_COUNT  # noqa: E402
from snapshotd.capture.service import CaptureService  # noqa: E402
from snapshotd.config.settings import BrowserSettings, Settings, SiteSettings  # noqa: E402
from snapshotd.crawl.engine import Crawler  # noqa: E402
from snapshotd.render import BrowserPool, find_chromium  # noqa: E402
from snapshotd.sites.registry import SiteRegistry
from snapshotd.store import Store  # noqa: E402
from snapshotd.store.postgres import PostgresStore  # noqa: E402
from snapshotd.store.sqlite import SQLiteStore  # noqa: E402


async def crawl_once(settings: Settings, origin: str, postgres: str = "") -> tuple[int, float, int]:
    """(pages captured, seconds, errors) for one crawl of the site from "/", on a new SQLite
    file or, with ``postgres``, in a new schema on that server."""
    async with contextlib.AsyncExitStack() as stack:
        store: Store
        if postgres:
            store = PostgresStore(
                await stack.enter_async_context(scratch_schema(postgres, "bench_crawl"))
            )
        else:
            tmp = stack.enter_context(tempfile.TemporaryDirectory())
            store = SQLiteStore(str(Path(tmp) / "bench.db"))
        await store.open()
        pool = BrowserPool(settings.browser)
        await pool.start()
        try:
            site = settings.sites[0]
            todo = urls(origin, 2 * settings.browser.concurrency, ITEM_COUNT)
            warm = [pool.capture(u, site, "mobile") for u in todo]
            await asyncio.gather(*warm)
            capture = CaptureService(settings, store, pool)
            crawler = Crawler(SiteRegistry(settings, store), store, capture, once=True)
            started = time.perf_counter()
            await crawler.start()
            await crawler.finished.wait()
            elapsed = time.perf_counter() - started
            await crawler.stop()
            return crawler.stats.captured, elapsed, crawler.stats.errors
        finally:
            await pool.close()
            await store.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5, help="crawls (and floors) to run")
    parser.add_argument("--sitemap", action="store_true", help="also read /sitemap.xml")
    parser.add_argument("--postgres", default="", help="crawl into this PostgreSQL server")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    executable = find_chromium(BrowserSettings())
    origin = serve(ITEM_COUNT)
    settings = Settings(
        db=":memory:",
        browser=BrowserSettings(concurrency=args.concurrency, executable=executable),
        sites=(
            SiteSettings(
                name="spa",
                origin=origin,
                seeds=("/",),
                sitemaps=("/sitemap.xml",) if args.sitemap else (),
            ),
        ),
    )
    print(
        f"chromium {executable}; origin {origin}; concurrency {args.concurrency}; "
        f"{'seed / and /sitemap.xml' if args.sitemap else 'seed / only'}; "
        f"store {'PostgreSQL' if args.postgres else 'SQLite'}"
    )
    crawl_rates, floor_rates = [], []
    for round_ in range(1, args.rounds + 1):
        pages, elapsed, errors = await crawl_once(settings, origin, args.postgres)
        crawl_rate = pages / elapsed
        todo, warmup = urls(origin, pages, ITEM_COUNT), urls(origin, 4, ITEM_COUNT)
        base = await floor(executable, args.concurrency, todo, warmup, TALL)
        crawl_rates.append(crawl_rate)
        floor_rates.append(base)
        print(
            f"round {round_}: crawl {pages} pages ({errors} errors) in {elapsed:.2f} s = "
            f"{crawl_rate:.2f} pages/s; floor {base:.2f} pages/s; ratio {crawl_rate / base:.2f}"
        )
    # Each round's floor runs right after its crawl, so their ratio sees the same machine
    # load; the median of those ratios is the figure to read on a shared machine.
    ratios = [c / f for c, f in zip(crawl_rates, floor_rates, strict=True)]
    print(
        f"median: crawl {statistics.median(crawl_rates):.2f} pages/s, "
        f"floor {statistics.median(floor_rates):.2f} pages/s; "
        f"median round ratio {statistics.median(ratios):.2f}, best {max(ratios):.2f} "
        "(target >= 0.9)"
    )


if __name__ == "__main__":
    asyncio.run(main())
