"""Shadow roots: what a crawler's renderer shows of a snapshot, against the live page, on the
web-component corpus (tests/corpus/webcomponents); and the light-DOM capture time, with the
shadow-root serialisation and without it, side by side in one run.

    python bench/bench_shadow.py                    # full run
    python bench/bench_shadow.py --captures 40      # a quicker timing

Per page: word recall and precision (as multisets) of the text a snapshot shows rendered with
scripts off, against the live page rendered as Googlebot Smartphone renders it, both read from
Chromium's layout tree (tests/corpus/webcomponents/texts.py); target >= 0.98 both ways for
every web-component page. snapshotd's snapshot beside prerender's (npm ``prerender``,
bench/prerender, as bench_readiness runs it), when it is installed.

Timing: bench_render's item pages (light DOM), captured by ``BrowserPool`` at concurrency 1,
in rounds that take turns between today's serialisation (render/shadow) and the one before it
(doctype + ``outerHTML``, one call); the median seconds per capture of each, and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from playwright.async_api import async_playwright  # noqa: E402

from bench.bench_readiness import PRERENDER, prerender, serve_app  # noqa: E402
from bench.bench_render import serve, urls  # noqa: E402
from snapshotd.config.settings import BrowserSettings, SiteSettings  # noqa: E402
from snapshotd.render import BrowserPool, find_chromium, slot  # noqa: E402
from tests.corpus.webcomponents import PAGES  # noqa: E402
from tests.corpus.webcomponents.server import NODE_MODULES, create_app  # noqa: E402
from tests.corpus.webcomponents.texts import (  # noqa: E402
    live_words,
    recall_precision,
    snapshot_words,
)

_BEFORE = """() => {
  const d = document.doctype;
  const head = d ? new XMLSerializer().serializeToString(d) : "";
  return head + (document.documentElement ? document.documentElement.outerHTML : "");
}"""


async def _before(page: Any, cdp: Any, scripted_roots: bool, document: Any = None) -> str:
    """The serialisation before shadow roots were kept."""
    return str(await page.evaluate(_BEFORE))


async def truth(executable: str, timeout: float) -> None:
    origin = serve_app(create_app())
    pool = BrowserPool(BrowserSettings(concurrency=2, executable=executable,
                                       render_timeout=timeout))
    await pool.start()
    site = SiteSettings(origin=origin)
    ours: dict[str, str | None] = {}
    for path, _kind, _phrases in PAGES:
        result = await pool.capture(origin + path, site, "mobile")
        ours[path] = result.html if result.ok else None
    await pool.close()
    theirs: dict[str, str | None] = {}
    if (PRERENDER / "node_modules" / "prerender").is_dir() and shutil.which("node"):
        async with prerender(executable, timeout) as capture:
            for path, _kind, _phrases in PAGES:
                theirs[path] = (await capture(origin + path))[0]
    else:
        print(f"prerender is missing (npm ci --prefix {PRERENDER}): left out")
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=executable)
        print(f"{'page':16} {'kind':6} {'words':>5}  {'snapshotd R/P':>13}  {'prerender R/P':>13}")
        for path, kind, _phrases in PAGES:
            live = await live_words(browser, origin + path)
            cells = []
            for done, html in ((True, ours[path]), (path in theirs, theirs.get(path))):
                if html is None:
                    cells.append("failed" if done else "-")
                    continue
                shown = await snapshot_words(browser, origin + path, html)
                recall, precision = recall_precision(live, shown)
                cells.append(f"{recall:.3f}/{precision:.3f}")
            print(f"{path:16} {kind:6} {sum(live.values()):5}  {cells[0]:>13}  {cells[1]:>13}")
        await browser.close()


async def timing(executable: str, captures: int, rounds: int) -> None:
    origin = serve(captures)
    site = SiteSettings(origin=origin)
    seconds: dict[str, list[float]] = {"today": [], "before": []}
    kept = slot.serialize
    start = 1
    for _ in range(rounds):
        for name, serializer in (("before", _before), ("today", kept)):
            slot.serialize = serializer  # type: ignore[assignment]
            pool = BrowserPool(BrowserSettings(concurrency=1, executable=executable))
            await pool.start()
            try:
                for url in urls(origin, 5, captures, start):  # warm-up
                    await pool.capture(url, site)
                todo = urls(origin, captures, captures, start + 5)
                began = time.perf_counter()
                for url in todo:
                    result = await pool.capture(url, site)
                    assert result.ok and "Item" in result.html, result
                seconds[name].append((time.perf_counter() - began) / len(todo))
            finally:
                await pool.close()
                slot.serialize = kept
            start += captures + 5
    today, before = statistics.median(seconds["today"]), statistics.median(seconds["before"])
    print(f"light DOM, {captures} captures x {rounds} rounds, concurrency 1, median per capture:")
    print(f"  before {before * 1000:.1f} ms  today {today * 1000:.1f} ms  "
          f"ratio {today / before:.3f}  (rounds: before "
          + ", ".join(f"{s * 1000:.1f}" for s in seconds["before"]) + "; today "
          + ", ".join(f"{s * 1000:.1f}" for s in seconds["today"]) + ")")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--captures", type=int, default=100, help="light captures per round")
    parser.add_argument("--rounds", type=int, default=3, help="before/today pairs")
    parser.add_argument("--timeout", type=float, default=30.0, help="render timeout")
    parser.add_argument("--skip-timing", action="store_true")
    args = parser.parse_args()
    if not (NODE_MODULES / "lit").is_dir():
        sys.exit(f"the web-component corpus is not installed: make {NODE_MODULES}")
    executable = find_chromium(BrowserSettings())
    await truth(executable, args.timeout)
    if not args.skip_timing:
        await timing(executable, args.captures, args.rounds)


if __name__ == "__main__":
    asyncio.run(main())
