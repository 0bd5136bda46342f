"""Device profiles: what each service serves a crawler, scored against what that crawler sees.

    python bench/bench_devices.py              # every page, then 3 rounds at concurrency 2
    python bench/bench_devices.py --rounds 1

Pages: tests/corpus/devices (served on loopback by its server.py), real libraries' apps whose
page depends on the crawler's device and viewport (lazy blocks by lozad and lazysizes, an
infinite list by react-intersection-observer, phone and desktop layouts by Vue,
react-responsive, enquire.js and Swiper, content by user agent by ua-parser-js, ismobilejs and
mobile-detect, by ``navigator.userAgentData`` and by ``"ontouchstart" in window``) and controls.

The reference is a render made as the crawler renders, written here with Playwright alone:
the crawler's screen (Googlebot Smartphone: 412 px, mobile, touch, scale 2.625; Googlebot
desktop: 1024 px), its user agent, laid out at the normal height, then in its tall viewport
(12,000 / 9,000 px) without scrolling, then network idle and the visible text unchanged for
``STILL`` seconds. Its words are the truth for that crawler.

Each service's served HTML is shown with JavaScript off at the same screen and height, and
its visible words (``innerText``, as multisets) are scored against the reference's: recall
(the reference's words it has) and precision (its words the reference has). Services:

- snapshotd: what a site with the default ``devices = "per_bot"`` serves the crawler: the
  renders the capture service makes (capture/profiles: a page that reads something of its
  device in each profile, another once), the crawler's profile's capture where it was kept;
- prerender 5.21.6 (bench/prerender) as prerender-node asks it (``/render?url=``: 1440×718,
  its own user agent), and given the crawler's width, tall height and user agent
  (``&width=&height=&userAgent=``, the most it takes: it has no mobile emulation).

Then captures per second at concurrency 2 over the viewport-dependent apps: a snapshotd
capture of a per-bot site renders both profiles of these (each reads its viewport); one of a
one-profile site, one; prerender's, one (1440×718, so it loads less of these pages);
prerender given the crawler's size, both profiles, loads what snapshotd loads. And a
per-bot site's captures of the controls, pages that read nothing of their device.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from playwright.async_api import Browser, async_playwright  # noqa: E402
from playwright.async_api import TimeoutError as PlaywrightTimeout  # noqa: E402

from bench.bench_readiness import PRERENDER, prerender, serve_app, throughput  # noqa: E402
from snapshotd.capture.profiles import ProfileRenders  # noqa: E402
from snapshotd.config.settings import BrowserSettings, SiteSettings  # noqa: E402
from snapshotd.crawlers.devices import PROFILE_NAMES, PROFILES, Profile  # noqa: E402
from snapshotd.render import BrowserPool, find_chromium  # noqa: E402
from snapshotd.render.chromium import LAUNCH_ARGS  # noqa: E402
from snapshotd.render.renderer import CaptureResult  # noqa: E402
from tests.corpus.devices import PAGES  # noqa: E402
from tests.corpus.devices.server import NODE_MODULES, create_app  # noqa: E402

STILL = 2.0  # seconds the reference's visible text must stay the same
CRAWLERS = {"mobile": "Googlebot Smartphone", "desktop": "Googlebot desktop"}
TALL = {"mobile": 12000, "desktop": 9000}
# The served HTML shown with JavaScript off: its visible text.
VISIBLE = "() => document.body ? document.body.innerText : ''"

# One capture for a crawler's profile: (served HTML or None, error or None).
Capture = Callable[[str, str], Awaitable[tuple[str | None, str | None]]]


def serve_corpus() -> str:
    return serve_app(create_app())


def context_options(profile: Profile, browser: Browser, height: int) -> dict[str, Any]:
    """The profile's context (:meth:`Profile.context_options`), its viewport ``height`` tall."""
    options = profile.context_options(browser.version)
    return {**options, "viewport": {"width": profile.width, "height": height}}


