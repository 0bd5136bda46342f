"""``snapshotd serve``: the proxy, the API, the console and the crawler on one port, in one
process or several."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
from dataclasses import replace
from typing import Any

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
    sockets = [_listen(bind_socket, settings.host, settings.port)]
    # The SEO4Ajax face's own port (snapshotd.proxy.seo4ajax_face) and Crawlbot's
    # (snapshotd.api.crawlbot_port).
    for port in (settings.seo4ajax_port, settings.crawlbot_port):
        if not port:
            continue
        try:
            sockets.append(_listen(bind_socket, settings.host, port))
        except UserError:
            for sock in sockets:
                sock.close()
            raise
    with contextlib.ExitStack() as stack:
        for sock in sockets:
            stack.enter_context(sock)
        settings = replace(settings, port=sockets[0].getsockname()[1])  # --port 0: the one drawn
        if settings.workers > 1:
            asyncio.run(_check_browser(settings))
            return serve_workers(settings, sockets, crawler=not args.no_crawler, rules=rules)
        app = create_app(settings, crawler=not args.no_crawler, rules=rules)
        started = serve_one(app, settings, sockets)
    if app.startup_error is not None:
        raise UserError(str(app.startup_error).strip().splitlines()[0])
    return 0 if started else 2


def _listen(bind: Any, host: str, port: int) -> Any:
    """The listening socket on ``host:port``, or the user error that says why not."""
    try:
        return bind(host, port)
    except OSError as exc:
        reason = (os.strerror(exc.errno) if exc.errno else str(exc)).lower()
        shown = f"[{host}]" if ":" in host else host
        raise UserError(f"cannot listen on {shown}:{port}: {reason}") from None
