"""Screenshots are admitted as a bot's request for the page is: the site's ignore list, its
rules' statuses and redirects, ``max_pages`` and a pause refuse them before anything is
fetched.

Real snapshotd on uvicorn with real SQLite and real Chromium; the sites' origin is a server
on 127.0.0.1 that counts every request it gets by path, so a refused screenshot is seen to
fetch nothing.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import httpx
import pytest

from snapshotd.config.loading import load_settings
from snapshotd.config.settings import BrowserSettings
from snapshotd.server.app import create_app
from tests.chromium import require_chromium
from tests.servers import serve_asgi

pytestmark = pytest.mark.browser

TOKEN = "screenshot-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SECRET = "X-Origin-Secret: s3cret"


class Origin:
    """Every path asked, counted; the secret header seen on each."""

    def __init__(self) -> None:
        self.hits: Counter[str] = Counter()
        self.secrets: Counter[str] = Counter()
        self.lock = threading.Lock()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        with self.lock:
            self.hits[scope["path"]] += 1
            if headers.get("x-origin-secret"):
                self.secrets[scope["path"]] += 1
        body = f"<!doctype html><h1>page {scope['path']}</h1>".encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/html")]})
        await send({"type": "http.response.body", "body": body})


@dataclass
class Stack:
    snapshotd: str
    origin: Origin

    def shot(self, url: str) -> httpx.Response:
        return httpx.get(f"{self.snapshotd}/_snapshotd/screenshot", params={
            "url": url, "width": 300, "height": 200}, headers=AUTH, timeout=60, trust_env=False)


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[Stack]:
    chromium = require_chromium()
    tmp = tmp_path_factory.mktemp("screenshot-admission")
    origin = Origin()
    with serve_asgi(origin) as origin_url:
        config = tmp / "snapshotd.toml"
        config.write_text(f"""
[server]
db = "{tmp / 'snap.db'}"
api_tokens = ["{TOKEN}"]

[[site]]
name = "shop"
origin = "{origin_url}"
hosts = ["shop.test"]
ignore = ["/admin/"]
custom_headers = ["{SECRET}"]
rules_text = '''
^/gone(/|$) [R=410]
^/old/(.*)$ /new/$1 [R=301]
'''

[[site]]
name = "small"
origin = "{origin_url}"
hosts = ["small.test"]
max_pages = 1

[[site]]
name = "rated"
origin = "{origin_url}"
hosts = ["rated.test"]
new_paths_per_minute = 1

[[site]]
name = "quiet"
origin = "{origin_url}"
hosts = ["quiet.test"]
""")
        settings = load_settings(str(config), env={})
        browser = BrowserSettings(
            concurrency=1, executable=chromium, javascript_timeout=0.3, render_timeout=45
        )
        sites = tuple(replace(s, devices="desktop") for s in settings.sites)
        settings = replace(settings, browser=browser, sites=sites)
        with serve_asgi(create_app(settings, crawler=False)) as base:
            stack = Stack(base, origin)
            with httpx.Client(base_url=base, headers=AUTH, trust_env=False) as api:
                assert api.post("/_snapshotd/api/v1/sites/quiet/pause").status_code == 200
                queued = api.post("/_snapshotd/api/v1/sites/small/paths",
                                  json={"paths": ["/first"]})
                assert queued.status_code in (200, 201, 202), queued.text
            yield stack


def test_an_admitted_page_is_captured_with_the_sites_headers(stack: Stack) -> None:
    r = stack.shot("http://shop.test/items/1")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "image/png"
    assert stack.origin.secrets["/items/1"] >= 1


@pytest.mark.parametrize(("url", "status", "origin_path"), [
    ("http://shop.test/admin/secret", 403, "/admin/secret"),  # on the ignore list
    ("http://shop.test/gone/page", 410, "/gone/page"),  # a rule's status
    ("http://quiet.test/items/2", 503, "/items/2"),  # a paused site
    ("http://small.test/second", 403, "/second"),  # past max_pages
])
def test_a_refused_page_gets_the_refusal_and_nothing_is_fetched(
    stack: Stack, url: str, status: int, origin_path: str
) -> None:
    r = stack.shot(url)
    assert r.status_code == status, (r.headers, r.content[:200])
    assert r.headers["content-type"].startswith("application/json"), r.headers
    assert stack.origin.hits[origin_path] == 0
    if status == 503:
        assert r.headers["retry-after"]


def test_a_rules_redirect_is_answered_as_the_render_endpoint_answers_it(stack: Stack) -> None:
    r = stack.shot("http://shop.test/old/page")
    assert r.status_code == 301, r.headers
    assert r.headers["location"] == "/new/page"
    assert stack.origin.hits["/old/page"] == 0
    render = httpx.get(f"{stack.snapshotd}/_snapshotd/render/http://shop.test/old/page",
                       headers=AUTH, timeout=30, trust_env=False)
    assert (render.status_code, render.headers["location"]) == (301, "/new/page")


def test_new_pages_are_held_to_new_paths_per_minute(stack: Stack) -> None:
    """A new page captured counts against the minute's budget as a bot's does."""
    first = stack.shot("http://rated.test/one")
    assert first.status_code == 200, first.headers
    second = stack.shot("http://rated.test/two")
    assert (second.status_code, second.headers.get("retry-after")) == (429, "60"), second.text
    assert stack.origin.hits["/two"] == 0
