"""When a page is ready to be captured, short of ``window.onCaptureReady()``.

Invariants:

- ``quiet`` is SEO4Ajax's rule: no request in flight for ``javascript_timeout`` seconds after
  the main frame's load event; a new request restarts the wait.
- The adaptive readiness is never less true than ``quiet``: whatever a page shows when
  ``quiet`` would end its wait, it shows when ``settled`` or ``limit`` ends it. A request
  holds the page while in flight (whoever started it), and its start and end restart the
  quiet period; a timer due within the quiet period holds it until it has run, whatever the
  document did meanwhile (its callback may start a request). What does not hold the page, as
  it would hold ``quiet`` forever: a request in flight for more than ``LONG_REQUEST`` seconds
  (a long poll), or of a streaming kind (EventSource, WebSocket).
- ``settled`` is ready once, after the load event, no request that holds the page has been
  in flight, started or ended for ``SETTLE`` seconds, the DOM has not changed for ``SETTLE``
  seconds (a MutationObserver), and no task holds the page.
- A task is one piece of scheduled work: a timeout, interval, animation frame or dedicated
  worker asked for outside any such callback, together with every one its callbacks ask for
  (a chain of timeouts, an animation loop, an interval's ticks). A task holds the page while
  it has something due within ``javascript_timeout`` (or a worker yet to answer).
- ``limit`` bounds ``settled`` (they run side by side): it is ``quiet``'s period, ended
  ``SETTLE`` later, once no timer that fell due within it is yet to run. So a page that
  changes forever (a clock, a carousel, an endless animation) is captured at about
  ``javascript_timeout`` after its last request. A page still at work when a limit ended the
  wait (``still_working``: its DOM changing, a request in flight, or a task that is not
  *idle* holding it) is captured marked ``readiness_limit``. A task is idle once it has run
  ``javascript_timeout`` seconds without changing the document while no request started
  outside every task was in flight or ended (a poll that changes nothing).
- ``hard`` bounds them both: a page whose requests never stop for ``javascript_timeout`` (a
  poll, a chain of timers and requests without end) is captured ``hard_limit`` seconds after
  its capture started, before ``render_timeout``, marked ``readiness_limit``.
- A page that sets ``window.prerenderReady = false`` (Prerender's convention) is not ready
  by any rule until it sets it true (which is ``onCaptureReady()``), or calls
  ``onCaptureReady``; ``render_timeout`` bounds it. A page that declares nothing is not
  waited for past the rules.
- The page's side is ``settle_script``, run before any page script, asked through the
  function at ``SETTLE_KEY`` (it answers how long to wait, and tells nothing); it wraps
  ``setTimeout``, ``setInterval``, ``requestAnimationFrame``, their ``clear``/``cancel``
  functions, ``fetch``, ``XMLHttpRequest`` and ``Worker`` (a dedicated worker is its task's
  work until it first posts a message or fails), each calling the browser's own, so the page
  sees the same ids and timing. A running Web Animation that ends within
  ``javascript_timeout`` also holds the page, until 50 ms after its end (its end may show
  content), and so does a CSS transition or CSS animation when something listens for the end
  of one (an ``addEventListener`` for ``transitionend``, ``animationend`` and their kin
  anywhere, an ``on...`` handler set or written in the markup); one nothing listens for
  changes no more than the styles the browser computes as it runs, which no snapshot holds
  (a screenshot is taken with finite animations run to their end).
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
    "RESERVE",
    "SETTLE",
    "SETTLE_KEY",
    "STREAMING",
    "hard",
    "hard_limit",
    "limit",
    "quiet",
    "settle_script",
    "settled",
    "still_working",
    "undeclared",
]

SETTLE = 0.2  # seconds the DOM and the network must stay still
LONG_REQUEST = 10.0  # seconds after which a request in flight no longer holds the page
SETTLE_KEY = "__snapshotdSettle"
STREAMING = frozenset({"eventsource", "websocket"})  # kinds of request that never hold a page
_MAX_NAP = 0.5  # the longest the page's own estimate is trusted before asking again
_DECLARED_POLL = 0.1  # how often a page that will say when it is ready is asked again
RESERVE = 5.0  # seconds of render_timeout at most kept for serialising a held page
# What the page's side is asked: whether it settled, is still at work, has a timer overdue.
_SETTLED, _AT_WORK, _DUE = 0, 1, 2

_SETTLE_SCRIPT = """
(() => {
  const key = "__KEY__";
  const quietMs = __QUIET__, settleMs = __SETTLE__;
  const W = window;
  if (Object.prototype.hasOwnProperty.call(W, key)) return;
  const now = () => performance.now();
  // A task is one piece of scheduled work: a timer, interval, frame or worker asked for
  // outside any such callback, with every one its callbacks ask for in turn. ``due`` maps
  // each of its pending ids ("t12" a timer, "f3" a frame, "w1" a worker) to when it is due;
  // ``since`` is when it started or last changed the document.
  let current = null, lastChange = now(), observer = null;
  let untracked = 0, lastRequest = -Infinity;  // requests started outside any task
  const tasks = new Set();
  const newTask = () => ({ since: now(), due: new Map() });
  const native = {
    setTimeout: W.setTimeout, clearTimeout: W.clearTimeout,
    setInterval: W.setInterval, clearInterval: W.clearInterval,
    raf: W.requestAnimationFrame, caf: W.cancelAnimationFrame,
  };
  // A task is idle once it has run for ``quietMs`` with no change to the document, while no
  // request started outside every task was in flight or ended.
  function idle(task, t) {
    const busy = untracked > 0 ? t : lastRequest;
    return t - Math.max(task.since, busy) >= quietMs;
  }
  const owners = new Map();  // pending id -> its task
  function add(task, id, due) {
    task.due.set(id, due);
    owners.set(id, task);
    tasks.add(task);
  }
  function done(id) {
    const task = owners.get(id);
    if (!task) return;
    owners.delete(id);
    task.due.delete(id);
    if (!task.due.size) tasks.delete(task);
  }
  // Runs a callback of ``task``; a change it makes to the document restarts its quiet period.
  function run(task, self, fn, args) {
    const outer = current;
    if (observer && observer.takeRecords().length) lastChange = now();
    current = task;
    try {
      return fn.apply(self, args);
    } finally {
      if (observer && observer.takeRecords().length) task.since = lastChange = now();
      current = outer;
    }
  }
  function define(name, value) {
    Object.defineProperty(W, name, { value, writable: true, configurable: true, enumerable: true });
  }
  define("setTimeout", function setTimeout(fn, delay, ...args) {
    if (typeof fn !== "function") return native.setTimeout.apply(W, arguments);
    const task = current || newTask(), ms = Math.max(Number(delay) || 0, 0);
    const id = native.setTimeout.call(W, function () {
      done("t" + id);
      return run(task, this, fn, args);
    }, delay);
    add(task, "t" + id, now() + ms);
    return id;
  });
  define("setInterval", function setInterval(fn, delay, ...args) {
    if (typeof fn !== "function") return native.setInterval.apply(W, arguments);
    const task = current || newTask(), ms = Math.max(Number(delay) || 0, 0);
    const id = native.setInterval.call(W, function () {
      if (task.due.has("t" + id)) task.due.set("t" + id, now() + ms);
      return run(task, this, fn, args);
    }, delay);
    add(task, "t" + id, now() + ms);
    return id;
  });
  const clear = (nativeClear) => function (id) {
    done("t" + id);
    return nativeClear.call(W, id);
  };
  define("clearTimeout", clear(native.clearTimeout));
  define("clearInterval", clear(native.clearInterval));
  if (native.raf) {
    define("requestAnimationFrame", function requestAnimationFrame(fn) {
      if (typeof fn !== "function") return native.raf.call(W, fn);
      const task = current || newTask();
      const id = native.raf.call(W, function (t) {
        done("f" + id);
        return run(task, this, fn, [t]);
      });
      add(task, "f" + id, now());
      return id;
    });
    define("cancelAnimationFrame", function cancelAnimationFrame(id) {
      done("f" + id);
      return native.caf.call(W, id);
    });
  }
  // A dedicated worker is work of the task that started it until it first posts a message
  // or fails (or its task goes idle): its answer may be the content.
  if (typeof W.Worker === "function") {
    const NativeWorker = W.Worker;
    let workers = 0;
    const Worker = function Worker(url, options) {
      if (!new.target) return NativeWorker(url, options);  // throws as the browser's does
      const worker = Reflect.construct(NativeWorker, arguments, new.target);
      const id = "w" + ++workers, task = current || newTask(), end = () => done(id);
      add(task, id, now());
      worker.addEventListener("message", end, { once: true });
      worker.addEventListener("error", end, { once: true });
      return worker;
    };
    Worker.prototype = NativeWorker.prototype;
    Object.defineProperty(W, "Worker", {
      value: Worker, writable: true, configurable: true, enumerable: false,
    });
  }
  // A request started outside every task restarts each task's quiet period (a poll may be
  // waiting for it): counted while in flight, and when it ended.
  const started = () => {
    if (current) return null;
    untracked++;
    return () => { untracked--; lastRequest = now(); };
  };
  if (typeof W.fetch === "function") {
    const nativeFetch = W.fetch;
    define("fetch", function fetch(input, init) {
      const ended = started();
      const answer = nativeFetch.apply(this, arguments);
      if (ended) answer.then(ended, ended);
      return answer;
    });
  }
  if (W.XMLHttpRequest) {
    const send = W.XMLHttpRequest.prototype.send;
    W.XMLHttpRequest.prototype.send = function () {
      const ended = started();
      if (ended) this.addEventListener("loadend", ended, { once: true });
      return send.apply(this, arguments);
    };
  }
  // Prerender's convention: a page that sets ``prerenderReady = false`` says when it is
  // ready by setting it true (as if it called onCaptureReady()).
  let declared;
  Object.defineProperty(W, "prerenderReady", {
    get: () => declared,
    set: (value) => {
      const was = declared;
      declared = value;
      if (was === false && value === true && typeof W.onCaptureReady === "function") {
        W.onCaptureReady();
      }
    },
    configurable: true, enumerable: true,
  });
  // Whether anything listens for the end of a CSS transition or CSS animation: only then
  // may its end change the document (as it runs, only styles the browser computes change,
  // which a snapshot does not hold). A listener added anywhere, an on... handler set on an
  // element, the document or the window, or written in the markup counts.
  const ends = new Map([
    ["transitionend", "transition"], ["transitioncancel", "transition"],
    ["webkittransitionend", "transition"], ["animationend", "animation"],
    ["animationcancel", "animation"], ["animationiteration", "animation"],
    ["webkitanimationend", "animation"], ["webkitanimationiteration", "animation"],
  ]);
  const listened = { transition: false, animation: false };
  const listen = (type) => {
    const kind = typeof type === "string" && ends.get(type.toLowerCase());
    if (kind) listened[kind] = true;
  };
  const nativeAdd = EventTarget.prototype.addEventListener;
  Object.defineProperty(EventTarget.prototype, "addEventListener", {
    value: function addEventListener(type) {
      listen(type);
      return nativeAdd.apply(this, arguments);
    },
    writable: true, configurable: true, enumerable: true,
  });
  for (const owner of [W, W.Document && Document.prototype, W.HTMLElement &&
                       HTMLElement.prototype, W.SVGElement && SVGElement.prototype]) {
    for (const type of ends.keys()) {
      const d = owner && Object.getOwnPropertyDescriptor(owner, "on" + type);
      if (!d || !d.set || !d.configurable) continue;
      Object.defineProperty(owner, "on" + type, {
        get: d.get,
        set: function (value) { if (value) listen(type); return d.set.call(this, value); },
        configurable: true, enumerable: d.enumerable,
      });
    }
  }
  const inMarkup = {};  // each kind's handlers in the markup, as one selector
  for (const kind of ["transition", "animation"]) {
    inMarkup[kind] = [...ends].filter(([, k]) => k === kind).map(([t]) => "[on" + t + "]")
      .join(",");
  }
  const endHeard = (a) => {
    const kind = W.CSSTransition && a instanceof W.CSSTransition ? "transition"
      : W.CSSAnimation && a instanceof W.CSSAnimation ? "animation" : null;
    if (!kind) return true;  // a script's Web Animation: its script may await its end
    return listened[kind] || !!document.querySelector(inMarkup[kind]);
  };
  observer = new MutationObserver(() => { lastChange = now(); });
  observer.observe(document, {
    subtree: true, childList: true, characterData: true, attributes: true,
  });
  // Milliseconds to wait before asking again: 0 once the page has settled; -1 while it has
  // declared it will say when it is ready. ``ask`` 1: whether the page is still at work
  // (idle tasks left out); 2: whether a timer that fell due has yet to run (nothing else).
  Object.defineProperty(W, key, {
    value: (ask) => {
      const t = now();
      if (ask === 2) {
        for (const task of tasks) {
          for (const [id, due] of task.due) if (id[0] === "t" && due <= t) return 5;
        }
        return 0;
      }
      if (declared === false) return -1;
      if (document.readyState !== "complete") return 50;
      let wait = Math.max(0, settleMs - (t - lastChange));
      for (const task of tasks) {
        if (ask === 1 && idle(task, t)) continue;
        for (const [id, due] of task.due) {
          if (due - t > quietMs) continue;  // not due within the quiet period
          // A timer when due; a frame in the next one; a worker's answer soon.
          wait = Math.max(wait, id[0] === "t" ? due - t : id[0] === "f" ? 16 : 50, 5);
        }
      }
      // A CSS animation or transition whose end something listens for, or a script's Web
      // Animation, that ends within the quiet period: its end may show content. Endless
      // ones hold nothing.
      for (const a of document.getAnimations ? document.getAnimations() : []) {
        const timing = a.playState === "running" && a.effect && a.effect.getComputedTiming();
        if (!timing || !Number.isFinite(timing.endTime) || !endHeard(a)) continue;
        const left = (timing.endTime - (timing.localTime || 0)) / Math.abs(a.playbackRate || 1);
        if (left <= quietMs) wait = Math.max(wait, Math.max(left, 0) + 50);
      }
      return Math.ceil(wait);
    },
    configurable: false, enumerable: false, writable: false,
  });
})();
"""


def settle_script(javascript_timeout: float) -> str:
    """The page's side of ``settled``: a task idle for ``javascript_timeout`` holds nothing."""
    return (
        _SETTLE_SCRIPT.replace("__KEY__", SETTLE_KEY)
        .replace("__QUIET__", str(int(javascript_timeout * 1000)))
        .replace("__SETTLE__", str(int(SETTLE * 1000)))
    )


