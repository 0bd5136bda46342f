"""Prometheus metrics, one registry per application so several apps can live in a process;
beside them, the per-minute counters kept in the store (:mod:`snapshotd.observe.minute_counts`).

The worker processes of one ``serve`` count in one directory (prometheus-client's
multiprocess mode, :func:`share_between_processes`), so each of them reports the sums of
all; the gauges, read from the store, report the latest value set by any of them. Beside
them, what is read when scraped: ``process_*`` (memory, CPU, open files, prometheus-client's
``ProcessCollector``) of the process that answers the scrape, and what
:meth:`Metrics.add_collector` was given (the browser pool's processes and memory).
"""

from __future__ import annotations

import os

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
    values,
)
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from snapshotd.crawlers.families import claim_family
from snapshotd.observe.minute_counts import RENDER_BUCKETS, MinuteCounters

__all__ = ["Metrics", "share_between_processes"]

REQUEST_RESULTS = (
    "HIT", "STALE", "MISS", "RETRY", "BYPASS", "UNAVAILABLE", "RULE", "PASS", "ERROR"
)
CAPTURE_OUTCOMES = ("ok", "crawled", "duplicate", "not_found", "error")
REFUSAL_REASONS = ("max_pages", "rate", "miss_queue", "paused")

_SHARED_DIR = "PROMETHEUS_MULTIPROC_DIR"


def share_between_processes(directory: str) -> None:
    """Count every metric made from now on in this process, and in the processes it forks,
    in ``directory``, which they all share."""
    os.environ[_SHARED_DIR] = directory
    values.ValueClass = values.MultiProcessValue()


class Metrics:
    def __init__(self) -> None:
        self.minutes = MinuteCounters()
        self.registry = CollectorRegistry(auto_describe=True)
        self._read_when_scraped: list[Collector] = [ProcessCollector(registry=None)]
        self.requests = Counter(
            "snapshotd_requests",
            "Proxy requests by cache result (HIT, STALE, MISS, BYPASS, PASS, ERROR)",
            ["result"],
            registry=self.registry,
        )
        self._requests: dict[str, Counter] = {}
        self.claims = Counter(
            "snapshotd_bot_claims",
            "Snapshot requests claiming a crawler, by family and claim (verified, unverified, "
            "refused, unverifiable, pending)",
            ["family", "claim"],
            registry=self.registry,
        )
        self._claims: dict[tuple[str, str], Counter] = {}
        self.captures = Counter(
            "snapshotd_captures",
            "Captures by outcome (ok, error, duplicate)",
            ["outcome"],
            registry=self.registry,
        )
        self.readiness_limits = Counter(
            "snapshotd_readiness_limits",
            "Captures stored although a readiness limit, not the page, ended the wait",
            registry=self.registry,
        )
        self.queue_depth = Gauge(
            "snapshotd_queue_depth",
            "Pending paths by priority",
            ["priority"],
            registry=self.registry,
            multiprocess_mode="mostrecent",
        )
        self.render_seconds = Histogram(
            "snapshotd_render_seconds",
            "Time to render one capture",
            buckets=RENDER_BUCKETS,
            registry=self.registry,
        )
        self.refused = Counter(
            "snapshotd_refused",
            "Proxy misses answered BYPASS at once, by reason (max_pages, rate, miss_queue)",
            ["reason"],
            registry=self.registry,
        )
        self.indexnow_urls = Counter(
            "snapshotd_indexnow_urls",
            "URLs told to IndexNow endpoints, by result (sent, failed, dropped)",
            ["result"],
            registry=self.registry,
        )
        for result in ("sent", "failed", "dropped"):
            self.indexnow_urls.labels(result)
        self.paths = Gauge(
            "snapshotd_paths",
            "Paths by site and state (read from the store when scraped)",
            ["site", "state"],
            registry=self.registry,
            multiprocess_mode="mostrecent",
        )

        # Every documented label value from the start, at 0, so that a rate over them (a
        # dashboard's) exists before the first such event.
        for result in REQUEST_RESULTS:
            self.requests.labels(result)
        for outcome in CAPTURE_OUTCOMES:
            self.captures.labels(outcome)
        for reason in REFUSAL_REASONS:
            self.refused.labels(reason)

    def claim(self, site: str, bot: str, claim: str) -> None:
        """Count a bot's request by its crawler family and claim (``verified``,
        ``unverified``, ``refused``, ``unverifiable``, ``pending``); nothing for a request
        that claims no crawler (``none``) or on a site that verifies none (``-``)."""
        if claim in ("none", "-"):
            return
        family = claim_family(bot)
        key = (family, claim)
        if (counter := self._claims.get(key)) is None:
            counter = self._claims[key] = self.claims.labels(family, claim)
        counter.inc()
        self.minutes.add(site, f"claim:{family}/{claim}")

    def request(self, result: str) -> None:
        """Count a proxy request by its cache result (on the way of every request: the
        labelled counter is looked up once)."""
        if (counter := self._requests.get(result)) is None:
            counter = self._requests[result] = self.requests.labels(result)
        counter.inc()

    def captures_by_outcome(self) -> dict[str, int]:
        """Captures made by this process so far, by outcome."""
        out: dict[str, int] = {}
        for metric in self.captures.collect():
            for sample in metric.samples:
                if sample.name.endswith("_total"):
                    out[sample.labels["outcome"]] = int(sample.value)
        return out

    def add_collector(self, collector: Collector) -> None:
        """Report what ``collector`` reads at each scrape."""
        self._read_when_scraped.append(collector)

    def render(self) -> bytes:
        """The exposition text: the counts of every process sharing the directory, else of
        this one; then what is read when scraped."""
        registry = CollectorRegistry()
        if os.environ.get(_SHARED_DIR):
            MultiProcessCollector(registry)
        else:
            registry.register(_Counted(self.registry))
        for collector in self._read_when_scraped:
            registry.register(collector)
        return generate_latest(registry)


class _Counted(Collector):
    """One registry's metrics, as a collector of another."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def collect(self):  # type: ignore[no-untyped-def]
        return self.registry.collect()
