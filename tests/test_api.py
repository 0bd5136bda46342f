"""The API in-process (httpx.ASGITransport) over a real SQLite file; nothing renders here.

Render-endpoint tests that reach an origin use a real loopback server (pytest-httpserver).
"""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

import httpx
import pytest
from pytest_httpserver import HTTPServer
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from snapshotd.api import (
    MAX_BODY,
    MAX_PATHS_PER_CALL,
    ROUTES,
    create_api,
    openapi,
    token_matches,
)
from snapshotd.config.settings import Settings, SiteSettings
from snapshotd.render.renderer import CaptureResult
from snapshotd.rewrite import load_rules
from snapshotd.server.app import SnapshotdApp, console_url, create_app
from snapshotd.store.interface import Store
from snapshotd.store.outcome import CaptureOutcome
from tests.servers import serve_asgi

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
API = "/_snapshotd/api/v1"


class RefusingRenderer:
    """A renderer for tests where nothing may render: every capture is an error."""

    def __init__(self) -> None:
        self.captures: list[str] = []

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def capture(
        self, url: str, site: SiteSettings, profile: str = "desktop"
    ) -> CaptureResult:
        self.captures.append(url)
        return CaptureResult(url=url, final_url=url, error="no renderer in this test")


@dataclass
class Env:
    app: SnapshotdApp
    client: httpx.AsyncClient
    store: Store
    renderer: RefusingRenderer

    async def capture(self, site: str, path: str, html: str = "<html><body>hi</body></html>"):
        """Store a snapshot as the crawler would: claim, then complete."""
        await self.store.enqueue(site, path, 2)
        record = await self.store.claim_path(site, path, "test", 60)
        assert record is not None
        assert await self.store.complete(
            site,
            path,
            "test",
            CaptureOutcome(html=html,
                status=200,
                headers={},
                final_url="",
                expires_at=time.time() + 3600),
        )


def make_settings(tmp_path, **overrides) -> Settings:
    shop = SiteSettings(
        name="shop", origin="http://127.0.0.1:9", hosts=("shop.test",), ignore=("/cart",)
    )
    blog = SiteSettings(name="blog", origin="http://127.0.0.1:9", hosts=("blog.test",))
    values = {"db": str(tmp_path / "api.db"), "api_tokens": (TOKEN,), "sites": (shop, blog)}
    values.update(overrides)
    return Settings(**values)


@pytest.fixture
async def env(tmp_path) -> AsyncIterator[Env]:
    async with running(make_settings(tmp_path)) as e:
        yield e


class running:
    """The application with its lifespan open and a client on it."""

    def __init__(
        self, settings: Settings, *, client: tuple[str, int] = ("127.0.0.1", 50000), rules=None
    ) -> None:
        self.renderer = RefusingRenderer()
        self.app = create_app(settings, renderer=self.renderer, crawler=False, rules=rules)
        self.client_addr = client

    async def __aenter__(self) -> Env:
        self.cm = self.app.lifespan()
        await self.cm.__aenter__()
        transport = httpx.ASGITransport(app=self.app, client=self.client_addr)
        self.client = httpx.AsyncClient(transport=transport, base_url="http://snapshotd.test")
        return Env(self.app, self.client, self.app.ctx.store, self.renderer)

    async def __aexit__(self, *exc) -> None:
        await self.client.aclose()
        await self.cm.__aexit__(None, None, None)


# ---------------------------------------------------------------------------- auth


async def test_token_is_required_and_checked(env: Env) -> None:
    c = env.client
    r = await c.get(f"{API}/sites")
    assert r.status_code == 401
    assert r.headers["www-authenticate"].startswith("Bearer")
    assert "token" in r.json()["error"]
    assert (
        await c.get(f"{API}/sites", headers={"Authorization": "Bearer nope"})
    ).status_code == 401
    assert (await c.get(f"{API}/sites", headers={"Authorization": TOKEN})).status_code == 401
    # The Prerender header is for the render endpoint only.
    assert (await c.get(f"{API}/sites", headers={"X-Prerender-Token": TOKEN})).status_code == 401
    assert (await c.get(f"{API}/sites", headers=AUTH)).status_code == 200
    # Unknown routes and unknown sites tell nothing without a token.
    assert (await c.get(f"{API}/nothing")).status_code == 401
    assert (await c.get(f"{API}/sites/nosuch/paths")).status_code == 401
    for path in ("/_snapshotd/metrics", "/_snapshotd/api/openapi.json"):
        assert (await c.get(path)).status_code == 401
        assert (await c.get(path, headers=AUTH)).status_code == 200
    # Open: health and the console's files, which hold no data.
    assert (await c.get("/_snapshotd/healthz")).json() == {"status": "ok"}
    for path in (
        "/_snapshotd/console",
        "/_snapshotd/console/console.js",
        "/_snapshotd/console/console.css",
    ):
        assert (await c.get(path)).status_code == 200, path


def test_token_comparison_checks_every_token() -> None:
    assert token_matches("b", ["a", "b", "c"])
    assert not token_matches("", ["a"])
    assert not token_matches("a", [])
    assert not token_matches("ab", ["a", "b"])
    assert token_matches("ünï", ["ünï"])
    assert not token_matches("\udcff", ["x"])  # undecodable header bytes don't raise


CONSOLE_LINE = re.compile(r"console: (http://\S+/_snapshotd/console)#token=([A-Za-z0-9_-]+)$")


def console_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "#token=" in r.getMessage()]


