"""Prometheus metrics of one server process (SPEC O3), in the text exposition format.

Owns :class:`ServerMetrics`: one registry per server (never the process-global one, so
tests and several servers in one process do not mix), plain in-memory counters the
request and task paths bump (an integer under an uncontended lock: the hot path pays
next to nothing), two histograms observed as tasks end and cancels land, and a
collector that turns the counters, the status-read rate and this process's open tasks
into metric families when scraped. ``serve(port)`` exposes ``/metrics`` on a thread of
its own; ``close()`` stops it (the server's lifespan does, so it stops with the server).

Names follow the Prometheus conventions and the executor's metrics
(``longcall.runtime.metrics``): ``longcall_server_`` prefix, base units (seconds),
``_total`` on counters (added by the client library). Must not: decide anything, touch
the store or read HTTP.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from longcall.runtime.metrics import (
    DURATION_BUCKETS_S,
    MEDIAN_WINDOW,
    QPS_WINDOW_S,
    Exposition,
)
from longcall.server.model import ACTIVE_STATUSES, TaskRecord, TaskStatus

CANCEL_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30)
"""A cancel is one compare-and-set in the store: milliseconds, seconds when it is busy."""

_STATUS_READS = "status reads"
"""The one key of the status-read rate."""

OpenTasks = Callable[[], Mapping[TaskStatus, int]]
"""This process's open tasks by status, read at scrape time."""


class ServerMetrics(Exposition):
    """The metrics of one server process; the server feeds it, Prometheus scrapes it."""

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        super().__init__(clock=clock)
        self.created: collections.Counter[tuple[str, str]] = collections.Counter()
        """(tool, protocol) → tasks created."""
        self.ended: collections.Counter[tuple[str, str]] = collections.Counter()
        """(tool, terminal status) → tasks ended by this process."""
        self.cancels: collections.Counter[str] = collections.Counter()
        """outcome (cancelled, already_terminal) → cancel requests."""
        self.status_reads: collections.Counter[str] = collections.Counter()
        """protocol → status reads (``tasks/get`` and the facades' equivalents)."""
        self.refused: collections.Counter[str] = collections.Counter()
        """reason → requests refused before any tool ran."""
        self.inputs_asked: collections.Counter[str] = collections.Counter()
        """where (task, round) → input requests asked of a client."""
        self.inputs_answered: collections.Counter[str] = collections.Counter()
        """where (task, round) → answers received."""
        self.takeovers: collections.Counter[str] = collections.Counter()
        """outcome → tasks this process took over after their process stopped."""
        self.completions_lost = 0
        """A tool's terminal write that changed nothing (cancelled first, or fenced off)."""
        self.duration = Histogram(
            "longcall_server_task_duration_seconds",
            "From a task's creation to its terminal status being stored, by tool.",
            ["tool"],
            buckets=DURATION_BUCKETS_S,
            registry=self.registry,
        )
        self.cancel_ack = Histogram(
            "longcall_server_cancel_acknowledgement_seconds",
            "From a cancel request reaching the task manager to the cancelled status stored.",
            buckets=CANCEL_BUCKETS_S,
            registry=self.registry,
        )
        self._open_tasks: OpenTasks | None = None
        self.registry.register(_ServerCollector(self))

    def bind(self, open_tasks: OpenTasks) -> None:
        """Read this process's open tasks (by status) through ``open_tasks`` when scraped."""
        self._open_tasks = open_tasks

    # --- fed by the server ------------------------------------------------------------------

    def observe_created(self, tool: str, protocol: str) -> None:
        with self._lock:
            self.created[(tool, protocol)] += 1

    def observe_ended(self, record: TaskRecord) -> None:
        """A terminal status this process stored (once per task: terminals are absorbing)."""
        elapsed = max(0.0, record.last_updated_at - record.created_at)
        with self._lock:
            self.ended[(record.tool_name, record.status.value)] += 1
        self._note_duration(elapsed)
        self.duration.labels(tool=record.tool_name).observe(elapsed)

    def observe_cancel(self, *, cancelled: bool, seconds: float) -> None:
        with self._lock:
            self.cancels["cancelled" if cancelled else "already_terminal"] += 1
        if cancelled:
            self.cancel_ack.observe(max(0.0, seconds))

    def observe_status_read(self, protocol: str) -> None:
        with self._lock:
            self.status_reads[protocol] += 1
        self._count_second(_STATUS_READS, self._clock())

    def observe_refused(self, reason: str) -> None:
        with self._lock:
            self.refused[reason] += 1

    def observe_inputs_asked(self, where: str, count: int = 1) -> None:
        with self._lock:
            self.inputs_asked[where] += count

    def observe_inputs_answered(self, where: str, count: int = 1) -> None:
        with self._lock:
            self.inputs_answered[where] += count

    def observe_takeover(self, outcome: str) -> None:
        with self._lock:
            self.takeovers[outcome] += 1

    def observe_completion_lost(self) -> None:
        with self._lock:
            self.completions_lost += 1

    # --- read at scrape time ----------------------------------------------------------------

    def status_read_rate(self) -> float:
        """Status reads per second over the last ``QPS_WINDOW_S`` whole seconds."""
        return self._rates().get(_STATUS_READS, 0.0)

    def open_tasks(self) -> dict[TaskStatus, int]:
        counts = dict(self._open_tasks()) if self._open_tasks is not None else {}
        return {status: counts.get(status, 0) for status in sorted(ACTIVE_STATUSES)}

    def snapshot(self) -> dict[str, Any]:
        """Copies of the counters, taken together under the lock."""
        with self._lock:
            return {
                "created": dict(self.created),
                "ended": dict(self.ended),
                "cancels": dict(self.cancels),
                "status_reads": dict(self.status_reads),
                "refused": dict(self.refused),
                "inputs_asked": dict(self.inputs_asked),
                "inputs_answered": dict(self.inputs_answered),
                "takeovers": dict(self.takeovers),
                "completions_lost": self.completions_lost,
            }


