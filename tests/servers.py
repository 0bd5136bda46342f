"""Real servers for tests: any ASGI app on uvicorn, on 127.0.0.1 and a free port."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from snapshotd.server.app import SnapshotdApp
from snapshotd.server.run import UVICORN_OPTIONS, uvicorn_config

SERVES_ANSWERS = object()  # ``at_once``'s default: see serve_asgi


@contextmanager
def serve_asgi(
    app: Any,
    *,
    host: str = "127.0.0.1",
    lifespan: str = "on",
    http: str | None = None,
    at_once: Any = SERVES_ANSWERS,
    **options: Any,
) -> Iterator[str]:
    """Run ``app`` in a thread with its own event loop; yields its base URL. It is served as
    ``serve`` serves (:func:`snapshotd.server.run.uvicorn_config`), handed ``at_once`` as its
    fast path: by default a snapshotd application's own ``answer_at_once``, as ``serve``
    hands it, and none for any other application. ``http`` (``httptools`` or ``h11``) picks
    one of uvicorn's plain protocols instead. ``port`` (0: any free one) is where it listens,
    or ``sockets``, listening already (the first one's port is the URL's), as ``serve`` hands
    its own."""
    port = options.pop("port", 0)
    sockets = options.pop("sockets", None)
    common = {"host": host, "port": port, "lifespan": lifespan, "log_level": "warning"}
    if http is not None:
        config = uvicorn.Config(app, **{**UVICORN_OPTIONS, "http": http, **common, **options})
    else:
        if at_once is SERVES_ANSWERS:
            at_once = app.answer_at_once if isinstance(app, SnapshotdApp) else None
        config = uvicorn_config(app, at_once, **common, **options)
    server = uvicorn.Server(config)
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    errors: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(server.serve(sockets=sockets))
        except BaseException as exc:  # surfaced below, in the test's thread
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if errors or not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"server did not start: {errors or 'timeout'}")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
