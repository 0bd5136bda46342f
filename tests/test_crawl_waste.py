"""No wasted renders (SPEC 5.2, 5.3): a documentation app crawled in real Chromium, whose
heading links (``?id=``) are learned not to change a page, whose copies are known by what a
reader sees, and whose paginated blog is never merged."""

from __future__ import annotations

import httpx
import pytest
from playwright.async_api import async_playwright, expect

from snapshotd.crawlers.devices import PROFILE_NAMES
from snapshotd.pages.fingerprints import fingerprint, same_page
from snapshotd.render.chromium import LAUNCH_ARGS
from snapshotd.store.outcome import CaptureOutcome
from tests.chromium import require_chromium
from tests.servers import serve_asgi
from tests.sites.docs import BLOG, DOCS, PAGES, Docs
from tests.test_crawl_jobs import BOT, crawlbot_app
from tests.test_crawlbot import TOKEN, wait_status
from tests.test_crawler_process import crawl_db  # noqa: F401 (a fixture)

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def test_pages_that_differ_only_by_markup_or_a_time_are_the_same_page() -> None:
    words = " ".join(f"word{i}" for i in range(80))
    page = f'<main><nav><a class="active">x</a></nav><h1>T</h1><p>{words}</p></main>'
    assert same_page(fingerprint(page), fingerprint(page.replace('"active"', '""')))
    stamped = page.replace("<h1>T</h1>", "<h1>T</h1><p>Built 12:00:01</p>")
    later = page.replace("<h1>T</h1>", "<h1>T</h1><p>Built 12:00:02</p>")
    assert same_page(fingerprint(stamped), fingerprint(later))
    other = page.replace(words, " ".join(f"other{i}" for i in range(80)))
    assert not same_page(fingerprint(page), fingerprint(other))
    # Too few words to tell: never the same page by content.
    short = "<main><p>Contact us</p></main>"
    assert not same_page(fingerprint(short), fingerprint(short))


@pytest.mark.browser
def test_a_docs_app_costs_one_render_a_page_and_loses_none(crawl_db) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    docs = Docs()
    with serve_asgi(docs.app) as origin, serve_asgi(crawlbot_app(str(crawl_db))) as base, \
            httpx.Client(base_url=base, timeout=30, trust_env=False, headers=AUTH) as client:
        created = client.post("/_snapshotd/v3/crawl", data={
            "name": "docs", "seeds": origin + "/", "obeyRobots": "0"})
        assert created.status_code == 200, created.text
        wait_status(client, "docs", 9, [])
        # One capture a page, which renders it once for each device profile.
        renders = sum(docs.renders.values()) / len(PROFILE_NAMES)
        learned = client.get("/_snapshotd/api/v1/sites/docs/params").json()["params"]
        assert renders <= 1.2 * len(PAGES), (dict(docs.renders), learned)

        listed = client.get("/_snapshotd/api/v1/sites/docs/paths",
                            params={"state": "processed", "limit": 500}).json()["paths"]
        own = {p["path"] for p in listed if not p["duplicate_of"]}
        assert own == set(PAGES), sorted(own ^ set(PAGES))  # none lost, none merged

        params = {p["name"]: p for p in client.get(
            "/_snapshotd/api/v1/sites/docs/params").json()["params"]}
        assert params["id"]["state"] == "ignored" and params["id"]["scope"] == "/guide/"
        assert len(params["id"]["same"]) >= 3 and params["id"]["differ"] == []
        assert params["page"]["state"] == "kept" and params["page"]["differ"] == ["/blog"]

        # A bot asking for a heading link gets its page; the blog's pages stay apart.
        host = {"Host": origin.removeprefix("http://"), "User-Agent": BOT}
        heading = client.get("/guide/deploy?id=deploy-usage", headers=host)
        assert heading.headers["x-snapshotd-cache"] == "HIT", heading.headers
        assert "Guide: deploy" in heading.text
        for path in BLOG:
            page = client.get(path, headers=host)
            assert page.headers["x-snapshotd-cache"] == "HIT"
            number = path.rpartition("=")[2] if "=" in path else "1"
            assert f"Blog, page {number}" in page.text

        # The operator's word: a pinned parameter is left alone, a forgotten one learned anew.
        pinned = client.put("/_snapshotd/api/v1/sites/docs/params/page",
                            json={"state": "ignored", "scope": "/blog"})
        assert pinned.status_code == 200, pinned.text
        page = next(p for p in pinned.json()["params"] if p["name"] == "page")
        assert page["pinned"] and page["state"] == "ignored"
        bad = client.put("/_snapshotd/api/v1/sites/docs/params/page", json={"state": "maybe"})
        assert bad.status_code == 400 and bad.json()["field"] == "state"
        forgotten = client.delete("/_snapshotd/api/v1/sites/docs/params/page").json()
        assert "page" not in {p["name"] for p in forgotten["params"]}
        report = client.get("/_snapshotd/v3/crawl/data", params={
            "name": "docs", "type": "urls", "format": "json"}).json()
        marked = {r["path"]: r["ignored_params"] for r in report}
        assert all(v == "id" for p, v in marked.items() if "?id=" in p), marked
        assert DOCS[1] in marked


