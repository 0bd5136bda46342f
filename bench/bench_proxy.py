"""Proxy throughput and latency, each beside its baseline in the same run.

The origin is nginx serving a 40 KB page statically. For ``serve`` with 1 and with 2 worker
processes (``--workers``):

1. Cache hits: snapshotd serving the stored snapshot of that page to a bot, against nginx
   serving the same file statically (plain, and gzip-accepting with ``gzip_static``).
   Target: at least 0.5 of nginx. Beside them, the floor of any Python ASGI app: uvicorn
   (uvloop, httptools) with the same number of workers answering the page (or its gzip
   file) from memory.
2. Pass-through: a person's request through snapshotd to the origin, against nginx
   ``proxy_pass`` to the same origin (and the origin directly); requests per second under
   load, and the added latency of one request at a time. Target: at least 0.8 of nginx.

    python bench/bench_proxy.py [--duration 5] [--connections 32] [--workers 1,2]

Beside each throughput, the server's CPU per request (user and system time of its processes
from /proc, over the wrk run, divided by the requests): a figure that depends less than the
ratios on how this machine splits its cores between wrk and the servers.

Needs wrk and nginx (installed with apt-get when missing and run as root on Debian).
Every server is a separate process on 127.0.0.1; nginx runs ``worker_processes auto``.
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
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

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


NGINX = """
{user}
worker_processes auto;
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/nginx-error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 1000000;
    default_type text/html;
    client_body_temp_path {tmp}/nginx-body;
    proxy_temp_path {tmp}/nginx-proxy;
    fastcgi_temp_path {tmp}/nginx-fastcgi;
    uwsgi_temp_path {tmp}/nginx-uwsgi;
    scgi_temp_path {tmp}/nginx-scgi;
    upstream origin {{ server 127.0.0.1:{origin}; keepalive 64; }}
    server {{
        listen 127.0.0.1:{origin} reuseport;
        root {tmp}/www;
        location / {{ gzip_static on; try_files /page.html =404; }}
    }}
    server {{
        listen 127.0.0.1:{proxy} reuseport;
        location / {{
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
    }}
}}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_answering(url: str, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            httpx.get(url, timeout=1, trust_env=False)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"{what} did not start")


class Nginx:
    """nginx as the origin (the page, statically) and as a ``proxy_pass`` to it."""

    def __init__(self, tmp: Path) -> None:
        self.origin_port, self.proxy_port = free_port(), free_port()
        self.origin = f"http://127.0.0.1:{self.origin_port}"
        self.proxy = f"http://127.0.0.1:{self.proxy_port}"
        conf = tmp / "nginx.conf"
        conf.write_text(
            NGINX.format(
                tmp=tmp, origin=self.origin_port, proxy=self.proxy_port,
                user="user root;" if os.geteuid() == 0 else "",
            )
        )
        self.proc = subprocess.Popen([nginx_binary(), "-p", str(tmp), "-c", str(conf)])
        wait_answering(self.origin + "/page", self.proc, "nginx")
        wait_answering(self.proxy + "/page", self.proc, "nginx")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


FLOOR_APP = """
import os

PAGE = open(os.environ["FLOOR_PAGE"], "rb").read()
PAGE_GZ = open(os.environ["FLOOR_PAGE"] + ".gz", "rb").read()
TYPE = (b"content-type", b"text/html; charset=utf-8")
PLAIN = [TYPE, (b"content-length", b"%d" % len(PAGE))]
GZIPPED = [TYPE, (b"content-length", b"%d" % len(PAGE_GZ)), (b"content-encoding", b"gzip")]


async def app(scope, receive, send):
    if scope["type"] == "http":
        gzipped = (b"accept-encoding", b"gzip") in scope["headers"]
        headers, body = (GZIPPED, PAGE_GZ) if gzipped else (PLAIN, PAGE)
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})
"""


class Floor:
    """The least any Python ASGI app on uvicorn (uvloop, httptools) costs: the page from
    memory (gzipped when the request says exactly ``Accept-Encoding: gzip``), with
    ``workers`` processes."""

    def __init__(self, tmp: Path, page: Path, workers: int) -> None:
        (tmp / "floor.py").write_text(FLOOR_APP)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "floor:app", "--app-dir", str(tmp),
             "--port", str(self.port), "--workers", str(workers), "--loop", "uvloop",
             "--http", "httptools", "--no-access-log", "--log-level", "warning"],
            env={**os.environ, "FLOOR_PAGE": str(page)},
        )
        wait_answering(self.url + "/page", self.proc, "uvicorn")
        time.sleep(1)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


