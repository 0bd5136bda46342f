"""Large answers: snapshots streamed in pieces and read once for concurrent requests, and
the memory of slow downloads bounded, of snapshots and of the origin's pages passed through.

Real uvicorn, real SQLite files; the memory tests run the server as its own process and
read its peak RSS from /proc.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import hashlib
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from snapshotd.config.settings import Settings, SiteSettings
from snapshotd.proxy.snapshots import SnapshotCache
from snapshotd.server.app import create_app
from snapshotd.store.interface import Snapshot
from snapshotd.store.outcome import CaptureOutcome
from snapshotd.store.sqlite import SQLiteStore
from tests.servers import serve_asgi
from tests.slow_clients import memory_kib, slow_downloads

ROOT = Path(__file__).resolve().parent.parent
BOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"


class NoRender:
    async def start(self) -> None: ...
    async def close(self) -> None: ...

    async def capture(self, url, site, profile="desktop"):  # type: ignore[no-untyped-def]
        raise AssertionError("nothing renders here")


def random_page(random_bytes: int) -> str:
    """A page that hardly compresses: base64 text of random bytes (gzip keeps about 3/4)."""
    text = base64.b64encode(os.urandom(random_bytes)).decode()
    return f"<html><body><pre>{text}</pre></body></html>"


def store_page(db: str, path: str, html: str) -> bytes:
    """Store ``html`` as the fresh snapshot of ``path``; returns its gzip body as stored."""

    async def put() -> bytes:
        async with SQLiteStore(db) as store:
            await store.enqueue("default", path, 2)
            await store.claim_path("default", path, "test", 60)
            await store.complete(
                "default", path, "test", CaptureOutcome(html=html, status=200, headers={},
                    final_url="http://origin" + path, expires_at=time.time() + 3600),
            )
            snapshot = await store.get_snapshot("default", path)
            assert snapshot is not None
            return snapshot.body_gz

    return asyncio.run(put())


class BodyMessages:
    """ASGI wrapper that counts the body messages of each response it passes on."""

    def __init__(self, app) -> None:  # type: ignore[no-untyped-def]
        self.app = app
        self.counts: list[int] = []

    async def __call__(self, scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        index = len(self.counts)
        self.counts.append(0)

        async def counted(message) -> None:  # type: ignore[no-untyped-def]
            if message["type"] == "http.response.body":
                self.counts[index] += 1
            await send(message)

        await self.app(scope, receive, counted)


def test_a_large_snapshot_arrives_whole_in_several_body_messages(tmp_path) -> None:
    db = str(tmp_path / "s.db")
    html = random_page(3 * 2**20)
    body_gz = store_page(db, "/big", html)
    settings = Settings(db=db, sites=(SiteSettings(origin="http://127.0.0.1:9"),))
    app = BodyMessages(create_app(settings, renderer=NoRender(), crawler=False))
    bot = {"User-Agent": BOT}
    with serve_asgi(app) as base, httpx.Client(base_url=base, trust_env=False) as c:
        with c.stream("GET", "/big", headers={**bot, "Accept-Encoding": "identity"}) as plain:
            plain_wire = b"".join(plain.iter_raw())
        with c.stream("GET", "/big", headers={**bot, "Accept-Encoding": "gzip"}) as gz:
            gz_wire = b"".join(gz.iter_raw())
        head = c.head("/big", headers={**bot, "Accept-Encoding": "identity"})
        not_modified = c.get("/big", headers={**bot, "If-None-Match": plain.headers["etag"]})
    assert plain.status_code == 200 and plain.headers["x-snapshotd-cache"] == "HIT"
    assert "content-encoding" not in plain.headers
    assert plain_wire == html.encode()
    assert int(plain.headers["content-length"]) == len(plain_wire)
    assert gz.headers["content-encoding"] == "gzip"
    assert gz_wire == body_gz and gzip.decompress(gz_wire) == html.encode()
    assert int(gz.headers["content-length"]) == len(body_gz)
    assert head.content == b"" and head.headers["content-length"] == plain.headers["content-length"]
    assert gz.headers["etag"] == plain.headers["etag"] == head.headers["etag"]
    assert not_modified.status_code == 304 and not_modified.content == b""
    identity_messages, gzip_messages = app.counts[0], app.counts[1]
    # Pieces of at most 64 KiB: the server's flow control applies to each.
    assert identity_messages >= len(plain_wire) // 65536
    assert gzip_messages >= len(body_gz) // 65536


def test_concurrent_requests_for_one_snapshot_share_one_store_read(tmp_path) -> None:
    db = str(tmp_path / "s.db")
    store_page(db, "/big", random_page(9 * 2**20))  # too big for the in-process cache
    clients = 8

    class GatedStore(SQLiteStore):
        """A real store whose snapshot reads finish only once every request has come in."""

        reads = 0
        arrived = 0
        all_in: asyncio.Event | None = None

        async def get_snapshot(self, site, path, profile=None):  # type: ignore[no-untyped-def]
            GatedStore.reads += 1
            assert self.all_in is not None
            await self.all_in.wait()
            return await super().get_snapshot(site, path)

    store = GatedStore(db)
    settings = Settings(db=db, sites=(SiteSettings(origin="http://127.0.0.1:9"),))
    inner = create_app(settings, store=store, renderer=NoRender(), crawler=False)

    async def app(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        if scope["type"] == "http":
            if store.all_in is None:
                store.all_in = asyncio.Event()
            GatedStore.arrived += 1
            if GatedStore.arrived == clients:
                # Every request is in the proxy by the time the loop gets back to the reads.
                asyncio.get_running_loop().call_soon(store.all_in.set)
        await inner(scope, receive, send)

    async def burst(base: str) -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=base, timeout=60, trust_env=False) as c:
            return await asyncio.gather(
                *(c.get("/big", headers={"User-Agent": BOT}) for _ in range(clients))
            )

    with serve_asgi(app) as base:
        responses = asyncio.run(burst(base))
    assert {r.headers["x-snapshotd-cache"] for r in responses} == {"HIT"}
    assert len({hashlib.sha256(r.content).digest() for r in responses}) == 1
    assert GatedStore.reads == 1


def test_a_large_snapshot_being_sent_is_shared_with_the_next_request(tmp_path) -> None:
    db = str(tmp_path / "s.db")
    html = random_page(9 * 2**20)  # too big to be kept in the cache
    store_page(db, "/big", html)

    class CountingStore(SQLiteStore):
        reads = 0

        async def get_snapshot(self, site, path, profile=None):  # type: ignore[no-untyped-def]
            CountingStore.reads += 1
            return await super().get_snapshot(site, path)

    settings = Settings(db=db, sites=(SiteSettings(origin="http://127.0.0.1:9"),))
    app = create_app(settings, store=CountingStore(db), renderer=NoRender(), crawler=False)
    app.proxy.cache = SnapshotCache(ttl=3600)  # this test is about sharing, not expiry
    with serve_asgi(app) as base:
        host, port = base.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=30) as slow:
            slow.sendall(
                f"GET /big HTTP/1.1\r\nHost: a.test\r\nUser-Agent: {BOT}\r\n\r\n".encode()
            )
            assert slow.recv(65536).startswith(b"HTTP/1.1 200")  # and reads no more for now
            second = httpx.get(base + "/big", headers={"User-Agent": BOT}, trust_env=False)
            reads_while_sending = CountingStore.reads
    assert second.content == html.encode()
    assert reads_while_sending == 1


def test_a_damaged_snapshot_body_fails_open_to_the_origin(tmp_path) -> None:
    import sqlite3

    db = str(tmp_path / "s.db")
    body_gz = store_page(db, "/small", "<html><body><p>stored</p></body></html>")
    conn = sqlite3.connect(db)
    with conn:
        # The deflate data is garbage; the gzip header and trailer are kept.
        damaged = body_gz[:12] + b"\xff" * 40 + body_gz[-8:]
        conn.execute("UPDATE snapshots SET body_gz = ?", (damaged,))
    conn.close()
    with serve_asgi(origin_app) as origin:
        settings = Settings(db=db, sites=(SiteSettings(origin=origin),))
        app = create_app(settings, renderer=NoRender(), crawler=False)
        with serve_asgi(app) as base:
            r = httpx.get(
                base + "/small",
                headers={"User-Agent": BOT, "Accept-Encoding": "identity"},
                trust_env=False,
            )
    assert r.status_code == 200 and r.headers["x-snapshotd-cache"] == "BYPASS"
    assert r.text == "origin"


def test_a_snapshot_damaged_past_its_first_piece_is_cut_off_with_one_log_line(
    tmp_path, caplog
) -> None:
    import logging
    import sqlite3

    db = str(tmp_path / "s.db")
    body_gz = store_page(db, "/large", random_page(3 * 2**20))  # decompressed piece by piece
    middle = len(body_gz) // 2
    conn = sqlite3.connect(db)
    with conn:
        damaged = body_gz[:middle] + b"\xff" * 4096 + body_gz[middle + 4096 :]
        conn.execute("UPDATE snapshots SET body_gz = ?", (damaged,))
    conn.close()
    with serve_asgi(origin_app) as origin:
        settings = Settings(db=db, sites=(SiteSettings(origin=origin),))
        app = create_app(settings, renderer=NoRender(), crawler=False)
        with serve_asgi(app) as base, caplog.at_level(logging.INFO):
            headers = {"User-Agent": BOT, "Accept-Encoding": "identity"}
            with httpx.stream("GET", base + "/large", headers=headers, trust_env=False) as r:
                assert r.status_code == 200 and r.headers["x-snapshotd-cache"] == "HIT"
                received = 0
                try:
                    for piece in r.iter_raw():
                        received += len(piece)
                except httpx.RemoteProtocolError:
                    pass  # the server dropped the connection: the answer is cut off
            assert 0 < received < int(r.headers["content-length"])
            for _ in range(100):  # the access line is written once the request has ended
                if any(rec.name == "snapshotd.access" for rec in caplog.records):
                    break
                time.sleep(0.05)
    damaged_lines = [r for r in caplog.records if "snapshot body damaged" in r.getMessage()]
    assert len(damaged_lines) == 1 and "path=/large" in damaged_lines[0].getMessage()
    assert not any(r.exc_info for r in caplog.records)  # no traceback
    (access,) = [r for r in caplog.records if r.name == "snapshotd.access"]
    assert re.search(r" /large HIT 200 \d+ms \S+ 127\.0\.0\.1$", access.getMessage())


def test_the_cache_bound_counts_the_html_it_keeps_decompressed() -> None:
    cache = SnapshotCache(max_bytes=2**20)
    html = ("<p>" + "a sturdy thing " * 4000 + "</p>").encode()  # 60 KB, gzip under 1 KB
    snapshots = [
        Snapshot(site="s", path=f"/{i}", body_gz=gzip.compress(html), status=200)
        for i in range(30)
    ]
    for snapshot in snapshots:
        cache.put(("s", snapshot.path), snapshot)
    kept = [s for s in snapshots if cache.get(("s", s.path)) is s]
    for snapshot in kept:
        assert snapshot.body == html  # kept decompressed once served
    held = sum(len(s.body_gz) + len(s.__dict__.get("body", b"")) for s in kept)
    assert kept and held <= cache.max_bytes
    # One over an eighth of the bound is shared only while something else holds it.
    large = Snapshot(site="s", path="/large", body_gz=os.urandom(cache.max_bytes // 4), status=200)
    cache.put(("s", "/large"), large)
    assert cache.get(("s", "/large")) is large
    del large
    assert cache.get(("s", "/large")) is None


SERVER = """
import asyncio, socket, sys
import uvicorn
from snapshotd.server.app import create_app
from snapshotd.server.run import uvicorn_config
from snapshotd.config.settings import Settings, SiteSettings

