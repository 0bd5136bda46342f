"""What a crawler's renderer shows of a page, read from Chromium's layout tree: the words of
every text box laid out and visible (``DOMSnapshot``), shadow roots included, which
``innerText`` leaves out. Rendered as Googlebot Smartphone renders (its profile,
:mod:`snapshotd.crawlers.devices`): the live page with its scripts, a snapshot without."""

from __future__ import annotations

import asyncio
import re
from collections import Counter

from playwright.async_api import Browser, BrowserContext, Route

from snapshotd.crawlers.devices import PROFILES

_WORD = re.compile(r"\w+")


async def _words(context: BrowserContext, url: str, settle: float) -> Counter[str]:
    page = await context.new_page()
    await page.goto(url, wait_until="networkidle", timeout=30_000)
    await asyncio.sleep(settle)
    cdp = await context.new_cdp_session(page)
    snap = await cdp.send("DOMSnapshot.captureSnapshot", {"computedStyles": ["visibility"]})
    strings = snap["strings"]
    words: Counter[str] = Counter()
    document = snap["documents"][0]
    layout, boxes = document["layout"], document["textBoxes"]
    for index, start, length in zip(
        boxes["layoutIndex"], boxes["start"], boxes["length"], strict=True
    ):
        if strings[layout["styles"][index][0]] != "visible":
            continue
        text = layout["text"][index]
        if text >= 0:
            words.update(_WORD.findall(strings[text][start : start + length].lower()))
    await context.close()
    return words


async def live_words(browser: Browser, url: str) -> Counter[str]:
    """The live page, scripts on, as Googlebot Smartphone renders it."""
    options = PROFILES["mobile"].context_options(browser.version)
    return await _words(await browser.new_context(**options), url, 0.5)


async def snapshot_words(browser: Browser, url: str, html: str) -> Counter[str]:
    """A snapshot served at ``url``, scripts off; its style sheets from their origin."""
    options = PROFILES["mobile"].context_options(browser.version)
    context = await browser.new_context(java_script_enabled=False, **options)

    async def serve(route: Route) -> None:
        await route.fulfill(body=html, content_type="text/html; charset=utf-8")

    await context.route(lambda u: u == url, serve)
    return await _words(context, url, 0.0)


def recall_precision(live: Counter[str], snapshot: Counter[str]) -> tuple[float, float]:
    """Of the live page's words, the share the snapshot shows; of the snapshot's, the share
    the live page shows (as multisets)."""
    common = sum((live & snapshot).values())
    return (
        common / max(sum(live.values()), 1) if live else 1.0,
        common / max(sum(snapshot.values()), 1) if snapshot else 1.0,
    )
