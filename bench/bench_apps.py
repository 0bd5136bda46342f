"""Real apps through the render endpoint: snapshotd against prerender, side by side in one run.

    python bench/bench_apps.py                  # 3 rounds, quiet and with one core kept busy
    python bench/bench_apps.py --rounds 1 --no-load

The apps, from their public repositories (``bench/real_apps/fetch.sh``, run by ``make bench``)
with their libraries from npm (``bench/real_apps/package.json``), served by nginx:

- docsify's own documentation site (its v4.13.1 release: 19 pages, with its sidebar, navbar,
  cover page, search and Vue plugins), its ``index.html`` loading docsify, Prism and Vue from
  ``node_modules`` instead of a CDN, with history routes (``routerMode: 'history'``), the
  form a site that wants its pages crawled uses; the ad plugin left out, and what it fetches
  from elsewhere (web fonts, emoji images, embedded gists, translations) pointed at its own
  origin, where nothing answers: the bench reaches loopback alone;
- AngularJS PhoneCat (the tutorial's last step: ngRoute, ngResource, ngAnimate; 21 hashbang
  views, ``/#!/phones`` and each phone's).

Each page is asked once (every request a miss), two at a time, through the render endpoint
as a Prerender middleware asks it, with Googlebot Smartphone's user agent: from ``snapshotd
serve --no-crawler`` with a site of defaults for each app (a new database each round), and
from prerender 5.21.6 (bench/prerender) on the same Chromium. Pages per second and the truth:
the word-level similarity of each answer's visible text (shown with JavaScript off) to a live
render's once done as Googlebot Smartphone renders it (its screen, laid out at the normal
height, then in its 12,000 px viewport; bench/bench_readiness.py's ``live_text``), 1.00 when
they are the same; each answer is shown on the same screen as a crawler that runs no script
shows it, served at its URL with its style sheets (what they hide is not visible text).
With ``--load`` (the default) each round runs again while another process keeps one core
busy. Ratios are snapshotd's rate over prerender's in the same round (target >= 2.00), and
over the floor's: a plain Playwright loop rendering each page as Googlebot Smartphone in its
12,000 px viewport from the start, taken at Playwright's ``networkidle`` (:func:`floor`).
Beside them, the machine's CPU seconds a page (every process, from ``/proc/stat``, in the
quiet runs): a renderer that waits leaves cores idle, one that works for its truth does not,
and pages per second can exceed neither the cores over its CPU a page nor its waits. Then
the same CPU split by process (``/proc/PID/stat``): Chromium's browser, renderer, GPU and
network processes, snapshotd's server, Playwright's driver, prerender, nginx and the rest,
which shows whose work a renderer's excess over the floor is.
After snapshotd's quiet pass, the same server is asked for each page again as Googlebot
desktop: a phone crawler's miss renders the phone's page alone, and a page that may show a
desktop crawler something else renders its desktop profile when one first asks, so this pass
shows what the desktop renders a site with both kinds of crawler pays for cost.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import bench_phone  # noqa: E402
import httpx  # noqa: E402
from bench_phone import PHONE, SMARTPHONE, TALL, serve_no_crawler  # noqa: E402
from bench_proxy import free_port, nginx_binary, proc_stats, wait_answering  # noqa: E402
from bench_readiness import LOOPBACK_ONLY, PRERENDER, live_text, prerender, truth  # noqa: E402
from bench_render import floor_loop  # noqa: E402
from playwright.async_api import Browser, async_playwright  # noqa: E402
from playwright.async_api import Error as PlaywrightError  # noqa: E402

from snapshotd.config.settings import BrowserSettings  # noqa: E402
from snapshotd.render import find_chromium  # noqa: E402
from snapshotd.render.chromium import LAUNCH_ARGS  # noqa: E402
from tests.corpus import VISIBLE_TEXT, normalise  # noqa: E402

APPS = ROOT / "bench" / "real_apps"
CHECKOUTS = APPS / "checkouts"
NODE_MODULES = APPS / "node_modules"
TOKEN = "bench"
# Googlebot desktop's user agent: after snapshotd's phone pass, each page is asked as it.
DESKTOP_BOT = (
    "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; Googlebot/2.1; "
    "+http://www.google.com/bot.html) Chrome/131.0.6778.85 Safari/537.36"
)
RENDERERS = ("snapshotd", "prerender", "floor")
# One page asked of a renderer: (its HTML or None, the error or None).
Capture = Callable[[str], Awaitable[tuple[str | None, str | None]]]

NGINX = """
{user}
worker_processes 1;
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/nginx-error.log warn;
events {{ worker_connections 1024; }}
http {{
    include {mime};
    types {{ text/markdown md; }}
    access_log off;
    client_body_temp_path {tmp}/nginx-body;
    proxy_temp_path {tmp}/nginx-proxy;
    fastcgi_temp_path {tmp}/nginx-fastcgi;
    uwsgi_temp_path {tmp}/nginx-uwsgi;
    scgi_temp_path {tmp}/nginx-scgi;
    server {{
        listen 127.0.0.1:{docs};
        root {site};
        location /node_modules/ {{ alias {node_modules}/; }}
        location / {{ try_files $uri /index.html; }}
    }}
    server {{
        listen 127.0.0.1:{phonecat};
        root {phonecat_app};
        location /lib/ {{ alias {node_modules}/; }}
    }}
}}
"""


# What the site fetches from elsewhere, pointed at its own origin (where nothing answers):
# the bench reaches loopback alone. Each must be found, or the checkout is not the one measured.
ELSEWHERE = {
    "index.html": [
        ("//cdn.jsdelivr.net/npm/docsify@4/lib/themes/", "/themes/"),
        ("//cdn.jsdelivr.net/npm/docsify@4/lib/", "/node_modules/docsify/lib/"),
        ("//cdn.jsdelivr.net/npm/prismjs@1/components/", "/node_modules/prismjs/components/"),
        ("//cdn.jsdelivr.net/npm/vue@2/dist/", "/node_modules/vue/dist/"),
        ('<script src="//cdn.jsdelivr.net/npm/docsify-plugin-carbon@1"></script>', ""),
        ("DocsifyCarbon.create('CEBI6KQE', 'docsifyjsorg'),", ""),
        ("https://raw.githubusercontent.com/", "/elsewhere/"),
        ("https://cdn.jsdelivr.net/gh/", "/elsewhere/"),
        ("window.$docsify = {", "window.$docsify = {\n        routerMode: 'history',"),
    ],
    "configuration.md": [("https://github.githubassets.com/", "/elsewhere/")],
    "embed-files.md": [
        ("https://cinwell.com", "/elsewhere/cinwell"),
        ("https://gist.githubusercontent.com/", "/elsewhere/"),
    ],
}


def docsify_site(tmp: Path) -> tuple[Path, list[str]]:
    """docsify's documentation as the bench serves it (the module's rules), and its pages."""
    docs = CHECKOUTS / "docsify" / "docs"
    site = tmp / "docsify"
    shutil.copytree(docs, site)
    for name, changes in ELSEWHERE.items():
        text = (site / name).read_text()
        for there, here in changes:
            assert there in text, (name, there)
            text = text.replace(there, here)
        (site / name).write_text(text)
    # The themes without their web fonts (an @import of Google Fonts).
    (site / "themes").mkdir()
    for theme in (NODE_MODULES / "docsify" / "lib" / "themes").glob("*.css"):
        text = re.sub(r'^@import url\("https?:[^)]*"\);', "", theme.read_text())
        (site / "themes" / theme.name).write_text(text)
    pages = sorted(p.stem for p in docs.glob("*.md") if not p.name.startswith(("_", "README")))
    return site, ["/"] + [f"/{p}" for p in pages]


def phone(reader: Browser, height: int = PHONE.height) -> dict[str, Any]:
    """Googlebot Smartphone's screen, ``height`` px tall."""
    return bench_phone.phone(height)(reader.version)


