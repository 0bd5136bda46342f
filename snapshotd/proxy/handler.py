"""The request path for every URL outside ``/_snapshotd/`` (SPEC section 3): where each
request goes.

A request is either a snapshot request (bot or ``_escaped_fragment_``, GET/HEAD, not a
static asset, not ignored, not one of our own renders) answered from the store
(:mod:`snapshotd.proxy.bot_answer`, the part of :class:`Proxy` that answers them), or it is
passed through to the origin untouched, the way a relay takes when nothing needs awaiting
(:mod:`snapshotd.proxy.relay`). Requests of the SEO4Ajax face
(:mod:`snapshotd.proxy.seo4ajax_face`) are found by their token; a site's files for search
engines (:mod:`snapshotd.proxy.search_files`) are answered to anyone.

Where a request goes is decided once (:meth:`Proxy.destination`), by the site's view of that
moment (:class:`~snapshotd.sites.view.SiteView`): its settings, which bots it serves, and
the rules its answer goes by are of one version.
"""

from __future__ import annotations

import zlib
from functools import cached_property
from typing import Any, NamedTuple

from starlette.types import Receive, Scope, Send

from snapshotd.config.settings import SiteSettings
from snapshotd.crawlers.bots import is_static_asset
from snapshotd.http_text.urls import (
    BadRequest,
    check_origin_form,
    has_escaped_fragment,
    site_path_from_request,
    valid_host,
)
from snapshotd.proxy.bot_answer import WORKER_HEADER, BotAnswers
from snapshotd.proxy.passthrough import relay_target
from snapshotd.proxy.passthrough import send_text as _send_simple
from snapshotd.proxy.relay import AtOnce, Relay
from snapshotd.proxy.search_files import answer_search_file, is_search_file
from snapshotd.proxy.seo4ajax_face import Face, origin_scope
from snapshotd.proxy.snapshots import rule_answer, snapshot_answer
from snapshotd.sites.admission import decide_now
from snapshotd.sites.view import SiteView

__all__ = ["ALLOW", "ROUTED", "WORKER_HEADER", "Destination", "Proxy", "header_map"]

_STATUS_TEXT = {
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    410: "Gone",
    414: "URI Too Long",
    421: "Misdirected Request",
}

# The scope key of a request's headers and route, decided by Proxy.answer_at_once.
ROUTED = "snapshotd.route"
# The answer to ``OPTIONS *``: what the proxy serves itself or passes on.
ALLOW = b"GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"


