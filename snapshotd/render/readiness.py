"""When a page is ready to be captured, short of ``window.onCaptureReady()``.

Invariants:

- ``quiet`` is SEO4Ajax's rule: no request in flight for ``javascript_timeout`` seconds after
  the main frame's load event; a new request restarts the wait. It is also the upper bound
  of ``settled``, which the slot runs beside it.
- ``settled`` (the ``adaptive`` readiness) is ready once, after the load event, no counted
  request has been in flight for ``SETTLE`` seconds and the page itself says it has settled:
  its DOM has not changed for ``SETTLE`` seconds (a MutationObserver), and no timer or
  animation frame it asked for in the near future is still due.
- What cannot hold a page forever: a request in flight for more than ``LONG_REQUEST``
  seconds (a long poll) or of a streaming kind (EventSource, WebSocket) is not counted;
  repeating intervals are waited for up to their first tick only; a timer or animation frame
  asked for by a callback that was itself a timer's or frame's child is not waited for
  (``MAX_CHAIN``), and neither the DOM changes such a callback (or a later interval tick)
  makes nor the requests it starts (``fetch``, ``XMLHttpRequest``; by URL, for the rest of
  the capture) count. Timers due further away than ``javascript_timeout`` are not waited
  for.
- The page's side is ``settle_script``, run before any page script; it wraps ``setTimeout``,
  ``setInterval``, ``requestAnimationFrame`` and their ``clear``/``cancel`` functions, each
  calling the browser's own, so the page sees the same ids and timing.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, Protocol

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Page, Request

__all__ = [
    "LONG_REQUEST",
    "MAX_CHAIN",
    "SETTLE",
    "SETTLE_KEY",
    "BACKGROUND_BINDING",
    "quiet",
    "settle_script",
    "settled",
]

SETTLE = 0.2  # seconds the DOM and the network must stay still
LONG_REQUEST = 10.0  # seconds after which a request in flight no longer holds the page
MAX_CHAIN = 2  # a timer's (or frame's) child is waited for; its grandchild is not
SETTLE_KEY = "__snapshotdSettle"
BACKGROUND_BINDING = "__snapshotdBackground"
_STREAMING = frozenset({"eventsource", "websocket"})
_MAX_NAP = 0.5  # the longest the page's own estimate is trusted before asking again

_SETTLE_SCRIPT = """
(() => {
  const key = "__KEY__", background = "__BACKGROUND__";
  const horizon = __HORIZON__, settleMs = __SETTLE__, maxChain = __CHAIN__;
  const W = window;
  if (Object.prototype.hasOwnProperty.call(W, key)) return;
  const now = () => performance.now();
  const timers = new Map();  // id -> when it is due
  const frames = new Set();
  let lastChange = now(), chain = 0, counting = true, observer = null;
  const native = {
    setTimeout: W.setTimeout, clearTimeout: W.clearTimeout,
    setInterval: W.setInterval, clearInterval: W.clearInterval,
    raf: W.requestAnimationFrame, caf: W.cancelAnimationFrame,
  };
  // Runs a callback at ``level``; the DOM changes it makes count only when ``counts``.
  function run(self, fn, args, level, counts) {
    const outerChain = chain, outerCounting = counting;
    chain = level;
    counting = counts;
    try {
      return fn.apply(self, args);
    } finally {
      if (!counts && observer) observer.takeRecords();
      chain = outerChain;
      counting = outerCounting;
    }
  }
  function waited(level, ms) {
    return counting && level <= maxChain && ms <= horizon;
  }
  function define(name, value) {
    Object.defineProperty(W, name, { value, writable: true, configurable: true, enumerable: true });
  }
  define("setTimeout", function setTimeout(fn, delay, ...args) {
    if (typeof fn !== "function") return native.setTimeout.apply(W, arguments);
    const level = chain + 1, ms = Math.max(Number(delay) || 0, 0), tracked = waited(level, ms);
    const id = native.setTimeout.call(W, function () {
      timers.delete(id);
      return run(this, fn, args, level, tracked);
    }, delay);
    if (tracked) timers.set(id, now() + ms);
    return id;
  });
  define("setInterval", function setInterval(fn, delay, ...args) {
    if (typeof fn !== "function") return native.setInterval.apply(W, arguments);
    const level = chain + 1, ms = Math.max(Number(delay) || 0, 0);
    let first = waited(level, ms);
    const id = native.setInterval.call(W, function () {
      const counts = first;
      first = false;
      timers.delete(id);
      return run(this, fn, args, counts ? level : maxChain, counts);
    }, delay);
    if (first) timers.set(id, now() + ms);
    return id;
  });
  const clear = (nativeClear) => function (id) {
    timers.delete(id);
    return nativeClear.call(W, id);
  };
  define("clearTimeout", clear(native.clearTimeout));
  define("clearInterval", clear(native.clearInterval));
  if (native.raf) {
    define("requestAnimationFrame", function requestAnimationFrame(fn) {
      if (typeof fn !== "function") return native.raf.call(W, fn);
      const level = chain + 1, tracked = waited(level, 0);
      const id = native.raf.call(W, function (t) {
        frames.delete(id);
        return run(this, fn, [t], level, tracked);
      });
      if (tracked) frames.add(id);
      return id;
    });
    define("cancelAnimationFrame", function cancelAnimationFrame(id) {
      frames.delete(id);
      return native.caf.call(W, id);
    });
  }
  // Requests started where nothing counts (polling from an interval, say) hold no page.
  const report = (url) => {
    if (counting) return;
    try {
      const u = new URL(url, document.baseURI);
      u.hash = "";
      W[background](u.href);
    } catch (e) {}
  };
  if (typeof W.fetch === "function") {
    const nativeFetch = W.fetch;
    define("fetch", function fetch(input, init) {
      report(input instanceof Request ? input.url : String(input));
      return nativeFetch.apply(this, arguments);
    });
  }
  if (W.XMLHttpRequest) {
    const urls = new WeakMap(), proto = W.XMLHttpRequest.prototype;
    const open = proto.open, send = proto.send;
    proto.open = function (method, url) {
      urls.set(this, String(url));
      return open.apply(this, arguments);
    };
    proto.send = function () {
      if (urls.has(this)) report(urls.get(this));
      return send.apply(this, arguments);
    };
  }
  observer = new MutationObserver(() => { lastChange = now(); });
  observer.observe(document, {
    subtree: true, childList: true, characterData: true, attributes: true,
  });
  // Milliseconds to wait before asking again; 0 once the page has settled.
  Object.defineProperty(W, key, {
    value: () => {
      const t = now();
      if (document.readyState !== "complete") return 50;
      let wait = Math.max(0, settleMs - (t - lastChange));
      for (const due of timers.values()) wait = Math.max(wait, due - t, 5);
      if (frames.size) wait = Math.max(wait, 16);
      return Math.ceil(wait);
    },
    configurable: false, enumerable: false, writable: false,
  });
})();
"""


def settle_script(javascript_timeout: float) -> str:
    """The page's side of ``settled``: timers due within ``javascript_timeout`` are waited."""
    return (
        _SETTLE_SCRIPT.replace("__KEY__", SETTLE_KEY)
        .replace("__BACKGROUND__", BACKGROUND_BINDING)
        .replace("__HORIZON__", str(int(javascript_timeout * 1000)))
        .replace("__SETTLE__", str(int(SETTLE * 1000)))
        .replace("__CHAIN__", str(MAX_CHAIN))
    )


