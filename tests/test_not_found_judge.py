"""The verdict on a capture (snapshotd.capture.soft_404), on both engines: the view learned in
a crawler's capture of a found path and kept in the store, a capture answered 404 (410 under
``soft_404_gone``) or only listed (``report``), never judged when its page said its status,
when the site looks for none, or for a bot's capture that may not learn; a real page
confirmed by a second capture first."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import re

import pytest

from snapshotd.capture.soft_404 import CONFIRM, NotFoundViews
from snapshotd.config.settings import SiteSettings
from snapshotd.render.renderer import CaptureResult
from snapshotd.store.interface import PathRecord
from snapshotd.store.outcome import CaptureOutcome
from snapshotd.store.soft_404_rows import view_key

ORIGIN = "http://127.0.0.1:9"
PAGES = {
    "/": "<h1>Welcome</h1><p>Kettles and pots.</p><a href=/tea>Tea</a><a href=/coffee>Coffee</a>"
         "<a href=/about>About</a>",
    "/tea": "<h1>Tea</h1><p>Kettle, teapot.</p>",
    "/coffee": "<h1>Coffee</h1><p>Grinder, mug.</p>",
    "/about": "<p>We sell tea things.</p>",
}


def missing(path: str) -> str:
    return f"<h1>Nothing here</h1><p>No page is called <code>{path}</code>, sorry.</p>"


class Shop:
    """A renderer drawing the shop: its pages, and its not-found view for any other path."""

    def __init__(self) -> None:
        self.rendered: list[str] = []

    async def capture(self, url: str, site: SiteSettings, profile: str = "desktop"
                      ) -> CaptureResult:
        path = url.removeprefix(ORIGIN)
        self.rendered.append(path)
        html = f"<html><body><nav>Shop</nav><main>{PAGES.get(path) or missing(path)}</main>"
        return CaptureResult(url=url, final_url=url, html=html + "</body></html>", shell="v1")


def capture(path: str, **kw: object) -> CaptureResult:
    body = PAGES.get(path) or missing(path)
    return CaptureResult(url=ORIGIN + path, final_url=ORIGIN + path,
                         html=f"<html><body><nav>Shop</nav><main>{body}</main></body></html>",
                         shell="v1", **kw)  # type: ignore[arg-type]


def record(path: str, **kw: object) -> PathRecord:
    return PathRecord(site="shop", path=path, state="processing", priority=1,
                      lease_until=9e12, **kw)  # type: ignore[arg-type]


async def test_a_crawlers_capture_learns_and_soft_404s_are_answered(store) -> None:
    shop = Shop()
    views = NotFoundViews(store, shop)  # type: ignore[arg-type]
    site = SiteSettings(name="shop", origin=ORIGIN, soft_404_gone=("/old/",))
    assert await views.judge(site, record("/tea"), capture("/tea"), may_learn=True) is None
    # Two paths no one could guess, the seed and the pages it links to.
    probes = [p for p in shop.rendered if re.fullmatch(r"/[0-9a-f]{32}", p)]
    assert len(set(probes)) == 2 and shop.rendered[2:] == ["/", "/tea", "/coffee", "/about"]
    known = json.loads(await store.get_meta(view_key("shop")))
    assert "nothing here" in known["view"]["text"] and known["references"] == 4
    gone = await views.judge(site, record("/old/x"), capture("/old/x"), may_learn=True)
    assert gone is not None and gone.status == 410 and not gone.confirm
    verdict = await views.judge(site, record("/nope"), capture("/nope"), may_learn=False)
    assert verdict is not None and verdict.status == 404
    assert verdict.why.startswith("shows the not-found view learned ")
    for path in PAGES:
        assert await views.judge(site, record(path), capture(path), may_learn=False) is None
    # The page said its status itself: its word is taken.
    assert await views.judge(site, record("/nope"), capture("/nope", declared=True),
                             may_learn=False) is None
    reported = await views.judge(dataclasses.replace(site, soft_404="report"),
                                 record("/nope"), capture("/nope"), may_learn=False)
    assert reported is not None and reported.status == 200
    off = SiteSettings(name="shop", origin=ORIGIN, soft_404="off")
    assert await views.judge(off, record("/nope"), capture("/nope"), may_learn=True) is None
    assert len(shop.rendered) == 6  # nothing learned again


async def test_the_seeds_capture_is_judged_at_once_while_the_learning_it_starts_renders(
    store,
) -> None:
    """The first seed is the learning's own reference page, which the view learnt never
    matches: its capture starts the learning with its render and is judged at once, so the
    crawl follows its links meanwhile; a capture of another path waits for the learning and
    is judged by the view it learnt."""
    held = asyncio.Event()

    class Held(Shop):
        """The shop, its made-up paths answered only once ``held`` is set."""

        async def capture(self, url: str, site: SiteSettings, profile: str = "desktop"
                          ) -> CaptureResult:
            if url.removeprefix(ORIGIN) not in PAGES:
                await held.wait()
            return await super().capture(url, site, profile)

    shop = Held()
    views = NotFoundViews(store, shop)  # type: ignore[arg-type]
    site = SiteSettings(name="shop", origin=ORIGIN)
    seed = views.judge(site, record("/"), capture("/"), may_learn=True)
    assert await asyncio.wait_for(seed, 30) is None  # a hang's bound: the probes are held
    assert await store.get_meta(view_key("shop")) is None  # nothing learnt yet
    other = asyncio.ensure_future(
        views.judge(site, record("/nope"), capture("/nope"), may_learn=True)
    )
    await asyncio.sleep(0.1)
    assert not other.done()  # waiting for the learning
    held.set()
    verdict = await asyncio.wait_for(other, 30)
    assert verdict is not None and verdict.status == 404
    assert "/" not in shop.rendered  # the seed's capture was the learning's reference


async def test_a_bots_capture_learns_nothing(store) -> None:
    shop = Shop()
    views = NotFoundViews(store, shop)  # type: ignore[arg-type]
    site = SiteSettings(name="shop", origin=ORIGIN)
    assert await views.judge(site, record("/nope"), capture("/nope"), may_learn=False) is None
    assert shop.rendered == [] and await store.get_meta(view_key("shop")) is None


async def test_a_real_page_showing_the_view_is_confirmed_by_a_second_capture(store) -> None:
    views = NotFoundViews(store, Shop())  # type: ignore[arg-type]
    site = SiteSettings(name="shop", origin=ORIGIN)
    await views.judge(site, record("/tea"), capture("/tea"), may_learn=True)
    await store.enqueue("shop", "/gone", 1)
    await store.claim_path("shop", "/gone", "w", 60)
    await store.complete("shop", "/gone", "w", CaptureOutcome(
        html=capture("/tea").html, status=200, headers={}, final_url="", expires_at=9e12))
    stored = await store.get_path("shop", "/gone")
    first = await views.judge(site, stored, capture("/gone"), may_learn=False)
    assert first is not None and first.confirm and first.status == 404
    again = record("/gone", status=200, captured_at=1.0, error=CONFIRM)
    second = await views.judge(site, again, capture("/gone"), may_learn=False)
    assert second is not None and not second.confirm


@pytest.mark.parametrize("probe", [404, 301])
async def test_an_app_that_answers_unknown_paths_itself_has_no_view(store, probe) -> None:
    class Answers(Shop):
        async def capture(self, url: str, site: SiteSettings, profile: str = "desktop"
                          ) -> CaptureResult:
            drawn = await super().capture(url, site, profile)
            path = url.removeprefix(ORIGIN)
            return drawn if path in PAGES else CaptureResult(url=url, final_url=url,
                                                             status=probe, html=drawn.html)

    answers = Answers()
    views = NotFoundViews(store, answers)  # type: ignore[arg-type]
    site = SiteSettings(name="shop", origin=ORIGIN)
    assert await views.judge(site, record("/tea"), capture("/tea"), may_learn=True) is None
    known = json.loads(await store.get_meta(view_key("shop")))
    assert known["view"] is None and f"with {probe} itself" in known["why"]
    # The first probe's answer says it all: nothing more is rendered.
    assert answers.rendered == known["probes"][:1]


async def test_a_soft_404_only_reported_is_no_real_page_to_learn_from(store) -> None:
    # With "report" a soft 404 stays 200 and in the site's sitemap: were it taken for a real
    # page, the next learning would find a real page showing the view, and learn nothing.
    views = NotFoundViews(store, Shop())  # type: ignore[arg-type]
    site = SiteSettings(name="shop", origin=ORIGIN, soft_404="report")
    for path in ("/gone", "/tea"):
        await store.enqueue("shop", path, 1)
        await store.claim_path("shop", path, "w", 60)
        await store.complete("shop", path, "w", CaptureOutcome(
            html=capture(path).html, status=200, headers={}, final_url="", expires_at=9e12,
            not_found="shows the not-found view" if path == "/gone" else None))
    assert [p for p, _ in await store.sitemap_pages("shop", 0, 10)] == ["/gone", "/tea"]
    known = await views.learn_now(site)
    assert known is not None and known["view"] is not None, known


class _LosesWrites:
    """The store, but every write of what is learned fails as a store gone away does."""

    def __init__(self, store: object) -> None:
        self._store = store

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)

    async def set_meta(self, key: str, value: str) -> None:
        raise OSError("connection was closed in the middle of operation")


@pytest.mark.parametrize("renders", ["learned", "failed"])
async def test_a_view_the_store_cannot_keep_is_one_log_line_and_tried_again_later(
    store, caplog, renders
) -> None:
    class Fails(Shop):
        async def capture(self, url: str, site: SiteSettings, profile: str = "desktop"
                          ) -> CaptureResult:
            return CaptureResult(url=url, final_url=url, status=0, error="timeout")

    views = NotFoundViews(_LosesWrites(store), Shop() if renders == "learned" else Fails())  # type: ignore[arg-type]
    site = SiteSettings(name="shop", origin=ORIGIN)
    caplog.set_level(logging.INFO, logger="snapshotd")
    # The learning runs in a task of its own: what the store refuses ends it quietly.
    assert await views.learn_now(site) is None
    said = [r for r in caplog.records if "could not keep the not-found view" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.WARNING and said[0].exc_info is None
    assert "connection was closed" in said[0].getMessage()
    assert await store.get_meta(view_key("shop")) is None
    # Not learned again at once: the next capture is judged without a new learning.
    rendered = len(views.renderer.rendered)  # type: ignore[attr-defined]
    await views.judge(site, record("/tea"), capture("/tea"), may_learn=True)
    assert len(views.renderer.rendered) == rendered  # type: ignore[attr-defined]
