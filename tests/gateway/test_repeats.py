"""The same-call rule with the gateway's downtimes (G1): only uptime counts toward its
windows; a gateway start finds and records the downtime it ends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from longcall.gateway.hostcalls import (
    GatewayOptions,
    downtime_began,
    note_start,
    note_stop,
    recent_downtimes,
)
from longcall.gateway.repeats import joins, last_delivery, uptime_since
from longcall.ledger import CLIENT, WORKER, Downtime, SQLiteLedger

LEASE_S, HEARTBEAT_S = 30.0, 10.0
OPTIONS = GatewayOptions()


def start(ledger: SQLiteLedger, now: float) -> tuple[float, float] | None:
    """A gateway process starting at ``now`` (a 30 s lease renewed every 10 s)."""
    return note_start(ledger, now=now, lease_s=LEASE_S, heartbeat_s=HEARTBEAT_S, options=OPTIONS)


def ended_joins(
    now: float, *, delivered_at: float | None, downtimes: list[tuple[float, float]]
) -> bool:
    """Whether a same call at ``now`` joins a call that ended at 100 s."""
    return joins(
        is_open=False,
        ended_at=100.0,
        delivered_at=delivered_at,
        ever_delivered=delivered_at is not None,
        now=now,
        downtimes=downtimes,
    )


def test_uptime_is_the_elapsed_time_without_the_downtimes_overlap() -> None:
    assert uptime_since(100.0, 400.0) == 300.0
    assert uptime_since(100.0, 400.0, [(150.0, 250.0)]) == 200.0
    # Cut at both ends, and overlapping spans are counted once.
    assert uptime_since(100.0, 400.0, [(50.0, 120.0), (110.0, 130.0), (390.0, 500.0)]) == 260.0
    assert uptime_since(100.0, 400.0, [(0.0, 90.0), (410.0, 420.0)]) == 300.0


def test_a_retry_beyond_the_grace_in_wall_time_joins_when_the_gateway_was_down() -> None:
    """The host world's seed 8507569210774: given at 290.7 s, down 522–600 s, back at 631 s."""
    assert not ended_joins(631.0, delivered_at=290.7, downtimes=[])
    assert ended_joins(631.0, delivered_at=290.7, downtimes=[(522.0, 600.0)])
    # Past the grace in uptime too: a deliberate repeat.
    assert not ended_joins(680.0, delivered_at=290.7, downtimes=[(522.0, 600.0)])


def test_an_undelivered_outcome_is_joined_for_the_window_of_uptime() -> None:
    assert not ended_joins(2_000.0, delivered_at=None, downtimes=[])
    assert ended_joins(2_000.0, delivered_at=None, downtimes=[(200.0, 1_600.0)])
    assert not ended_joins(2_100.0, delivered_at=None, downtimes=[(200.0, 1_600.0)])


def test_the_last_delivery_is_found_in_older_periods_across_a_downtime() -> None:
    marked = {0}  # given in period 0 (0–300 s)
    assert last_delivery(marked.__contains__, 631.0) is None
    assert last_delivery(marked.__contains__, 631.0, downtimes=[(522.0, 600.0)]) == 300.0
    # Without downtimes, only this period and the one before are read.
    asked: list[int] = []
    last_delivery(lambda period: asked.append(period) or False, 631.0)
    assert asked == [2, 1]


def test_a_downtime_begins_at_the_last_sign_of_life_unless_it_is_within_a_heartbeat() -> None:
    assert downtime_began([], now=1_000.0, heartbeat_s=HEARTBEAT_S) is None
    assert downtime_began([500.0, 700.0], now=1_000.0, heartbeat_s=HEARTBEAT_S) == 700.0
    assert downtime_began([500.0, 995.0], now=1_000.0, heartbeat_s=HEARTBEAT_S) is None


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[SQLiteLedger]:
    with SQLiteLedger(tmp_path / "gateway.db") as store:
        yield store


def test_a_start_records_the_downtime_since_the_last_renewal(ledger: SQLiteLedger) -> None:
    assert start(ledger, 100.0) is None  # the first start
    ledger.register_worker("gw-1", kind=WORKER, now=100.0, lease_s=LEASE_S)
    ledger.renew_worker("gw-1", now=400.0, lease_s=LEASE_S)
    ledger.register_worker("a-client", kind=CLIENT, now=800.0, lease_s=LEASE_S)
    assert start(ledger, 900.0) == (400.0, 900.0)
    ledger.register_worker("gw-2", kind=WORKER, now=900.0, lease_s=LEASE_S)
    # A second crash does not forget the first.
    assert start(ledger, 1_000.0) == (900.0, 1_000.0)
    assert recent_downtimes(ledger, now=1_000.0, options=OPTIONS) == [
        (400.0, 900.0),
        (900.0, 1_000.0),
    ]


def test_a_start_while_another_gateway_is_alive_is_no_downtime(ledger: SQLiteLedger) -> None:
    ledger.register_worker("gw-1", kind=WORKER, now=100.0, lease_s=LEASE_S)
    ledger.renew_worker("gw-1", now=395.0, lease_s=LEASE_S)
    assert start(ledger, 400.0) is None
    assert ledger.downtimes(ending_after=0.0) == []


def test_a_clean_stop_is_where_the_next_starts_downtime_begins(ledger: SQLiteLedger) -> None:
    """A clean stop forgets its lease row: the stop itself is recorded instead."""
    ledger.register_worker("gw-1", kind=WORKER, now=100.0, lease_s=LEASE_S)
    note_stop(ledger, now=150.0)
    ledger.retire_worker("gw-1")
    assert recent_downtimes(ledger, now=160.0, options=OPTIONS) == []  # not over yet
    assert start(ledger, 1_000.0) == (150.0, 1_000.0)
    assert ledger.downtimes(ending_after=0.0) == [Downtime(started_at=150.0, ended_at=1_000.0)]
    # Downtimes that can no longer make a call join are forgotten by a later record.
    ledger.register_worker("gw-2", kind=WORKER, now=1_000.0, lease_s=LEASE_S)
    later = 1_000.0 + OPTIONS.longest_window_s + 100.0
    assert start(ledger, later) == (1_000.0, later)
    assert ledger.downtimes(ending_after=0.0) == [Downtime(started_at=1_000.0, ended_at=later)]