def test_without_configured_tokens_only_the_logged_token_opens_the_api(tmp_path, caplog) -> None:
    caplog.set_level(logging.INFO, logger="snapshotd")
    settings = make_settings(tmp_path, api_tokens=())
    renderer = RefusingRenderer()
    app = create_app(settings, renderer=renderer, crawler=False)
    with serve_asgi(app) as base, httpx.Client(base_url=base, trust_env=False) as c:
        # The client is on loopback with no forwarding header, as behind a plain proxy_pass.
        for path in (
            f"{API}/sites",
            f"{API}/sites/shop/paths",
            "/_snapshotd/metrics",
            "/_snapshotd/api/openapi.json",
            "/_snapshotd/render?url=http://elsewhere.test/",
            "/_snapshotd/render/http://shop.test/",
        ):
            r = c.get(path)
            assert r.status_code == 401, path
            assert r.headers["www-authenticate"].startswith("Bearer"), path
        assert c.post(f"{API}/sites/shop/paths", json={"paths": ["/a"]}).status_code == 401
        assert c.delete(f"{API}/sites/shop/paths/a").status_code == 401
        # Open as before: health and the console's shell, which hold no data.
        assert c.get("/_snapshotd/healthz").json() == {"status": "ok"}
        assert c.get("/_snapshotd/console").status_code == 200

        lines = console_lines(caplog)
        assert len(lines) == 1, lines
        match = CONSOLE_LINE.search(lines[0])
        assert match is not None, lines[0]
        token = match.group(2)
        assert len(token) >= 32
        auth = {"Authorization": f"Bearer {token}"}
        assert c.get(f"{API}/sites", headers=auth).status_code == 200
        assert c.get("/_snapshotd/metrics", headers=auth).status_code == 200
        r = c.post(f"{API}/sites/shop/paths", json={"paths": ["/a"]}, headers=auth)
        assert r.json()["counts"] == {"queued": 1}
        wrong = {"Authorization": "Bearer " + token[:-1]}
        assert c.get(f"{API}/sites", headers=wrong).status_code == 401
        # The render endpoint takes it as prerender-node sends it: past the token check, a host
        # of no configured site is refused and nothing is fetched.
        prerender = {"X-Prerender-Token": token}
        r = c.get("/_snapshotd/render?url=http://elsewhere.test/", headers=prerender)
        assert r.status_code == 403
        assert "configured site" in r.json()["error"]
    assert renderer.captures == []
    assert len(console_lines(caplog)) == 1  # logged once, at start, not per request

    # Another process gets its own token.
    caplog.clear()
    other = create_app(settings, renderer=RefusingRenderer(), crawler=False)
    with serve_asgi(other) as base:
        (line,) = console_lines(caplog)
        match = CONSOLE_LINE.search(line)
        assert match is not None and match.group(2) != token
        r = httpx.get(f"{base}{API}/sites", headers=auth, trust_env=False)
        assert r.status_code == 401


def test_the_logged_console_url_names_an_address_a_browser_can_open(tmp_path) -> None:
    def url(host: str) -> str:
        return console_url(make_settings(tmp_path, host=host, port=8081), "tok")

    assert url("127.0.0.1") == "http://127.0.0.1:8081/_snapshotd/console#token=tok"
    assert url("0.0.0.0") == "http://127.0.0.1:8081/_snapshotd/console#token=tok"
    assert url("::") == "http://[::1]:8081/_snapshotd/console#token=tok"
    assert url("::1") == "http://[::1]:8081/_snapshotd/console#token=tok"
    assert url("snap.internal") == "http://snap.internal:8081/_snapshotd/console#token=tok"


async def test_configured_tokens_are_the_only_ones_and_nothing_is_generated(
    tmp_path, caplog
) -> None:
    caplog.set_level(logging.INFO, logger="snapshotd")
    async with running(make_settings(tmp_path)) as e:
        assert (await e.client.get(f"{API}/sites", headers=AUTH)).status_code == 200
        assert (await e.client.get(f"{API}/sites")).status_code == 401
    assert console_lines(caplog) == []


# ---------------------------------------------------------------------------- queueing


async def test_queue_defaults_to_priority_2_and_answers_per_path(env: Env) -> None:
    c = env.client
    r = await c.post(f"{API}/sites/shop/paths", headers=AUTH, json={"paths": ["/a", "/b?x=1"]})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["priority"] == 2 and body["counts"] == {"queued": 2}
    assert [x["result"] for x in body["results"]] == ["queued", "queued"]
    record = await env.store.get_path("shop", "/b?x=1")
    assert record is not None and record.state == "pending" and record.priority == 2

    r = await c.post(
        f"{API}/sites/shop/paths", headers=AUTH, json={"paths": ["/a", "/c"], "priority": 3}
    )
    assert [x["result"] for x in r.json()["results"]] == ["reprioritised", "queued"]
    assert (await env.store.get_path("shop", "/c")).priority == 3
    r = await c.post(f"{API}/sites/shop/paths", headers=AUTH, json={"paths": ["/a"], "priority": 0})
    assert r.json()["results"][0]["result"] == "pending"

    # A plain #fragment is dropped; a hashbang is a path of its own; ignored paths stay out.
    r = await c.post(
        f"{API}/sites/shop/paths", headers=AUTH, json={"paths": ["/d#top", "/#!/faq", "/cart/1"]}
    )
    assert [x["result"] for x in r.json()["results"]] == ["queued", "queued", "ignored"]
    assert await env.store.get_path("shop", "/d") is not None
    assert await env.store.get_path("shop", "/#!/faq") is not None
    assert await env.store.get_path("shop", "/cart/1") is None


