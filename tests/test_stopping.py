"""A stop ends work one way, the capture service's and the crawler's alike
(:func:`snapshotd.capture.service.wind_down`): grace, then cut short, then every lease back."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import pytest

from snapshotd.capture.service import CaptureService
from snapshotd.config.settings import Settings, SiteSettings
from snapshotd.crawl.engine import Crawler
from snapshotd.rewrite import RuleSet
from snapshotd.sites.registry import SiteRegistry
from snapshotd.store.interface import Store

SITE = SiteSettings(name="s", origin="http://127.0.0.1:9")
SETTINGS = Settings(sites=(SITE,))


def _stops(store: Store) -> dict[str, tuple[str, Callable[[], Awaitable[None]]]]:
    """Each way to stop, with the lease owner it gives back."""
    capture = CaptureService(SETTINGS, store, None)  # type: ignore[arg-type]
    registry = SiteRegistry(SETTINGS, store, rules={"s": RuleSet.empty()})
    crawler = Crawler(registry, store, CaptureService(SETTINGS, store, None), grace=0.1)  # type: ignore[arg-type]
    return {
        "capture service": (capture.owner, lambda: capture.close(grace=0.1)),
        "crawler": (crawler.capture.owner, crawler.stop),
    }


@pytest.mark.parametrize("way", ["capture service", "crawler"])
async def test_a_stop_gives_back_the_leases_it_holds(store, way) -> None:
    owner, stop = _stops(store)[way]
    await store.enqueue("s", "/a", 1)
    assert (await store.claim(owner, 60.0, sites=["s"])) is not None
    assert (await store.get_path("s", "/a")).state == "processing"
    await asyncio.wait_for(stop(), 5)
    assert (await store.get_path("s", "/a")).state == "pending"


@pytest.mark.parametrize("way", ["capture service", "crawler"])
async def test_a_stop_that_cannot_give_its_leases_back_says_so_in_one_line(
    store, way, caplog, monkeypatch
) -> None:
    """The store is away as the process stops: the leases run out on their own, and the
    log says why they were not given back, whichever way stopped."""

    async def away(owner: str) -> int:
        raise ConnectionRefusedError("the store is away")

    _owner, stop = _stops(store)[way]
    monkeypatch.setattr(store, "release_leases", away)
    with caplog.at_level(logging.INFO):
        await asyncio.wait_for(stop(), 5)
    said = [r for r in caplog.records if "releasing leases on stop failed" in r.getMessage()]
    assert len(said) == 1 and "the store is away" in said[0].getMessage()
    assert said[0].levelno == logging.ERROR and said[0].exc_info is None
