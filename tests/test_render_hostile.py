"""A hostile page against the pool, with real Chromium on loopback: what the page can reach of
the capture, and a browser that does not answer.

Two sites on 127.0.0.1: A serves a page that calls whatever the capture put on its window,
B an ordinary page. Nothing else is ever a target.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from typing import Any

import pytest
import pytest_asyncio
from playwright.async_api import Browser
from pytest_httpserver import HTTPServer
from werkzeug.wrappers import Request, Response

from snapshotd.config.settings import BrowserSettings, SiteSettings
from snapshotd.render import BrowserPool
from snapshotd.render import slot as slot_module
from snapshotd.render.readiness import SETTLE_KEY
from snapshotd.render.renderer import first_line
from snapshotd.render.signals import MAX_URL, MAX_URLS, MAX_WORKERS, WORKERS_PER_DOCUMENT
from snapshotd.render.slot import Slot
from tests.chromium import recording, require_chromium, rules_met

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="module")]

SETTINGS = BrowserSettings(
    concurrency=2, javascript_timeout=1.0, render_timeout=45.0, recycle_after=500
)

# Lists every function on its window that it did not define and that the browser does not
# define either (a name starting with "_", or a function whose source is not native) and
# shows the list; asked ``?list``, stops there. Else calls those named "_..." and
# onCaptureReady with strings of 1 and 8 MiB and with what the capture's messages look like,
# in a loop, for about 8 s, and starts shared workers with huge and countless URLs.
HOSTILE = """<!doctype html><html><body><pre id="found"></pre>
<script>
  const huge = "x".repeat(1 << 20), bigger = "y".repeat(8 << 20);
  const mine = new Set(["huge", "bigger", "mine", "found", "burst", "started", "callable"]);
  const found = Object.getOwnPropertyNames(window).filter((name) => {
    if (mine.has(name)) return false;
    let f;
    try { f = window[name]; } catch (e) { return false; }
    if (typeof f !== "function") return false;
    return name.startsWith("_") || !/\\[native code\\]/.test(Function.prototype.toString.call(f));
  });
  document.getElementById("found").textContent = JSON.stringify(found);
  if (location.search === "?list") throw "listed only";
  const callable = found.filter((n) => n.startsWith("_") || n === "onCaptureReady");
  const args = [[huge], [bigger, bigger], ["shared /u"], ['ready [301, "/elsewhere"]'],
                [301, "/elsewhere"]];
  let n = 0;
  const started = performance.now();
  const burst = () => {
    for (let i = 0; i < 200; i++) {
      n++;
      for (const name of callable) {
        for (const a of args) {
          try { window[name](...a); } catch (e) {}
        }
      }
      try { new SharedWorker("/worker"); } catch (e) {}
    }
    try { new SharedWorker("/worker-" + n + "-" + huge.slice(0, 20000)); } catch (e) {}
    try { new SharedWorker("/worker-" + n); } catch (e) {}
    if (performance.now() - started < 8000) {
      setTimeout(() => { fetch("/t" + n).catch(() => {}); burst(); }, 0);
    }
  };
  burst();
</script></body></html>"""

ORDINARY = """<!doctype html><html><body><h1 id="h">loading</h1>
<script>setTimeout(() => { document.getElementById("h").textContent = "Site B page"; }, 50);
</script></body></html>"""


# Shows its content at once, then sets timers forever: a 0 ms timeout chain, and a chain of
# 100 ms timeouts each asking for a new URL.
FOREVER = """<!doctype html><html><body><h1>Shown at once</h1>
<script>
  let n = 0;
  const spin = () => setTimeout(spin, 0);
  const ask = () => setTimeout(() => { fetch("/t" + ++n).catch(() => {}); ask(); }, 100);
  spin();
  ask();
</script></body></html>"""


# Starts a shared and a dedicated worker every few milliseconds, for as long as it runs, and
# keeps them all.
WORKERS = """<!doctype html><html><body><h1>Workers</h1>
<script>
  const kept = [];
  let n = 0;
  const more = () => {
    for (let i = 0; i < 4; i++) {
      n++;
      try { kept.push(new SharedWorker("/wk-s" + n)); } catch (e) {}
      try { kept.push(new Worker("/wk-d" + n)); } catch (e) {}
    }
    setTimeout(more, 5);
  };
  more();
