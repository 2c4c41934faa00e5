"""Prometheus metrics of one server: request latencies, and the job queue, the trial rate and the
drift of stored bests per device class read from the database at scrape time (so every replica
reports the same cluster-wide figures).

Each app gets its own :class:`prometheus_client.CollectorRegistry` (no process-wide singleton).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from db import Database, JobStatus, TrialOutcome, repository, utcnow
from db.states import RevalidationState

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)
TRIAL_WINDOW_S = 60.0
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class _DatabaseCollector(Collector):
    """Queue length, running jobs, trials finished in the last minute by outcome, and per
    device class the stored bests by revalidation state, the regressed and stale ones, and the
    re-timings by verdict."""

    def __init__(self, database: Database) -> None:
        self.database = database

    def collect(self) -> Iterator[Metric]:
        since = utcnow() - timedelta(seconds=TRIAL_WINDOW_S)
        with self.database.session(readonly=True) as s:
            queued = repository.count_jobs(s, status=JobStatus.QUEUED)
            running = repository.count_jobs(s, status=JobStatus.RUNNING)
            counts = repository.outcomes_since(s, since)
            drift = repository.drift_by_class(s)
        yield GaugeMetricFamily("tunefleet_queue_length", "Jobs queued, not yet claimed.", queued)
        yield GaugeMetricFamily("tunefleet_running_jobs", "Jobs running now.", running)
        rate = GaugeMetricFamily(
            "tunefleet_trials_per_minute",
            "Trials recorded in the last minute, by outcome.",
            labels=["outcome"],
        )
        for outcome in TrialOutcome:
            rate.add_metric([outcome.value], counts.get(outcome, 0))
        yield rate
        yield from _drift_metrics(drift)


_STATES = (*(s.value for s in RevalidationState), "unchecked")


def _drift_metrics(drift: list[repository.ClassDrift]) -> Iterator[Metric]:
    """Per device class: bests by state, the regressed and stale ones, re-timings by verdict."""
    labels = ["device_class"]
    best = GaugeMetricFamily(
        "tunefleet_best_configs",
        "Stored best configs by the verdict of their last revalidation (unchecked: never, or "
        "tuned since).",
        labels=[*labels, "state"],
    )
    regressed = GaugeMetricFamily(
        "tunefleet_best_configs_regressed",
        "Stored best configs whose last revalidation found them slower than stored.",
        labels=labels,
    )
    stale = GaugeMetricFamily(
        "tunefleet_best_configs_stale",
        "Stored best configs measured in another stack than the newest a worker of their class "
        "reported, and not revalidated in it yet.",
        labels=labels,
    )
    retimed = CounterMetricFamily(
        "tunefleet_retimings",
        "Re-timings of stored best configs (their drift history), by verdict.",
        labels=[*labels, "verdict"],
    )
    for c in drift:
        for state in _STATES:
            best.add_metric([c.device_class, state], c.states.get(state, 0))
        regressed.add_metric([c.device_class], c.states.get(RevalidationState.REGRESSED.value, 0))
        stale.add_metric([c.device_class], c.stale)
        for verdict in RevalidationState:
            retimed.add_metric([c.device_class, verdict.value], c.retimings.get(verdict.value, 0))
    yield from (best, regressed, stale, retimed)


class Metrics:
    """The registry of one app, its latency histogram and the ASGI middleware that fills it."""

    def __init__(self, database: Database) -> None:
        self.registry = CollectorRegistry()
        self.latency = Histogram(
            "tunefleet_http_request_duration_seconds",
            "Time to answer an HTTP request, by route template and status.",
            ["method", "route", "status"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.registry.register(_DatabaseCollector(database))

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def middleware(self, app: ASGIApp) -> ASGIApp:
        """Wrap ``app`` so each HTTP request's latency (to the response start) is observed."""

        async def timed(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            start = time.perf_counter()

            async def observe(message: Message) -> None:
                if message["type"] == "http.response.start":
                    route = scope.get("route")
                    template = getattr(route, "path", "unmatched")
                    method = scope["method"] if scope["method"] in _METHODS else "other"
                    self.latency.labels(method, template, str(message["status"])).observe(
                        time.perf_counter() - start
                    )
                await send(message)

            await app(scope, receive, observe)

        return timed
