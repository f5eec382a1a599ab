"""Prometheus metrics of one gateway process (O3): what hosts met.

Owns :class:`GatewayMetrics`: early returns (a host got a handle, not yet the result),
retries attached (a same call joined the open one instead of running the upstream
again), handles refused (mistyped, truncated, invented, or another principal's), and
the open handles (host calls not ended), on a registry of its own served at
``/metrics`` (``--metrics-port``). Must not: decide anything.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import Counter, Gauge

from longcall.runtime.metrics import Exposition


class GatewayMetrics(Exposition):
    """The gateway's counters; the host-call path bumps them."""

    def __init__(self, *, clock: Callable[[], float], open_handles: Callable[[], int]) -> None:
        super().__init__(clock=clock)
        self.early_returns = Counter(
            "longcall_gateway_early_returns",
            "Host calls answered with a handle because the upstream had not finished"
            " within the early-return window.",
            registry=self.registry,
        )
        self.retries_attached = Counter(
            "longcall_gateway_retries_attached",
            "Host calls that were the same as an open one and joined it (the upstream did"
            " not run again).",
            registry=self.registry,
        )
        self.handles_refused = Counter(
            "longcall_gateway_handles_refused",
            "Handles refused: mistyped, cut short, invented or another caller's.",
            registry=self.registry,
        )
        self.open_handles = Gauge(
            "longcall_gateway_open_handles",
            "Host calls this gateway process drives that have not ended.",
            registry=self.registry,
        )
        self.open_handles.set_function(lambda: float(open_handles()))
