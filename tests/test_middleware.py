"""snapshotd.middleware in real Django, Flask and FastAPI apps, with a real snapshotd.

For each framework: the app (tests/python_apps.py) runs behind the middleware on 127.0.0.1;
snapshotd runs on uvicorn with real SQLite and real Chromium, the app's own address as its
origin and ``shop.test`` (a name reserved for tests, never resolved here) as its site's host.
Clients ask the app, as users would, with ``Host: shop.test``.
"""

from __future__ import annotations

import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace

import httpx
import pytest

from snapshotd.config.loading import load_settings
from snapshotd.config.settings import BrowserSettings
from snapshotd.middleware import Choice
from snapshotd.server.app import create_app
from tests.chromium import require_chromium
from tests.front import free_port
from tests.python_apps import FRAMEWORKS, Seen, raw_get, serve_app
from tests.servers import serve_asgi

pytestmark = pytest.mark.browser

TOKEN = "api-token"
RENDER_TOKEN = "middleware-token"  # a render token: what a middleware holds
HOST = "shop.test"
BOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
PERSON = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/120 Safari/537.36"


@dataclass
class Stack:
    framework: str
    app: str
    snapshotd: str
    seen: Seen

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.app, timeout=30, trust_env=False,
                            headers={"Host": HOST})

    def snapshot_requests(self) -> float:
        """How many requests snapshotd has answered as snapshot requests or passed on."""
        r = httpx.get(f"{self.snapshotd}/_snapshotd/metrics",
                      headers={"Authorization": f"Bearer {TOKEN}"}, trust_env=False)
        return sum(float(line.split()[-1]) for line in r.text.splitlines()
                   if line.startswith("snapshotd_requests_total{"))


@pytest.fixture(scope="module", params=FRAMEWORKS)
def stack(request, tmp_path_factory) -> Iterator[Stack]:
    chromium = require_chromium()
    framework = request.param
    seen = Seen()
    port = free_port()
    snapshotd_url = f"http://127.0.0.1:{port}"
    with serve_app(framework, seen, snapshotd_url, token=RENDER_TOKEN, timeout=20) as app:
        db = str(tmp_path_factory.mktemp(f"mw-{framework}") / "snap.db")
        settings = load_settings(
            overrides={"origin": app, "hosts": HOST, "db": db, "miss_wait": 8.0}, env={}
        )
        browser = BrowserSettings(
            concurrency=1, executable=chromium, javascript_timeout=0.3, render_timeout=15
        )
        # A page not had in time is the origin's (the app's), so the hand-back is seen; with
        # the default, 503 and Retry-After reach the bot as snapshotd sends them. One device
        # profile: a render a page, within miss_wait on a slow machine too.
        sites = tuple(replace(s, miss_answer="origin", devices="mobile") for s in settings.sites)
        settings = replace(settings, api_tokens=(TOKEN,), render_tokens=(RENDER_TOKEN,),
                           browser=browser, sites=sites)
        with serve_asgi(create_app(settings, crawler=False), port=port) as base:
            yield Stack(framework, app, base, seen)


def test_a_bot_gets_snapshotds_snapshot_and_a_person_the_apps_own_page(stack: Stack) -> None:
    with stack.client() as client:
        bot = client.get("/items/7?color=red", headers={"User-Agent": BOT})
        assert bot.status_code == 200, bot.text
        assert bot.headers["x-snapshotd-cache"] == "MISS"
        assert "Rendered by the browser at /items/7?color=red" in bot.text
        assert "<script" not in bot.text
        again = client.get("/items/7?color=red", headers={"User-Agent": BOT})
        assert again.headers["x-snapshotd-cache"] == "HIT"
        assert again.text == bot.text
        # A person: the app's shell, and snapshotd is not asked.
        before = stack.snapshot_requests()
        person = client.get("/items/7?color=red", headers={"User-Agent": PERSON})
        assert person.status_code == 200
        assert "x-snapshotd-cache" not in person.headers
        assert '<div id="app">loading</div>' in person.text and "<script" in person.text
        # Static assets go to the app, whoever asks.
        for ua in (BOT, PERSON):
            asset = client.get("/static/app.js", headers={"User-Agent": ua})
            assert "x-snapshotd-cache" not in asset.headers
            assert "Rendered by the browser" in asset.text
        assert stack.snapshot_requests() == before
        # Snapshotd's browser got the app's page through the middleware, untouched.
        assert stack.seen.of("/items/7")[(True, False)] == 1


