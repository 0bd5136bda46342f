"""What a bot is answered instead of a snapshot, over real sockets (uvicorn as ``serve`` runs
it, a real SQLite file, a table resolver, a renderer of fixed pages, an origin that records
what it is asked): a rule's status or redirect, and the SEO4Ajax face on a strict site.

Clients bind their own loopback address as source: the table says 127.0.0.7 is a Googlebot;
every other address's claim is ``unverified``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

from snapshotd.config.settings import BrowserSettings, Settings, SiteSettings
from snapshotd.server.app import create_app
from tests.servers import serve_asgi
from tests.test_flood import BOT, TOKEN, SlotRenderer
from tests.test_verified_bots import VERIFIED, table

API = "/_snapshotd/api/v1"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PERSON = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/120 Safari/537.36"
UNVERIFIED = "127.0.0.8"  # its reverse name claims googlebot.com; its forward one does not
# What a snapshot answer to a bot carries, so a shared cache keeps it from people.
SNAPSHOT_VARY = "User-Agent, Accept-Encoding"
RULES = (
    "^/gone [R=410]\n"
    "^/secret [R=403]\n"
    "^/old/(.*)$ /new/$1 [R=301]\n"
    "^/moved$ /elsewhere [R=302]\n"
)


def recording_origin(paths: list[str]) -> Starlette:
    async def page(request: Request) -> HTMLResponse:
        paths.append(request.url.path)
        return HTMLResponse("<html><body>origin page</body></html>")

    return Starlette(routes=[Route("/{rest:path}", page)])


@contextmanager
def snapshotd(
    tmp_path: Any, *, at_once: bool = True, **site: Any
) -> Iterator[tuple[str, list[str]]]:
    """snapshotd in front of a recording origin, with the face on Host ``s4a.test``; yields
    its base URL and the paths the origin was asked. ``at_once``: serve's fast path on (as
    ``serve`` runs) or every request the ASGI way."""
    paths: list[str] = []
    with serve_asgi(recording_origin(paths)) as origin:
        settings = Settings(
            db=str(tmp_path / f"answers-{uuid.uuid4().hex[:8]}.db"),
            api_tokens=(TOKEN,),
            miss_wait=30.0,
            seo4ajax_hosts=("s4a.test",),
            browser=BrowserSettings(concurrency=1),
            sites=(
                SiteSettings(
                    name="s", origin=origin, seeds=(), obey_robots=False, crawl_links=False,
                    **site,
                ),
            ),
        )
        app = create_app(settings, renderer=SlotRenderer(1), crawler=False, resolver=table())
        with serve_asgi(app, **({} if at_once else {"at_once": None})) as base:
            yield base, paths


def client(base: str, source: str = "127.0.0.1", **headers: str) -> httpx.Client:
    return httpx.Client(
        base_url=base, timeout=30, trust_env=False,
        transport=httpx.HTTPTransport(local_address=source), headers=headers,
    )


@pytest.mark.parametrize("at_once", [True, False], ids=["at-once", "asgi"])
def test_a_rules_status_or_redirect_to_a_bot_varies_as_a_snapshot_does(tmp_path, at_once):
    with snapshotd(tmp_path, at_once=at_once, rules_text=RULES) as (base, origin_paths):
        bot, person = client(base, **{"User-Agent": BOT}), client(base, **{"User-Agent": PERSON})
        with bot, person:
            # A snapshot answer, for comparison: what a shared cache is told of a bot's page.
            bot.get("/page")
            snapshot = bot.get("/page")
            assert snapshot.headers["x-snapshotd-cache"] == "HIT"
            assert snapshot.headers["vary"] == SNAPSHOT_VARY
            expected = {
                "/gone/x": (410, None),
                "/secret": (403, None),
                "/old/a": (301, "/new/a"),
                "/moved": (302, "/elsewhere"),
            }
            for path, (status, location) in expected.items():
                for method in ("GET", "HEAD"):
                    r = bot.request(method, path)
                    assert r.status_code == status, (method, path)
                    assert r.headers.get("location") == location, (method, path)
                    assert r.headers["vary"] == snapshot.headers["vary"], (method, path)
                    assert r.headers.get("cache-control") == snapshot.headers.get(
                        "cache-control"
                    ), (method, path)
                # A person at the same URL gets the origin's page, which the Vary keeps apart.
                assert person.get(path).text == "<html><body>origin page</body></html>"
        assert sorted(origin_paths) == sorted(expected)  # the people's requests alone


def test_the_face_of_a_strict_site_never_answers_an_untrusted_claimant_with_the_origins_page(
    tmp_path,
):
    with snapshotd(tmp_path, verify_bots="strict") as (base, origin_paths):
        with httpx.Client(base_url=base, trust_env=False, headers=AUTH) as api:
            site_token = api.get(f"{API}/sites/s").json()["site_token"]
        face = {"Host": "s4a.test", "User-Agent": BOT}
        with client(base, VERIFIED, **face) as verified:
            first = verified.get(f"/{site_token}/a")
            assert first.status_code == 200 and first.headers["x-snapshotd-cache"] == "MISS"
        with client(base, UNVERIFIED, **face) as claimant:
            for path in ("/a", "/b"):  # a captured page, a page never seen
                r = claimant.get(f"/{site_token}{path}")
                assert r.status_code == 503, r.text
                assert r.headers["x-snapshotd-cache"] == "UNAVAILABLE"
                assert r.headers["retry-after"] == "60"
                assert r.headers["cache-control"] == "no-store"
                assert "origin page" not in r.text
        assert origin_paths == []  # nothing went to the origin
        with httpx.Client(base_url=base, trust_env=False, headers=AUTH) as api:
            assert api.get(f"{API}/sites/s/paths/b").status_code == 404  # nothing stored
            metrics = api.get("/_snapshotd/metrics").text
        assert 'snapshotd_bot_claims_total{claim="refused",family="google"} 2.0' in metrics


@pytest.mark.parametrize("at_once", [True, False], ids=["at-once", "asgi"])
def test_a_rules_redirect_never_names_another_host_or_sends_raw_bytes(tmp_path, at_once):
    # The U flag unescapes what the request gives: %2F%2F would make the path //evil.example.
    rules = "^/u/(.*)$ /$1 [U,R=302]\n^/away$ https://new.example/ [R=301]\n"
    with snapshotd(tmp_path, at_once=at_once, rules_text=rules) as (base, _paths):
        with client(base, **{"User-Agent": BOT}) as bot:
            for target, location in (
                ("/u/%2F%2Fevil.example/x", "/evil.example/x"),
                ("/u/%5C%5Cevil.example/x", "/evil.example/x"),
                ("/u/%2F%5C/evil.example/x", "/evil.example/x"),
                ("/u/%E2%80%A8x%20y", "/%E2%80%A8x%20y"),
                ("/u/a%2F%2Fb", "/a//b"),
                ("/away", "https://new.example/"),
            ):
                r = bot.get(target)
                assert r.status_code in (301, 302), (target, r.text)
                assert r.headers.raw[[k for k, _ in r.headers.raw].index(b"location")][1] == (
                    location.encode()
                ), target


@pytest.mark.parametrize("at_once", [True, False], ids=["at-once", "asgi"])
def test_a_rules_status_without_content_keeps_the_connection_in_step(tmp_path, at_once):
    # A body after 204, 205 or 304 would be read as the start of the next answer.
    rules = "^/c204 [R=204]\n^/c205 [R=205]\n^/c304 [R=304]\n^/gone [R=410]\n"
    with snapshotd(tmp_path, at_once=at_once, rules_text=rules) as (base, _paths):
        with client(base, **{"User-Agent": BOT}) as bot:
            for _ in range(2):  # one connection, kept alive throughout
                for path, status in (("/c204", 204), ("/c205", 205), ("/c304", 304),
                                     ("/gone", 410)):
                    r = bot.get(path)
                    assert r.status_code == status and r.headers["vary"] == SNAPSHOT_VARY
                    assert r.content == (b"Gone\n" if status == 410 else b""), path


def test_a_rule_cannot_answer_with_an_interim_status(tmp_path):
    with snapshotd(tmp_path) as (base, _paths):
        with httpx.Client(base_url=base, trust_env=False, headers=AUTH) as api:
            for rules in ("^/a [R=100]\n", "^/a [R=101]\n",
                          "RewriteEngine On\nRewriteRule ^/a$ - [R=100]\n",
                          "RewriteEngine On\nRewriteRule ^/a$ - [R=103]\n"):
                r = api.put(f"{API}/sites/t", json={
                    "origin": "http://127.0.0.1:9", "rules_text": rules,
                })
                assert r.status_code == 400 and r.json()["field"] == "rules_text", (rules, r.text)
