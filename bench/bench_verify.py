"""What crawler verification costs a cache hit, and what a crawler gets when its page cannot
be had in time; each beside today's behaviour (``verify_bots = "off"``) in the same run.

1. Cost per hit, in the process: ``answer_at_once`` (the fast path of every cache hit)
   called in a loop for a Googlebot's hit on each of four sites of one snapshotd: ``off``
   (today's), ``on`` (the claim read from the DNS cache for the access line), ``strict``
   (the claim asked before the snapshot is served, from the cache) and ``ranges`` (on, the
   address in a published range list). Microseconds per call, the fastest of 15 runs of
   each, the modes taking turns.
2. Cost per hit over real sockets: wrk against the same sites served as ``serve`` serves
   (uvicorn with snapshotd's protocol, in a thread of this process), alternating rounds;
   requests per second and the server's CPU per request (this process's user and system
   time over the run, divided by the requests), each beside ``off``.
3. A verified Googlebot's burst of 100 new pages, 12 at a time, renders slow (2 slots,
   0.1 s each) and ``miss_wait`` 1 s: how many answers were a snapshot (MISS), a 503 with
   Retry-After (RETRY) or the origin's page (BYPASS: the app's shell), and how many pages are
   a HIT on the next visit once the crawler has drained the queue, for ``miss_answer``
   ``503`` and ``origin`` and for verification off.

    python bench/bench_verify.py [--duration 5] [--connections 32] [--rounds 2]

The resolver is a table (127.0.0.1 is ``crawl-127-0-0-1.googlebot.com`` and back): no name
is resolved through the system's resolver. Needs wrk (apt-get install wrk) for part 2.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from snapshotd.config.settings import BrowserSettings, Settings, SiteSettings  # noqa: E402
from snapshotd.crawlers.devices import served_profile  # noqa: E402
from snapshotd.crawlers.verification.resolver import TableResolver  # noqa: E402
from snapshotd.proxy.passthrough import Upstream  # noqa: E402
from snapshotd.server.app import create_app  # noqa: E402
from snapshotd.store.outcome import CaptureOutcome  # noqa: E402
from snapshotd.store.sqlite import SQLiteStore  # noqa: E402
from tests.servers import serve_asgi  # noqa: E402
from tests.test_flood import SlotRenderer, _origin  # noqa: E402
from tests.test_verified_bots import burst, table, verified_env  # noqa: E402

BOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
PROFILE = served_profile("per_bot", BOT)  # the snapshot a hit of BOT is served
PAGE = "<!doctype html><html><head><title>t</title></head><body>" + "x" * 30000 + "</body></html>"
MODES = ("off", "on", "strict", "ranges")
RUNS = 15


def resolver() -> TableResolver:
    return TableResolver(
        ptr={"127.0.0.1": ["crawl-127-0-0-1.googlebot.com."]},
        addresses={"crawl-127-0-0-1.googlebot.com.": ["127.0.0.1"]},
        ttl=86400,
    )


def settings(tmp: Path, db: str, origin: str, ranges: bool) -> Settings:
    verify = {"off": "off", "on": "on", "strict": "strict", "ranges": "on"}
    bot_ranges = ()
    if ranges:
        (tmp / "google.txt").write_text("127.0.0.0/8\n")
        bot_ranges = (f"google={tmp / 'google.txt'}",)
    modes = ("ranges",) if ranges else ("off", "on", "strict")
    return Settings(
        db=db,
        api_tokens=("bench",),
        bot_ranges=bot_ranges,
        browser=BrowserSettings(concurrency=1),
        sites=tuple(
            SiteSettings(name=m, origin=origin, hosts=(f"{m}.test",), seeds=(),
                         verify_bots=verify[m])
            for m in modes
        ),
    )


async def seed(db: str, sites: tuple[str, ...]) -> None:
    async with SQLiteStore(db) as store:
        for site in sites:
            await store.enqueue(site, "/page", 3)
            await store.claim("bench", 60, sites=[site])
            await store.complete(
                site, "/page", "bench", CaptureOutcome(
                    html=PAGE, status=200, headers={}, final_url="",
                    expires_at=time.time() + 86400),
            )


def apps(tmp: Path, origin: str) -> dict[str, object]:
    """Two applications: one verifying by DNS (off, on, strict), one by ranges."""
    out = {}
    for ranges in (False, True):
        db = str(tmp / f"bench-{ranges}.db")
        s = settings(tmp, db, origin, ranges)
        asyncio.run(seed(db, tuple(site.name for site in s.sites)))
        app = create_app(s, crawler=False, renderer=SlotRenderer(1), upstream=Upstream(),
                         resolver=resolver())
        for site in s.sites:
            out[site.name] = app
    return out


# ---------------------------------------------------------------------------- 1. in process


def hit(app, mode: str) -> tuple[list[tuple[bytes, bytes]], dict]:  # type: ignore[no-untyped-def]
    return [(b"host", f"{mode}.test".encode()), (b"user-agent", BOT.encode())], {
        "type": "http", "http_version": "1.1", "client": ("127.0.0.1", 50000)
    }


async def one_run(app, mode: str, calls: int) -> float:  # type: ignore[no-untyped-def]
    """Nanoseconds per ``answer_at_once`` for a bot's hit, over ``calls`` calls."""
    headers, scope = hit(app, mode)
    # Into the process's cache anew (kept 1 s): a run is a fraction of that.
    app.proxy.cache.evict((mode, "/page", PROFILE))
    await app.proxy._snapshot(mode, "/page", PROFILE)
    started = time.perf_counter_ns()
    for _ in range(calls):
        answer = app.answer_at_once("GET", "/page", "", headers, dict(scope))
    spent = (time.perf_counter_ns() - started) / calls
    assert answer is not None and answer[0] == 200, (mode, answer)
    await asyncio.sleep(0)  # the loop runs what the calls scheduled (log lines)
    return spent


