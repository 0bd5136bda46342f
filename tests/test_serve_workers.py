"""``snapshotd serve --workers 2``: two processes share the port, one of them runs the
crawler (another takes over when it dies), their metrics add up, a recapture reaches both
within the snapshot cache's second, and SIGTERM stops them all."""

from __future__ import annotations

import asyncio
import errno
import os
import re
import signal
import socket
import time
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

from snapshotd.render.procs import browsers
from snapshotd.store.outcome import CaptureOutcome
from snapshotd.store.sqlite import SQLiteStore
from tests.chromium import alive, require_chromium, wait_until
from tests.servers import serve_asgi
from tests.sites.shop import Shop
from tests.test_crawler_process import _rows, processed, snapshotd, tree
from tests.test_serve_process import serving

pytestmark = pytest.mark.browser

BOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
TOKEN = "workers-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
WORKER = "x-snapshotd-worker"


def write_config(tmp_path: Path, origin: str, db: Path, *, seeds: str = "[]") -> Path:
    config = tmp_path / "workers.toml"
    config.write_text(
        f'[server]\ndb = "{db}"\napi_tokens = ["{TOKEN}"]\nworker_header = true\n'
        f'[browser]\nconcurrency = 2\nexecutable = "{require_chromium()}"\n'
        "javascript_timeout = 0.2\nrender_timeout = 60.0\nblock_resources = []\n"
        f'[[site]]\nname = "shop"\norigin = "{origin}"\nseeds = {seeds}\nsitemaps = []\n'
        "capture_new = false\n"
    )
    return config


async def put_snapshot(db: Path, path: str, html: str) -> None:
    """Store a capture of ``path`` the way a worker of another process would."""
    store = SQLiteStore(str(db))
    await store.open()
    try:
        await store.enqueue("shop", path, 1, force=True)
        assert await store.claim_path("shop", path, "elsewhere:1:test", 60)
        await store.complete(
            "shop", path, "elsewhere:1:test", CaptureOutcome(html=html, status=200, headers={},
                final_url=path, expires_at=time.time() + 3600),
        )
    finally:
        await store.close()


def pids_answering(base: str, *, want: int = 2, tries: int = 200) -> set[str]:
    """The worker pids seen answering health checks, each on a new connection."""
    seen: set[str] = set()
    for _ in range(tries):
        seen.add(httpx.get(f"{base}/_snapshotd/healthz", trust_env=False).headers[WORKER])
        if len(seen) >= want:
            break
    return seen


def bot_pages(base: str, path: str, *, tries: int = 200) -> tuple[dict[str, set[str]], int]:
    """The bodies each worker answers a bot with for ``path`` (at least 20 requests, until
    both workers have answered), and how many requests that took."""
    bodies: dict[str, set[str]] = {}
    asked = 0
    while asked < tries and (asked < 20 or len(bodies) < 2):
        r = httpx.get(base + path, headers={"User-Agent": BOT}, trust_env=False, timeout=30)
        asked += 1
        assert r.status_code == 200 and r.headers["x-snapshotd-cache"] == "HIT", r.headers
        bodies.setdefault(r.headers[WORKER], set()).add(r.text)
    return bodies, asked


def hits(base: str) -> int:
    text = httpx.get(f"{base}/_snapshotd/metrics", headers=AUTH, trust_env=False).text
    found = re.search(r'snapshotd_requests_total\{result="HIT"\} (\d+)', text)
    assert found, text
    return int(float(found.group(1)))


