"""Finding and launching Chromium; saying in one line why it, or Playwright's driver, cannot
start.

Invariants:
- pages run in Chromium's sandbox unless :func:`sandbox_choice` says otherwise: ``browser.
  sandbox`` ``on`` always (a browser that cannot start in it does not start), ``off`` never,
  ``auto`` (the default) unless the process runs as root, where Chromium refuses its sandbox;
  under ``auto`` a sandboxed launch that fails is tried once without it (:mod:`.pool`).
  Playwright adds ``--no-sandbox`` itself unless launched with ``chromium_sandbox=True``.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from snapshotd.config.settings import BrowserSettings

__all__ = [
    "LAUNCH_ARGS",
    "BrowserCannotStart",
    "ChromiumNotFound",
    "check_driver",
    "find_chromium",
    "launch_error",
    "sandbox_choice",
]

# Keep Chromium off the internet except for what pages ask (background services phone home),
# and robust in containers (small /dev/shm, no GPU).
LAUNCH_ARGS = (
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
    "--disable-default-apps",
    "--disable-extensions",
    "--mute-audio",
    # WebRTC would otherwise open UDP sockets that bypass the egress proxy.
    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--webrtc-ip-handling-policy=disable_non_proxied_udp",
)


def sandbox_choice(setting: str, euid: int) -> tuple[bool, str]:
    """Whether Chromium is to run pages in its sandbox for ``browser.sandbox`` = ``setting``
    in a process of effective uid ``euid``, and why, in a few words."""
    if setting in ("on", "off"):
        return setting == "on", f"browser.sandbox = {setting}"
    if euid == 0:
        return False, "running as root, where Chromium refuses its sandbox"
    return True, f"running as uid {euid}"


class ChromiumNotFound(Exception):
    """No usable Chromium: the message is one line saying where it looked."""


class BrowserCannotStart(Exception):
    """Chromium or Playwright's driver exists but does not start: one line saying why."""


_MISSING_LIBRARY = re.compile(r"error while loading shared libraries: ([^:\s]+)")
_BROWSER_ERR = re.compile(r"^\s*(?:- )?\[pid=\d+\]\[err\] (.+)$", re.MULTILINE)


def _reason(output: str) -> str | None:
    """The line of a process's error output that says why it did not start: a missing
    shared library first, else the first line."""
    found = _MISSING_LIBRARY.search(output)
    if found:
        return f"missing shared library {found.group(1)}"
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return lines[0][:300] if lines else None


def launch_error(exc: BaseException, executable: str) -> BrowserCannotStart:
    """A Playwright launch failure (many lines: the command, the browser's output, a call
    log) as one line: what the browser printed on stderr that says why."""
    text = str(exc)
    reason = _reason("\n".join(_BROWSER_ERR.findall(text)))
    if reason is None:
        reason = (text.strip().splitlines() or [type(exc).__name__])[0][:300]
    return BrowserCannotStart(f"chromium {executable} cannot start: {reason}")


def check_driver() -> None:
    """Run Playwright's Node.js driver once (``--version``), its output captured; raises
    :class:`BrowserCannotStart` naming what stops it, such as a missing shared library.
    Playwright itself would start it with its error output on ours, and report only that
    the connection to it closed."""
    from playwright._impl._driver import compute_driver_executable

    try:
        node, _cli = compute_driver_executable()
        proc = subprocess.run(
            [node, "--version"], capture_output=True, text=True, timeout=60, check=False
        )
    except Exception as exc:  # no bundled Node.js, not executable, hung
        raise BrowserCannotStart(f"Playwright's driver cannot start: {exc}") from None
    if proc.returncode != 0:
        reason = _reason(proc.stderr) or f"exit status {proc.returncode}"
        raise BrowserCannotStart(f"Playwright's driver cannot start: {node}: {reason}")


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def _playwright_browser(env: Mapping[str, str]) -> str | None:
    """The newest Chromium that ``python -m playwright install chromium`` left behind."""
    root = env.get("PLAYWRIGHT_BROWSERS_PATH") or ""
    if root in ("", "0"):
        root = str(Path(env.get("HOME") or Path.home()) / ".cache" / "ms-playwright")
    patterns = (
        "chromium-*/chrome-linux*/chrome",
        "chromium_headless_shell-*/chrome-linux*/headless_shell",
        "chromium-*/chrome-mac*/Chromium.app/Contents/MacOS/Chromium",
    )
    found = [p for pattern in patterns for p in glob.glob(os.path.join(root, pattern))]

    def revision(path: str) -> int:
        name = Path(path).relative_to(root).parts[0]
        digits = name.rsplit("-", 1)[-1]
        return int(digits) if digits.isdigit() else 0

    for path in sorted(found, key=revision, reverse=True):
        if _executable(path):
            return path
    return None


def find_chromium(browser: BrowserSettings, env: Mapping[str, str] = os.environ) -> str:
    """Chromium's path: ``browser.executable``, ``$SNAPSHOTD_CHROMIUM``, PATH, Playwright's.

    On PATH the headless shell comes first: the same engine without the desktop browser
    around it, it needs about 40% less CPU per capture than ``chromium --headless``.
    """
    for where, value in (
        ("browser.executable", browser.executable),
        ("SNAPSHOTD_CHROMIUM", env.get("SNAPSHOTD_CHROMIUM", "")),
    ):
        if value:
            path = value if os.sep in value else shutil.which(value, path=env.get("PATH"))
            if path and _executable(path):
                return path
            raise ChromiumNotFound(f"{where}: {value} is not an executable Chromium")
    for name in ("chromium-headless-shell", "chromium", "chromium-browser"):
        path = shutil.which(name, path=env.get("PATH"))
        if path:
            return path
    path = _playwright_browser(env)
    if path:
        return path
    raise ChromiumNotFound(
        "no Chromium found: set browser.executable or $SNAPSHOTD_CHROMIUM, install "
        "chromium-headless-shell or chromium, "
        "or run `python -m playwright install chromium`"
    )
