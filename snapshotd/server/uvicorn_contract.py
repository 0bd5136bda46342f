"""What serve's HTTP protocol (:mod:`snapshotd.server.protocol`, with :mod:`snapshotd.proxy.relay`'s
answers written through it) takes from uvicorn beyond its public API: the uvicorn versions
it was tested with, and every part of uvicorn's httptools protocol it subclasses, calls,
reads or stands in for. This list is the one place those parts are named: the contract test
(``tests/test_uvicorn_contract.py``) and serve's start-up (:func:`unsupported`) check the
same list.

Invariants:
- :func:`unsupported` is None only for a uvicorn whose minor version is one of
  :data:`TESTED` (pyproject.toml admits these alone) and whose httptools protocol has
  every part named here, checked by handing a fresh one a request over a stand-in
  connection (no socket, no task run); else it says why, naming what is missing;
- nothing here imports :mod:`snapshotd.server.protocol`, so a uvicorn that protocol cannot even be
  imported on is found out here, and serve runs the plain way instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
from typing import Any

__all__ = ["TESTED", "missing", "unsupported"]

# The uvicorn minor versions serve's protocol was tested with, first and last (the suite's
# protocol, relay and framing tests pass on each). Before 0.53 uvicorn wrote no
# ``Connection: close`` on an answer after which it closes, as this protocol does.
TESTED = ((0, 53), (0, 54))

MODULE = "uvicorn.protocols.http.httptools_impl"
# The module's names the protocol imports.
MODULE_NAMES = ("HttpToolsProtocol", "STATUS_LINE")
# HttpToolsProtocol's methods it overrides or calls.
METHODS = (
    "connection_made", "connection_lost", "data_received", "resume_writing", "shutdown",
    "on_message_begin", "on_url", "on_header", "on_headers_complete", "on_body",
    "on_message_complete", "on_response_complete", "_unset_keepalive_if_required",
    "_should_upgrade", "handle_websocket_upgrade", "_unsupported_upgrade_warning",
)
# A connected protocol's state it reads or sets, once a request's head is parsed.
STATE = (
    "app", "loop", "logger", "parser", "transport", "flow", "client", "server_state",
    "pipeline", "cycle", "url", "headers", "scope", "expect_100_continue",
)
# Parts of those: the flow control's, and the server state's.
FLOW = ("write_paused",)
SERVER_STATE = ("default_headers", "total_requests")
# A request cycle's attributes uvicorn reads on the stand-in cycles of requests answered at
# once or relayed, and the protocol reads on uvicorn's.
CYCLE = ("response_complete", "disconnected", "message_event", "keep_alive", "more_body")


def version() -> str:
    import uvicorn

    return str(getattr(uvicorn, "__version__", "unknown"))


def _minor(text: str) -> tuple[int, int] | None:
    try:
        major, minor = text.split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return None


class _Transport(asyncio.Transport):
    """A connection that is not there: no addresses, writes kept."""

    def __init__(self) -> None:
        super().__init__()
        self.written = b""

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def write(self, data: Any) -> None:
        self.written += bytes(data)

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


class _Task:
    def add_done_callback(self, callback: Any) -> None:
        pass


class _Loop:
    """An event loop that runs nothing: the request's ASGI call is dropped unstarted."""

    def create_task(self, coro: Any, **kwargs: Any) -> _Task:
        coro.close()
        return _Task()

    def call_later(self, *args: Any) -> None:
        return None


async def _app(scope: Any, receive: Any, send: Any) -> None:  # pragma: no cover
    pass


def missing() -> list[str]:
    """The parts named here that this uvicorn lacks, each as ``where.name`` (or why they
    could not be looked for); empty when it has them all."""
    try:
        module = importlib.import_module(MODULE)
    except ImportError as exc:
        return [f"{MODULE} (cannot be imported: {exc})"]
    gone = [f"{MODULE}.{name}" for name in MODULE_NAMES if not hasattr(module, name)]
    cls = getattr(module, "HttpToolsProtocol", None)
    if cls is None:
        return gone
    where = f"{MODULE}.HttpToolsProtocol"
    gone += [f"{where}.{name}" for name in METHODS if not callable(getattr(cls, name, None))]
    try:
        import uvicorn
        from uvicorn.server import ServerState

        config = uvicorn.Config(
            _app, ws="none", lifespan="off", proxy_headers=False, log_config=None
        )
        protocol = cls(config=config, server_state=ServerState(), app_state={}, _loop=_Loop())
        transport = _Transport()
        protocol.connection_made(transport)
        protocol.data_received(b"GET /contract HTTP/1.1\r\nHost: contract\r\n\r\n")
    except Exception as exc:
        return [*gone, f"{where} (did not take a request: {exc!r})"]
    if transport.written or getattr(protocol, "cycle", None) is None:
        answer = transport.written.split(b"\r\n")[0].decode("latin-1")
        return [*gone, f"{where} (did not take a request: {answer or 'no request cycle'})"]
    gone += [f"{where}().{name}" for name in STATE if not hasattr(protocol, name)]
    for part, names in (("flow", FLOW), ("server_state", SERVER_STATE), ("cycle", CYCLE)):
        obj = getattr(protocol, part, None)
        if obj is not None:
            gone += [f"{where}().{part}.{name}" for name in names if not hasattr(obj, name)]
    with contextlib.suppress(Exception):
        protocol.connection_lost(None)
    return gone


def unsupported() -> str | None:
    """Why serve's protocol cannot run on this uvicorn (its version is not one it was
    tested with, or parts of it are missing), or None when it can."""
    found = version()
    minor = _minor(found)
    first, last = TESTED
    if minor is None or not first <= minor <= last:
        return (
            f"uvicorn {found} is not one serve's protocol was tested with "
            f"({first[0]}.{first[1]} to {last[0]}.{last[1]})"
        )
    gone = missing()
    if gone:
        return f"uvicorn {found} lacks what serve's protocol uses: {', '.join(gone)}"
    return None
