"""What a capture sees the page read of its device (render/device_probe), in real Chromium
against an origin on loopback: each kind of read is named, reads of what is the same on
every device are not, what the probe wraps keeps working, and the page cannot speak for it."""

from __future__ import annotations

import html
import json
import re
from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.routing import Route

from snapshotd.config.settings import BrowserSettings, SiteSettings
from snapshotd.render import BrowserPool
from snapshotd.render.device_probe import READS, varies_by_device
from tests.chromium import require_chromium
from tests.servers import serve_asgi

pytestmark = pytest.mark.browser

SETTINGS = BrowserSettings(concurrency=1, javascript_timeout=0.3, render_timeout=60)

# Scripts, each run in a page of its own, and what the capture is to name.
READ = {
    "agent": ("navigator.userAgent.length", "navigator.userAgent"),
    "touch": ("navigator.maxTouchPoints", "navigator.maxTouchPoints"),
    "width": ("innerWidth", "window.innerWidth"),
    "ratio": ("devicePixelRatio", "window.devicePixelRatio"),
    "screen": ("screen.width", "screen.width"),
    "media": ("matchMedia('(max-width: 600px)').matches", "matchMedia"),
    "pointer": ("matchMedia('(pointer: coarse)').matches", "matchMedia"),
    "rect": ("document.body.getBoundingClientRect().width", "element.getBoundingClientRect"),
    "offset": ("document.body.offsetWidth", "element.offsetWidth"),
    "client": ("document.documentElement.clientWidth", "element.clientWidth"),
    "style": ("getComputedStyle(document.body).width", "getComputedStyle"),
    "seen": ("new IntersectionObserver(() => {}) && 1", "IntersectionObserver"),
    "resized": ("new ResizeObserver(() => {}) && 1", "ResizeObserver"),
    "touchevent": ("document.createEvent('TouchEvent') && 1", "document.createEvent(TouchEvent)"),
    "text": ("document.body.innerText.length", "element.innerText"),
    "parent": ("document.body.offsetParent === null", "element.offsetParent"),
    "stylemap": ("document.body.computedStyleMap().size", "element.computedStyleMap"),
}
# Scripts that read nothing that differs between devices.
BLIND = {
    "dom": "document.querySelectorAll('p').length + document.title.length",
    "scheme": "matchMedia('(prefers-color-scheme: dark)').matches",
    "motion": "matchMedia('(prefers-reduced-motion: reduce)').matches",
    "event": "document.createEvent('Event') && 1",
    "language": "navigator.language + navigator.cookieEnabled",
    "clock": "Date.now() > 0 && Math.random() >= 0",
}


def _page(script: str, body: str = "") -> str:
    return (
        "<!doctype html><html><head><title>t</title></head><body><p>start</p>" + body
        + "<pre id=out></pre><script>document.getElementById('out').textContent = "
        + f"String({script});</script></body></html>"
    )


def _origin() -> Starlette:
    async def read(request: Request) -> Response:
        name = request.path_params["name"]
        return HTMLResponse(_page(READ[name][0]))

    async def blind(request: Request) -> Response:
        return HTMLResponse(_page(BLIND[request.path_params["name"]]))

    async def varied(request: Request) -> Response:
        return HTMLResponse(_page("1"), headers={"Vary": request.query_params["vary"]})

    async def fetched(request: Request) -> Response:
        # The document says nothing; the data it fetches is chosen by user agent.
        script = ("fetch('/data').then(r => r.text()).then(t => "
                  "document.getElementById('out').textContent = t) && 1")
        return HTMLResponse(_page(script))

    async def data(request: Request) -> Response:
        return PlainTextResponse("phone data", headers={"Vary": "Accept-Encoding, User-Agent"})

    async def framed(request: Request) -> Response:
        frame = html.escape(_page("innerWidth"), quote=True)
        return HTMLResponse(_page("1", f'<iframe srcdoc="{frame}"></iframe>'))

    async def behaves(request: Request) -> Response:
        # What the probe wraps answers as the browser's own does.
        script = """JSON.stringify({
          rect: document.body.getBoundingClientRect().width === document.body.clientWidth,
          media: matchMedia('(min-width: 1px)').matches,
          observer: new IntersectionObserver(() => {}) instanceof IntersectionObserver,
          agent: navigator.userAgent.includes('Googlebot'),
          native: String(Object.getOwnPropertyDescriptor(Navigator.prototype, 'userAgent')
                         .get).includes('[native code]'),  // put back once read
          width: innerWidth > 0 && innerWidth === window.innerWidth,
          names: [IntersectionObserver.name, IntersectionObserver.length,
                  Element.prototype.getBoundingClientRect.name,
                  Object.getOwnPropertyDescriptor(Screen.prototype, 'width').get.name].join(),
          plain: String(matchMedia).includes('[native code]'),
          called: (() => { try { IntersectionObserver(() => {}); return 'no throw'; }
                           catch (e) { return e.constructor.name; } })(),
        })"""
        return HTMLResponse(_page(script))

    async def forged(request: Request) -> Response:
        # The page looks for the probe's binding to speak through it, removes every global
        # a binding could hang on, then reads: what the capture reports is what it read.
        script = """(() => {
          const found = typeof window.__snapshotdDeviceRead;
          for (const name of Object.getOwnPropertyNames(window)) {
            if (/binding|snapshotd|playwright/i.test(name)) {
              try { delete window[name]; } catch (e) {}
            }
          }
          return found + ' ' + innerHeight;
        })()"""
        return HTMLResponse(_page(script))

    async def frozen(request: Request) -> Response:
        # A page that freezes the prototypes before its reads: they answer as always.
        script = """(() => {
          Object.freeze(Navigator.prototype);
          Object.freeze(Element.prototype);
          return navigator.userAgent.includes('Googlebot') + ' '
            + (document.body.getBoundingClientRect().width > 0);
        })()"""
        return HTMLResponse(_page(script))

    return Starlette(routes=[
        Route("/read/{name}", read), Route("/blind/{name}", blind), Route("/varied", varied),
        Route("/fetched", fetched), Route("/data", data), Route("/framed", framed),
        Route("/behaves", behaves), Route("/forged", forged), Route("/frozen", frozen),
    ])


