"""Real Django (WSGI and ASGI), Flask and FastAPI apps for the middleware tests, each the
same small SPA.

Every app serves an HTML shell whose script writes the page's text (so a snapshot differs
from the shell), ``/static/app.js``, and ``/slow``, which keeps snapshotd's own browser
(``X-Snapshotd``) waiting :data:`SLOW` seconds, longer than the middleware tests'
``miss_wait``. Each counts the requests it answered, by path and by the marker headers they
carried. Flask and Django's WSGI handler run on a threaded ``wsgiref``
server, FastAPI and Django's ASGI handler on uvicorn; all on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, Response

from snapshotd.middleware import SnapshotdASGI, SnapshotdWSGI
from tests.servers import serve_asgi

SHELL = (
    "<!doctype html><html><head><title>Shop</title></head><body>"
    '<div id="app">loading</div><script src="/static/app.js"></script></body></html>'
)
SCRIPT = (
    "document.getElementById('app').textContent = "
    "'Rendered by the browser at ' + location.pathname + location.search + location.hash;"
)
FRAMEWORKS = ("django", "django-asgi", "flask", "fastapi")


class Seen:
    """What an app answered: (path, x-snapshotd sent, x-snapshotd-middleware sent)."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, bool, bool]] = Counter()
        self.lock = threading.Lock()

    def add(self, path: str, headers: Callable[[str], str | None]) -> None:
        key = (path, headers("x-snapshotd") is not None,
               headers("x-snapshotd-middleware") is not None)
        with self.lock:
            self.counts[key] += 1

    def of(self, path: str) -> Counter[tuple[bool, bool]]:
        with self.lock:
            return Counter({k[1:]: n for k, n in self.counts.items() if k[0] == path})


SLOW = 15.0


def _slow(browser: bool) -> None:
    if browser:
        time.sleep(SLOW)


# --- Flask ----------------------------------------------------------------------------------


def flask_app(seen: Seen, wrap: Callable[[Any], Any]) -> Any:
    from flask import Flask, request

    app = Flask("shop")

    @app.before_request
    def count() -> None:
        seen.add(request.path, request.headers.get)

    @app.get("/static/app.js")
    def script() -> Any:
        return app.response_class(SCRIPT, mimetype="text/javascript")

    @app.get("/slow")
    def slow() -> Any:
        _slow("X-Snapshotd" in request.headers)
        return SHELL

    @app.get("/", defaults={"rest": ""})
    @app.get("/<path:rest>")
    def shell(rest: str) -> Any:
        return SHELL

    app.wsgi_app = wrap(app.wsgi_app)  # type: ignore[method-assign]
    return app


# --- Django ---------------------------------------------------------------------------------

def _django_view(request: Any, rest: str = "") -> Any:
    from django.http import HttpResponse

    if request.path == "/static/app.js":
        return HttpResponse(SCRIPT, content_type="text/javascript")
    if request.path == "/slow":
        _slow("X-Snapshotd" in request.headers)
    return HttpResponse(SHELL)


def _django_urls() -> list[Any]:
    from django.urls import re_path

    return [re_path(r"^(?P<rest>.*)$", _django_view)]


urlpatterns: list[Any] = []  # Django's ROOT_URLCONF is this module


def _django_setup() -> None:
    import django
    from django.conf import settings

    if not settings.configured:
        settings.configure(
            DEBUG=False, ALLOWED_HOSTS=["*"], ROOT_URLCONF=__name__, SECRET_KEY="test-only",
            MIDDLEWARE=[], INSTALLED_APPS=[], USE_TZ=True,
        )
        django.setup()
        urlpatterns[:] = _django_urls()


def django_app(seen: Seen, wrap: Callable[[Any], Any]) -> Any:
    """Django's WSGI handler, what it receives counted in ``seen``."""
    from django.core.wsgi import get_wsgi_application

    _django_setup()
    django = get_wsgi_application()

    def counted(environ: dict[str, Any], start_response: Any) -> Any:
        seen.add(environ["PATH_INFO"], lambda name: environ.get(
            "HTTP_" + name.upper().replace("-", "_")))
        return django(environ, start_response)

    return wrap(counted)


def django_asgi_app(seen: Seen, options: dict[str, Any]) -> Any:
    """Django's ASGI handler (which takes no lifespan), what it receives counted in ``seen``,
    behind SnapshotdASGI."""
    from django.core.asgi import get_asgi_application

    _django_setup()
    django = get_asgi_application()

    async def counted(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                       for k, v in scope["headers"]}
            seen.add(scope["path"], headers.get)
        await django(scope, receive, send)

    return SnapshotdASGI(counted, **options)


# --- FastAPI --------------------------------------------------------------------------------


def fastapi_app(seen: Seen, wrap_options: dict[str, Any]) -> Any:
    app = FastAPI()

    @app.middleware("http")
    async def count(request: Request, call_next: Any) -> Any:
        seen.add(request.url.path, request.headers.get)
        return await call_next(request)

    @app.get("/static/app.js")
    async def script() -> Response:
        return Response(SCRIPT, media_type="text/javascript")

    @app.get("/slow")
    async def slow(request: Request) -> HTMLResponse:
        if "x-snapshotd" in request.headers:
            await asyncio.sleep(SLOW)
        return HTMLResponse(SHELL)

    @app.get("/{rest:path}")
    async def shell(rest: str) -> HTMLResponse:
        return HTMLResponse(SHELL)

    # As a FastAPI user adds it: outermost, before the app's own.
    app.add_middleware(SnapshotdASGI, **wrap_options)
    return app


# --- Serving --------------------------------------------------------------------------------


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


@contextmanager
def serve_wsgi(app: Any) -> Iterator[str]:
    server = make_server("127.0.0.1", 0, app, _ThreadingServer, _QuietHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@contextmanager
def serve_app(framework: str, seen: Seen, snapshotd_url: str, **options: Any) -> Iterator[str]:
    """``framework``'s app behind the middleware pointed at ``snapshotd_url``; its base URL."""
    if framework in ("fastapi", "django-asgi"):
        make_asgi = fastapi_app if framework == "fastapi" else django_asgi_app
        app = make_asgi(seen, {"snapshotd_url": snapshotd_url, **options})
        with serve_asgi(app) as url:  # the middleware closes its client at shutdown
            yield url
        return
    made: list[SnapshotdWSGI] = []

    def wrap(inner: Any) -> SnapshotdWSGI:
        made.append(SnapshotdWSGI(inner, snapshotd_url, **options))
        return made[-1]

    make = flask_app if framework == "flask" else django_app
    try:
        with serve_wsgi(make(seen, wrap)) as url:
            yield url
    finally:
        for middleware in made:
            middleware.close()


def raw_get(
    base: str, target: str, headers: dict[str, str], host: str = "shop.test"
) -> tuple[int, dict[str, str], bytes]:
    """A GET of ``target`` exactly as written, with only the headers given (and Host), over
    a socket, as an attacker or a bare client sends it; status, headers, body."""
    address, port = base.removeprefix("http://").split(":")
    lines = [f"GET {target} HTTP/1.1", f"Host: {host}", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    with socket.create_connection((address, int(port)), timeout=30) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    got = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        got[name.strip().lower()] = value.strip()
    if got.get("transfer-encoding") == "chunked":
        body = _unchunk(body)
    return int(status_line.split()[1]), got, body


def _unchunk(body: bytes) -> bytes:
    out = b""
    while body:
        size_line, _, body = body.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out, body = out + body[:size], body[size + 2 :]
    return out