</script></body></html>"""

# The same from a new iframe each time, each document with workers of its own to start.
FRAMES = WORKERS.replace(
    "const more = () => {",
    "const more = () => { const f = document.createElement('iframe');"
    " document.body.appendChild(f); const window = f.contentWindow;",
).replace("new SharedWorker(", "new window.SharedWorker(")
FRAMES = FRAMES.replace("new Worker(", "new window.Worker(")

# Runs as many dedicated workers as a document may start, one after another, each ended once it
# said hello.
CHURN = """<!doctype html><html><body><h1>Churning</h1>
<script>
  let i = 0;
  const next = () => {
    if (i++ >= __MAX__) { document.querySelector("h1").textContent = "Churned"; return; }
    const w = new Worker("/wk-c" + i);
    w.onmessage = () => { w.terminate(); next(); };
  };
  next();
</script></body></html>""".replace("__MAX__", str(WORKERS_PER_DOCUMENT))

WORKER_SCRIPT = "if (self.postMessage) self.postMessage(1);"
worker_scripts: list[str] = []  # every worker script any site served


def _worker_script(request: Request) -> Response:
    worker_scripts.append(request.path)
    return Response(WORKER_SCRIPT, content_type="text/javascript")


def _serve(body: str) -> HTTPServer:
    server = HTTPServer(host="127.0.0.1", port=0, threaded=True)
    pages = (("/forever", FOREVER), ("/workers", WORKERS), ("/frames", FRAMES), ("/churn", CHURN))
    for path, page in pages:
        server.expect_request(path).respond_with_handler(
            lambda _r, page=page: Response(page, content_type="text/html")
        )
    server.expect_request(re.compile("/wk.*")).respond_with_handler(_worker_script)
    server.expect_request(re.compile("/page.*")).respond_with_handler(
        lambda _r: Response(body, content_type="text/html")
    )
    server.expect_request(re.compile(".*")).respond_with_handler(
        lambda _r: Response("", content_type="text/javascript")
    )
    server.start()
    return server


@pytest.fixture(scope="module")
def sites() -> Iterator[tuple[SiteSettings, SiteSettings]]:
    require_chromium()
    a, b = _serve(HOSTILE), _serve(ORDINARY)
    yield (
        SiteSettings(origin=f"http://127.0.0.1:{a.port}"),
        SiteSettings(origin=f"http://127.0.0.1:{b.port}"),
    )
    for server in (a, b):
        server.clear()
        server.stop()


@pytest_asyncio.fixture(loop_scope="module")
async def pool() -> AsyncIterator[BrowserPool]:
    pool = BrowserPool(SETTINGS)
    await pool.start()
    yield pool
    await pool.close()


async def test_a_hostile_page_reaches_nothing_of_the_capture_and_another_site_renders(
    pool, sites, monkeypatch
) -> None:
    a, b = sites
    kept = recording(monkeypatch)
    hostile = asyncio.ensure_future(pool.capture(f"{a.origin}/page", a))
    await asyncio.sleep(1.0)  # the page is calling
    during = await pool.capture(f"{b.origin}/page", b)
    assert during.ok and "Site B page" in during.html, during
    result = await hostile
    # The page's own capture fails: at its limits, or as its workers pass the bound.
    assert result.error in (None, "timeout", OVERRUN), result
    # The page's calls were never heard: neither the redirect nor the status it asked for.
    assert not result.headers.get("Location") and result.status in (0, 200), result
    # Whatever it sent, the capture kept a bounded amount of it.
    signals = next(s for slot, s in kept if s.origin == a.origin)
    assert not signals.ready.done()
    urls = signals.shared_workers
    assert len(urls) <= MAX_URLS and all(len(u) <= MAX_URL for u in urls)
    # Nothing the capture listens to is on the page's window: what the page finds are the
    # capture's wrappers of the browser's own functions (setTimeout, SharedWorker, ...) and
    # the function the capture asks how long the page needs (it answers, and tells nothing).
    listed = await pool.capture(f"{a.origin}/page?list", a)
    assert listed.ok, listed
    found = json.loads(re.search(r'<pre id="found">(.*?)</pre>', listed.html).group(1))
    assert "setTimeout" in found and "onCaptureReady" in found, found
    assert [n for n in found if n.startswith("_")] == [SETTLE_KEY], found
    # The pool serves site B again.
    for _ in range(3):
        after = await pool.capture(f"{b.origin}/page", b)
        assert after.ok and "Site B page" in after.html, after


async def test_a_page_that_sets_timers_forever_is_captured_at_the_hard_limit_beside_others(
    pool, sites, monkeypatch
) -> None:
    a, b = sites
    met = rules_met(monkeypatch)
    held = replace(a, render_timeout=20.0)
    hostile = asyncio.ensure_future(pool.capture(f"{a.origin}/forever", held))
    # Another site's pages render in the pool's other slot meanwhile.
    for _ in range(3):
        during = await pool.capture(f"{b.origin}/page", b)
        assert during.ok and "Site B page" in during.html, during
    assert not hostile.done()
    result = await hostile
    assert result.ok and "Shown at once" in result.html, result
    assert result.readiness_limit
    assert met == ["settled", "settled", "settled", "hard"], met


async def test_a_page_that_says_too_much_is_no_longer_heard_and_its_slot_goes(
    pool, sites, monkeypatch
) -> None:
    a, b = sites
    kept = recording(monkeypatch)
    heard: list[int] = []
    on_binding = Slot._on_binding

    def counted(self: Slot, event: dict[str, Any]) -> None:
        heard.append(1)
        on_binding(self, event)

    monkeypatch.setattr(Slot, "_on_binding", counted)
    # The page's own bound lifted: the capture's bound stops listening.
    monkeypatch.setattr("snapshotd.render.channel.PER_DOCUMENT", 10**9)
    monkeypatch.setattr("snapshotd.render.channel.PER_CAPTURE", 1000)
    # Its shared workers, which say what they are, unbounded too.
    monkeypatch.setattr("snapshotd.render.signals.MAX_WORKERS", 10**9)
    unbounded = slot_module.PAGE_SCRIPT.replace(
        f"let workersLeft = {WORKERS_PER_DOCUMENT};", "let workersLeft = 1e9;"
    )
    assert unbounded != slot_module.PAGE_SCRIPT
    monkeypatch.setattr(slot_module, "PAGE_SCRIPT", unbounded)
    # It never says it is ready: its capture ends at its timeout, long after the bound.
    result = await pool.capture(
        f"{a.origin}/page", replace(a, wait_for_capture_ready=True, render_timeout=20)
    )
    assert result.error == "timeout", result
    assert len(heard) > 1000
    slot, _ = kept[0]
    assert slot._channel.deaf and not slot.usable
    after = await pool.capture(f"{b.origin}/page", b)
    assert after.ok and "Site B page" in after.html, after
    assert kept[1][0] is not slot


OVERRUN = f"page overrun: more than {MAX_WORKERS} workers at once"


@pytest.mark.parametrize("page", ["workers", "frames"])
async def test_a_page_that_starts_workers_without_end_is_stopped_at_the_bound_beside_others(
    pool, sites, page
) -> None:
    a, b = sites
    worker_scripts.clear()
    hostile = asyncio.ensure_future(pool.capture(f"{a.origin}/{page}", a))
    during = await pool.capture(f"{b.origin}/page", b)
    assert during.ok and "Site B page" in during.html, during
    result = await hostile
    assert result.error == OVERRUN and not result.html, result
    # One document starts no more workers than it may; many documents are stopped by the
    # browser's count. Nothing is started once the capture has ended.
    await asyncio.sleep(1.0)
    started = len(worker_scripts)
    assert started > 0 and (page == "frames" or started <= WORKERS_PER_DOCUMENT), started
    await asyncio.sleep(1.0)
    assert len(worker_scripts) == started
    for _ in range(2):
        after = await pool.capture(f"{b.origin}/page", b)
        assert after.ok and "Site B page" in after.html, after


async def test_a_page_running_many_workers_one_at_a_time_is_captured(pool, sites) -> None:
    a, _ = sites
    worker_scripts.clear()
    result = await pool.capture(f"{a.origin}/churn", a)
    assert result.ok and "Churned" in result.html, result
    assert len(worker_scripts) == WORKERS_PER_DOCUMENT > MAX_WORKERS


async def test_a_timeout_without_a_message_is_said_in_one_line() -> None:
    assert first_line(TimeoutError()) == "TimeoutError"
    assert first_line(RuntimeError("no page\nmore")) == "no page"


async def test_a_context_that_does_not_close_is_given_up_and_its_guard_closed(
    pool, sites, monkeypatch
) -> None:
    monkeypatch.setattr(slot_module, "_CLOSE_TIMEOUT", 0.2)
    assert pool._current is not None
    slot = Slot(pool._current.browser, SETTINGS)
    await slot.open()
    port = int(slot._guard.proxy_server.rsplit(":", 1)[1])
    context = slot._context
    assert context is not None
    real_close = context.close

    async def never(*_args: Any, **_kw: Any) -> None:
        await asyncio.Event().wait()

    monkeypatch.setattr(context, "close", never)
    await slot.close()  # TimeoutError() says nothing: logged in a line, not raised
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", port)
    await real_close()


async def test_a_browser_that_opens_no_page_is_given_up_and_readiness_says_so(
    pool, sites, monkeypatch
) -> None:
    _, b = sites
    monkeypatch.setattr(slot_module, "OPEN_TIMEOUT", 0.5, raising=False)
    new_context = Browser.new_context

    async def never(*_args: Any, **_kw: Any) -> Any:
        await asyncio.Event().wait()

    monkeypatch.setattr(Browser, "new_context", never)
    async with asyncio.timeout(60):  # stops a hang; not a measure
        result = await pool.capture(f"{b.origin}/page", replace(b), "phone")
        assert result.error is not None and result.error.startswith("browser unavailable"), result
        assert "no page opened" in result.error
        why = await pool.probe(timeout=10)
        assert why is not None and why.startswith("browser unavailable"), why
        monkeypatch.setattr(Browser, "new_context", new_context)
        monkeypatch.setattr(slot_module, "OPEN_TIMEOUT", 20.0)  # a loaded machine's time
        assert await pool.probe(timeout=10) is None
        after = await pool.capture(f"{b.origin}/page", b, "phone")
    assert after.ok and "Site B page" in after.html, after


# Prints 64 KiB strings and objects through every console method, throws uncaught errors and
# rejects promises, in its own document and in iframes it makes (each reached through its
# window's console the moment it exists), for about 3 s; then says it is done and ready.
LOUD = """<!doctype html><html><body><h1 id="h">loud</h1>
<script>
  const big = "z".repeat(1 << 16), started = performance.now();
  const methods = ["log", "info", "warn", "error", "debug", "dir", "table", "trace", "assert"];
  let frames = 0;
  const shout = (c) => { for (const m of methods) { try { c[m](big, {big}); } catch (e) {} } };
  const round = () => {
    for (let i = 0; i < 50; i++) shout(console);
    if (frames < 20) {
      const f = document.createElement("iframe");
      document.body.appendChild(f);
      frames++;
      try { shout(f.contentWindow.console); } catch (e) {}
      try { f.contentWindow.eval("setTimeout(() => { throw new Error('z'.repeat(1 << 16)); })"); }
      catch (e) {}
    }
    setTimeout(() => { throw new Error(big); }, 0);
    Promise.reject(new Error(big));
    if (performance.now() - started < 3000) setTimeout(round, 0);
    else {
      document.getElementById("h").textContent = "loud page done";
      window.onCaptureReady();
    }
  };
  round();