def test_two_workers_share_the_port_and_one_crawls_until_it_dies(tmp_path):
    site = Shop()
    db = tmp_path / "workers.db"
    with serve_asgi(site.app) as origin:
        config = write_config(tmp_path, origin, db, seeds='["/"]')
        with serving("--config", str(config), "--workers", "2") as serve:
            base = serve.url()
            pids = pids_answering(base)
            assert len(pids) == 2, pids
            children = {str(p) for p in tree(serve.proc.pid)}
            assert pids <= children and str(serve.proc.pid) not in pids
            assert wait_until(lambda: "/" in processed(db), 60), serve.stderr
            assert serve.stderr.count("crawler started") == 1, serve.stderr
            holder = re.search(r"crawler runs in worker pid=(\d+)", serve.stderr)
            assert holder and holder.group(1) in pids, serve.stderr

            # The crawler's worker dies: the other takes the crawler over, a new one serves.
            dead = int(holder.group(1))
            os.kill(dead, signal.SIGKILL)
            assert wait_until(lambda: serve.stderr.count("crawler started") == 2, 60), (
                serve.stderr
            )
            taken = re.findall(r"crawler runs in worker pid=(\d+)", serve.stderr)
            assert len(taken) == 2 and int(taken[1]) != dead and alive(int(taken[1]))
            assert wait_until(lambda: len(pids_answering(base) - {str(dead)}) == 2, 60)
            assert not alive(dead)
            code = serve.stop()
        err = serve.stderr
    assert code == 0, err
    assert "Traceback" not in err, err
    assert f"worker pid={dead} died" in err


@pytest.mark.parametrize("workers", ["1", "2"], ids=["1-worker", "2-workers"])
def test_no_other_process_can_listen_on_the_port_serve_holds(tmp_path, workers):
    with serve_asgi(Shop().app) as origin:
        config = write_config(tmp_path, origin, tmp_path / "held.db")
        with serving("--config", str(config), "--workers", workers, "--no-crawler") as serve:
            base = serve.url()
            port = int(base.rsplit(":", 1)[1])
            # The processes that answer: serve itself, or its workers.
            ours = {str(p) for p in tree(serve.proc.pid)} - (
                set() if workers == "1" else {str(serve.proc.pid)}
            )

            # A process of the same user asking to share the port is refused...
            with socket.socket() as intruder:
                intruder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                intruder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                with pytest.raises(OSError) as refused:
                    intruder.bind(("127.0.0.1", port))
                    intruder.listen()
                assert refused.value.errno == errno.EADDRINUSE

            # ...and so is another serve (its own database) with several workers.
            other = tmp_path / "other"
            other.mkdir()
            second = snapshotd(
                "serve", "--config", str(write_config(other, origin, other / "other.db")),
                "--port", str(port), "--workers", "2", "--no-crawler",
            )
            _, err = second.communicate(timeout=120)
            assert second.returncode == 2, err
            lines = [line for line in err.splitlines() if line.strip()]
            assert lines == [
                f"snapshotd: cannot listen on 127.0.0.1:{port}: address already in use"
            ]

            # Every connection still reaches this serve's workers.
            answered = {
                httpx.get(f"{base}/_snapshotd/healthz", trust_env=False).headers[WORKER]
                for _ in range(40)
            }
            assert answered <= ours, (answered, ours)
            serve.stop()
        err = serve.stderr
    assert "Traceback" not in err, err