@pytest.fixture(scope="module")
def origin() -> Iterator[str]:
    require_chromium()
    with serve_asgi(_origin()) as base:
        yield base


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pool(origin: str) -> AsyncIterator[BrowserPool]:
    pool = BrowserPool(SETTINGS, spares=0)
    await pool.start()
    yield pool
    await pool.close()


async def _device(pool: BrowserPool, origin: str, path: str) -> frozenset[str]:
    result = await pool.capture(origin + path, SiteSettings(origin=origin), "mobile")
    assert result.ok, result
    return result.device


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("name", sorted(READ))
async def test_a_read_of_what_differs_by_device_is_named(
    pool: BrowserPool, origin: str, name: str
) -> None:
    assert READ[name][1] in READS
    assert await _device(pool, origin, f"/read/{name}") == {READ[name][1]}


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("name", sorted(BLIND))
async def test_a_page_reading_only_what_every_device_shares_reads_nothing(
    pool: BrowserPool, origin: str, name: str
) -> None:
    assert await _device(pool, origin, f"/blind/{name}") == frozenset()


@pytest.mark.asyncio(loop_scope="module")
async def test_answers_chosen_by_device_are_named(pool: BrowserPool, origin: str) -> None:
    assert await _device(pool, origin, "/varied?vary=User-Agent") == {"vary"}
    assert await _device(pool, origin, "/varied?vary=Sec-CH-UA-Mobile") == {"vary"}
    assert await _device(pool, origin, "/varied?vary=Accept-Encoding") == frozenset()
    assert await _device(pool, origin, "/fetched") == {"vary"}


@pytest.mark.asyncio(loop_scope="module")
async def test_a_read_in_a_frame_counts(pool: BrowserPool, origin: str) -> None:
    assert await _device(pool, origin, "/framed") == {"window.innerWidth"}


@pytest.mark.asyncio(loop_scope="module")
async def test_what_the_probe_wraps_keeps_working(pool: BrowserPool, origin: str) -> None:
    result = await pool.capture(origin + "/behaves", SiteSettings(origin=origin), "mobile")
    assert result.ok, result
    shown = html.unescape(result.html.split('<pre id="out">')[1].split("</pre>")[0])
    assert json.loads(shown) == {
        "rect": True, "media": True, "observer": True, "agent": True, "native": True,
        "width": True, "names": "IntersectionObserver,1,getBoundingClientRect,get width",
        "plain": True, "called": "TypeError",
    }


@pytest.mark.asyncio(loop_scope="module")
async def test_a_page_that_freezes_prototypes_reads_them_as_always(
    pool: BrowserPool, origin: str
) -> None:
    result = await pool.capture(origin + "/frozen", SiteSettings(origin=origin), "mobile")
    assert result.ok, result
    assert '<pre id="out">true true</pre>' in result.html, result.html
    assert result.device == {"navigator.userAgent", "element.getBoundingClientRect"}


@pytest.mark.asyncio(loop_scope="module")
async def test_the_page_can_neither_unhook_the_probe_nor_speak_for_it(
    pool: BrowserPool, origin: str
) -> None:
    result = await pool.capture(origin + "/forged", SiteSettings(origin=origin), "mobile")
    assert result.ok, result
    assert re.search(r'<pre id="out">undefined \d+</pre>', result.html), result.html
    assert result.device == {"window.innerHeight"}


def test_vary_names_the_device_headers_only() -> None:
    # Any header not the same for every device may choose the answer by device, a CDN's
    # device header or a name unknown here included.
    for vary in ("User-Agent", "accept-encoding, user-agent", "*", "Sec-CH-UA-Mobile",
                 "Sec-CH-Viewport-Width", "DPR", "Viewport-Width", "CloudFront-Is-Mobile-Viewer",
                 "X-UA-Device", "X-Device-Type", "X-Made-Up"):
        assert varies_by_device(vary), vary
    for vary in ("", "Accept-Encoding", "Origin, Accept", "Cookie", "Accept-Language",
                 " accept-encoding , ORIGIN ", "RSC, Next-Router-State-Tree"):
        assert not varies_by_device(vary), vary