async def reference(browser: Browser, url: str, name: str) -> str:
    """The visible text the crawler of profile ``name`` sees (the module's reference)."""
    profile = PROFILES[name]
    context = await browser.new_context(**context_options(profile, browser, profile.height))
    try:
        page = await context.new_page()
        await page.goto(url, wait_until="domcontentloaded")
        await page.evaluate("() => new Promise(r => requestAnimationFrame(() => r()))")
        await page.set_viewport_size({"width": profile.width, "height": TALL[name]})
        with contextlib.suppress(PlaywrightTimeout):
            await page.wait_for_load_state("networkidle", timeout=15_000)
        text, still, deadline = "", 0.0, time.monotonic() + 20
        while still < STILL and time.monotonic() < deadline:
            now = await page.evaluate(VISIBLE)
            still = still + 0.25 if now == text else 0.0
            text = now
            await asyncio.sleep(0.25)
        return text
    finally:
        await context.close()


async def served_text(browser: Browser, html: str, name: str) -> str:
    """The visible text of served HTML shown with JavaScript off, offline, on the crawler's
    screen in its tall viewport."""
    profile = PROFILES[name]
    options = context_options(profile, browser, TALL[name])
    context = await browser.new_context(java_script_enabled=False, offline=True, **options)
    try:
        page = await context.new_page()
        await page.set_content(html, wait_until="domcontentloaded")
        return str(await page.evaluate(VISIBLE))
    finally:
        await context.close()


def words(text: str) -> Counter[str]:
    return Counter(w.strip(".,:;!?\"'()").lower() for w in text.split() if w.strip(".,:;!?\"'()"))


def score(served: str, truth: str) -> tuple[float, float]:
    """(recall, precision) of the served words against the reference's."""
    got, want = words(served), words(truth)
    common = sum((got & want).values())
    recall = common / sum(want.values()) if want else 1.0
    precision = common / sum(got.values()) if got else (1.0 if not want else 0.0)
    return recall, precision


@contextlib.asynccontextmanager
async def snapshotd(executable: str, origin: str, timeout: float):  # type: ignore[no-untyped-def]
    """What a per-bot site serves each profile's crawler: the capture service's renders
    (capture/profiles), the profile's own capture when it was kept, else the first's."""
    settings = BrowserSettings(concurrency=2, executable=executable, render_timeout=timeout)
    pool = BrowserPool(settings)
    await pool.start()
    site = SiteSettings(origin=origin)
    renders = ProfileRenders(pool, store=None)  # type: ignore[arg-type]  # no recaptures here
    captured: dict[str, tuple[CaptureResult, dict[str, str]]] = {}

    async def render(url: str) -> tuple[CaptureResult, dict[str, str]]:
        rendered = await renders.render(url, site, PROFILE_NAMES)
        return rendered.first, {v.profile: v.html for v in rendered.variants}

    async def capture(url: str, name: str) -> tuple[str | None, str | None]:
        if url not in captured:
            captured[url] = await render(url)
        first, variants = captured.pop(url) if name == PROFILE_NAMES[-1] else captured[url]
        if not first.ok:
            return None, first.error
        return variants.get(name, first.html), None

    async def per_bot(url: str) -> None:
        await render(url)

    async def one(url: str) -> None:
        await pool.capture(url, site, "mobile")

    try:
        yield capture, per_bot, one
    finally:
        await pool.close()