async def shown_text(reader: Browser, url: str, html: str) -> str:
    """The visible text of ``html`` served as ``url`` on Googlebot Smartphone's screen in its
    tall viewport, JavaScript off, its style sheets and images loaded from the origin, as a
    crawler that runs no script shows it."""
    context = await reader.new_context(java_script_enabled=False, **phone(reader, TALL))
    page_url = url.partition("#")[0]
    try:
        await context.route(
            lambda u: u == page_url,
            lambda route: route.fulfill(body=html, content_type="text/html; charset=utf-8"),
        )
        page = await context.new_page()
        await page.goto(url, wait_until="load")
        return normalise(await page.evaluate(VISIBLE_TEXT))
    finally:
        await context.close()


def phonecat_views() -> list[str]:
    phones = json.loads((CHECKOUTS / "phonecat" / "app" / "phones" / "phones.json").read_text())
    return ["/#!/phones"] + [f"/#!/phones/{p['id']}" for p in phones]


@contextlib.contextmanager
def nginx(tmp: Path) -> Iterator[tuple[str, str, list[str]]]:
    """Both apps served by nginx: (docsify's origin, PhoneCat's, docsify's pages)."""
    site, pages = docsify_site(tmp)
    docs, phonecat = free_port(), free_port()
    conf = tmp / "nginx.conf"
    conf.write_text(
        NGINX.format(
            user="user root;" if os.geteuid() == 0 else "", tmp=tmp, docs=docs, site=site,
            phonecat=phonecat, phonecat_app=CHECKOUTS / "phonecat" / "app",
            node_modules=NODE_MODULES, mime="/etc/nginx/mime.types",
        )
    )
    proc = subprocess.Popen([nginx_binary(), "-p", str(tmp), "-c", str(conf)])
    try:
        origins = f"http://127.0.0.1:{docs}", f"http://127.0.0.1:{phonecat}"
        for origin in origins:
            wait_answering(origin + "/", proc, "nginx")
        yield origins[0], origins[1], pages
    finally:
        proc.terminate()
        proc.wait(10)


