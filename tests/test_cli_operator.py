"""The command line as an operator meets it: help, version, one-line errors for a Chromium or
a driver that cannot start, a port in use, a worker without a site, a seed without its "/",
a crawl with nothing due, log formats. Every test runs the real command."""

from __future__ import annotations

import argparse
import json
import re
import shutil
import socket
import subprocess
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.responses import HTMLResponse
from starlette.routing import Route

from snapshotd.cli.parser import build_parser
from tests.chromium import require_chromium, wait_until
from tests.servers import serve_asgi
from tests.test_cli import one_line_error, run

MISSING = "libsnapshotd-test-missing.so.1"
ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ")


def _missing_library(tmp: Path, binary: str) -> str:
    """A copy of a real ELF binary that needs a library no system has."""
    if shutil.which("patchelf") is None:
        pytest.fail("patchelf is needed (scripts/ensure-test-tools.sh installs it)")
    copy = tmp / Path(binary).name
    shutil.copy2(binary, copy)
    subprocess.run(["patchelf", "--add-needed", MISSING, str(copy)], check=True)
    return str(copy)


@pytest.fixture(scope="module")
def broken_chromium(tmp_path_factory) -> str:
    """The real Chromium binary, made to need a missing shared library."""
    found = require_chromium()
    real = found
    with open(found, "rb") as fh:
        if fh.read(2) == b"#!":  # Debian's wrapper script: the binary it runs
            text = Path(found).read_text()
            real = next(w for w in text.split() if w.startswith("/") and "chrom" in w)
    return _missing_library(tmp_path_factory.mktemp("chromium"), real)


@pytest.fixture(scope="module")
def broken_driver(tmp_path_factory) -> str:
    """Playwright's own Node.js driver binary, made to need a missing shared library."""
    from playwright._impl._driver import compute_driver_executable

    node, _cli = compute_driver_executable()
    return _missing_library(tmp_path_factory.mktemp("driver"), node)


def test_help_is_written_for_operators():
    proc = run("--help")
    assert proc.returncode == 0
    out = proc.stdout
    assert "SPEC" not in out and "``" not in out
    assert "examples:" in out
    assert "snapshotd serve --origin http://127.0.0.1:3000" in out
    assert "SNAPSHOTD_API_TOKEN" in out


def test_every_flag_has_help():
    parser = build_parser()
    unexplained = []

    def walk(p, name):  # type: ignore[no-untyped-def]
        for action in p._actions:
            if action.help is None and action.option_strings:
                unexplained.append(f"{name} {action.option_strings[0]}")
            if isinstance(action, argparse._SubParsersAction):
                for sub_name, sub in action.choices.items():
                    walk(sub, f"{name} {sub_name}")

    walk(parser, "snapshotd")
    assert unexplained == []
    serve = run("serve", "--help").stdout
    for flag in ("--host", "--port"):
        line = next(line for line in serve.splitlines() if line.strip().startswith(flag))
        assert len(line.split()) > 2, line


def test_version():
    from importlib.metadata import version

    proc = run("--version")
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"snapshotd {version('snapshotd')}"


def test_a_chromium_that_cannot_start_is_one_line_in_capture(tmp_path, broken_chromium):
    line = one_line_error(
        run("capture", "http://127.0.0.1:9/", env={"SNAPSHOTD_CHROMIUM": broken_chromium})
    )
    assert line.startswith(f"snapshotd: chromium {broken_chromium} cannot start: ")
    assert MISSING in line


def test_a_chromium_that_cannot_start_is_one_line_in_serve(tmp_path, broken_chromium):
    proc = run(
        "serve", "--origin", "http://127.0.0.1:9", "--port", "0", "--db",
        str(tmp_path / "s.db"), env={"SNAPSHOTD_CHROMIUM": broken_chromium},
    )
    line = one_line_error(proc)
    assert line.startswith(f"snapshotd: chromium {broken_chromium} cannot start: ")
    assert MISSING in line


def test_a_chromium_that_cannot_start_is_one_line_in_crawl(tmp_path, broken_chromium):
    proc = run(
        "crawl", "--origin", "http://127.0.0.1:9", "--db", str(tmp_path / "c.db"),
        env={"SNAPSHOTD_CHROMIUM": broken_chromium},
    )
    line = one_line_error(proc)
    assert line.startswith(f"snapshotd: chromium {broken_chromium} cannot start: ")
    assert MISSING in line


