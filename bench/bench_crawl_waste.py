"""Wasted renders: two documentation apps crawled from "/" by snapshotd as it was (exact-HTML
duplicates, no parameter learning: ``dedup = "exact"``, ``learn_params = false``) and as it
is (the defaults), side by side in one run.

    python bench/bench_crawl_waste.py             # both sites, concurrency 2
    python bench/bench_crawl_waste.py --rounds 3  # the median of 3 crawls each

Sites: ``tests/sites/docs.py`` (history routes, every heading linked as ``?id=`` from its own
page and every page's table of contents, "active" markers, a build time on every page, a
paginated blog) and ``bench/docs_spa`` (docsify from the npm registry, history routes, its
sidebar and heading anchors as docsify makes them). For each: renders (the job's
``pageCrawlAttempts``), renders per distinct page (the site's own page list), crawl time from
the job's creation to its end, distinct pages lost (a page of the list with no snapshot of its
own), pages merged by mistake (a page of the list marked a duplicate of another), and copies
stored (variants kept with a snapshot of their own).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "docs_spa"))

import app as docsify  # noqa: E402

from snapshotd.config.settings import BrowserSettings, Settings  # noqa: E402
from snapshotd.render import find_chromium  # noqa: E402
from snapshotd.server.app import create_app  # noqa: E402
from tests.servers import serve_asgi  # noqa: E402
from tests.sites.docs import PAGES, Docs  # noqa: E402

TOKEN = "bench"
MODES = {
    "before": {"dedup": "exact", "learn_params": False},
    "after": {"dedup": "content", "learn_params": True},
}


def crawl(origin: str, pages: list[str], mode: dict[str, Any], concurrency: int) -> dict[str, Any]:
    browser = BrowserSettings(concurrency=concurrency, executable=find_chromium(BrowserSettings()))
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(db=str(Path(tmp) / "waste.db"), api_tokens=(TOKEN,), browser=browser)
        with serve_asgi(create_app(settings)) as base, httpx.Client(
            base_url=base, timeout=60, trust_env=False,
            headers={"Authorization": f"Bearer {TOKEN}"},
        ) as client:
            site = {"origin": origin, "seeds": ["/"], "obey_robots": False, **mode}
            started = time.monotonic()
            assert client.put("/_snapshotd/api/v1/sites/docs", json=site).status_code == 201
            while True:
                job = client.get("/_snapshotd/v3/crawl", params={"name": "docs"}).json()
                job = job["jobs"][0]
                if job["jobStatus"]["status"] in (2, 9, 10):
                    break
                if time.monotonic() - started > 600:
                    raise SystemExit(f"the crawl did not end: {job['jobStatus']}")
                time.sleep(0.2)
            seconds = time.monotonic() - started
            listed = client.get("/_snapshotd/api/v1/sites/docs/paths",
                                params={"limit": 1000}).json()["paths"]
    own = {p["path"] for p in listed if p["state"] == "processed" and not p["duplicate_of"]}
    merged = [p["path"] for p in listed if p["path"] in pages and p["duplicate_of"] in pages]
    return {
        "renders": job["pageCrawlAttempts"],
        "per_page": job["pageCrawlAttempts"] / len(pages),
        "seconds": seconds,
        "lost": sorted(set(pages) - own),
        "merged": merged,
        "copies": len(own - set(pages)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=2)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if not docsify.LIB.exists():
        raise SystemExit("docsify is missing: npm ci --ignore-scripts --prefix bench/docs_spa")
    sites = [("tests/sites/docs.py", Docs().app, PAGES),
             ("docsify (npm)", docsify.create_app(), docsify.PAGES)]
    print(f"{'site':<22}{'mode':<8}{'renders':>8}{'/page':>7}{'crawl s':>9}{'lost':>6}"
          f"{'merged':>8}{'copies':>8}")
    for name, app, pages in sites:
        figures: dict[str, dict[str, Any]] = {}
        with serve_asgi(app) as origin:
            for mode, settings in MODES.items():
                runs = [
                    crawl(origin, pages, settings, args.concurrency) for _ in range(args.rounds)
                ]
                result = dict(runs[0])
                result["seconds"] = statistics.median(r["seconds"] for r in runs)
                figures[mode] = result
                print(f"{name:<22}{mode:<8}{result['renders']:>8}{result['per_page']:>7.2f}"
                      f"{result['seconds']:>9.1f}{len(result['lost']):>6}"
                      f"{len(result['merged']):>8}{result['copies']:>8}")
                for what in ("lost", "merged"):
                    if result[what]:
                        print(f"    {what}: {' '.join(result[what])}")
        before, after = figures["before"], figures["after"]
        print(f"{name:<22}ratio   renders {after['renders'] / before['renders']:.2f}, "
              f"crawl time {after['seconds'] / before['seconds']:.2f} (after / before); "
              f"{len(pages)} distinct pages")


if __name__ == "__main__":
    main()