class Snapshotd:
    """``snapshotd serve --workers N --no-crawler`` in front of the origin."""

    def __init__(self, tmp: Path, db: str, origin: str, workers: int) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = tmp / f"serve-{workers}.toml"
        config.write_text(
            f'[server]\ndb = "{db}"\napi_tokens = ["bench"]\n[browser]\nconcurrency = 1\n'
            f'[[site]]\nname = "bench"\norigin = "{origin}"\nseeds = []\n'
            "capture_new = false\n"
        )
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "snapshotd", "serve", "--config", str(config),
             "--port", str(self.port), "--workers", str(workers), "--no-crawler"],
            env=env, stderr=subprocess.DEVNULL,
        )
        wait_answering(self.url + "/_snapshotd/healthz", self.proc, "snapshotd")
        time.sleep(2)  # every worker up, not only the first

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def nginx_binary() -> str:
    """nginx on PATH or in /usr/sbin, installed from Debian's package when root."""
    found = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/sbin")
    if found:
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
        subprocess.run(["apt-get", "install", "-y", "-qq", "nginx"], check=True, env=env)
        found = shutil.which("nginx", path="/usr/sbin:/usr/bin")
    if not found:
        raise SystemExit("nginx not found: apt-get install nginx")
    return found


def proc_stats() -> Iterator[tuple[int, str, list[str]]]:
    """Each process alive now: its pid, its command's name, and the fields of its
    /proc/PID/stat after the name (state, ppid at index 1, ... utime and stime at 11 and 12,
    cutime and cstime, its reaped children's, at 13 and 14), in clock ticks."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            # The name, in parentheses, may itself hold spaces and parentheses.
            name, _, rest = stat.partition("(")[2].rpartition(")")
            yield int(entry), name, rest.split()


def cpu_seconds(roots: tuple[int, ...]) -> float:
    """User and system CPU time of the processes ``roots`` and all their descendants (a
    server's master and workers), from /proc."""
    stats = {
        pid: (int(fields[1]), int(fields[11]) + int(fields[12]))
        for pid, _name, fields in proc_stats()
    }
    tree, total = set(roots), 0.0
    grown = True
    while grown:
        grown = False
        for pid, (ppid, _) in stats.items():
            if ppid in tree and pid not in tree:
                tree.add(pid)
                grown = True
    for pid in tree:
        total += stats.get(pid, (0, 0))[1]
    return total / os.sysconf("SC_CLK_TCK")


class Run(NamedTuple):
    rps: float
    p50: str
    cpu_us: float  # the server's CPU per request, microseconds


def wrk(
    url: str, duration: int, connections: int, headers: dict[str, str], servers: tuple[int, ...]
) -> Run:
    """One wrk run against ``url``, served by the processes ``servers`` (and their
    children)."""
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{duration}s", "--latency"]
    for k, v in headers.items():
        cmd += ["-H", f"{k}: {v}"]
    before = cpu_seconds(servers)
    out = subprocess.run(cmd + [url], capture_output=True, text=True, check=True).stdout
    cpu = cpu_seconds(servers) - before
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    requests = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    p50 = re.search(r"^\s+50%\s+(\S+)", out, re.M)
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors:
        raise RuntimeError(f"{url}: {errors.group(1)} non-2xx responses")
    return Run(rps, p50.group(1) if p50 else "?", cpu / requests * 1e6)


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
    from snapshotd.store.outcome import CaptureOutcome
    from snapshotd.store.sqlite import SQLiteStore

    async with SQLiteStore(db) as store:
        await store.enqueue("bench", "/page", 3)
        await store.claim("bench", 60)
        await store.complete(
            "bench", "/page", "bench", CaptureOutcome(
                html=html, status=200, headers={}, final_url="",
                expires_at=time.time() + 86400),
        )


def compare(
    pairs: list[tuple[str, str, tuple[int, ...]]],
    args: argparse.Namespace,
    headers: dict[str, str],
) -> list[Run]:
    """The best of ``args.rounds`` wrk runs of each (label, URL, the server's processes),
    the runs alternating."""
    runs: list[list[Run]] = [[] for _ in pairs]
    for _ in range(args.rounds):
        for i, (_label, url, server) in enumerate(pairs):
            runs[i].append(wrk(url, args.duration, args.connections, headers, server))
    return [max(r) for r in runs]


def proxy_cpu(through: Run, direct: Run) -> str:
    return f"{through.cpu_us - direct.cpu_us:.1f} us"


def cpu_line(*runs: tuple[str, Run]) -> str:
    """The server CPU per request of each run, and each beside the first's."""
    first = runs[0][1].cpu_us
    return "server CPU per request: " + "   ".join(
        f"{label} {run.cpu_us:.1f} us" + (f" (x{run.cpu_us / first:.2f})" if i else "")
        for i, (label, run) in enumerate(runs)
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=int, default=5)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds per pair")
    parser.add_argument("--workers", default="1,2", help="serve's worker counts to measure")
    args = parser.parse_args()
    if not shutil.which("wrk"):
        print("wrk not found: apt-get install wrk", file=sys.stderr)
        return 2

    tmp = Path(tempfile.mkdtemp(prefix="snapshotd-bench-"))
    tmp.chmod(0o755)
    html = page_40k()
    www = tmp / "www"
    www.mkdir()
    (www / "page.html").write_text(html)
    (www / "page.html.gz").write_bytes(gzip.compress(html.encode()))
    db = str(tmp / "bench.db")
    asyncio.run(seed_store(db, html))
    print(f"snapshot: {len(html.encode())} bytes, {len(gzip.compress(html.encode()))} gzipped")
    print(f"cpu: {os.cpu_count()} cores; wrk -t1 -c{args.connections} -d{args.duration}s; "
          f"best of {args.rounds} alternating rounds\n")

    nginx = Nginx(tmp)
    try:
        for workers in (int(w) for w in args.workers.split(",")):
            proxy = Snapshotd(tmp, db, nginx.origin, workers)
            try:
                print(f"serve --workers {workers}")
                print(
                    "1. cache hit vs nginx serving the same file statically, and beside them "
                    f"uvicorn --workers {workers} answering the page from memory (the floor: "
                    "the most any Python ASGI app gets here)"
                )
                floor = Floor(tmp, www / "page.html", workers)
                try:
                    for label, extra in (("identity", {}), ("gzip", {"Accept-Encoding": "gzip"})):
                        hb = {"User-Agent": BOT, **extra}
                        check = httpx.get(proxy.url + "/page", headers=hb, trust_env=False)
                        assert check.headers["x-snapshotd-cache"] == "HIT", check.headers
                        n, h, f = compare(
                            [
                                ("nginx", nginx.origin + "/page", (nginx.proc.pid,)),
                                ("hit", proxy.url + "/page", (proxy.proc.pid,)),
                                ("floor", floor.url + "/page", (floor.proc.pid,)),
                            ],
                            args, hb,
                        )
                        print(
                            f"   {label:8}  nginx static {n[0]:8.0f} req/s (p50 {n[1]:>8})   "
                            f"snapshotd HIT {h[0]:8.0f} req/s (p50 {h[1]:>8})   "
                            f"floor {f[0]:8.0f} req/s\n"
                            f"             HIT / nginx {h[0] / n[0]:.2f} (target 0.50)   "
                            f"floor / nginx {f[0] / n[0]:.2f}   HIT / floor {h[0] / f[0]:.2f}\n"
                            f"             {cpu_line(('nginx', n), ('HIT', h), ('floor', f))}"
                        )
                finally:
                    floor.stop()
                print("2. pass-through (a person) vs nginx proxy_pass, same origin")
                person = {"User-Agent": "Mozilla/5.0 (X11; Linux x86_64) Chrome/120"}
                d, n, v = compare(
                    [
                        ("direct", nginx.origin + "/page", (nginx.proc.pid,)),
                        ("nginx", nginx.proxy + "/page", (nginx.proc.pid,)),
                        ("snapshotd", proxy.url + "/page", (nginx.proc.pid, proxy.proc.pid)),
                    ],
                    args, person,
                )
                print(
                    f"   throughput: origin directly {d[0]:8.0f} req/s   nginx proxy_pass "
                    f"{n[0]:8.0f} req/s   snapshotd {v[0]:8.0f} req/s   "
                    f"ratio to nginx {v[0] / n[0]:.2f} (target 0.80)\n"
                    "   the proxy's own server CPU per request (the proxy and the origin, less "
                    f"the origin directly): nginx proxy_pass {proxy_cpu(n, d)}, snapshotd "
                    f"{proxy_cpu(v, d)} (x{(v.cpu_us - d.cpu_us) / (n.cpu_us - d.cpu_us):.2f})"
                )
                ln = sequential_latency(nginx.proxy + "/page", person)
                lv = sequential_latency(proxy.url + "/page", person)
                print(
                    f"   latency, one at a time (median of 300): nginx proxy_pass {ln:.2f} ms"
                    f"   snapshotd {lv:.2f} ms   added {lv - ln:.2f} ms\n"
                )
            finally:
                proxy.stop()
    finally:
        nginx.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
