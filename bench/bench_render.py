"""Renderer throughput and memory, against the example SPA's item pages.

    python bench/bench_render.py                 # full run
    python bench/bench_render.py --captures 40 --rounds 1 --rss 50,200   # a quick one

Throughput: captures per second of ``BrowserPool`` at concurrency 1 and 2, against a floor
measured in the same run: a plain Playwright loop that reuses one page per slot and takes
``page.content()`` when the app calls ``window.onCaptureReady()``. Floor and pool take turns
for ``--rounds`` rounds, and the median ratio is reported. Each capture is of a page not
captured before in that run, as in a crawl; ``--pages 24`` has them revisit 24 pages instead,
so a slot meets URLs it has fetched before (whose documents and data it must not take from its
HTTP cache). Memory: peak RSS of this
process plus every process under it (the Playwright driver and Chromium) over the first N
captures, for each N given to ``--rss``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import uvicorn  # noqa: E402
from playwright.async_api import async_playwright  # noqa: E402

from snapshotd.config.settings import BrowserSettings, SiteSettings  # noqa: E402
from snapshotd.render import BrowserPool, find_chromium  # noqa: E402
from snapshotd.render.chromium import LAUNCH_ARGS  # noqa: E402
from snapshotd.render.procs import descendants, rss_bytes  # noqa: E402


def fallback_app():  # type: ignore[no-untyped-def]
    """Item pages like the example SPA's, for when it is not there."""
    from starlette.applications import Starlette
    from starlette.responses import HTMLResponse, JSONResponse
    from starlette.routing import Route

    page = """<!doctype html><html><head><title>Item</title></head><body><main id="app">
    Loading</main><script>
    const n = location.pathname.split("/").pop();
    fetch("/api/items/" + n).then((r) => r.json()).then((item) => {
      document.getElementById("app").innerHTML = "<h1>" + item.name + "</h1>";
      window.onCaptureReady && window.onCaptureReady();
    });
    </script></body></html>"""

    async def item_page(request):  # type: ignore[no-untyped-def]
        return HTMLResponse(page)

    async def item(request):  # type: ignore[no-untyped-def]
        await asyncio.sleep(0.05)
        return JSONResponse({"name": f"Item {request.path_params['n']}"})

    return Starlette(routes=[Route("/items/{n:int}", item_page), Route("/api/items/{n:int}", item)])


WARMUP = 10  # captures before each timed run


def serve(pages: int) -> str:
    try:
        from examples.spa.app import create_app

        app = create_app(item_count=pages)
    except ImportError:
        app = fallback_app()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    return f"http://127.0.0.1:{port}"


def urls(origin: str, count: int, pages: int, start: int = 1) -> list[str]:
    """``count`` item pages, from ``start`` on, taking turns among ``pages`` of them."""
    return [f"{origin}/items/{(start - 1 + i) % pages + 1}" for i in range(count)]


async def run_slots(concurrency: int, todo: list[str], capture) -> float:  # type: ignore[no-untyped-def]
    """Captures per second for ``todo`` shared among ``concurrency`` workers."""
    queue = list(reversed(todo))

    async def worker(slot: int) -> None:
        while queue:
            await capture(slot, queue.pop())

    started = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(concurrency)))
    return len(todo) / (time.perf_counter() - started)


Slot = Callable[[int, str], Awaitable[Any]]  # one capture: (slot, url)
Options = Callable[[str], dict[str, Any]]  # a context's options, given Chromium's version


@contextlib.asynccontextmanager
async def floor_loop(
    executable: str, concurrency: int, options: Options | None = None,
    *, blank: bool = False, idle: bool = False, shows: str = "Item", args: tuple[str, ...] = (),
) -> AsyncIterator[Callable[[int, str], Awaitable[str]]]:
    """The plain Playwright loop: one browser (launched with ``args`` too), one reused page
    per slot, each slot's context made with ``options`` (given Chromium's version); a
    capture's HTML, which must hold ``shows``, taken on onCaptureReady, or with ``idle`` at
    Playwright's ``networkidle`` (no request for 500 ms); with ``blank``, each page is left
    for ``about:blank`` once taken, as snapshotd's wipe leaves it."""
    async with async_playwright() as p:
        browser = await p.chromium.launch(
            executable_path=executable, args=[*args, *LAUNCH_ARGS]
        )
        made = options(browser.version) if options else {}
        pages, ready = [], {}
        for slot in range(concurrency):
            context = await browser.new_context(**made)

            def on_ready(source: Any, *args: Any, slot: int = slot) -> None:
                if not ready[slot].done():
                    ready[slot].set_result(True)

            if not idle:
                await context.expose_binding("__ready", on_ready)
                await context.add_init_script("window.onCaptureReady = () => window.__ready();")
            pages.append(await context.new_page())

        async def capture(slot: int, url: str) -> str:
            if idle:
                await pages[slot].goto(url, wait_until="networkidle", timeout=60_000)
            else:
                ready[slot] = asyncio.get_running_loop().create_future()
                await pages[slot].goto(url, wait_until="commit")
                await ready[slot]
            html = await pages[slot].content()
            assert shows in html
            if blank:
                await pages[slot].evaluate("() => location.replace('about:blank')")
                await pages[slot].wait_for_url("about:blank", wait_until="commit")
            return html

        yield capture
        await browser.close()