class NetworkSignals(Protocol):
    """What readiness reads of a capture's network: requests in flight with the time each
    started (and which of them are of a ``STREAMING`` kind), each URL's last start or end,
    and events for idle, busy and loaded."""

    in_flight: dict[Request, float]
    streams: set[Request]
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


def _holding(signals: NetworkSignals, now: float) -> list[Request]:
    """The requests in flight that still hold the page."""
    return [
        request
        for request, started in signals.in_flight.items()
        if now - started < LONG_REQUEST and request not in signals.streams
    ]


async def _wake(signals: NetworkSignals, timeout: float) -> None:
    """Wait for the next request to start or end, ``timeout`` seconds at most."""
    signals.busy.clear()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(signals.busy.wait(), max(timeout, 0.001))


async def _network_rest(signals: NetworkSignals, seconds: float, since: float = 0.0) -> None:
    """Return once no request that holds the page has been in flight, started or ended for
    ``seconds`` (nor has ``since`` been that recent)."""
    while True:
        now = time.monotonic()
        holding = _holding(signals, now)
        if holding:
            # Woken by the next start or end, or when the oldest becomes a long request.
            timeout = LONG_REQUEST - (now - min(signals.in_flight[r] for r in holding))
        else:
            last = max(signals.last_seen.values(), default=since)
            timeout = seconds - (now - max(last, since))
            if timeout <= 0:
                return
        await _wake(signals, timeout)


