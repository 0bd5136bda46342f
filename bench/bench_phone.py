"""The phone's capture against its floor: where a capture's time goes, side by side in one run.

    python bench/bench_phone.py                    # 12 pairs of 10-page runs, concurrency 1, 2
    python bench/bench_phone.py --batches 6 --concurrency 2

Pages: the example SPA's item pages (a new page each capture, as a crawl or a miss meets
them), which call ``window.onCaptureReady()`` once their data is drawn.

The floor is a plain Playwright loop rendering what snapshotd renders for Googlebot
Smartphone: the mobile profile's context (412 px wide, mobile, touch, scale 2.625, the
crawler's user agent) in the crawler's 12,000 px viewport from the start, one reused page a
slot, its HTML (``page.content()``) taken when the app calls ``onCaptureReady``. snapshotd is a
``BrowserPool`` capturing each page for the ``mobile`` profile with a default site (laid out at
732 px, then in the 12,000 px viewport; its slots wiped between captures).

Each comparison keeps both sides open and has them take turns over the same runs of
``--batch`` pages (each side first every other run), ``--batches`` pairs, and reports the
median and quartiles of the pairs' ratios of captures per second: on a machine others load,
a short pair sees one load. Comparisons, at each concurrency: snapshotd / floor at 12,000 px
(target >= 0.95); snapshotd / the floor launched with the ``--disable-features`` switch
snapshotd's pool uses (``RenderDocument`` off beside Playwright's own features:
snapshotd.render.features; the plain floor keeps Playwright's alone); snapshotd / a floor that
also leaves each page for ``about:blank`` once taken (the navigation snapshotd's clean slate
costs: its wipe needs the document gone); both
at the normal 732 px (``viewport_height_mobile = 732``); the floor at
12,000 / 732 px and at scale 2.625 / 1 (what the tall viewport and raster at the phone's pixel
ratio cost the floor itself); at concurrency 2, bot misses through ``snapshotd serve
--no-crawler`` (in front of the same app, asked by Googlebot Smartphone, each page once) /
the floor at 12,000 px (target >= 0.95).

Then one instrumented run of the pool at concurrency 2 says where a capture's time goes: the
mean milliseconds of each step of a capture (the navigation, the tall viewport, the
serialisation) and of the wipe between captures (each DevTools command too), and the load
average of the machine at the start and the end. Last, the CPU a capture costs each process
(this Python process, which also serves the app; Playwright's driver; Chromium's processes;
from /proc) at concurrency 2, for the floor, the floor leaving each page for ``about:blank``
and the pool, one after another ``--cpu-rounds`` times: on a machine whose cores are all at
work, the rate follows the CPU a capture, and this says whose it is.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import httpx  # noqa: E402
from bench_proxy import cpu_seconds, free_port, wait_answering  # noqa: E402
from bench_render import Options, Slot, run_slots, serve, urls  # noqa: E402
from bench_render import floor as render_floor  # noqa: E402
from bench_render import floor_loop as render_floor_loop  # noqa: E402
from playwright.async_api import CDPSession, Page, async_playwright  # noqa: E402

from snapshotd.config.settings import BrowserSettings, SiteSettings  # noqa: E402
from snapshotd.crawlers.devices import PROFILES  # noqa: E402
from snapshotd.render import BrowserPool, find_chromium  # noqa: E402
from snapshotd.render import page_capture as page_capture_module  # noqa: E402
from snapshotd.render import slot as slot_module  # noqa: E402
from snapshotd.render import viewport as viewport_module  # noqa: E402
from snapshotd.render.features import disabled_features_args  # noqa: E402
from snapshotd.render.procs import browsers  # noqa: E402

PHONE = PROFILES["mobile"]
TALL = 12_000
WARMUP = 10


def phone(height: int, scale: float = PHONE.device_scale_factor) -> Options:
    """The mobile profile's context options, ``height`` px tall at ``scale``."""
    return lambda version: {
        **PHONE.context_options(version),
        "viewport": {"width": PHONE.width, "height": height},
        "device_scale_factor": scale,
    }


