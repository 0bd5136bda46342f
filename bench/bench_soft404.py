"""Soft 404s measured: apps crawled in real Chromium with ``soft_404 = "off"`` (the baseline:
snapshotd before soft 404s) and with the default ``"answer"``, side by side in one run.

    python bench/bench_soft404.py              # every app, one crawl each way
    python bench/bench_soft404.py --rounds 3   # the median time of 3 crawls each
    python bench/bench_soft404.py --app docs   # one app (repeatable)

The apps: the soft-404 corpus's shops (tests/corpus/soft404: React Router 6 and Vue Router 4,
each with its own not-found view, 4 soft 404s and 12 real pages, 4 of them thin), the Vue
shop's build whose catch-all route draws its home page (``vue-home``, no not-found view, the
crawl started at a product: its home page must stay 200), and apps its author did not write:

- ``docs``: bench/docs_spa, docsify from the npm registry (history routes), which draws its own
  "404 - Not found" for a page it cannot fetch; its side bar served with links to 3 pages
  that do not exist besides its 22 real ones;
- ``react``, ``vue``, ``preact``, ``angular``: the framework apps of tests/corpus/apps, served as
  a single-page app's host serves them (the app's shell for every other path, 200); none draws
  a not-found view, so their missing paths (seeds) measure what is taken, not recall;
- ``devices``: the device corpus's pages (tests/corpus/devices, each a seed; unknown pages 404);
- ``lit``: the web-component shop (tests/corpus/webcomponents, Lit; an unknown product id).

Every crawl with the default settings but ``soft_404``. Per app: paths crawled, those the
origin answered 404 itself (the Lit shop links to a page it does not serve), soft 404s
(captures judged to show the view), missing paths answered 404 of those planted, real pages
wrongly taken (any real path answered 404 or 410 or judged to show the view; every crawled
path neither planted missing nor answered 404 by the origin is real, each checked by hand),
the view learned (or why none), and the crawl's time against the baseline's.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from starlette.applications import Starlette  # noqa: E402
from starlette.responses import PlainTextResponse  # noqa: E402
from starlette.routing import Mount, Route  # noqa: E402

from bench.docs_spa.app import DOCS, PAGES  # noqa: E402
from bench.docs_spa.app import create_app as docs_app  # noqa: E402
from snapshotd.cli.crawl import run_crawl  # noqa: E402
from snapshotd.config.settings import BrowserSettings, Settings, SiteSettings  # noqa: E402
from snapshotd.render import find_chromium  # noqa: E402
from snapshotd.store import PathRecord, open_store  # noqa: E402
from snapshotd.store.soft_404_rows import view_key  # noqa: E402
from tests.corpus.devices.server import SITE as DEVICE_PAGES  # noqa: E402
from tests.corpus.devices.server import create_app as devices_app  # noqa: E402
from tests.corpus.server import create_app as apps_app  # noqa: E402
from tests.corpus.soft404.server import REAL, SOFT_404, THIN, Corpus  # noqa: E402
from tests.corpus.webcomponents.server import create_app as webcomponents_app  # noqa: E402
from tests.servers import serve_asgi  # noqa: E402

DOCS_MISSING = ("/guide/removed", "/old-page", "/guide/install/v1")


@dataclass(frozen=True)
class App:
    """An app to crawl: its origin's ASGI app, its seeds (the first a real page), the paths
    planted that do not exist, and its real pages (None: every other path crawled)."""

    name: str
    create: Callable[[], Any]
    seeds: tuple[str, ...] = ("/",)
    missing: tuple[str, ...] = ()
    real: tuple[str, ...] | None = None
    thin: tuple[str, ...] = ()


def docs_with_dead_links() -> Starlette:
    """docs_spa with its side bar linking to pages that do not exist too."""
    sidebar = (DOCS / "_sidebar.md").read_text() + "".join(
        f"- [{p.rsplit('/', 1)[-1]}]({p})\n" for p in DOCS_MISSING)

    async def side_bar(request: object) -> PlainTextResponse:
        return PlainTextResponse(sidebar, media_type="text/markdown")

    return Starlette(routes=[Route("/docs/_sidebar.md", side_bar), Mount("", docs_app())])


def spa_host(framework: str) -> Callable[[], Any]:
    """The readiness corpus with ``framework``'s shell answered for every path outside its
    own (``/apps/``, ``/api/``, ``/node_modules/``), as a single-page app's host answers."""

    def create() -> Any:
        app = apps_app()

        async def host(scope: dict[str, Any], receive: Any, send: Any) -> None:
            path = scope.get("path", "")
            if scope["type"] == "http" and not path.startswith(("/apps/", "/api/", "/node_")):
                scope = {**scope, "path": f"/apps/{framework}{path}",
                         "raw_path": f"/apps/{framework}{path}".encode()}
            await app(scope, receive, send)

        return host

    return create