async def floor(
    executable: str, concurrency: int, todo: list[str], warmup: list[str],
    options: Options | None = None,
) -> float:
    """The floor's captures per second over ``todo``, after ``warmup``."""
    async with floor_loop(executable, concurrency, options) as capture:
        await run_slots(concurrency, warmup, capture)
        return await run_slots(concurrency, todo, capture)


async def pool_rate(executable: str, concurrency: int, origin: str, todo, warmup) -> float:  # type: ignore[no-untyped-def]
    settings = BrowserSettings(concurrency=concurrency, executable=executable)
    pool = BrowserPool(settings)
    await pool.start()
    site = SiteSettings(origin=origin)

    async def capture(slot: int, url: str) -> None:
        result = await pool.capture(url, site)
        assert result.ok and "Item" in result.html, result

    try:
        await run_slots(concurrency, warmup, capture)
        return await run_slots(concurrency, todo, capture)
    finally:
        await pool.close()


def tree_rss() -> int:
    return rss_bytes([os.getpid()] + [p.pid for p in descendants()])


async def memory(
    executable: str, origin: str, counts: list[int], concurrency: int, pages: int
) -> None:
    settings = BrowserSettings(concurrency=concurrency, executable=executable)
    pool = BrowserPool(settings)
    await pool.start()
    site = SiteSettings(origin=origin)
    peak = 0
    done = 0
    stop = asyncio.Event()

    async def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, tree_rss())
            await asyncio.sleep(0.1)

    sampler = asyncio.ensure_future(sample())
    todo = urls(origin, max(counts), pages)
    figures: list[tuple[int, int]] = []

    async def worker() -> None:
        nonlocal done
        while todo:
            url = todo.pop()
            result = await pool.capture(url, site)
            assert result.ok, result
            done += 1
            if done in counts:
                figures.append((done, max(peak, tree_rss())))

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    stop.set()
    await sampler
    elapsed = time.perf_counter() - started
    stats = pool.stats
    await pool.close()
    first = figures[0][1]
    print(f"memory, concurrency {concurrency}, recycle_after {settings.recycle_after}:")
    for count, rss in figures:
        print(
            f"  peak RSS after {count:>5} captures: {rss / 2**20:7.1f} MiB"
            f"  (x{rss / first:.2f} of the first)"
        )
    print(
        f"  {stats.captures} captures in {elapsed:.1f} s, {stats.failures} failed, "
        f"{stats.launches} launches, {stats.recycles} recycles, {stats.slots_opened} slots opened, "
        f"{stats.collections} garbage collections"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--captures", type=int, default=200, help="captures per throughput run")
    parser.add_argument("--concurrency", default="1,2", help="comma-separated levels")
    parser.add_argument("--rounds", type=int, default=3, help="floor/pool pairs per level")
    parser.add_argument("--rss", default="100,1000", help="capture counts for peak RSS; '' skips")
    parser.add_argument(
        "--pages", type=int, default=0,
        help="distinct item pages the captures take turns among (default: a new page for "
        "every capture, as a crawl renders each page once; 24 revisits each page)",
    )
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    pages = args.pages or args.captures + WARMUP
    executable = find_chromium(BrowserSettings())
    origin = serve(pages)
    print(
        f"chromium {executable}; origin {origin}; {args.captures} captures per run "
        f"among {pages} pages"
    )
    warmup = urls(origin, WARMUP, pages, start=args.captures + 1)
    for concurrency in [int(c) for c in args.concurrency.split(",") if c]:
        todo = urls(origin, args.captures, pages)
        ratios = []
        for round_ in range(1, args.rounds + 1):
            # Alternate which goes first, so drift in the machine's speed evens out.
            if round_ % 2:
                base = await floor(executable, concurrency, todo, warmup)
                ours = await pool_rate(executable, concurrency, origin, todo, warmup)
            else:
                ours = await pool_rate(executable, concurrency, origin, todo, warmup)
                base = await floor(executable, concurrency, todo, warmup)
            ratios.append(ours / base)
            print(
                f"concurrency {concurrency}, round {round_}: floor {base:6.2f}/s, "
                f"pool {ours:6.2f}/s, ratio {ours / base:.2f}",
                flush=True,
            )
        print(
            f"concurrency {concurrency}: median ratio {statistics.median(ratios):.2f} "
            f"(range {min(ratios):.2f}-{max(ratios):.2f}; target >= 0.8)",
            flush=True,
        )
    counts = sorted(int(c) for c in args.rss.split(",") if c)
    if counts:
        await memory(executable, origin, counts, concurrency=2, pages=pages)


if __name__ == "__main__":
    asyncio.run(main())
