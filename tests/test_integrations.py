"""snapshotd behind real front servers: Debian's nginx and Apache httpd on loopback ports.

snapshotd runs on uvicorn with real SQLite and real Chromium; the example SPA is both the
app people reach and snapshotd's origin. The site's public host name, ``shop.test`` (a name
reserved for tests, never resolved here), comes from ``--hosts`` as ``serve`` reads it.
Every server listens on 127.0.0.1.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

import httpx
import pytest

from examples.spa.app import create_app as create_spa
from snapshotd.app import create_app
from snapshotd.config import BrowserSettings, load_settings
from tests.chromium import require_chromium
from tests.front import free_port, nginx
from tests.servers import serve_asgi

pytestmark = pytest.mark.browser

TOKEN = "front-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
HOST = "shop.test"
BOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
PERSON = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/120 Safari/537.36"


@dataclass(frozen=True)
class Stack:
    app: str  # the example SPA: the app people get, and snapshotd's origin
    snapshotd: str

    def record(self, ref: str) -> dict:
        url = f"{self.snapshotd}/_snapshotd/api/v1/sites/default/paths/{ref}"
        r = httpx.get(url, headers=AUTH, timeout=10, trust_env=False)
        assert r.status_code == 200, (ref, r.text)
        return r.json()


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[Stack]:
    chromium = require_chromium()
    db = str(tmp_path_factory.mktemp("front") / "snap.db")
    with serve_asgi(create_spa()) as spa:
        # As `snapshotd serve --origin URL --hosts shop.test` reads its flags.
        settings = load_settings(
            overrides={"origin": spa, "hosts": HOST, "db": db, "miss_wait": 15.0}, env={}
        )
        browser = BrowserSettings(
            concurrency=1, executable=chromium, javascript_timeout=0.3, render_timeout=15
        )
        settings = replace(settings, api_tokens=(TOKEN,), browser=browser)
        with serve_asgi(create_app(settings, crawler=False)) as base:
            yield Stack(spa, base)


def _hostport(url: str) -> str:
    return url.split("://", 1)[1]


# --- Prerender's own nginx recipe, pointed at the render endpoint ---------------------------

PRERENDER_NGINX = """
server {
  listen 127.0.0.1:%(port)d;
  location / {
    proxy_set_header X-Prerender-Token %(token)s;
    set $prerender "%(snapshotd)s";
    rewrite .* /_snapshotd/render/$scheme://$host$request_uri? break;
    proxy_pass http://$prerender;
  }
}
"""


def test_prerenders_nginx_recipe_renders_the_page_with_its_query(stack: Stack) -> None:
    port = free_port()
    block = PRERENDER_NGINX % {
        "port": port, "token": TOKEN, "snapshotd": _hostport(stack.snapshotd)
    }
    with nginx(block, port), httpx.Client(
        base_url=f"http://127.0.0.1:{port}", timeout=30, trust_env=False
    ) as client:
        # nginx sends /_snapshotd/render/http://shop.test/items/3%3Fx=1
        r = client.get("/items/3?x=1", headers={"Host": HOST, "User-Agent": BOT})
        assert r.status_code == 200, r.text
        assert r.headers["x-snapshotd-cache"] == "MISS"
        assert "Item 3 is a sturdy thing" in r.text
        assert stack.record("items/3%3Fx%3D1")["status"] == 200
        r = client.get("/?_escaped_fragment_=/faq", headers={"Host": HOST})
        assert "This page lives at a hashbang URL" in r.text
        assert stack.record("%23%21%2Ffaq")["state"] == "processed"


def test_render_url_keeps_its_hashbang(stack: Stack) -> None:
    r = httpx.get(
        f"{stack.snapshotd}/_snapshotd/render",
        params={"url": f"http://{HOST}/#!/contact"},
        headers={"X-Prerender-Token": TOKEN},
        timeout=30,
        trust_env=False,
    )
    assert r.status_code == 200, r.text
    assert "Write to shop@example.com" in r.text
    assert stack.record("%23%21%2Fcontact")["status"] == 200
