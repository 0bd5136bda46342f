"""What the browser pool (:mod:`snapshotd.render.pool`) keeps: its counters, and the state
of each Chromium it runs."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field

from playwright.async_api import Browser

from snapshotd.crawlers.devices import Profile
from snapshotd.render.slot import Slot

__all__ = ["Chromium", "PoolStats"]


@dataclass
class PoolStats:
    """Counters since the pool was made."""

    captures: int = 0
    failures: int = 0
    restarts: int = 0
    recycles: int = 0
    launches: int = 0
    slots_opened: int = 0
    collections: int = 0  # V8 garbage collections asked for between captures
    active: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    render_seconds: float = 0.0


@dataclass(eq=False)
class Chromium:
    """One Chromium the pool runs: its slots, idle and open by kind, and its captures."""

    browser: Browser
    generation: int
    started: int = 0
    active: int = 0
    retired: bool = False
    idle: list[Slot] = field(default_factory=list)
    # The pool's captures so far when each idle slot went idle.
    idle_since: dict[Slot, int] = field(default_factory=dict)
    # Kinds whose last capture waited for a wipe of one of their slots.
    short: set[tuple[Profile, str]] = field(default_factory=set)
    kinds: Counter[tuple[Profile, str]] = field(default_factory=Counter)  # open slots by kind
    wiping: Counter[tuple[Profile, str]] = field(default_factory=Counter)  # being wiped
    freed: asyncio.Event = field(default_factory=asyncio.Event)
    drained: asyncio.Event = field(default_factory=asyncio.Event)
