"""How a stop ends work, the capture service's and the crawler's alike (:func:`wind_down`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection
from typing import Any

from snapshotd.store.interface import Store

__all__ = ["STOP_GRACE", "wind_down"]

log = logging.getLogger("snapshotd.capture.service")

STOP_GRACE = 5.0  # how long captures under way may go on once the process stops


async def wind_down(
    under_way: Collection[asyncio.Future[Any]],
    grace: float,
    cut_short: Callable[[set[asyncio.Future[Any]]], Awaitable[None]],
    store: Store,
    owner: str,
) -> None:
    """How a stop ends work, the capture service's and the crawler's alike: what is
    ``under_way`` may finish within ``grace`` seconds; what still runs then is handed to
    ``cut_short``; then every lease ``owner`` holds goes back to pending (when the store
    cannot take them back, that is logged, and they run out as any other lease does)."""
    if under_way:
        _done, running = await asyncio.wait(under_way, timeout=grace)
        if running:
            await cut_short(running)
    try:
        released = await store.release_leases(owner)
        if released:
            log.info("released %d leases on stop", released)
    except Exception as exc:
        log.error("releasing leases on stop failed: %s", exc)