@contextlib.asynccontextmanager
async def snapshotd(tmp: Path, origins: dict[str, str]) -> AsyncIterator[Capture]:
    """``snapshotd serve --no-crawler``, a site of defaults for each origin, a new database."""
    db = tmp / f"snapshotd-{time.monotonic_ns()}.db"
    config = tmp / "snapshotd.toml"
    sites = "".join(f'[[site]]\nname = "{n}"\norigin = "{o}"\n' for n, o in origins.items())
    config.write_text(f'[server]\ndb = "{db}"\nrender_tokens = ["{TOKEN}"]\n{sites}')
    headers = {"X-Prerender-Token": TOKEN, "User-Agent": SMARTPHONE}
    async with serve_no_crawler(config) as base, httpx.AsyncClient(
        timeout=120, trust_env=False, headers=headers
    ) as client:

        async def capture(url: str, agent: str = SMARTPHONE) -> tuple[str | None, str | None]:
            r = await client.get(
                f"{base}/_snapshotd/render?url={quote(url, safe='')}",
                headers={"User-Agent": agent},
            )
            cache = r.headers.get("x-snapshotd-cache", "")
            if r.status_code != 200 or cache not in ("MISS", "HIT", "STALE"):
                return None, f"http {r.status_code} {cache}"
            return r.text, None

        yield capture


@contextlib.asynccontextmanager
async def floor(executable: str) -> AsyncIterator[Capture]:
    """The plain Playwright loop (bench_render's): one browser, one reused page in each of
    two contexts made as Googlebot Smartphone's screen in its 12,000 px viewport from the
    start, each page's HTML taken at Playwright's ``networkidle`` (no request for 500 ms),
    then the page left for about:blank (a hashbang view is a new document each time).
    Nothing blocked, nothing wiped, no device probe, no readiness rules: what the least a
    phone render of the page costs on this machine."""
    async with floor_loop(
        executable, 2, bench_phone.phone(TALL), blank=True, idle=True, shows="",
        args=(LOOPBACK_ONLY,),
    ) as render:
        slots: asyncio.Queue[int] = asyncio.Queue()
        for slot in range(2):
            slots.put_nowait(slot)

        async def capture(url: str) -> tuple[str | None, str | None]:
            slot = await slots.get()
            try:
                return await render(slot, url), None
            except PlaywrightError as exc:
                return None, str(exc).splitlines()[0]
            finally:
                slots.put_nowait(slot)

        yield capture


def machine_cpu() -> float:
    """CPU seconds every core of the machine has spent at work since it booted."""
    with open("/proc/stat") as stat:
        ticks = stat.readline().split()[1:]
    # user nice system idle iowait irq softirq steal: all but idle and iowait.
    busy = sum(int(t) for i, t in enumerate(ticks[:8]) if i not in (3, 4))
    return busy / os.sysconf("SC_CLK_TCK")


def _kind(comm: str, argv: list[str]) -> str:
    """Which part of the work a process is: Chromium's by its --type, snapshotd's server,
    Playwright's driver, prerender, nginx, or the rest of the machine."""
    if comm.startswith(("chrom", "headless")):
        kind = next((a[7:] for a in argv if a.startswith("--type=")), "browser")
        if kind == "utility":
            sub = next((a for a in argv if a.startswith("--utility-sub-type=")), "")
            kind = "network" if "NetworkService" in sub else "utility"
        return f"chromium {'gpu' if kind == 'gpu-process' else kind}"
    line = " ".join(argv)
    if "-m snapshotd" in line:
        return "snapshotd"
    if comm.startswith("node"):
        return "playwright driver" if "playwright" in line else "prerender"
    return "nginx" if comm.startswith("nginx") else "rest"