async def test_force_recaptures_fresh_paths(env: Env) -> None:
    await env.capture("shop", "/fresh")
    c = env.client
    r = await c.post(f"{API}/sites/shop/paths", headers=AUTH, json={"paths": ["/fresh"]})
    assert r.json()["results"][0]["result"] == "fresh"
    assert (await env.store.get_path("shop", "/fresh")).state == "processed"
    r = await c.post(
        f"{API}/sites/shop/paths",
        headers=AUTH,
        json={"paths": ["/fresh"], "force": True, "priority": 1},
    )
    assert r.json()["results"][0]["result"] == "requeued"
    record = await env.store.get_path("shop", "/fresh")
    assert record.state == "pending" and record.priority == 1
    # The old snapshot is kept until the recapture lands.
    assert await env.store.get_snapshot("shop", "/fresh") is not None


async def test_rewrite_rules_apply_before_a_path_is_queued(tmp_path) -> None:
    rules_file = tmp_path / "shop.rules"
    rules_file.write_text(
        "^/old/(.*)$ /new/$1 [R=301]\n^/admin /admin [R=403]\n^(.*)\\?session=[^&]*$ $1\n"
    )
    settings = make_settings(tmp_path)
    rules = {"shop": load_rules(str(rules_file)), "blog": load_rules(str(rules_file))}
    async with running(settings, rules=rules) as e:
        r = await e.client.post(
            f"{API}/sites/shop/paths",
            headers=AUTH,
            json={"paths": ["/old/a", "/admin", "/p?session=x"]},
        )
        results = r.json()["results"]
        assert results[0] == {
            "path": "/old/a",
            "result": "redirect",
            "status": 301,
            "location": "/new/a",
        }
        assert results[1] == {"path": "/admin", "result": "status", "status": 403}
        assert results[2] == {"path": "/p?session=x", "result": "queued", "queued_as": "/p"}
        assert await e.store.get_path("shop", "/p") is not None
        assert await e.store.get_path("shop", "/old/a") is None


BAD_BODIES = [
    (b"not json", "body"),
    (b"", "body"),
    (b"\xff\xfe", "body"),
    (b'["/a"]', "body"),
    (b"[" * 100_000, "body"),
    (json.dumps({"path": ["/a"]}).encode(), "path"),
    (json.dumps({"priority": 2}).encode(), "paths"),
    (json.dumps({"paths": "/a"}).encode(), "paths"),
    (json.dumps({"paths": []}).encode(), "paths"),
    (json.dumps({"paths": ["/ok", 7]}).encode(), "paths[1]"),
    (json.dumps({"paths": ["/ok", "relative"]}).encode(), "paths[1]"),
    (json.dumps({"paths": ["/ok", "http://shop.test/a"]}).encode(), "paths[1]"),
    (json.dumps({"paths": ["/a/../../etc/passwd"]}).encode(), "paths[0]"),
    (json.dumps({"paths": ["/a%00b"]}).encode(), "paths[0]"),
    (json.dumps({"paths": ["/a b"]}).encode(), "paths[0]"),
    (json.dumps({"paths": ["/a%zz"]}).encode(), "paths[0]"),
    (json.dumps({"paths": ["/" + "a" * 3000]}).encode(), "paths[0]"),
    (json.dumps({"paths": ["/a"], "priority": 7}).encode(), "priority"),
    (json.dumps({"paths": ["/a"], "priority": -1}).encode(), "priority"),
    (json.dumps({"paths": ["/a"], "priority": "2"}).encode(), "priority"),
    (json.dumps({"paths": ["/a"], "priority": True}).encode(), "priority"),
    (json.dumps({"paths": ["/a"], "priority": 2.5}).encode(), "priority"),
    (json.dumps({"paths": ["/a"], "force": "yes"}).encode(), "force"),
    (json.dumps({"paths": [f"/p/{i}" for i in range(100_000)]}).encode(), "paths"),
]


@pytest.mark.parametrize("body,field", BAD_BODIES, ids=[f for _, f in BAD_BODIES])
async def test_bad_queue_requests_are_400_naming_the_field_and_queue_nothing(
    env: Env, body: bytes, field: str
) -> None:
    r = await env.client.post(f"{API}/sites/shop/paths", headers=AUTH, content=body)
    assert r.status_code == 400, r.text
    assert r.json()["field"] == field
    assert field.split("[")[0] in r.json()["error"] or field == "body"
    assert await env.store.counts() == {}


async def test_limits_of_one_call(env: Env) -> None:
    c = env.client
    paths = [f"/p/{i}" for i in range(MAX_PATHS_PER_CALL)]
    r = await c.post(f"{API}/sites/shop/paths", headers=AUTH, json={"paths": paths})
    assert r.status_code == 200
    assert r.json()["counts"] == {"queued": MAX_PATHS_PER_CALL}
    # One bad path in a big batch: nothing of the batch is applied.
    batch = [f"/q/{i}" for i in range(5000)] + ["no-slash"] + [f"/q/x{i}" for i in range(10)]
    r = await c.post(f"{API}/sites/shop/paths", headers=AUTH, json={"paths": batch})
    assert r.status_code == 400 and r.json()["field"] == "paths[5000]"
    assert (await env.store.counts())["shop"] == {"pending": MAX_PATHS_PER_CALL}


async def test_unknown_site_is_404(env: Env) -> None:
    r = await env.client.post(f"{API}/sites/nosuch/paths", headers=AUTH, json={"paths": ["/a"]})
    assert r.status_code == 404 and r.json()["field"] == "site"
    for path in ("paths", "paths/a", "snapshot/a"):
        assert (await env.client.get(f"{API}/sites/nosuch/{path}", headers=AUTH)).status_code == 404


