"""Running ``serve``: one uvicorn server in this process, or N worker processes sharing the
port under a supervisor (``server.workers``, SPEC 3.1).

Invariants:
- the port is one listening socket, bound once by ``serve`` without ``SO_REUSEPORT``: while
  it is open no other socket, of any process or user, can listen on the address, and
  nothing can join it (a ``SO_REUSEPORT`` group of sockets would let any process of the
  same user add its own and be handed a share of the connections);
- every worker is a fork of the supervisor made before any event loop runs in it, and
  accepts on that inherited socket (as uvicorn's own workers do: the kernel hands each new
  connection to one worker that asks for it, so a busy worker takes fewer); each builds its
  own application (store connections, caches) and counts its metrics in a
  directory all of them share;
- the crawler runs in one worker at a time, the holder of a lock on a file of this
  ``serve`` (:mod:`snapshotd.crawl.hostlock`);
- every worker renders through one browser pool, run by the holder of another such lock
  (:mod:`snapshotd.server.shared_pool`);
- a worker that dies is replaced at once, on the same socket; one that could not start
  stops them all, and ``serve`` exits 2;
- SIGTERM or SIGINT to the supervisor goes to every worker as SIGTERM, each drains as a
  single process does, and the supervisor exits 0 once all have ended;
- uvicorn runs serve's own HTTP protocol (:mod:`snapshotd.server.protocol`), handed the
  application's ``answer_at_once``, only when :mod:`snapshotd.server.uvicorn_contract` finds this
  uvicorn one it was tested with; else uvicorn's plain h11 protocol, every request the ASGI
  way (slower, never broken), which one line says once per ``serve``. Either way answers
  are dated and request heads bounded (:mod:`snapshotd.server.exchange`).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import signal
import socket
import sys
import tempfile
from types import FrameType
from typing import TYPE_CHECKING, Any

from snapshotd.config.settings import Settings
from snapshotd.crawl.hostlock import HostLock
from snapshotd.observe import logs
from snapshotd.observe.metrics import share_between_processes
from snapshotd.render import BrowserPool
from snapshotd.rewrite import RuleSet
from snapshotd.server import uvicorn_contract
from snapshotd.server.app import SnapshotdApp, console_url, create_app, draw_token
from snapshotd.server.exchange import MAX_HEAD, Served
from snapshotd.server.shared_pool import SharedPool

if TYPE_CHECKING:
    import uvicorn

    from snapshotd.server.protocol import AnswerAtOnce

log = logging.getLogger("snapshotd")

BACKLOG = 2048
START_FAILED = 2
# How uvicorn runs snapshotd (and the tests' servers): no access line, Server or Date header
# of its own (serve dates what has no Date, so a passed-through answer has the origin's
# alone), and the client as it connected:
# X-Forwarded-* are read where they are passed on (snapshotd.proxy.passthrough), not by uvicorn's
# middleware, which put the front server's X-Forwarded-For in place of the peer and so
# repeated the client in it. No WebSockets, whatever is installed (none are proxied, SPEC
# 3.2): an upgrade is an HTTP request like any other, so a connection stays serve's
# protocol's to its end.
UVICORN_OPTIONS: dict[str, Any] = {
    "ws": "none",
    "access_log": False,
    "server_header": False,
    "date_header": False,
    "proxy_headers": False,
}


@functools.cache
def _plain_because() -> str | None:
    """Why serve's protocol cannot run on this uvicorn (said once per process, and before
    workers are forked, so once per ``serve``), or None."""
    reason = uvicorn_contract.unsupported()
    if reason is not None:
        log.warning("%s: serving every request the plain ASGI way (slower)", reason)
    return reason


def uvicorn_config(
    app: Any, answer_at_once: AnswerAtOnce | None, **options: Any
) -> uvicorn.Config:
    """How uvicorn is to serve ``app``: with serve's protocol handed ``answer_at_once`` (the
    application's fast path, None for none), or uvicorn's plain h11 protocol when this
    uvicorn is not one serve's protocol runs on; :data:`UVICORN_OPTIONS` and ``options``
    for the rest."""
    import uvicorn

    if _plain_because() is None:
        from snapshotd.server.protocol import protocol_for

        http: Any = protocol_for(answer_at_once)
        bounds: dict[str, Any] = {}
    else:  # h11 bounds a head it is still reading; uvicorn's plain httptools, not at all
        http, bounds = "h11", {"h11_max_incomplete_event_size": MAX_HEAD}
    served = Served(app, bound_heads=bool(bounds))
    return uvicorn.Config(served, **{**UVICORN_OPTIONS, "http": http, **bounds, **options})


def serve_one(app: SnapshotdApp, settings: Settings, sockets: list[socket.socket]) -> bool:
    """Serve ``app`` on ``sockets`` (bound already, so a port in use was said before anything
    started) until stopped; whether the server started. A start-up failure is left in
    ``app.startup_error`` for the caller to say once."""
    import uvicorn

    config = uvicorn_config(
        app,
        app.answer_at_once,
        log_config=None,
        lifespan="on",
        timeout_graceful_shutdown=5,
        backlog=BACKLOG,
    )
    workers = settings.workers > 1
    where = f"http://{settings.host}:{settings.port}"

    class Server(uvicorn.Server):
        """Tells the application as soon as shutdown starts, before uvicorn waits for the
        requests under way: bots waiting on a capture are answered (fail open) instead of
        being cut off when the graceful wait runs out."""

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if self.started:  # said once it is true, in snapshotd's words
                if workers:
                    log.info("worker pid=%d running on %s", os.getpid(), where)
                else:
                    log.info("listening on %s", where)

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            app.begin_shutdown()
            await super().shutdown(sockets)
            # uvicorn ends the process by the signal it caught, before the loop's next turn.
            logs.flush()

    server = Server(config)
    # A start-up failure is said once, by the caller; uvicorn's own lines would repeat it.
    uvicorn_log = logging.getLogger("uvicorn.error")
    uvicorn_log.setLevel(logging.WARNING)
    uvicorn_log.addFilter(lambda record: server.started or record.levelno < logging.ERROR)
    try:
        server.run(sockets=sockets)
    except SystemExit:
        if app.startup_error is None:
            raise
    return bool(server.started)


def bind_socket(host: str, port: int) -> socket.socket:
    """The listening socket on ``host:port`` (a free port when 0), never shared with a
    socket ``serve`` did not make. OSError when the address cannot be had."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        # Only a port whose last connections are in TIME_WAIT: never one a socket listens on.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(BACKLOG)
    except OSError:
        sock.close()
        raise
    return sock


