"""Prometheus metrics of one executor process (SPEC O3), in the text exposition format.

Owns :class:`ExecutorMetrics`: one registry per executor (never the process-global
one, so tests and several executors in one process do not mix), the histograms an
executor observes as operations end (duration, cancel acknowledgement latency), the
poll rate per server over the last seconds, and a collector that reads the engine's
counters (claims, takeovers, refused stale writes, polls, retries, breakers, held
operations by state) when scraped — so counting costs the hot path nothing.
``serve(port)`` exposes ``/metrics`` on a thread of its own.

Names follow the Prometheus conventions: ``longcall_`` prefix, base units (seconds),
``_total`` on counters. Must not decide anything or write the ledger.
"""

from __future__ import annotations

import collections
import statistics
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from longcall.core import OperationRecord, State
from longcall.core.retry import BreakerState
from longcall.errors import MetricsPortUnavailable

if TYPE_CHECKING:
    from longcall.runtime.engine import Engine

DURATION_BUCKETS_S = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400)
"""Long calls: seconds to a day."""
CANCEL_BUCKETS_S = (0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)
MEDIAN_WINDOW = 1000
"""The readable median duration is over the last this many accepted operations."""
QPS_WINDOW_S = 10
"""The poll rate per server is averaged over this many whole seconds."""
_BREAKER_VALUE = {BreakerState.CLOSED: 0, BreakerState.HALF_OPEN: 1, BreakerState.OPEN: 2}


def http_url(host: str, port: int, path: str) -> str:
    """``http://HOST:PORT/PATH`` as a client types it: an IPv6 address in brackets."""
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"http://{shown}:{port}{path}"


class Exposition:
    """What the executor's and the server's metrics share: a registry of their own, the
    readable median of recent durations, per-key rates over the last whole seconds,
    and ``/metrics`` on a thread of its own."""

    def __init__(self, *, clock: Callable[[], float]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._clock = clock
        self._lock = threading.Lock()
        self._recent_durations: collections.deque[float] = collections.deque(maxlen=MEDIAN_WINDOW)
        self._seconds: dict[str, collections.deque[tuple[int, int]]] = {}
        self._http: Any = None
        self._host = "127.0.0.1"

    def _note_duration(self, seconds: float) -> None:
        with self._lock:
            self._recent_durations.append(seconds)

    def _count_second(self, key: str, now: float) -> None:
        """One event of ``key`` in the whole second of ``now``."""
        second = int(now)
        with self._lock:
            ring = self._seconds.setdefault(key, collections.deque(maxlen=QPS_WINDOW_S + 1))
            if ring and ring[-1][0] == second:
                ring[-1] = (second, ring[-1][1] + 1)
            else:
                ring.append((second, 1))

    def _rates(self) -> dict[str, float]:
        """Events per second per key over the last ``QPS_WINDOW_S`` whole seconds."""
        now = int(self._clock())
        with self._lock:
            return {
                key: sum(n for second, n in ring if now - QPS_WINDOW_S <= second < now)
                / QPS_WINDOW_S
                for key, ring in self._seconds.items()
            }

    def median_duration_s(self) -> float | None:
        with self._lock:
            return statistics.median(self._recent_durations) if self._recent_durations else None

    @property
    def port(self) -> int | None:
        """The port ``/metrics`` is served on, if it is."""
        return None if self._http is None else int(self._http.server_port)

    def serve(self, port: int, host: str = "127.0.0.1") -> int:
        """Expose ``/metrics`` on ``host:port`` (0: a free port); returns the port.
        Raises MetricsPortUnavailable when the port cannot be bound."""
        if self._http is not None:
            raise RuntimeError(f"metrics are already served on port {self.port}")
        try:
            self._http, _thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            raise MetricsPortUnavailable(
                f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}"
            ) from None
        self._host = host
        return int(self._http.server_port)

    @property
    def url(self) -> str | None:
        """Where ``/metrics`` is served (None when it is not)."""
        port = self.port
        return None if port is None else http_url(self._host, port, "/metrics")

    def close(self) -> None:
        """Stop serving ``/metrics`` (if it was served); the counters stay readable."""
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None


