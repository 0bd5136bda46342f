"""The files a site serves search engines through the proxy, to anyone who asks (SPEC 5.4,
5.5): its own sitemap at ``sitemap_path`` and its IndexNow key at ``/<key>.txt``.

Invariants:
- only a GET or HEAD of exactly one of those paths is answered here; any other request goes
  its usual way, and a site that set neither has none;
- the sitemap is the operator API's, at the site's public address
  (:func:`snapshotd.search.own_sitemap.build_sitemap`); a store that cannot be used is a 503.
"""

from __future__ import annotations

import logging

from starlette.types import Send

from snapshotd.config.settings import SiteSettings
from snapshotd.proxy.passthrough import send_text
from snapshotd.search.indexnow import key_location
from snapshotd.search.own_sitemap import build_sitemap, part_of, wants_gzip
from snapshotd.store import unavailable
from snapshotd.store.interface import Store

__all__ = ["answer_search_file", "is_search_file"]

log = logging.getLogger("snapshotd.proxy")


def is_search_file(site: SiteSettings, method: str, path: str) -> bool:
    return method in ("GET", "HEAD") and path in (site.sitemap_path or None, key_location(site))


async def answer_search_file(
    store: Store,
    site: SiteSettings,
    method: str,
    path: str,
    query: str,
    headers: dict[str, str],
    send: Send,
) -> int:
    """Answer a request :func:`is_search_file` took; its status."""
    if path == key_location(site):
        status, out, body = (
            200,
            {"Content-Type": "text/plain; charset=utf-8"},
            (site.indexnow_key.encode()),
        )
    else:
        try:
            part = part_of(query)
            answer = await build_sitemap(
                store,
                site,
                site.public_base + path,
                part,
                gzipped=wants_gzip(headers.get("accept-encoding", "")),
            )
        except ValueError as exc:
            await send_text(send, 400, f"Bad Request: {exc}\n")
            return 400
        except Exception as exc:
            if not unavailable(exc):
                raise
            log.warning("sitemap site=%s: store unavailable: %s", site.name, exc)
            await send_text(send, 503, "Service Unavailable\n", [(b"retry-after", b"5")])
            return 503
        if answer is None:
            await send_text(send, 404, "Not Found\n")
            return 404
        status, out, body = 200, answer.headers, answer.body
    raw = [(k.lower().encode(), v.encode()) for k, v in out.items()]
    raw.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": b"" if method == "HEAD" else body})
    return status