async def in_process(by_mode: dict[str, object], calls: int) -> dict[str, float]:
    """The fastest of ``RUNS`` runs of each mode, the modes taking turns, so a moment of
    load on the machine falls on all of them alike."""
    async with contextlib.AsyncExitStack() as stack:
        for app in dict.fromkeys(by_mode.values()):
            await stack.enter_async_context(app.ctx.running())  # type: ignore[attr-defined]
        for mode, app in by_mode.items():
            # The first calls ask DNS once (strict: on the ASGI way, which waits for it).
            headers, scope = hit(app, mode)
            for _ in range(3):
                await app.proxy._snapshot(mode, "/page", PROFILE)  # type: ignore[attr-defined]
                app.answer_at_once("GET", "/page", "", headers, dict(scope))  # type: ignore[attr-defined]
                await asyncio.sleep(0.05)
        runs: dict[str, list[float]] = {m: [] for m in MODES}
        for _ in range(RUNS):
            for mode in MODES:
                runs[mode].append(await one_run(by_mode[mode], mode, calls))
    return {m: min(r) for m, r in runs.items()}


# ---------------------------------------------------------------------------- 2. sockets


def cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


def wrk(url: str, host: str, duration: int, connections: int) -> tuple[float, float]:
    """Requests per second, and this process's CPU microseconds per request."""
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{duration}s", "-H", f"Host: {host}",
           "-H", f"User-Agent: {BOT}", url]
    before = cpu_seconds()
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    cpu = cpu_seconds() - before
    if "Non-2xx" in out:
        raise RuntimeError(out)
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    requests = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    return rps, cpu / requests * 1e6


