"""Crawl jobs as Crawlbot describes them (SPEC 7.2): a job is a site; its status, counters
and round are read from the store. Used by the Crawlbot-compatible endpoint and by the
notifications sent when a job ends.
"""

from __future__ import annotations

import time
from typing import Any

from snapshotd.config import SiteSettings
from snapshotd.sites import SiteRegistry
from snapshotd.store.base import Store

__all__ = [
    "DATA_PATH",
    "ENDED",
    "JOB_STATUS",
    "describe_job",
    "job_status",
    "notified",
    "round_start",
    "set_notified",
    "set_round_start",
]

V3 = "/_snapshotd/v3"
DATA_PATH = V3 + "/crawl/data"

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

# The statuses of a job that has ended (its notifications are sent once a round).
ENDED = frozenset({2, 9, 10})


async def round_start(store: Store, name: str, created: float) -> float:
    """When the job's current round started: its last restart or roundStart, else creation."""
    return float(await store.get_meta(f"round:{name}") or created)


async def set_round_start(store: Store, name: str) -> None:
    await store.set_meta(f"round:{name}", str(time.time()))


async def notified(store: Store, name: str, started: float) -> bool:
    """Whether the end of the round that started at ``started`` was notified."""
    return await store.get_meta(f"notified:{name}") == str(started)


async def set_notified(store: Store, name: str, started: float) -> None:
    await store.set_meta(f"notified:{name}", str(started))


async def describe_job(
    store: Store, sites: SiteRegistry, site: SiteSettings, base_url: str
) -> dict[str, Any]:
    """A job as Crawlbot describes one, counted from the store; ``base_url`` is where this
    snapshotd is reached (for ``downloadJson`` and ``downloadUrls``)."""
    now = time.time()
    counts = (await store.counts()).get(site.name, {})
    total = sum(counts.values())
    created = sites.created.get(site.name, now)
    started = await round_start(store, site.name, created)
    attempts = successes = attempts_round = successes_round = 0
    for minute, name, counter, value in await store.counters(int(created // 60)):
        if name != site.name or not counter.startswith("capture:"):
            continue
        ok = counter in ("capture:ok", "capture:duplicate")
        attempts += value
        successes += value * ok
        if minute * 60 >= started // 60 * 60:
            attempts_round += value
            successes_round += value * ok
    status = job_status(sites.is_paused(site.name), site, counts, total, created, now)
    newest, _ = await store.list_paths(site.name, state="processed", limit=1)
    done = status in ENDED
    base = f"{base_url}{DATA_PATH}?name={site.name}"
    return {
        "name": site.name,
        "type": "crawl",
        "jobCreationTimeUTC": int(created),
        "jobCompletionTimeUTC": int(newest[0].captured_at or 0) if done and newest else 0,
        "jobStatus": {"status": status, "message": JOB_STATUS[status]},
        "sentJobDoneNotification": int(await notified(store, site.name, started)),
        "objectsFound": counts.get("processed", 0),
        "urlsHarvested": total,
        "pageCrawlAttempts": attempts,
        "pageCrawlSuccesses": successes,
        "pageCrawlSuccessesThisRound": successes_round,
        "pageProcessAttempts": attempts,
        "pageProcessSuccesses": successes,
        "pageProcessSuccessesThisRound": successes_round,
        "roundsCompleted": int(done),
        "roundStartTime": int(started),
        "currentTime": int(now),
        "currentTimeUTC": int(now),
        "maxRounds": 0,
        "repeat": 0,
        "seeds": " ".join(site.url_for(p) for p in site.seeds),
        "maxHops": site.max_hops,
        "maxToCrawl": site.max_pages,
        "obeyRobots": int(site.obey_robots),
        "useCanonical": int(site.use_canonical),
        "crawlDelay": site.crawl_delay,
        "urlCrawlPattern": site.url_crawl_pattern,
        "urlCrawlRegEx": site.url_crawl_regex,
        "downloadJson": base + "&format=json",
        "downloadUrls": base + "&type=urls&format=csv",
    }


def job_status(
    paused: bool, site: SiteSettings, counts: dict[str, int], total: int, created: float,
    now: float,
) -> int:
    """The Crawlbot status code of a job (:data:`JOB_STATUS`)."""
    if paused:
        return 6
    if counts.get("pending", 0) or counts.get("processing", 0):
        return 7
    if total == 0:
        return 0 if now - created < INITIALIZING_SECONDS else 5
    if total >= site.max_pages:
        return 2
    if not counts.get("processed", 0):
        return 10
    return 9


