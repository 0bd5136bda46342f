"""A capture's outcome, and what storing it writes: the rules of ``Store.complete`` (and of
``Store.fail``) that do not depend on the database, written once for both engines. An engine
runs :func:`capture_writes`' statements in one transaction of its own; it keeps only that
transaction and its marks.

Invariants:
- a :class:`CaptureOutcome` is checked when it is made: one that could not be stored (a copy
  taking over a group of copies) never reaches an engine;
- a capture stored only for its links (``keep=False``) leaves the path ``crawled`` with no
  snapshot, no profile rows and no master; a copy of a group that shares snapshots
  (``shared`` with ``duplicate_of``) keeps none of its own either, and is served its
  master's;
- a capture replaces all of the path's profile rows (store/profiles), and a path taking over
  a group does so in the same transaction (store/copies);
- a failed capture (:func:`mark_path_failed`) keeps the path's snapshot, and the first
  :data:`ERROR_KEPT` characters of its error.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Sequence
from dataclasses import astuple, dataclass
from typing import Any

from snapshotd.pages.fingerprints import Print
from snapshotd.store.copies import take_master
from snapshotd.store.lastmod import TEXT_CHANGED_AT
from snapshotd.store.profile_snapshots import PROFILE_DELETE, PROFILE_PUT

__all__ = [
    "CaptureOutcome",
    "Variant",
    "capture_writes",
    "content_hash",
    "encode_capture",
    "mark_path_failed",
    "mark_path_stored",
    "variant_write",
]

# One statement: a statement of SQL with ``{0}`` for the engine's parameter mark, and its
# arguments.
Statement = tuple[str, tuple[Any, ...]]


def content_hash(html: str) -> str:
    return hashlib.sha256(html.encode("utf-8")).hexdigest()


def encode_capture(html: str) -> tuple[str, bytes, str]:
    """What every engine stores for a capture's HTML: its hash, its gzip body (as served to
    clients that accept gzip) and its ETag."""
    digest = content_hash(html)
    body = gzip.compress(html.encode("utf-8"), compresslevel=6, mtime=0)
    return digest, body, f'"{digest[:24]}"'


@dataclass(frozen=True)
class Variant:
    """A path's capture for one more device profile, stored beside its own snapshot
    (:mod:`snapshotd.store.profile_snapshots`) because it differs from it."""

    profile: str
    html: str
    status: int
    headers: dict[str, str]
    final_url: str


@dataclass(frozen=True)
class CaptureOutcome:
    """What a capture of a claimed path stores (``Store.complete``).

    ``links_due``: its links are still to be followed (``Store.links_followed``).
    ``keep=False``: the page was crawled, not processed: the path is marked ``crawled`` and
    whatever snapshot it had is removed. ``shared``: copies keep no snapshot of their own and
    are served their master's (the path's, given ``duplicate_of``; ``takes_over``'s, given
    that). ``print_``: the fingerprints of what it shows, kept with its snapshot.
    ``readiness_limit``: a limit ended the wait for its page (kept with the path).
    ``profile``: the device profile ``html`` was rendered as; ``variants``: the path's
    captures for other profiles that differ from it, replacing those it had; ``owed``: the
    profiles not rendered that may differ (store/profile_snapshots).
    ``takes_over``: the master of a group of copies this path now stands for; it and its
    copies become copies of this path in the same transaction (store/copies).
    ``not_found``: why the capture was taken for its site's not-found view (store/not_found)."""

    html: str
    status: int
    headers: dict[str, str]
    final_url: str
    expires_at: float
    duplicate_of: str | None = None
    links_due: bool = False
    keep: bool = True
    shared: bool = False
    print_: Print | None = None
    readiness_limit: bool = False
    profile: str = "mobile"
    variants: Sequence[Variant] = ()
    owed: Sequence[str] = ()
    takes_over: str | None = None
    not_found: str | None = None

    def __post_init__(self) -> None:
        if self.duplicate_of is not None and self.takes_over is not None:
            raise ValueError("a copy cannot take over another group of copies")
        object.__setattr__(self, "variants", tuple(self.variants))
        object.__setattr__(self, "owed", tuple(self.owed))

    @property
    def keeps_snapshot(self) -> bool:
        """Whether the path keeps a snapshot of its own (else it has none, or is served its
        master's)."""
        return self.keep and not (self.shared and self.duplicate_of is not None)


