"""The render endpoint behind the real prerender-node middleware (from npm) in an Express app.

snapshotd runs on uvicorn with real SQLite and real Chromium, the example SPA is its origin,
and Express (node) forwards bot requests to ``/_snapshotd/render/`` as prerender-node does
for prerender.io. Everything listens on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from examples.spa.app import create_app as create_spa
from snapshotd.config.settings import BrowserSettings, Settings, SiteSettings
from snapshotd.server.app import create_app
from tests.chromium import require_chromium
from tests.front import stop
from tests.servers import serve_asgi

pytestmark = pytest.mark.browser

HERE = Path(__file__).parent / "prerender_node"
TOKEN = "prerender-node-token"
BOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
PERSON = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/120 Safari/537.36"


def require_node() -> str:
    """node, with this test's npm packages installed (``make test`` installs them)."""
    node = shutil.which("node")
    missing = None
    if node is None:
        missing = "node is not installed"
    elif not (HERE / "node_modules" / "prerender-node").is_dir():
        missing = f"npm packages are missing: run npm ci --prefix {HERE}"
    if missing:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(missing)
        pytest.skip(missing)
    assert node is not None
    return node


def start_express(node: str, render_url: str, token: str) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "SNAPSHOTD_RENDER_URL": render_url, "PRERENDER_TOKEN": token}
    proc = subprocess.Popen(
        [node, str(HERE / "server.js")],
        cwd=HERE,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 20)
    line = proc.stdout.readline() if ready else ""
    if not line:
        proc.kill()
        _, err = proc.communicate(timeout=5)
        raise RuntimeError(f"express did not start: {err.strip()[-500:]}")
    return proc, f"http://127.0.0.1:{json.loads(line)['port']}"


@pytest.fixture(scope="module")
def snapshotd(tmp_path_factory) -> Iterator[str]:
    chromium = require_chromium()
    db = str(tmp_path_factory.mktemp("prerender") / "snap.db")
    with serve_asgi(create_spa()) as spa:
        browser = BrowserSettings(
            concurrency=1, executable=chromium, javascript_timeout=0.3, render_timeout=15
        )
        # The public site is the Express app on 127.0.0.1 (any port); its origin is the SPA.
        site = SiteSettings(name="spa", origin=spa, hosts=("127.0.0.1",))
        settings = Settings(
            db=db, api_tokens=(TOKEN,), miss_wait=15.0, browser=browser, sites=(site,)
        )
        with serve_asgi(create_app(settings, crawler=False)) as base:
            yield base


def test_a_bot_at_express_gets_snapshotds_snapshot(snapshotd: str) -> None:
    node = require_node()
    proc, express = start_express(node, f"{snapshotd}/_snapshotd/render/", TOKEN)
    try:
        with httpx.Client(base_url=express, timeout=30, trust_env=False) as client:
            first = client.get("/items/3", headers={"User-Agent": BOT})
            assert first.status_code == 200, first.text
            assert first.headers["x-snapshotd-cache"] == "MISS"
            assert "Item 3 is a sturdy thing" in first.text
            assert "<script" not in first.text
            assert "express shell" not in first.text

            second = client.get("/items/3", headers={"User-Agent": BOT})
            assert second.headers["x-snapshotd-cache"] == "HIT"
            assert second.text == first.text

            person = client.get("/items/3", headers={"User-Agent": PERSON})
            assert "express shell" in person.text
            assert "x-snapshotd-cache" not in person.headers

        with httpx.Client(base_url=snapshotd, timeout=10, trust_env=False) as api:
            auth = {"Authorization": f"Bearer {TOKEN}"}
            record = api.get("/_snapshotd/api/v1/sites/spa/paths/items/3", headers=auth).json()
            assert record["state"] == "processed" and record["priority"] == 0  # new: queued last
            # The same URL the way prerender.io's API takes it.
            r = api.get(
                "/_snapshotd/render",
                params={"url": f"{express}/items/3"},
                headers={"X-Prerender-Token": TOKEN, "User-Agent": BOT},
            )
            assert r.headers["x-snapshotd-cache"] == "HIT" and r.text == first.text
    finally:
        stop(proc)


def test_express_with_a_wrong_token_gets_no_snapshot(snapshotd: str) -> None:
    node = require_node()
    proc, express = start_express(node, f"{snapshotd}/_snapshotd/render/", "wrong")
    try:
        with httpx.Client(base_url=express, timeout=30, trust_env=False) as client:
            r = client.get("/about", headers={"User-Agent": BOT})
            # prerender-node relays the service's answer; nothing was rendered for it.
            assert r.status_code == 401
            assert "x-snapshotd-cache" not in r.headers
    finally:
        stop(proc)
