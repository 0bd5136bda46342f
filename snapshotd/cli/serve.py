"""``snapshotd serve``: the proxy, the API, the console and the crawler on one port, in one
process or several."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from dataclasses import replace

from snapshotd.cli.common import UserError, check_chromium, check_rules, settings_of
from snapshotd.config.settings import Settings
from snapshotd.store import open_store


async def _check_browser(settings: Settings) -> None:
    """Start and close the browser once: BrowserCannotStart is one line, said before any
    worker process is made (each would say it again)."""
    from snapshotd.services import default_renderer

    renderer = default_renderer(settings)
    quiet = logging.getLogger("snapshotd.render")
    level = quiet.level
    quiet.setLevel(logging.WARNING)  # this browser is not the one that serves: no "launched"
    try:
        await renderer.start()
    finally:
        await renderer.close()
        quiet.setLevel(level)


async def _check_store(db: str) -> None:
    """Open (creating or upgrading) and close the store: a StoreError is one line."""
    store = open_store(db)
    await store.open()
    await store.close()


def cmd_serve(args: argparse.Namespace) -> int:
    from snapshotd.server.app import create_app
    from snapshotd.server.run import bind_socket, serve_one, serve_workers

    settings = settings_of(args)
    rules = check_rules(settings)
    check_chromium(settings)
    asyncio.run(_check_store(settings.db))
    try:
        sock = bind_socket(settings.host, settings.port)
    except OSError as exc:
        reason = (os.strerror(exc.errno) if exc.errno else str(exc)).lower()
        host = f"[{settings.host}]" if ":" in settings.host else settings.host
        raise UserError(f"cannot listen on {host}:{settings.port}: {reason}") from None
    with sock:
        settings = replace(settings, port=sock.getsockname()[1])  # --port 0: the one drawn
        if settings.workers > 1:
            asyncio.run(_check_browser(settings))
            return serve_workers(settings, sock, crawler=not args.no_crawler, rules=rules)
        app = create_app(settings, crawler=not args.no_crawler, rules=rules)
        started = serve_one(app, settings, [sock])
    if app.startup_error is not None:
        raise UserError(str(app.startup_error).strip().splitlines()[0])
    return 0 if started else 2
