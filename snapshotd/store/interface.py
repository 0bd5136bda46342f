"""The store interface: paths with their crawl state, and their snapshots.

Every engine (SQLite, PostgreSQL) keeps the same invariants:

- a (site, path) pair exists at most once;
- a path is in exactly one state of ``STATES``; ``processing`` always carries a lease
  (owner + deadline), and only the lease owner may complete, fail or release it;
- ``attempts`` counts claims since the last stored capture; a lease handed back by its
  owner (``release``, ``release_leases``) takes its claim off again;
- the pending path claimed next is the one with the highest priority, oldest ``queued_at``
  first, and claiming is one atomic step, so two workers never claim the same path;
- a failed recapture never removes the snapshot a path already has.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import formatdate
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol

from snapshotd.http_text.headers import BAD_HEADER_NAME, BAD_HEADER_VALUE
from snapshotd.store.learnt import Learnt

if TYPE_CHECKING:
    from snapshotd.store.outcome import CaptureOutcome, Variant

# ``crawled``: rendered for its links only, no snapshot kept (a page the site's process
# patterns leave out, SPEC 7.2); it expires and is crawled again like a processed one.
STATES = ("pending", "processing", "processed", "crawled", "error", "ignored")
# The states whose paths come back to pending when ``expires_at`` is due.
EXPIRING = ("processed", "crawled", "error")


def expiring(states: Sequence[str] | None) -> list[str]:
    """Those of ``states`` that expire, all of them for None: the states
    ``Store.requeue_expired`` requeues (no other)."""
    return list(EXPIRING) if states is None else [s for s in states if s in EXPIRING]


# A schema step of both engines: expiry finds crawled paths by the index too.
CRAWLED_EXPIRY_INDEX = """
    DROP INDEX paths_expiry;
    CREATE INDEX paths_expiry ON paths (site, expires_at)
        WHERE state IN ('processed', 'crawled', 'error');
"""
# A schema step of both engines: whether the path's last capture was ended by a readiness
# limit while its page was still at work (snapshotd.render.readiness).
READINESS_LIMIT_COLUMN = """
    ALTER TABLE paths ADD COLUMN readiness_limit BOOLEAN NOT NULL DEFAULT FALSE;