def test_metrics_add_up_and_a_recapture_reaches_every_worker_within_a_second(tmp_path):
    db = tmp_path / "metrics.db"
    asyncio.run(put_snapshot(db, "/page", "<html><body><p>first</p></body></html>"))
    with serve_asgi(Shop().app) as origin:
        config = write_config(tmp_path, origin, db)
        with serving("--config", str(config), "--workers", "2", "--no-crawler") as serve:
            base = serve.url()
            before, asked = bot_pages(base, "/page")
            assert len(before) == 2, before
            for bodies in before.values():
                assert len(bodies) == 1 and "first" in next(iter(bodies)), before
            # Every bot request, whichever worker answered it, is counted once, and listed
            # among the recent bot requests (each worker stores its own every 2 s).
            assert hits(base) == asked

            def recent() -> list[dict[str, object]]:
                stats = httpx.get(f"{base}/_snapshotd/api/v1/stats", headers=AUTH,
                                  trust_env=False)
                return [r for r in stats.json()["recent"] if r["path"] == "/page"]

            assert wait_until(lambda: len(recent()) == min(asked, 100), 10), (asked, recent())

            asyncio.run(put_snapshot(db, "/page", "<html><body><p>second</p></body></html>"))
            time.sleep(1.1)  # the snapshot cache of each worker keeps an entry for 1 s
            after, more = bot_pages(base, "/page")
            assert len(after) == 2, after
            for bodies in after.values():
                assert len(bodies) == 1 and "second" in next(iter(bodies)), after
            assert hits(base) == asked + more
            # Read when scraped, beside the shared counts: the answering worker's process_*.
            text = httpx.get(f"{base}/_snapshotd/metrics", headers=AUTH, trust_env=False).text
            for name in ("process_resident_memory_bytes", "process_open_fds",
                         "snapshotd_browser_processes", "snapshotd_browser_memory_bytes"):
                assert re.search(rf"^{name} ", text, re.MULTILINE), name
            assert serve.stop() == 0
        err = serve.stderr
    assert "Traceback" not in err, err


def test_the_workers_share_one_budget_of_new_paths_per_minute(tmp_path):
    db = tmp_path / "budget.db"
    asyncio.run(put_snapshot(db, "/known", "<html><body><p>known</p></body></html>"))
    with serve_asgi(Shop().app) as origin:
        config = write_config(tmp_path, origin, db)
        text = config.read_text().replace(
            "capture_new = false\n", "new_paths_per_minute = 2\n"
        ).replace("[server]\n", "[server]\nmiss_wait = 0.0\n")
        config.write_text(text)
        with serving("--config", str(config), "--workers", "2", "--no-crawler") as serve:
            base = serve.url()
            for n in range(16):
                r = httpx.get(
                    f"{base}/new/{n}", headers={"User-Agent": BOT}, trust_env=False, timeout=30
                )
                # Admitted but not had within miss_wait: RETRY (503, miss_answer's default).
                assert r.headers["x-snapshotd-cache"] in ("MISS", "RETRY", "BYPASS"), r.headers
            queued = _rows(db, "SELECT path FROM paths WHERE path LIKE '/new/%'")
            assert serve.stop() == 0
        err = serve.stderr
    # Each of the two workers may add one of the site's two new paths a minute.
    assert 1 <= len(queued) <= 2, (queued, err)
    assert "Traceback" not in err, err


def test_the_crawler_follows_the_links_of_pages_another_worker_captured(tmp_path, monkeypatch):
    monkeypatch.setenv("SNAPSHOTD_MAINTENANCE_EVERY", "1")
    db = tmp_path / "follow.db"
    with serve_asgi(Shop().app) as origin:
        config = write_config(tmp_path, origin, db)
        config.write_text(config.read_text().replace("capture_new = false\n", ""))
        with serving("--config", str(config), "--workers", "2") as serve:
            base = serve.url()
            assert wait_until(lambda: "crawler started" in serve.stderr, 60), serve.stderr
            holder = re.findall(r"crawler runs in worker pid=(\d+)", serve.stderr)[0]
            captured = None
            for path in ("/b/1", "/b/2", "/a/2", "/a/3", "/deep/1", "/deep/2", "/deep/3"):
                r = httpx.get(base + path, headers={"User-Agent": BOT}, trust_env=False,
                              timeout=60)
                if r.headers["x-snapshotd-cache"] == "MISS" and r.headers[WORKER] != holder:
                    captured = path
                    break
            assert captured, serve.stderr

            def followed() -> bool:
                rows = _rows(db, f"SELECT links_due FROM paths WHERE path = '{captured}'")
                return rows == [(0,)]

            # Stored marked by the worker that captured it; followed by the crawler's worker
            # at a maintenance once it is older than one.
            assert wait_until(followed, 60), serve.stderr
            assert serve.stop() == 0
        err = serve.stderr
    assert "Traceback" not in err, err


