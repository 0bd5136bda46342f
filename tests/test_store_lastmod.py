"""When a page's main text last changed, and the pages a site's own sitemap lists, on SQLite
and PostgreSQL alike (store/lastmod)."""

from __future__ import annotations

from typing import Any

from snapshotd.pages.fingerprints import fingerprint
from snapshotd.store.outcome import CaptureOutcome

WORDS = " ".join(f"word{n}" for n in range(30))


async def _capture(store: Any, path: str, html: str, status: int = 200, **kw: Any) -> None:
    await store.enqueue("site", path, 1, force=True)
    assert await store.claim_path("site", path, "me", 60)
    assert await store.complete(
        "site", path, "me", CaptureOutcome(html=html, status=status, headers={}, final_url="u",
            expires_at=9e9, print_=fingerprint(html), **kw),
    )


async def test_lastmod_moves_only_when_the_main_text_changes(store):
    clock = store.test_clock
    await _capture(store, "/a", f"<main><p>{WORDS}</p><p>2026-11-26</p></main>")
    first = clock.now
    clock.now += 100
    # The same text in other markup, with a new build time: the same page.
    await _capture(store, "/a", f"<main><div>{WORDS}</div><p>2026-11-27</p></main>")
    assert await store.sitemap_pages("site", 0, 10) == [("/a", first)]
    clock.now += 100
    await _capture(store, "/a", f"<main><p>{WORDS} and a new line</p></main>")
    assert await store.sitemap_pages("site", 0, 10) == [("/a", clock.now)]


async def test_the_sitemap_lists_only_200_pages_that_are_no_copy(store):
    page = f"<main><p>{WORDS}</p></main>"
    await _capture(store, "/one", page)
    await _capture(store, "/copy", page, duplicate_of="/one")
    await _capture(store, "/gone", "<main>not here</main>", status=404)
    await _capture(store, "/two", "<main>two</main>")
    await _capture(store, "/crawled", "<main>links only</main>", keep=False)
    await store.enqueue("site", "/never-captured", 1)
    assert await store.sitemap_count("site") == 2
    assert [p for p, _ in await store.sitemap_pages("site", 0, 10)] == ["/one", "/two"]
    assert [p for p, _ in await store.sitemap_pages("site", 1, 10)] == ["/two"]
    assert await store.sitemap_count("other") == 0