_DEVICE_PAGES = sorted(f"/{p.stem}" for p in DEVICE_PAGES.glob("*.html"))
APPS = (
    App("react-corpus", lambda: Corpus("react").create_app(), missing=SOFT_404, real=REAL,
        thin=THIN),
    App("vue-corpus", lambda: Corpus("vue").create_app(), missing=SOFT_404, real=REAL,
        thin=THIN),
    App("vue-home", lambda: Corpus("vue", version=3).create_app(), ("/products/1",),
        real=REAL, thin=THIN),
    App("docs", docs_with_dead_links, missing=DOCS_MISSING, real=tuple(PAGES)),
    App("react", spa_host("react"), ("/apps/react/", "/apps/react/nowhere",
        "/apps/react/items/999"), missing=("/apps/react/nowhere", "/apps/react/items/999")),
    App("vue", spa_host("vue"), ("/apps/vue/", "/apps/vue/?item=999"),
        missing=("/apps/vue/?item=999",)),
    App("preact", spa_host("preact"), ("/apps/preact/", "/apps/preact/nowhere",
        "/apps/preact/items/999"), missing=("/apps/preact/nowhere", "/apps/preact/items/999")),
    App("angular", spa_host("angular"), ("/apps/angular/", "/apps/angular/nowhere"),
        missing=("/apps/angular/nowhere",)),
    App("devices", devices_app, ("/static", *(p for p in _DEVICE_PAGES if p != "/static"),
        "/no-such-device-page"), missing=("/no-such-device-page",)),
    App("lit", webcomponents_app, ("/lit-shop?id=1", "/lit-shop?id=999", "/lit-shop-gone"),
        missing=("/lit-shop?id=999", "/lit-shop-gone")),
)


@dataclass
class Crawled:
    elapsed: float
    records: dict[str, PathRecord]
    view: dict[str, Any] | None


async def crawl(origin: str, db: str, app: App, soft_404: str) -> Crawled:
    site = SiteSettings(name="shop", origin=origin, seeds=app.seeds, soft_404=soft_404)
    browser = BrowserSettings(executable=find_chromium(BrowserSettings()))  # the defaults
    started = time.perf_counter()
    await run_crawl(Settings(db=db, browser=browser, sites=(site,)), out=io.StringIO(),
                    progress=io.StringIO(), tty=False)
    elapsed = time.perf_counter() - started
    store = open_store(db)
    await store.open()
    try:
        records = {r.path: r async for r in store.iter_paths()}
        known = await store.get_meta(view_key(site.name))
        return Crawled(elapsed, records, json.loads(known) if known else None)
    finally:
        await store.close()


def taken(record: PathRecord | None) -> bool:
    """Whether a path was answered as missing: 404 or 410, or judged to show the view (a
    redirect the origin answers, as ``/apps/react`` to ``/apps/react/``, is not)."""
    return record is None or record.status in (404, 410) or record.not_found is not None


def view_said(view: dict[str, Any] | None) -> str:
    if view is None:
        return "not learned"
    if view.get("view"):
        return f"view: {view['view']['text'][:40]!r}"
    return f"none: {view.get('why') or view.get('error')}"


async def main(rounds: int, names: list[str]) -> None:
    print(f"{'app':13} {'crawled':>7} {'origin 404s':>11} {'soft 404s':>9} {'missing 404':>11} "
          f"{'real taken':>10} "
          f"{'thin taken':>10} {'time off':>8} {'time on':>7} {'ratio':>5}  view")
    for app in APPS:
        if names and app.name not in names:
            continue
        with serve_asgi(app.create()) as origin, tempfile.TemporaryDirectory() as tmp:
            times: dict[str, list[float]] = {"off": [], "answer": []}
            last: Crawled | None = None
            for n in range(rounds):
                for mode in ("off", "answer"):
                    done = await crawl(origin, f"{tmp}/{mode}{n}.db", app, mode)
                    times[mode].append(done.elapsed)
                    if mode == "answer":
                        last = done
            assert last is not None
            got = last.records
            soft = sorted(p for p, r in got.items() if r.not_found is not None)
            missing = sum(taken(got.get(p)) for p in app.missing)
            hard = [p for p, r in got.items() if r.status in (404, 410) and r.not_found is None]
            real = app.real or tuple(p for p in got if p not in app.missing and p not in hard)
            wrong = [p for p in real if taken(got.get(p))]
            thin = sum(p in wrong for p in app.thin)
            off, on = statistics.median(times["off"]), statistics.median(times["answer"])
            print(f"{app.name:13} {len(got):7} {len(hard):11} {len(soft):9} "
                  f"{f'{missing}/{len(app.missing)}':>11} {f'{len(wrong)}/{len(real)}':>10} "
                  f"{f'{thin}/{len(app.thin)}':>10} {off:7.1f}s {on:6.1f}s {on / off:5.2f}"
                  f"  {view_said(last.view)}")
            for path in soft:
                print(f"{'':13} soft 404 {path}: {got[path].not_found}")
            for path in wrong:
                record = got.get(path)
                print(f"{'':13} real page taken {path}: "
                      f"{record and (record.status, record.error, record.not_found)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--app", action="append", default=[],
                        choices=[app.name for app in APPS], help="only this app (repeatable)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(main(args.rounds, args.app))
