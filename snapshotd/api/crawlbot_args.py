"""What snapshotd does with each argument of Crawlbot's crawl and data endpoints (SPEC 7.2,
docs/CRAWLBOT.md), and the download tokens of a job's ``downloadJson`` and ``downloadUrls``.

Invariants:
- one rule for every argument: carried out; or, where snapshotd does something else that
  serves the same end (``apiUrl``, ``useProxies``), accepted and said in the answer's
  ``warnings``; or refused by name (400) where running would mislead, as the endpoint decides
  (``restrictDomain=0``, ``notifyEmail`` without SMTP); an argument named nowhere here is
  refused by name, never ignored;
- a download token opens the data endpoint alone, for one job, until it expires (a day after
  the job's JSON was read): an HMAC of the job's name and its expiry keyed with an API token,
  which it never reveals; it opens nothing else of the API.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Sequence
from typing import Any

from snapshotd.api.inputs import is_number
from snapshotd.api.shared import ApiError

__all__ = [
    "DOWNLOAD_TOKEN", "allows_download", "api_tokens", "check_arguments", "download_token",
    "warnings_for",
]

# Arguments the endpoints take whose meaning is the endpoint's own (SETTINGS, in crawlbot.py,
# are the job's settings).
CONTROLS = frozenset({
    "token", "name", "seeds", "customHeaders", "restrictDomain",
    "pause", "restart", "delete", "roundStart",
})
DATA_ARGUMENTS = frozenset({"token", "name", "format", "type", "num", "html"})
# Crawlbot arguments snapshotd takes and does otherwise: what it does instead.
INSTEAD = {
    "apiUrl": "snapshotd extracts nothing with an API: each page is rendered in Chromium and "
    "its HTML kept, served to bots and given by the data endpoint (title, canonical; html=1 "
    "the page itself)",
    "useProxies": "snapshotd fetches from its own address, every fetch judged by its address "
    "policy; no proxy is used",
}
# The URL argument that carries a download token.
DOWNLOAD_TOKEN = "downloadToken"
DOWNLOAD_SECONDS = 86400


def api_tokens(ctx: Any) -> tuple[str, ...]:
    """The API tokens this process takes (the configured ones, else the one it drew): the
    keys of its download tokens too."""
    return ctx.settings.api_tokens or ((ctx.generated_token,) if ctx.generated_token else ())


def check_arguments(args: Iterable[str], known: Iterable[str]) -> None:
    """400 naming the first argument that is neither ``known`` nor one of :data:`INSTEAD`."""
    allowed = set(known) | set(INSTEAD)
    for name in sorted(args):
        if name not in allowed:
            raise ApiError(
                400, f"{name}: not an argument snapshotd knows (docs/CRAWLBOT.md lists them)",
                name,
            )


def warnings_for(args: dict[str, Any]) -> list[str]:
    """One line for each argument given that snapshotd carries out otherwise."""
    return [f"{name}: {INSTEAD[name]}" for name in INSTEAD if name in args]


def _signature(key: str, name: str, expires: int) -> str:
    message = f"crawl-data\0{name}\0{expires}".encode()
    return hmac.new(key.encode(), message, hashlib.sha256).hexdigest()


def download_token(keys: Sequence[str], name: str, now: float) -> str:
    """A token that opens the data endpoint for job ``name`` for a day ("" without a key)."""
    if not keys:
        return ""
    expires = int(now) + DOWNLOAD_SECONDS
    return f"{expires}.{_signature(keys[0], name, expires)}"


def allows_download(keys: Sequence[str], name: str, given: Any, now: float) -> bool:
    """Whether ``given`` is a download token of job ``name``, not expired, made with one of
    ``keys`` (each compared in constant time)."""
    if not isinstance(given, str):
        return False
    expires, _, signature = given.partition(".")
    if not is_number(expires) or len(expires) > 12 or int(expires) < now:
        return False
    found = False
    for key in keys:
        found |= hmac.compare_digest(signature, _signature(key, name, int(expires)))
    return found
