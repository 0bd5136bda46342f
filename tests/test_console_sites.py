"""The console's site panel in real Chromium: a snapshotd started with no site, a site
created, changed, paused, resumed, restarted and deleted from the page."""

from __future__ import annotations

import asyncio
import re

import pytest
from playwright.async_api import Route, async_playwright, expect

from examples.spa.app import create_app as create_spa
from snapshotd.config.settings import BrowserSettings, Settings
from snapshotd.render.chromium import LAUNCH_ARGS
from snapshotd.server.app import create_app
from tests.chromium import require_chromium
from tests.servers import serve_asgi
from tests.test_console import TOKEN, WAIT_MS, Env, api_get, sign_in

pytestmark = pytest.mark.browser


async def test_a_site_is_created_changed_paused_restarted_and_deleted_from_the_console(
    tmp_path,
) -> None:
    chromium = require_chromium()
    browser_settings = BrowserSettings(
        concurrency=1, executable=chromium, javascript_timeout=0.3, render_timeout=60
    )
    settings = Settings(db=str(tmp_path / "c.db"), api_tokens=(TOKEN,), browser=browser_settings)
    with serve_asgi(create_spa()) as spa, serve_asgi(create_app(settings)) as base:
        env = Env(base, settings.db, chromium)
        async with async_playwright() as p:
            browser = await p.chromium.launch(executable_path=chromium, args=list(LAUNCH_ARGS))
            page = await browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.on("dialog", lambda dialog: dialog.accept())
            await page.goto(f"{base}/_snapshotd/console")
            await sign_in(page)
            await expect(page.locator("#site-name")).to_contain_text("none yet")

            await page.fill("#new-site-name", "spa")
            await page.fill("#new-site-origin", spa)
            await page.click("#new-site-form button")
            await expect(page.locator("#message")).to_have_text("Created site spa.")
            await expect(page.locator('#counts tr[data-site="spa"]')).to_be_visible()
            await expect(page.locator("#site-state")).to_have_text("crawling")
            # Crawled from its seed "/" by the crawler of this process.
            processed = page.locator('#counts tr[data-site="spa"] .count-processed')
            await expect(processed).not_to_have_text("0", timeout=WAIT_MS)

            await page.click("#site-settings summary")
            editor = page.locator("#settings-json")
            await expect(editor).to_have_value(re.compile('"origin"'))
            text = await editor.input_value()
            await editor.fill(text.replace('"max_pages": 100000', '"max_pages": 0'))
            await page.click("#settings-form button")
            await expect(page.locator("#message")).to_contain_text("max_pages: must be from 1 to")
            await editor.fill(text.replace('"max_pages": 100000', '"max_pages": 40'))
            await page.click("#settings-form button")
            await expect(page.locator("#message")).to_have_text("Saved the settings of spa.")
            assert api_get(env, "/sites/spa").json()["settings"]["max_pages"] == 40

            # The crawl job: its status, round and counters; a new round from the page.
            await expect(page.locator("#job-code")).to_have_text("9", timeout=WAIT_MS)
            await expect(page.locator("#job-message")).to_have_text(
                "Job has completed and no repeat is scheduled")
            done = api_get(env, "/sites/spa").json()["job"]
            assert done["objectsFound"] >= 1 and done["roundsCompleted"] == 1
            counters = page.locator("#job-counters")
            await expect(counters).to_contain_text("Pages processed (snapshots kept)")
            await expect(page.locator("#job-done")).to_contain_text(
                re.compile(r"^(\d+) of \1 pages$"))
            # This round's end could not be told (as the notifier records a refused webhook).
            notify_error = page.locator("#job-notify-error")
            await expect(notify_error).to_be_hidden()
            await _record_failure(settings.db, "spa", "webhook not called: refused: loopback")
            await expect(notify_error).to_have_text(
                "Not notified: webhook not called: refused: loopback", timeout=WAIT_MS)
            assert api_get(env, "/sites/spa").json()["job"]["sentJobDoneNotification"] == 0
            await page.click("#site-round")
            await expect(page.locator("#message")).to_contain_text("Started a new round of spa")
            await expect(page.locator("#job-code")).to_have_text("9", timeout=WAIT_MS)
            await expect(notify_error).to_be_hidden()  # a new round starts with none

            await page.click("#site-pause")
            await expect(page.locator("#site-state")).to_have_text("paused")
            assert api_get(env, "/sites/spa").json()["paused"] is True
            await page.click("#site-resume")
            await expect(page.locator("#site-state")).to_have_text("crawling")

            await page.click("#site-restart")
            await expect(page.locator("#message")).to_contain_text("Restarted spa")
            await page.click("#site-delete")
            await expect(page.locator("#message")).to_contain_text("Deleted site spa")
            await expect(page.locator("#site-name")).to_contain_text("none yet")
            assert api_get(env, "/sites/spa").status_code == 404
            await browser.close()
            assert errors == []


async def _record_failure(db: str, name: str, error: str) -> None:
    from snapshotd.store.job_state import job_state, record_notification_failure
    from snapshotd.store.sqlite import SQLiteStore

    async with SQLiteStore(db) as store:
        created = {row.name: row.created_at for row in await store.list_sites()}[name]
        state = await job_state(store, name, created)  # the round the job is in
        await record_notification_failure(store, name, state, error)


async def test_a_refresh_under_way_when_a_site_is_deleted_does_not_report_it_missing(
    tmp_path,
) -> None:
    """The console refreshes every 2 s; a refresh that asked for the site just before it was
    deleted gets 404 after: the message stays the deletion's, not 'no site is named'."""
    chromium = require_chromium()
    settings = Settings(
        db=str(tmp_path / "c.db"), api_tokens=(TOKEN,),
        browser=BrowserSettings(concurrency=1, executable=chromium),
    )
    with serve_asgi(create_spa()) as spa, serve_asgi(create_app(settings)) as base:
        async with async_playwright() as p:
            browser = await p.chromium.launch(executable_path=chromium, args=list(LAUNCH_ARGS))
            page = await browser.new_page()
            page.on("dialog", lambda dialog: dialog.accept())
            await page.goto(f"{base}/_snapshotd/console")
            await sign_in(page)
            await page.fill("#new-site-name", "spa")
            await page.fill("#new-site-origin", spa)
            await page.click("#new-site-form button")
            await expect(page.locator("#message")).to_have_text("Created site spa.")

            held, release = asyncio.Event(), asyncio.Event()

            async def hold(route: Route) -> None:
                if route.request.method == "GET" and not release.is_set():
                    held.set()
                    await release.wait()
                await route.continue_()

            await page.route(re.compile(r".*/api/v1/sites/spa$"), hold)
            await asyncio.wait_for(held.wait(), 10)  # a refresh is asking for the site
            await page.click("#site-delete")
            await expect(page.locator("#message")).to_contain_text("Deleted site spa")
            release.set()  # the refresh's question reaches the server now: 404
            await page.wait_for_timeout(500)
            await expect(page.locator("#message")).to_contain_text("Deleted site spa")
            await expect(page.locator("#site-name")).to_contain_text("none yet")
            await browser.close()
