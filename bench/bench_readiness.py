"""Readiness: capture time and truth on the corpus, snapshotd against prerender, in one run.

    python bench/bench_readiness.py               # every page, then 3 rounds of the apps
    python bench/bench_readiness.py --rounds 1
    python bench/bench_readiness.py --rates-only --rounds 8   # pages per second alone

Pages: tests/corpus (served on loopback by tests/corpus/server.py), whose content arrives
late in the ways real apps make it arrive, plus real apps built with Vue, React + React
Router, Preact and AngularJS + ngRoute from their npm builds. Three renderers, each with
render time bounded at ``--timeout`` seconds:

- snapshotd, ``readiness = "adaptive"`` (the default) and ``readiness = "quiet"`` (SEO4Ajax's
  rule), ``javascript_timeout`` 3 s, a ``BrowserPool`` of concurrency 2, rendering the
  profiles the capture service renders for a site with ``devices = "per_bot"`` (the
  default: a page that reads something of its device in both, capture/profiles), and for
  one with ``devices = "mobile"``;
- prerender (npm ``prerender``, bench/prerender, installed by ``make bench``), driving the same
  Chromium binary with snapshotd's launch flags (off the network but for the pages).

For each page: the time of one capture alone, and its truth: the word-level similarity
(difflib) of the snapshot's visible text, shown with JavaScript off, to a live render's once
done (after network idle, and once its visible text has stayed the same, and no request has
started or ended, for 4 s, longer than SEO4Ajax's 3 s window, and a page that set
``prerenderReady = false`` has said it is ready);
1.00 when they are the same. Then pages per second at
concurrency 2 over the real-app pages, ``--rounds`` passes, and the ratios to prerender.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import difflib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import uvicorn  # noqa: E402
from playwright.async_api import Browser, async_playwright  # noqa: E402
from playwright.async_api import TimeoutError as PlaywrightTimeout  # noqa: E402

from snapshotd.capture.profiles import ProfileRenders  # noqa: E402
from snapshotd.config.settings import BrowserSettings, SiteSettings  # noqa: E402
from snapshotd.crawlers.devices import profiles_served  # noqa: E402
from snapshotd.render import BrowserPool, find_chromium  # noqa: E402
from snapshotd.render.chromium import LAUNCH_ARGS, sandbox_choice  # noqa: E402
from tests.corpus import CASES, VISIBLE_TEXT, Case, normalise, visible_text  # noqa: E402
from tests.corpus.server import NODE_MODULES, create_app  # noqa: E402

PRERENDER = Path(__file__).resolve().parent / "prerender"
# No name resolves but loopback's: whatever a page asks for elsewhere goes nowhere.
LOOPBACK_ONLY = "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"
STILL = 4.0  # seconds the live render's visible text must stay the same to be the truth

# One capture: (snapshot HTML or None, error or None).
Capture = Callable[[str], Awaitable[tuple[str | None, str | None]]]


def serve_corpus() -> str:
    return serve_app(create_app())


def serve_app(app: Any) -> str:
    """Serve ``app`` on loopback in a thread of its own; its base URL."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.01)
    return f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.asynccontextmanager
async def snapshotd(  # type: ignore[no-untyped-def]
    executable: str, origin: str, readiness: str, timeout: float, devices: str = "per_bot"
):
    """Captures as the capture service renders them for a site with ``readiness`` and
    ``devices``: the profiles its pages need (capture/profiles), the first one's HTML."""
    settings = BrowserSettings(concurrency=2, executable=executable, render_timeout=timeout)
    pool = BrowserPool(settings)
    await pool.start()
    site = SiteSettings(origin=origin, readiness=readiness, devices=devices)
    renders = ProfileRenders(pool, store=None)  # type: ignore[arg-type]  # no recaptures here

    async def capture(url: str) -> tuple[str | None, str | None]:
        result = (await renders.render(url, site, profiles_served(devices))).first
        return (result.html, None) if result.ok else (None, result.error)

    try:
        yield capture
    finally:
        await pool.close()