class NetworkSignals(Protocol):
    """What readiness reads of a capture's network: requests in flight with the time each
    started, each URL's last start or end, the URLs the page asked for in the background,
    and events for idle, busy and loaded."""

    in_flight: dict[Request, float]
    background: set[str]
    last_seen: dict[str, float]
    idle: asyncio.Event
    busy: asyncio.Event
    loaded: asyncio.Event


async def quiet(signals: NetworkSignals, seconds: float) -> None:
    """Return once no request has been in flight for ``seconds`` after the load event."""
    await signals.loaded.wait()
    while True:
        await signals.idle.wait()
        signals.busy.clear()
        try:
            await asyncio.wait_for(signals.busy.wait(), seconds)
        except TimeoutError:
            if not signals.in_flight:
                return


def _holding(signals: NetworkSignals, now: float) -> list[float]:
    """Start times of the requests in flight that still hold the page."""
    return [
        started
        for request, started in signals.in_flight.items()
        if now - started < LONG_REQUEST
        and request.resource_type not in _STREAMING
        and request.url not in signals.background
    ]


async def _network_rest(signals: NetworkSignals) -> None:
    """Return once no request that holds the page has started or ended for ``SETTLE``."""
    while True:
        now = time.monotonic()
        holding = _holding(signals, now)
        if holding:
            # Woken by the next start or end, or when the oldest becomes a long request.
            timeout = LONG_REQUEST - (now - min(holding))
        else:
            last = max(
                (t for url, t in signals.last_seen.items() if url not in signals.background),
                default=0.0,
            )
            timeout = SETTLE - (now - last)
            if timeout <= 0:
                return
        signals.busy.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(signals.busy.wait(), max(timeout, 0.001))


async def _page_wait(page: Page) -> float:
    """Seconds the page says it needs before it settles (0: settled)."""
    try:
        wait: Any = await page.evaluate(f"() => window.{SETTLE_KEY}()")
    except PlaywrightError:  # a navigation replaced the document meanwhile
        return 0.05
    return float(wait) / 1000 if isinstance(wait, int | float) else 0.05


async def settled(signals: NetworkSignals, page: Page) -> None:
    """Return once the page has settled (the module's rule); run beside ``quiet``."""
    await signals.loaded.wait()
    while True:
        await _network_rest(signals)
        wait = await _page_wait(page)
        if wait <= 0 and not _holding(signals, time.monotonic()):
            return
        await asyncio.sleep(min(max(wait, 0.005), _MAX_NAP))
