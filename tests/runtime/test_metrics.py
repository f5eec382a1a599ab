"""Prometheus metrics of an executor (SPEC O3): the names an operator reads, from a real
engine's work, in the text format, and over HTTP on 127.0.0.1."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
from prometheus_client import generate_latest

from longcall.runtime.metrics import ExecutorMetrics, http_url

from .test_leases import World


def test_metrics_describe_a_workers_work(tmp_path: Path) -> None:
    """After two workers finish 10 operations, the text has completions, durations, polls
    per server, claims, breaker states and held operations, with Prometheus names."""
    world = World(tmp_path)
    world.seed(10)
    metrics = {}
    for owner in ("a", "b"):
        engine = world.worker(owner)
        metrics[owner] = ExecutorMetrics(clock=lambda: world.now)
        metrics[owner].bind(engine, threading.Lock())
        engine.on_accepted = metrics[owner].observe_accepted
    world.run(until=20.0)
    text = "".join(generate_latest(m.registry).decode() for m in metrics.values())
    accepted = [
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith('longcall_operations_accepted_total{result_kind="value"')
    ]
    assert sum(accepted) == 10
    for name in (
        "longcall_operation_duration_seconds_bucket",
        "longcall_operation_duration_median_seconds ",
        'longcall_polls_total{server="sim://a"}',
        "longcall_request_retries_total",
        "longcall_claims_total ",
        "longcall_lease_takeovers_total 0.0",
        "longcall_workers_proven_dead_total 0.0",
        "longcall_stale_writes_rejected_total 0.0",
        'longcall_breaker_state{server="sim://a"} 0.0',
        "longcall_operations_unknown 0.0",
        "longcall_cancel_acknowledgement_seconds_bucket",
    ):
        assert name in text, name
    world.close()


def test_metrics_are_served_over_http() -> None:
    """serve(0) exposes /metrics on a free 127.0.0.1 port, at the URL it tells."""
    metrics = ExecutorMetrics(clock=lambda: 0.0)
    assert metrics.url is None
    port = metrics.serve(0)
    try:
        assert metrics.url == f"http://127.0.0.1:{port}/metrics"
        reply = httpx.get(metrics.url, timeout=5.0)
    finally:
        metrics.close()
    assert reply.status_code == 200
    assert "longcall_operation_duration_seconds_count 0.0" in reply.text


def test_urls_name_an_ipv6_host_in_brackets() -> None:
    """A URL printed for a user is one a client can open: ``[::1]``, not ``::1``."""
    assert http_url("::1", 9464, "/metrics") == "http://[::1]:9464/metrics"
    assert http_url("[::1]", 80, "/mcp") == "http://[::1]:80/mcp"
    assert http_url("127.0.0.1", 8765, "/mcp") == "http://127.0.0.1:8765/mcp"
