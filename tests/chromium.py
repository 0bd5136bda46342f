"""Test helpers for real Chromium: find it (skip locally, fail under CI), serve test pages."""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer
from werkzeug.wrappers import Request, Response

from snapshotd.config.settings import BrowserSettings
from snapshotd.render import ChromiumNotFound, find_chromium
from snapshotd.render.procs import descendants

PAGES = Path(__file__).parent / "pages"


def require_chromium() -> str:
    """Chromium's path; without one, a skip on a laptop and a failure under ``CI=true``."""
    try:
        return find_chromium(BrowserSettings())
    except ChromiumNotFound as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"Chromium is required under CI: {exc}")
        pytest.skip(str(exc))


def chromium_pids(root: int | None = None) -> list[int]:
    """Chromium processes below ``root`` (default: this process)."""
    return [p.pid for p in descendants(root) if "chrom" in p.cmdline.split(" ", 1)[0]]


def alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


def wait_until(check: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return check()


class Sentinel:
    """A server that must never be reached: it counts every request it gets."""

    def __init__(self, host: str) -> None:
        self.hits: list[str] = []
        self._lock = threading.Lock()
        self.server = HTTPServer(host=host, port=0, threaded=True)
        self.server.expect_request(re.compile(".*")).respond_with_handler(self._record)

    def _record(self, request: Request) -> Response:
        with self._lock:
            self.hits.append(request.url)
        return Response("sentinel", content_type="text/html")

    @property
    def origin(self) -> str:
        return f"http://{self.server.host}:{self.server.port}"

    def start(self) -> None:
        self.server.start()

    def stop(self) -> None:
        self.server.clear()
        if self.server.is_running():
            self.server.stop()


def page_handler(substitutions: dict[str, str]) -> Callable[[Request], Response]:
    """Serve ``tests/pages/<name>.html`` at ``/p/<name>`` with ``{NAME}`` placeholders filled."""

    def handle(request: Request) -> Response:
        name = request.path.rsplit("/", 1)[-1]
        path = PAGES / (name if "." in name else f"{name}.html")
        if not path.is_file():
            return Response("no such page", status=404)
        text = path.read_text()
        for key, value in substitutions.items():
            text = text.replace("{" + key + "}", value)
        kind = "text/javascript" if path.suffix == ".js" else "text/html; charset=utf-8"
        return Response(text, content_type=kind)

    return handle


def recording(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, Any]]:
    """Each capture's slot and what its page told it (its ``Signals``), as the capture ends."""
    from snapshotd.render.slot import Slot

    kept: list[tuple[Any, Any]] = []
    capture = Slot.capture

    async def recorded(self: Slot, url: str, site: Any, shot: Any = None) -> Any:
        try:
            return await capture(self, url, site, shot)
        finally:
            kept.append((self, self._signals))

    monkeypatch.setattr(Slot, "capture", recorded)
    return kept


def rules_met(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The readiness rules (``settled``, ``limit``, ``hard``, ``quiet``) met in the captures
    made from now until the test ends, by name, in the order they were met: what ended a capture's
    wait, whatever time it took on this machine (a rule the page's own readiness beat is
    cancelled, never met)."""
    from snapshotd.render import readiness

    met: list[str] = []

    def watched(name: str) -> Callable[..., Any]:
        rule = getattr(readiness, name)

        async def run(*args: Any) -> None:
            await rule(*args)
            met.append(name)

        return run

    for name in ("settled", "limit", "hard", "quiet"):
        monkeypatch.setattr(readiness, name, watched(name))
    return met