def test_the_render_token_opens_the_render_endpoint_and_nothing_else(stack: Stack) -> None:
    page = f"http://{HOST}/items/8"
    with httpx.Client(base_url=stack.snapshotd, timeout=30, trust_env=False) as client:
        for auth in ({"X-Prerender-Token": RENDER_TOKEN},
                     {"Authorization": f"Bearer {RENDER_TOKEN}"}):
            for target in (f"/_snapshotd/render/{page}", f"/_snapshotd/render?url={page}"):
                # As the middleware asks (its marker keeps a hand-back from going round).
                r = client.get(target, headers={**auth, "User-Agent": BOT,
                                                "X-Snapshotd-Middleware": "1"})
                assert r.status_code == 200, (target, r.text)
                assert r.headers["x-snapshotd-cache"] in ("MISS", "HIT", "BYPASS")
            refused = [
                client.get(f"/_snapshotd/screenshot/{page}", headers=auth),
                client.get("/_snapshotd/screenshot", params={"url": page}, headers=auth),
                client.get("/_snapshotd/api/v1/sites", headers=auth),
                client.get("/_snapshotd/api/v1/sites/default/paths", headers=auth),
                client.get("/_snapshotd/metrics", headers=auth),
                client.post("/_snapshotd/recache", json={"url": page}, headers=auth),
                client.post("/_snapshotd/recache",
                            json={"prerenderToken": RENDER_TOKEN, "url": page}),
                client.get("/_snapshotd/v3/crawl", params={"token": RENDER_TOKEN}),
                client.get("/_snapshotd/v3/crawl", headers=auth),
            ]
            assert [r.status_code for r in refused] == [401] * len(refused), [
                (str(r.url), r.status_code, r.text[:100]) for r in refused]
        # The API token still opens them (the refusals above are the token's, not the paths').
        api = client.get("/_snapshotd/api/v1/sites", headers={"Authorization": f"Bearer {TOKEN}"})
        assert api.status_code == 200


def test_a_client_that_asks_for_no_encoding_gets_plain_html(stack: Stack) -> None:
    """snapshotd gets the client's Accept-Encoding, or ``identity`` when it sent none: a bare
    client (no Accept-Encoding) gets the snapshot as plain HTML, a gzip client gzip."""
    page, gzipped = "/items/9", {"User-Agent": BOT, "Accept-Encoding": "gzip"}
    for _ in range(60):  # until the page is kept: then each answer is the snapshot's
        status, headers, _body = raw_get(stack.app, page, gzipped)
        if headers.get("x-snapshotd-cache") == "HIT":
            break
        time.sleep(0.5)
    assert (status, headers.get("content-encoding")) == (200, "gzip"), headers
    status, headers, body = raw_get(stack.app, page, {"User-Agent": BOT})
    assert (status, headers["x-snapshotd-cache"]) == (200, "HIT")
    assert "content-encoding" not in headers, headers
    assert b"Rendered by the browser at /items/9" in body and body.lstrip().startswith(b"<")


def test_an_escaped_fragment_request_gets_the_hashbang_pages_snapshot(stack: Stack) -> None:
    with stack.client() as client:
        for ua in (PERSON, BOT):
            r = client.get("/", params={"_escaped_fragment_": "/faq"},
                           headers={"User-Agent": ua})
            assert r.headers["x-snapshotd-cache"] in ("MISS", "HIT"), r.headers
            assert "Rendered by the browser at /#!/faq" in r.text
        # A query that merely mentions the name is a person's.
        r = client.get("/", params={"q": "_escaped_fragment_"}, headers={"User-Agent": PERSON})
        assert "x-snapshotd-cache" not in r.headers


