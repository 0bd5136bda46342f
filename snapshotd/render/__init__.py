"""Rendering: a pool of headless Chromium browsers that capture pages."""

from snapshotd.render.base import CaptureResult, Renderer
from snapshotd.render.chromium import ChromiumNotFound, find_chromium
from snapshotd.render.command import capture_command, site_for_url
from snapshotd.render.pool import BrowserPool, PoolStats

__all__ = [
    "BrowserPool",
    "CaptureResult",
    "ChromiumNotFound",
    "PoolStats",
    "Renderer",
    "capture_command",
    "find_chromium",
    "site_for_url",
]
