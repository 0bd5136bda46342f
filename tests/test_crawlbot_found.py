"""What a Crawlbot job counts as found: ``urlsHarvested`` is every distinct URL the job's
pages link to (and its seeds), on the job's host or not, crawled or not, not the paths it
keeps. A real crawl: real Chromium, real SQLite, an origin on loopback whose pages link to
many more URLs than the job crawls.
"""

from __future__ import annotations

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from snapshotd.config.settings import BrowserSettings, Settings
from snapshotd.server.app import create_app
from tests.chromium import require_chromium
from tests.servers import serve_asgi
from tests.test_crawlbot import TOKEN, wait_status

READY = "<script>window.onCaptureReady && window.onCaptureReady()</script>"
# An address no request ever goes to: external links are found, never fetched.
ELSEWHERE = "http://127.0.0.2:9"


def _links(page: int) -> list[str]:
    """What page ``page`` links to: the other pages, pages the job's pattern leaves out,
    another host's pages, and the same URLs again (a fragment, a repeat)."""
    links = [f"/p/{n}" for n in range(4) if n != page]
    links += [f"/skip/{page}-{n}" for n in range(30)]  # left out by urlCrawlPattern
    links += [f"/skip/shared-{n}" for n in range(10)]  # the same on every page
    links += [f"{ELSEWHERE}/e/{page}-{n}" for n in range(15)]
    links += ["/p/0#top", "/p/0", "/skip/shared-0"]
    return links


def _page(request: Request) -> Response:
    page = int(request.path_params["n"])
    anchors = "".join(f'<a href="{href}">{href}</a> ' for href in _links(page))
    return HTMLResponse(f"<html><head><title>p{page}</title></head><body>{anchors}{READY}"
                        "</body></html>")


ORIGIN = Starlette(routes=[Route("/p/{n:int}", _page)])


@pytest.mark.browser
def test_urls_harvested_counts_every_distinct_url_the_pages_link_to(tmp_path) -> None:
    browser = BrowserSettings(
        concurrency=2, executable=require_chromium(), javascript_timeout=0.2, render_timeout=60
    )
    settings = Settings(db=str(tmp_path / "f.db"), api_tokens=(TOKEN,), browser=browser)
    with serve_asgi(ORIGIN) as origin, serve_asgi(create_app(settings)) as base, httpx.Client(
        base_url=base, timeout=30, trust_env=False
    ) as client:
        made = client.post("/_snapshotd/v3/crawl", data={
            "token": TOKEN, "name": "links", "seeds": origin + "/p/0",
            "urlCrawlPattern": "!/skip/", "obeyRobots": "0",
        })
        assert made.status_code == 200, made.text
        done = wait_status(client, "links", 9, [])
        report = client.get("/_snapshotd/v3/crawl/data", params={
            "token": TOKEN, "name": "links", "type": "urls", "format": "json"}).json()
    kept = {row["path"] for row in report}
    assert kept == {f"/p/{n}" for n in range(4)}, kept
    found = {origin + "/p/0"}
    for page in range(4):
        for href in _links(page):
            url = href if href.startswith("http") else origin + href
            found.add(url.split("#")[0])
    assert done["urlsHarvested"] == len(found), (done["urlsHarvested"], len(found))
    assert done["objectsFound"] == 4
