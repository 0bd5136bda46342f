"""Each bot is served the snapshot of its device profile: a real snapshotd in front of a real
origin, real Chromium and a real SQLite file."""

from __future__ import annotations

import io
import json
import math
import sqlite3
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

from snapshotd.config.settings import BrowserSettings, Settings, SiteSettings
from snapshotd.server.app import create_app
from tests.chromium import require_chromium
from tests.servers import serve_asgi
from tests.test_devices import BINGBOT_MOBILE, FACEBOOK, GOOGLEBOT_DESKTOP, GOOGLEBOT_SMARTPHONE

pytestmark = pytest.mark.browser

TOKEN = "devices-token"

# A page with a phone layout below 600 px and a desktop layout above, as a responsive app
# renders it; and one that shows the same whatever the width.
RESPONSIVE = """<!doctype html><html><head><title>product</title>
<meta name="viewport" content="width=device-width, initial-scale=1"></head><body>
<main id="app"></main>
<script>
  const phone = innerWidth < 600;
  document.getElementById("app").innerHTML = phone
    ? "<h1>Kettle</h1><p>Quick facts for people on the move: boils in ninety seconds.</p>"
      + "<section>Questions asked on phones about the kettle and its warranty.</section>"
    : "<h1>Kettle</h1><table><tr><td>Full specification sheet for desk readers, wattage,"
      + " capacity, dimensions and the complete comparison with other kettles.</td></tr></table>"
      + "<a href='/specs'>every specification</a>";
</script></body></html>"""
PLAIN = """<!doctype html><html><head><title>about</title>
<meta name="viewport" content="width=device-width, initial-scale=1"></head><body>
<main id="app"></main>
<script>
  document.getElementById("app").innerHTML =
    "<h1>About us</h1><p>We make kettles and have done so since nineteen ninety one.</p>";
</script></body></html>"""
PHONE_WORDS, DESKTOP_WORDS = "Quick facts for people", "Full specification sheet"


def _origin(asked: list[tuple[str, bool]] | None = None) -> Starlette:
    """The site; ``asked`` gets each request for a product page: its path, and whether it
    came as a phone."""

    async def product(request: Request) -> HTMLResponse:
        if asked is not None:
            asked.append((request.url.path, "Mobile" in request.headers["user-agent"]))
        return HTMLResponse(RESPONSIVE)

    async def about(request: Request) -> HTMLResponse:
        return HTMLResponse(PLAIN)

    async def specs(request: Request) -> HTMLResponse:
        return HTMLResponse(PLAIN.replace("About us", "Specifications"))

    return Starlette(routes=[
        Route("/product", product), Route("/about", about), Route("/specs", specs),
    ])


def _settings(tmp_path: Path, origin: str, **site: object) -> Settings:
    return Settings(
        db=str(tmp_path / "d.db"),
        api_tokens=(TOKEN,),
        browser=BrowserSettings(
            concurrency=2, executable=require_chromium(), javascript_timeout=0.3,
            render_timeout=15,
        ),
        sites=(replace(SiteSettings(origin=origin), **site),),
    )


def _get(base: str, path: str, agent: str, **headers: str) -> httpx.Response:
    return httpx.get(
        base + path, headers={"User-Agent": agent, **headers}, timeout=60, trust_env=False
    )


