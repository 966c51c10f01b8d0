"""Prometheus metrics (`/metrics`, prometheus-client), one registry per app.

- `tfkube_jobs{phase, team}`, `tfkube_replica_restarts{team}`,
  `tfkube_job_preemptions{team}` and `tfkube_job_disruptions{team}`: read from the database
  at scrape time (a custom collector), so they are right after a restart of the server
  and the same from every server process sharing the database;
- `tfkube_replica_cpu_cores` and `tfkube_replica_memory_bytes{team, job, role, index}`: each
  running replica of each running job, its newest sample (`outputs/usage.py`) when it is
  at most `USAGE_FRESH_SECONDS` old (where usage is recorded: the local engine's
  supervisor, or on Kubernetes the server from the metrics API);
- `tfkube_submit_seconds`: from request to the job recorded (and queued or started);
- `tfkube_api_request_seconds{method, route, status}`: every API request, by route
  template (never the concrete URL: ids would explode the label set).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy.orm import Session

from tfkube.planner import JobPhase, Replica, ReplicaState
from tfkube.server.outputs.usage import latest_usage
from tfkube.server.queries.jobs import counts_by_team, running_jobs_with_outputs

USAGE_FRESH_SECONDS = 60.0
"""A replica's newest sample older than this is not shown (the local supervisor samples
every 2 s; on Kubernetes a sample is the kubelet's, up to ~30 s old when the server keeps
it: cAdvisor's housekeeping, metrics-server's 10 s scrape, the server's 5 s poll; an older
one is a replica that stopped or a supervisor that is gone)."""
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
        preemptions = GaugeMetricFamily(
            "tfkube_job_preemptions",
            "Times the jobs the server knows were stopped for a job of higher priority "
            "(not restarts, not failures)",
            labels=["team"],
        )
        disruptions = GaugeMetricFamily(
            "tfkube_job_disruptions",
            "Times the jobs the server knows restarted from their checkpoint because a "
            "parameter server was evicted (a node drained; not restarts, not failures)",
            labels=["team"],
        )
        with self.sessions() as db:
            rows = counts_by_team(db)
        sums: dict[str, list[float]] = {}
        for team, phase, count, *counted in rows:
            jobs.add_metric([phase, team], count)
            totals = sums.setdefault(team, [0.0] * len(counted))
            for i, value in enumerate(counted):
                totals[i] += float(value)
        for team, (restart_sum, preemption_sum, disruption_sum) in sums.items():
            restarts.add_metric([team], restart_sum)
            preemptions.add_metric([team], preemption_sum)
            disruptions.add_metric([team], disruption_sum)
        yield jobs
        yield restarts
        yield preemptions
        yield disruptions


class _UsageCollector(Collector):
    """Each running replica's CPU and memory now, read at scrape time."""

    def __init__(self, sessions: Callable[[], Session], clock: Callable[[], float]) -> None:
        self.sessions = sessions
        self.clock = clock

    def collect(self) -> Iterator[Any]:
        labels = ["team", "job", "role", "index"]
        cpu = GaugeMetricFamily(
            "tfkube_replica_cpu_cores", "CPU a running replica uses, in cores", labels=labels
        )
        memory = GaugeMetricFamily(
            "tfkube_replica_memory_bytes", "Memory a running replica uses", labels=labels
        )
        with self.sessions() as db:
            jobs = running_jobs_with_outputs(db, JobPhase.RUNNING.value)
        now = self.clock()
        for team, name, output_dir, replicas in jobs:
            running = {
                r.key: r
                for r in (Replica.model_validate(raw) for raw in replicas)
                if r.state is ReplicaState.RUNNING
            }
            for key, (at, cores, used) in sorted(latest_usage(output_dir).items()):
                replica = running.get(key)
                if replica is None or now - at > USAGE_FRESH_SECONDS:
                    continue
                values = [team, name, replica.role, str(replica.index)]
                cpu.add_metric(values, cores)
                memory.add_metric(values, used)
        yield cpu
        yield memory


class Metrics:
    def __init__(self, sessions: Callable[[], Session]) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_JobsCollector(sessions))
        self.registry.register(_UsageCollector(sessions, time.time))
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