def process_cpu() -> collections.Counter[str]:
    """CPU seconds each kind of process (:func:`_kind`) has spent so far, the processes that
    ended counted with their parent once it has reaped them: Chromium's renderers with its
    zygote (prerender's, one a tab), the rest as their parent's "ended children"."""
    spent: collections.Counter[str] = collections.Counter()
    tick = os.sysconf("SC_CLK_TCK")
    for pid, name, fields in proc_stats():
        try:
            with open(f"/proc/{pid}/cmdline") as f:
                argv = f.read().replace("\0", " ").split()  # Chromium rewrites its own
        except OSError:
            continue
        kind = _kind(name, argv)
        spent[kind] += (int(fields[11]) + int(fields[12])) / tick
        ended = "chromium renderer" if kind == "chromium zygote" else f"{kind} (ended children)"
        spent[ended] += (int(fields[13]) + int(fields[14])) / tick
    return spent


def warm(url: str) -> str:
    """Another page of the same app, asked first: the browser up, the app's scripts compiled."""
    return url.replace("/#!", "/?warm#!", 1) if "#!" in url else url + "?warm"


async def through(
    capture: Capture, urls: list[str], split: collections.Counter[str] | None = None
) -> tuple[float, float, dict[str, tuple[str | None, str | None]]]:
    """Pages per second asking for each of ``urls`` once, two at a time, the machine's CPU
    seconds a page meanwhile, and each answer; ``split`` gets each kind of process's CPU
    seconds a page (:func:`process_cpu`)."""
    todo, answers = list(reversed(urls)), {}

    async def worker() -> None:
        while todo:
            url = todo.pop()
            answers[url] = await capture(url)

    before = process_cpu() if split is not None else None
    started, cpu = time.perf_counter(), machine_cpu()
    await asyncio.gather(worker(), worker())
    rate, cpu = len(urls) / (time.perf_counter() - started), machine_cpu() - cpu
    if split is not None and before is not None:
        after = process_cpu()
        # Key by key, a fall kept: a process that ended moves its CPU to its parent's key.
        split.update({k: (after[k] - before[k]) / len(urls) for k in after.keys() | before})
    return rate, cpu / len(urls), answers


async def desktop_pass(capture: Capture, urls: list[str]) -> tuple[float, float]:
    """Pages per second and the machine's CPU a page asking snapshotd for each of ``urls``
    as Googlebot desktop, after the phone's pass: the desktop renders a site pays for when
    desktop crawlers come too (every answer must be a page)."""
    rate, cpu, answers = await through(
        lambda url: capture(url, DESKTOP_BOT), urls  # type: ignore[call-arg]
    )
    failed = [url for url, (html, _error) in answers.items() if html is None]
    if failed:
        print(f"  desktop pass: no page for {len(failed)} of {len(urls)}: {failed[:3]}")
    return rate, cpu


