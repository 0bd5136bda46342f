"""What serve's protocol takes from uvicorn (``snapshotd.server.uvicorn_contract``): this uvicorn is
one it was tested with and has every part it uses, pyproject.toml admits those versions
alone, and a uvicorn that is not one of them makes ``serve`` run uvicorn's plain protocol,
which answers bots and people alike, over real sockets."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from packaging.requirements import Requirement
from uvicorn.protocols.http import flow_control, httptools_impl

from snapshotd.config.settings import Settings, SiteSettings
from snapshotd.server import run as serving
from snapshotd.server import uvicorn_contract
from snapshotd.server.app import create_app
from snapshotd.server.exchange import MAX_HEAD
from tests.chromium import wait_until
from tests.servers import serve_asgi
from tests.test_protocol import BOT, HTML, ORIGIN_SAW, PERSON, origin_app
from tests.test_proxy_stream import NoRender, store_page

ROOT = Path(__file__).resolve().parent.parent
WHERE = "uvicorn.protocols.http.httptools_impl.HttpToolsProtocol"


@pytest.fixture
def said_afresh() -> Iterator[None]:
    """serve's choice of protocol is made once a process: made again in the test, and
    after it."""
    serving._plain_because.cache_clear()
    yield
    serving._plain_because.cache_clear()


def test_this_uvicorn_has_every_part_serve_protocol_uses() -> None:
    gone = uvicorn_contract.missing()
    assert gone == [], "serve's protocol uses what this uvicorn lacks: " + ", ".join(gone)
    assert uvicorn_contract.unsupported() is None, uvicorn_contract.unsupported()


def test_pyproject_admits_the_uvicorn_minors_serve_protocol_was_tested_with_alone() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (spec,) = [Requirement(d).specifier for d in declared if Requirement(d).name == "uvicorn"]
    (_, first), (_, last) = uvicorn_contract.TESTED
    assert spec.contains(f"0.{last}.99") and not spec.contains(f"0.{last + 1}.0"), spec
    assert spec.contains(f"0.{first}.99") and not spec.contains(f"0.{first - 1}.99"), spec


def test_a_missing_method_or_state_is_named(monkeypatch) -> None:
    monkeypatch.delattr(httptools_impl.HttpToolsProtocol, "_unsupported_upgrade_warning")
    made = flow_control.FlowControl.__init__

    def without_write_paused(self, transport):  # type: ignore[no-untyped-def]
        made(self, transport)
        del self.write_paused

    monkeypatch.setattr(flow_control.FlowControl, "__init__", without_write_paused)
    assert uvicorn_contract.missing() == [
        f"{WHERE}._unsupported_upgrade_warning", f"{WHERE}().flow.write_paused",
    ]
    reason = uvicorn_contract.unsupported()
    assert reason is not None and f"{WHERE}._unsupported_upgrade_warning" in reason


def test_a_protocol_that_fails_on_a_request_is_said_so(monkeypatch) -> None:
    def broken(self, url):  # type: ignore[no-untyped-def]
        raise TypeError("a changed callback")

    monkeypatch.setattr(httptools_impl.HttpToolsProtocol, "on_url", broken)
    (said,) = uvicorn_contract.missing()
    assert said == f"{WHERE} (did not take a request: HTTP/1.1 400 Bad Request)"


@pytest.mark.parametrize("version", ["0.29.0", "0.55.0", "1.0.0", "unknown"])
def test_a_uvicorn_outside_the_tested_minors_is_unsupported(monkeypatch, version) -> None:
    monkeypatch.setattr("uvicorn.__version__", version)
    reason = uvicorn_contract.unsupported()
    assert reason is not None and f"uvicorn {version} is not one" in reason


def test_a_uvicorn_lacking_a_part_serves_bots_and_people_the_plain_way(
    tmp_path, monkeypatch, caplog, said_afresh
) -> None:
    """The contract failing at start-up: uvicorn's plain h11 protocol serves, said in one
    line; a bot gets its snapshot, dated, and a person the origin's page."""
    monkeypatch.delattr(httptools_impl.HttpToolsProtocol, "_should_upgrade")
    db = str(tmp_path / "s.db")
    store_page(db, "/page", HTML)
    with serve_asgi(origin_app) as origin:
        app = create_app(
            Settings(db=db, sites=(SiteSettings(origin=origin),)),
            renderer=NoRender(), crawler=False,
        )
        assert serving.uvicorn_config(app, app.answer_at_once).http == "h11"
        with serve_asgi(app) as base, httpx.Client(base_url=base, trust_env=False) as c:
            ORIGIN_SAW.clear()
            bot = c.get("/page", headers={"User-Agent": BOT})
            person = c.get("/page", headers={"User-Agent": PERSON})
    assert bot.status_code == 200 and bot.text == HTML
    assert len(bot.headers.get_list("date")) == 1
    assert person.text == "origin /page" and ORIGIN_SAW == ["GET /page"]
    said = [r.getMessage() for r in caplog.records if "plain ASGI way" in r.getMessage()]
    assert len(said) == 1 and f"{WHERE}._should_upgrade" in said[0]


