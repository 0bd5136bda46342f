"""Stopping: ``snapshotd serve`` under SIGTERM with bots waiting on captures, expired leases
under ``--no-crawler``, and a capture failing as the renderer closes under it."""

from __future__ import annotations

import asyncio
import re
import signal
import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from snapshotd.store.sqlite import SQLiteStore
from tests.chromium import require_chromium, wait_until
from tests.servers import serve_asgi
from tests.test_crawler_process import _rows, kill_all, snapshotd, tree, workers_under_test

pytestmark = pytest.mark.browser

BOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
PATHS = [f"/slow/{n}" for n in range(6)]

# Never calls onCaptureReady: with ``wait_for_capture_ready`` it renders until render_timeout.
NEVER_READY = "<!doctype html><html><body><p>origin page {path}</p></body></html>"


class SlowOrigin:
    """Every path is a page that never becomes ready; counts the renders (the requests that
    carry ``X-Snapshotd``) and the pass-through requests per path."""

    def __init__(self) -> None:
        self.renders: Counter[str] = Counter()
        self.passed: Counter[str] = Counter()
        self._lock = threading.Lock()

        async def page(request: Request) -> Response:
            path = request.url.path
            with self._lock:
                (self.renders if "x-snapshotd" in request.headers else self.passed)[path] += 1
            return HTMLResponse(NEVER_READY.format(path=path))

        self.app = Starlette(routes=[Route("/{rest:path}", page)])


class Serve:
    """A ``snapshotd serve`` process on a free port; its stderr is read as it comes."""

    def __init__(self, *args: str) -> None:
        self.proc = snapshotd("serve", "--port", "0", *args)
        # Started when each worker process has said so.
        self.workers = int(args[args.index("--workers") + 1]) if "--workers" in args else (
            workers_under_test()
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    @property
    def stderr(self) -> str:
        return "".join(self.lines)

    def url(self, timeout: float = 60) -> str:
        found: list[str] = []

        def started() -> bool:
            # One process says it listens once it does; each worker of several says it runs.
            pattern = "listening on" if self.workers == 1 else "running on"
            running = [
                m.group(1)
                for line in list(self.lines)
                if (m := re.search(pattern + r" (http://127\.0\.0\.1:\d+)", line))
            ]
            if len(running) >= self.workers:
                found.extend(running)
                return True
            return self.proc.poll() is not None

        assert wait_until(started, timeout) and found, self.stderr
        return found[0]

    def stop(self, timeout: float = 60) -> int:
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout)
        self._reader.join(10)
        return code


@contextmanager
def serving(*args: str) -> Iterator[Serve]:
    serve = Serve(*args)
    processes = [serve.proc.pid]
    try:
        serve.url()
        processes = tree(serve.proc.pid)
        yield serve
    finally:
        kill_all(processes)
        if serve.proc.returncode is None:
            serve.proc.wait(10)
        serve._reader.join(10)
        for stream in (serve.proc.stdout, serve.proc.stderr):
            if stream is not None:
                stream.close()


def write_config(tmp_path: Path, origin: str, db: Path) -> Path:
    config = tmp_path / "serve.toml"
    config.write_text(
        f'[server]\ndb = "{db}"\nmiss_wait = 60.0\n'
        f'[browser]\nconcurrency = 7\nexecutable = "{require_chromium()}"\n'  # 6 miss slots
        "javascript_timeout = 0.2\nrender_timeout = 60.0\nblock_resources = []\n"
        f'[[site]]\nname = "shop"\norigin = "{origin}"\nseeds = []\nsitemaps = []\n'
        "wait_for_capture_ready = true\n"
        'devices = "mobile"\n'  # one render a capture: the 6 miss slots are 6 captures
    )
    return config


