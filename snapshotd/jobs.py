"""Crawl jobs as Crawlbot describes them (SPEC 7.2): a job is a site; its status, counters
and rounds are read from the store. Used by the Crawlbot-compatible endpoint, the v1 API,
the console, the crawler's maintenance (which ends and starts rounds) and the notifications
sent when a round ends.

Invariants:
- a job's round state (when its round started and ended, how many rounds completed, when
  its seeds were last recrawled) is one meta row, ``job:NAME``; the start of the last round
  whose end was notified is another, ``job-notified:NAME``, claimed by one compare-and-set
  so one process of all hosts notifies a round; both go with the site's paths by a restart
  or a delete;
- a round is over when nothing of the site is pending, being captured or stored with its
  links still to follow (or when ``max_to_process`` is reached); the crawler's maintenance
  records its end once, and with ``repeat`` starts the next round ``repeat`` days later,
  until ``max_rounds``; a paused job's rounds stand still (none ends, starts or requeues its
  seeds) and its status says it is paused. That is the job's own rule: whether a capture
  starts for a paused site is admission's and the crawler's (:mod:`snapshotd.admission`);
- the counters are the per-minute capture counters of the store, so they add up over
  every process and host.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import TYPE_CHECKING, Any

from snapshotd.config import SiteSettings
from snapshotd.store.base import PRIORITY_EXPIRED, PRIORITY_LINK, Store

if TYPE_CHECKING:
    from snapshotd.sites import SiteRegistry
    from snapshotd.stats import MinuteCounters

__all__ = [
    "DATA_PATH",
    "JOB_STATUS",
    "PROGRESS",
    "ROUND_OVER",
    "JobState",
    "advance",
    "describe_job",
    "job_state",
    "job_status",
    "restart_job",
    "save_job_state",
    "start_round",
]

V3 = "/_snapshotd/v3"
DATA_PATH = V3 + "/crawl/data"
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

# What the v1 API and the console show of a job (the rest are its settings).
PROGRESS = (
    "jobStatus", "objectsFound", "urlsHarvested", "pageCrawlAttempts", "pageCrawlSuccesses",
    "pageCrawlSuccessesThisRound", "pageProcessAttempts", "pageProcessSuccesses",
    "pageProcessSuccessesThisRound", "roundsCompleted", "roundStartTime",
    "jobCompletionTimeUTC", "sentJobDoneNotification",
)

# The statuses of a job whose round is over (its end is notified once a round).
ROUND_OVER = frozenset({1, 2, 3, 4, 9, 10})


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


async def start_round(store: Store, site: SiteSettings, state: JobState) -> int:
    """A new round now: pages pending again, at the lowest priority. With
    ``only_process_if_new`` those a round processed are left as they are (their expiry keeps
    them fresh); the seeds, the pages only crawled and the failed ones are rendered again, so
    new pages are found and processed. How many paths were queued."""
    seeds = {p for s in site.seeds if (p := site.path_of(s)) is not None}
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
    paths = [(p, 0) for s in seeds if (p := site.path_of(s)) is not None]
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
    counts = await _counts(store, site.name)
    queued = False
    if not state.ended and _round_over(site, counts) is not None:
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


async def _counts(store: Store, name: str) -> dict[str, int]:
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


# Not a state: a round in motion whatever the states say (see _counts).
FOLLOWING = "following"


def _round_over(site: SiteSettings, counts: dict[str, int]) -> int | None:
    """The status code a round ended with (2, 3, 9, 10); None while it goes on or the job
    has no path yet."""
    processed = counts.get("processed", 0)
    if site.full(processed):
        return 3
    known = sum(n for state, n in counts.items() if state != FOLLOWING)
    if counts.get("pending", 0) or counts.get("processing", 0) or counts.get(FOLLOWING, 0):
        return None
    if not known:
        return None
    if known >= site.max_pages:
        return 2
    if not processed and not counts.get("crawled", 0):
        return 10
    return 9


def job_status(
    paused: bool, site: SiteSettings, counts: dict[str, int], state: JobState, now: float
) -> tuple[int, str]:
    """The Crawlbot status code of a job (:data:`JOB_STATUS`) and its message."""
    over = _round_over(site, counts)
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


async def describe_job(
    store: Store,
    site: SiteSettings,
    *,
    paused: bool,
    created: float,
    base_url: str,
    minutes: MinuteCounters | None = None,
) -> dict[str, Any]:
    """A job as Crawlbot describes one, counted from the store; ``base_url`` is where this
    snapshotd is reached (for ``downloadJson`` and ``downloadUrls``). ``minutes``, this
    process's counters, are added to the store after its paths are read: a capture is
    counted before the store shows it, so every page the paths show captured is counted.
    The job's state is read before its paths, so a round begun meanwhile is not described
    as over."""
    now = time.time()
    state = await job_state(store, site.name, created)
    counts = await _counts(store, site.name)
    if minutes is not None:
        await minutes.flush(store)
    # Captures by outcome (ok, duplicate, crawled, error), in all and in this round.
    total: dict[str, int] = {}
    this_round: dict[str, int] = {}
    for minute, name, counter, value in await store.counters(int(created // 60)):
        if name != site.name or not counter.startswith("capture:"):
            continue
        kind = counter.removeprefix("capture:")
        total[kind] = total.get(kind, 0) + value
        if minute * 60 >= state.started // 60 * 60:
            this_round[kind] = this_round.get(kind, 0) + value
    status, message = job_status(paused, site, counts, state, now)
    over = status in ROUND_OVER
    base = f"{base_url}{DATA_PATH}?name={site.name}"

    def crawled(c: dict[str, int]) -> int:
        return c.get("ok", 0) + c.get("duplicate", 0) + c.get("crawled", 0)

    def processed(c: dict[str, int]) -> int:
        return c.get("ok", 0) + c.get("duplicate", 0)

    attempts = sum(total.values())
    return {
        "name": site.name,
        "type": "crawl",
        "jobCreationTimeUTC": int(created),
        "jobCompletionTimeUTC": int(state.ended or now) if over else 0,
        "jobStatus": {"status": status, "message": message},
        "sentJobDoneNotification": int(await is_notified(store, site.name, state)),
        "objectsFound": counts.get("processed", 0),
        "urlsHarvested": sum(n for state, n in counts.items() if state != FOLLOWING),
        "pageCrawlAttempts": attempts,
        "pageCrawlSuccesses": crawled(total),
        "pageCrawlSuccessesThisRound": crawled(this_round),
        "pageProcessAttempts": attempts - total.get("crawled", 0),
        "pageProcessSuccesses": processed(total),
        "pageProcessSuccessesThisRound": processed(this_round),
        "roundsCompleted": state.rounds + (over and not state.ended),
        "roundStartTime": int(state.started),
        "currentTime": int(now),
        "currentTimeUTC": int(now),
        "seeds": " ".join(site.url_for(s) if s.startswith("/") else s for s in site.seeds),
        "maxHops": site.max_hops,
        "maxToCrawl": site.max_pages,
        "maxToProcess": site.max_to_process,
        # A job is one host: its per-subdomain maxima are its maxima.
        "maxToCrawlPerSubdomain": site.max_pages,
        "maxToProcessPerSubdomain": site.max_to_process,
        "restrictDomain": 1,
        "obeyRobots": int(site.obey_robots),
        "useCanonical": int(site.use_canonical),
        "crawlDelay": site.crawl_delay,
        "urlCrawlPattern": site.url_crawl_pattern,
        "urlCrawlRegEx": site.url_crawl_regex,
        "urlProcessPattern": site.url_process_pattern,
        "urlProcessRegEx": site.url_process_regex,
        "pageProcessPattern": site.page_process_pattern,
        "customHeaders": list(site.custom_headers),
        "repeat": site.repeat,
        "seedRecrawlFrequency": site.seed_recrawl_frequency or -1,
        "onlyProcessIfNew": int(site.only_process_if_new),
        "maxRounds": site.max_rounds,
        "notifyWebhook": site.notify_webhook,
        "notifyEmail": site.notify_email,
        "downloadJson": base + "&format=json",
        "downloadUrls": base + "&type=urls&format=csv",
    }