# The claimed path's row once its capture is stored (placeholders 1 to 11); its id returned.
_STORED = (
    "UPDATE paths SET state = {0}1, status = {0}2, captured_at = {0}3, expires_at = {0}4, "
    "error = NULL, duplicate_of = {0}5, attempts = 0, lease_owner = NULL, lease_until = NULL, "
    "links_due = (links_due OR {0}6), readiness_limit = {0}7, not_found = {0}11 "
    "WHERE site = {0}8 AND path = {0}9 AND state = 'processing' AND lease_owner = {0}10 "
    "RETURNING id"
)
# Store a capture's snapshot: path id, gzip body, status, headers, ETag, content hash,
# final URL, time, then its main text's hash, SimHash and words, and the device profile it
# was rendered as, the profiles it owes (placeholders 1 to 13); when its main text last
# changed (store/lastmod).
_SNAPSHOT_PUT = (
    "INSERT INTO snapshots (path_id, body_gz, status, headers, etag, content_hash, final_url, "
    "captured_at, text_hash, simhash, words, profile, owed, text_changed_at) VALUES ({0}1, "
    "{0}2, {0}3, {0}4, {0}5, {0}6, {0}7, {0}8, {0}9, {0}10, {0}11, {0}12, {0}13, {0}8) "
    "ON CONFLICT (path_id) DO UPDATE SET "
    "body_gz = excluded.body_gz, profile = excluded.profile, owed = excluded.owed, "
    "status = excluded.status, headers = excluded.headers, etag = excluded.etag, "
    "content_hash = excluded.content_hash, final_url = excluded.final_url, "
    "captured_at = excluded.captured_at, text_hash = excluded.text_hash, "
    "simhash = excluded.simhash, words = excluded.words, " + TEXT_CHANGED_AT
)
_SNAPSHOT_DROP = "DELETE FROM snapshots WHERE path_id = {0}1"
# The claimed path's row once its capture failed (placeholders 1 to 6): its snapshot stays.
_FAILED = (
    "UPDATE paths SET state = 'error', error = {0}1, expires_at = {0}2, "
    "status = COALESCE({0}3, status), lease_owner = NULL, lease_until = NULL "
    "WHERE site = {0}4 AND path = {0}5 AND state = 'processing' AND lease_owner = {0}6"
)
# The characters of a failed capture's error a path keeps.
ERROR_KEPT = 500


def mark_path_stored(
    site: str, path: str, owner: str, outcome: CaptureOutcome, now: float, mark: str
) -> Statement:
    """The statement that marks the path ``owner`` holds the lease of as captured at ``now``,
    returning its id (no row: the lease was lost). ``mark``: ``?`` or ``$``."""
    return _STORED.format(mark), (
        "processed" if outcome.keep else "crawled", outcome.status, now, outcome.expires_at,
        outcome.duplicate_of if outcome.keep else None, outcome.links_due,
        outcome.readiness_limit, site, path, owner, outcome.not_found,
    )


def mark_path_failed(
    site: str, path: str, owner: str, *, error: str, retry_at: float, status: int | None,
    mark: str,
) -> Statement:
    """The statement that marks the path ``owner`` holds the lease of ``error`` until
    ``retry_at`` (``status``, when given, the origin's answer); it changes no row when the
    lease was lost. ``mark``: ``?`` or ``$``."""
    return _FAILED.format(mark), (error[:ERROR_KEPT], retry_at, status, site, path, owner)


def capture_writes(
    site: str, path: str, path_id: int, outcome: CaptureOutcome, now: float, mark: str
) -> list[Statement]:
    """The statements that store ``outcome`` for the path ``path_id``, once
    :func:`mark_path_stored` found it, in the same transaction. ``mark``: ``?`` or ``$``."""
    profiles = PROFILE_DELETE.format(f"{mark}1")
    if not outcome.keeps_snapshot:
        return [(profiles, (path_id,)), (_SNAPSHOT_DROP.format(mark), (path_id,))]
    digest, body, etag = encode_capture(outcome.html)
    fingerprint = astuple(outcome.print_) if outcome.print_ else (None, None, None)
    steps: list[Statement] = [
        (profiles, (path_id,)),
        (_SNAPSHOT_PUT.format(mark), (
            path_id, body, outcome.status, json.dumps(outcome.headers), etag, digest,
            outcome.final_url, now, *fingerprint, outcome.profile, " ".join(outcome.owed),
        )),
    ]
    steps += [variant_write(path_id, v, now, mark) for v in outcome.variants]
    if outcome.takes_over is not None:
        steps += take_master(site, path, outcome.takes_over, shared=outcome.shared, mark=mark)
    return steps


def variant_write(path_id: int, variant: Variant, now: float, mark: str) -> Statement:
    """The statement that stores ``variant`` as the path ``path_id``'s capture for its
    profile, captured at ``now``. ``mark``: ``?`` or ``$``."""
    digest, body, etag = encode_capture(variant.html)
    return PROFILE_PUT.format(*(f"{mark}{n}" for n in range(1, 10))), (
        path_id, variant.profile, body, variant.status, json.dumps(variant.headers), etag,
        digest, variant.final_url, now,
    )
