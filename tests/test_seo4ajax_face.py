"""The SEO4Ajax-compatible face (snapshotd.proxy.seo4ajax_face) behind SEO4Ajax's own integrations,
changed only in the API host they name: the real connect-s4a middleware (from npm) in front of
an Express app, and real nginx configured the way SEO4Ajax's nginx integration is.

snapshotd runs on uvicorn with a real SQLite file and real Chromium; the example SPA is the
site's origin, and every path it is asked for is recorded, so a token that reaches it would be
seen. Everything listens on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from examples.spa.app import create_app as create_spa
from snapshotd.config.settings import BrowserSettings, Settings, SiteSettings
from snapshotd.server.app import create_app
from tests.chromium import require_chromium
from tests.front import free_port, nginx, stop
from tests.servers import serve_asgi
from tests.test_api_prerender import require_node as _require_node

pytestmark = pytest.mark.browser

HERE = Path(__file__).parent / "connect_s4a"
TOKEN = "face-api-token"
API = "/_snapshotd/api/v1"
BOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
PERSON = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/120 Safari/537.36"


@dataclass
class Stack:
    snapshotd: str
    origin_paths: list[str] = field(default_factory=list)

    def api(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.snapshotd, timeout=30, trust_env=False,
            headers={"Authorization": f"Bearer {TOKEN}"},
        )

    def site_token(self, site: str = "spa") -> str:
        with self.api() as api:
            return str(api.get(f"{API}/sites/{site}").json()["site_token"])


def recording(app: Any, paths: list[str]) -> Any:
    """``app``, recording the raw path of every request it is asked."""

    async def recorded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            paths.append((scope.get("raw_path") or scope["path"].encode()).decode("latin-1"))
        await app(scope, receive, send)

    return recorded


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[Stack]:
    chromium = require_chromium()
    db = str(tmp_path_factory.mktemp("face") / "snap.db")
    paths: list[str] = []
    with serve_asgi(recording(create_spa(), paths)) as spa:
        browser = BrowserSettings(
            concurrency=1, executable=chromium, javascript_timeout=0.3, render_timeout=15
        )
        # The site's public host is not the face's: the face finds the site by its token.
        site = SiteSettings(name="spa", origin=spa, hosts=("shop.test",))
        settings = Settings(
            db=db, api_tokens=(TOKEN,), miss_wait=15.0, browser=browser, sites=(site,),
            seo4ajax_hosts=("127.0.0.1",),
        )
        with serve_asgi(create_app(settings, crawler=False)) as base:
            yield Stack(base, paths)


def require_connect_s4a() -> str:
    node = _require_node()
    if not (HERE / "node_modules" / "connect-s4a").is_dir():
        missing = f"npm packages are missing: run npm ci --prefix {HERE}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(missing)
        pytest.skip(missing)
    return node


def start_express(node: str, api_end_point: str, site_token: str) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "S4A_API_END_POINT": api_end_point, "S4A_SITE_TOKEN": site_token}
    proc = subprocess.Popen(
        [node, str(HERE / "server.js")], cwd=HERE, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 20)
    line = proc.stdout.readline() if ready else ""
    if not line:
        proc.kill()
        _, err = proc.communicate(timeout=5)
        raise RuntimeError(f"express did not start: {err.strip()[-500:]}")
    return proc, f"http://127.0.0.1:{json.loads(line)['port']}"


def test_connect_s4a_pointed_at_the_face_serves_bots_snapshots_and_people_the_app(
    stack: Stack,
) -> None:
    node = require_connect_s4a()
    site_token = stack.site_token()
    assert len(site_token) == 32 and site_token != TOKEN
    # The one change a switcher makes: apiEndPoint names snapshotd instead of SEO4Ajax.
    proc, express = start_express(node, stack.snapshotd + "/", site_token)
    try:
        with httpx.Client(base_url=express, timeout=30, trust_env=False) as client:
            first = client.get("/items/3", headers={"User-Agent": BOT})
            assert first.status_code == 200, first.text
            assert first.headers["x-snapshotd-cache"] == "MISS"
            assert "Item 3 is a sturdy thing" in first.text
            assert "express shell" not in first.text and "<script" not in first.text

            second = client.get("/items/3", headers={"User-Agent": BOT})
            assert second.headers["x-snapshotd-cache"] == "HIT"
            assert second.text == first.text

            # _escaped_fragment_ goes through the face whatever the User-Agent, as a hashbang.
            faq = client.get("/?_escaped_fragment_=/faq", headers={"User-Agent": PERSON})
            assert faq.status_code == 200 and "This page lives at a hashbang URL" in faq.text

            person = client.get("/items/3", headers={"User-Agent": PERSON})
            assert "express shell" in person.text and "x-snapshotd-cache" not in person.headers

        with stack.api() as api:
            record = api.get(f"{API}/sites/spa/paths/items/3").json()
            assert record["state"] == "processed"
            assert api.get(f"{API}/sites/spa/paths/%23%21%2Ffaq").json()["state"] == "processed"
        # The renderer asked the origin for the page itself, never with the token before it.
        assert "/items/3" in stack.origin_paths
        assert not [p for p in stack.origin_paths if site_token in p]
    finally:
        stop(proc)


def test_a_page_not_captured_in_time_is_a_503_to_ask_again_never_the_origins_page(
    stack: Stack,
) -> None:
    node = require_connect_s4a()
    site_token = stack.site_token()
    proc, express = start_express(node, stack.snapshotd + "/", site_token)
    before = len(stack.origin_paths)
    try:
        with stack.api() as api:
            assert api.post(f"{API}/sites/spa/pause").status_code == 200
        with httpx.Client(base_url=express, timeout=30, trust_env=False) as client:
            r = client.get("/items/5", headers={"User-Agent": BOT})
            assert r.status_code == 503  # as SEO4Ajax's API: not rendered yet, ask later
            assert r.headers["retry-after"] == "60"
            assert r.headers["x-snapshotd-cache"] == "UNAVAILABLE"
            assert "express shell" not in r.text
        assert stack.origin_paths[before:] == []  # nothing went to the origin for it
    finally:
        stop(proc)
        with stack.api() as api:
            api.post(f"{API}/sites/spa/resume")


def test_the_face_answers_without_a_user_agent_passes_assets_without_the_token_and_ends_loops(
    stack: Stack,
) -> None:
    site_token = stack.site_token()
    with httpx.Client(base_url=stack.snapshotd, timeout=30, trust_env=False) as face:
        del face.headers["user-agent"]  # SEO4Ajax's Cloudflare Worker sends none
        r = face.get(f"/{site_token}/items/3")
        assert r.status_code == 200 and "Item 3 is a sturdy thing" in r.text
        assert r.headers["x-snapshotd-cache"] in ("HIT", "MISS")

        before = len(stack.origin_paths)
        asset = face.get(f"/{site_token}/app.js")
        assert asset.status_code == 200 and "x-snapshotd-cache" not in asset.headers
        assert stack.origin_paths[before:] == ["/app.js"]

        # What the face sent to an origin that sends it back: ended at once.
        loop = face.get(f"/{site_token}/items/3", headers={"X-Snapshotd": "face"})
        assert loop.status_code == 508

        unknown = face.get("/0123456789abcdef0123456789abcdef/items/3")
        assert unknown.status_code == 404 and "spa" not in unknown.text
        assert face.get(f"/{TOKEN}/items/3").status_code == 404  # the API token is not one

    # The site's own Host on the proxy is unchanged: not the face's.
    with httpx.Client(base_url=stack.snapshotd, timeout=30, trust_env=False) as proxy:
        r = proxy.get(f"/{site_token}/items/3", headers={"Host": "shop.test", "User-Agent": BOT})
        assert "Item 3" not in r.text


def test_a_rotated_site_token_takes_the_old_ones_place(stack: Stack) -> None:
    old = stack.site_token()
    with stack.api() as api:
        r = api.post(f"{API}/sites/spa/site-token")
        assert r.status_code == 200, r.text
        new = r.json()["site_token"]
        assert new != old and len(new) == 32
        assert api.get(f"{API}/sites/spa").json()["site_token"] == new
        assert api.post(f"{API}/sites/nowhere/site-token").status_code == 404
    with httpx.Client(base_url=stack.snapshotd, timeout=30, trust_env=False) as face:
        assert face.get(f"/{old}/items/3", headers={"User-Agent": BOT}).status_code == 404
        assert face.get(f"/{new}/items/3", headers={"User-Agent": BOT}).status_code == 200


# SEO4Ajax's nginx integration: pages nginx has no file for go to @s4a_analyse, which sends
# bots (its user-agent test) and _escaped_fragment_ requests that are not files of another
# type to the API with the site token put before the path; anything else gets index.html.
# A switcher changes only the API's host (here snapshotd's face, plain HTTP on loopback).
S4A_BOTS = (
    "google|bot|lighthouse|spider|pinterest|crawler|archiver|flipboardproxy|mediapartners|"
    "facebookexternalhit|insights|quora|whatsapp|slurp"
)
SEO4AJAX_NGINX = r"""
server {
  listen 127.0.0.1:%(port)d;
  root %(root)s;

  location / {
    try_files $uri @s4a_analyse;
  }

  location @s4a_analyse {
    set $s4a_token "%(site_token)s";
    set $s4a_proxy 0;
    if ($http_user_agent ~* "%(bots)s") {
      set $s4a_proxy 1;
    }
    if ($args ~ "_escaped_fragment_=") {
      set $s4a_proxy 1;
    }
    if ($uri ~* "\.(?!htm)[^.]+$") {
      set $s4a_proxy 0;
    }
    if ($s4a_proxy = 1) {
      rewrite (.*) /$s4a_token$1 break;
      proxy_pass http://%(api_host)s;
    }
    rewrite .* /index.html break;
  }
}
"""


def test_seo4ajaxs_nginx_integration_pointed_at_the_face(stack: Stack) -> None:
    site_token = stack.site_token()
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="snapshotd-s4a-root-") as root:
        os.chmod(root, 0o755)
        Path(root, "index.html").write_text("<!doctype html><div id=app>nginx shell</div>")
        os.chmod(Path(root, "index.html"), 0o644)
        block = SEO4AJAX_NGINX % {
            "port": port, "root": root, "site_token": site_token, "bots": S4A_BOTS,
            "api_host": stack.snapshotd.split("://", 1)[1],
        }
        before = len(stack.origin_paths)
        with nginx(block, port), httpx.Client(
            base_url=f"http://127.0.0.1:{port}", timeout=30, trust_env=False
        ) as client:
            bot = client.get("/items/7?color=red", headers={"User-Agent": BOT})
            assert bot.status_code == 200, bot.text
            assert "Item 7" in bot.text and "nginx shell" not in bot.text
            assert bot.headers["x-snapshotd-cache"] in ("MISS", "HIT")
            again = client.get("/items/7?color=red", headers={"User-Agent": BOT})
            assert again.headers["x-snapshotd-cache"] == "HIT"
            person = client.get("/items/7", headers={"User-Agent": PERSON})
            assert "nginx shell" in person.text
        with stack.api() as api:
            record = api.get(f"{API}/sites/spa/paths/items/7%3Fcolor%3Dred").json()
            assert record["state"] == "processed", record
        assert not [p for p in stack.origin_paths[before:] if site_token in p]
        assert "/items/7" in stack.origin_paths[before:]  # rendered from the origin
