"""Prerender middlewares installed inside the very app snapshotd renders: the app is both the
site people and crawlers reach and snapshotd's origin, and its middleware, set up with its
defaults and only the service's address, points at snapshotd. The real npm packages
(prerender-node, connect-s4a on the SEO4Ajax face, rendertron-middleware) in one Express app
(tests/in_app/server.js); snapshotd on uvicorn with real SQLite and real Chromium, rendering
both device profiles. No capture loops back into a render, and the page's own scripts still
see the crawler's user agent. Everything listens on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from snapshotd.config.settings import BrowserSettings, Settings, SiteSettings
from snapshotd.server.app import create_app
from tests.chromium import require_chromium
from tests.front import free_port, stop
from tests.servers import serve_asgi
from tests.test_api_prerender import require_node

pytestmark = pytest.mark.browser

TESTS = Path(__file__).parent
TOKEN = "in-app-token"
API = "/_snapshotd/api/v1"
GOOGLEBOT = {
    "mobile": "Mozilla/5.0 (Linux; Android 6.0.1; Nexus 5X Build/MMB29P) AppleWebKit/537.36 "
    "(KHTML, like Gecko) Chrome/120.0.0.0 Mobile Safari/537.36 (compatible; Googlebot/2.1; "
    "+http://www.google.com/bot.html)",
    "desktop": "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
}
# rendertron-middleware's own bot list has no Googlebot.
BINGBOT = {
    "mobile": "Mozilla/5.0 (Linux; Android 6.0.1; Nexus 5X Build/MMB29P) AppleWebKit/537.36 "
    "(KHTML, like Gecko) Chrome/120.0.0.0 Mobile Safari/537.36 (compatible; bingbot/2.0; "
    "+http://www.bing.com/bingbot.htm)",
    "desktop": "Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)",
}
PERSON = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/120 Safari/537.36"


@dataclass(frozen=True)
class Middleware:
    name: str
    folder: str  # the tests/ folder whose node_modules holds it

    def modules(self) -> Path:
        return TESTS / self.folder / "node_modules"


MIDDLEWARES = {
    "prerender-node": Middleware("prerender-node", "prerender_node"),
    "connect-s4a": Middleware("connect-s4a", "connect_s4a"),
    "rendertron-middleware": Middleware("rendertron-middleware", "rendertron"),
}


@contextmanager
def express(middleware: Middleware, port: int, service: str, token: str) -> Iterator[str]:
    node = require_node()
    if not (middleware.modules() / middleware.name).is_dir():
        missing = f"npm packages are missing: run npm ci --prefix {middleware.modules().parent}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(missing)
        pytest.skip(missing)
    env = {**os.environ, "MIDDLEWARE": middleware.name, "NODE_MODULES": str(middleware.modules()),
           "SERVICE_URL": service, "TOKEN": token, "PORT": str(port)}
    proc = subprocess.Popen([node, str(TESTS / "in_app" / "server.js")], env=env,
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


@contextmanager
def in_app(name: str, db: str) -> Iterator[str]:
    """The Express app with ``name`` in it, pointed at a snapshotd whose origin it is; the
    app's base URL."""
    chromium = require_chromium()
    middleware = MIDDLEWARES[name]
    app_port = free_port()
    origin = f"http://127.0.0.1:{app_port}"
    browser = BrowserSettings(
        concurrency=1, executable=chromium, javascript_timeout=0.3, render_timeout=15
    )
    face = name == "connect-s4a"
    # The public site is the app itself (127.0.0.1, any port); on the SEO4Ajax face, a
    # public host of its own, the face being where connect-s4a sends its requests.
    site = SiteSettings(name="app", origin=origin,
                        hosts=("shop.test",) if face else ("127.0.0.1",))
    settings = Settings(
        db=db, api_tokens=(TOKEN,), miss_wait=20.0, browser=browser, sites=(site,),
        seo4ajax_hosts=("127.0.0.1",) if face else (),
        render_clients=("127.0.0.1/32",) if name == "rendertron-middleware" else (),
    )
    with serve_asgi(create_app(settings, crawler=False)) as base:
        service, token = {
            "prerender-node": (f"{base}/_snapshotd/render/", TOKEN),
            "connect-s4a": (f"{base}/", ""),
            "rendertron-middleware": (f"{base}/_snapshotd/render", ""),
        }[name]
        if face:
            with httpx.Client(base_url=base, trust_env=False,
                              headers={"Authorization": f"Bearer {TOKEN}"}) as api:
                token = str(api.get(f"{API}/sites/app").json()["site_token"])
        with express(middleware, app_port, service, token) as url:
            yield url


@pytest.mark.parametrize("name", sorted(MIDDLEWARES))
def test_a_middleware_in_the_app_it_renders_gets_rendered_pages_without_a_loop(
    name: str, tmp_path
) -> None:
    bots = BINGBOT if name == "rendertron-middleware" else GOOGLEBOT
    with in_app(name, str(tmp_path / "snap.db")) as app, httpx.Client(
        base_url=app, timeout=60, trust_env=False,
        headers={"Host": "shop.test"} if name == "connect-s4a" else {},
    ) as client:
        # One page, the phone crawler first: the desktop one's request renders its own
        # profile then (the phone's miss owed it), through the middleware as well.
        for device, bot in bots.items():
            r = client.get("/items/kettle", headers={"User-Agent": bot})
            assert r.status_code == 200, (device, r.status_code, r.text[:300])
            assert r.headers.get("x-snapshotd-cache") in ("MISS", "HIT"), r.headers
            assert "<script" not in r.text
            # The page's scripts ran, and saw the crawler's user agent.
            page = r.text.split("page: ", 1)[1].split("<", 1)[0]
            assert "Googlebot/2.1" in page, page
            # The app saw the device's browser: no crawler's name, nothing a middleware
            # takes for a bot.
            header = r.text.split("header: ", 1)[1].split("<", 1)[0]
            assert "bot" not in header.lower() and "Chrome/" in header, header
            # The profile the bot is served: rendertron-middleware sends no user agent, and
            # Rendertron's protocol then renders the desktop page.
            mobile = device == "mobile" and name != "rendertron-middleware"
            assert ("Mobile" in header) == mobile, header
        person = client.get("/items/person", headers={"User-Agent": PERSON})
        assert "express shell" in person.text and "x-snapshotd-cache" not in person.headers
