"""Prometheus metrics, one registry per application so several apps can live in a process."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

__all__ = ["Metrics"]


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "snapshotd_requests",
            "Proxy requests by cache result (HIT, STALE, MISS, BYPASS, PASS, ERROR)",
            ["result"],
            registry=self.registry,
        )
        self.captures = Counter(
            "snapshotd_captures",
            "Captures by outcome (ok, error, duplicate)",
            ["outcome"],
            registry=self.registry,
        )
        self.queue_depth = Gauge(
            "snapshotd_queue_depth",
            "Pending paths by priority",
            ["priority"],
            registry=self.registry,
        )
        self.render_seconds = Histogram(
            "snapshotd_render_seconds",
            "Time to render one capture",
            buckets=(0.25, 0.5, 1, 2, 3, 5, 8, 13, 20, 30, 60),
            registry=self.registry,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