@pytest.mark.browser
def test_with_exact_dedup_and_no_learning_every_variant_is_rendered(tmp_path) -> None:
    docs = Docs()
    with serve_asgi(docs.app) as origin, serve_asgi(
        crawlbot_app(str(tmp_path / "exact.db"))
    ) as base, httpx.Client(base_url=base, timeout=30, trust_env=False, headers=AUTH) as client:
        site = {"origin": origin, "seeds": ["/"], "obey_robots": False, "dedup": "exact",
                "learn_params": False}
        assert client.put("/_snapshotd/api/v1/sites/docs", json=site).status_code == 201
        wait_status(client, "docs", 9, [])
        # Every heading link of every page, and nothing learned.
        assert sum(docs.renders.values()) >= len(PAGES) + 3 * (len(DOCS) - 1)
        assert client.get("/_snapshotd/api/v1/sites/docs/params").json()["params"] == []


@pytest.mark.browser
async def test_the_console_lists_the_learned_parameters_and_pins_one(tmp_path) -> None:
    chromium = require_chromium()
    app = crawlbot_app(str(tmp_path / "console.db"))
    with serve_asgi(app) as base:
        with httpx.Client(base_url=base, timeout=30, trust_env=False, headers=AUTH) as client:
            site = {"origin": "http://127.0.0.1:9", "seeds": ["/"], "obey_robots": False}
            assert client.put("/_snapshotd/api/v1/sites/docs", json=site).status_code == 201
            pinned = client.put("/_snapshotd/api/v1/sites/docs/params/id",
                                json={"state": "ignored", "scope": "/guide/"})
            assert pinned.status_code == 200
        async with async_playwright() as p:
            browser = await p.chromium.launch(executable_path=chromium, args=list(LAUNCH_ARGS))
            page = await browser.new_page()
            page.on("dialog", lambda dialog: dialog.accept())
            await page.goto(f"{base}/_snapshotd/console")
            await page.fill("#token", TOKEN)
            await page.click("#signin-form button")
            await page.click("#site-params summary")
            row = page.locator("#params tbody tr")
            await expect(row).to_contain_text("ignored (pinned)")
            await expect(row).to_contain_text("/guide/")
            await row.get_by_role("button", name="Keep").click()
            await expect(page.locator("#message")).to_have_text("Pinned id as kept.")
            await expect(row).to_contain_text("kept (pinned)")
            await row.get_by_role("button", name="Forget").click()
            await expect(page.locator("#params tbody tr")).to_have_count(0)
            await browser.close()


async def test_a_duplicate_by_content_is_served_the_snapshot_of_its_page(store) -> None:  # type: ignore[no-untyped-def]
    words = " ".join(f"word{i}" for i in range(60))
    html = f"<main><h1>Install</h1><p>{words}</p><p>Built 10:00:01</p></main>"
    for path, page, shared in (("/install", html, False),
                               ("/install?ref=nav", html.replace("10:00:01", "10:00:07"), True)):
        await store.enqueue("docs", path, 1)
        await store.claim_path("docs", path, "me", 60)
        print_ = fingerprint(page)
        assert await store.complete(
            "docs", path, "me", CaptureOutcome(html=page, status=200, headers={}, final_url=path,
                expires_at=store.test_clock() + 60, duplicate_of="/install" if shared else None,
                shared=shared, print_=print_),
        )
    assert (await store.prints("docs", ["/install", "/install?ref=nav"])).keys() == {"/install"}
    assert await store.find_same_text("docs", fingerprint(html).text_hash, "/x") == "/install"
    served = await store.get_snapshot("docs", "/install?ref=nav")
    assert served is not None and served.html == html and served.path == "/install?ref=nav"
    # Once its page is gone, the duplicate has nothing to serve: a miss.
    assert await store.delete_path("docs", "/install")
    assert await store.get_snapshot("docs", "/install?ref=nav") is None