</script></body></html>"""


async def test_a_page_s_console_and_errors_do_not_flood_the_process(monkeypatch) -> None:
    """What a page prints or throws is not what it shows: it never reaches the process in
    volume, however much the page prints, from however many of its documents."""
    require_chromium()
    loud = _serve(LOUD)
    heard: dict[str, int] = {"events": 0, "bytes": 0}
    intercept = Slot._intercept

    async def counting(self: Slot, cdp: Any) -> None:
        def count(event: dict[str, Any]) -> None:
            heard["events"] += 1
            heard["bytes"] += len(json.dumps(event))

        cdp.on("Runtime.consoleAPICalled", count)
        cdp.on("Runtime.exceptionThrown", count)
        await intercept(self, cdp)

    monkeypatch.setattr(Slot, "_intercept", counting)
    pool = BrowserPool(replace(SETTINGS, concurrency=1))
    await pool.start()
    try:
        site = SiteSettings(
            origin=f"http://127.0.0.1:{loud.port}", wait_for_capture_ready=True
        )
        result = await pool.capture(f"{site.origin}/page", site)
        assert result.ok and "loud page done" in result.html, result
    finally:
        await pool.close()
        loud.clear()
        loud.stop()
    # Unbounded, this was thousands of events and over 80 MB; not one of its strings gets through.
    assert heard["bytes"] < 1 << 16, heard
