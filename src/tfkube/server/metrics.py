"""Prometheus metrics (`/metrics`, prometheus-client), one registry per app.

- `tfkube_jobs{phase, team}` and `tfkube_replica_restarts{team}`: read from the database
  at scrape time (a custom collector), so they are right after a restart of the server
  and the same from every server process sharing the database;
- `tfkube_submit_seconds`: from request to the job recorded (and queued or started);
- `tfkube_api_request_seconds{method, route, status}`: every API request, by route
  template (never the concrete URL: ids would explode the label set).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy.orm import Session

from tfkube.server.queries.jobs import counts_by_team

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class _JobsCollector(Collector):
    def __init__(self, sessions: Callable[[], Session]) -> None:
        self.sessions = sessions

    def collect(self) -> Iterator[Any]:
        jobs = GaugeMetricFamily(
            "tfkube_jobs", "Jobs the server knows, by phase", labels=["phase", "team"]
        )
        restarts = GaugeMetricFamily(
            "tfkube_replica_restarts",
            "Replica restarts of the jobs the server knows",
            labels=["team"],
        )
        with self.sessions() as db:
            rows = counts_by_team(db)
        per_team: dict[str, float] = {}
        for team, phase, count, restart_sum in rows:
            jobs.add_metric([phase, team], count)
            per_team[team] = per_team.get(team, 0.0) + float(restart_sum)
        for team, total in per_team.items():
            restarts.add_metric([team], total)
        yield jobs
        yield restarts


class Metrics:
    def __init__(self, sessions: Callable[[], Session]) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_JobsCollector(sessions))
        self.submit_seconds = Histogram(
            "tfkube_submit_seconds",
            "Time to accept a job submission",
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.request_seconds = Histogram(
            "tfkube_api_request_seconds",
            "API request latency",
            labelnames=["method", "route", "status"],
            buckets=BUCKETS,
            registry=self.registry,
        )
