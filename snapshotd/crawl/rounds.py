"""A crawl job's rounds (SPEC 7.2): when one is over, the next, the seeds queued again, and
the job's status as Crawlbot numbers it. Moved on at the crawler's maintenance.

Invariants:
- a round is over when nothing of the site is pending, being captured or stored with its
  links still to follow (or when ``max_to_process`` is reached); the crawler's maintenance
  records its end once, and with ``repeat`` starts the next round ``repeat`` days later,
  until ``max_rounds``;
- a paused job's rounds stand still (none ends, starts or requeues its seeds) and its status
  says it is paused. That is the job's own rule: whether a capture starts for a paused site
  is admission's and the crawler's (:mod:`snapshotd.sites.admission`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from snapshotd.config.settings import SiteSettings
from snapshotd.sites import path_policy
from snapshotd.store.interface import PRIORITY_EXPIRED, PRIORITY_LINK, Store
from snapshotd.store.job_state import JobState, job_state, save_job_state

if TYPE_CHECKING:
    from snapshotd.sites.registry import SiteRegistry

__all__ = [
    "FOLLOWING",
    "JOB_STATUS",
    "ROUND_OVER",
    "advance",
    "job_status",
    "round_counts",
    "round_over",
    "start_round",
]

DAY = 86400.0

# Crawlbot's job status codes and messages.
JOB_STATUS = {
    0: "Job is initializing",
    1: "Job has reached maxRounds limit",
    2: "Job has reached maxToCrawl limit",
    3: "Job has reached maxToProcess limit",
    4: "Next round to start in {} seconds",
    5: "No URLs were added to the crawl",
    6: "Job paused",
    7: "Job in progress",
    8: "All crawling temporarily paused by root administrator for maintenance",
    9: "Job has completed and no repeat is scheduled",
    10: "Failed to crawl any seed",
}

# A just-created job with no path yet is initializing for this long, then has "no URLs".
INITIALIZING_SECONDS = 30.0

# The statuses of a job whose round is over (its end is notified once a round).
ROUND_OVER = frozenset({1, 2, 3, 4, 9, 10})


async def start_round(store: Store, site: SiteSettings, state: JobState) -> int:
    """A new round now: pages pending again, at the lowest priority. With
    ``only_process_if_new`` those a round processed are left as they are (their expiry keeps
    them fresh); the seeds, the pages only crawled and the failed ones are rendered again, so
    new pages are found and processed. How many paths were queued."""
    seeds = {p for s in site.seeds if (p := path_policy.path_of(site, s)) is not None}
    again = ("processed", "crawled", "error")
    batch: list[tuple[str, int]] = []
    queued = 0
    async for r in store.iter_paths(site.name):
        if r.state in again and (
            not site.only_process_if_new or r.state != "processed" or r.path in seeds
        ):
            batch.append((r.path, r.hops))
        if len(batch) >= 1000:
            queued += len(await store.enqueue_many(
                site.name, batch, PRIORITY_EXPIRED, force=True, found=False))
            batch = []
    if batch:
        queued += len(await store.enqueue_many(
            site.name, batch, PRIORITY_EXPIRED, force=True, found=False))
    await save_job_state(
        store, site.name, replace(state, started=time.time(), ended=0.0)
    )
    return queued


async def _queue_seeds(store: Store, site: SiteSettings, seeds: Sequence[str]) -> None:
    paths = [(p, 0) for s in seeds if (p := path_policy.path_of(site, s)) is not None]
    if paths:
        await store.enqueue_many(site.name, paths, PRIORITY_LINK, force=True)


async def advance(
    store: Store,
    sites: SiteRegistry,
    site: SiteSettings,
    *,
    now: float | None = None,
) -> bool:
    """One step of the job's rounds, at the crawler's maintenance: record the end of a round
    that is over, start the next when ``repeat`` says so, queue the seeds again when
    ``seed_recrawl_frequency`` says so. Answers whether anything was queued. The paths are
    counted after the job's state is read, so a round begun meanwhile is not taken for
    over."""
    now = time.time() if now is None else now
    if sites.is_paused(site.name):
        return False
    state = await job_state(store, site.name, sites.created.get(site.name, now))
    counts = await round_counts(store, site.name)
    queued = False
    if not state.ended and round_over(site, counts) is not None:
        state = replace(state, rounds=state.rounds + 1, ended=now)
        await save_job_state(store, site.name, state)
    if (
        site.repeat > 0
        and state.ended
        and (not site.max_rounds or state.rounds < site.max_rounds)
        and now >= state.ended + site.repeat * DAY
    ):
        await start_round(store, site, state)
        state = await job_state(store, site.name, now)
        queued = True
    if site.seed_recrawl_frequency > 0 and now >= (
        (state.seeds_at or state.started) + site.seed_recrawl_frequency * DAY
    ):
        await _queue_seeds(store, site, site.seeds)
        await save_job_state(store, site.name, replace(state, seeds_at=now))
        queued = True
    return queued


async def round_counts(store: Store, name: str) -> dict[str, int]:
    """The site's paths per state, and under ``following`` whether the round is still in
    motion whatever the states say: a capture's links still to be queued, or paths that
    changed while this counted.

    The states are read before and after the marks: a capture ends (its links marked) while
    it is counted as processing, and its links are queued before its mark is cleared, so
    links queued between the reads show in the second, and a round is never taken for over
    in between."""
    before = (await store.counts(name)).get(name, {})
    following = await store.links_due(name, captured_before=float("inf"), limit=1)
    after = (await store.counts(name)).get(name, {})
    return {**after, FOLLOWING: len(following) or int(before != after)}


# Not a state: a round in motion whatever the states say (see round_counts).
FOLLOWING = "following"


def round_over(site: SiteSettings, counts: dict[str, int]) -> int | None:
    """The status code a round ended with (2, 3, 9, 10); None while it goes on or the job
    has no path yet."""
    processed = counts.get("processed", 0)
    if path_policy.full(site, processed):
        return 3
    known = sum(n for state, n in counts.items() if state != FOLLOWING)
    if counts.get("pending", 0) or counts.get("processing", 0) or counts.get(FOLLOWING, 0):
        return None
    if not known:
        return None
    if path_policy.at_max_pages(site, known):
        return 2
    if not processed and not counts.get("crawled", 0):
        return 10
    return 9


def job_status(
    paused: bool, site: SiteSettings, counts: dict[str, int], state: JobState, now: float
) -> tuple[int, str]:
    """The Crawlbot status code of a job (:data:`JOB_STATUS`) and its message."""
    over = round_over(site, counts)
    if paused:
        code = 6
    elif over is None:
        if any(n for state, n in counts.items() if state != FOLLOWING):
            code = 7
        else:
            code = 0 if now - state.started < INITIALIZING_SECONDS else 5
    elif site.repeat > 0 and over != 3:
        rounds = state.rounds + (not state.ended)
        code = 1 if site.max_rounds and rounds >= site.max_rounds else 4
    else:
        code = over
    message = JOB_STATUS[code]
    if code == 4:
        next_round = (state.ended or now) + site.repeat * DAY
        message = message.format(max(0, round(next_round - now)))
    return code, message
