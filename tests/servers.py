"""Real servers for tests: any ASGI app on uvicorn, on 127.0.0.1 and a free port."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from snapshotd.protocol import HttpProtocol
from snapshotd.serving import UVICORN_OPTIONS


@contextmanager
def serve_asgi(
    app: Any,
    *,
    host: str = "127.0.0.1",
    lifespan: str = "on",
    http: Any = HttpProtocol,
    **options: Any,
) -> Iterator[str]:
    """Run ``app`` in a thread with its own event loop; yields its base URL. ``http`` picks
    uvicorn's HTTP protocol: by default the one ``serve`` runs, else ``httptools`` or
    ``h11``."""
    options = {**UVICORN_OPTIONS, "http": http, **options}
    config = uvicorn.Config(
        app, host=host, port=0, lifespan=lifespan, log_level="warning", **options
    )
    server = uvicorn.Server(config)
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    errors: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(server.serve())
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
