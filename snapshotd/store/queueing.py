"""What enqueuing a path does to the row it finds, decided once for both engines
(``Store.enqueue``); an engine reads the row, runs the change decided here with its own SQL,
and answers what is decided here.

Invariants:
- a path being captured is left alone; a pending one only ever rises (higher priority, fewer
  hops); a processed one not yet expired stays unless forced; any other (expired, crawled,
  failed, ignored, forced) becomes pending again with the new priority;
- a path's hops never grow;
- a priority is one of 0 to 3 (:func:`check_priority`), whatever the engine.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Queueing", "check_priority", "queueing"]


def check_priority(priority: int) -> None:
    """ValueError unless ``priority`` is one a path may be queued at (0 to 3)."""
    if not 0 <= priority <= 3:
        raise ValueError(f"priority must be 0-3, not {priority}")


@dataclass(frozen=True)
class Queueing:
    """What enqueue answers (``queued`` aside: no row) and the change it makes: None (the
    row stays), ``raise`` (a pending row takes ``priority`` if higher and ``hops``) or
    ``requeue`` (the row becomes pending at ``priority`` with ``hops``, queued now)."""

    answer: str
    change: str | None = None
    hops: int = 0


def queueing(
    state: str, old_priority: int, old_hops: int, expires_at: float | None, *,
    priority: int, hops: int, force: bool, now: float,
) -> Queueing:
    """The decision for a row found in ``state``, asked for at ``priority`` and ``hops``."""
    hops = min(hops, old_hops)
    if state == "processing":
        return Queueing("processing")
    if state == "pending":
        if priority <= old_priority and hops >= old_hops:
            return Queueing("pending")
        return Queueing("reprioritised" if priority > old_priority else "pending", "raise", hops)
    expired = expires_at is None or expires_at <= now
    if state == "processed" and not expired and not force:
        return Queueing("fresh")
    return Queueing("requeued", "requeue", hops)