async def test_bodies_over_10_mib_are_413(env: Env) -> None:
    c = env.client
    big = b'{"paths": ["/a"], "x": "' + b"x" * MAX_BODY + b'"}'
    r = await c.post(f"{API}/sites/shop/paths", headers=AUTH, content=big)
    assert r.status_code == 413

    async def chunks():
        yield b'{"paths": ["/a"], "x": "'
        for _ in range(11):
            yield b"x" * (1024 * 1024)
        yield b'"}'

    # No Content-Length: the bytes are counted as they arrive.
    r = await c.post(f"{API}/sites/shop/paths", headers=AUTH, content=chunks())
    assert r.status_code == 413
    # A Content-Length that lies low does not help either.
    r = await c.post(
        f"{API}/sites/shop/sitemap", headers={**AUTH, "Content-Length": "10"}, content=chunks()
    )
    assert r.status_code == 413
    assert await env.store.counts() == {}


# ---------------------------------------------------------------------------- reading


async def test_sites_show_counts_per_state(env: Env) -> None:
    await env.capture("shop", "/done")
    await env.store.enqueue("shop", "/todo", 2)
    await env.store.enqueue("blog", "/post", 1)
    r = await env.client.get(f"{API}/sites", headers=AUTH)
    data = r.json()
    shop, blog = data["sites"]
    assert shop["name"] == "shop" and shop["hosts"] == ["shop.test"]
    assert shop["counts"] == {
        "pending": 1,
        "processing": 0,
        "processed": 1,
        "crawled": 0,
        "error": 0,
        "ignored": 0,
    }
    assert shop["total"] == 2 and blog["counts"]["pending"] == 1
    assert data["queue_depth"] == {"0": 0, "1": 1, "2": 1, "3": 0}
    assert "capture_rate" in data and "captures" in data


async def test_path_segment_decoding(env: Env) -> None:
    c = env.client
    cases = {
        "": "/",
        "item/7": "/item/7",
        "search%3Fq%3Dshoes": "/search?q=shoes",
        "caf%C3%A9": "/caf%C3%A9",
        "caf%25C3%25A9": "/caf%C3%A9",
        "%23%21%2Ffaq": "/#!/faq",
    }
    for segment, path in cases.items():
        await env.store.enqueue("shop", path, 2)
        r = await c.get(f"{API}/sites/shop/paths/{segment}", headers=AUTH)
        assert r.status_code == 200, (segment, r.text)
        assert r.json()["path"] == path
        # ``ref`` is the canonical segment: it names the same path again.
        again = await c.get(f"{API}/sites/shop/paths/{r.json()['ref']}", headers=AUTH)
        assert again.json()["path"] == path


async def test_a_path_stored_in_an_older_form_stays_readable_and_deletable(env: Env) -> None:
    c = env.client
    # an older version stored the hashbang page as the proxy once spelled it
    await env.store.enqueue("shop", "/#!/caf\u00e9", 2)
    listed = (await c.get(f"{API}/sites/shop/paths", headers=AUTH)).json()["paths"]
    ref = next(p["ref"] for p in listed if p["path"] == "/#!/caf\u00e9")
    r = await c.get(f"{API}/sites/shop/paths/{ref}", headers=AUTH)
    assert r.status_code == 200 and r.json()["path"] == "/#!/caf\u00e9"
    # its normal form is another path, which the proxy and the crawler now use
    await env.store.enqueue("shop", "/#!/caf%C3%A9", 2)
    r = await c.get(f"{API}/sites/shop/paths/%23%21%2Fcaf%25C3%25A9", headers=AUTH)
    assert r.json()["path"] == "/#!/caf%C3%A9"
    r = await c.delete(f"{API}/sites/shop/paths/{ref}", headers=AUTH)
    assert r.status_code == 200 and r.json()["deleted"] == "/#!/caf\u00e9"
    assert await env.store.get_path("shop", "/#!/caf%C3%A9") is not None


@pytest.mark.parametrize(
    "segment",
    [
        "..%2F..%2Fetc%2Fpasswd",
        "a/%2e%2e/b",
        "a/..%2fb",
        "%2E",
        "a%00",
        "a%2500",
        "a%0A",
        "a%250a",
        "a%25zz",
    ],
)
async def test_path_traversal_and_control_characters_are_400(env: Env, segment: str) -> None:
    for method, kind in (("GET", "paths"), ("DELETE", "paths"), ("GET", "snapshot")):
        r = await env.client.request(method, f"{API}/sites/shop/{kind}/{segment}", headers=AUTH)
        assert r.status_code == 400, (method, kind, r.text)
        assert r.json()["field"] == "path"


async def test_one_path_snapshot_and_delete(env: Env) -> None:
    c = env.client
    r = await c.get(f"{API}/sites/shop/paths/items/1", headers=AUTH)
    assert r.status_code == 404
    html = "<html><head><title>One</title></head><body><h1>Item 1</h1></body></html>"
    await env.capture("shop", "/items/1", html)
    r = await c.get(f"{API}/sites/shop/paths/items/1", headers=AUTH)
    data = r.json()
    assert data["state"] == "processed" and data["status"] == 200
    assert data["captured_at"].endswith("Z") and data["expires_at"] > data["captured_at"]
    assert set(data) >= {"priority", "hops", "error", "duplicate_of", "queued_at"}

    r = await c.get(f"{API}/sites/shop/snapshot/items/1", headers=AUTH)
    assert r.status_code == 200 and r.text == html
    assert r.headers["content-type"].startswith("text/html")
    assert r.headers["content-security-policy"] == "sandbox"
    assert r.headers["x-snapshotd-status"] == "200"
    r = await c.get(
        f"{API}/sites/shop/snapshot/items/1", headers={**AUTH, "Accept-Encoding": "identity"}
    )
    assert r.headers.get("content-encoding") is None and r.text == html
    assert (await c.get(f"{API}/sites/shop/snapshot/items/2", headers=AUTH)).status_code == 404

    r = await c.delete(f"{API}/sites/shop/paths/items/1", headers=AUTH)
    assert r.status_code == 200 and r.json()["deleted"] == "/items/1"
    assert await env.store.get_path("shop", "/items/1") is None
    assert await env.store.get_snapshot("shop", "/items/1") is None
    assert (await c.get(f"{API}/sites/shop/snapshot/items/1", headers=AUTH)).status_code == 404
    assert (await c.delete(f"{API}/sites/shop/paths/items/1", headers=AUTH)).status_code == 404