class Supervisor:
    """Starts the workers, replaces a dead one, and stops them all on SIGTERM/SIGINT."""

    def __init__(self, settings: Settings, *, crawler: bool, rules: dict[str, RuleSet]) -> None:
        self.settings = settings
        self.crawler = crawler
        self.rules = rules
        self.children: set[int] = set()  # the workers' pids
        self.stopping = False
        self.shared = ""  # this serve's private directory: metrics, locks, the pool's socket

    def run(self, shared: str, sock: list[socket.socket]) -> int:
        """Workers on ``sock`` (bound by the caller, who closes them) until stopped."""
        settings = self.settings
        self.shared = shared
        _plain_because()  # said here once, not by every worker
        token = None if settings.api_tokens else draw_token()
        metrics_dir = os.path.join(shared, "metrics")
        os.mkdir(metrics_dir)
        share_between_processes(metrics_dir)
        lock = os.path.join(shared, "crawler.lock")
        log.info(
            "listening on http://%s:%d workers=%d", settings.host, settings.port, settings.workers
        )
        if token is not None:
            log.info("console: %s", console_url(settings, token))
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._stop)
        for _ in range(settings.workers):
            self._spawn(sock, token, lock)
        return self._watch(sock, token, lock)

    def _stop(self, signum: int, frame: FrameType | None) -> None:
        if not self.stopping:
            log.info("stopping %d workers", len(self.children))
        self.stopping = True
        for pid in self.children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    def _watch(self, sock: list[socket.socket], token: str | None, lock: str) -> int:
        code = 0
        while self.children:
            try:
                pid, status = os.wait()
            except ChildProcessError:
                break
            if pid not in self.children:
                continue
            self.children.discard(pid)
            if self.stopping:
                continue
            exit_code = os.waitstatus_to_exitcode(status)
            if exit_code == START_FAILED:
                log.error("worker pid=%d could not start: stopping every worker", pid)
                code = START_FAILED
                self._stop(signal.SIGTERM, None)
                continue
            how = f"signal {-exit_code}" if exit_code < 0 else f"exit {exit_code}"
            log.warning("worker pid=%d died (%s): starting another", pid, how)
            self._spawn(sock, token, lock)
        return code

    def _spawn(self, sock: list[socket.socket], token: str | None, lock: str) -> None:
        sys.stderr.flush()
        pid = os.fork()
        if pid:
            self.children.add(pid)
            return
        code = START_FAILED
        try:
            for signum in (signal.SIGTERM, signal.SIGINT):
                signal.signal(signum, signal.SIG_DFL)
            app = create_app(
                self.settings,
                crawler=self.crawler,
                rules=self.rules,
                renderer=SharedPool(BrowserPool(self.settings.browser), self.shared),
                token=token,
                crawler_lock=HostLock(lock) if self.crawler else None,
                processes=self.settings.workers,
            )
            code = 0 if serve_one(app, self.settings, sock) else START_FAILED
        except Exception as exc:
            log.error("worker pid=%d failed: %s", os.getpid(), exc)
        finally:
            logs.flush()
            sys.stderr.flush()
            os._exit(code)


def serve_workers(
    settings: Settings,
    sock: list[socket.socket],
    *,
    crawler: bool,
    rules: dict[str, RuleSet],
) -> int:
    """Run ``settings.workers`` worker processes accepting on the sockets ``sock`` (see
    :func:`bind_socket`: serve's port, and the SEO4Ajax face's if it has one) until SIGTERM;
    the exit status."""
    with tempfile.TemporaryDirectory(prefix="snapshotd-serve-") as shared:
        return Supervisor(settings, crawler=crawler, rules=rules).run(shared, sock)
