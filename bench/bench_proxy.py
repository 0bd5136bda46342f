"""Proxy throughput and latency, each beside its baseline in the same run.

1. Cache hits: snapshotd serving a stored 40 KB snapshot to a bot, against a bare Starlette
   app returning the same bytes; same uvicorn settings, same load tool (wrk). Both plain
   (the snapshot is stored gzipped, so snapshotd decompresses) and gzip-accepting clients.
2. Pass-through: a person's request through snapshotd to an origin, against the origin
   directly: requests per second under load, and the added latency of one request at a time.

    python bench/bench_proxy.py [--duration 5] [--connections 32]

Needs wrk (``apt-get install wrk``). Servers run as separate processes on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"


def page_40k() -> str:
    rows = "".join(
        f"<li><a href='/items/{i}'>Item {i}</a> <span>a sturdy thing, number {i}, "
        f"{(i * 7919) % 10007} in stock</span></li>\n"
        for i in range(1, 100000)
    )
    html = f"<!doctype html><html><head><title>Bench</title></head><body><ul>{rows}"
    return html[: 40 * 1024 - len("</ul></body></html>")] + "</ul></body></html>"


SERVER = """
import sys, uvicorn
sys.path.insert(0, {root!r})
kind, port, arg = sys.argv[1], int(sys.argv[2]), sys.argv[3]
if kind == "bare":
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route
    body = open(arg, "rb").read()
    gz = __import__("gzip").compress(body, mtime=0)
    async def page(request: Request) -> Response:
        if "gzip" in request.headers.get("accept-encoding", ""):
            return Response(gz, media_type="text/html; charset=utf-8",
                            headers={{"content-encoding": "gzip"}})
        return Response(body, media_type="text/html; charset=utf-8")
    app = Starlette(routes=[Route("/{{p:path}}", page)])
else:
    from snapshotd.app import create_app
    from snapshotd.config import Settings, SiteSettings
    class NoRender:
        async def start(self): pass
        async def close(self): pass
        async def capture(self, url, site): raise RuntimeError("the bench renders nothing")
    db, origin = arg.split("|")
    settings = Settings(db=db, sites=(SiteSettings(name="bench", origin=origin),))
    app = create_app(settings, renderer=NoRender(), crawler=False)
uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, kind: str, arg: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SERVER.format(root=str(ROOT)), kind, str(self.port), arg]
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                httpx.get(self.url + "/_snapshotd/healthz", timeout=1, trust_env=False)
                return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError(f"{kind} server did not start")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def wrk(url: str, duration: int, connections: int, headers: dict[str, str]) -> tuple[float, str]:
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{duration}s", "--latency"]
    for k, v in headers.items():
        cmd += ["-H", f"{k}: {v}"]
    out = subprocess.run(cmd + [url], capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    p50 = re.search(r"^\s+50%\s+(\S+)", out, re.M)
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors:
        raise RuntimeError(f"{url}: {errors.group(1)} non-2xx responses")
    return rps, p50.group(1) if p50 else "?"


def sequential_latency(url: str, headers: dict[str, str], n: int = 300) -> float:
    """Median milliseconds of one request at a time over a kept-alive connection."""
    with httpx.Client(trust_env=False, headers=headers) as c:
        for _ in range(20):
            c.get(url)
        times = []
        for _ in range(n):
            t = time.perf_counter()
            c.get(url)
            times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


async def seed_store(db: str, html: str) -> None:
    from snapshotd.store.sqlite import SQLiteStore

    async with SQLiteStore(db) as store:
        await store.enqueue("bench", "/page", 3)
        await store.claim("bench", 60)
        await store.complete(
            "bench", "/page", "bench", html=html, status=200, headers={}, final_url="",
            expires_at=time.time() + 86400,
        )


def best_of(runs: int, fn, *args):  # type: ignore[no-untyped-def]
    results = [fn(*args) for _ in range(runs)]
    return max(results, key=lambda r: r[0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=int, default=5)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds per pair")
    args = parser.parse_args()
    if not shutil.which("wrk"):
        print("wrk not found: apt-get install wrk", file=sys.stderr)
        return 2

    tmp = Path(tempfile.mkdtemp(prefix="snapshotd-bench-"))
    html = page_40k()
    page = tmp / "page.html"
    page.write_text(html)
    db = str(tmp / "bench.db")
    asyncio.run(seed_store(db, html))
    print(f"snapshot: {len(html.encode())} bytes, {len(gzip.compress(html.encode()))} gzipped")
    print(f"cpu: {os.cpu_count()} cores; wrk -t1 -c{args.connections} -d{args.duration}s\n")

    bare = Server("bare", str(page))
    proxy = Server("proxy", f"{db}|{bare.url}")
    try:
        print("1. cache hit vs bare Starlette (best of rounds, alternating)")
        for label, extra in (("identity", {}), ("gzip", {"Accept-Encoding": "gzip"})):
            hb = {"User-Agent": BOT, **extra}
            base_runs, hit_runs = [], []
            for _ in range(args.rounds):
                base_runs.append(wrk(bare.url + "/page", args.duration, args.connections, hb))
                hit_runs.append(wrk(proxy.url + "/page", args.duration, args.connections, hb))
            b, h = max(base_runs), max(hit_runs)
            check = httpx.get(proxy.url + "/page", headers=hb, trust_env=False)
            assert check.headers["x-snapshotd-cache"] == "HIT", check.headers
            print(
                f"   {label:8}  bare {b[0]:8.0f} req/s (p50 {b[1]:>8})   "
                f"snapshotd HIT {h[0]:8.0f} req/s (p50 {h[1]:>8})   ratio {h[0] / b[0]:.2f}"
            )

        print("\n2. pass-through (a person) vs the origin directly")
        person = {"User-Agent": "Mozilla/5.0 (X11; Linux x86_64) Chrome/120"}
        direct_runs, via_runs = [], []
        for _ in range(args.rounds):
            direct_runs.append(wrk(bare.url + "/page", args.duration, args.connections, person))
            via_runs.append(wrk(proxy.url + "/page", args.duration, args.connections, person))
        d, v = max(direct_runs), max(via_runs)
        print(
            f"   throughput: direct {d[0]:8.0f} req/s   via snapshotd {v[0]:8.0f} req/s   "
            f"ratio {v[0] / d[0]:.2f}"
        )
        ld = sequential_latency(bare.url + "/page", person)
        lv = sequential_latency(proxy.url + "/page", person)
        print(
            f"   latency, one at a time (median of 300): direct {ld:.2f} ms   "
            f"via snapshotd {lv:.2f} ms   added {lv - ld:.2f} ms"
        )
    finally:
        proxy.stop()
        bare.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