def test_a_driver_missing_a_library_is_named_in_one_line(tmp_path, broken_driver):
    require_chromium()
    line = one_line_error(
        run("capture", "http://127.0.0.1:9/", env={"PLAYWRIGHT_NODEJS_PATH": broken_driver})
    )
    assert line.startswith("snapshotd: Playwright's driver cannot start: ")
    assert MISSING in line


def test_a_port_in_use_is_one_line_before_anything_listens(tmp_path):
    require_chromium()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = run(
            "serve", "--origin", "http://127.0.0.1:9", "--port", str(port), "--db",
            str(tmp_path / "p.db"),
        )
    line = one_line_error(proc)
    assert line == f"snapshotd: cannot listen on 127.0.0.1:{port}: address already in use"


def test_worker_takes_an_origin(tmp_path):
    assert "--origin" in run("worker", "--help").stdout


def test_a_seed_without_its_slash_says_so(tmp_path):
    line = one_line_error(
        run("crawl", "--origin", "http://127.0.0.1:9", "--seed", "items/3", "--db",
            str(tmp_path / "c.db"))
    )
    assert line == (
        "snapshotd: --seed items/3: a seed is a path starting with '/' (did you mean "
        "/items/3?) or a URL of a configured site"
    )
    line = one_line_error(
        run("crawl", "--origin", "http://127.0.0.1:9", "--seed", "http://127.0.0.2:9/x",
            "--db", str(tmp_path / "c.db"))
    )
    assert line == "snapshotd: --seed http://127.0.0.2:9/x: belongs to no configured site"


def _site() -> Starlette:
    async def page(request):  # type: ignore[no-untyped-def]
        n = request.path_params.get("n", "0")
        links = "".join(f'<a href="/p/{i}">{i}</a>' for i in range(3))
        return HTMLResponse(f"<html><body><h1>page {n}</h1>{links}</body></html>")

    return Starlette(routes=[Route("/", page), Route("/p/{n}", page)])


@pytest.mark.browser
def test_a_second_crawl_says_the_pages_are_fresh_and_logs_are_iso_utc(tmp_path):
    require_chromium()
    db = str(tmp_path / "crawl.db")
    with serve_asgi(_site()) as origin:
        first = run("crawl", "--origin", origin, "--db", db)
        assert first.returncode == 0, first.stderr
        assert "captured    4" in first.stdout
        logged = [line for line in first.stderr.splitlines() if " INFO " in line]
        assert logged and all(ISO_UTC.match(line) for line in logged), first.stderr
        second = run("crawl", "--origin", origin, "--db", db, "--log-format", "json")
    assert second.returncode == 0, second.stderr
    assert "captured    0" in second.stdout
    assert "nothing to capture: all 4 pages of default are fresh" in second.stdout
    records = [json.loads(line) for line in second.stderr.splitlines() if line.startswith("{")]
    assert records, second.stderr
    for record in records:
        assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", record["time"])
        assert record["level"] in ("DEBUG", "INFO", "WARNING", "ERROR")
        assert record["logger"].startswith("snapshotd") and record["message"]


@pytest.mark.browser
def test_each_snapshot_request_is_one_access_line(tmp_path):
    import httpx

    from tests.test_serve_process import serving

    require_chromium()
    bot = "Mozilla/5.0 (compatible; GPTBot/1.2; +https://openai.com/gptbot)"
    with serve_asgi(_site()) as origin, serving(
        "--origin", origin, "--db", str(tmp_path / "a.db"), "--no-crawler",
        "--log-format", "json",
    ) as serve:
        base = serve.url()
        with httpx.Client(base_url=base, timeout=60) as client:
            assert client.get("/p/1", headers={"user-agent": bot}).status_code == 200
            assert client.get("/p/1", headers={"user-agent": bot}).status_code == 200
            assert client.get("/p/1?_escaped_fragment_=").status_code == 200
            client.get("/p/2", headers={"user-agent": "Mozilla/5.0 Firefox/120"})  # a person

        def access() -> list[dict]:
            lines = [json.loads(line) for line in serve.lines if line.startswith("{")]
            return [r for r in lines if r["logger"] == "snapshotd.access"]

        assert wait_until(lambda: len(access()) == 3), serve.stderr
    got = [(r["bot"], r["site"], r["path"], r["result"], r["status"]) for r in access()]
    assert got == [
        ("GPTBot", "default", "/p/1", "MISS", 200),
        ("GPTBot", "default", "/p/1", "HIT", 200),
        ("-", "default", "/p/1", "HIT", 200),
    ]
    assert all(isinstance(r["ms"], int) and r["ms"] >= 0 for r in access())
    assert access()[0]["message"].startswith("GPTBot default /p/1 MISS 200 ")