class NoRender:
    async def start(self): pass
    async def close(self): pass
    async def capture(self, url, site, profile=None): raise RuntimeError("nothing renders here")

db, origin = sys.argv[1], sys.argv[2]
settings = Settings(db=db, sites=(SiteSettings(origin=origin),))
app = create_app(settings, renderer=NoRender(), crawler=False)
sock = socket.socket()
sock.bind(("127.0.0.1", 0))
sock.listen(128)  # connections wait in the backlog until the server is up
print(sock.getsockname()[1], flush=True)
config = uvicorn_config(app, app.answer_at_once, log_level="warning")  # as serve runs it
server = uvicorn.Server(config)
asyncio.run(server.serve(sockets=[sock]))
"""


@contextmanager
def server_process(db: str, origin: str) -> Iterator[tuple[int, int]]:
    """snapshotd's app on uvicorn in a process of its own (:data:`SERVER`): its pid and
    port."""
    with subprocess.Popen(
        [sys.executable, "-c", SERVER, db, origin],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            yield proc.pid, int(proc.stdout.readline())
        finally:
            proc.terminate()


async def origin_app(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"origin"})


def test_fifty_slow_downloads_of_a_large_snapshot_keep_the_server_memory_bounded(
    tmp_path,
) -> None:
    db = str(tmp_path / "s.db")
    html = random_page(9 * 2**20)  # 12 MiB of text, about 9 MiB gzipped: never cached
    body_gz = store_page(db, "/big", html)
    expected = {
        "identity": hashlib.sha256(html.encode()).digest(),
        "gzip": hashlib.sha256(body_gz).digest(),
    }
    del html
    # The origin is never reached: the snapshot is fresh.
    with serve_asgi(origin_app) as origin, server_process(db, origin) as (pid, port):

        def request(encoding: str) -> bytes:
            return (
                f"GET /big HTTP/1.1\r\nHost: a.test\r\nUser-Agent: {BOT}\r\n"
                f"Accept-Encoding: {encoding}\r\nConnection: close\r\n\r\n"
            ).encode()

        # Warm up: one of each, so imports and first-use allocations are in the baseline.
        warm = slow_downloads(port, [request("identity"), request("gzip")])
        assert warm == [(200, expected["identity"]), (200, expected["gzip"])]
        before = memory_kib(pid)["VmRSS"]
        encodings = ["identity", "gzip"] * 25
        answers = slow_downloads(port, [request(e) for e in encodings])
        peak = memory_kib(pid)["VmHWM"]
    assert answers == [(200, expected[e]) for e in encodings]
    growth_mib = (peak - before) / 1024
    print(f"server peak RSS growth, 50 downloads of {len(body_gz) >> 20} MiB: {growth_mib:.0f} MiB")
    # Unbounded, this was about 50 copies of the snapshot (over 700 MiB).
    assert growth_mib < 120, f"peak RSS grew by {growth_mib:.0f} MiB"


def test_slow_people_downloading_a_large_origin_page_keep_the_server_memory_bounded() -> None:
    """Pass-through reads the origin no faster than each client takes the answer: what it
    holds per connection is bounded, not the page."""
    page = os.urandom(16 * 2**20)
    digest = hashlib.sha256(page).digest()

    async def large(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        if scope["type"] == "http":
            headers = [(b"content-length", str(len(page)).encode())]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": page})

    with serve_asgi(large) as origin, server_process(":memory:", origin) as (pid, port):
        request = (
            b"GET /big.bin HTTP/1.1\r\nHost: a.test\r\nUser-Agent: Mozilla/5.0 Firefox/130\r\n"
            b"Connection: close\r\n\r\n"
        )
        assert slow_downloads(port, [request]) == [(200, digest)]  # warm up
        before = memory_kib(pid)["VmRSS"]
        answers = slow_downloads(port, [request] * 20)
        peak = memory_kib(pid)["VmHWM"]
    assert answers == [(200, digest)] * 20
    growth_mib = (peak - before) / 1024
    print(f"server peak RSS growth, 20 slow pass-through downloads of 16 MiB: {growth_mib:.0f} MiB")
    # 15 MiB here; read from the origin as fast as it sends, 126 MiB (up to 20 pages).
    assert growth_mib < 60, f"peak RSS grew by {growth_mib:.0f} MiB"