async def _page_wait(page: Page, ask: int = _SETTLED) -> float:
    """Seconds the page says it needs before it settles (``ask``: :data:`_SETTLED`,
    :data:`_AT_WORK` or :data:`_DUE`, as the page's side reads them): 0 once settled, -1
    while it has declared it will say when it is ready."""
    try:
        wait: Any = await page.evaluate(f"a => window.{SETTLE_KEY}(a)", ask)
    except PlaywrightError:  # a navigation replaced the document meanwhile
        return 0.05
    return float(wait) / 1000 if isinstance(wait, int | float) and wait >= 0 else -1.0


async def undeclared(page: Page) -> None:
    """Return once the page has not declared it will say when it is ready (``prerenderReady
    = false``); such a page ends its capture itself, or ``render_timeout`` does."""
    while await _page_wait(page) < 0:
        await asyncio.sleep(_DECLARED_POLL)


async def settled(signals: NetworkSignals, page: Page) -> None:
    """Return once the page has settled (the module's rule); run beside ``limit``."""
    await signals.loaded.wait()
    while True:
        await _network_rest(signals, SETTLE)
        wait = await _page_wait(page)
        if wait == 0 and not _holding(signals, time.monotonic()):
            return
        await asyncio.sleep(_DECLARED_POLL if wait < 0 else min(max(wait, 0.005), _MAX_NAP))


