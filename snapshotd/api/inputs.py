"""What clients send, checked: bounded bodies, JSON objects, priorities, flags and the site
paths the API is given, and the JSON form of a stored path.

Invariants:
- a body is bounded while it is read (413 as soon as it is known to be too large), never after;
- every check answers a bad value with :class:`~snapshotd.api.shared.ApiError` naming the field,
  so a handler can check its whole input before it touches the store;
- a site path given in a body and one named by ``{path}`` are normalised as a request target
  for that path would be, so both name the path the proxy stores.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import quote, unquote

from starlette.datastructures import QueryParams
from starlette.requests import ClientDisconnect, Request

from snapshotd.api.shared import ApiError
from snapshotd.config.values import parse_bool
from snapshotd.http_text.urls import (
    KEEP_ALL,
    BadRequest,
    IgnoredParams,
    hashbang,
    site_path_from_request,
)
from snapshotd.store.interface import PathRecord, iso_time

MAX_BODY = 10 * 1024 * 1024

CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# Left as they are when escaping a URL or path as a browser would.
URL_SAFE = "!#$%&'()*+,/:;=?@[]~"
_NON_ASCII = re.compile(r"[^\x00-\x7f]+")


async def read_body(request: Request, limit: int = MAX_BODY) -> bytes:
    """The request body, refused with 413 as soon as it is known to exceed ``limit``."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not is_number(declared.strip()):
            raise ApiError(400, "Content-Length is not a number", "Content-Length")
        if int(declared) > limit:
            raise ApiError(413, f"the body is larger than {limit} bytes")
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise ApiError(413, f"the body is larger than {limit} bytes")
            chunks.append(chunk)
    except ClientDisconnect:
        raise ApiError(400, "the client went away before the body ended", "body") from None
    return b"".join(chunks)


def parse_json_object(body: bytes) -> dict[str, Any]:
    if not body.strip():
        raise ApiError(400, "the body is empty: send a JSON object", "body")
    try:
        value = json.loads(body)
    except UnicodeDecodeError:
        raise ApiError(400, "the body is not UTF-8 JSON", "body") from None
    except json.JSONDecodeError as exc:
        raise ApiError(
            400,
            f"the body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
            "body",
        ) from None
    except RecursionError:
        raise ApiError(400, "the body is nested too deeply", "body") from None
    except ValueError as exc:  # a number past the interpreter's digit limit
        raise ApiError(400, f"the body is not usable JSON: {exc}"[:200], "body") from None
    if not isinstance(value, dict):
        raise ApiError(400, "the body must be a JSON object", "body")
    return value


def query(request: Request, allowed: set[str]) -> QueryParams:
    """The request's query parameters; 400 naming the first one not ``allowed``."""
    unknown = set(request.query_params) - allowed
    if unknown:
        name = sorted(unknown)[0]
        raise ApiError(400, f"unknown parameter {name!r}", name)
    return request.query_params


def is_number(text: str) -> bool:
    """ASCII digits only (``str.isdigit`` also holds for '²' or '١', which ``int`` refuses),
    at most 18 of them: ``int`` reads it whatever its digit limit, and it fits 64 bits."""
    return text.isascii() and text.isdigit() and len(text) <= 18


def check_priority(value: Any, field: str = "priority") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 3:
        raise ApiError(400, f"{field} must be an integer from 0 to 3, got {value!r:.40}", field)
    return value


def check_bool(value: Any, field: str) -> bool:
    if not isinstance(value, bool):
        raise ApiError(400, f"{field} must be true or false, got {value!r:.40}", field)
    return value


def query_flag(raw: str | None, field: str) -> bool:
    """A query parameter read as a flag: absent or empty is false."""
    if raw is None or not raw.strip():
        return False
    try:
        return parse_bool(raw)
    except ValueError:
        raise ApiError(400, f"{field} must be true or false, got {raw!r:.40}", field) from None


def no_dot_segments(path: str) -> None:
    for segment in path.split("/"):
        if unquote(segment) in (".", ".."):
            raise BadRequest("'.' and '..' segments are not allowed")


def normalise_site_path(value: str, ignore: IgnoredParams) -> str:
    """A site path given by a client (``/a?b#!c``), checked as a request target would be,
    without the query parameters ``ignore`` names.

    A plain ``#fragment`` is dropped, as browsers never send it. Raises :class:`BadRequest`.
    """
    if not value.startswith("/"):
        raise BadRequest("must start with '/'")
    if CONTROL.search(value):
        raise BadRequest("holds control characters")
    try:
        # Non-ASCII characters are escaped, as in the request a browser makes for the path.
        value = _NON_ASCII.sub(lambda m: quote(m.group(), safe=""), value)
    except UnicodeEncodeError:
        raise BadRequest("holds a lone surrogate, which is not text") from None
    rest, _hash, fragment = value.partition("#")  # the fragment starts at the first '#'
    raw_path, _, query = rest.partition("?")
    no_dot_segments(raw_path)
    return site_path_from_request(raw_path, query, ignore, hashbang(fragment))[0]


def site_path_from_param(param: str) -> str:
    """The site path named by ``{path}`` (already percent-decoded once by the server).

    Characters a browser would have percent-encoded (non-ASCII, spaces, quotes) are encoded
    again, so ``/paths/caf%C3%A9`` and ``/paths/caf%25C3%25A9`` both name ``/caf%C3%A9``.
    No parameter is ignored: ``{path}`` names a stored path as it is.
    """
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in param):
        raise ApiError(400, "path holds control characters", "path")
    encoded = quote(param, safe=URL_SAFE)
    try:
        return normalise_site_path("/" + encoded, KEEP_ALL)
    except BadRequest as exc:
        raise ApiError(400, f"path: {exc}", "path") from None


def api_param(path: str) -> str:
    """The inverse of :func:`site_path_from_param`: a site path as a ``{path}`` segment."""
    return quote(path[1:], safe="/")


def record_json(r: PathRecord, profiles: tuple[str, ...] = ()) -> dict[str, Any]:
    """A path as the API shows it; ``profiles``: the device profiles it holds a snapshot of
    its own for, its own snapshot's first (``Store.own_profiles``)."""
    return {
        "site": r.site,
        "path": r.path,
        "ref": api_param(r.path),
        "state": r.state,
        "priority": r.priority,
        "status": r.status,
        "hops": r.hops,
        "attempts": r.attempts,
        "created_at": iso_time(r.created_at),
        "queued_at": iso_time(r.queued_at),
        "captured_at": iso_time(r.captured_at),
        "expires_at": iso_time(r.expires_at),
        "error": r.error,
        "duplicate_of": r.duplicate_of,
        "readiness_limit": r.readiness_limit,
        "profiles": list(profiles),
        "not_found": r.not_found,
    }