def over_sockets(by_mode: dict[str, object], args: argparse.Namespace) -> dict[str, tuple]:
    runs: dict[str, list[tuple[float, float]]] = {m: [] for m in MODES}
    with serve_asgi(by_mode["off"]) as dns_base, serve_asgi(by_mode["ranges"]) as ranges_base:
        base = {"off": dns_base, "on": dns_base, "strict": dns_base, "ranges": ranges_base}
        for mode in MODES:  # warm: the snapshot cached, the claim known
            for _ in range(3):
                r = httpx.get(f"{base[mode]}/page", headers={"Host": f"{mode}.test",
                              "User-Agent": BOT}, trust_env=False)
                assert r.headers["x-snapshotd-cache"] == "HIT", (mode, r.headers)
                time.sleep(0.05)
        for _ in range(args.rounds):
            for mode in MODES:
                runs[mode].append(
                    wrk(f"{base[mode]}/page", f"{mode}.test", args.duration, args.connections)
                )
    return {m: max(r) for m, r in runs.items()}


# ---------------------------------------------------------------------------- 3. a burst


def burst_outcome(tmp: Path, **site: object) -> tuple[dict[str, int], int, float]:
    """A verified burst of 100 new pages: answers by result, next-visit hits, and the
    seconds until the queue was drained."""
    with verified_env(tmp, resolver=table(), delay=0.1, miss_wait=1.0, **site) as env:
        paths = [f"/launch/{i}" for i in range(100)]
        answers = burst(env, "127.0.0.7", paths, threads=12)
        results: dict[str, int] = {}
        for r in answers:
            key = r.headers.get("x-snapshotd-cache", "?")
            results[key] = results.get(key, 0) + 1
        started = time.monotonic()
        while time.monotonic() - started < 60:
            states = env.states()
            if all(s == "processed" for s in states.values()):
                break
            time.sleep(0.1)
        drained = time.monotonic() - started
        again = burst(env, "127.0.0.7", paths, threads=12)
        hits = sum(r.headers.get("x-snapshotd-cache") == "HIT" for r in again)
    return results, hits, drained


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=int, default=5)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds per mode")
    parser.add_argument("--calls", type=int, default=5000, help="calls per in-process run")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="snapshotd-bench-verify-"))
    try:
        with serve_asgi(_origin()) as origin:
            print(f"cpu: {os.cpu_count()} cores; a {len(PAGE)} byte snapshot, a Googlebot "
                  "from 127.0.0.1\n")
            by_mode = apps(tmp, origin)
            ns = asyncio.run(in_process(by_mode, args.calls))
            print(f"1. a cache hit's answer_at_once, in the process (fastest of {RUNS} runs of "
                  f"{args.calls} calls)")
            for mode in MODES:
                print(f"   {mode:7} {ns[mode] / 1000:7.2f} us   x{ns[mode] / ns['off']:.3f} "
                      f"of off   (+{(ns[mode] - ns['off']) / 1000:.2f} us)")
            if shutil.which("wrk"):
                (tmp / "sockets").mkdir()
                by_mode = apps(tmp / "sockets", origin)  # served anew, by serve_asgi
                runs = over_sockets(by_mode, args)
                print(f"\n2. cache hits over sockets: wrk -t1 -c{args.connections} "
                      f"-d{args.duration}s, best of {args.rounds} alternating rounds")
                off = runs["off"]
                for mode in MODES:
                    rps, cpu = runs[mode]
                    print(f"   {mode:7} {rps:8.0f} req/s (x{rps / off[0]:.3f})   server CPU "
                          f"{cpu:6.1f} us per request (x{cpu / off[1]:.3f})")
            else:
                print("\n2. skipped: wrk not found (apt-get install wrk)")
        print("\n3. a verified Googlebot's burst of 100 new pages, 12 at a time, 2 render "
              "slots of 0.1 s, miss_wait 1 s")
        choices: tuple[tuple[str, dict[str, str]], ...] = (
            ("miss_answer 503", {}),
            ("miss_answer origin", {"miss_answer": "origin"}),
            ("verify_bots off", {"verify_bots": "off"}),
        )
        for label, site in choices:
            results, hits, drained = burst_outcome(tmp, **site)
            shown = "  ".join(f"{k} {v}" for k, v in sorted(results.items()))
            print(f"   {label:19} answers: {shown:38} next visit: {hits} HIT "
                  f"(queue drained in {drained:.1f} s)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