@contextlib.contextmanager
def busy_core(on: bool) -> Iterator[None]:
    """Another job keeping one core busy, while ``on``."""
    if not on:
        yield
        return
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        proc.kill()
        proc.wait()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each app")
    parser.add_argument("--timeout", type=float, default=30.0, help="prerender's page timeout")
    parser.add_argument("--no-load", action="store_true", help="leave out the busy-core runs")
    args = parser.parse_args()
    if not (CHECKOUTS / "phonecat").is_dir() or not (NODE_MODULES / "docsify").is_dir():
        sys.exit("the apps are missing: make bench-apps (bench/real_apps/fetch.sh, npm ci)")
    if not (PRERENDER / "node_modules" / "prerender").is_dir():
        sys.exit(f"prerender is missing: npm ci --prefix {PRERENDER}")
    executable = find_chromium(BrowserSettings())
    loads = [False] if args.no_load else [False, True]
    with tempfile.TemporaryDirectory() as name, nginx(Path(name)) as (docs, phonecat, pages):
        tmp = Path(name)
        apps = {
            "docsify": [docs + p for p in pages],
            "phonecat": [phonecat + v for v in phonecat_views()],
        }
        print(
            f"chromium {executable}; docsify {len(apps['docsify'])} pages, PhoneCat "
            f"{len(apps['phonecat'])} views; load {os.getloadavg()}", flush=True
        )
        async with async_playwright() as p:
            reader = await p.chromium.launch(
                executable_path=executable, args=[LOOPBACK_ONLY, *LAUNCH_ARGS]
            )
            lives = {
                u: await live_text(reader, u, phone(reader), TALL)
                for urls in apps.values()
                for u in urls
            }

            def renderer(name: str) -> contextlib.AbstractAsyncContextManager[Capture]:
                if name == "snapshotd":
                    return snapshotd(tmp, {"docs": docs, "phonecat": phonecat})
                if name == "floor":
                    return floor(executable)
                return prerender(executable, args.timeout)  # type: ignore[no-any-return]

            rates: dict[tuple[str, str, bool], list[float]] = collections.defaultdict(list)
            cpus: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
            scores: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
            failed: collections.Counter[tuple[str, str]] = collections.Counter()
            desktop: dict[str, list[tuple[float, float]]] = collections.defaultdict(list)
            # Each kind of process's CPU seconds a page, summed over the quiet rounds.
            splits: dict[tuple[str, str], collections.Counter[str]] = collections.defaultdict(
                collections.Counter
            )
            for round_ in range(args.rounds):
                for loaded in loads:
                    for app, urls in apps.items():
                        for name in RENDERERS[:: -1 if round_ % 2 else 1]:
                            async with renderer(name) as capture:
                                await capture(warm(urls[0]))
                                split = None if loaded else splits[(app, name)]
                                with busy_core(loaded):
                                    rate, cpu, answers = await through(capture, urls, split)
                                if name == "snapshotd" and not loaded:
                                    # The same pages, now as Googlebot desktop asks them.
                                    desktop[app].append(await desktop_pass(capture, urls))
                            rates[(app, name, loaded)].append(rate)
                            if not loaded:  # the busy core's own work is not the renderer's
                                cpus[(app, name)].append(cpu)
                            for url, (html, error) in answers.items():
                                if error:
                                    failed[(app, name)] += 1
                                    continue
                                shown = await shown_text(reader, url, html or "")
                                scores[(app, name)].append(truth(shown, lives[url]))
                    line = ", ".join(
                        f"{app} {name} {rates[(app, name, loaded)][-1]:.2f}/s"
                        for app in apps
                        for name in RENDERERS
                    )
                    line += ", one core busy" if loaded else ""
                    print(f"round {round_ + 1}: {line}; load {os.getloadavg()[0]:.1f}", flush=True)
            await reader.close()
    print()
    for app in apps:
        for loaded in loads:
            ours = rates[(app, "snapshotd", loaded)]
            busy = ", one core busy" if loaded else ""
            line = f"{app}{busy}: snapshotd {statistics.median(ours):.2f} pages/s"
            for other, target in (("prerender", " (target >= 2.00)"), ("floor", "")):
                theirs = rates[(app, other, loaded)]
                ratios = [o / t for o, t in zip(ours, theirs, strict=True)]
                line += (
                    f"; {other} {statistics.median(theirs):.2f}, ratio "
                    f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}){target}"
                )
            print(line)
        print(
            "  the machine's CPU a page, quiet: "
            + ", ".join(
                f"{name} {statistics.median(cpus[(app, name)]) * 1000:.0f} ms" for name in RENDERERS
            )
            + f" (of {os.cpu_count()} cores: at most {os.cpu_count()} CPU seconds a second)"
        )
        quiet_rounds = len(cpus[(app, "snapshotd")])
        for name in RENDERERS:
            split = splits[(app, name)]
            print(
                f"  {name}'s CPU a page by process, quiet (mean): "
                + ", ".join(f"{kind} {seconds / quiet_rounds * 1000:.0f} ms"
                            for kind, seconds in split.most_common()
                            if abs(seconds / quiet_rounds * 1000) >= 0.5)
            )
        after = desktop[app]
        print(
            "  snapshotd, the same pages then asked by Googlebot desktop: "
            + ", ".join(f"{rate:.2f} pages/s, CPU {cpu * 1000:.0f} ms a page" for rate, cpu
                        in after)
        )
        for name in RENDERERS:
            got = scores[(app, name)]
            whole = sum(s == 1.0 for s in got)
            print(
                f"  {name} truth: 1.00 on {whole}/{len(got)} answers, mean "
                f"{statistics.mean(got) if got else 0:.3f}, lowest {min(got, default=0):.2f}; "
                f"{failed[(app, name)]} failed"
            )
    print(f"load average at the end {os.getloadavg()}")


if __name__ == "__main__":
    asyncio.run(main())
