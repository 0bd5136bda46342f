"""The readiness corpus: pages whose content arrives late in the ways real apps make it
arrive, and real apps built with real frameworks, each with the visible text a capture must
show. Served by :mod:`tests.corpus.server`; read by tests/test_readiness.py and
bench/bench_readiness.py.

Visible text is ``document.body.innerText`` of the HTML rendered with JavaScript off, with
elements marked ``data-truth="ignore"`` (a ticking clock) left out, whitespace runs made one
space.
"""

from __future__ import annotations

from dataclasses import dataclass

from playwright.async_api import Browser

from examples.spa.app import ITEMS

__all__ = ["CASES", "Case", "VISIBLE_TEXT", "normalise", "visible_text"]


@dataclass(frozen=True)
class Case:
    name: str
    path: str
    expected: str
    app: bool = False  # a real app built with a real framework
    endless: bool = False  # it changes its document forever: only a limit ends the wait
    timers: bool = False  # it finishes with timers, frames or polls within the quiet period
    held: bool = False  # requests keep coming within the quiet period: the hard limit ends it
    declares: bool = False  # it sets prerenderReady = false, then says when it is ready


def _item(n: int, home: str = "Home") -> str:
    i = ITEMS[n - 1]
    return f"{home} {i['name']} {i['text']} Price: ${i['price']}"


_LIST = "Home All items " + " ".join(i["name"] for i in ITEMS[:5])

CASES = (
    Case("fetch chain", "/c/fetchchain", "Chain complete alpha beta gamma"),
    Case("fetch, 300 ms timer, fetch", "/c/timerfetch", "First: alpha Second: beta"),
    Case("1.5 s timer, no network", "/c/timer", "Arrived after a timer", timers=True),
    Case("render in an animation frame", "/c/raf", "Rendered in a frame"),
    Case(
        "endless spinner, content at 1 s", "/c/spinner", "* Content behind a spinner", endless=True
    ),
    Case("clock ticking forever", "/c/clock", "A page with a clock Ticks:", endless=True),
    Case("long poll", "/c/longpoll", "Polling: alpha"),
    Case("requests every 150 ms, forever", "/c/polling", "Polled page: alpha", held=True),
    Case("EventSource", "/c/eventsource", "Streamed: first news"),
    Case("WebSocket", "/c/websocket", "Socket says: hello over a socket"),
    Case("shared worker", "/c/sharedworker", "Beside a shared worker: alpha"),
    Case("DOM changing forever", "/c/restless", "Never still Changes:", endless=True),
    Case("four chained 400 ms timeouts", "/c/timerchain", "After four chained timers", timers=True),
    Case("frame loop, content at 1.5 s", "/c/rafloop", "Revealed by a frame loop", timers=True),
    Case("300 ms interval counting to 5", "/c/intervalcount", "Counted to five", timers=True),
    Case("500 ms fetch, 500 ms poll for it", "/c/fetchpoll", "Polled result: delta", timers=True),
    Case(
        "prerenderReady, onCaptureReady at 5 s",
        "/c/lateready",
        "Ready after five seconds",
        declares=True,
    ),
    Case(
        "prerenderReady true at 4 s", "/c/prerenderready", "Declared ready at last", declares=True
    ),
    Case("carousel turning forever", "/c/carousel", "Slides alpha one two three", endless=True),
    Case("typing effect", "/c/typing", "Typed one letter at a time", timers=True),
    Case(
        "skeleton replaced at 1.2 s", "/c/skeleton", "Skeleton replaced Real content", timers=True
    ),
    Case("count-up number", "/c/countup", "Users: 48213", timers=True),
    Case("toast that vanishes at 2.5 s", "/c/toast", "Page with a toast", timers=True),
    Case("SVG animated forever", "/c/lottie", "Animated page: beta", endless=True),
    Case("job status polled until done", "/c/jobstatus", "Job finished: epsilon", timers=True),
    Case(
        "CSS transition, content on its end",
        "/c/transition",
        "Fading in After the transition",
        timers=True,
    ),
    Case("worker posting at 1.5 s", "/c/worker", "Computed in a worker", timers=True),
    Case(
        "shimmer, 2 s timer, request, 1 s timer",
        "/c/timerfirst",
        "After a timer: delta",
        timers=True,
    ),
    Case(
        "2 s timer, request, three times", "/c/requestchain", "Chain of three: gamma", timers=True
    ),
    Case("one chain polling every 2 s", "/c/pollchain", "Polled three: gamma", timers=True),
    Case("six awaited 300 ms sleeps", "/c/promisechain", "Awaited six sleeps", timers=True),
    Case("AngularJS + ngRoute, item", "/apps/angular/#!/items/3", _item(3), app=True),
    Case("AngularJS + ngRoute, list", "/apps/angular/#!/", _LIST, app=True),
    Case("React + React Router, item", "/apps/react/items/4", _item(4), app=True),
    Case("React + React Router, list", "/apps/react/", _LIST, app=True),
    Case("Vue, item", "/apps/vue/?item=5", _item(5), app=True),
    Case("Vue, list", "/apps/vue/", _LIST, app=True),
    Case("Preact + htm, item", "/apps/preact/items/6", _item(6), app=True),
    Case("Preact + htm, list", "/apps/preact/", _LIST, app=True),
)

# Evaluated in a page: its visible text, without what the corpus marks as not part of it.
VISIBLE_TEXT = """() => {
  for (const el of document.querySelectorAll('[data-truth="ignore"]')) el.remove();
  return document.body ? document.body.innerText : "";
}"""


def normalise(text: str) -> str:
    return " ".join(text.split())


async def visible_text(browser: Browser, html: str) -> str:
    """The visible text of ``html`` shown with JavaScript off, as a crawler that runs none
    sees it (nothing is fetched: the context is offline)."""
    context = await browser.new_context(java_script_enabled=False, offline=True)
    try:
        page = await context.new_page()
        await page.set_content(html, wait_until="domcontentloaded")
        return normalise(await page.evaluate(VISIBLE_TEXT))
    finally:
        await context.close()