def test_a_page_snapshotd_cannot_render_in_time_is_the_apps_and_does_not_loop(
    stack: Stack,
) -> None:
    """snapshotd hands the bot's request back to its origin, the app (BYPASS), carrying the
    middleware's marker: the app answers it instead of sending it to snapshotd again."""
    with stack.client() as client:
        r = client.get("/slow", headers={"User-Agent": BOT})
        assert r.status_code == 200
        assert r.headers["x-snapshotd-cache"] == "BYPASS"
        assert '<div id="app">loading</div>' in r.text
    # Once from snapshotd's hand-back (marked), once from its browser; never a loop.
    counts = stack.seen.of("/slow")
    assert counts[(False, True)] == 1
    assert counts[(False, False)] == 0


def test_the_middleware_chooses_as_snapshotd_does() -> None:
    choice = Choice("http://127.0.0.1:1", "t", bots_add=["MyMonitor"], bots_remove=["bingbot"])
    bot = {"host": HOST, "user-agent": BOT}
    assert choice.wanted("GET", "/items/1", "", bot)
    assert choice.wanted("HEAD", "/", "", bot)
    assert not choice.wanted("POST", "/items/1", "", bot)
    assert not choice.wanted("GET", "/app.js", "", bot)
    assert choice.wanted("GET", "/page.html", "", bot)
    assert choice.wanted("GET", "/", "_escaped_fragment_=/faq", {"host": HOST})
    assert not choice.wanted("GET", "/", "q=_escaped_fragment_", {"host": HOST})
    assert choice.wanted("GET", "/", "", {"host": HOST, "user-agent": "MyMonitor/1.0"})
    assert not choice.wanted("GET", "/", "", {"host": HOST, "user-agent": "bingbot/2.0"})
    # Hosts that are no host:port would name another page in the render URL.
    for host in ("shop.test/admin#", "a@shop.test", "", "shop.test?x"):
        assert not choice.wanted("GET", "/items/1", "", {**bot, "host": host}), host
    assert not choice.wanted("GET", "/", "", {**bot, "x-snapshotd": "1"})
    assert not choice.wanted("GET", "/", "", {**bot, "x-snapshotd-middleware": "1"})


def test_only_what_a_snapshot_depends_on_is_sent_to_snapshotd() -> None:
    choice = Choice("http://127.0.0.1:1", "t")
    sent = choice.headers_out(
        {"user-agent": BOT, "cookie": "session=secret", "authorization": "Basic x",
         "host": HOST, "accept-language": "fr", "x-forwarded-for": "127.0.0.5"}, "127.0.0.9")
    assert sent == {"user-agent": BOT, "accept-language": "fr", "accept-encoding": "identity",
                    "x-forwarded-for": "127.0.0.5, 127.0.0.9",
                    "x-snapshotd-middleware": "1", "x-prerender-token": "t"}


# --- Failing open -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def silent() -> Iterator[str]:
    """A server that takes connections and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(sock.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=5)
        for c in held:
            c.close()
        sock.close()


@pytest.mark.parametrize("case", ["down", "silent", "wrong token"])
def test_a_bot_gets_the_apps_page_when_snapshotd_cannot_answer(
    case: str, silent: str, stack: Stack
) -> None:
    target = {"down": f"http://127.0.0.1:{free_port()}", "silent": silent,
              "wrong token": stack.snapshotd}[case]
    seen = Seen()
    with serve_app(stack.framework, seen, target, token="not-the-token", timeout=1.0) as app, \
            httpx.Client(base_url=app, timeout=30, trust_env=False) as client:
        r = client.get("/items/3", headers={"Host": HOST, "User-Agent": BOT})
        assert r.status_code == 200
        assert "x-snapshotd-cache" not in r.headers
        assert '<div id="app">loading</div>' in r.text
    assert seen.of("/items/3") == Counter({(False, False): 1})
