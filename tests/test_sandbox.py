"""Chromium's sandbox: the decision, and a real sandboxed render as a non-root user.

The render runs in a process of its own as that user (``nobody`` when the tests run as
root), its only target a page served on 127.0.0.1.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from playwright.async_api import Error as PlaywrightError
from pytest_httpserver import HTTPServer

from snapshotd.config.loading import load_settings
from snapshotd.config.settings import BrowserSettings
from snapshotd.config.values import ConfigError
from snapshotd.render import BrowserPool
from snapshotd.render import pool as pool_module
from snapshotd.render.chromium import BrowserCannotStart, sandbox_choice
from tests.chromium import require_chromium

REPO = Path(__file__).resolve().parent.parent


def test_the_sandbox_is_on_unless_root_or_turned_off() -> None:
    assert sandbox_choice("auto", 10001) == (True, "running as uid 10001")
    assert sandbox_choice("auto", 0)[0] is False
    assert sandbox_choice("on", 0)[0] is True
    assert sandbox_choice("off", 10001)[0] is False


# Run as the non-root user: a pool that must run Chromium in its sandbox renders the page,
# and says how its renderers run (seccomp mode 2: a filter, the sandbox's).
_RENDER = """
import asyncio, json, sys
from snapshotd.config.settings import BrowserSettings, SiteSettings
from snapshotd.render import BrowserPool
from snapshotd.render.procs import descendants

async def main():
    pool = BrowserPool(BrowserSettings(concurrency=1, sandbox="on", render_timeout=60))
    await pool.start()
    try:
        origin = sys.argv[1]
        result = await pool.capture(origin + "/", SiteSettings(origin=origin))
        modes = []
        for proc in descendants():
            if "--type=renderer" in proc.cmdline:
                status = open(f"/proc/{proc.pid}/status").read()
                modes += [line.split()[1] for line in status.splitlines()
                          if line.startswith("Seccomp:")]
        browsers = [p.cmdline for p in descendants() if "--remote-debugging-pipe" in p.cmdline]
    finally:
        await pool.close()
    print(json.dumps({"error": result.error, "html": result.html, "modes": modes,
                      "no_sandbox": any("--no-sandbox" in b for b in browsers)}))

asyncio.run(main())
"""


def _as_user() -> list[str]:
    """The command prefix that runs as a non-root user; skips where there is none."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root and no setpriv to become a non-root user")
    return [setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups"]


def test_a_non_root_user_renders_a_page_in_the_sandbox() -> None:
    require_chromium()
    try:
        namespaces = int(Path("/proc/sys/user/max_user_namespaces").read_text())
    except OSError:
        namespaces = 0
    if namespaces == 0:
        pytest.skip("this kernel gives no user namespaces: Chromium's sandbox cannot start")
    prefix = _as_user()
    server = HTTPServer(host="127.0.0.1", port=0)
    server.expect_request("/").respond_with_data(
        "<!doctype html><p id=p>plain</p><script>p.textContent = 'sandboxed page'</script>",
        content_type="text/html",
    )
    server.start()
    home = tempfile.mkdtemp()
    try:
        if prefix:
            shutil.chown(home, "nobody")
        env = {"PATH": os.environ.get("PATH", ""), "HOME": home, "TMPDIR": home}
        proc = subprocess.run(
            [*prefix, sys.executable, "-c", _RENDER, f"http://127.0.0.1:{server.port}"],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False,
        )
    finally:
        server.clear()
        server.stop()
        shutil.rmtree(home, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = json.loads(proc.stdout.strip().splitlines()[-1])
    assert said["error"] is None and "sandboxed page" in said["html"], said
    assert not said["no_sandbox"], said
    assert said["modes"] and all(mode == "2" for mode in said["modes"]), said


def test_the_sandbox_setting_is_one_of_three_words(tmp_path) -> None:
    config = tmp_path / "snapshotd.toml"
    config.write_text('[browser]\nsandbox = "maybe"\n')
    with pytest.raises(ConfigError, match="browser.sandbox: expected one of auto, on, off"):
        load_settings(config, env={})
    assert load_settings(None, env={"SNAPSHOTD_SANDBOX": "off"}).browser.sandbox == "off"
    assert load_settings(None, env={}).browser.sandbox == "auto"


class _Launcher:
    """Playwright's ``chromium.launch`` where the sandbox cannot start: what each launch
    asked for is kept."""

    def __init__(self) -> None:
        self.asked: list[bool] = []

    async def launch(self, **options: Any) -> Any:
        if options["executable_path"] != sys.executable:  # the recorder of Playwright's switches
            raise PlaywrightError("[pid=1][err] not a browser")
        self.asked.append(options["chromium_sandbox"])
        if options["chromium_sandbox"]:
            raise PlaywrightError("[pid=1][err] No usable sandbox!")
        return SimpleNamespace(is_connected=lambda: True, close=_nothing)


async def _nothing() -> None:
    return None


class _Playwright:
    def __init__(self, launcher: _Launcher) -> None:
        self.chromium = launcher

    async def __aenter__(self) -> _Playwright:
        return self

    async def __aexit__(self, *_: Any) -> None:
        return None


@pytest.mark.asyncio
@pytest.mark.parametrize(("setting", "asked", "starts"), [
    ("auto", [True, False, False], True), ("on", [True], False), ("off", [False, False], True),
])
async def test_auto_falls_back_once_when_the_sandbox_cannot_start(
    monkeypatch, caplog, setting, asked, starts
) -> None:
    monkeypatch.setattr(pool_module.os, "geteuid", lambda: 10001)
    launcher = _Launcher()
    pool = BrowserPool(
        BrowserSettings(executable=sys.executable, sandbox=setting),
        playwright_factory=lambda: _Playwright(launcher),
    )
    caplog.set_level(logging.INFO, logger="snapshotd")
    if not starts:
        with pytest.raises(BrowserCannotStart, match="No usable sandbox"):
            await pool.start()
        assert launcher.asked == asked
        return
    await pool.start()
    assert pool._current is not None
    pool._retire(pool._current)  # the next launch keeps the first one's decision
    await pool._acquire()
    assert launcher.asked == asked and pool.sandbox is False
    said = [r.getMessage() for r in caplog.records if "sandbox" in r.getMessage()]
    assert said[-1].startswith("chromium runs without its sandbox") and len(said) <= 2
    await pool.close()