async def test_pagination_is_stable_while_paths_are_added(env: Env) -> None:
    c = env.client
    originals = [f"/list/{i}" for i in range(120)]
    await env.store.enqueue_many("shop", [(p, 0) for p in originals], 2)
    seen: list[str] = []
    cursor = None
    added = 0
    while True:
        params = {"limit": "25", **({"cursor": cursor} if cursor else {})}
        r = await c.get(f"{API}/sites/shop/paths", headers=AUTH, params=params)
        assert r.status_code == 200
        page = r.json()
        seen += [p["path"] for p in page["paths"]]
        # New paths arrive between pages; they are newer than the cursor and never shift it.
        await env.store.enqueue_many("shop", [(f"/new/{added + i}", 0) for i in range(7)], 2)
        added += 7
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(originals))
    r = await c.get(f"{API}/sites/shop/paths", headers=AUTH, params={"limit": "3"})
    assert [p["path"] for p in r.json()["paths"]] == [f"/new/{added - 1 - i}" for i in range(3)]


async def test_list_filters_and_bad_parameters(env: Env) -> None:
    c = env.client
    await env.capture("shop", "/items/1")
    await env.store.enqueue_many("shop", [("/items/2", 0), ("/about", 0)], 2)
    r = await c.get(
        f"{API}/sites/shop/paths", headers=AUTH, params={"state": "pending", "prefix": "/items/"}
    )
    assert [p["path"] for p in r.json()["paths"]] == ["/items/2"]
    r = await c.get(f"{API}/sites/shop/paths", headers=AUTH, params={"state": "processed"})
    assert [p["path"] for p in r.json()["paths"]] == ["/items/1"]
    assert r.json()["next_cursor"] is None
    for params, field in [
        ({"state": "done"}, "state"),
        ({"limit": "0"}, "limit"),
        ({"limit": "5000"}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"cursor": "abc"}, "cursor"),
        ({"cursor": "-1"}, "cursor"),
        ({"prefix": "items"}, "prefix"),
        ({"sort": "asc"}, "sort"),
    ]:
        r = await c.get(f"{API}/sites/shop/paths", headers=AUTH, params=params)
        assert r.status_code == 400, params
        assert r.json()["field"] == field


# ---------------------------------------------------------------------------- sitemaps

SITEMAP = """<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
  <url><loc>http://shop.test/</loc><lastmod>2024-01-01</lastmod></url>
  <url><loc> https://shop.test/items/1?color=red </loc></url>
  <url><loc>http://127.0.0.1:9/about</loc></url>
  <url><loc>http://blog.test/post</loc></url>
  <url><loc>ftp://shop.test/file</loc></url>
  <url><loc>http://shop.test/cart</loc></url>
</urlset>"""


async def test_sitemap_upload_queues_its_urls(env: Env) -> None:
    c = env.client
    r = await c.post(f"{API}/sites/shop/sitemap", headers=AUTH, content=SITEMAP.encode())
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["found"] == 6 and data["priority"] == 2
    assert data["counts"] == {"queued": 3, "ignored": 1}
    assert {s["reason"] for s in data["skipped"]} == {"another site's host", "not an http(s) URL"}
    for path in ("/", "/items/1?color=red", "/about"):
        record = await env.store.get_path("shop", path)
        assert record is not None and record.priority == 2, path
    assert await env.store.get_path("shop", "/post") is None

    gz = gzip.compress(SITEMAP.replace("/about", "/about2").encode())
    r = await c.post(f"{API}/sites/shop/sitemap?priority=1", headers=AUTH, content=gz)
    assert r.json()["counts"] == {"pending": 2, "queued": 1, "ignored": 1}
    assert (await env.store.get_path("shop", "/about2")).priority == 1


BAD_SITEMAPS = [
    b"",
    b"<urlset><url><loc>http://shop.test/</loc></url>",
    b"just text",
    b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;">]>'
    b"<urlset><url><loc>&lol2;</loc></url></urlset>",
    b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY ext SYSTEM "file:///etc/passwd">]>'
    b"<urlset><url><loc>&ext;</loc></url></urlset>",
    b"<sitemapindex><sitemap><loc>http://shop.test/s1.xml</loc></sitemap></sitemapindex>",
    b"<rss><channel/></rss>",
    b"\x1f\x8b\x08\x00garbage",
]


@pytest.mark.parametrize("body", BAD_SITEMAPS)
async def test_bad_sitemaps_are_400(env: Env, body: bytes) -> None:
    r = await env.client.post(f"{API}/sites/shop/sitemap", headers=AUTH, content=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]
    assert await env.store.counts() == {}


