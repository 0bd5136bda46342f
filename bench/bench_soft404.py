"""Soft 404s measured: the soft-404 corpus's shops (tests/corpus/soft404: React Router 6 and
Vue Router 4, each with its own not-found view, 4 soft 404s and 12 real pages, 4 of them
thin) crawled in real Chromium with ``soft_404 = "off"`` (the baseline: snapshotd before soft
404s) and with the default ``"answer"``, side by side in one run.

    python bench/bench_soft404.py              # both apps, one crawl each way
    python bench/bench_soft404.py --rounds 3   # the median time of 3 crawls each

For each app: soft-404 pages found (answered 404 as the not-found view), real pages wrongly
taken (any of the real pages not answered 200, thin ones apart), and the crawl's time with
soft 404s against the baseline's (the learning renders two probes and the pages the seed
links to once; a soft 404's links are no longer followed).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from snapshotd.cli.crawl import run_crawl  # noqa: E402
from snapshotd.config.settings import BrowserSettings, Settings, SiteSettings  # noqa: E402
from snapshotd.render import find_chromium  # noqa: E402
from snapshotd.store import PathRecord, open_store  # noqa: E402
from tests.corpus.soft404.server import REAL, SOFT_404, THIN, Corpus  # noqa: E402
from tests.servers import serve_asgi  # noqa: E402


async def crawl(origin: str, db: str, soft_404: str) -> tuple[float, dict[str, PathRecord]]:
    site = SiteSettings(name="shop", origin=origin, soft_404=soft_404)
    browser = BrowserSettings(concurrency=2, executable=find_chromium(BrowserSettings()),
                              javascript_timeout=0.5, render_timeout=45.0)
    started = time.perf_counter()
    await run_crawl(Settings(db=db, browser=browser, sites=(site,)), out=io.StringIO(),
                    progress=io.StringIO(), tty=False)
    elapsed = time.perf_counter() - started
    store = open_store(db)
    await store.open()
    try:
        return elapsed, {r.path: r async for r in store.iter_paths()}
    finally:
        await store.close()


async def main(rounds: int) -> None:
    print(f"{'app':6} {'soft 404s found':>16} {'real taken':>11} {'thin taken':>11} "
          f"{'time off':>9} {'time on':>8} {'ratio':>6}")
    for name in ("react", "vue"):
        with serve_asgi(Corpus(name).create_app()) as origin, \
                tempfile.TemporaryDirectory() as tmp:
            times: dict[str, list[float]] = {"off": [], "answer": []}
            got: dict[str, PathRecord] = {}
            for n in range(rounds):
                for mode in ("off", "answer"):
                    elapsed, records = await crawl(origin, f"{tmp}/{mode}{n}.db", mode)
                    times[mode].append(elapsed)
                    if mode == "answer":
                        got = records
            found = sum(got[p].status == 404 and got[p].not_found is not None for p in SOFT_404)
            wrong = [p for p in REAL if got[p].status != 200 or got[p].not_found is not None]
            off, on = statistics.median(times["off"]), statistics.median(times["answer"])
            print(f"{name:6} {f'{found}/{len(SOFT_404)}':>16} {f'{len(wrong)}/{len(REAL)}':>11} "
                  f"{f'{sum(p in wrong for p in THIN)}/{len(THIN)}':>11} {off:8.1f}s "
                  f"{on:7.1f}s {on / off:6.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=1)
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(main(parser.parse_args().rounds))
