"""snapshotd behind real front servers: Debian's nginx, Apache httpd, Caddy and HAProxy on
loopback ports.

snapshotd runs on uvicorn with real SQLite and real Chromium; the example SPA is both the
app people reach and snapshotd's origin. The site's public host name, ``shop.test`` (a name
reserved for tests, never resolved here), comes from ``--hosts`` as ``serve`` reads it.
Every server listens on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, replace

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route

from examples.spa.app import create_app as create_spa
from snapshotd.config.loading import load_settings
from snapshotd.config.settings import BrowserSettings
from snapshotd.server.app import create_app
from tests.chromium import require_chromium
from tests.front import apache, caddy, free_port, haproxy, nginx, recipe
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

    def passed_through(self) -> float:
        """How many requests snapshotd has passed through to the origin so far."""
        r = httpx.get(f"{self.snapshotd}/_snapshotd/metrics", headers=AUTH, trust_env=False)
        for line in r.text.splitlines():
            if line.startswith('snapshotd_requests_total{result="PASS"}'):
                return float(line.split()[-1])
        return 0.0

    def record(self, ref: str) -> dict:
        url = f"{self.snapshotd}/_snapshotd/api/v1/sites/default/paths/{ref}"
        r = httpx.get(url, headers=AUTH, timeout=10, trust_env=False)
        assert r.status_code == 200, (ref, r.text)
        return r.json()


def app_with_echo() -> Starlette:
    """The example SPA, plus ``/echo/…``, which answers the target it got as it got it."""

    async def echo(request: Request) -> Response:
        raw = request.scope.get("raw_path", b"").decode("latin-1")
        query = request.scope.get("query_string", b"").decode("latin-1")
        return JSONResponse({"path": raw, "query": query, "served_by": "app"})

    return Starlette(routes=[Route("/echo/{rest:path}", echo), Mount("/", create_spa())])


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[Stack]:
    chromium = require_chromium()
    db = str(tmp_path_factory.mktemp("front") / "snap.db")
    with serve_asgi(app_with_echo()) as spa:
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


# --- The shipped recipes: docs/integrations/ -------------------------------------------------

KINDS = ("nginx", "apache", "caddy", "haproxy")


def _front(kind: str, app: str, snapshotd: str, port: int):  # type: ignore[no-untyped-def]
    values = {"SERVER_NAME": HOST, "APP": _hostport(app), "SNAPSHOTD": _hostport(snapshotd)}
    if kind == "nginx":
        return nginx(recipe("nginx.conf", LISTEN=f"127.0.0.1:{port}", **values), port)
    if kind == "caddy":
        return caddy(recipe("Caddyfile", LISTEN=f"http://{HOST}:{port}", **values), port)
    if kind == "haproxy":
        return haproxy(recipe("haproxy.cfg", LISTEN=f"127.0.0.1:{port}", **values), port)
    vhost = recipe("apache.conf", LISTEN=f"127.0.0.1:{port}", **values)
    return apache(f"Listen 127.0.0.1:{port}\n{vhost}", port)


@pytest.mark.parametrize("kind", KINDS)
def test_recipe_sends_bots_to_snapshotd_and_people_to_the_app(kind: str, stack: Stack) -> None:
    port = free_port()
    direct = httpx.Client(base_url=stack.app, timeout=30, trust_env=False)
    with _front(kind, stack.app, stack.snapshotd, port), direct, httpx.Client(
        base_url=f"http://127.0.0.1:{port}", timeout=30, trust_env=False,
        headers={"Host": HOST},
    ) as front:
        page = f"/items/{(2, 4, 5, 6)[KINDS.index(kind)]}"
        # A bot gets the snapshot: rendered, without scripts.
        bot = front.get(page, headers={"User-Agent": BOT})
        assert bot.status_code == 200, bot.text
        assert bot.headers["x-snapshotd-cache"] in ("MISS", "HIT")
        assert "is a sturdy thing" in bot.text and "<script" not in bot.text
        # A person gets the app untouched: the same bytes as from the app itself, and
        # snapshotd never sees the request.
        passed = stack.passed_through()
        person = front.get(page, headers={"User-Agent": PERSON})
        assert "x-snapshotd-cache" not in person.headers
        assert person.content == direct.get(page, headers={"User-Agent": PERSON}).content
        assert "<script" in person.text
        # Static assets go to the app, for bots too.
        for ua in (BOT, PERSON):
            asset = front.get("/app.js", headers={"User-Agent": ua})
            assert asset.status_code == 200 and "x-snapshotd-cache" not in asset.headers
            assert asset.content == direct.get("/app.js").content
        # Query strings survive, byte for byte, for people and bots.
        target = "/echo/a%2Fb/caf%C3%A9?x=%2F&y=a+b&z=%41"
        echoed = front.get(target, headers={"User-Agent": PERSON}).json()
        assert echoed == {"path": "/echo/a%2Fb/caf%C3%A9", "query": "x=%2F&y=a+b&z=%41",
                          "served_by": "app"}
        query_page = f"{page}?color=red&size=%2F"
        r = front.get(query_page, headers={"User-Agent": BOT})
        assert r.headers["x-snapshotd-cache"] in ("MISS", "HIT")
        ref = page[1:] + "%3Fcolor%3Dred%26size%3D%252F"
        assert stack.record(ref)["path"] == f"{page}?color=red&size=%2F"
        # #! pages: the _escaped_fragment_ form reaches snapshotd, whoever asks.
        for ua in (BOT, PERSON):
            r = front.get("/?_escaped_fragment_=/faq", headers={"User-Agent": ua})
            assert r.headers.get("x-snapshotd-cache") in ("MISS", "HIT"), r.headers
            assert "This page lives at a hashbang URL" in r.text
        # A person whose query merely mentions it gets the app.
        r = front.get("/echo/x?q=_escaped_fragment_", headers={"User-Agent": PERSON})
        assert r.json()["served_by"] == "app"
        assert stack.passed_through() == passed  # no person went through snapshotd
        # /_snapshotd/ is not exposed, even with a token.
        for path in ("/_snapshotd/healthz", "/_snapshotd/api/v1/sites", "/_snapshotd",
                     "/_snapshotd/console", "/%5Fsnapshotd/healthz"):
            for ua in (BOT, PERSON):
                r = front.get(path, headers={**AUTH, "User-Agent": ua})
                assert r.status_code == 404, (path, r.status_code, r.text[:200])
                assert "sites" not in r.text and '"status"' not in r.text


@pytest.mark.parametrize("kind", KINDS)
def test_recipe_gives_snapshotd_the_clients_address_last_in_x_forwarded_for(kind: str) -> None:
    """The front server adds the address the client connected from (127.0.0.2 here) as the
    last X-Forwarded-For entry, after whatever the client sent, for snapshotd to trust."""
    seen: list[dict] = []

    async def record(request: Request) -> Response:
        seen.append({**request.headers, "x-forwarded-for": request.headers.getlist(
            "x-forwarded-for")})
        return JSONResponse({"served_by": "recorder"})

    recorder = Starlette(routes=[Route("/{rest:path}", record)])
    port = free_port()
    transport = httpx.HTTPTransport(local_address="127.0.0.2")
    with serve_asgi(recorder) as target, _front(kind, target, target, port), httpx.Client(
        base_url=f"http://127.0.0.1:{port}", transport=transport, timeout=30, trust_env=False,
    ) as client:
        r = client.get("/items/1", headers={
            "Host": HOST, "User-Agent": BOT, "X-Forwarded-For": "198.51.100.7"
        })
        assert r.json() == {"served_by": "recorder"}
    assert len(seen) == 1
    (line,) = seen[0]["x-forwarded-for"]  # one line, the client's address last
    assert [a.strip() for a in line.split(",")][-1] == "127.0.0.2", seen[0]
    assert seen[0]["x-forwarded-proto"] == "http"
    assert seen[0]["host"] == HOST


def test_printed_caddy_and_haproxy_recipes_are_configurations_their_servers_accept(
    tmp_path, capsys
) -> None:
    """As `snapshotd recipe` prints them with their defaults (Caddy: the site's names, so
    HTTPS; HAProxy: :80), checked by the servers themselves without serving."""
    from snapshotd.cli.parser import main
    from tests.front import CADDY, HAPROXY, require

    argv = ["--origin", "http://127.0.0.1:3000", "--hosts", "shop.test,www.shop.test"]
    require(CADDY, "caddy")
    assert main(["recipe", "caddy", *argv]) == 0
    (tmp_path / "Caddyfile").write_text(capsys.readouterr().out)
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)}
    done = subprocess.run(
        [CADDY, "adapt", "--config", str(tmp_path / "Caddyfile"), "--adapter", "caddyfile"],
        capture_output=True, text=True, env=env, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    adapted = json.loads(done.stdout)
    routes = adapted["apps"]["http"]["servers"]["srv0"]["routes"]
    assert routes[0]["match"] == [{"host": ["shop.test", "www.shop.test"]}]
    require(HAPROXY, "haproxy")
    assert main(["recipe", "haproxy", *argv]) == 0
    (tmp_path / "haproxy.cfg").write_text("defaults\n    mode http\n\n" + capsys.readouterr().out)
    done = subprocess.run([HAPROXY, "-c", "-f", str(tmp_path / "haproxy.cfg")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "warning" not in (done.stdout + done.stderr).lower(), done.stdout + done.stderr
