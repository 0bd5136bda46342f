"""The console's overview in real Chromium at 390 and 1280 px: state cards, a progress bar
with an ETA while paths are pending, charts drawn from the per-minute counters, recent bot
requests, status badges, totals and page n of N, the details panel, dropped sitemaps.

snapshotd runs without its crawler, so what the test queues stays pending (in the order the
crawler would take it); bots' misses are captured by the proxy itself."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.async_api import Page, expect

from tests.test_console import TOKEN, WAIT_MS, Env, browser, page, serve_console, sign_in

__all__ = ["browser", "page"]  # the fixtures of tests/test_console.py, on this module's env

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="module")]

GOOGLEBOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
GPTBOT = "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko); compatible; GPTBot/1.2"
# Where the screenshots go: docs/ for `make screenshot` (the README's), else tmp_path.
SCREENSHOTS = os.environ.get("SNAPSHOTD_SCREENSHOT_DIR")


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> Iterator[Env]:
    with serve_console(tmp_path_factory.mktemp("overview"), crawler=False, concurrency=2) as e:
        yield e


@pytest.fixture(scope="module")
def traffic(env: Env) -> None:
    """Four bot requests: three MISS (one of them a 404 page), one HIT."""
    with httpx.Client(base_url=env.base, timeout=60, trust_env=False) as client:
        for path, agent, status in (
            ("/items/1", GOOGLEBOT, 200),
            ("/items/1", GOOGLEBOT, 200),
            ("/items/999", GOOGLEBOT, 404),
            ("/about", GPTBOT, 200),
        ):
            answer = client.get(path, headers={"user-agent": agent})
            assert answer.status_code == status, answer.text


def queue_many(env: Env) -> None:
    """118 paths for the crawler, queued again when captured before."""
    answer = httpx.post(
        f"{env.base}/_snapshotd/api/v1/sites/spa/paths",
        json={"paths": [f"/items/{n}" for n in range(2, 120)], "priority": 1, "force": True},
        headers={"Authorization": f"Bearer {TOKEN}"},
        trust_env=False,
    )
    assert answer.status_code == 200, answer.text


async def no_horizontal_overflow(page: Page) -> None:
    wide = await page.evaluate(
        "() => [document.documentElement.scrollWidth, window.innerWidth]"
    )
    assert wide[0] <= wide[1], wide
    # Every visible button sits inside the viewport.
    outside = await page.evaluate(
        """() => [...document.querySelectorAll('button')].filter((b) => {
             const r = b.getBoundingClientRect();
             return r.width > 0 && (r.right > window.innerWidth + 0.5 || r.left < -0.5);
           }).map((b) => b.textContent)"""
    )
    assert outside == []


@pytest.mark.parametrize("width", [1280, 390])
async def test_overview_at_both_widths(
    page: Page, env: Env, traffic: None, tmp_path: Path, width: int
):
    await page.set_viewport_size({"width": width, "height": 900})
    queue_many(env)
    await sign_in(page)

    # State cards and, with paths pending, a progress bar with an ETA.
    await expect(page.locator("#cards .card")).to_have_count(6)  # one per state
    await expect(page.locator("#progress")).to_be_visible(timeout=WAIT_MS)
    await expect(page.locator("#progress-text")).to_contain_text("paths done")
    await expect(page.locator("#progress-text")).to_contain_text("to go", timeout=WAIT_MS)

    # Charts drawn with data from the counters: results, bots, captures, render times.
    for chart in ("results", "bots", "captures", "render"):
        await expect(page.locator(f"#chart-{chart} rect.bar").first).to_be_attached(
            timeout=WAIT_MS
        )
    await expect(page.locator("#legend-results")).to_contain_text("MISS 3")
    await expect(page.locator("#legend-results")).to_contain_text("HIT 1")
    await expect(page.locator("#legend-captures")).to_contain_text("ok 3")
    await expect(page.locator("#legend-render")).to_have_text("3 renders")
    await expect(page.locator("#legend-bots")).to_contain_text("Googlebot 3")
    await expect(page.locator("#legend-bots")).to_contain_text("GPTBot 1")
    # Crawlers by claim: loopback is no crawler's address, so Googlebot is unverified here;
    # OpenAI publishes only ranges, and none are loaded: unverifiable.
    claims = page.locator("#claims tbody tr")
    await expect(claims).to_have_count(2, timeout=WAIT_MS)
    rows = await claims.evaluate_all(
        "(rows) => rows.map((r) => [...r.cells].map((c) => c.textContent))"
    )
    assert rows == [["google", "0", "3", "0", "0", "0"], ["openai", "0", "0", "0", "1", "0"]]
    recent = page.locator("#recent tbody tr")
    await expect(recent.first).to_contain_text("/about")
    await expect(recent.filter(has_text="Googlebot")).to_have_count(3)

    # Lists: totals and page n of N; a badge per kind of status.
    await expect(page.locator("#list-total")).to_contain_text(" of ")
    await expect(page.locator("#page-of")).to_contain_text("page 1 of ")
    await page.click("#tabs button[data-state=processed]")
    await expect(page.locator("#paths .badge.s2xx").first).to_be_attached(timeout=WAIT_MS)
    await expect(page.locator("#paths .badge.s4xx").first).to_be_attached(timeout=WAIT_MS)
    # A stored 404 is not shown in the green of a success.
    ok_row = page.locator("#paths tr", has=page.locator(".badge.s2xx")).first
    not_found = page.locator("#paths tr", has=page.locator(".badge.s4xx")).first
    colours = [
        await row.locator("td.state").evaluate("(td) => getComputedStyle(td).color")
        for row in (ok_row, not_found)
    ]
    assert colours[0] != colours[1], colours
    # Pending paths in the order the crawler takes them (here, the order they were queued).
    await page.click("#tabs button[data-state=pending]")
    await expect(page.locator("#paths tbody tr").first).to_have_attribute("data-state", "pending")
    paths = await page.locator("#paths tbody tr").evaluate_all(
        "(rows) => rows.map((r) => r.dataset.path)"
    )
    numbers = [int(p.rsplit("/", 1)[1]) for p in paths]
    assert len(numbers) > 1 and numbers == sorted(numbers), paths
    await page.click("#tabs button[data-state=error]")
    await expect(page.locator("#expires-head")).to_have_text("Retry at")
    await page.click("#tabs button[data-state='']")

    await no_horizontal_overflow(page)
    shots = Path(SCREENSHOTS) if SCREENSHOTS else tmp_path
    await page.evaluate("window.scrollTo(0, 0)")
    await page.screenshot(path=str(shots / f"console-{width}.png"))

    # The details panel opens over the list, which stays where it was.
    link = page.locator("#paths tbody tr button.link").first
    await link.scroll_into_view_if_needed()
    before = await page.evaluate("window.scrollY")
    assert before > 0
    await link.click()
    await expect(page.locator("#detail")).to_be_visible()
    assert await page.evaluate("window.scrollY") == before
    box = await page.locator("#detail").bounding_box()
    assert box is not None and box["x"] + box["width"] <= width + 0.5
    await no_horizontal_overflow(page)
    await page.click("#detail-close")


async def test_dropped_sitemap_files_are_uploaded(page: Page, env: Env):
    await sign_in(page)
    sitemap = (
        '<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
        "<url><loc>{origin}/dropped/a</loc></url><url><loc>{origin}/dropped/b</loc></url>"
        "</urlset>"
    )
    origin = httpx.get(
        f"{env.base}/_snapshotd/api/v1/sites",
        headers={"Authorization": f"Bearer {TOKEN}"},
        trust_env=False,
    ).json()["sites"][0]["origin"]
    await page.evaluate(
        """(xml) => {
             const data = new DataTransfer();
             data.items.add(new File([xml], "sitemap.xml", { type: "application/xml" }));
             const zone = document.getElementById("sitemap-form");
             for (const type of ["dragenter", "dragover", "drop"]) {
               zone.dispatchEvent(new DragEvent(type, { dataTransfer: data, bubbles: true,
                                                        cancelable: true }));
             }
           }""",
        sitemap.format(origin=origin),
    )
    await expect(page.locator("#message")).to_contain_text("sitemap.xml: 2 URLs", timeout=WAIT_MS)