async def test_sitemap_bounds(env: Env) -> None:
    c = env.client
    many = "".join(f"<url><loc>http://shop.test/{i}</loc></url>" for i in range(50_001))
    r = await c.post(
        f"{API}/sites/shop/sitemap", headers=AUTH, content=f"<urlset>{many}</urlset>".encode()
    )
    assert r.status_code == 400 and "50000" in r.json()["error"]
    assert await env.store.counts() == {}
    bomb = gzip.compress(b"<urlset>" + b" " * (60 * 1024 * 1024) + b"</urlset>")
    assert len(bomb) < MAX_BODY
    r = await c.post(f"{API}/sites/shop/sitemap", headers=AUTH, content=bomb)
    assert r.status_code == 400 and "50 MB" in r.json()["error"]
    for query, field in (
        ("priority=7", "priority"),
        ("priority=x", "priority"),
        ("force=maybe", "force"),
        ("prio=1", "prio"),
    ):
        r = await c.post(f"{API}/sites/shop/sitemap?{query}", headers=AUTH, content=SITEMAP)
        assert r.status_code == 400 and r.json()["field"] == field
    assert await env.store.counts() == {}


# ---------------------------------------------------------------------------- health, metrics


async def test_metrics_and_health(env: Env) -> None:
    c = env.client
    await env.store.enqueue_many("shop", [("/a", 0), ("/b", 0)], 2)
    await env.store.enqueue("shop", "/c", 3)
    r = await c.get("/_snapshotd/metrics", headers=AUTH)
    assert r.headers["content-type"].startswith("text/plain")
    text = r.text
    assert 'snapshotd_queue_depth{priority="2"} 2.0' in text
    assert 'snapshotd_queue_depth{priority="3"} 1.0' in text
    assert 'snapshotd_paths{site="shop",state="pending"} 3.0' in text
    for name in ("snapshotd_requests", "snapshotd_captures", "snapshotd_render_seconds_bucket"):
        assert f"# TYPE {name.removesuffix('_bucket')}" in text or name in text
    await env.store.close()
    r = await c.get("/_snapshotd/healthz")
    assert r.status_code == 503 and r.json()["status"] != "ok"
    await env.store.open()


# ---------------------------------------------------------------------------- OpenAPI


def _routes(app: SnapshotdApp) -> set[tuple[str, str]]:
    starlette = app.api.app.app  # type: ignore[attr-defined]  # TokenAuth, then FreshSites
    out = set()
    for route in starlette.routes:
        path = route.path.replace(":path}", "}")
        for method in route.methods - {"HEAD"}:
            out.add((path, method.lower()))
    return out


async def test_openapi_matches_the_routes(env: Env) -> None:
    r = await env.client.get("/_snapshotd/api/openapi.json", headers=AUTH)
    doc = r.json()
    assert doc["openapi"].startswith("3.")
    assert doc == json.loads(json.dumps(openapi()))
    documented = {(p, m) for p, ops in doc["paths"].items() for m in ops}
    assert documented == _routes(env.app)

    await env.capture("shop", "/x")
    fill = {
        "{site}": "shop",
        "{path}": "x",
        "{url}": "http://127.0.0.1:9/x",
        "{file}": "console.js",
        "{download}": f"{TOKEN}-shop_data.json",
        "{name}": "id",
    }
    def removes(pm: tuple[str, str]) -> int:
        """Paths first, then a restart of the site, then the site itself."""
        if pm == (f"{API}/sites/{{site}}", "delete"):
            return 3
        return 2 if pm[0].endswith("/restart") else int(pm[1] == "delete")

    for path, method in sorted(documented, key=lambda pm: (removes(pm), pm)):
        url = path
        for key, value in fill.items():
            url = url.replace(key, value)
        kwargs: dict = {"headers": AUTH}
        if method == "post":
            kwargs["content"] = (
                SITEMAP.encode() if url.endswith("/sitemap") else b'{"paths": ["/y"]}'
            )
        if url.endswith("/render"):
            url += "?url=http://127.0.0.1:9/x"
        r = await env.client.request(method.upper(), url, **kwargs)
        assert r.status_code not in (404, 405), (method, url, r.status_code)
        for code in map(int, doc["paths"][path][method]["responses"]):
            assert 200 <= code < 600


def test_a_route_without_an_openapi_description_is_refused_at_build_time(tmp_path) -> None:
    app = create_app(make_settings(tmp_path), renderer=RefusingRenderer(), crawler=False)

    async def undocumented(request: Request) -> Response:
        return Response("")

    extra = Route(f"{API}/undocumented", undocumented)
    with pytest.raises(ValueError, match=f"{API}/undocumented"):
        create_api(app.ctx, routes=[*ROUTES, extra])
    # The same table without it builds.
    assert create_api(app.ctx, routes=ROUTES) is not None


# ---------------------------------------------------------------------------- render endpoint


@pytest.fixture
def origin():
    server = HTTPServer(host="127.0.0.1", port=0)
    server.expect_request("/about").respond_with_data(
        "<html><body>origin page</body></html>", content_type="text/html"
    )
    server.expect_request("/app.js").respond_with_data("js", content_type="text/javascript")
    server.start()
    yield server
    server.clear()
    server.stop()


@pytest.fixture
async def render_env(tmp_path, origin) -> AsyncIterator[Env]:
    origin_url = f"http://127.0.0.1:{origin.port}"
    settings = make_settings(tmp_path, miss_wait=2.0)
    shop = replace(settings.sites[0], origin=origin_url, hosts=("shop.test", "www.shop.test"))
    async with running(replace(settings, sites=(shop, settings.sites[1]))) as e:
        yield e


