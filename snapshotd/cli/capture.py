"""``snapshotd capture URL``: render one URL now."""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import replace
from urllib.parse import urlsplit

from snapshotd.cli.common import check_chromium, settings_of
from snapshotd.config.settings import Settings, SiteSettings
from snapshotd.render.pool import BrowserPool

__all__ = ["capture_command", "site_for_url"]


def _origin(url: str) -> str:
    parts = urlsplit(url)
    default = {"http": 80, "https": 443}.get(parts.scheme.lower())
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    port = parts.port
    return f"{parts.scheme.lower()}://{host}" + (f":{port}" if port and port != default else "")


def site_for_url(url: str, settings: Settings) -> SiteSettings:
    """The configured site the URL belongs to when it is on that site's origin (the address
    a capture for the site may reach), else an ad-hoc one for the URL's origin."""
    origin = _origin(url)
    site = settings.site_for_url(url)
    if site is not None and _origin(site.origin) == origin:
        return site
    return replace(SiteSettings(), name="adhoc", origin=origin)


async def capture_command(
    url: str, settings: Settings, output: str | None, device: str = "mobile"
) -> int:
    """Print the snapshot of ``url`` as the crawler of ``device`` renders it (or write it to
    ``output``); 0 on success, 1 on failure.

    Raises :class:`~snapshotd.render.chromium.ChromiumNotFound` when there is no Chromium.
    """
    scheme = urlsplit(url).scheme.lower()
    if scheme not in ("http", "https"):
        print(f"capture failed: refused: scheme {scheme or 'missing'}", file=sys.stderr)
        return 1
    site = site_for_url(url, settings)
    pool = BrowserPool(replace(settings.browser, concurrency=1))
    await pool.start()
    try:
        result = await pool.capture(url, site, device)
    finally:
        await pool.close()
    if not result.ok:
        print(
            f"capture failed: {result.error}, {result.elapsed:.2f} s, final URL {result.final_url}",
            file=sys.stderr,
        )
        return 1
    body = result.html
    if output:
        with open(output, "w", encoding="utf-8") as fh:
            fh.write(body)
    else:
        sys.stdout.write(body)
        if body and not body.endswith("\n"):
            sys.stdout.write("\n")
        sys.stdout.flush()
    extra = f", Location {result.headers['Location']}" if "Location" in result.headers else ""
    if result.readiness_limit:  # the page was still changing when a limit ended the wait
        extra += ", readiness limit"
    print(
        f"status {result.status}, {result.elapsed:.2f} s, final URL {result.final_url}{extra}"
        f", device {device}",
        file=sys.stderr,
    )
    return 0


def cmd_capture(args: argparse.Namespace) -> int:
    settings = settings_of(args)
    check_chromium(settings)
    return asyncio.run(capture_command(args.url, settings, args.output, args.device))
