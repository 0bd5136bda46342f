"""What the console says agrees with what it draws, in real Chromium: the captures line counts
every process's captures (another worker's reach it through the store's per-minute counters,
as the charts read them), and a job whose every page is captured does not say only that it is
in progress beside a full bar.

snapshotd runs without its crawler; a bot's miss is captured by the proxy itself.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator

import httpx
import pytest
from playwright.async_api import Page, expect

from snapshotd.store import open_store
from tests.test_console import WAIT_MS, Env, browser, page, serve_console, sign_in

__all__ = ["browser", "page"]  # the fixtures of tests/test_console.py, on this module's env

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="module")]

GOOGLEBOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> Iterator[Env]:
    with serve_console(tmp_path_factory.mktemp("agrees"), crawler=False, crawl_links=True) as e:
        yield e


async def test_the_captures_line_counts_every_process_and_the_job_agrees_with_its_bar(
    page: Page, env: Env
) -> None:
    with httpx.Client(base_url=env.base, timeout=60, trust_env=False) as client:
        answer = client.get("/items/1", headers={"user-agent": GOOGLEBOT})
        assert answer.status_code == 200 and answer.headers["x-snapshotd-cache"] == "MISS"
    # As another worker leaves its capture in the shared store until the crawler's process
    # follows its links (crawl.follow): marked, its links still due.
    with sqlite3.connect(env.db) as db:
        assert db.execute("UPDATE paths SET links_due = 1 WHERE site = 'spa'").rowcount == 1
    # Another worker's 30 captures this minute, as its counters reach the shared store.
    store = open_store(env.db)
    await store.open()
    try:
        await store.add_counters([(int(time.time() // 60), "spa", "capture:ok", 30)])
    finally:
        await store.close()
    await sign_in(page)
    await expect(page.locator("#rate")).to_contain_text("all processes: ok 31", timeout=WAIT_MS)
    await expect(page.locator("#legend-captures")).to_contain_text("31", timeout=WAIT_MS)
    # Every page found is captured: a full bar, and a message that says what is left.
    await expect(page.locator("#job-done")).to_have_text("1 of 1 pages", timeout=WAIT_MS)
    code = await page.locator("#job-code").text_content()
    message = await page.locator("#job-message").text_content()
    assert code == "7", (code, message)  # the round goes on: links still to follow
    assert message != "Job in progress" and "still to follow" in (message or ""), message
