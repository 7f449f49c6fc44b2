"""Metrics for Prometheus: what the control loop measures as it runs, and what the record holds.

The reconcile passes are timed where they run (the Celery worker) into prometheus-client's
multiprocess files (``PROMETHEUS_MULTIPROC_DIR``), which the web server's ``/metrics`` adds up;
everything else (runs and tasks by state, submissions and their latency, memory kills,
evictions, retries, the queue, GiB·h) is read from the database when scraped, so it is right
whichever process did the work and survives restarts.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db.models import (
    Count,
    DurationField,
    ExpressionWrapper,
    F,
    FloatField,
    Min,
    OuterRef,
    Q,
    Subquery,
    Sum,
)
from django.db.models.functions import Cast, Greatest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest, multiprocess
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import REGISTRY, Collector

from runs.models import Attempt, Observation, Run, RunState, Task, TaskState

RECONCILE_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
WAIT_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 24 * 3600.0)
GIB = 1024**3

RECONCILE_SECONDS = Histogram(
    "simrun_reconcile_seconds", "How long a reconcile pass took.", buckets=RECONCILE_BUCKETS
)
RECONCILE_CHANGED = Counter(
    "simrun_reconcile_runs_changed", "Runs whose record a reconcile pass changed."
)


@dataclass
class Timer:
    seconds: float = 0.0


@contextmanager
def reconcile_timer() -> Iterator[Timer]:
    """Time a reconcile pass into ``simrun_reconcile_seconds``."""
    timer = Timer()
    started = time.monotonic()
    try:
        yield timer
    finally:
        timer.seconds = round(time.monotonic() - started, 4)
        RECONCILE_SECONDS.observe(timer.seconds)


def count_changed(changed: int | None) -> None:
    """Count the runs a pass changed into ``simrun_reconcile_runs_changed_total``."""
    if changed:
        RECONCILE_CHANGED.inc(changed)


def _histogram(
    name: str, documentation: str, rows: Any, field: str, buckets: Sequence[float]
) -> HistogramMetricFamily:
    """A histogram of a duration annotated on ``rows`` as ``field``, counted by the database."""
    counts = {
        f"le_{i}": Count("pk", filter=Q(**{f"{field}__lte": timedelta(seconds=b)}))
        for i, b in enumerate(buckets)
    }
    found = rows.aggregate(total=Count("pk"), seconds=Sum(field), **counts)
    seconds = found["seconds"].total_seconds() if found["seconds"] else 0.0
    cumulative = [(str(b), found[f"le_{i}"]) for i, b in enumerate(buckets)]
    return HistogramMetricFamily(
        name, documentation, buckets=[*cumulative, ("+Inf", found["total"])], sum_value=seconds
    )


class RecordCollector(Collector):
    """The metrics read from the record at each scrape."""

    def collect(self) -> Iterator[Metric]:
        runs = GaugeMetricFamily("simrun_runs", "Runs by state.", labels=["state"])
        by_state = dict(Run.objects.order_by().values_list("state").annotate(n=Count("pk")))
        for state in RunState.values:
            runs.add_metric([state], by_state.get(state, 0))
        yield runs
        tasks = GaugeMetricFamily("simrun_tasks", "Tasks by state.", labels=["state"])
        by_state = dict(Task.objects.order_by().values_list("state").annotate(n=Count("pk")))
        for state in TaskState.values:
            tasks.add_metric([state], by_state.get(state, 0))
        yield tasks
        yield CounterMetricFamily(
            "simrun_runs_submitted", "Runs submitted.", value=Run.objects.count()
        )
        yield from self.attempts()
        yield from self.queue()
        yield from self.memory_time()

    def attempts(self) -> Iterator[Metric]:
        found = Attempt.objects.aggregate(
            oom=Count("pk", filter=Q(oom_killed=True)),
            evicted=Count("pk", filter=Q(evicted=True)),
            retries=Count("pk", filter=Q(attempt__gt=0)),
        )
        yield CounterMetricFamily(
            "simrun_oom_kills", "Attempts killed for memory.", value=found["oom"]
        )
        yield CounterMetricFamily("simrun_evictions", "Attempts evicted.", value=found["evicted"])
        yield CounterMetricFamily(
            "simrun_retries", "Attempts after the first of a worker.", value=found["retries"]
        )

    def queue(self) -> Iterator[Metric]:
        submitted = Run.objects.filter(submitted_at__isnull=False).annotate(
            latency=ExpressionWrapper(
                F("submitted_at") - F("created_at"), output_field=DurationField()
            )
        )
        yield _histogram(
            "simrun_submission_latency_seconds",
            "From a run's creation to its workflow's submission.",
            submitted,
            "latency",
            WAIT_BUCKETS,
        )
        first_start = (
            Task.objects.filter(run=OuterRef("pk"), started_at__isnull=False)
            .order_by()
            .values("run")
            .annotate(first=Min("started_at"))
            .values("first")
        )
        waited = (
            Run.objects.filter(submitted_at__isnull=False)
            .annotate(first_start=Subquery(first_start))
            .filter(first_start__isnull=False)
            .annotate(
                wait=ExpressionWrapper(
                    F("first_start") - F("submitted_at"), output_field=DurationField()
                )
            )
        )
        yield _histogram(
            "simrun_queue_wait_seconds",
            "From a run's submission to the start of its first task.",
            waited,
            "wait",
            WAIT_BUCKETS,
        )
        depth = GaugeMetricFamily(
            "simrun_queue_depth", "What waits for room: runs and tasks.", labels=["what"]
        )
        depth.add_metric(["runs"], Run.objects.filter(state=RunState.SUBMITTING).count())
        depth.add_metric(
            ["tasks"], Task.objects.filter(state=TaskState.QUEUED, run__ended_at=None).count()
        )
        yield depth

    def memory_time(self) -> Iterator[Metric]:
        """GiB·h held by workers: what they used at their peak, and what their limit left over.

        An estimate from the observations: a worker's peak (and limit) times its time
        computing, its units' seconds spread over its processes.
        """
        seconds = Cast(F("unit_seconds"), FloatField()) / Greatest(F("processes"), 1)
        peak = Cast(F("peak_bytes"), FloatField())
        left = Greatest(Cast(F("limit_bytes"), FloatField()) - peak, 0.0)
        found = Observation.objects.filter(peak_bytes__isnull=False).aggregate(
            used=Sum(peak * seconds, output_field=FloatField()),
            wasted=Sum(
                left * seconds, filter=Q(limit_bytes__isnull=False), output_field=FloatField()
            ),
        )
        used = (found["used"] or 0.0) / GIB / 3600
        wasted = (found["wasted"] or 0.0) / GIB / 3600
        gib_hours = GaugeMetricFamily(
            "simrun_memory_gib_hours",
            "GiB·h of memory by workers: used and wasted.",
            labels=["what"],
        )
        gib_hours.add_metric(["used"], used)
        gib_hours.add_metric(["wasted"], wasted)
        yield gib_hours


def exposition() -> bytes:
    """The text Prometheus scrapes: every process's counters and the record's figures."""
    measured: CollectorRegistry = REGISTRY  # without the multiprocess files: this process's
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        measured = CollectorRegistry()
        multiprocess.MultiProcessCollector(measured)  # type: ignore[no-untyped-call]
    record = CollectorRegistry()
    record.register(RecordCollector())
    return generate_latest(measured) + generate_latest(record)