async def limit(signals: NetworkSignals, page: Page, seconds: float) -> None:
    """Return once no request that holds the page has been in flight, started or ended for
    ``seconds`` after the load event, no timer that fell due meanwhile is yet to run, and
    ``SETTLE`` more has passed."""
    await signals.loaded.wait()
    since = time.monotonic()
    while True:
        await _network_rest(signals, seconds, since)
        wait = await _page_wait(page, _DUE)
        if wait <= 0 and not _holding(signals, time.monotonic()):
            break
        await asyncio.sleep(max(wait, 0.005))
    await asyncio.sleep(SETTLE)


def hard_limit(render_timeout: float) -> float:
    """Seconds after a capture's start at which ``hard`` ends the wait: ``render_timeout``
    less what serialising the page may take (a fifth of it, :data:`RESERVE` at most)."""
    return render_timeout - min(RESERVE, render_timeout / 5)


async def hard(seconds: float) -> None:
    """Return after ``seconds``: the bound of a page whose requests never stop."""
    await asyncio.sleep(max(seconds, 0.0))


async def still_working(signals: NetworkSignals, page: Page) -> bool:
    """Whether the page has not settled now: the DOM changed within ``SETTLE``, a task that
    is not idle holds it, or a request that holds it is in flight."""
    return bool(_holding(signals, time.monotonic())) or await _page_wait(page, _AT_WORK) != 0
