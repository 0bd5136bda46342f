"""What snapshotd.middleware sends to snapshotd, seen by a sentinel standing in for it.

Each framework's app (tests/python_apps.py: Flask and Django's WSGI handler on a threaded
``wsgiref`` server, FastAPI and Django's ASGI handler on uvicorn, all on 127.0.0.1) runs
behind the middleware pointed at a sentinel on 127.0.0.1 that records every request it gets
and answers each as a snapshot answer. Clients speak raw HTTP over a socket, so their request
targets reach the app byte for byte, as an attacker's would.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

import pytest

from tests.python_apps import FRAMEWORKS, Seen, raw_get, serve_app
from tests.servers import serve_asgi

HOST = "shop.test"
BOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
RENDER = "/_snapshotd/render"
SENTINEL_PAGE = b"<!doctype html><p>from the sentinel</p>"


@dataclass
class Sentinel:
    """Every request it got: (raw target, headers with lower-case names)."""

    got: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        target = scope["raw_path"].decode("latin-1")
        if scope["query_string"]:
            target += "?" + scope["query_string"].decode("latin-1")
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        with self.lock:
            self.got.append((target, headers))
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"text/html"), (b"x-snapshotd-cache", b"HIT")]})
        await send({"type": "http.response.body", "body": SENTINEL_PAGE})

    def targets(self) -> list[str]:
        with self.lock:
            return [t for t, _ in self.got]


@pytest.fixture(scope="module")
def sentinel() -> Iterator[tuple[Sentinel, str]]:
    recorder = Sentinel()
    with serve_asgi(recorder) as url:
        yield recorder, url


@pytest.fixture(scope="module", params=FRAMEWORKS)
def app(request, sentinel) -> Iterator[str]:
    with serve_app(request.param, Seen(), sentinel[1], token="t", timeout=5) as url:
        yield url


TRAVERSALS = [
    "/../../../../../_snapshotd/screenshot?url=http://shop.test/",
    "/items/../../../_snapshotd/api/sites",
    "/./../_snapshotd/metrics",
    "/%2e%2e/%2E%2e/_snapshotd/screenshot?url=http://shop.test/",
    "/.%2e/_snapshotd/recache",
    "/items/..",
    "/a\\..\\..\\_snapshotd/screenshot",
    "/a%5c..%5c..%5c_snapshotd/screenshot",
    "/a%2f..%2f..%2f_snapshotd/screenshot",
]


@pytest.mark.parametrize(("target", "page"), [
    ("/items/7?color=red", "/items/7?color=red"),
    ("/a%3Fb/caf%C3%A9?q=%26&_escaped_fragment_=/faq",
     "/a%3Fb/caf%C3%A9?q=%26&_escaped_fragment_=/faq"),
])
def test_a_bots_request_is_sent_to_the_render_endpoint_naming_its_own_page(
    app, sentinel, target: str, page: str
) -> None:
    """The page asked for, written as one URL in the ``url`` parameter: its escapes as
    they came."""
    recorder, _ = sentinel
    before = len(recorder.targets())
    status, headers, body = raw_get(app, target, {"User-Agent": BOT})
    assert (status, headers.get("x-snapshotd-cache"), body) == (200, "HIT", SENTINEL_PAGE)
    [sent] = recorder.targets()[before:]
    path, _, query = sent.partition("?")
    assert (path, parse_qs(query)) == (RENDER, {"url": [f"http://{HOST}{page}"]})


@pytest.mark.parametrize("target", TRAVERSALS)
def test_a_path_that_could_be_resolved_away_never_leaves_the_render_endpoint(
    app, sentinel, target: str
) -> None:
    """Dot segments, plain or percent-encoded, between '/' or '\\' (a browser's separators
    too): the app answers, and the sentinel gets nothing but render requests for one page."""
    recorder, _ = sentinel
    before = len(recorder.targets())
    status, headers, _body = raw_get(app, target, {"User-Agent": BOT})
    got = recorder.targets()[before:]
    assert all(t.startswith(RENDER) for t in got), got  # never another endpoint
    assert got == [], got  # nor a render URL that names another page
    assert "x-snapshotd-cache" not in headers, (status, headers)
