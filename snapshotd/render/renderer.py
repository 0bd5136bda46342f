"""What a capture returns, and the interface every renderer offers."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from snapshotd.config.settings import SiteSettings


@dataclass(frozen=True)
class CaptureResult:
    """The outcome of rendering one URL.

    ``error`` is None on success. On failure it is a short word or phrase: ``timeout``,
    ``crashed``, ``empty body``, ``http 503``, ``refused: <reason>``, ... and ``html`` may be
    empty. ``status`` is the snapshot's HTTP status (200, a 3xx with ``headers["Location"]``,
    a 4xx); ``headers`` holds only the honoured ones (Location, Link, X-Robots-Tag,
    Content-Language). ``final_url`` is the page's URL when it was captured, after client-side
    redirects. ``readiness_limit`` is true when a limit, not the page, ended the wait while
    the page was still at work (:mod:`snapshotd.render.readiness`). ``device`` names what the
    page read, or its answers said, that differs between device profiles; empty, the page
    renders alike in every profile (:mod:`snapshotd.render.device_probe`). ``declared``: the
    page said its status itself (a status meta tag, or ``onCaptureReady``'s), so no one judges
    it in its place. ``shell``: what names the app's build in the document as its origin
    served it (:func:`snapshotd.pages.not_found_view.app_shell`); "" when unknown.
    """

    url: str
    final_url: str
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    html: str = ""
    error: str | None = None
    elapsed: float = 0.0
    readiness_limit: bool = False
    png: bytes = b""
    device: frozenset[str] = frozenset()
    declared: bool = False
    shell: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None

    @classmethod
    def failed(cls, url: str, error: str, started: float) -> CaptureResult:
        """A capture of ``url``, begun at ``started`` (``time.monotonic()``), that failed
        with ``error`` before the page said anything."""
        return cls(url=url, final_url=url, status=0, error=error,
                   elapsed=time.monotonic() - started)


@dataclass(frozen=True)
class Shot:
    """A screenshot asked of a capture: the viewport it is rendered and taken in (CSS
    pixels), the page's first screen, taken when the page is ready, as the HTML is."""

    width: int
    height: int



class Renderer(Protocol):
    """A pool of browsers. ``capture`` never raises for page problems: it reports them."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def capture(
        self, url: str, site: SiteSettings, profile: str = "desktop"
    ) -> CaptureResult: ...


@runtime_checkable
class ShotRenderer(Renderer, Protocol):
    """A renderer that takes a capture's screenshot too (``shot``): the browser pool."""

    screenshots: bool

    async def capture(
        self, url: str, site: SiteSettings, profile: str = "desktop", shot: Shot | None = None
    ) -> CaptureResult: ...


def line_of(text: str, default: str) -> str:
    """The first line of ``text``, short; ``default`` when it has none."""
    return (text.strip().splitlines() or [default])[0][:200]


def first_line(exc: BaseException) -> str:
    """An exception's message in one short line; its type's name when it has none (a
    ``TimeoutError()`` says nothing)."""
    return line_of(str(exc), type(exc).__name__)
