"""What a bot is sent of a stored snapshot: the cache of snapshots read lately, and the
answer's status, headers and body pieces; and what it is sent of a rule's status or redirect.

Invariants:
- memory per snapshot, whatever the number of clients: the cache holds at most
  ``max_bytes`` of ``Snapshot.footprint`` (a larger snapshot only weakly, while an answer
  sends it), and a body goes out in pieces of :data:`CHUNK` bytes, decompressed piece by
  piece when large;
- an answer is 304 when the client's ``If-None-Match`` names the snapshot's ETag, gzipped
  when the client accepts gzip, and has no body for HEAD;
- a rule's answer varies as a snapshot answer does (``BOT_VARY``), so a shared cache never
  gives a bot's answer to a person, whose request at the same URL goes to the origin; its
  ``Location`` is printable ASCII (any other byte is sent percent-escaped), and a path in it
  never reads as another host: ``//evil.test/`` or ``/\\evil.test/`` (a rule's ``U`` flag
  unescapes what a request gives) is sent as ``/evil.test/``.
"""

from __future__ import annotations

import functools
import re
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator
from http import HTTPStatus

from snapshotd.sites.admission import Decision
from snapshotd.store.interface import BOT_VARY, Snapshot

__all__ = [
    "CHUNK", "SnapshotCache", "accepts_gzip", "etag_matches", "rule_answer", "snapshot_answer",
]

# The largest body message sent for a snapshot.
CHUNK = 64 * 2**10
# The statuses an answer has no content with (RFC 9110, 15.3.5, 15.3.6 and 15.4.5).
_NO_CONTENT = frozenset({204, 205, 304})
# The bytes a Location is sent with percent-escaped: all but printable ASCII.
_NOT_PRINTABLE = re.compile(rb"[^\x21-\x7e]")
# The start of a path that a browser reads as a host name (WHATWG: '\\' is '/').
_AUTHORITY = re.compile(rb"^[/\\]{2,}")


@functools.lru_cache(maxsize=256)  # clients send a few values, on every request
def accepts_gzip(value: str) -> bool:
    """Whether an ``Accept-Encoding`` value allows gzip: an explicit ``gzip`` entry decides,
    else ``*``; a ``q`` of 0 refuses and an entry with an unreadable ``q`` is ignored."""
    found: dict[str, float] = {}
    for part in value.split(","):
        name, *params = (p.strip() for p in part.split(";"))
        name = name.lower()
        if name not in ("gzip", "x-gzip", "*"):
            continue
        q = 1.0
        for param in params:
            key, _, number = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(number.strip())
                except ValueError:
                    q = 0.0
        found.setdefault("gzip" if name == "x-gzip" else name, q)
    q = found.get("gzip", found.get("*", 0.0))
    return q > 0


def etag_matches(if_none_match: str, etag: str) -> bool:
    if if_none_match.strip() == "*":
        return True
    tags = [t.strip().removeprefix("W/") for t in if_none_match.split(",")]
    return etag in tags