def floor_loop(
    executable: str, concurrency: int, height: int, scale: float = PHONE.device_scale_factor,
    *, blank: bool = False, args: tuple[str, ...] = (),
) -> contextlib.AbstractAsyncContextManager[Slot]:
    """The module's floor (bench_render's loop, as the phone) at viewport ``height`` and
    ``scale``, its Chromium launched with ``args`` too; with ``blank``, each page is left for
    ``about:blank`` once taken."""
    return render_floor_loop(
        executable, concurrency, phone(height, scale), blank=blank, args=args
    )


async def snapshotd_features() -> tuple[str, ...]:
    """The ``--disable-features`` switch snapshotd's pool launches Chromium with (Playwright's
    features and snapshotd's own: snapshotd.render.features)."""
    async with async_playwright() as playwright:
        switches, _ = await disabled_features_args(playwright)
    return tuple(switches)


async def floor(
    executable: str, concurrency: int, todo: list[str], warmup: list[str], height: int
) -> float:
    """The floor's captures per second over ``todo``, after ``warmup``."""
    return await render_floor(executable, concurrency, todo, warmup, phone(height))


@contextlib.asynccontextmanager
async def snapshotd_pool(
    executable: str, concurrency: int, origin: str, height: int = TALL
) -> AsyncIterator[Slot]:
    """snapshotd's captures for the mobile profile, the site's tall viewport ``height``."""
    renderer = BrowserPool(BrowserSettings(concurrency=concurrency, executable=executable))
    await renderer.start()
    site = SiteSettings(origin=origin, viewport_height_mobile=height)

    async def capture(slot: int, url: str) -> None:
        result = await renderer.capture(url, site, "mobile")
        assert result.ok and "Item" in result.html, result

    try:
        yield capture
    finally:
        await renderer.close()


SMARTPHONE = (
    "Mozilla/5.0 (Linux; Android 6.0.1; Nexus 5X Build/MMB29P) AppleWebKit/537.36 (KHTML, "
    "like Gecko) Chrome/131.0.6778.85 Mobile Safari/537.36 (compatible; Googlebot/2.1; "
    "+http://www.google.com/bot.html)"
)