@contextlib.asynccontextmanager
async def prerender_as(executable: str, timeout: float, browser: Browser, crawler: bool):  # type: ignore[no-untyped-def]
    async with prerender(executable, timeout) as render:

        async def capture(url: str, name: str) -> tuple[str | None, str | None]:
            if not crawler:
                return await render(url)
            profile = PROFILES[name]
            extra = (
                f"&width={profile.width}&height={TALL[name]}"
                f"&userAgent={quote(profile.agent(browser.version), safe='')}"
            )
            return await render(url, extra)

        yield capture


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="passes over the apps at c=2")
    parser.add_argument("--timeout", type=float, default=20.0, help="render time bound, s")
    args = parser.parse_args()
    if not NODE_MODULES.is_dir():
        sys.exit(f"the corpus apps are missing: npm ci --prefix {NODE_MODULES.parent}")
    executable = find_chromium(BrowserSettings())
    origin = serve_corpus()
    with_prerender = (PRERENDER / "node_modules" / "prerender").is_dir() and shutil.which("node")
    print(f"chromium {executable}; corpus {origin}; {len(PAGES)} pages, timeout {args.timeout} s")
    if not with_prerender:
        print(f"prerender is missing (npm ci --prefix {PRERENDER}): left out")

    async with async_playwright() as p:
        reader = await p.chromium.launch(executable_path=executable, args=list(LAUNCH_ARGS))
        truths = {
            (path, name): await reference(reader, origin + path, name)
            for _, path, _ in PAGES
            for name in PROFILES
        }
        services: list[tuple[str, Callable[[], Any]]] = [
            ("snapshotd", lambda: snapshotd(executable, origin, args.timeout)),
        ]
        if with_prerender:
            services.append(
                ("prerender", lambda: prerender_as(executable, args.timeout, reader, False))
            )
            services.append(
                ("prerender+crawler's size/UA",
                 lambda: prerender_as(executable, args.timeout, reader, True))
            )
        scores: dict[tuple[str, str, str], tuple[float, float, str | None]] = {}
        rates: dict[str, float] = {}
        apps = [origin + path for _, path, kind in PAGES if kind] * args.rounds
        controls = [origin + path for _, path, kind in PAGES if not kind] * args.rounds
        for service, make in services:
            async with make() as made:
                capture = made[0] if service == "snapshotd" else made
                await capture(origin + "/static", "mobile")  # warm: the browser is up
                for _, path, _ in PAGES:
                    for name in PROFILES:
                        html, error = await capture(origin + path, name)
                        shown = await served_text(reader, html, name) if html else ""
                        recall, precision = score(shown, truths[(path, name)])
                        scores[(service, path, name)] = (recall, precision, error)
                if service == "snapshotd":
                    _, per_bot, one = made
                    rates["snapshotd, per-bot site"] = await throughput(per_bot, apps)
                    rates["snapshotd, one-profile site"] = await throughput(one, apps)
                    rates["snapshotd, per-bot site, controls"] = await throughput(
                        per_bot, controls
                    )
                elif service == "prerender":

                    async def plain(url: str, capture: Capture = capture) -> None:
                        await capture(url, "desktop")

                    rates["prerender"] = await throughput(plain, apps)
                else:

                    async def sized(url: str, capture: Capture = capture) -> None:
                        await asyncio.gather(*(capture(url, n) for n in PROFILES))

                    rates["prerender+crawler's size/UA, both profiles"] = await throughput(
                        sized, apps
                    )
        await reader.close()

    names = [s for s, _ in services]
    print()
    for name in PROFILES:
        print(f"As {CRAWLERS[name]} sees it ({name} profile): recall / precision of visible words")
        print(f"{'page':<52}" + "".join(f"{s[:28]:>30}" for s in names))
        for label, path, _ in PAGES:
            line = f"{label[:51]:<52}"
            for service in names:
                recall, precision, error = scores[(service, path, name)]
                cell = f"{recall:.2f} / {precision:.2f}" + (" !" if error else "")
                line += f"{cell:>30}"
            print(line)
        for service in names:
            rows = [scores[(service, path, name)] for _, path, _ in PAGES]
            low_r, low_p = min(r[0] for r in rows), min(r[1] for r in rows)
            errors = [r[2] for r in rows if r[2]]
            print(f"  {service}: lowest recall {low_r:.2f}, lowest precision {low_p:.2f}"
                  + (f"; errors {errors}" if errors else ""))
        print()
    base = rates.get("prerender")
    for label, rate in rates.items():
        over = f"{len(controls)} control" if "controls" in label else f"{len(apps)} app"
        line = f"{label}: {rate:.2f} captures/s at concurrency 2 over {over} captures"
        if base and label != "prerender":
            line += f", x{rate / base:.2f} prerender's"
        print(line)


if __name__ == "__main__":
    asyncio.run(main())
