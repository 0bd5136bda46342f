"""What every module of the API shares: where it is mounted, its error type and how an error
is answered, and the one way a handler reaches the application's shared pieces.

Invariants:
- every client error is answered as ``{"error": message, "field": name}`` (``field`` only
  when one is to blame), a 401 with ``WWW-Authenticate: Bearer``; Crawlbot's endpoints
  (``/v3/``) add Diffbot's ``errorCode`` (the status), as Crawlbot's scripts read it;
- a store that cannot be used (:func:`snapshotd.store.unavailable`) is a 503
  ``{"error": "store unavailable"}`` with ``Retry-After``, and a line in the log at most
  once per ``logs.THROTTLE_EVERY`` seconds, never a traceback;
- handlers hold no state of their own: the shared :class:`~snapshotd.services.Services` and the
  per-application state live on the Starlette application's ``state``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Send

from snapshotd.crawl.job_json import V3
from snapshotd.observe import logs
from snapshotd.store import unavailable

if TYPE_CHECKING:
    from snapshotd.services import Services

PREFIX = "/_snapshotd"
API = PREFIX + "/api/v1"
RETRY_AFTER = 5  # seconds a client is asked to wait when the store cannot be used

log = logging.getLogger("snapshotd.api")


class ApiError(Exception):
    """A client error: answered as ``{"error": message, "field": field}`` with ``status``."""

    def __init__(self, status: int, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.field = field


def context(request: Request) -> Services:
    """The application's shared pieces (settings, store, metrics, rules, proxy, crawler...)."""
    ctx: Services = request.app.state.ctx
    return ctx


def error_response(
    status: int, message: str, field: str | None = None, *, error_code: bool = False
) -> JSONResponse:
    """An error's answer; ``error_code``: Diffbot's ``errorCode`` too (Crawlbot's endpoints)."""
    body: dict[str, Any] = {"errorCode": status, "error": message} if error_code else {
        "error": message}
    if field:
        body["field"] = field
    headers = {"WWW-Authenticate": 'Bearer realm="snapshotd"'} if status == 401 else None
    return JSONResponse(body, status, headers=headers)


async def send_error(send: Send, status: int, message: str, field: str | None = None) -> None:
    response = error_response(status, message, field)
    await response({"type": "http"}, _no_receive, send)


async def _no_receive() -> dict[str, Any]:
    return {"type": "http.disconnect"}


def _crawlbots(request: Request) -> bool:
    """Whether the request is for one of Crawlbot's endpoints."""
    return request.url.path.startswith(V3 + "/")


async def api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc.status, str(exc), exc.field, error_code=_crawlbots(request))


async def http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = _crawlbots(request)
    if exc.status_code == 404:
        return error_response(404, f"no such endpoint: {request.url.path[:200]}", error_code=code)
    if exc.status_code == 405:
        return error_response(405, f"{request.method} is not allowed here", error_code=code)
    return error_response(exc.status_code, str(exc.detail), error_code=code)


async def store_error(request: Request, exc: Exception) -> Response:
    """A store that cannot be used now is a 503; any other error of a store is a fault, as
    an exception of any other kind is."""
    if not unavailable(exc):
        raise exc
    logs.throttled(log, logging.WARNING, "store unavailable, the API answers 503: %s", exc)
    response = error_response(503, "store unavailable", error_code=_crawlbots(request))
    response.headers["Retry-After"] = str(RETRY_AFTER)
    return response