@contextlib.asynccontextmanager
async def serve_no_crawler(config: Path) -> AsyncIterator[str]:
    """``snapshotd serve --no-crawler --config config`` on a free port, once it answers: its
    base URL."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "snapshotd", "serve", "--config", str(config),
         "--port", str(port), "--no-crawler"],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        await asyncio.to_thread(wait_answering, base + "/_snapshotd/healthz", proc, "serve")
        yield base
    finally:
        proc.terminate()
        proc.wait(30)


@contextlib.asynccontextmanager
async def proxy_misses(origin: str) -> AsyncIterator[Slot]:
    """Bot misses through ``snapshotd serve --no-crawler`` in front of ``origin``."""
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "serve.toml"
        config.write_text(
            f'[server]\ndb = "{tmp}/bench.db"\n[[site]]\nname = "spa"\norigin = "{origin}"\n'
            "new_paths_per_minute = 1000000\n"  # every page asked is new: none refused
        )
        async with serve_no_crawler(config) as base, httpx.AsyncClient(
            base_url=base, timeout=60, trust_env=False, headers={"User-Agent": SMARTPHONE}
        ) as client:

            async def miss(slot: int, url: str) -> None:
                r = await client.get(url.removeprefix(origin))
                assert r.headers.get("x-snapshotd-cache") == "MISS", r.headers
                assert "Item" in r.text

            yield miss


async def paired(
    concurrency: int, ours: Slot, base: Slot, batches: list[list[str]], warmup: list[str]
) -> list[float]:
    """The ratio of ``ours`` rate to ``base``'s over each batch of pages, the two taking
    turns batch by batch (each first every other batch), so that the machine's drift is
    shared: on a machine others load, a short pair sees the same load."""
    await run_slots(concurrency, warmup, ours)
    await run_slots(concurrency, warmup, base)
    ratios = []
    for i, batch in enumerate(batches):
        if i % 2:
            theirs = await run_slots(concurrency, batch, base)
            mine = await run_slots(concurrency, batch, ours)
        else:
            mine = await run_slots(concurrency, batch, ours)
            theirs = await run_slots(concurrency, batch, base)
        ratios.append(mine / theirs)
    return ratios


def summary(ratios: list[float]) -> str:
    quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
    return (
        f"median {statistics.median(ratios):.2f} (quartiles {quartiles[0]:.2f}-"
        f"{quartiles[2]:.2f}, {len(ratios)} pairs)"
    )


class Steps:
    """Milliseconds spent in each instrumented step, over one run."""

    def __init__(self) -> None:
        self.times: dict[str, list[float]] = collections.defaultdict(list)
        self._undo: list[Callable[[], None]] = []

    def watch(self, owner: Any, name: str, label: str) -> None:
        original = getattr(owner, name)
        times = self.times[label]

        async def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return await original(*args, **kwargs)
            finally:
                times.append(time.perf_counter() - started)

        setattr(owner, name, timed)
        self._undo.append(lambda: setattr(owner, name, original))

    def watch_commands(self) -> None:
        original = CDPSession.send

        async def send(session: CDPSession, method: str, params: Any = None) -> Any:
            started = time.perf_counter()
            try:
                return await original(session, method, params)
            finally:
                self.times[f"  DevTools {method}"].append(time.perf_counter() - started)

        CDPSession.send = send  # type: ignore[method-assign]
        self._undo.append(lambda: setattr(CDPSession, "send", original))

    def undo(self) -> None:
        for undo in reversed(self._undo):
            undo()

    def table(self, captures: int) -> None:
        print(f"{'step':<44}{'calls':>7}{'mean ms':>9}{'ms a capture':>14}")
        for label, times in self.times.items():
            if times:
                print(
                    f"{label:<44}{len(times):>7}{statistics.mean(times) * 1000:>9.1f}"
                    f"{sum(times) * 1000 / captures:>14.1f}"
                )


async def where_time_goes(executable: str, origin: str, todo: list[str], warmup: list[str]) -> None:
    steps = Steps()
    slot, viewport = slot_module.Slot, viewport_module.Viewport
    for owner, name, label in [
        (slot, "capture", "capture (a slot's whole capture)"),
        (Page, "goto", "  navigation to its commit"),
        (viewport, "grow", "  the tall viewport (grow)"),
        (page_capture_module.PageCapture, "_serialize", "  serialisation"),
        (slot, "reset", "wipe (after the capture, in the background)"),
    ]:
        steps.watch(owner, name, label)
    steps.watch_commands()
    try:
        async with snapshotd_pool(executable, 2, origin) as capture:
            await run_slots(2, warmup, capture)
            for times in steps.times.values():  # the warm-up's left out
                times.clear()
            rate = await run_slots(2, todo, capture)
    finally:
        steps.undo()
    print(f"\nwhere the time goes, pool at concurrency 2 ({rate:.2f} captures/s):")
    steps.table(len(todo))


def cpu_by_process() -> dict[str, float]:
    """CPU seconds so far of this process (the pool or the floor's loop, and the app's origin,
    which runs in a thread of it), its Playwright drivers and its Chromium processes (those
    alive now, from /proc)."""
    own = os.times()
    python = own.user + own.system
    chromium = cpu_seconds(tuple(p.pid for p in browsers()))
    driver = cpu_seconds((os.getpid(),)) - python - chromium
    return {"python": python, "driver": driver, "chromium": chromium}


async def cpu_a_capture(
    executable: str, origin: str, todo: list[str], warmup: list[str], rounds: int
) -> None:
    """The CPU a capture costs each process at concurrency 2: the floor, the floor leaving
    each page for about:blank, the pool; each in its own browser, one after another."""
    print("\nCPU a capture at concurrency 2, ms (this process with the app's origin, "
          "Playwright's driver, Chromium):")
    sides: list[tuple[str, Callable[[], Any]]] = [
        ("floor at 12000 px", lambda: floor_loop(executable, 2, TALL)),
        ("floor leaving each page for about:blank", lambda: floor_loop(executable, 2, TALL,
                                                                        blank=True)),
        ("snapshotd's pool", lambda: snapshotd_pool(executable, 2, origin)),
    ]
    for round_ in range(1, rounds + 1):
        for name, side in sides:
            async with side() as capture:
                await run_slots(2, warmup, capture)
                before = cpu_by_process()
                rate = await run_slots(2, todo, capture)
                after = cpu_by_process()
            ms = {k: (after[k] - before[k]) * 1000 / len(todo) for k in before}
            print(
                f"round {round_}: {name:<42} python {ms['python']:5.0f}  driver "
                f"{ms['driver']:5.0f}  chromium {ms['chromium']:5.0f}  all "
                f"{sum(ms.values()):5.0f}  ({rate:.2f} captures/s)",
                flush=True,
            )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=12, help="pairs of runs per comparison")
    parser.add_argument("--batch", type=int, default=10, help="pages per run")
    parser.add_argument("--concurrency", default="1,2", help="comma-separated levels")
    parser.add_argument("--cpu-rounds", type=int, default=2, help="rounds of the CPU split")
    args = parser.parse_args()
    executable = find_chromium(BrowserSettings())
    pages = args.batches * args.batch + WARMUP
    origin = serve(pages)
    every = urls(origin, pages, pages)
    warmup, todo = every[:WARMUP], every[WARMUP:]
    batches = [todo[i : i + args.batch] for i in range(0, len(todo), args.batch)]
    print(
        f"chromium {executable}; {args.batches} pairs of runs of {args.batch} pages each; "
        f"load {os.getloadavg()}",
        flush=True,
    )
    features = await snapshotd_features()
    for concurrency in [int(c) for c in args.concurrency.split(",") if c]:
        comparisons: list[tuple[str, Any, Any]] = [
            (
                "snapshotd / floor, both at 12000 px (target >= 0.95)",
                snapshotd_pool(executable, concurrency, origin),
                floor_loop(executable, concurrency, TALL),
            ),
            (
                "snapshotd / floor launched with snapshotd's features, both at 12000 px",
                snapshotd_pool(executable, concurrency, origin),
                floor_loop(executable, concurrency, TALL, args=features),
            ),
            (
                "snapshotd / floor leaving each page for about:blank, both at 12000 px",
                snapshotd_pool(executable, concurrency, origin),
                floor_loop(executable, concurrency, TALL, blank=True),
            ),
            (
                "snapshotd / floor, both at 732 px",
                snapshotd_pool(executable, concurrency, origin, PHONE.height),
                floor_loop(executable, concurrency, PHONE.height),
            ),
            (
                "floor at 12000 px / floor at 732 px",
                floor_loop(executable, concurrency, TALL),
                floor_loop(executable, concurrency, PHONE.height),
            ),
            (
                "floor at scale 2.625 / floor at scale 1, 12000 px",
                floor_loop(executable, concurrency, TALL),
                floor_loop(executable, concurrency, TALL, 1.0),
            ),
        ]
        if concurrency == 2:
            comparisons.append(
                (
                    "misses through the proxy / floor at 12000 px (target >= 0.95)",
                    proxy_misses(origin),
                    floor_loop(executable, concurrency, TALL),
                )
            )
        for name, ours_cm, base_cm in comparisons:
            async with ours_cm as ours, base_cm as base:
                ratios = await paired(concurrency, ours, base, batches, warmup)
            print(
                f"concurrency {concurrency}: {name}: {summary(ratios)}; "
                f"load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    await where_time_goes(executable, origin, todo, warmup)
    await cpu_a_capture(executable, origin, todo, warmup, args.cpu_rounds)
    print(f"load average at the end {os.getloadavg()}")


if __name__ == "__main__":
    asyncio.run(main())