class ExecutorMetrics(Exposition):
    """The metrics of one executor; the executor feeds it, Prometheus scrapes it."""

    def __init__(self, *, clock: Callable[[], float]) -> None:
        super().__init__(clock=clock)
        self.accepted = Counter(
            "longcall_operations_accepted",
            "Operations accepted with a terminal receipt, by server status and result kind.",
            ["status", "result_kind"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "longcall_operation_duration_seconds",
            "From creation to acceptance of an operation.",
            buckets=DURATION_BUCKETS_S,
            registry=self.registry,
        )
        self.cancel_ack = Histogram(
            "longcall_cancel_acknowledgement_seconds",
            "From a cancel request to the server's acknowledgement (or the terminal).",
            buckets=CANCEL_BUCKETS_S,
            registry=self.registry,
        )
        self.escalated = Counter(
            "longcall_reconciliations",
            "Operations handed to an operator (UNKNOWN outcome).",
            registry=self.registry,
        )
        self._engine: Engine | None = None
        self._engine_lock: AbstractContextManager[Any] | None = None
        self.registry.register(_EngineCollector(self))

    def bind(self, engine: Engine, lock: AbstractContextManager[Any]) -> None:
        """Read this engine's counters at scrape time, under the lock that guards it."""
        self._engine, self._engine_lock = engine, lock

    # --- fed by the executor ----------------------------------------------------------

    def observe_accepted(self, record: OperationRecord) -> None:
        status = record.server_status.value if record.server_status else "unknown"
        kind = record.result_kind.value if record.result_kind else "unknown"
        self.accepted.labels(status=status, result_kind=kind).inc()
        elapsed = max(0.0, record.updated_at - record.created_at)
        self.duration.observe(elapsed)
        self._note_duration(elapsed)
        self._observe_cancel(record)

    def observe_escalated(self, record: OperationRecord) -> None:
        self.escalated.inc()

    def observe_poll(self, server: str, now: float) -> None:
        self._count_second(server, now)

    def _observe_cancel(self, record: OperationRecord) -> None:
        if record.cancel_requested_at is None:
            return
        acked = record.cancel_acknowledged_at or record.updated_at
        self.cancel_ack.observe(max(0.0, acked - record.cancel_requested_at))

    # --- read at scrape time ------------------------------------------------------------

    def poll_qps(self) -> dict[str, float]:
        """Polls per second per server over the last ``QPS_WINDOW_S`` whole seconds."""
        return self._rates()


class _EngineCollector(Collector):
    """The engine's counters and gauges, copied under its lock at scrape time."""

    def __init__(self, metrics: ExecutorMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Any]:
        metrics = self._metrics
        engine, lock = metrics._engine, metrics._engine_lock
        median = metrics.median_duration_s()
        gauge = GaugeMetricFamily(
            "longcall_operation_duration_median_seconds",
            f"Median duration of the last {MEDIAN_WINDOW} accepted operations.",
        )
        if median is not None:
            gauge.add_metric([], median)
        yield gauge
        qps = GaugeMetricFamily(
            "longcall_poll_rate_per_second",
            f"Polls sent per second, per server, over the last {QPS_WINDOW_S} s.",
            labels=["server"],
        )
        for server, value in metrics.poll_qps().items():
            qps.add_metric([server], value)
        yield qps
        if engine is None or lock is None:
            return
        with lock:
            stats = dict(engine.stats)
            polls = dict(engine.scheduler.polls_by_server)
            failures = dict(engine.scheduler.failures_by_server)
            breakers = {server: b.state for server, b in engine.scheduler.breakers.items()}
            states = collections.Counter(r.state for r in engine.records.values())
        for name, key, text in (
            ("longcall_claims", "claimed", "Operations claimed under a lease."),
            (
                "longcall_lease_takeovers",
                "takeovers",
                "Operations taken over from a worker whose lease lapsed.",
            ),
            (
                "longcall_recoveries",
                "recoveries",
                "Operations resumed by this process after another one stopped driving them.",
            ),
            (
                "longcall_stale_writes_rejected",
                "fenced",
                "Writes the database refused because another worker took the operation over.",
            ),
            ("longcall_leases_released", "released", "Operations handed back (a surplus)."),
            ("longcall_lease_lapses", "lease_lapses", "Times this worker's lease ran out."),
            (
                "longcall_workers_proven_dead",
                "proven_dead",
                "Workers of this host whose lease was ended at once: their lock was free.",
            ),
            (
                "longcall_poll_slots_missed",
                "slots_missed",
                "Polls that missed their send slot and waited for another.",
            ),
            ("longcall_requests", "requests", "Requests sent to servers."),
            ("longcall_version_conflicts", "conflicts", "Lost races, re-read and re-decided."),
        ):
            counter = CounterMetricFamily(name, text)
            counter.add_metric([], stats.get(key, 0))
            yield counter
        per_server = CounterMetricFamily(
            "longcall_polls", "Status polls sent, per server.", labels=["server"]
        )
        for server, count in polls.items():
            per_server.add_metric([server], count)
        yield per_server
        retries = CounterMetricFamily(
            "longcall_request_retries",
            "Requests that failed and are retried with backoff, per server.",
            labels=["server"],
        )
        for server, count in failures.items():
            retries.add_metric([server], count)
        yield retries
        breaker = GaugeMetricFamily(
            "longcall_breaker_state",
            "Circuit breaker per server: 0 closed, 1 half-open, 2 open.",
            labels=["server"],
        )
        for server, breaker_state in breakers.items():
            breaker.add_metric([server], _BREAKER_VALUE[breaker_state])
        yield breaker
        held = GaugeMetricFamily(
            "longcall_operations_held",
            "Open operations this process drives, by local state.",
            labels=["state"],
        )
        for state in State:
            if state in states:
                held.add_metric([state.value], states[state])
        yield held
        unknown = GaugeMetricFamily(
            "longcall_operations_unknown",
            "Held operations waiting for an operator (reconciliation required).",
        )
        unknown.add_metric([], states.get(State.RECONCILIATION_REQUIRED, 0))
        yield unknown
