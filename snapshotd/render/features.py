"""The Chromium features a capture's browser runs without, added to those Playwright
switches off itself (:func:`disabled_features_args`).

Invariants:

- Chromium keeps only the last ``--disable-features`` switch of its command line, and
  Playwright passes one of its own before the arguments it is given. So the switch
  snapshotd passes holds Playwright's features followed by :data:`DISABLED`, and
  Playwright's own is left out: every feature Playwright switches off stays off.
- Playwright's switch is read from the arguments it gives an executable, by launching a
  recorder in its place once (a shell script in a private temporary directory that writes
  them down and exits), never from a copy kept here: whatever Playwright's version
  passes is kept.
- When that cannot be read (no shell, a directory that runs nothing), the browser is
  launched with Playwright's arguments as they are, without :data:`DISABLED`, and the log
  says so once: slower, never without Playwright's features.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
from pathlib import Path

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Playwright

__all__ = ["DISABLED", "SWITCH", "disabled_features_args"]

log = logging.getLogger("snapshotd.render")

SWITCH = "--disable-features="

# RenderDocument gives every new document a new frame in the browser (a new
# RenderFrameHost and renderer-side frame); without it a frame's next same-site document
# reuses them, as Chromium did before, with no change a page can see. Each navigation then
# costs some 13 ms less of Chromium's CPU, and a capture makes two (the page, then the
# wipe's about:blank); SPEC 4.1 gives the measurement.
DISABLED = ("RenderDocument",)

_RECORDER = '#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done > "$0.args"\nexit 1\n'
_RECORD_TIMEOUT = 30.0


async def _playwright_args(playwright: Playwright) -> list[str] | None:
    """The arguments Playwright gives a Chromium it launches (headless, sandbox off), or
    None when the recorder could not run (no temporary directory, nothing written)."""
    try:
        with tempfile.TemporaryDirectory(prefix="snapshotd-args-") as tmp:
            recorder = Path(tmp) / "chromium"
            recorder.write_text(_RECORDER)
            recorder.chmod(0o700)
            with contextlib.suppress(PlaywrightError, TimeoutError):
                async with asyncio.timeout(_RECORD_TIMEOUT + 5):
                    browser = await playwright.chromium.launch(
                        executable_path=str(recorder), headless=True, chromium_sandbox=False,
                        timeout=_RECORD_TIMEOUT * 1000,
                    )
                    await browser.close()
            written = Path(f"{recorder}.args")
            if not written.exists():
                return None
            return written.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeError):
        return None


async def disabled_features_args(playwright: Playwright) -> tuple[list[str], list[str]]:
    """The ``--disable-features`` switch to pass to Chromium's launch (Playwright's features
    and :data:`DISABLED`), and Playwright's own to leave out (``ignore_default_args``);
    both empty when Playwright's could not be read."""
    args = await _playwright_args(playwright)
    if args is None:
        log.info(
            "chromium runs with %s on: Playwright's launch switches could not be read",
            ",".join(DISABLED),
        )
        return [], []
    theirs = [a for a in args if a.startswith(SWITCH)]
    features = [f for a in theirs[-1:] for f in a.removeprefix(SWITCH).split(",") if f]
    merged = features + [f for f in DISABLED if f not in features]
    return [SWITCH + ",".join(merged)], theirs
