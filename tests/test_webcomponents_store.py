"""The duplicate check on snapshots of a Lit shop, on both stores (real Chromium): two
products whose light DOM is the same are two pages, since their main text is read from their
shadow roots."""

from __future__ import annotations

import pytest

from snapshotd.config.settings import BrowserSettings, SiteSettings
from snapshotd.pages.fingerprints import fingerprint
from snapshotd.render import BrowserPool
from snapshotd.store.outcome import CaptureOutcome
from tests.corpus.webcomponents.fixtures import origin

pytestmark = pytest.mark.browser
__all__ = ["origin"]


async def test_two_lit_products_with_the_same_light_dom_are_not_each_others_duplicates(
    store, origin: str  # type: ignore[no-untyped-def]
) -> None:
    pool = BrowserPool(BrowserSettings(concurrency=1, javascript_timeout=1.0, render_timeout=30))
    await pool.start()
    try:
        paths = ("/lit-shop?id=1", "/lit-shop?id=2")
        captures = [await pool.capture(origin + p, SiteSettings(origin=origin)) for p in paths]
    finally:
        await pool.close()
    for path, capture in zip(paths, captures, strict=True):
        assert capture.ok, capture
        print_ = fingerprint(capture.html)
        assert print_.words >= 30
        assert await store.find_same_text("shop", print_.text_hash, path) is None
        await store.enqueue("shop", path, 1)
        await store.claim_path("shop", path, "me", 60)
        assert await store.complete(
            "shop", path, "me", CaptureOutcome(
                html=capture.html, status=200, headers={}, final_url=path,
                expires_at=store.test_clock() + 60, duplicate_of=None, shared=True, print_=print_),
        )
    prints = await store.prints("shop", list(paths))
    assert prints[paths[0]].text_hash != prints[paths[1]].text_hash
    snapshot = await store.get_snapshot("shop", paths[1])
    assert snapshot is not None and "Teapot T7" in snapshot.html