async def test_render_serves_a_stored_snapshot_for_a_site_host(render_env: Env, origin) -> None:
    c = render_env.client
    await render_env.capture("shop", "/items/1?color=red", "<html><body>snap</body></html>")
    for url in (
        "/_snapshotd/render/https://shop.test/items/1?color=red",
        "/_snapshotd/render/http://www.shop.test:8443/items/1?color=red",
        "/_snapshotd/render/https:/shop.test/items/1?color=red",
        "/_snapshotd/render/https%3A%2F%2Fshop.test%2Fitems%2F1%3Fcolor%3Dred",
        "/_snapshotd/render?url=https%3A%2F%2Fshop.test%2Fitems%2F1%3Fcolor%3Dred",
    ):
        r = await c.get(url, headers={"X-Prerender-Token": TOKEN, "User-Agent": "Googlebot"})
        assert r.status_code == 200, (url, r.text)
        assert r.text == "<html><body>snap</body></html>"
        assert r.headers["x-snapshotd-cache"] == "HIT"
    r = await c.get("/_snapshotd/render/https://shop.test/items/1?color=red", headers=AUTH)
    assert r.status_code == 200
    assert origin.log == []


async def test_render_refuses_other_hosts_and_fetches_nothing(render_env: Env, origin) -> None:
    c = render_env.client
    headers = {"X-Prerender-Token": TOKEN}
    for url in (
        "/_snapshotd/render/http://169.254.169.254/latest/meta-data/",
        "/_snapshotd/render/http://127.0.0.1:1/",
        "/_snapshotd/render?url=http://evil.test/about",
        "/_snapshotd/render/http://shop.test.evil.test/about",
        "/_snapshotd/render/http://user@evil.test/about",
    ):
        r = await c.get(url, headers=headers)
        assert r.status_code == 403, (url, r.text)
    for url in (
        "/_snapshotd/render/ftp://shop.test/about",
        "/_snapshotd/render/shop.test/about",
        "/_snapshotd/render",
        "/_snapshotd/render?url=",
        "/_snapshotd/render/http://shop.test/a/%2e%2e/b",
        "/_snapshotd/render/http://shop.test/a%00",
    ):
        r = await c.get(url, headers=headers)
        assert r.status_code == 400, (url, r.text)
    assert (await c.get("/_snapshotd/render/http://shop.test/about")).status_code == 401
    r = await c.get("/_snapshotd/render/http://shop.test/about", headers={"X-Prerender-Token": "x"})
    assert r.status_code == 401
    assert (
        await c.post("/_snapshotd/render/http://shop.test/about", headers=headers)
    ).status_code == 405
    assert origin.log == []
    assert render_env.renderer.captures == []
    assert await render_env.store.counts() == {}


async def test_render_fails_open_to_the_origin_without_leaking_the_token(
    render_env: Env, origin
) -> None:
    c = render_env.client
    r = await c.get(
        "/_snapshotd/render/http://shop.test/about",
        headers={"X-Prerender-Token": TOKEN, "User-Agent": "Googlebot"},
    )
    assert r.status_code == 200
    assert r.headers["x-snapshotd-cache"] == "BYPASS"
    assert "origin page" in r.text
    # One capture: its first profile's render failed, so no other profile is rendered.
    assert render_env.renderer.captures == [f"http://127.0.0.1:{origin.port}/about"]
    request, _ = origin.log[-1]
    assert request.path == "/about"
    assert "X-Prerender-Token" not in request.headers and "Authorization" not in request.headers
    assert request.headers["X-Forwarded-Host"] == "shop.test"
    # Static assets go straight through, as for a bot at the proxy.
    r = await c.get("/_snapshotd/render/http://shop.test/app.js", headers=AUTH)
    assert r.text == "js" and "x-snapshotd-cache" not in r.headers
    assert len(render_env.renderer.captures) == 1
    await asyncio.sleep(0)


# ---------------------------------------------------------------------------- odd input


async def test_non_ascii_digits_are_a_400_not_a_crash(env: Env) -> None:
    c = env.client
    # str.isdigit() holds for '²' and '١', which int() may refuse.
    for params, field in [
        ({"limit": "²"}, "limit"),
        ({"limit": "١٠"}, "limit"),
        ({"cursor": "²"}, "cursor"),
        ({"cursor": "١٢"}, "cursor"),
    ]:
        r = await c.get(f"{API}/sites/shop/paths", headers=AUTH, params=params)
        assert r.status_code == 400, (params, r.text)
        assert r.json()["field"] == field
    r = await c.post(
        f"{API}/sites/shop/sitemap", headers=AUTH, params={"priority": "²"}, content=b"x"
    )
    assert r.status_code == 400
    assert r.json()["field"] == "priority"
    r = await c.post(
        f"{API}/sites/shop/paths",
        headers={**AUTH, "Content-Length": b"\xb2"},
        content=b'{"paths": ["/a"]}',
    )
    assert r.status_code == 400
    assert r.json()["field"] == "Content-Length"
    assert await env.store.counts() == {}


async def test_lone_surrogates_in_paths_are_a_400(env: Env) -> None:
    c = env.client
    for raw in (b'{"paths": ["/ok", "/\\ud800"]}', b'{"paths": ["/ok", "/a#!\\udfff"]}'):
        r = await c.post(f"{API}/sites/shop/paths", headers=AUTH, content=raw)
        assert r.status_code == 400, r.text
        assert r.json()["field"] == "paths[1]"
    assert await env.store.counts() == {}


async def test_render_with_a_malformed_url_is_a_400(render_env: Env, origin) -> None:
    for url in (
        "/_snapshotd/render/http://[::1/a",
        "/_snapshotd/render?url=http%3A%2F%2F%5Bshop.test%2Fa",
    ):
        r = await render_env.client.get(url, headers=AUTH)
        assert r.status_code == 400, (url, r.text)
        assert r.json()["field"] == "url"
    assert origin.log == []


async def test_a_sitemap_url_that_does_not_parse_is_skipped(env: Env) -> None:
    body = b"http://shop.test/a\nhttp://[shop.test/b\nhttp://shop.test:99999/c\n"
    r = await env.client.post(f"{API}/sites/shop/sitemap", headers=AUTH, content=body)
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["counts"] == {"queued": 1}
    assert [s["url"] for s in data["skipped"]] == [
        "http://[shop.test/b",
        "http://shop.test:99999/c",
    ]


