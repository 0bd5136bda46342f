"""Rendertron's and prerender.io's clients against a real snapshotd: the real
rendertron-middleware (from npm) in an Express app, screenshots from real Chromium, the
address allow-list of the render endpoints, and prerender.io's recache.

snapshotd runs on uvicorn with real SQLite and real Chromium, the example SPA as its
origin; everything listens on 127.0.0.x.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import struct
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from examples.spa.app import create_app as create_spa
from snapshotd.config.loading import load_settings
from snapshotd.config.settings import BrowserSettings
from snapshotd.config.values import ConfigError
from snapshotd.server.app import create_app
from tests.chromium import require_chromium
from tests.front import stop
from tests.servers import serve_asgi

pytestmark = pytest.mark.browser

HERE = Path(__file__).parent / "rendertron"
TOKEN = "rendertron-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
HOST = "shop.test"
# In rendertron-middleware's own bot list (which has no Googlebot).
BOT = "Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)"
PERSON = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/120 Safari/537.36"


@dataclass(frozen=True)
class Stack:
    snapshotd: str

    def record(self, path: str) -> httpx.Response:
        url = f"{self.snapshotd}/_snapshotd/api/v1/sites/default/paths/{path}"
        return httpx.get(url, headers=AUTH, timeout=10, trust_env=False)


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[Stack]:
    chromium = require_chromium()
    db = str(tmp_path_factory.mktemp("rendertron") / "snap.db")
    with serve_asgi(create_spa()) as spa:
        settings = load_settings(
            overrides={"origin": spa, "hosts": HOST, "db": db, "miss_wait": 15.0}, env={}
        )
        browser = BrowserSettings(
            concurrency=1, executable=chromium, javascript_timeout=0.3, render_timeout=15
        )
        # 127.0.0.1 may render without a token; 127.0.0.2 (or anyone else) may not.
        settings = replace(
            settings, api_tokens=(TOKEN,), browser=browser, render_clients=("127.0.0.1/32",)
        )
        with serve_asgi(create_app(settings, crawler=False)) as base:
            yield Stack(base)


def require_node() -> str:
    node = shutil.which("node")
    missing = None
    if node is None:
        missing = "node is not installed"
    elif not (HERE / "node_modules" / "rendertron-middleware").is_dir():
        missing = f"npm packages are missing: run npm ci --prefix {HERE}"
    if missing:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(missing)
        pytest.skip(missing)
    assert node is not None
    return node


@pytest.fixture(scope="module")
def express(stack: Stack) -> Iterator[str]:
    node = require_node()
    env = {**os.environ, "SNAPSHOTD_RENDER_URL": f"{stack.snapshotd}/_snapshotd/render"}
    proc = subprocess.Popen([node, str(HERE / "server.js")], cwd=HERE, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 20)
    line = proc.stdout.readline() if ready else ""
    if not line:
        proc.kill()
        _, err = proc.communicate(timeout=5)
        raise RuntimeError(f"express did not start: {err.strip()[-500:]}")
    try:
        yield f"http://127.0.0.1:{json.loads(line)['port']}"
    finally:
        stop(proc)


def test_rendertron_middleware_gets_snapshots_without_a_token_from_an_allowed_address(
    stack: Stack, express: str
) -> None:
    with httpx.Client(base_url=express, timeout=30, trust_env=False,
                      headers={"Host": HOST}) as client:
        # The middleware asks /_snapshotd/render/http%3A%2F%2Fshop.test%2Fitems%2F8%3Fc%3D1
        bot = client.get("/items/8?c=1", headers={"User-Agent": BOT})
        assert bot.status_code == 200, bot.text
        assert bot.headers["x-snapshotd-cache"] in ("MISS", "HIT")
        assert "Item 8 is a sturdy thing" in bot.text and "<script" not in bot.text
        person = client.get("/items/8?c=1", headers={"User-Agent": PERSON})
        assert "express shell" in person.text and "x-snapshotd-cache" not in person.headers
    assert stack.record("items/8%3Fc%3D1").json()["status"] == 200


def test_the_render_allow_list_lets_in_its_addresses_for_rendering_and_nothing_else(
    stack: Stack,
) -> None:
    page = f"{stack.snapshotd}/_snapshotd/render/http://{HOST}/about"
    from_two = httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2"),
                            timeout=30, trust_env=False)
    with from_two:
        # An address outside the list needs the token, as before.
        assert from_two.get(page).status_code == 401
        assert from_two.get(page, headers={"X-Prerender-Token": TOKEN}).status_code == 200
    # An address in the list renders without one, but the API stays closed to it.
    assert httpx.get(page, timeout=30, trust_env=False).status_code == 200
    for path in ("/_snapshotd/api/v1/sites", "/_snapshotd/metrics"):
        assert httpx.get(stack.snapshotd + path, trust_env=False).status_code == 401


def test_the_allow_list_is_off_by_default_and_takes_only_addresses(tmp_path) -> None:
    settings = load_settings(overrides={"origin": "http://127.0.0.1:9"}, env={})
    assert settings.render_clients == ()
    env = {"SNAPSHOTD_RENDER_CLIENTS": "10.0.0.5, 192.168.0.0/16"}
    settings = load_settings(overrides={"origin": "http://127.0.0.1:9"}, env=env)
    assert settings.render_clients == ("10.0.0.5/32", "192.168.0.0/16")
    config = tmp_path / "c.toml"
    config.write_text('[server]\nrender_clients = ["10.0.0.0/8", "crawler.example"]\n')
    with pytest.raises(ConfigError, match="render_clients: 'crawler.example'"):
        load_settings(str(config), env={})


def _png_size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR"
    width, height = struct.unpack(">II", png[16:24])
    return width, height


def test_screenshot_is_a_png_of_the_rendered_page_in_the_asked_size_then_cached(
    stack: Stack,
) -> None:
    base = f"{stack.snapshotd}/_snapshotd/screenshot/"
    # As Rendertron's clients send it: the URL encoded whole.
    url = base + quote(f"http://{HOST}/items/11", safe="")
    first = httpx.get(url, params={"width": 400, "height": 300}, headers=AUTH, timeout=60,
                      trust_env=False)
    assert first.status_code == 200, first.text
    assert first.headers["content-type"] == "image/png"
    assert first.headers["x-snapshotd-cache"] == "MISS"
    assert _png_size(first.content) == (400, 300)
    again = httpx.get(url, params={"width": 400, "height": 300}, headers=AUTH, timeout=60,
                      trust_env=False)
    assert again.headers["x-snapshotd-cache"] == "HIT" and again.content == first.content
    # Rendertron's mobile option: the phone crawler's device, a screenshot of its own.
    mobile = httpx.get(url, params={"width": 400, "height": 300, "mobile": ""}, headers=AUTH,
                       timeout=60, trust_env=False)
    assert mobile.status_code == 200, mobile.text
    assert mobile.headers["x-snapshotd-cache"] == "MISS"
    assert _png_size(mobile.content) == (400, 300)
    # Another page shows something else; the default size is Rendertron's, 1000 x 1000.
    other = httpx.get(base + f"http://{HOST}/items/12", headers=AUTH, timeout=60,
                      trust_env=False)
    assert other.status_code == 200, other.text
    assert _png_size(other.content) == (1000, 1000)
    # A screenshot leaves the stored snapshots alone.
    assert stack.record("items/11").status_code == 404


@pytest.mark.parametrize(
    ("query", "status", "field"),
    [
        ("width=99", 400, "width"),
        ("height=2001", 400, "height"),
        ("width=abc", 400, "width"),
        ("size=3", 400, "size"),
    ],
)
def test_screenshot_refuses_bad_sizes_and_parameters_naming_them(
    stack: Stack, query: str, status: int, field: str
) -> None:
    r = httpx.get(f"{stack.snapshotd}/_snapshotd/screenshot/http://{HOST}/?{query}",
                  headers=AUTH, trust_env=False)
    assert r.status_code == status and r.json()["field"] == field, r.text


def test_screenshot_of_a_host_no_site_serves_is_refused_and_nothing_fetched(
    stack: Stack,
) -> None:
    r = httpx.get(f"{stack.snapshotd}/_snapshotd/screenshot/http://127.0.0.3:9/",
                  headers=AUTH, trust_env=False)
    assert r.status_code == 403 and r.json()["field"] == "url"
    r = httpx.get(f"{stack.snapshotd}/_snapshotd/screenshot",
                  params={"url": "http://127.0.0.3:9/", "width": 300}, headers=AUTH,
                  trust_env=False)
    assert r.status_code == 403 and r.json()["field"] == "url"
    r = httpx.get(f"{stack.snapshotd}/_snapshotd/screenshot", headers=AUTH, trust_env=False)
    assert r.status_code == 400 and r.json()["field"] == "url"


# --- prerender.io's recache ----------------------------------------------------------------


def test_recache_queues_url_or_urls_with_the_token_in_the_body(stack: Stack) -> None:
    recache = f"{stack.snapshotd}/_snapshotd/recache"
    r = httpx.post(recache, json={"prerenderToken": TOKEN, "url": f"http://{HOST}/items/20"},
                   trust_env=False)
    assert r.status_code == 200, r.text
    assert r.json()["sites"]["default"]["counts"]
    record = stack.record("items/20").json()
    assert record["state"] == "pending" and record["priority"] == 2
    r = httpx.post(recache, json={"prerenderToken": TOKEN, "urls": [
        f"http://{HOST}/items/21", f"http://{HOST}/#!/faq"]}, trust_env=False)
    assert r.status_code == 200, r.text
    assert stack.record("items/21").json()["state"] == "pending"
    assert stack.record("%23%21%2Ffaq").status_code == 200


@pytest.mark.parametrize(
    ("body", "headers", "status", "field"),
    [
        ({"prerenderToken": "wrong", "url": f"http://{HOST}/items/22"}, {}, 401,
         "prerenderToken"),
        ({"url": f"http://{HOST}/items/22"}, {}, 401, "prerenderToken"),
        ({"prerenderToken": TOKEN, "urls": [f"http://{HOST}/items/22", "http://other.test/"]},
         {}, 400, "urls[1]"),
        ({"prerenderToken": TOKEN, "urls": [f"http://{HOST}/items/22", 7]}, {}, 400, "urls[1]"),
        ({"prerenderToken": TOKEN}, {}, 400, "url"),
        ({"prerenderToken": TOKEN, "url": f"http://{HOST}/items/22", "adaptiveType": "tablet"},
         {}, 400, "adaptiveType"),
        ({"prerenderToken": TOKEN, "url": f"http://{HOST}/items/22", "extra": 1}, {}, 400,
         "extra"),
    ],
)
def test_recache_refuses_a_bad_call_whole(
    stack: Stack, body: dict, headers: dict, status: int, field: str
) -> None:
    r = httpx.post(f"{stack.snapshotd}/_snapshotd/recache", json=body, headers=headers,
                   trust_env=False)
    assert r.status_code == status and r.json()["field"] == field, r.text
    assert stack.record("items/22").status_code == 404  # nothing was queued


@pytest.mark.parametrize(("device", "number"), [("mobile", 24), ("desktop", 25)])
def test_recache_takes_either_adaptive_type_and_recaptures_the_path(
    stack: Stack, device: str, number: int
) -> None:
    """prerender.io's way to recache the phones' page ("mobile") or the desktop one
    ("desktop", its default): the path is recaptured, which renders again every profile the
    site serves that page in."""
    r = httpx.post(f"{stack.snapshotd}/_snapshotd/recache", json={
        "prerenderToken": TOKEN, "url": f"http://{HOST}/items/{number}", "adaptiveType": device,
    }, trust_env=False)
    assert r.status_code == 200, r.text
    record = stack.record(f"items/{number}").json()
    assert record["state"] == "pending" and record["priority"] == 2


def test_recache_takes_the_token_in_a_header_too(stack: Stack) -> None:
    r = httpx.post(f"{stack.snapshotd}/_snapshotd/recache",
                   json={"url": f"http://{HOST}/items/23"},
                   headers={"X-Prerender-Token": TOKEN}, trust_env=False)
    assert r.status_code == 200, r.text
    assert stack.record("items/23").json()["state"] == "pending"