@contextlib.asynccontextmanager
async def prerender(executable: str, timeout: float):  # type: ignore[no-untyped-def]
    port, debug = free_port(), free_port()
    flags = [
        "--headless",
        f"--remote-debugging-port={debug}",
        "--remote-debugging-address=127.0.0.1",
        "--hide-scrollbars",
        LOOPBACK_ONLY,
        *LAUNCH_ARGS,
    ]
    # As snapshotd launches it: as root, Chromium refuses to start in its sandbox.
    if not sandbox_choice("auto", os.geteuid())[0]:
        flags.append("--no-sandbox")
    env = dict(
        os.environ,
        PORT=str(port),
        CHROME=executable,
        CHROME_FLAGS=json.dumps(flags),
        DEBUG_PORT=str(debug),
        PAGE_LOAD_TIMEOUT=str(int(timeout * 1000)),
    )
    node = subprocess.Popen(
        ["node", str(PRERENDER / "server.js")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    client = httpx.AsyncClient(timeout=timeout + 30, trust_env=False)

    async def capture(url: str, extra: str = "") -> tuple[str | None, str | None]:
        """``extra``: more of prerender's /render parameters (``&width=...``)."""
        r = await client.get(f"{base}/render?url={quote(url, safe='')}{extra}")
        return (r.text, None) if r.status_code == 200 else (None, f"http {r.status_code}")

    try:
        for _ in range(300):  # 503 until its Chromium has started
            with contextlib.suppress(httpx.HTTPError):
                r = await client.get(f"{base}/render?url={quote('about:blank', safe='')}")
                if r.status_code != 503:
                    break
            await asyncio.sleep(0.1)
        yield capture
    finally:
        await client.aclose()
        os.killpg(node.pid, 15)
        node.wait(30)


async def live_text(
    browser: Browser, url: str, options: dict[str, Any] | None = None, tall: int = 0
) -> str:
    """What a person sees once the page is done: after network idle (10 s at most), once a
    page that set ``prerenderReady = false`` has set it otherwise (10 s at most), when the
    visible text has not changed, nor a request started or ended, for ``STILL`` seconds (15 s
    at most; a request held open for over ``STILL`` seconds, a long poll or a stream, does not
    count). ``options``: the context's (a device's screen); with ``tall``, the page is laid
    out at the normal height until it has parsed and drawn a frame, then ``tall`` px tall,
    as a crawler lays it out."""
    context = await browser.new_context(**(options or {}))
    last_request = [time.monotonic()]
    started: dict[Any, float] = {}

    def seen(request: Any, start: bool) -> None:
        now = time.monotonic()
        if start:
            started[request] = now
        elif now - started.pop(request, now) > STILL:
            return  # the end of a long poll or a stream
        last_request[0] = now

    context.on("request", lambda r: seen(r, True))
    context.on("requestfinished", lambda r: seen(r, False))
    context.on("requestfailed", lambda r: seen(r, False))
    try:
        page = await context.new_page()
        if tall:
            await page.goto(url, wait_until="domcontentloaded")
            await page.evaluate("() => new Promise(r => requestAnimationFrame(() => r()))")
            width = (page.viewport_size or {"width": 0})["width"]
            await page.set_viewport_size({"width": width, "height": tall})
            await page.wait_for_load_state("load")
        else:
            await page.goto(url, wait_until="load")
        with contextlib.suppress(PlaywrightTimeout):
            await page.wait_for_load_state("networkidle", timeout=10_000)
        with contextlib.suppress(PlaywrightTimeout):
            await page.wait_for_function("window.prerenderReady !== false", timeout=10_000)
        text, still, deadline = "", 0.0, time.monotonic() + 15
        while time.monotonic() < deadline:
            now = normalise(await page.evaluate(VISIBLE_TEXT))
            still = still + 0.25 if now == text else 0.0
            text = now
            if still >= STILL and time.monotonic() - last_request[0] >= STILL:
                break
            await asyncio.sleep(0.25)
        return text
    finally:
        await context.close()


def truth(snapshot: str, live: str) -> float:
    return difflib.SequenceMatcher(None, snapshot.split(), live.split()).ratio()


async def per_page(
    capture: Capture, reader: Browser, origin: str, cases: list[Case], lives: dict[str, str]
) -> list[tuple[float, float, str | None]]:
    """(seconds, truth, error) of one capture of each page, one at a time."""
    rows = []
    for case in cases:
        started = time.perf_counter()
        html, error = await capture(origin + case.path)
        seconds = time.perf_counter() - started
        score = truth(await visible_text(reader, html), lives[case.path]) if html else 0.0
        rows.append((seconds, score, error))
    return rows


async def throughput(capture: Callable[[str], Awaitable[Any]], urls: list[str]) -> float:
    """Pages per second over ``urls`` with two captures at a time."""
    todo = list(reversed(urls))

    async def worker() -> None:
        while todo:
            await capture(todo.pop())

    started = time.perf_counter()
    await asyncio.gather(worker(), worker())
    return len(urls) / (time.perf_counter() - started)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="passes over the apps at c=2")
    parser.add_argument("--timeout", type=float, default=15.0, help="render time bound, s")
    parser.add_argument("--rates-only", action="store_true", help="pages per second alone")
    args = parser.parse_args()
    if not NODE_MODULES.is_dir():
        sys.exit(f"the corpus apps are missing: npm ci --prefix {NODE_MODULES.parent}")
    executable = find_chromium(BrowserSettings())
    origin = serve_corpus()
    cases = list(CASES)
    app_urls = [origin + c.path for c in cases if c.app] * args.rounds
    with_prerender = (PRERENDER / "node_modules" / "prerender").is_dir() and shutil.which("node")
    print(f"chromium {executable}; corpus {origin}; {len(cases)} pages, timeout {args.timeout} s")
    if not with_prerender:
        print(f"prerender is missing (npm ci --prefix {PRERENDER}): left out")

    renderers: list[tuple[str, Callable[[], Any]]] = [
        ("adaptive", lambda: snapshotd(executable, origin, "adaptive", args.timeout)),
        ("adaptive/mobile",
         lambda: snapshotd(executable, origin, "adaptive", args.timeout, "mobile")),
        ("quiet", lambda: snapshotd(executable, origin, "quiet", args.timeout)),
    ]
    if with_prerender:
        renderers.append(("prerender", lambda: prerender(executable, args.timeout)))

    async with async_playwright() as p:
        reader = await p.chromium.launch(executable_path=executable, args=list(LAUNCH_ARGS))
        if args.rates_only:
            cases = []
        lives = {c.path: await live_text(reader, origin + c.path) for c in cases}
        for case in cases:
            if lives[case.path] != case.expected:
                print(f"note: the live render of {case.path} shows {lives[case.path]!r}")
        rows: dict[str, list[tuple[float, float, str | None]]] = {}
        rates: dict[str, float] = {}
        for name, make in renderers:
            async with make() as capture:
                await capture(app_urls[0])  # warm: the browser is up, the scripts compiled
                rows[name] = await per_page(capture, reader, origin, cases, lives)
                rates[name] = await throughput(capture, app_urls)
        await reader.close()

    names = [name for name, _ in renderers]
    print()
    if cases:
        pages_table(cases, names, rows)
    count = len(app_urls)
    for name in names:
        line = f"{name}: {rates[name]:.2f} pages/s at concurrency 2 over {count} app captures"
        if "prerender" in rates and name != "prerender":
            line += f", x{rates[name] / rates['prerender']:.2f} prerender's (target >= 2.00)"
        print(line)


def pages_table(
    cases: list[Case], names: list[str], rows: dict[str, list[tuple[float, float, str | None]]]
) -> None:
    """Each page's capture time and truth by each renderer, and each renderer's summary."""
    print(f"{'page':<36}" + "".join(f"{n + ' s':>12}{'truth':>7}" for n in names))
    for i, case in enumerate(cases):
        line = f"{case.name:<36}"
        for name in names:
            seconds, score, error = rows[name][i]
            line += f"{seconds:>12.2f}{score:>7.2f}"
            if error:
                line += f" ({name}: {error})"
        print(line)
    for name in names:
        scores = [r[1] for r in rows[name]]
        total = sum(r[0] for r in rows[name])
        print(
            f"{name}: truth 1.00 on {sum(s == 1.0 for s in scores)}/{len(scores)} pages, "
            f"lowest {min(scores):.2f}; {total:.1f} s for all pages one at a time"
        )
    print()


if __name__ == "__main__":
    asyncio.run(main())
