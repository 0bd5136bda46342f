"""``snapshotd crawl``, ``worker`` and ``serve`` as processes: kill -9, restart, SIGTERM, the
console URL ``serve`` logs."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import httpx
import pytest

from snapshotd.render.procs import descendants
from tests.chromium import alive, require_chromium, wait_until
from tests.servers import serve_asgi
from tests.sites.shop import RULES, Shop

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parent.parent


def write_config(
    tmp_path: Path, origin: str, db: Path | str, *, sitemaps: str = '["/sitemap_index.xml.gz"]'
) -> Path:
    config = tmp_path / "snapshotd.toml"
    config.write_text(
        f'[server]\ndb = "{db}"\n'
        f'[browser]\nconcurrency = 2\nexecutable = "{require_chromium()}"\n'
        "javascript_timeout = 0.2\nrender_timeout = 60.0\nblock_resources = []\n"
        f'[[site]]\nname = "shop"\norigin = "{origin}"\nrules = "{RULES}"\n'
        f'seeds = ["/"]\nsitemaps = {sitemaps}\nignore = ["/admin/"]\n'
        # One render a capture, none to learn a not-found view: these tests count the
        # origin's documents.
        'devices = "mobile"\nsoft_404 = "off"\n'
    )
    return config


def workers_under_test() -> int:
    """The worker processes of each ``serve`` these tests start: ``$SNAPSHOTD_TEST_WORKERS``,
    else 1 (so that the whole suite can run both ways)."""
    return int(os.environ.get("SNAPSHOTD_TEST_WORKERS", "1"))


def snapshotd(*args: str, stderr: IO[str] | int = subprocess.PIPE) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SNAPSHOTD_WORKERS": str(workers_under_test())}
    env.pop("SNAPSHOTD_CONFIG", None)
    env.pop("SNAPSHOTD_API_TOKEN", None)
    return subprocess.Popen(
        [sys.executable, "-m", "snapshotd", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        start_new_session=True,
    )


def tree(pid: int) -> list[int]:
    """``pid`` and every process under it (the Playwright driver, Chromium's processes)."""
    return [pid, *(p.pid for p in descendants(pid))]


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not [p for p in pids if alive(p)], 10)


def _rows(db: Path | str, sql: str) -> list[tuple[object, ...]]:
    """Rows of ``sql`` from a SQLite file or a PostgreSQL URL, read while a crawl may write."""
    if isinstance(db, str):
        import asyncpg

        async def fetch() -> list[tuple[object, ...]]:
            conn = await asyncpg.connect(db)
            try:
                return [tuple(r) for r in await conn.fetch(sql)]
            except asyncpg.UndefinedTableError:  # the schema is not there yet
                return []
            finally:
                await conn.close()

        return asyncio.run(fetch())
    if not db.exists():
        return []
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        return conn.execute(sql).fetchall()
    except sqlite3.OperationalError:  # the schema is not there yet
        return []
    finally:
        conn.close()


def processed(db: Path | str) -> dict[str, float]:
    """Captured paths and their capture times."""
    rows = _rows(db, "SELECT path, captured_at FROM paths WHERE state = 'processed'")
    return {str(p): float(t) for p, t in rows}  # type: ignore[arg-type]


def states(db: Path | str) -> dict[str, str]:
    return {str(p): str(s) for p, s in _rows(db, "SELECT path, state FROM paths")}


