"""Pages built from web components (tests/corpus/webcomponents, real Chromium): a snapshot
holds every shadow root, open or closed, as declarative shadow DOM, so that what a crawler's
renderer shows of it with scripts off is what the live page shows; and what reads a snapshot
(links, fingerprints, the empty-body check) reads its shadow roots."""

from __future__ import annotations

import asyncio

import pytest
from playwright.async_api import Browser

from snapshotd.config.settings import SiteSettings
from snapshotd.pages.fingerprints import fingerprint, same_page
from snapshotd.pages.links import extract_links
from snapshotd.render import BrowserPool
from snapshotd.render.renderer import CaptureResult
from tests.corpus.webcomponents import HIDDEN, LINKS, PAGES, fixtures
from tests.corpus.webcomponents.texts import live_words, recall_precision, snapshot_words

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="module")]
origin, pool, browser = fixtures.origin, fixtures.pool, fixtures.browser

_captures: dict[str, CaptureResult] = {}


async def _capture(pool: BrowserPool, origin: str, path: str) -> CaptureResult:
    if path not in _captures:
        result = await pool.capture(origin + path, SiteSettings(origin=origin), "mobile")
        assert result.ok, result
        _captures[path] = result
    return _captures[path]


@pytest.mark.parametrize(("path", "kind", "phrases"), PAGES, ids=[p[0] for p in PAGES])
async def test_the_snapshot_holds_what_the_page_shows_from_its_shadow_roots(
    pool: BrowserPool, origin: str, browser: Browser, path: str, kind: str,
    phrases: tuple[str, ...]
) -> None:
    capture = await _capture(pool, origin, path)
    for phrase in phrases:
        assert phrase in capture.html, (path, phrase)
    assert ("shadowrootmode" in capture.html) == (kind == "shadow"), path
    assert "<script" not in capture.html.split("<body", 1)[1].replace('type="importmap"', "")
    live, shown = await asyncio.gather(
        live_words(browser, origin + path), snapshot_words(browser, origin + path, capture.html)
    )
    recall, precision = recall_precision(live, shown)
    assert recall >= 0.98 and precision >= 0.98, (path, recall, precision, live - shown,
                                                  shown - live)


@pytest.mark.parametrize("path", sorted(HIDDEN))
async def test_what_a_component_hides_stays_hidden_in_the_snapshot_with_scripts_off(
    pool: BrowserPool, origin: str, browser: Browser, path: str
) -> None:
    capture = await _capture(pool, origin, path)
    shown = await snapshot_words(browser, origin + path, capture.html)
    for phrase in HIDDEN[path]:
        assert phrase in capture.html, phrase  # in the snapshot, as on the live page...
        words = phrase.lower().replace(",", "").split()
        assert not all(shown[w] for w in words), phrase  # ...and not shown


@pytest.mark.parametrize("path", sorted(LINKS))
async def test_links_drawn_inside_shadow_roots_are_found(
    pool: BrowserPool, origin: str, path: str
) -> None:
    capture = await _capture(pool, origin, path)
    links = extract_links(capture.html, origin + path).links
    for link in LINKS[path]:
        assert origin + link in links, (link, links)


async def test_a_lit_app_whose_page_is_in_its_shadow_roots_is_not_an_empty_body(
    pool: BrowserPool, origin: str
) -> None:
    capture = await _capture(pool, origin, "/lit-shop?id=2")
    assert capture.error is None and "Teapot T7" in capture.html


async def test_two_products_of_a_lit_shop_with_the_same_light_dom_are_different_pages(
    pool: BrowserPool, origin: str
) -> None:
    one = await _capture(pool, origin, "/lit-shop?id=1")
    two = await _capture(pool, origin, "/lit-shop?id=2")
    a, b = fingerprint(one.html), fingerprint(two.html)
    assert a.words >= 30 and b.words >= 30
    assert a.text_hash != b.text_hash and not same_page(a, b)


async def test_the_device_probe_sees_a_read_made_inside_a_component(
    pool: BrowserPool, origin: str
) -> None:
    capture = await _capture(pool, origin, "/probe")
    assert "element.clientWidth" in capture.device


async def test_a_light_dom_page_is_serialised_as_before(pool: BrowserPool, origin: str) -> None:
    capture = await _capture(pool, origin, "/light")
    assert "shadowrootmode" not in capture.html
    assert "Never shown: a template" in capture.html  # a plain template is kept as it was