def test_a_write_through_the_api_is_seen_by_the_next_read_whichever_worker_answers(tmp_path):
    """Each call on a new connection, so either worker may take it: a pause, a resume, a new
    site or a rotated site token is what the very next read shows, every time."""
    db = tmp_path / "ryw.db"
    with serve_asgi(Shop().app) as origin:
        config = write_config(tmp_path, origin, db)
        with serving("--config", str(config), "--workers", "2", "--no-crawler") as serve:
            base = serve.url()
            assert len(pids_answering(base)) == 2  # both take connections

            def call(method: str, path: str, **kw: object) -> httpx.Response:
                r = httpx.request(method, base + path, headers=AUTH, trust_env=False,
                                  timeout=30, **kw)  # type: ignore[arg-type]
                assert r.status_code < 300, r.text
                return r

            crawl = "/_snapshotd/v3/crawl"
            for n in range(15):
                call("GET", crawl, params={"name": "shop", "pause": "1"})
                assert call("GET", crawl, params={"name": "shop"}).json()[
                    "jobs"][0]["jobStatus"]["status"] == 6, n
                call("POST", "/_snapshotd/api/v1/sites/shop/resume")
                assert call("GET", "/_snapshotd/api/v1/sites/shop").json()["paused"] is False, n
                call("PUT", f"/_snapshotd/api/v1/sites/new{n}", json={"origin": origin})
                assert call("GET", f"/_snapshotd/api/v1/sites/new{n}/paths").json()[
                    "paths"] == [], n
                token = call("POST", "/_snapshotd/api/v1/sites/shop/site-token").json()[
                    "site_token"]
                assert call("GET", "/_snapshotd/api/v1/sites/shop").json()[
                    "site_token"] == token, n
            assert serve.stop() == 0
        err = serve.stderr
    assert "Traceback" not in err, err


def test_the_seo4ajax_face_has_its_own_port_on_every_worker(tmp_path):
    """``[server] seo4ajax_port``: a second port every worker takes requests on, all of them
    the face's whatever their Host (HAProxy's and Varnish's recipes keep the site's)."""
    db = tmp_path / "face.db"
    asyncio.run(put_snapshot(db, "/page", "<html><body><p>kept page</p></body></html>"))
    with serve_asgi(Shop().app) as origin:
        config = write_config(tmp_path, origin, db)
        face_port = free_port()
        config.write_text(config.read_text().replace(
            "[browser]", f"seo4ajax_port = {face_port}\n[browser]", 1))
        with serving("--config", str(config), "--workers", "2", "--no-crawler") as serve:
            base = serve.url()
            token = httpx.get(f"{base}/_snapshotd/api/v1/sites/shop", headers=AUTH,
                              trust_env=False).json()["site_token"]
            face = f"http://127.0.0.1:{face_port}"
            workers: set[str] = set()
            for _ in range(60):
                r = httpx.get(f"{face}/{token}/page", headers={"Host": "shop.example"},
                              trust_env=False, timeout=30)
                assert r.status_code == 200 and "kept page" in r.text, r.text
                workers.add(r.headers[WORKER])
                if len(workers) == 2:
                    break
            assert len(workers) == 2, workers
            # On serve's own port the same target is the site's own path, not the face's.
            own = httpx.get(f"{base}/{token}/page", headers={"User-Agent": BOT},
                            trust_env=False, timeout=30)
            assert "kept page" not in own.text
            assert serve.stop() == 0
        err = serve.stderr
    assert "Traceback" not in err, err