def test_log_lines_above_the_crawl_progress_bar_have_iso_utc_times():
    import io
    import logging
    import time

    from snapshotd.cli.crawl import _Progress

    out = io.StringIO()
    with _Progress(out, tty=True):
        logging.getLogger("snapshotd.crawler").warning("robots.txt unreachable site=shop")
    line = next(line for line in out.getvalue().splitlines() if "robots.txt" in line)
    today = time.strftime("%Y-%m-%d", time.gmtime())
    assert re.search(rf"{today}T\d\d:\d\d:\d\d\.\d{{3}}Z", line), line


def test_log_lines_go_to_stderr_as_it_is_when_they_are_written(monkeypatch) -> None:
    import io
    import logging

    from snapshotd.observe.logs import setup_logging

    first = io.StringIO()
    monkeypatch.setattr("sys.stderr", first)
    monkeypatch.setattr(logging, "_srcfile", logging._srcfile)  # type: ignore[attr-defined]
    setup_logging()
    first.close()  # a stream replaced and closed since, as a test runner does
    second = io.StringIO()
    monkeypatch.setattr("sys.stderr", second)
    logging.getLogger("snapshotd.test").info("after")
    assert second.getvalue().endswith("INFO snapshotd.test after\n")


def test_log_lines_of_one_turn_of_the_event_loop_go_out_in_one_write(monkeypatch) -> None:
    import asyncio
    import io
    import logging

    from snapshotd.observe.logs import setup_logging

    writes: list[str] = []

    class Stderr(io.StringIO):
        def write(self, text: str) -> int:
            writes.append(text)
            return len(text)

    monkeypatch.setattr("sys.stderr", Stderr())
    monkeypatch.setattr(logging, "_srcfile", logging._srcfile)  # type: ignore[attr-defined]
    setup_logging()
    log = logging.getLogger("snapshotd.test")

    async def serve() -> None:
        for n in range(3):
            log.info("request %d", n)
        assert writes == []  # at the end of this turn
        await asyncio.sleep(0)
        assert len(writes) == 1
        assert [line.rsplit(" ", 1)[1] for line in writes[0].splitlines()] == ["0", "1", "2"]
        log.info("request 3")
        await asyncio.sleep(0)
        assert len(writes) == 2 and writes[1].endswith("request 3\n")
        log.info("the last line of the loop")

    asyncio.run(serve())
    assert writes[-1].endswith("the last line of the loop\n")
    log.info("outside any loop")  # at once
    assert writes[-1].endswith("outside any loop\n")
    assert sum(text.count("\n") for text in writes) == 6


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_an_event_line_is_the_same_written_directly_or_through_a_log_record(
    monkeypatch, fmt: str
) -> None:
    import io
    import logging

    from snapshotd.observe import logs
    out = io.StringIO()
    monkeypatch.setattr("sys.stderr", out)
    monkeypatch.setattr(logging, "_srcfile", logging._srcfile)  # type: ignore[attr-defined]
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])  # the test runner's own handlers, for a moment
    logs.setup_logging(fmt=fmt)
    access = logging.getLogger("snapshotd.access")
    assert logs._only_handler(access) is not None
    fields = {"bot": "Googlebot", "site": "shop", "path": "/p/é", "status": 200, "ms": 3}
    logs.info(access, "Googlebot shop /p/é HIT 200 3ms", fields)  # the handler's own way
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    keep = Keep()
    access.addHandler(keep)  # another handler: through a LogRecord, which it gets too
    try:
        logs.info(access, "Googlebot shop /p/é HIT 200 3ms", fields)
    finally:
        access.removeHandler(keep)
    for handler in logging.getLogger().handlers:
        handler.flush()
    direct, through = out.getvalue().splitlines()
    assert records and records[0].path == "/p/é"  # type: ignore[attr-defined]
    if fmt == "json":
        first, second = json.loads(direct), json.loads(through)
        assert first.pop("time") and second.pop("time")
        assert list(first.items()) == list(second.items()) == [
            ("level", "INFO"), ("logger", "snapshotd.access"),
            ("message", "Googlebot shop /p/é HIT 200 3ms"), *fields.items(),
        ]
    else:
        assert direct.split(" ", 1)[1] == through.split(" ", 1)[1] == (
            "INFO snapshotd.access Googlebot shop /p/é HIT 200 3ms")