class Proxy(BotAnswers):
    """ASGI app: snapshot requests from the store, everything else to the origin."""

    @cached_property
    def face(self) -> Face:
        """The SEO4Ajax-compatible face of this process."""
        settings = self.sites.settings
        return Face(settings.seo4ajax_hosts, settings.seo4ajax_port, self.sites.view_for_token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        noted = scope.pop(ROUTED, None)  # by answer_at_once, which did not answer it
        if noted is not None:
            headers, route = noted
        else:
            raw_path = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
            query = scope.get("query_string", b"").decode("latin-1")
            headers = header_map(scope["headers"])
            route = self.destination(
                scope["method"], raw_path, query, headers, local_port(scope), scope["http_version"]
            )
        if route.target:  # the SEO4Ajax face's: what the origin sees has no token
            scope = origin_scope(scope, route.target)
        if route.kind in ("bot", "face"):
            assert route.view is not None
            await self.snapshot_request(
                route.view, route.path, headers, scope, receive, send,
                fail_open=route.kind == "bot",
            )
        elif route.kind == "pass":
            assert route.site is not None
            await self._pass(route.site, scope, receive, send)
        elif route.kind == "search":
            assert route.site is not None
            query = scope.get("query_string", b"").decode("latin-1")
            await answer_search_file(
                self.store, route.site, scope["method"], route.path, query, headers, send
            )
        elif route.kind == "options":
            headers_out = [(b"allow", ALLOW), (b"content-length", b"0")]
            await send({"type": "http.response.start", "status": 200, "headers": headers_out})
            await send({"type": "http.response.body", "body": b""})
        else:
            self.metrics.request("ERROR")
            await _send_simple(send, route.status, route.text)

    def destination(
        self,
        method: str,
        raw_path: str,
        query: str,
        headers: dict[str, str],
        port: int = 0,
        http_version: str = "1.1",
    ) -> Destination:
        """Where a request for a path outside ``/_snapshotd/`` goes: the target's form, the
        Host (which HTTP/1.1 requires) and the site (or the SEO4Ajax face's token, taken on
        ``port``), then pass-through or a bot's site path, decided here, once."""
        try:
            check_origin_form(raw_path)
        except BadRequest as exc:
            if method == "OPTIONS" and raw_path == "*" and not query:
                return Destination("options")
            return Destination("error", status=400, text=f"Bad Request: {exc}\n")
        if not headers.get("host") and http_version == "1.1":
            return Destination("error", status=400, text="Bad Request: no Host header\n")
        host = headers.get("host", "")
        if host and not valid_host(host):
            what = "more than one Host header" if ", " in host else "malformed Host header"
            return Destination("error", status=400, text=f"Bad Request: {what}\n")
        if self.face.claims(host, port):
            face = self.face.destination(method, raw_path, query, headers)
            kind = "face" if face.kind == "bot" else face.kind
            return Destination(kind, face.view, face.path, face.status, face.text, face.target)
        view = self.sites.view_for_host(host)  # the site's one version, to the answer's end
        if view is None:
            text = f"No site is configured for host {host!r}\n"
            return Destination("error", status=421, text=text)
        site = view.settings
        if is_search_file(site, method, raw_path):
            return Destination("search", view, raw_path)
        if (
            method not in ("GET", "HEAD")
            or "x-snapshotd" in headers
            or is_static_asset(raw_path.split("?", 1)[0])
        ):
            return Destination("pass", view)
        is_bot = view.bots(headers.get("user-agent", ""))
        if not is_bot and not has_escaped_fragment(query):
            return Destination("pass", view)
        try:
            # The target's bytes, read as latin-1 above, are written as escapes of those bytes.
            path, _escaped = site_path_from_request(
                raw_path, query, site.ignored_params, encoding="latin-1"
            )
        except BadRequest as exc:
            text = f"{_STATUS_TEXT.get(exc.status, '')}: {exc}\n"
            return Destination("error", status=exc.status, text=text)
        return Destination("bot", view, path)

    def answer_at_once(
        self,
        method: str,
        raw_path: str,
        query: str,
        raw_headers: list[tuple[bytes, bytes]],
        scope: dict[str, Any],
    ) -> AtOnce:
        """A GET or HEAD answered without an ASGI call, when nothing needs awaiting: for a
        bot's request for a fresh snapshot this process has at hand, or one a rule answers
        with a status or redirect, the whole answer (its status, headers and body, the same
        as :meth:`__call__` sends, the request counted and logged); for a request without a
        body passed through, the :class:`Relay` that passes it. None for any other request:
        it goes the ASGI way then, with its ``scope`` holding the route decided here, so
        :meth:`__call__` does not decide it again. Asked by serve's HTTP protocol
        (:mod:`snapshotd.server.protocol`) before a request becomes an ASGI call."""
        headers = header_map(raw_headers)
        route = self.destination(
            method, raw_path, query, headers, local_port(scope), scope["http_version"]
        )
        scope[ROUTED] = (headers, route)
        site = route.site
        if route.target:
            return None  # the SEO4Ajax face's: the ASGI way, its target without the token
        if route.kind == "pass":
            assert site is not None
            target = relay_target(
                method, raw_path.encode("latin-1"), query.encode("latin-1"), raw_headers
            )
            if target is None:
                return None  # a body, or a target the ASGI way refuses (and says why)
            self.metrics.request("PASS")
            return Relay(self.upstream.pool, site.origin, method, target, scope)
        if route.kind != "bot":
            return None
        assert route.view is not None and site is not None
        who = self.claims.who(site.name, headers, scope, site.verify_bots)
        profile = self.profile_for(site, headers)
        decision = decide_now(
            self.decide(route.view, route.path, headers),
            lambda p: self.cache.get((site.name, p, profile)),
            lambda: self.claims.now(who, site.verify_bots),
        )
        if decision is None:
            return None
        if decision.kind in ("redirect", "status"):
            result = "RULE"
            status, out, body = rule_answer(decision, method, self._worker)
        elif decision.kind == "serve" and decision.fresh:
            assert decision.snapshot is not None
            result = "HIT"
            status, out, pieces = snapshot_answer(
                decision.snapshot, result, headers, method, self._worker
            )
            try:
                body = next(pieces, b"")
                if next(pieces, None) is not None:
                    return None  # larger than one piece: sent piece by piece, the ASGI way
            except (zlib.error, EOFError):
                return None  # damaged: the ASGI way fails open to the origin
        else:
            return None
        self.metrics.request(result)
        claim = self._claim_said(decision.claim, who, site)
        self._log_access(site, who, route.path, result, status, 0, claim)  # as asked, as ever
        return status, out, body


class Destination(NamedTuple):
    """Where a request goes (:meth:`Proxy.destination`): ``bot`` (the site's ``view``, its
    ``path``), ``face`` (the same, on the SEO4Ajax face), ``pass`` (``view``), ``search`` (a
    file of the site's for search engines, its ``path``: :mod:`snapshotd.proxy.search_files`),
    ``options`` (``OPTIONS *``) or ``error`` (``status``, ``text``). ``target``: the SEO4Ajax
    face's target without its token, as the origin gets it."""

    kind: str
    view: SiteView | None = None
    path: str = ""
    status: int = 0
    text: str = ""
    target: str = ""

    @property
    def site(self) -> SiteSettings | None:
        """The settings of the site's view."""
        return None if self.view is None else self.view.settings


def local_port(scope: dict[str, Any] | Scope) -> int:
    """The local port a request came in on (0 when unknown)."""
    server = scope.get("server")
    return int(server[1]) if server and server[1] is not None else 0


def header_map(raw: list[tuple[bytes, bytes]]) -> dict[str, str]:
    """A request's headers by lower-case name, as text (latin-1: every byte kept); the
    values of a header sent more than once joined by ``", "``, as one list (so two Host
    headers are one malformed Host)."""
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in raw}
    if len(headers) < len(raw):
        joined: dict[str, list[str]] = {}
        for k, v in raw:
            joined.setdefault(k.decode("latin-1").lower(), []).append(v.decode("latin-1"))
        headers = {k: ", ".join(values) for k, values in joined.items()}
    return headers


