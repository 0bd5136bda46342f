"""Real libraries' apps captured as each crawler renders them (tests/corpus/devices, real
Chromium): lozad's blocks in the crawler's tall viewport load and the one beyond it does
not, react-intersection-observer's list loads pages until its sentinel leaves that viewport,
and a Vue page is captured in the layout of the crawler's device."""

from __future__ import annotations

import re

import pytest

from snapshotd.config.settings import SiteSettings
from snapshotd.render import BrowserPool
from tests.corpus.devices import fixtures

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="module")]
origin, pool = fixtures.origin, fixtures.pool  # the corpus served, and a pool for it


async def _html(pool: BrowserPool, origin: str, path: str, profile: str) -> str:
    result = await pool.capture(origin + path, SiteSettings(origin=origin), profile)
    assert result.ok, result
    return result.html


@pytest.mark.parametrize("profile", ["mobile", "desktop"])
async def test_lozad_blocks_in_the_tall_viewport_load_and_the_one_beyond_does_not(
    pool: BrowserPool, origin: str, profile: str
) -> None:
    html = await _html(pool, origin, "/blog", profile)
    for words in ("Related posts", "Marta wrote", "About the author"):
        assert words in html, words
    assert "Newsletter archive" not in html


@pytest.mark.parametrize(("profile", "columns"), [("mobile", 1), ("desktop", 3)])
async def test_an_infinite_list_loads_pages_until_its_sentinel_leaves_the_tall_viewport(
    pool: BrowserPool, origin: str, profile: str, columns: int
) -> None:
    html = await _html(pool, origin, "/catalogue?total=600", profile)
    shown = len(re.findall(r'<li class="card"', html))
    # Cards of 100 px and 10 px gaps: the tall viewport holds this many rows of them.
    rows = {"mobile": 12000, "desktop": 9000}[profile] // 110
    assert rows * columns * 0.8 <= shown <= (rows + 24) * columns, shown
    assert "Loading more products" in html  # the list goes on past the viewport
    short = await _html(pool, origin, "/catalogue?total=48", profile)
    assert len(re.findall(r'<li class="card"', short)) == 48


async def test_a_vue_page_is_captured_in_the_layout_of_the_crawler_s_device(
    pool: BrowserPool, origin: str
) -> None:
    phone = await _html(pool, origin, "/product", "mobile")
    desk = await _html(pool, origin, "/product", "desktop")
    assert "Quick facts" in phone and "Specification" not in phone
    assert "Specification" in desk and "Quick facts" not in desk