"""
# A path's columns, as :func:`path_record` reads them.
PATH_COLUMNS = (
    "id, site, path, state, priority, hops, status, created_at, queued_at, captured_at, "
    "expires_at, error, duplicate_of, attempts, lease_owner, lease_until, readiness_limit, found, "
    "not_found"
)
# The order claims take pending paths in: highest priority, then oldest, then first inserted.
CRAWL_ORDER = "priority DESC, queued_at, id"


def iso_time(t: float | None) -> str | None:
    """A stored time (seconds since the epoch) as ISO-8601 UTC to the second, as
    ``2024-05-01T12:00:00Z``; None stays None, and so is a time no date names (NaN, infinite,
    past year 9999), as an older version or a hand may have stored."""
    if t is None:
        return None
    try:
        when = datetime.fromtimestamp(t, UTC)
    except (OverflowError, ValueError, OSError):
        return None
    return when.isoformat(timespec="seconds").replace("+00:00", "Z")


# A snapshot's columns, in the order SNAPSHOT_OF reads them.
SNAPSHOT_COLUMNS = (
    "body_gz", "status", "headers", "etag", "content_hash", "final_url", "captured_at",
)

# A path's snapshot: its own, else, for a page known by what it shows (stored ``shared``),
# that of the page it duplicates; with the path's own expiry and state.
SNAPSHOT_OF = (
    "SELECT COALESCE(s.body_gz, c.body_gz), COALESCE(s.status, c.status), "
    "COALESCE(s.headers, c.headers), COALESCE(s.etag, c.etag), "
    "COALESCE(s.content_hash, c.content_hash), COALESCE(s.final_url, c.final_url), "
    "COALESCE(s.captured_at, c.captured_at), p.expires_at, p.state, "
    "COALESCE(s.profile, c.profile), COALESCE(s.profile, c.profile), COALESCE(s.owed, c.owed) "
    "FROM paths p LEFT JOIN snapshots s ON s.path_id = p.id "
    "LEFT JOIN paths d ON s.path_id IS NULL AND d.site = p.site AND d.path = p.duplicate_of "
    "LEFT JOIN snapshots c ON c.path_id = d.id "
    "WHERE p.site = {0}1 AND p.path = {0}2 AND (s.path_id IS NOT NULL OR c.path_id IS NOT NULL)"
)

def snapshot_from_row(
    site: str, path: str, row: Sequence[Any], served_for: str | None = None
) -> Snapshot:
    """A :data:`SNAPSHOT_OF` row as a snapshot, read for the profile ``served_for``."""
    return Snapshot(
        site=site, path=path, body_gz=bytes(row[0]), status=row[1],
        headers=json.loads(row[2]), etag=row[3], content_hash=row[4], final_url=row[5],
        captured_at=row[6], expires_at=row[7], state=row[8], profile=row[9],
        own_profile=row[10], owed=tuple(row[11].split()), served_for=served_for,
    )


class StoreError(Exception):
    """The store cannot be opened: a file that is not a database, a server that cannot be
    reached, a schema newer than this snapshotd. The message is one line for the operator."""

PRIORITY_EXPIRED, PRIORITY_LINK, PRIORITY_API, PRIORITY_BOT = 0, 1, 2, 3


@dataclass(frozen=True)
class PathRecord:
    site: str
    path: str
    state: str
    priority: int
    hops: int = 0
    status: int | None = None
    created_at: float = 0.0
    queued_at: float = 0.0
    captured_at: float | None = None
    expires_at: float | None = None
    error: str | None = None
    duplicate_of: str | None = None
    attempts: int = 0
    lease_owner: str | None = None
    lease_until: float | None = None
    id: int = 0
    # Whether the crawler found it on the site or an operator queued it (store/copies), not
    # only a bot's request.
    found: bool = True
    readiness_limit: bool = False
    # Why its last stored capture was taken for its site's not-found view (store/not_found).
    not_found: str | None = None


def path_record(row: Sequence[Any]) -> PathRecord:
    """A row of :data:`PATH_COLUMNS` as a path record."""
    (id_, site, path, state, priority, hops, status, created, queued, captured, expires, error,
     duplicate_of, attempts, owner, until, limit, found, not_found) = row
    return PathRecord(
        site=site, path=path, state=state, priority=priority, hops=hops, status=status,
        created_at=created, queued_at=queued, captured_at=captured, expires_at=expires,
        error=error, duplicate_of=duplicate_of, attempts=attempts, lease_owner=owner,
        lease_until=until, id=id_, readiness_limit=bool(limit), found=bool(found),
        not_found=not_found,
    )


@dataclass(frozen=True)
class SiteRow:
    """A site as stored: its settings as JSON (the keys of a ``[[site]]`` table)."""

    name: str
    settings: str
    paused: bool
    created_at: float
    updated_at: float
    site_token: str = ""  # its SEO4Ajax-compatible token (snapshotd.seo4ajax)


# A snapshot's HTML up to this size is kept once decompressed; a larger one never is.
KEEP_DECOMPRESSED = 2**20
# The Vary of every answer to a bot's request that a person at the same URL does not get (a
# snapshot, a rule's status or redirect), so a shared cache keeps it from people (SPEC 3.2).
BOT_VARY = (b"vary", b"User-Agent, Accept-Encoding")


@dataclass(frozen=True)
class Snapshot:
    """A stored capture. ``body_gz`` is the HTML, gzip-compressed (as stored and as served).

    Served through :meth:`chunks`, a snapshot holds at most ``footprint`` bytes: its gzip
    body, plus its HTML when that is at most ``KEEP_DECOMPRESSED`` bytes (decompressed once,
    then kept). Larger HTML is decompressed piece by piece as it is sent, and not kept.
    """

    site: str
    path: str
    body_gz: bytes
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    etag: str = ""
    content_hash: str = ""
    final_url: str = ""
    captured_at: float = 0.0
    expires_at: float | None = None
    state: str = "processed"
    profile: str = "mobile"  # the device profile it was rendered as (snapshotd.crawlers.devices)
    # The profile of the path's own snapshot: its last capture's first (store/profile_snapshots.py).
    own_profile: str = "mobile"
    # The profiles the path's own snapshot owes: never served it (store/profile_snapshots.py).
    owed: tuple[str, ...] = ()
    served_for: str | None = None  # the profile it was read for (None: the path's own)

    @property
    def unrendered(self) -> bool:
        """Whether it was read for a profile it owes: not to be served to its crawlers."""
        return self.served_for in self.owed

    @cached_property
    def body(self) -> bytes:
        """The HTML as UTF-8 bytes (decompressed once, then kept)."""
        return gzip.decompress(self.body_gz)

    @cached_property
    def size(self) -> int:
        """The HTML's length in bytes, read from the gzip trailer (modulo 2**32, as gzip
        records it) without decompressing."""
        return int.from_bytes(self.body_gz[-4:], "little")

    @property
    def footprint(self) -> int:
        """The most bytes this snapshot holds when served through :meth:`chunks`."""
        return len(self.body_gz) + (self.size if self.size <= KEEP_DECOMPRESSED else 0)

    def chunks(self, size: int, *, gzipped: bool = False) -> Iterator[bytes]:
        """The gzip body (``gzipped``) or the HTML, in pieces of at most ``size`` bytes.

        Raises ``zlib.error`` or ``EOFError`` part-way when the gzip body is damaged."""
        if gzipped or self.size <= KEEP_DECOMPRESSED:
            whole = self.body_gz if gzipped else self.body
            for start in range(0, len(whole), size):
                yield whole[start : start + size] if len(whole) > size else whole
            return
        inflater = zlib.decompressobj(wbits=31)  # a gzip member
        source = memoryview(self.body_gz)
        for start in range(0, len(source), size):
            data: bytes | memoryview = source[start : start + size]
            while True:
                piece = inflater.decompress(data, size)
                if piece:
                    yield piece
                data = inflater.unconsumed_tail
                if not data and len(piece) < size:
                    break
            if inflater.eof:
                break
        if not inflater.eof:
            raise EOFError("the gzip body of the snapshot is cut short")

    @property
    def html(self) -> str:
        return self.body.decode("utf-8")

    @cached_property
    def last_modified(self) -> str:
        return formatdate(self.captured_at, usegmt=True)

    @cached_property
    def http_headers(self) -> tuple[tuple[bytes, bytes], ...]:
        """The headers every answer with this snapshot has, as sent (SPEC 3.2): made once.
        A stored header no server may send (a control character in it) is left out."""
        stored = (
            (name.lower().encode("latin-1", "replace"), value.encode("latin-1", "replace"))
            for name, value in self.headers.items()
        )
        return (
            (b"content-type", b"text/html; charset=utf-8"),
            (b"last-modified", self.last_modified.encode()),
            (b"etag", self.etag.encode()),
            BOT_VARY,
            *(
                (name, value)
                for name, value in stored
                if not (BAD_HEADER_NAME.search(name) or BAD_HEADER_VALUE.search(value))
            ),
        )


class Store(Learnt, Protocol):
    """What the proxy, the crawler and the API need from storage."""

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def ping(self) -> bool: ...

    async def get_path(self, site: str, path: str) -> PathRecord | None: ...

    async def get_snapshot(
        self, site: str, path: str, profile: str | None = None
    ) -> Snapshot | None:
        """The snapshot served for ``profile`` (its own row, else the path's own snapshot;
        :mod:`snapshotd.store.profile_snapshots`); with None, the path's own snapshot."""
        ...

    async def own_profiles(self, site: str, paths: Sequence[str]) -> dict[str, tuple[str, ...]]:
        """For each of ``paths`` with a snapshot of its own, the device profiles it holds one
        for, its own snapshot's first (:mod:`snapshotd.store.profile_snapshots`)."""
        ...

    async def settle_owed(
        self, site: str, path: str, profile: str, captured_at: float, variant: Variant | None
    ) -> bool:
        """``profile``'s capture of a path whose own snapshot owes it: ``variant`` (None: it
        renders alike, and is served the own snapshot) kept, and the profile no longer owed,
        at once. False, storing nothing, when the own snapshot is no longer the one captured
        at ``captured_at`` or owes the profile no more
        (:mod:`snapshotd.store.profile_snapshots`)."""
        ...

    async def enqueue(
        self, site: str, path: str, priority: int, *, hops: int = 0, force: bool = False,
        found: bool = True,
    ) -> str:
        """Set a path pending. Answers ``queued`` (new), ``requeued`` (was captured, expired,
        failed or forced), ``reprioritised`` (was pending lower), ``pending`` (already
        pending), ``processing`` (being captured) or ``fresh`` (captured, not expired).
        ``found``: the crawler found it or an operator asked for it (the path is marked so
        for good); False for a bot's request, or a path queued again without being found."""
        ...

    async def enqueue_many(
        self, site: str, paths: Sequence[tuple[str, int]], priority: int, *, force: bool = False,
        found: bool = True,
    ) -> list[str]:
        """``enqueue`` for many (path, hops) pairs in one transaction."""
        ...

    async def add_ignored(
        self, site: str, path: str, *, hops: int = 0, reason: str = ""
    ) -> bool: ...

    async def claim(
        self, owner: str, lease_seconds: float, *, sites: Sequence[str] | None = None
    ) -> PathRecord | None: ...

    async def claim_path(
        self, site: str, path: str, owner: str, lease_seconds: float
    ) -> PathRecord | None: ...

    async def release_expired_leases(self) -> int: ...

    async def complete(self, site: str, path: str, owner: str, outcome: CaptureOutcome) -> bool:
        """Store a claimed path's capture (store/outcome); False if ``owner`` lost the lease."""
        ...

    async def fail(
        self,
        site: str,
        path: str,
        owner: str,
        *,
        error: str,
        retry_at: float,
        status: int | None = None,
    ) -> bool: ...

    async def links_due(
        self, site: str, *, after: int = 0, captured_before: float, limit: int = 100
    ) -> list[tuple[int, str]]: ...

    async def links_followed(self, site: str, path: str) -> None: ...

    async def set_duplicate(self, site: str, path: str, of: str | None) -> None: ...

    async def find_same_content(self, site: str, content_hash: str, path: str) -> str | None: ...

    async def mark_found(self, site: str, path: str) -> None: ...

    async def count_copies(self, site: str) -> int:
        """How many of the site's processed paths are copies of another (``duplicate_of``)."""
        ...

    async def add_found_urls(self, site: str, urls: Iterable[str]) -> None:
        """Count ``urls`` as found by the site's job (:mod:`snapshotd.store.found_urls`)."""
        ...

    async def found_urls(self, site: str) -> int: ...

    async def requeue_expired(
        self, site: str, *, limit: int = 1000, states: Sequence[str] | None = None
    ) -> int:
        """Paths of :func:`expiring` ``states`` past ``expires_at`` become pending at
        priority 0."""
        ...

    async def lease_owners(self) -> list[str]: ...

    async def release_leases(self, owner: str) -> int: ...

    async def release(self, site: str, path: str, owner: str) -> bool: ...

    async def counts(self, site: str | None = None) -> dict[str, dict[str, int]]:
        """Paths per state of each site, or of ``site`` alone."""
        ...

    async def queue_depth(self) -> dict[int, int]: ...

    async def site_size(self, site: str) -> int: ...

    async def processed(self, site: str) -> int:
        """The site's processed paths."""
        ...

    async def list_paths(
        self,
        site: str,
        *,
        state: str | None = None,
        prefix: str | None = None,
        limit: int = 50,
        cursor: int | None = None,
        crawl_order: bool = False,
        not_found: bool = False,
    ) -> tuple[list[PathRecord], int | None]:
        """One page of the site's paths; with ``not_found``, only those whose last capture
        showed its not-found view."""
        ...

    def iter_paths(self, site: str | None = None) -> AsyncIterator[PathRecord]: ...

    async def delete_path(self, site: str, path: str) -> bool: ...

    async def get_meta(self, key: str) -> str | None: ...

    async def set_meta(self, key: str, value: str) -> None: ...

    async def replace_meta(self, key: str, old: str | None, new: str) -> bool:
        """Set ``key`` to ``new`` only while it is ``old`` (None: while it is unset), in one
        statement; whether it was set. Of several processes or hosts replacing the same
        value at once, one is."""
        ...

    async def add_counters(self, rows: Sequence[tuple[int, str, str, int]]) -> None:
        """Add (minute, site, name, value) rows to the per-minute counters (store/counters)."""
        ...

    async def counters(self, since: int) -> list[tuple[int, str, str, int]]: ...

    async def prune_counters(self, before: int) -> int: ...

    async def list_sites(self) -> list[SiteRow]:
        """Every site in the store (store/sites), by name."""
        ...

    async def put_site(self, name: str, settings: str) -> None:
        """Create the site, or replace its settings (JSON) when they differ."""
        ...

    async def set_site_paused(self, name: str, paused: bool) -> bool: ...

    async def rotate_site_token(self, name: str) -> str | None:
        """Give the site a new site token; the token, or None when there is no such site."""
        ...

    async def clear_site(self, name: str, *, remove: bool = False) -> int:
        """Remove the site's paths, snapshots and counters, and with ``remove`` the site."""
        ...

    async def sitemap_count(self, site: str) -> int:
        """How many pages the site's own sitemap lists (store/lastmod)."""
        ...

    async def not_found_count(self, site: str) -> tuple[int, int]:
        """How many of the site's paths last showed its not-found view, and how many of
        those are answered so (store/not_found)."""
        ...

    async def sitemap_pages(self, site: str, offset: int, limit: int) -> list[tuple[str, float]]:
        """(path, when its main text last changed) of the pages it lists, ``offset`` on."""
        ...

    async def add_recent(
        self, rows: Sequence[tuple[float, str, str, str, str, int | None, int]]
    ) -> None:
        """Store recent bot requests, keeping the newest of each site (store/counters)."""
        ...

    async def recent(
        self, limit: int
    ) -> list[tuple[float, str, str, str, str, int | None, int]]: ...
