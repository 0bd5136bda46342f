"""Soft 404s against shops built from npm with real routers (tests/corpus/soft404: React
Router 6 with React 18, Vue Router 4 with Vue 3), crawled with real Chromium: each app's
not-found view, drawn in its own words, is learned, and every page that draws it is answered
404 and not followed, while its thin real pages (an empty search, an empty category, a page of
one line) stay 200. ``test_each_app`` prints the table: per app, the soft-404 pages found and
the real pages wrongly taken."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from snapshotd.capture.soft_404 import CONFIRM
from snapshotd.cli.crawl import run_crawl
from snapshotd.config.settings import BrowserSettings, Settings, SiteSettings
from snapshotd.store import PathRecord, open_store
from snapshotd.store.interface import iso_time
from snapshotd.store.soft_404_rows import view_key
from tests.chromium import require_chromium
from tests.corpus.devices.fixtures import serve_corpus
from tests.corpus.soft404.server import NODE_MODULES, PACKAGES, REAL, SOFT_404, THIN, Corpus

pytestmark = pytest.mark.browser

APPS = ("react", "vue")


def browser() -> BrowserSettings:
    return BrowserSettings(concurrency=2, executable=require_chromium(), javascript_timeout=0.5,
                           render_timeout=45.0)


@pytest.fixture
def corpus(request: pytest.FixtureRequest) -> Iterator[tuple[Corpus, str]]:
    app = Corpus(request.param)
    with serve_corpus(NODE_MODULES, PACKAGES, app.create_app()) as origin:
        yield app, origin


async def crawl(
    origin: str, db: Path, soft_404: str = "answer", seeds: tuple[str, ...] = ("/",)
) -> dict[str, PathRecord]:
    """Crawl the app at ``origin`` into ``db`` from ``seeds``; every path's record."""
    site = SiteSettings(name="shop", origin=origin, soft_404=soft_404, seeds=seeds)
    settings = Settings(db=str(db), browser=browser(), sites=(site,))
    out = io.StringIO()
    assert await run_crawl(settings, out=out, progress=io.StringIO(), tty=False) == 0, out
    return {r.path: r for r in await _records(db)}


async def _records(db: Path) -> list[PathRecord]:
    store = open_store(str(db))
    await store.open()
    try:
        return [r async for r in store.iter_paths()]
    finally:
        await store.close()


async def stored_view(db: Path) -> dict:
    store = open_store(str(db))
    await store.open()
    try:
        return json.loads(await store.get_meta(view_key("shop")) or "null")
    finally:
        await store.close()


async def queue_again(db: Path, paths: tuple[str, ...]) -> None:
    store = open_store(str(db))
    await store.open()
    try:
        for path in paths:
            await store.enqueue("shop", path, 2, force=True)
    finally:
        await store.close()


def taken(r: PathRecord) -> bool:
    """Whether the path is answered as the app's not-found view."""
    return r.not_found is not None and r.status == 404


ROWS: list[str] = []


@pytest.mark.parametrize("corpus", APPS, indirect=True)
async def test_each_app(corpus: tuple[Corpus, str], tmp_path: Path) -> None:
    app, origin = corpus
    got = await crawl(origin, tmp_path / "shop.db")
    assert set(SOFT_404) | set(REAL) <= set(got), sorted(got)
    found = [p for p in SOFT_404 if taken(got[p])]
    wrong = [p for p in REAL if got[p].not_found is not None or got[p].status != 200]
    ROWS.append(f"{app.app:6} soft-404 pages found {len(found)}/{len(SOFT_404)}, real pages "
                f"wrongly taken {len(wrong)}/{len(REAL)} (thin ones: "
                f"{sum(p in wrong for p in THIN)}/{len(THIN)})")
    print("\n".join(["", "app    what was found", *ROWS]))
    assert found == list(SOFT_404), {p: got[p] for p in SOFT_404}
    assert wrong == [], {p: got[p] for p in wrong}
    view = await stored_view(tmp_path / "shop.db")
    assert view["view"] is not None, view
    # Why each is listed says what it matched.
    assert all("shows the not-found view learned" in got[p].not_found for p in SOFT_404)


@pytest.fixture
async def crawled(corpus: tuple[Corpus, str], tmp_path: Path) -> tuple[Corpus, str, Path]:
    """The app, its origin, and the store one crawl of it filled."""
    app, origin = corpus
    await crawl(origin, tmp_path / "shop.db")
    return app, origin, tmp_path / "shop.db"


@pytest.mark.parametrize("corpus", ["vue"], indirect=True)
async def test_a_new_build_that_words_its_view_otherwise_is_learned_again(
    crawled: tuple[Corpus, str, Path],
) -> None:
    app, origin, db = crawled
    before = await stored_view(db)
    assert "oops" in before["view"]["text"], before
    app.version = 2  # a new build: another script, the not-found view drawn in other words
    await queue_again(db, (*SOFT_404, "/products/1", "/search?q=zzz"))
    got = await crawl(origin, db)
    after = await stored_view(db)
    assert after["shell"] != before["shell"] and after["probes"] != before["probes"]
    assert "lost" in after["view"]["text"] and "oops" not in after["view"]["text"], after
    assert [p for p in SOFT_404 if taken(got[p])] == list(SOFT_404)
    # Each was judged by the view learned again, which its why names.
    assert all(iso_time(after["learned_at"]) in got[p].not_found for p in SOFT_404)
    assert all(got[p].status == 200 and got[p].not_found is None for p in REAL)


@pytest.mark.parametrize("corpus", ["react"], indirect=True)
async def test_a_real_page_that_comes_to_show_the_view_is_answered_404_once_confirmed(
    crawled: tuple[Corpus, str, Path],
) -> None:
    app, origin, db = crawled
    app.gone.add("4")  # taken off the shop: its page now draws the not-found view
    await queue_again(db, ("/products/4",))
    first = (await crawl(origin, db))["/products/4"]
    # One capture is not enough: its snapshot stays, served as it was, until another agrees.
    assert (first.state, first.error, first.status, first.not_found) == (
        "error", CONFIRM, 200, None)
    await queue_again(db, ("/products/4",))
    second = (await crawl(origin, db))["/products/4"]
    assert (second.state, second.status) == ("processed", 404) and second.not_found


@pytest.mark.parametrize("corpus", ["vue"], indirect=True)
async def test_an_app_drawing_its_home_page_for_any_path_learns_no_view_from_a_deep_seed(
    corpus: tuple[Corpus, str], tmp_path: Path
) -> None:
    app, origin = corpus
    app.version = 3  # the catch-all route draws the home page
    got = await crawl(origin, tmp_path / "shop.db", seeds=("/products/1",))
    # The crawl started at a product: the home page is a page it links to, and it is what
    # the app draws for a path that cannot exist. It is no soft 404.
    assert got["/"].status == 200 and got["/"].not_found is None, got["/"]
    assert not [p for p in REAL if got[p].not_found is not None]
    view = await stored_view(tmp_path / "shop.db")
    assert view["view"] is None and "the real page / looks like" in view["why"], view