def test_crawlbots_port_is_listened_on_by_serve(tmp_path):
    """``[server] crawlbot_port``: one more port ``serve`` listens on (every worker takes
    requests on it), Crawlbot's endpoints at its root."""
    db = tmp_path / "crawlbot.db"
    with serve_asgi(Shop().app) as origin:
        config = write_config(tmp_path, origin, db)
        port = free_port()
        config.write_text(config.read_text().replace(
            "[browser]", f"crawlbot_port = {port}\n[browser]", 1))
        with serving("--config", str(config), "--workers", "2", "--no-crawler") as serve:
            for _ in range(4):  # more than one connection: whichever worker takes it
                jobs = httpx.get(f"http://127.0.0.1:{port}/v3/crawl", params={"token": TOKEN},
                                 trust_env=False, timeout=30)
                assert jobs.status_code == 200, jobs.text
                assert [j["name"] for j in jobs.json()["jobs"]] == ["shop"]
            assert serve.stop() == 0
        err = serve.stderr
    assert "Traceback" not in err, err


def every_path() -> Starlette:
    """An origin with a page at every path, each ready at once."""

    async def page(request: Request) -> HTMLResponse:
        return HTMLResponse(
            f"<html><body><h1>Page {request.url.path}</h1>"
            "<script>window.onCaptureReady && window.onCaptureReady()</script></body></html>"
        )

    return Starlette(routes=[Route("/{path:path}", page)])


def misses_from_each_worker(base: str, prefix: str, *, tries: int = 200) -> dict[str, int]:
    """Bot misses for new paths under ``prefix``, each on a new connection, until both
    workers have rendered at least two: how many each answered."""
    answered: dict[str, int] = {}
    for n in range(tries):
        r = httpx.get(f"{base}{prefix}{n}", headers={"User-Agent": BOT}, trust_env=False,
                      timeout=60)
        assert r.status_code == 200 and r.headers["x-snapshotd-cache"] == "MISS", r.headers
        assert f"Page {prefix}{n}" in r.text
        answered[r.headers[WORKER]] = answered.get(r.headers[WORKER], 0) + 1
        if len(answered) == 2 and min(answered.values()) >= 2:
            break
    return answered


def browser_mains(serve_pid: int) -> list[int]:
    """The Chromium browsers (main processes, not their renderers or helpers) under serve."""
    return [p.pid for p in browsers(serve_pid) if "--type=" not in p.cmdline]


def test_every_worker_renders_through_one_browser_which_another_takes_over_when_it_dies(
    tmp_path,
):
    db = tmp_path / "workers.db"
    with serve_asgi(every_path()) as origin:
        config = write_config(tmp_path, origin, db)
        config.write_text(config.read_text().replace("capture_new = false\n", ""))
        with serving("--config", str(config), "--workers", "2", "--no-crawler") as serve:
            base = serve.url()
            answered = misses_from_each_worker(base, "/first/")
            assert len(answered) == 2, answered
            holders = re.findall(r"browser runs in worker pid=(\d+)", serve.stderr)
            assert len(holders) == 1 and holders[0] in answered, serve.stderr
            holder = int(holders[0])
            mains = browser_mains(serve.proc.pid)
            assert len(mains) == 1 and mains[0] in tree(holder), mains

            os.kill(holder, signal.SIGKILL)
            assert wait_until(lambda: not alive(mains[0]), 60)  # its browser goes with it
            assert wait_until(
                lambda: len(re.findall(r"browser runs in worker pid=", serve.stderr)) == 2, 60
            ), serve.stderr
            taken = int(re.findall(r"browser runs in worker pid=(\d+)", serve.stderr)[1])
            assert taken != holder and alive(taken)
            assert wait_until(lambda: len(pids_answering(base) - {str(holder)}) == 2, 60)
            answered = misses_from_each_worker(base, "/second/")
            assert len(answered) == 2 and str(holder) not in answered, answered
            assert wait_until(lambda: len(browser_mains(serve.proc.pid)) == 1, 30)
            assert browser_mains(serve.proc.pid)[0] in tree(taken)
            assert serve.stop() == 0
        err = serve.stderr
    assert "Traceback" not in err, err
    assert "crashed" not in err, err


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