def _counter(
    name: str, text: str, labels: tuple[str, ...], values: Mapping[Any, int]
) -> CounterMetricFamily:
    family = CounterMetricFamily(name, text, labels=list(labels))
    for key, value in sorted(values.items()):
        family.add_metric(list(key) if isinstance(key, tuple) else [key], value)
    return family


class _ServerCollector(Collector):
    """The server's counters and gauges, copied under the metrics lock at scrape time."""

    def __init__(self, metrics: ServerMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Any]:
        metrics = self._metrics
        counts = metrics.snapshot()
        yield _counter(
            "longcall_server_tasks_created",
            "Tasks created (durably stored) by this process, by tool and protocol.",
            ("tool", "protocol"),
            counts["created"],
        )
        yield _counter(
            "longcall_server_tasks_ended",
            "Terminal statuses stored by this process, by tool and status"
            " (completed, failed, cancelled).",
            ("tool", "status"),
            counts["ended"],
        )
        yield _counter(
            "longcall_server_cancel_requests",
            "Cancel requests, by outcome: cancelled, or already_terminal (nothing changed).",
            ("outcome",),
            counts["cancels"],
        )
        yield _counter(
            "longcall_server_status_reads",
            "Status reads (tasks/get, GetOperation, a run's status), by protocol.",
            ("protocol",),
            counts["status_reads"],
        )
        yield _counter(
            "longcall_server_requests_refused",
            "Requests refused before any tool ran, by reason.",
            ("reason",),
            counts["refused"],
        )
        yield _counter(
            "longcall_server_input_requests",
            "Input requests asked of a client: from a running task, or in a round before"
            " a task exists.",
            ("where",),
            counts["inputs_asked"],
        )
        yield _counter(
            "longcall_server_input_responses",
            "Input answers received: stored for a task, or a round retried with answers.",
            ("where",),
            counts["inputs_answered"],
        )
        yield _counter(
            "longcall_server_task_takeovers",
            "Tasks whose process stopped (this one before a restart, or another on the store),"
            " taken over by this process, by outcome: rerun, owner_lost (not idempotent,"
            " failed), ttl_elapsed, tool_gone.",
            ("outcome",),
            counts["takeovers"],
        )
        lost = CounterMetricFamily(
            "longcall_server_completions_lost",
            "Tool completions that changed nothing: the task was cancelled first or taken over.",
        )
        lost.add_metric([], counts["completions_lost"])
        yield lost
        median = metrics.median_duration_s()
        gauge = GaugeMetricFamily(
            "longcall_server_task_duration_median_seconds",
            f"Median duration of the last {MEDIAN_WINDOW} tasks this process ended.",
        )
        if median is not None:
            gauge.add_metric([], median)
        yield gauge
        rate = GaugeMetricFamily(
            "longcall_server_status_read_rate_per_second",
            f"Status reads per second over the last {QPS_WINDOW_S} s.",
        )
        rate.add_metric([], metrics.status_read_rate())
        yield rate
        open_tasks = GaugeMetricFamily(
            "longcall_server_tasks_open",
            "Open tasks this process runs, by status (sum over processes for a shared store).",
            labels=["status"],
        )
        for status, count in metrics.open_tasks().items():
            open_tasks.add_metric([status.value], count)
        yield open_tasks
