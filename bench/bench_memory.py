"""Server memory while many slow clients download one large snapshot, beside baselines.

snapshotd serves a stored snapshot that hardly compresses (base64 text of random bytes) to
N clients at once, half asking for gzip, each reading a piece in turn as slow clients do. The
figure is the server process's peak RSS (VmHWM) minus its RSS after a warm-up download of
each encoding. Baselines, same bytes, same clients, same run, each its own uvicorn process:

- bare-whole: a plain Starlette app with both encodings in memory, each sent as one body;
- bare-pieces: the same app streaming the in-memory bytes in 64 KiB pieces (what a server
  holding one copy and honouring flow control costs).

    python bench/bench_memory.py [--clients 50] [--mib 9]

Servers run on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import gzip
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.slow_clients import memory_kib, slow_downloads  # noqa: E402

BOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"

SERVER = """
import asyncio, gzip, socket, sys
import uvicorn
sys.path.insert(0, {root!r})
kind, arg = sys.argv[1], sys.argv[2]
if kind.startswith("bare"):
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response, StreamingResponse
    from starlette.routing import Route
    body_gz = open(arg, "rb").read()
    body = gzip.decompress(body_gz)
    async def page(request: Request) -> Response:
        gz = "gzip" in request.headers.get("accept-encoding", "")
        data = body_gz if gz else body
        headers = {{"content-length": str(len(data))}}
        if gz:
            headers["content-encoding"] = "gzip"
        if kind == "bare-whole":
            return Response(data, media_type="text/html; charset=utf-8", headers=headers)
        async def pieces():
            for i in range(0, len(data), 65536):
                yield data[i : i + 65536]
        return StreamingResponse(pieces(), media_type="text/html; charset=utf-8",
                                 headers=headers)
    app = Starlette(routes=[Route("/{{p:path}}", page)])
    config = uvicorn.Config(app, log_level="warning", access_log=False)
else:
    from snapshotd.server.app import create_app
    from snapshotd.config.settings import Settings, SiteSettings
    class NoRender:
        async def start(self): pass
        async def close(self): pass
        async def capture(self, url, site, profile=None): raise RuntimeError("renders nothing")
    settings = Settings(db=arg, sites=(SiteSettings(origin="http://127.0.0.1:9"),))
    app = create_app(settings, renderer=NoRender(), crawler=False)
    from snapshotd.server.run import uvicorn_config
    config = uvicorn_config(app, app.answer_at_once, log_level="warning")  # as serve runs it
sock = socket.socket()
sock.bind(("127.0.0.1", 0))
sock.listen(1024)
print(sock.getsockname()[1], flush=True)
server = uvicorn.Server(config)
asyncio.run(server.serve(sockets=[sock]))
"""


async def seed(db: str, html: str) -> bytes:
    from snapshotd.store.outcome import CaptureOutcome
    from snapshotd.store.sqlite import SQLiteStore

    async with SQLiteStore(db) as store:
        await store.enqueue("default", "/big", 3)
        await store.claim_path("default", "/big", "bench", 60)
        await store.complete(
            "default", "/big", "bench", CaptureOutcome(
                html=html, status=200, headers={}, final_url="",
                expires_at=time.time() + 86400),
        )
        snapshot = await store.get_snapshot("default", "/big")
        assert snapshot is not None
        return snapshot.body_gz


def request(encoding: str) -> bytes:
    return (
        f"GET /big HTTP/1.1\r\nHost: a.test\r\nUser-Agent: {BOT}\r\n"
        f"Accept-Encoding: {encoding}\r\nConnection: close\r\n\r\n"
    ).encode()


def measure(kind: str, arg: str, clients: int, expected: dict[str, bytes]) -> tuple[float, float]:
    """(peak RSS growth in MiB, seconds for the downloads) of one server process."""
    with subprocess.Popen(
        [sys.executable, "-c", SERVER.format(root=str(ROOT)), kind, arg],
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            port = int(proc.stdout.readline())
            warm = slow_downloads(port, [request("identity"), request("gzip")])
            assert warm == [(200, expected["identity"]), (200, expected["gzip"])], kind
            before = memory_kib(proc.pid)["VmRSS"]
            encodings = ["identity", "gzip"] * (clients // 2) + ["identity"] * (clients % 2)
            started = time.perf_counter()
            answers = slow_downloads(port, [request(e) for e in encodings])
            elapsed = time.perf_counter() - started
            peak = memory_kib(proc.pid)["VmHWM"]
        finally:
            proc.terminate()
    assert answers == [(200, expected[e]) for e in encodings], kind
    return (peak - before) / 1024, elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--mib", type=int, default=9, help="random bytes in the page, MiB")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="snapshotd-bench-"))
    try:
        text = base64.b64encode(os.urandom(args.mib * 2**20)).decode()
        html = f"<html><body><pre>{text}</pre></body></html>"
        db = str(tmp / "bench.db")
        body_gz = asyncio.run(seed(db, html))
        (tmp / "page.gz").write_bytes(body_gz)
        expected = {
            "identity": hashlib.sha256(html.encode()).digest(),
            "gzip": hashlib.sha256(body_gz).digest(),
        }
        assert gzip.decompress(body_gz) == html.encode()
        print(
            f"snapshot: {len(html.encode()) / 2**20:.1f} MiB of HTML, "
            f"{len(body_gz) / 2**20:.1f} MiB gzipped; {args.clients} slow clients, half gzip"
        )
        results = {
            "bare-whole": measure("bare-whole", str(tmp / "page.gz"), args.clients, expected),
            "bare-pieces": measure("bare-pieces", str(tmp / "page.gz"), args.clients, expected),
            "snapshotd": measure("snapshotd", db, args.clients, expected),
        }
        ours = results["snapshotd"][0]
        for kind, (growth, elapsed) in results.items():
            print(f"   {kind:12} peak RSS growth {growth:7.1f} MiB   downloads {elapsed:5.1f} s")
        for kind in ("bare-whole", "bare-pieces"):
            print(f"   snapshotd / {kind}: {ours / max(results[kind][0], 0.1):.2f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