def _profile_rows(db: str) -> list[tuple[str, str]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(
            "SELECT p.path, v.profile FROM profile_snapshots v JOIN paths p ON p.id = v.path_id"
        ).fetchall()
    finally:
        conn.close()


def test_each_bot_gets_the_layout_its_device_shows_and_a_page_alike_in_both_is_one_copy(
    tmp_path: Path,
) -> None:
    asked: list[tuple[str, bool]] = []
    with serve_asgi(_origin(asked)) as origin:
        settings = _settings(tmp_path, origin)
        with serve_asgi(create_app(settings, crawler=False)) as base:
            phone = _get(base, "/product", GOOGLEBOT_SMARTPHONE)
            # The phone crawler's miss rendered the phone's page alone: the desktop one is
            # owed, not served the phone's layout.
            assert asked == [("/product", True)]
            assert _profile_rows(settings.db) == []
            auth = {"Authorization": f"Bearer {TOKEN}"}
            api = base + "/_snapshotd/api/v1/sites/default"
            owed = httpx.get(f"{api}/snapshot/product?profile=desktop", headers=auth,
                             trust_env=False)
            assert owed.status_code == 404 and "not rendered as desktop" in owed.text
            desk = _get(base, "/product", GOOGLEBOT_DESKTOP)
            assert asked == [("/product", True), ("/product", False)]
            desk_again = _get(base, "/product", GOOGLEBOT_DESKTOP)
            bing_phone = _get(base, "/product", BINGBOT_MOBILE)
            preview = _get(base, "/product", FACEBOOK)
            etag = {"If-None-Match": phone.headers["etag"]}
            again = _get(base, "/product", GOOGLEBOT_SMARTPHONE, **etag)
            about = [_get(base, "/about", a) for a in (GOOGLEBOT_SMARTPHONE, GOOGLEBOT_DESKTOP)]
            record = httpx.get(f"{api}/paths/product", headers=auth, trust_env=False).json()
            listed = httpx.get(f"{api}/paths", headers=auth, trust_env=False).json()["paths"]
            shown = {
                p: httpx.get(f"{api}/snapshot/product?profile={p}", headers=auth, trust_env=False)
                for p in ("mobile", "desktop", "tablet")
            }
    assert phone.headers["x-snapshotd-cache"] == "MISS"
    assert PHONE_WORDS in phone.text and DESKTOP_WORDS not in phone.text
    # The desktop crawler's first request rendered its own; the next is served it.
    assert desk.headers["x-snapshotd-cache"] == "MISS"
    assert DESKTOP_WORDS in desk.text and PHONE_WORDS not in desk.text
    assert desk_again.headers["x-snapshotd-cache"] == "HIT" and desk_again.text == desk.text
    assert len(asked) == 2
    assert PHONE_WORDS in bing_phone.text
    assert DESKTOP_WORDS in preview.text
    assert phone.headers["etag"] != desk.headers["etag"]
    assert "User-Agent" in phone.headers["vary"] and "User-Agent" in desk.headers["vary"]
    assert again.status_code == 304
    assert about[0].text == about[1].text and "nineteen ninety one" in about[0].text
    # The page that differs keeps a desktop row beside its own; the one alike keeps none.
    assert _profile_rows(settings.db) == [("/product", "desktop")]
    assert record["profiles"] == ["mobile", "desktop"]
    assert {r["path"]: r["profiles"] for r in listed} == {
        "/product": ["mobile", "desktop"], "/about": ["mobile"],
    }
    assert DESKTOP_WORDS in shown["desktop"].text
    assert shown["desktop"].headers["x-snapshotd-profile"] == "desktop"
    assert PHONE_WORDS in shown["mobile"].text
    assert shown["mobile"].headers["x-snapshotd-profile"] == "mobile"
    assert shown["tablet"].status_code == 400 and "profile" in shown["tablet"].text
    report = subprocess.run(
        [sys.executable, "-m", "snapshotd", "report", "--db", settings.db, "--format", "jsonl"],
        capture_output=True, text=True, check=True,
    ).stdout
    rows = {r["path"]: r["profiles"] for r in map(json.loads, report.splitlines())}
    assert rows == {"/product": "mobile desktop", "/about": "mobile"}


def test_a_site_that_serves_one_profile_renders_and_serves_only_that_one(tmp_path: Path) -> None:
    with serve_asgi(_origin()) as origin:
        settings = _settings(tmp_path, origin, devices="mobile")
        with serve_asgi(create_app(settings, crawler=False)) as base:
            desk = _get(base, "/product", GOOGLEBOT_DESKTOP)
            phone = _get(base, "/product", GOOGLEBOT_SMARTPHONE)
    assert desk.headers["x-snapshotd-cache"] == "MISS"
    assert PHONE_WORDS in desk.text and phone.headers["x-snapshotd-cache"] == "HIT"
    assert phone.text == desk.text
    assert _profile_rows(settings.db) == []


def test_the_render_endpoint_takes_the_profile_as_rendertron_does(tmp_path: Path) -> None:
    with serve_asgi(_origin()) as origin:
        settings = _settings(tmp_path, origin)
        with serve_asgi(create_app(settings, crawler=False)) as base:
            auth = {"Authorization": f"Bearer {TOKEN}"}
            url = quote(origin + "/product", safe="")
            mobile = _get(base, f"/_snapshotd/render?url={url}&mobile", FACEBOOK, **auth)
            in_path = f"/_snapshotd/render/{origin}/product"
            by_agent = _get(base, in_path, GOOGLEBOT_DESKTOP, **auth)
            phone_agent = _get(base, in_path, GOOGLEBOT_SMARTPHONE, **auth)
    assert PHONE_WORDS in mobile.text
    assert DESKTOP_WORDS in by_agent.text
    assert PHONE_WORDS in phone_agent.text


@pytest.mark.parametrize("engine", ["sqlite", "postgres"])
async def test_a_crawl_captures_every_profile_the_site_serves(tmp_path: Path, engine: str) -> None:
    from snapshotd.cli.crawl import run_crawl
    from snapshotd.store import open_store
    from tests.conftest import drop_postgres_schema, postgres_schema

    schema = None
    if engine == "sqlite":
        db = str(tmp_path / "crawl.db")
    else:
        schema, db = await postgres_schema()
    try:
        with serve_asgi(_origin()) as origin:
            settings = replace(
                _settings(tmp_path, origin, seeds=("/product", "/about"), obey_robots=False),
                db=db,
            )
            status = await run_crawl(settings, out=io.StringIO(), progress=io.StringIO(), tty=False)
        assert status == 0
        store = open_store(db)
        await store.open()
        try:
            assert await store.own_profiles("default", ["/product", "/about"]) == {
                "/product": ("mobile", "desktop"), "/about": ("mobile",),
            }
            phone = await store.get_snapshot("default", "/product", "mobile")
            desk = await store.get_snapshot("default", "/product", "desktop")
            assert PHONE_WORDS in phone.html and DESKTOP_WORDS in desk.html
            # Linked from the desktop layout alone, and found all the same.
            specs = await store.get_path("default", "/specs")
            assert specs is not None and specs.state == "processed", specs
        finally:
            await store.close()
    finally:
        if schema is not None:
            await drop_postgres_schema(schema)


def test_a_page_that_reads_nothing_of_its_device_takes_one_render_for_both_bots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Only the site's first such page is checked: no later check is drawn at random.
    monkeypatch.setattr("snapshotd.capture.profiles.CHECK_ONE_IN", math.inf)
    # Which crawler's device each document request came as.
    asked: list[tuple[str, bool]] = []

    async def plain(request: Request) -> HTMLResponse:
        asked.append((request.url.path, "Mobile" in request.headers["user-agent"]))
        return HTMLResponse(PLAIN.replace("About us", request.url.path.strip("/").title()))

    async def product(request: Request) -> HTMLResponse:
        asked.append((request.url.path, "Mobile" in request.headers["user-agent"]))
        return HTMLResponse(RESPONSIVE)

    app = Starlette(routes=[Route("/product", product)]
                    + [Route(f"/{name}", plain) for name in ("about", "team", "history")])
    with serve_asgi(app) as origin:
        settings = _settings(tmp_path, origin)
        with serve_asgi(create_app(settings, crawler=False)) as base:
            # The site's first such page is checked in both profiles: the phone crawler is
            # answered first, the desktop crawler once the check rendered (or joins it).
            assert _get(base, "/about", GOOGLEBOT_SMARTPHONE).headers["x-snapshotd-cache"] == "MISS"
            assert "About" in _get(base, "/about", GOOGLEBOT_DESKTOP).text
            assert sorted(asked) == [("/about", False), ("/about", True)]
            asked.clear()
            # The next ones take one render, and the desktop crawler is served it.
            for path in ("/team", "/history"):
                phone = _get(base, path, GOOGLEBOT_SMARTPHONE)
                desk = _get(base, path, GOOGLEBOT_DESKTOP)
                assert phone.headers["x-snapshotd-cache"] == "MISS"
                assert desk.headers["x-snapshotd-cache"] == "HIT"
                assert desk.text == phone.text and path.strip("/").title() in desk.text
            assert asked == [("/team", True), ("/history", True)]
            asked.clear()
            # A page that reads its viewport's width is rendered as each crawler.
            desk = _get(base, "/product", GOOGLEBOT_DESKTOP)
            assert DESKTOP_WORDS in desk.text
            assert PHONE_WORDS in _get(base, "/product", GOOGLEBOT_SMARTPHONE).text
            assert asked == [("/product", True), ("/product", False)]