# ``snapshotd serve`` with a uvicorn newer than any serve's protocol was tested with.
NEWER_UVICORN = (
    "import sys, uvicorn\n"
    "uvicorn.__version__ = '0.99.0'\n"
    "from snapshotd.cli import main\n"
    "raise SystemExit(main(sys.argv[1:]))\n"
)


@contextmanager
def serve_with_newer_uvicorn(*args: str) -> Iterator[tuple[str, list[str], subprocess.Popen]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name in ("SNAPSHOTD_CONFIG", "SNAPSHOTD_API_TOKEN", "SNAPSHOTD_WORKERS"):
        env.pop(name, None)
    proc = subprocess.Popen(
        [sys.executable, "-c", NEWER_UVICORN, "serve", "--port", "0", "--no-crawler", *args],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    assert proc.stderr is not None
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)  # type: ignore[arg-type]
    reader.start()
    try:
        found: list[str] = []

        def listening() -> bool:
            found[:] = [m.group(1) for line in list(lines)
                        if (m := re.search(r"listening on (http://127\.0\.0\.1:\d+)", line))]
            return bool(found) or proc.poll() is not None

        assert wait_until(listening, 60) and found, "".join(lines)
        yield found[0], lines, proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        reader.join(10)
        proc.stderr.close()


@pytest.mark.parametrize("workers", ["1", "2"])
def test_serve_on_an_untested_uvicorn_answers_the_plain_way_and_says_so_once(
    tmp_path, workers
) -> None:
    """A real ``snapshotd serve`` (one process, or a supervisor and two workers): one line
    says the plain way is taken; bots get the stored snapshot, people the origin's page,
    each answer dated once, and a head over its bound is refused, 431 as serve's protocol
    refuses it, without reaching the origin."""
    db = str(tmp_path / "s.db")
    store_page(db, "/page", HTML)
    with serve_asgi(origin_app) as origin, serve_with_newer_uvicorn(
        "--origin", origin, "--db", db, "--workers", workers
    ) as (base, lines, proc):
        ORIGIN_SAW.clear()
        # Workers answer once each has started its browser: on a loaded machine, seconds
        # after the supervisor listens (the requests wait in the socket's queue till then).
        with httpx.Client(base_url=base, trust_env=False, timeout=120) as c:
            bots = [c.get("/page", headers={"User-Agent": BOT}) for _ in range(4)]
            person = c.get("/page", headers={"User-Agent": PERSON})
        host, port = base.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            filler = b"a" * (MAX_HEAD + 1024)
            sock.sendall(b"GET /page HTTP/1.1\r\nHost: x\r\nX-Filler: " + filler + b"\r\n\r\n")
            refused = sock.recv(65536)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) in (0, -signal.SIGTERM)  # uvicorn ends by raising it again
    assert all(b.status_code == 200 and b.text == HTML for b in bots)
    assert all(len(r.headers.get_list("date")) == 1 for r in [*bots, person])
    assert person.text == "origin /page" and ORIGIN_SAW == ["GET /page"]
    assert refused.startswith(b"HTTP/1.1 431 ") and ORIGIN_SAW == ["GET /page"]
    said = [line for line in lines if "plain ASGI way" in line]
    assert len(said) == 1, "".join(lines)
    assert "uvicorn 0.99.0 is not one serve's protocol was tested with" in said[0]
