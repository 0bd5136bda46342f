"""What running animations hold of a capture (snapshotd.render.readiness, SPEC 4.1): a script's
Web Animation, and a CSS transition or animation whose end something listens for, hold the
page until they end; a CSS transition or animation nothing listens for holds nothing (as it
runs only the styles the browser computes change, which no snapshot holds). Asked of the
page's side of the rule in real Chromium, with a quiet period long enough that each 30 s
animation falls within it: the answer is how long the page says it still needs."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from playwright.async_api import Browser, async_playwright

from snapshotd.render.chromium import LAUNCH_ARGS
from snapshotd.render.readiness import SETTLE_KEY, settle_script
from tests.chromium import require_chromium

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="module")]

QUIET = 120.0  # seconds: every animation below ends within it
HELD = 10_000  # milliseconds: an answer above this waits for a 30 s animation's end

STYLE = """<style>
#t { opacity: 0; transition: opacity 30s linear; } #t.on { opacity: 1; }
#a.on { animation: grow 30s linear; }
@keyframes grow { from { width: 10px; } to { width: 100px; } }
</style>"""


def page(body: str, script: str) -> str:
    return (f"<!doctype html><html><head>{STYLE}</head><body>{body}<script>{script}"
            "\nrequestAnimationFrame(() => requestAnimationFrame(() => "
            "document.querySelectorAll('#t, #a').forEach((e) => e.classList.add('on'))));"
            "</script></body></html>")


BOX = '<div id="t">Fading in</div><div id="a">Growing</div>'
CASES = {
    # Nothing listens: neither holds the page.
    "css, nobody listens": (BOX, "", False),
    # A listener for the end of its kind, wherever it is added.
    "transitionend on the element": (
        BOX, "document.getElementById('t').addEventListener('transitionend', () => {});", True),
    "animationend on the document": (
        BOX, "document.addEventListener('animationend', () => {});", True),
    "webkitTransitionEnd on the window": (
        BOX, "window.addEventListener('webkitTransitionEnd', () => {});", True),
    "an on... handler set by script": (
        BOX, "document.getElementById('t').ontransitionend = () => {};", True),
    "an on... handler set on the window": (
        BOX, "window.onanimationend = () => {};", True),
    "a handler in the markup": (
        '<div id="t" ontransitionend="void 0">Fading in</div>', "", True),
    # A script's own Web Animation: its script may await its end.
    "a Web Animation": (
        '<div id="w">Moving</div>',
        "document.getElementById('w').animate([{opacity: 0}, {opacity: 1}], 30000);", True),
    # A listener for something else is no listener for the end.
    "a click listener": (BOX, "document.addEventListener('click', () => {});", False),
}


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as p:
        launched = await p.chromium.launch(
            executable_path=require_chromium(), args=list(LAUNCH_ARGS)
        )
        yield launched
        await launched.close()


async def _needs(browser: Browser, html: str) -> int:
    """How long the page says it still needs once its animations run (ms)."""
    context = await browser.new_context()
    try:
        await context.add_init_script(settle_script(QUIET))
        page_ = await context.new_page()
        await page_.set_content(html)
        await page_.wait_for_function("document.getAnimations().length > 0")
        # Past the settle period of the class change that started them.
        await page_.wait_for_timeout(400)
        return int(await page_.evaluate(f"a => window.{SETTLE_KEY}(a)", 0))
    finally:
        await context.close()


@pytest.mark.parametrize("case", list(CASES))
async def test_an_animation_holds_the_page_only_when_its_end_may_change_it(
    browser: Browser, case: str
) -> None:
    body, script, held = CASES[case]
    needs = await _needs(browser, page(body, script))
    assert (needs > HELD) is held, (case, needs)