class SnapshotCache:
    """Snapshots read in the last ``ttl`` seconds, so a hot path costs no store round trip;
    keyed by (site, path, device profile).

    Writes made here evict their key at once; writes by other processes (a separate worker,
    another replica) show within ``ttl``. Bounded by entries and by ``max_bytes`` of
    ``Snapshot.footprint``. A snapshot over an eighth of that is held only weakly: it is
    shared within ``ttl`` while some response is still sending it, and costs nothing more.
    """

    def __init__(
        self, ttl: float = 1.0, max_entries: int = 4096, max_bytes: int = 64 * 2**20
    ) -> None:
        self.ttl, self.max_entries, self.max_bytes = ttl, max_entries, max_bytes
        self._items: OrderedDict[tuple[str, str, str], tuple[float, Snapshot]] = OrderedDict()
        self._large: dict[tuple[str, str, str], tuple[float, weakref.ref[Snapshot]]] = {}
        self._bytes = 0

    def get(self, key: tuple[str, str, str]) -> Snapshot | None:
        snapshot: Snapshot | None
        if (item := self._items.get(key)) is not None:
            stamp, snapshot = item
        elif (large := self._large.get(key)) is not None:
            stamp, snapshot = large[0], large[1]()
        else:
            return None
        if snapshot is None or time.monotonic() - stamp > self.ttl:
            self.evict(key)
            return None
        return snapshot

    def put(self, key: tuple[str, str, str], snapshot: Snapshot) -> None:
        self.evict(key)
        size = snapshot.footprint
        if size > self.max_bytes // 8:
            self._large[key] = (time.monotonic(), weakref.ref(snapshot, self._forget(key)))
            return
        self._items[key] = (time.monotonic(), snapshot)
        self._bytes += size
        while len(self._items) > self.max_entries or self._bytes > self.max_bytes:
            _, (_, old) = self._items.popitem(last=False)
            self._bytes -= old.footprint

    def _forget(self, key: tuple[str, str, str]) -> Callable[[weakref.ref[Snapshot]], None]:
        """Drops a weak entry once no response holds its snapshot any more."""

        def gone(ref: weakref.ref[Snapshot]) -> None:
            if (entry := self._large.get(key)) is not None and entry[1] is ref:
                del self._large[key]

        return gone

    def evict(self, key: tuple[str, str, str]) -> None:
        self._large.pop(key, None)
        item = self._items.pop(key, None)
        if item is not None:
            self._bytes -= item[1].footprint


def snapshot_answer(
    snapshot: Snapshot,
    result: str,
    headers: dict[str, str],
    method: str,
    extra: list[tuple[bytes, bytes]],
) -> tuple[int, list[tuple[bytes, bytes]], Iterator[bytes]]:
    """The status, headers and body pieces of an answer with ``snapshot`` (with ``extra``
    headers): 304 when the client has it, gzipped when it accepts that, no body for HEAD."""
    out = [*snapshot.http_headers, (b"x-snapshotd-cache", result.encode()), *extra]
    inm = headers.get("if-none-match")
    if inm and etag_matches(inm, snapshot.etag):
        return 304, out, iter(())
    gzipped = accepts_gzip(headers.get("accept-encoding", ""))
    if gzipped:
        out.append((b"content-encoding", b"gzip"))
    length = len(snapshot.body_gz) if gzipped else snapshot.size
    out.append((b"content-length", b"%d" % length))
    pieces = () if method == "HEAD" else snapshot.chunks(CHUNK, gzipped=gzipped)
    return snapshot.status, out, iter(pieces)


def rule_answer(
    decision: Decision, method: str, extra: list[tuple[bytes, bytes]]
) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """The status, headers and body of a rule's ``redirect`` or ``status`` decision (with
    ``extra`` headers): a short ``text/plain`` body (none for HEAD, 204, 205 or 304),
    ``Location`` for a redirect (302 when the rule gives no status), and the Vary of a
    snapshot answer."""
    if decision.kind == "redirect":
        status = decision.status or 302
        location = _location(decision.location or decision.path)
        text = b"Redirecting to " + location + b"\n"
        headers = [(b"location", location)]
    else:
        status = decision.status or 404
        try:
            text = HTTPStatus(status).phrase.encode() + b"\n"
        except ValueError:  # a code HTTP names no phrase for
            text = b"%d\n" % status
        headers = []
    if status in _NO_CONTENT:  # a body would be read as the start of the next answer
        out = [*headers, BOT_VARY, *extra]
        return status, out if status != 205 else [(b"content-length", b"0"), *out], b""
    out = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", b"%d" % len(text)),
        *headers,
        BOT_VARY,
        *extra,
    ]
    return status, out, b"" if method == "HEAD" else text


def _location(target: str) -> bytes:
    """A rule's redirect target as its ``Location``: printable ASCII, and a path that starts
    with more than one slash (or backslash) starting with one."""
    value = _NOT_PRINTABLE.sub(lambda m: b"%%%02X" % m.group(0)[0], target.encode("utf-8"))
    return _AUTHORITY.sub(b"/", value)
