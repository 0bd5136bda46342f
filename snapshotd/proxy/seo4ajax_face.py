"""The SEO4Ajax-compatible face: SEO4Ajax's integrations (connect-s4a, its nginx, HAProxy,
Varnish, Cloudflare Worker and Next.js recipes) send a bot's request to SEO4Ajax's API as
``GET /<site token><path>``; pointed at snapshotd instead, they are answered here, as that API
answers them (docs/SEO4AJAX.md).

Invariants:
- a request is the face's when its Host names one of ``[server] seo4ajax_hosts`` (port
  ignored) or it came in on ``[server] seo4ajax_port``; every other request is the proxy's,
  routed by its Host as ever;
- on the face, the site is the one whose site token is the target's first segment (never the
  Host: the integrations send the API's host, or the site's own); an unknown token is 404 and
  says nothing of any site;
- a GET or HEAD of a page is a bot's request for the rest of the target, whatever its
  User-Agent (SEO4Ajax's Cloudflare Worker sends none): the same site path, admission and
  snapshot answer as the proxy's;
- a bot's request that no snapshot answers in time (a miss still rendering, a refusal, a paused
  site, the store away, an untrusted claimant on a strict site) gets 503 with
  ``Retry-After``, as SEO4Ajax's API answers a page it has not rendered yet; the origin's
  page is never sent in its place, since an integration's origin is usually the very app
  that sent the bot here;
- what does go to the origin (another method, a static asset, an ignored path) carries the
  target without the token and without the face's Host, and ``X-Snapshotd: face``: a request
  that comes back to the face with that header (an origin that sends it here again) ends at
  once with 508, never in a loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.types import Scope, Send

from snapshotd.crawlers.bots import is_static_asset
from snapshotd.http_text.urls import BadRequest, site_path_from_request
from snapshotd.proxy.passthrough import send_text
from snapshotd.sites.view import SiteView

__all__ = ["RETRY_AFTER", "Face", "FaceDestination"]

# Seconds a bot is told to wait before asking again for a page not rendered yet.
RETRY_AFTER = 60
# The header marking what the face sends to the origin, so it is known if it comes back.
MARK = (b"x-snapshotd", b"face")


class FaceDestination:
    """Where a request of the face goes: ``kind`` is ``bot`` (the site's ``view``, its site
    ``path``), ``pass`` (``view``, the ``target`` without the token) or ``error``
    (``status``, ``text``)."""

    __slots__ = ("kind", "path", "status", "target", "text", "view")

    def __init__(
        self,
        kind: str,
        view: SiteView | None = None,
        *,
        path: str = "",
        target: str = "",
        status: int = 0,
        text: str = "",
    ) -> None:
        self.kind, self.view, self.path, self.target = kind, view, path, target
        self.status, self.text = status, text


class Face:
    """The face of one process: which requests are its, and where they go."""

    def __init__(
        self,
        hosts: tuple[str, ...],
        port: int,
        view_for_token: Callable[[str], SiteView | None],
    ) -> None:
        self.hosts = frozenset(h.lower().removesuffix(".") for h in hosts)
        self.port = port
        self.view_for_token = view_for_token

    def claims(self, host: str, port: int | None) -> bool:
        """Whether a request with this Host header, taken on this local port, is the face's."""
        if self.port and port == self.port:
            return True
        if not self.hosts or not host:
            return False
        name = host.lower().rsplit(":", 1)[0] if not host.startswith("[") else host.lower()
        return name.removesuffix(".") in self.hosts

    def destination(
        self, method: str, raw_path: str, query: str, headers: dict[str, str]
    ) -> FaceDestination:
        """The site of the token and what becomes of the request (see the module's rules)."""
        token, slash, rest = raw_path[1:].partition("/")
        view = self.view_for_token(token) if token else None
        if view is None:
            return FaceDestination("error", status=404, text="Not Found: no site has this token\n")
        if "x-snapshotd" in headers:
            return FaceDestination(
                "error", view, status=508,
                text="Loop Detected: the origin sent the face's own request back to it\n",
            )
        target = slash + rest or "/"
        if method not in ("GET", "HEAD") or is_static_asset(target):
            return FaceDestination("pass", view, target=target)
        try:
            path, _escaped = site_path_from_request(
                target, query, view.settings.ignored_params, encoding="latin-1"
            )
        except BadRequest as exc:
            return FaceDestination("error", view, status=exc.status, text=f"Bad Request: {exc}\n")
        return FaceDestination("bot", view, path=path, target=target)


def origin_scope(scope: Scope, target: str) -> dict[str, Any]:
    """``scope`` as it goes to the origin: the target without the token, no Host of the face
    (the origin's own is sent), marked with ``X-Snapshotd: face``."""
    headers = [(k, v) for k, v in scope["headers"] if k.lower() not in (b"host", b"x-snapshotd")]
    raw = target.encode("latin-1")
    return {**scope, "raw_path": raw, "path": target, "headers": [*headers, MARK]}


async def unavailable(send: Send) -> int:
    """SEO4Ajax's answer for a page it has no capture of yet: 503, ask again later."""
    await send_text(
        send,
        503,
        "Service Unavailable: no snapshot of this page yet, ask again later\n",
        [
            (b"retry-after", b"%d" % RETRY_AFTER),
            (b"x-snapshotd-cache", b"UNAVAILABLE"),
            (b"cache-control", b"no-store"),
        ],
    )
    return 503
