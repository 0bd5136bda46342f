"""Rendering: a pool of headless Chromium browsers that capture pages."""

from snapshotd.render.chromium import ChromiumNotFound, find_chromium
from snapshotd.render.pool import BrowserPool, PoolStats
from snapshotd.render.renderer import CaptureResult, Renderer

__all__ = [
    "BrowserPool",
    "CaptureResult",
    "ChromiumNotFound",
    "PoolStats",
    "Renderer",
    "find_chromium",
]
