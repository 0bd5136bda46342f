"""A crawl job as Crawlbot's API describes one (SPEC 7.2): its settings under Crawlbot's
names, its status and counters. Used by the Crawlbot-compatible endpoint, the v1 API, the
console and the notifications sent when a round ends.

Invariants:
- the counters are the per-minute capture counters of the store, so they add up over
  every process and host.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from snapshotd.config.settings import SiteSettings
from snapshotd.crawl.rounds import ROUND_OVER, job_status, round_counts
from snapshotd.store.interface import Store
from snapshotd.store.job_state import is_notified, job_state, notification_failure

if TYPE_CHECKING:
    from snapshotd.observe.minute_counts import MinuteCounters

__all__ = ["PROGRESS", "V3", "describe_job"]

# Where Crawlbot's endpoints are on serve's port; on ``crawlbot_port``, at the root
# (snapshotd.api.crawlbot_port).
V3 = "/_snapshotd/v3"

# What the v1 API and the console show of a job (the rest are its settings).
PROGRESS = (
    "jobStatus", "objectsFound", "urlsHarvested", "pageCrawlAttempts", "pageCrawlSuccesses",
    "pageCrawlSuccessesThisRound", "pageProcessAttempts", "pageProcessSuccesses",
    "pageProcessSuccessesThisRound", "roundsCompleted", "roundStartTime",
    "jobCompletionTimeUTC", "sentJobDoneNotification", "notificationError",
)

async def describe_job(
    store: Store,
    site: SiteSettings,
    *,
    paused: bool,
    created: float,
    v3_url: str,
    minutes: MinuteCounters | None = None,
    download: str = "",
) -> dict[str, Any]:
    """A job as Crawlbot describes one, counted from the store; ``v3_url`` is where its
    client reaches Crawlbot's endpoints (``/v3``), ``download`` a download token of the job
    (for ``downloadJson`` and ``downloadUrls``, usable as they are). ``minutes``, this
    process's counters, are added to the store after its paths are read: a capture is
    counted before the store shows it, so every page the paths show captured is counted.
    The job's state is read before its paths, so a round begun meanwhile is not described
    as over."""
    now = time.time()
    state = await job_state(store, site.name, created)
    counts = await round_counts(store, site.name)
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
    failed = await notification_failure(store, site.name, state)
    base = f"{v3_url}/crawl/data?name={site.name}" + (
        f"&downloadToken={download}" if download else ""
    )

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
        "sentJobDoneNotification": int(await is_notified(store, site.name, state) and not failed),
        # Why this round's end could not be told ("" when it was, or is not over yet).
        "notificationError": failed,
        # Crawlbot's objects: a copy of another page (duplicate_of) is none of its own.
        "objectsFound": counts.get("processed", 0) - await store.count_copies(site.name),
        # Every distinct URL the job's seeds, sitemaps and pages named (store.found_urls).
        "urlsHarvested": await store.found_urls(site.name),
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
        "apiUrl": site.api_url,
        "downloadJson": base + "&format=json",
        "downloadUrls": base + "&type=urls&format=csv",
    }