@pytest.fixture(params=["sqlite", "postgres"])
def crawl_db(request, tmp_path) -> Iterator[Path | str]:  # type: ignore[no-untyped-def]
    """Where a crawl keeps its state: a SQLite file, or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        yield tmp_path / "crawl.db"
        return
    from tests.conftest import drop_postgres_schema, postgres_schema

    name, url = asyncio.run(postgres_schema())
    try:
        yield url
    finally:
        asyncio.run(drop_postgres_schema(name))


def test_kill_9_mid_crawl_then_restart_loses_nothing_and_doubles_nothing(tmp_path, crawl_db):
    site = Shop(delay=0.25)  # slow enough to be caught midway
    with serve_asgi(site.app) as origin:
        db = crawl_db
        config = write_config(tmp_path, origin, db)
        first = snapshotd("crawl", "--config", str(config))
        processes = [first.pid]
        try:
            assert wait_until(lambda: len(processed(db)) >= 8, 60)
            processes = tree(first.pid)
            os.kill(first.pid, signal.SIGKILL)
            first.wait(10)
        finally:
            kill_all(processes)  # what the killed process left running
            first.communicate(timeout=10)
        before = processed(db)
        hits_before = site.counts()
        in_flight = {p for p, s in states(db).items() if s == "processing"}
        assert 8 <= len(before) < 28

        second = snapshotd("crawl", "--config", str(config))
        try:
            out, err = second.communicate(timeout=90)
        finally:
            kill_all(tree(second.pid))
        assert second.returncode == 0, err
        assert "captured" in out

    after = processed(db)
    final = states(db)
    # The full crawl's 30 captures, less the two paths that test asks for first.
    unprocessed = {p: s for p, s in final.items() if s != "processed"}
    assert len(final) - len(unprocessed) == 28, (unprocessed, err)
    assert [p for p, s in final.items() if s not in ("processed", "error", "ignored")] == []
    # Nothing stored before the kill was captured again...
    assert {p: after[p] for p in before} == before
    hits = site.counts()
    for path in before:
        document = path.split("#", 1)[0]
        if document not in ("/spa", "/target"):
            assert hits[document] == hits_before[document] == 1, path
    # ...and a path fetched twice is one the kill interrupted before it was stored.
    twice = {p for p, n in hits.items() if n > 1} - {"/spa", "/target"}
    assert twice <= {p.split("#", 1)[0] for p in in_flight}
    assert len(twice) <= 2


def test_worker_stops_cleanly_on_sigterm(tmp_path):
    site = Shop()
    with serve_asgi(site.app) as origin:
        db = tmp_path / "worker.db"
        config = write_config(tmp_path, origin, db)
        worker = snapshotd("worker", "--config", str(config))
        processes = [worker.pid]
        try:
            assert wait_until(lambda: len(processed(db)) >= 3, 60)
            processes = tree(worker.pid)
            assert len(processes) > 2  # Python, the Playwright driver, Chromium's processes
            worker.send_signal(signal.SIGTERM)
            out, err = worker.communicate(timeout=30)
            assert worker.returncode == 0, err
            assert "Traceback" not in err
            assert "#token=" not in err  # no API here, so no token is drawn
            assert wait_until(lambda: not [p for p in processes if alive(p)], 10)
        finally:
            kill_all(processes)
            if worker.returncode is None:
                worker.communicate(timeout=10)
    assert "processing" not in states(db).values()


def test_crawl_exit_status_when_nothing_could_be_captured(tmp_path):
    with serve_asgi(Shop().app) as origin:
        db = tmp_path / "none.db"
        config = write_config(tmp_path, origin, db, sitemaps="[]")
        crawl = snapshotd("crawl", "--config", str(config), "--seed", "/broken")
        try:
            out, err = crawl.communicate(timeout=60)
        finally:
            kill_all(tree(crawl.pid))
        assert crawl.returncode == 1, err
        assert "captured    0" in out and "errors      1" in out
        assert "Traceback" not in err

        bad = snapshotd("crawl", "--config", str(config), "--max-pages", "0")
        out, err = bad.communicate(timeout=30)
        assert bad.returncode == 2
        assert err.strip().splitlines() == ["snapshotd: --max-pages must be at least 1"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_serve_without_a_token_logs_the_console_url_once_and_takes_only_its_token(tmp_path):
    with serve_asgi(Shop().app) as origin:
        config = write_config(tmp_path, origin, tmp_path / "serve.db")
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        log_file = tmp_path / "serve.log"
        with log_file.open("w") as log:
            serve = snapshotd(
                "serve", "--config", str(config), "--no-crawler", "--port", str(port), stderr=log
            )
        processes = [serve.pid]
        try:
            health = f"{base}/_snapshotd/healthz"
            assert wait_until(lambda: _answers(health), 60), log_file.read_text()
            processes = tree(serve.pid)
            lines = [line for line in log_file.read_text().splitlines() if "#token=" in line]
            assert len(lines) == 1, lines
            url = lines[0].split(" console: ", 1)[1]
            assert url.startswith(f"{base}/_snapshotd/console#token=")
            token = url.split("#token=", 1)[1]
            sites = f"{base}/_snapshotd/api/v1/sites"
            assert httpx.get(sites, trust_env=False).status_code == 401
            auth = {"Authorization": f"Bearer {token}"}
            r = httpx.get(sites, headers=auth, trust_env=False)
            assert r.status_code == 200 and r.json()["sites"][0]["name"] == "shop"
            serve.send_signal(signal.SIGTERM)
            serve.communicate(timeout=30)
        finally:
            kill_all(processes)
            if serve.returncode is None:
                serve.communicate(timeout=10)
    err = log_file.read_text()
    assert "Traceback" not in err
    assert err.count("#token=") == 1


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2, trust_env=False).status_code == 200
    except httpx.TransportError:
        return False