@pytest.mark.parametrize("workers", ["1", "2"], ids=["1-worker", "2-workers"])
@pytest.mark.parametrize("crawler", [False, True], ids=["no-crawler", "crawler"])
def test_sigterm_answers_every_waiting_bot_and_gives_their_paths_back(
    tmp_path, crawler, workers
):
    origin = SlowOrigin()
    db = tmp_path / "serve.db"
    with serve_asgi(origin.app) as origin_url:
        config = write_config(tmp_path, origin_url, db)
        flags = ("--workers", workers) + (() if crawler else ("--no-crawler",))
        with serving("--config", str(config), *flags) as serve:
            base = serve.url()

            def bot(path: str) -> httpx.Response:
                return httpx.get(base + path, headers={"User-Agent": BOT}, timeout=90)

            with ThreadPoolExecutor(len(PATHS)) as pool:
                answers = [pool.submit(bot, path) for path in PATHS]
                # Every one is being rendered, its bot waiting for the capture.
                assert wait_until(lambda: all(origin.renders[p] for p in PATHS), 60), serve.stderr
                assert not any(a.done() for a in answers)
                code = serve.stop()
                responses = [a.result(timeout=60) for a in answers]
            err = serve.stderr

    # uvicorn ends by raising the signal again once it has shut down.
    assert code in (0, -signal.SIGTERM), err
    for path, response in zip(PATHS, responses, strict=True):
        assert response.status_code == 200, (path, response.status_code, err)
        assert response.headers["x-snapshotd-cache"] == "BYPASS", path
        assert f"origin page {path}" in response.text
    assert dict(origin.passed) == dict.fromkeys(PATHS, 1)
    assert "Traceback" not in err, err
    rows = _rows(db, "SELECT path, state, attempts, error FROM paths ORDER BY path")
    assert rows == [(path, "pending", 0, None) for path in PATHS], err


def test_serve_without_crawler_reclaims_expired_leases(tmp_path):
    with serve_asgi(SlowOrigin().app) as origin_url:
        db = tmp_path / "leases.db"
        config = write_config(tmp_path, origin_url, db)
        with serving("--config", str(config), "--no-crawler") as serve:
            base = serve.url()
            assert httpx.get(f"{base}/_snapshotd/healthz").status_code == 200

            async def lease(owner: str, seconds: float, paths: list[str]) -> None:
                store = SQLiteStore(str(db))
                await store.open()
                try:
                    for path in paths:
                        await store.enqueue("shop", path, 1)
                        assert await store.claim_path("shop", path, owner, seconds)
                finally:
                    await store.close()

            # Taken after start, so only the periodic reclaim can give them back.
            dead = [f"/dead/{n}" for n in range(20)]
            asyncio.run(lease("elsewhere:1:dead", 0.5, dead))
            asyncio.run(lease("elsewhere:2:alive", 3600, ["/alive"]))

            def states() -> dict[str, str]:
                return {str(p): str(s) for p, s in _rows(db, "SELECT path, state FROM paths")}

            assert wait_until(
                lambda: all(states()[p] == "pending" for p in dead), 30
            ), (states(), serve.stderr)
            assert states()["/alive"] == "processing"
            assert serve.stop() in (0, -signal.SIGTERM)
        err = serve.stderr
    assert "released 20 expired leases" in err
    assert "Traceback" not in err, err


async def test_a_capture_failing_as_the_renderer_closes_goes_back_to_pending(tmp_path):
    from snapshotd.capture.service import CaptureService
    from snapshotd.config.settings import BrowserSettings, Settings, SiteSettings
    from snapshotd.render import BrowserPool

    origin = SlowOrigin()
    with serve_asgi(origin.app) as origin_url:
        site = SiteSettings(name="shop", origin=origin_url, wait_for_capture_ready=True)
        browser = BrowserSettings(
            executable=require_chromium(), render_timeout=60.0, block_resources=()
        )
        settings = Settings(browser=browser, sites=(site,))
        store = SQLiteStore(str(tmp_path / "cut.db"))
        await store.open()
        pool = BrowserPool(browser)
        await pool.start()
        capture = CaptureService(settings, store, pool)
        try:
            for path in ("/rendering", "/claimed"):
                await store.enqueue("shop", path, 3)
            rendering = asyncio.ensure_future(capture.capture_now(site, "/rendering"))
            claimed = await store.claim_path("shop", "/claimed", capture.owner, 60)
            assert claimed is not None
            while not origin.renders["/rendering"]:
                await asyncio.sleep(0.05)
            capture.stop()
            await pool.close()  # under the capture: it ends as a failure
            outcome = await rendering
            assert outcome is not None and outcome.cut_short and not outcome.stored
            # Claimed before the stop, run after it: not rendered at all.
            late = await capture.run(site, claimed)
            assert late.cut_short
            assert await capture.capture_now(site, "/rendering") is None
        finally:
            await capture.close()
            await pool.close()
        for path in ("/rendering", "/claimed"):
            record = await store.get_path("shop", path)
            assert (record.state, record.attempts, record.error) == ("pending", 0, None), path
        await store.close()
    assert origin.renders["/claimed"] == 0
