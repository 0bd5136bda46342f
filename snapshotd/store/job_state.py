"""A crawl job's round state as the store keeps it (SPEC 7.2).

Invariants:
- a job's round state (when its round started and ended, how many rounds completed, when
  its seeds were last recrawled) is one meta row, ``job:NAME``; the start of the last round
  whose end was notified is another, ``job-notified:NAME``, claimed by one compare-and-set
  so one process of all hosts notifies a round; both go with the site's paths by a restart
  or a delete.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, fields

from snapshotd.store.interface import Store

__all__ = [
    "JobState",
    "claim_notification",
    "is_notified",
    "job_state",
    "notification_failure",
    "record_notification_failure",
    "restart_job",
    "save_job_state",
]


@dataclass(frozen=True)
class JobState:
    """A job's rounds, as kept in the store."""

    started: float  # when the current round started
    rounds: int = 0  # rounds completed
    ended: float = 0.0  # when the current round ended; 0 while it goes on
    seeds_at: float = 0.0  # when seed_recrawl_frequency last queued the seeds


def _key(name: str) -> str:
    return f"job:{name}"


def _notified_key(name: str) -> str:
    return f"job-notified:{name}"


async def is_notified(store: Store, name: str, state: JobState) -> bool:
    """Whether the end of ``state``'s round was notified."""
    return await store.get_meta(_notified_key(name)) == repr(state.started)


async def claim_notification(store: Store, name: str, state: JobState) -> bool:
    """Record that the end of ``state``'s round is notified; whether the caller is the one
    to notify it (of every process and host that asks, one is, once)."""
    key = _notified_key(name)
    last = await store.get_meta(key)
    if last == repr(state.started):
        return False
    return await store.replace_meta(key, last, repr(state.started))


def _failed_key(name: str) -> str:
    return f"job-notify-failed:{name}"


async def record_notification_failure(
    store: Store, name: str, state: JobState, error: str
) -> None:
    """Record that the end of ``state``'s round could not be told (a webhook the address
    policy refused, a call or a mail given up): the job shows it, and is not notified."""
    await store.set_meta(_failed_key(name), json.dumps({"round": state.started, "error": error}))


async def notification_failure(store: Store, name: str, state: JobState) -> str:
    """Why the end of ``state``'s round could not be told; "" when nothing failed."""
    raw = await store.get_meta(_failed_key(name))
    if not raw:
        return ""
    try:
        stored = json.loads(raw)
        return str(stored["error"]) if stored.get("round") == state.started else ""
    except (ValueError, KeyError, TypeError, AttributeError):
        return ""


async def job_state(store: Store, name: str, created: float) -> JobState:
    """The job's round state; a job never started has its first round from ``created``."""
    raw = await store.get_meta(_key(name))
    if not raw:
        return JobState(started=created)
    stored = json.loads(raw)
    return JobState(**{f.name: stored[f.name] for f in fields(JobState) if f.name in stored})


async def save_job_state(store: Store, name: str, state: JobState) -> None:
    await store.set_meta(_key(name), json.dumps(asdict(state)))


async def restart_job(store: Store, name: str) -> int:
    """Remove every path, snapshot and counter of the job; its settings stay, and its
    rounds start again with one starting now. How many paths went."""
    n = await store.clear_site(name)
    await save_job_state(store, name, JobState(started=time.time()))
    return n
