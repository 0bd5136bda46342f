"""What the page and the network tell one capture: the requests in flight and when each URL
was last seen, shared workers, the workers running, the documents, the page's own
"ready", a redirect, a crash, the first request to the site's origin that never got a
whole answer, and what differs by device that the page read or an answer said.

Invariants:
- a request is in flight from its start to its end or failure, a shared worker's script
  never (its request never ends); ``idle`` is set exactly when nothing is in flight;
- the page's side (:data:`PAGE_SCRIPT`) speaks only through :mod:`.channel`; what it reports
  is kept bounded (:data:`MAX_URL` per URL, :data:`MAX_URLS` shared workers' URLs), and
  ``onCaptureReady`` counts from the main frame alone, once per document;
- a document starts at most :data:`WORKERS_PER_DOCUMENT` workers (its constructors refuse
  more); the workers (dedicated and shared) running in the capture's context are counted as
  the browser reports them, whatever frame or script started them; past :data:`MAX_WORKERS`
  at once, ``overrun`` is settled and the capture ends;
- each future is settled once, by the first thing that happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Request, Response

from snapshotd.net.address_policy import is_origin_url
from snapshotd.pages.not_found_view import app_shell
from snapshotd.render.device_probe import READS
from snapshotd.render.readiness import STREAMING

__all__ = [
    "MAX_URL", "MAX_URLS", "MAX_WORKERS", "PAGE_SCRIPT", "UNREACHABLE", "WORKERS_PER_DOCUMENT",
    "Signals", "document_shell", "origin_of", "settle",
]

MAX_URL, MAX_URLS = 16384, 4096  # the URLs the page's side may report, and how many
# Workers a capture's pages may run at once: each is a thread with its own V8 heap, and a page
# starting them without end takes the cores and memory every other capture needs.
MAX_WORKERS = 32
# Workers a document may start, one after another or at once: its constructors refuse more at
# once, where the browser's count of those running (``MAX_WORKERS``) is heard a moment late.
WORKERS_PER_DOCUMENT = 2 * MAX_WORKERS
MAX_SHELL = 2**20  # the most of a document read for its app shell


async def document_shell(document: Response | None) -> str:
    """The app shell of ``document`` as its origin served it (what names the app's build,
    :func:`snapshotd.pages.not_found_view.app_shell`); "" when it cannot be read or is too long."""
    length = document.headers.get("content-length", "") if document is not None else ""
    if document is None or (length.isdigit() and int(length) > MAX_SHELL):
        return ""
    try:
        body = await document.body()
    except PlaywrightError:
        return ""
    return app_shell(body[:MAX_SHELL].decode("utf-8", "replace"))

# Run before any page script, inside :func:`.channel.page_script`. ``onCaptureReady`` cannot
# be replaced by the page (an assignment is ignored rather than thrown, so strict-mode apps
# that assign it keep working); a frame other than the main one says nothing through it.
PAGE_SCRIPT = """
(() => {
  const stringify = JSON.stringify, main = window === window.top;
  let called = false;
  const plain = (v) => (typeof v === "number" || typeof v === "string" ? v : null);
  const onCaptureReady = function (status, redirectUrl) {
    if (called || !main) return;
    called = true;
    const redirect = redirectUrl === undefined || redirectUrl === null ? null : redirectUrl;
    try { say("ready", stringify([plain(status), redirect === null ? null : String(redirect)])); }
    catch (e) {}
  };
  try {
    Object.defineProperty(window, "onCaptureReady", {
      get: () => onCaptureReady, set: () => {}, configurable: false, enumerable: true,
    });
  } catch (e) {}
  // A document starts a bounded number of workers (dedicated and shared): past it, the
  // constructors throw, as the browser's do when it has no room. The request for a shared
  // worker's script is never reported as finished: say which it is.
  let workersLeft = __WORKERS_PER_DOCUMENT__;
  const bounded = (Native, name, started) => {
    if (typeof Native !== "function") return;
    const Bounded = {
      [name]: function (url, options) {
        if (!new.target) return Native(url, options);  // throws as the browser's does
        if (workersLeft <= 0) {
          throw new DOMException("too many workers in this document", "QuotaExceededError");
        }
        workersLeft--;
        started(url);
        return Reflect.construct(Native, arguments, new.target);
      },
    }[name];
    Bounded.prototype = Native.prototype;
    Object.defineProperty(window, name, {
      value: Bounded, writable: true, configurable: true, enumerable: false,
    });
  };
  bounded(window.Worker, "Worker", () => {});
  bounded(window.SharedWorker, "SharedWorker", (url) => {
    try { say("shared", String(new URL(url, document.baseURI))); } catch (e) {}
  });
})();
""".replace("__WORKERS_PER_DOCUMENT__", str(WORKERS_PER_DOCUMENT))
# Chromium's errors for a request that never got a whole answer from the server: no
# connection, a broken one, an empty or cut-off answer. Aborted and blocked requests (the page
# or the capture cancelled them, a policy refused them) are not among them.
UNREACHABLE = re.compile(
    r"net::ERR_(?:CONNECTION_|SOCKS_|PROXY_|TUNNEL_|ADDRESS_|NAME_|NETWORK_|INTERNET_|SSL_|"
    r"CERT_|HTTP2_|TIMED_OUT|EMPTY_RESPONSE|INCOMPLETE_CHUNKED_ENCODING|"
    r"CONTENT_LENGTH_MISMATCH|INVALID_HTTP_RESPONSE|RESPONSE_HEADERS_)[A-Z_0-9]*"
)


def settle(future: asyncio.Future[Any], value: Any) -> None:
    if not future.done():
        future.set_result(value)


def origin_of(url: str) -> str | None:
    parts = urlsplit(url)
    if parts.scheme in ("http", "https") and parts.netloc:
        return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"
    return None


@dataclass
class Signals:
    """What the page and the network told one capture so far."""

    origin: str = ""  # the site's
    in_flight: dict[Request, float] = field(default_factory=dict)  # with when each started
    streams: set[Request] = field(default_factory=set)  # those in flight that never hold it
    last_seen: dict[str, float] = field(default_factory=dict)  # URL: its last start or end
    shared_workers: set[str] = field(default_factory=set)  # their scripts' URLs
    workers: set[str] = field(default_factory=set)  # the DevTools ids of those running
    idle: asyncio.Event = field(default_factory=asyncio.Event)
    busy: asyncio.Event = field(default_factory=asyncio.Event)
    loaded: asyncio.Event = field(default_factory=asyncio.Event)
    # The main frame's document parsed and drew a frame (its height then), and drew two
    # frames in the tall viewport (render/viewport).
    painted: asyncio.Future[int] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    grown: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    ready: asyncio.Future[tuple[Any, Any]] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    redirected: asyncio.Future[Response] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    crashed: asyncio.Future[str] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    # The capture's error once the page ran more than the bound allows.
    overrun: asyncio.Future[str] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    # The first request to the site's origin that failed at the network level.
    lost: asyncio.Future[tuple[str, str]] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    first_document: Response | None = None
    document: Response | None = None
    origins: set[str] = field(default_factory=set)
    blocked: int = 0
    device: set[str] = field(default_factory=set)  # what differs by device, read or said
    shadow_roots: bool = False  # the page's scripts made a shadow root (render/shadow)

    def heard(self, kind: str, text: str, *, normal_height: int) -> None:
        """What the page said through its channel (:mod:`.channel`'s kinds); a document
        laid out taller than ``normal_height`` is in the tall viewport (render/viewport)."""
        if kind == "ready":
            with contextlib.suppress(ValueError, TypeError):
                status, redirect = json.loads(text)
                settle(self.ready, (status, redirect if isinstance(redirect, str) else None))
        elif kind == "shared":
            self.shared_worker(text)
        elif kind == "shadow":
            self.shadow_roots = True
        elif kind == "painted" and text.isdigit():
            # A later document drawn tall (it replaced the first after the resize) has grown.
            if self.painted.done() and int(text) > normal_height:
                settle(self.grown, None)
            settle(self.painted, int(text))
        elif kind == "grown":
            settle(self.grown, None)
        elif kind == "device":
            self.device_read(text)

    def device_read(self, name: str) -> None:
        """The page read, or an answer said, something that differs between device
        profiles (:mod:`.device_probe`); only its names are kept."""
        if name in READS:
            self.device.add(name)

    def __post_init__(self) -> None:
        self.idle.set()

    def started(self, request: Request) -> None:
        origin = origin_of(request.url)
        if origin:
            self.origins.add(origin)
        if request.url in self.shared_workers:
            return
        self.in_flight[request] = self.last_seen[request.url] = time.monotonic()
        if request.resource_type in STREAMING:
            self.streams.add(request)
        self.idle.clear()
        self.busy.set()

    def ended(self, request: Request) -> None:
        if self.in_flight.pop(request, None) is None:
            return
        self.streams.discard(request)
        self.last_seen[request.url] = time.monotonic()
        if not self.in_flight:
            self.idle.set()
        self.busy.set()

    def shared_worker(self, url: str) -> None:
        """A shared worker started from ``url``: its script request will never end."""
        if len(url) <= MAX_URL and len(self.shared_workers) < MAX_URLS:
            self.shared_workers.add(url)
        for request in [r for r in self.in_flight if r.url == url]:
            self.ended(request)

    def worker_started(self, target_id: str) -> bool:
        """A worker of the capture's context started (``target_id``, DevTools' id); True when
        it is the one past the bound."""
        self.workers.add(target_id)
        if len(self.workers) <= MAX_WORKERS or self.overrun.done():
            return False
        settle(self.overrun, f"page overrun: more than {MAX_WORKERS} workers at once")
        return True

    def worker_ended(self, target_id: str) -> None:
        self.workers.discard(target_id)

    def failed(self, request: Request) -> None:
        self.ended(request)
        match = UNREACHABLE.search(request.failure or "")
        if match and self.origin and is_origin_url(request.url, self.origin):
            parts = urlsplit(request.url)
            target = parts.path + (f"?{parts.query}" if parts.query else "")
            settle(self.lost, (match.group(0), f"{request.method} {target}"))

    def crash(self, why: str) -> None:
        settle(self.crashed, why)