async def test_snapshot_is_not_gzipped_for_a_client_that_refuses_gzip(env: Env) -> None:
    await env.capture("shop", "/items/1", "<html><body>snap</body></html>")
    for value in ("gzip;q=0", "identity, gzip;q=0", "*;q=0"):
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=env.app, client=("127.0.0.1", 50000)),
            base_url="http://snapshotd.test",
        ) as c:
            r = await c.get(
                f"{API}/sites/shop/snapshot/items/1",
                headers={**AUTH, "Accept-Encoding": value},
            )
        assert r.status_code == 200
        assert "content-encoding" not in r.headers, value
        assert r.content == b"<html><body>snap</body></html>"


async def test_a_number_too_long_to_read_is_a_400(env: Env) -> None:
    body = b'{"paths": ["/a"], "priority": ' + b"1" * 5000 + b"}"
    r = await env.client.post(f"{API}/sites/shop/paths", headers=AUTH, content=body)
    assert r.status_code == 400, r.text
    assert r.json()["field"] == "body"
    assert await env.store.counts() == {}


async def test_render_url_with_non_ascii_characters_names_the_escaped_path(
    render_env: Env, origin
) -> None:
    await render_env.capture("shop", "/caf%C3%A9", "<html><body>cafe</body></html>")
    await render_env.capture("shop", "/%E4%B8%AD", "<html><body>zhong</body></html>")
    for url, text in (
        # ?url= decoded once by the query parser: the URL as a browser shows it.
        ("/_snapshotd/render?url=http://shop.test/caf%C3%A9", "cafe"),
        ("/_snapshotd/render?url=http://shop.test/%E4%B8%AD", "zhong"),
        ("/_snapshotd/render/http%3A%2F%2Fshop.test%2F%E4%B8%AD", "zhong"),
        ("/_snapshotd/render/http://shop.test/%E4%B8%AD", "zhong"),
    ):
        r = await render_env.client.get(url, headers={**AUTH, "User-Agent": "Googlebot"})
        assert r.status_code == 200, (url, r.text)
        assert r.headers["x-snapshotd-cache"] == "HIT", url
        assert text in r.text
    assert origin.log == []


async def test_a_fragment_starts_at_the_first_hash(env: Env) -> None:
    # "#frag#!x" is one plain fragment (it does not start with '!'), so it is dropped.
    r = await env.client.post(
        f"{API}/sites/shop/paths", headers=AUTH, json={"paths": ["/a#frag#!x", "/b#!x#y"]}
    )
    assert r.status_code == 200, r.text
    assert [e["path"] for e in r.json()["results"]] == ["/a", "/b#!x#y"]


async def test_queued_paths_are_escaped_as_a_browser_would(env: Env) -> None:
    c = env.client
    r = await c.post(
        f"{API}/sites/shop/paths", headers=AUTH, json={"paths": ["/caf\u00e9", "/\u4e2d?q=\u00e9"]}
    )
    assert r.status_code == 200, r.text
    assert [e["path"] for e in r.json()["results"]] == ["/caf%C3%A9", "/%E4%B8%AD?q=%C3%A9"]
    # Each is found again under its ref, as a bot's request for it would find it.
    listed = (await c.get(f"{API}/sites/shop/paths", headers=AUTH)).json()["paths"]
    for record in listed:
        got = await c.get(f"{API}/sites/shop/paths/{record['ref']}", headers=AUTH)
        assert got.status_code == 200 and got.json()["path"] == record["path"]
    r = await c.post(f"{API}/sites/shop/paths", headers=AUTH, json={"paths": ["/ok", "/a\tb"]})
    assert r.status_code == 400 and r.json()["field"] == "paths[1]"


# ---------------------------------------------------------------------------- ignored parameters


async def test_queued_paths_and_sitemaps_drop_ignored_parameters(tmp_path) -> None:
    settings = make_settings(tmp_path)
    shop = replace(settings.sites[0], ignore_params=("@tracking", "sessionid"))
    async with running(replace(settings, sites=(shop, settings.sites[1]))) as e:
        r = await e.client.post(
            f"{API}/sites/shop/paths",
            headers=AUTH,
            json={"paths": ["/a?utm_source=x&b=1&sessionid=9", "/a?b=1&fbclid=2"]},
        )
        assert [x["result"] for x in r.json()["results"]] == ["queued", "pending"]
        sitemap = "https://shop.test/a?b=1&gclid=3\nhttps://shop.test/c?utm_medium=m\n"
        r = await e.client.post(f"{API}/sites/shop/sitemap", headers=AUTH, content=sitemap)
        assert r.json()["counts"] == {"pending": 1, "queued": 1}
        assert sorted([p.path async for p in e.store.iter_paths("shop")]) == ["/a?b=1", "/c"]
        # {path} names a stored path as it is: nothing is dropped from it.
        r = await e.client.get(f"{API}/sites/shop/paths/a%3Fb%3D1%26gclid%3D3", headers=AUTH)
        assert r.status_code == 404


async def test_render_looks_up_the_path_without_tracking_parameters(
    render_env: Env, origin
) -> None:
    await render_env.capture("shop", "/items/1?color=red", "<html><body>snap</body></html>")
    r = await render_env.client.get(
        "/_snapshotd/render/https://shop.test/items/1?utm_source=x&color=red&fbclid=y",
        headers=AUTH,
    )
    assert r.headers["x-snapshotd-cache"] == "HIT"
    assert r.text == "<html><body>snap</body></html>"
