"""What the ledger keeps for an operator beside the operations, on both backends (SPEC
O2, D1, X3, X9): refused stale writes (kept after their own transaction rolled back),
each worker's circuit breakers, the shared poll budgets' cap and use, the holders'
epochs, and failed requests per server from the history."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from longcall.core import TERMINAL_STATES, ConflictError, State, handle
from longcall.core import events as e
from longcall.core.retry import BreakerState, FailureKind, RequestKind
from longcall.ledger import (
    AcceptedFigures,
    BreakerRow,
    BudgetUse,
    Ledger,
    OperationQuery,
)
from longcall.ledger import postgres as pg_backend
from longcall.ledger import sqlite as sqlite_backend
from longcall.ledger.base import REFUSALS_KEPT_PER_NODE, WORKER
from longcall.ledger.budget import USE_MINUTE_S
from longcall.runtime.step import apply_event, commit
from longcall.testing.sample import fill

from .conftest import insert_old_row, pg_schema
from .test_contract import fresh
from .test_leases import LEASE_S, claimed

NOW = 1_800_000_000.0
TERMINAL_KINDS = ("accepted_ok", "accepted_empty", "tool_error", "protocol_error", "cancelled")
SOON = "0000"
"""A ledger stamp before every stamp the ledger writes (a window that takes all)."""


def test_a_lost_version_race_is_kept_as_refused(twins: tuple[Ledger, Ledger]) -> None:
    """An unowned write drawn from an old version is refused and kept as a version
    conflict (no holder); a write that went through leaves no refusal."""
    a, b = twins
    record = a.create(fresh())
    moved = apply_event(a, record, e.SubmitAcknowledged(operation_id="op-1"), now=11.0, jitter=0.5)
    assert b.refused_writes("node-1") == []
    late = handle(record, e.SubmitOutcomeLost(reason="timeout"), now=12.0, jitter=0.5)
    with pytest.raises(ConflictError):
        commit(b, record, late, event="SubmitOutcomeLost")
    (refusal,) = a.refused_writes("node-1")
    assert (refusal.event, refusal.owner, refusal.reason) == (
        "SubmitOutcomeLost",
        None,
        "version_conflict",
    )
    assert refusal.expected_version == record.version
    assert a.get("node-1") == moved.record


def test_refusals_kept_per_node_are_bounded(ledger: Ledger) -> None:
    """A writer that keeps trying a stale version leaves at most the bound's rows."""
    record = ledger.create(fresh())
    apply_event(ledger, record, e.SubmitAcknowledged(operation_id="op-1"), now=11.0, jitter=0.5)
    late = handle(record, e.SubmitOutcomeLost(reason="timeout"), now=12.0, jitter=0.5)
    for _ in range(REFUSALS_KEPT_PER_NODE + 5):
        with pytest.raises(ConflictError):
            commit(ledger, record, late, event="SubmitOutcomeLost")
    assert len(ledger.refused_writes("node-1")) == REFUSALS_KEPT_PER_NODE


def test_breakers_are_kept_per_holder_until_it_retires(ledger: Ledger) -> None:
    """A breaker row is replaced as it opens and closes; only registered holders'
    breakers are read; a retiring worker's go with it."""
    ledger.register_worker("w1", kind=WORKER, now=100.0, lease_s=LEASE_S)
    ledger.register_worker("w2", kind=WORKER, now=100.0, lease_s=LEASE_S)
    opened = BreakerRow(server="http://s/mcp", owner="w1", state=BreakerState.OPEN,
                        open_until=130.0, failures=5, last_error="unavailable: 503")  # fmt: skip
    ledger.put_breaker(opened)
    ledger.put_breaker(BreakerRow(server="http://t/mcp", owner="w2", state=BreakerState.OPEN,
                                  open_until=140.0, failures=5))  # fmt: skip
    ledger.put_breaker(BreakerRow(server="http://s/mcp", owner="gone", state=BreakerState.OPEN,
                                  open_until=140.0, failures=5))  # fmt: skip
    rows = ledger.breakers()
    assert [(r.server, r.owner, r.state, r.open_until) for r in rows] == [
        ("http://s/mcp", "w1", BreakerState.OPEN, 130.0),
        ("http://t/mcp", "w2", BreakerState.OPEN, 140.0),
    ]
    assert rows[0].last_error == "unavailable: 503"
    assert rows[0].changed_at_utc
    ledger.put_breaker(BreakerRow(server="http://s/mcp", owner="w1", state=BreakerState.CLOSED,
                                  open_until=None, failures=0))  # fmt: skip
    assert ledger.breakers()[0].state is BreakerState.CLOSED
    ledger.retire_worker("w2")
    assert [r.owner for r in ledger.breakers()] == ["w1"]


def test_the_poll_budget_keeps_its_cap_and_use_per_minute(ledger: Ledger) -> None:
    """Each grant counts its slots in its minute; the row holds the last grant's cap;
    the minute before is read as the last whole minute."""
    minute = 1_000 * USE_MINUTE_S
    assert ledger.poll_budgets() == []
    first = ledger.take_poll_slots("s", now=minute + 1.0, count=3, qps_max=4.0)
    second = ledger.take_poll_slots("s", now=minute + 30.0, count=2, qps_max=4.0)
    third = ledger.take_poll_slots("s", now=minute + USE_MINUTE_S + 1.0, count=1, qps_max=8.0)
    (row,) = ledger.poll_budgets()
    assert row.qps_max == 8.0
    assert row.granted_at_utc
    expected_last = first.count + second.count
    assert row.use == BudgetUse(minute=1_001, this_minute=third.count, last_minute=expected_last)
    assert row.use.seen_at(minute + USE_MINUTE_S + 2.0) == (expected_last, third.count)
    assert row.use.seen_at(minute + 2 * USE_MINUTE_S) == (third.count, 0)
    assert row.use.seen_at(minute + 5 * USE_MINUTE_S) == (0, 0)


def test_holdings_name_what_each_holder_took_over(ledger: Ledger) -> None:
    """Per holder: how many open operations it holds, how many of them at an epoch of
    2 or more, and the highest; an accepted operation is held by nobody."""
    for n in range(4):
        ledger.create(fresh(f"node-{n}", submission_key=f"key-{n}"))
    ledger.register_worker("w1", kind=WORKER, now=100.0, lease_s=LEASE_S)
    ledger.claim("w1", now=100.0, limit=4, decide=claimed)
    ledger.register_worker("w2", kind=WORKER, now=200.0, lease_s=LEASE_S)
    ledger.claim("w2", now=200.0, limit=2, decide=claimed)
    ledger.register_worker("w3", kind=WORKER, now=300.0, lease_s=LEASE_S)
    ledger.claim("w3", now=300.0, limit=1, decide=claimed)
    holdings = [(h.owner, h.operations, h.taken_over, h.epoch_max) for h in ledger.holdings()]
    assert holdings == [("w1", 2, 0, None), ("w2", 1, 1, 2), ("w3", 1, 1, 3)]


def test_failed_requests_are_counted_per_server(ledger: Ledger) -> None:
    """Failed requests since a stamp, per server: retried, or given up on (not
    retryable: the operation went to an operator)."""
    failed = e.RequestFailed(request=RequestKind.POLL, failure=FailureKind.UNAVAILABLE)
    refused = e.RequestFailed(request=RequestKind.POLL, failure=FailureKind.FORBIDDEN)
    for node, server, events in (
        ("a", "http://a/mcp", (failed, failed)),
        ("b", "http://a/mcp", (failed, refused)),
        ("c", "http://b/mcp", ()),
    ):
        record = ledger.create(fresh(node, server=server, submission_key=f"key-{node}"))
        record = apply_event(
            ledger, record, e.SubmitAcknowledged(operation_id=f"op-{node}"), now=11.0, jitter=0.5
        ).record
        for n, event in enumerate(events):
            record = apply_event(ledger, record, event, now=12.0 + n, jitter=0.5).record
    assert ledger.get("b").state is State.RECONCILIATION_REQUIRED
    (a,) = ledger.retries_by_server(since_utc=SOON)
    assert (a.server, a.retried, a.given_up) == ("http://a/mcp", 3, 1)
    assert ledger.retries_by_server(since_utc="9999") == []


def _asking(node: str, deadline: float | None) -> Any:
    """A record waiting for a person's answer to key k, due at ``deadline``."""
    return dataclasses.replace(
        fresh(node, submission_key=f"key-{node}"),
        state=State.INPUT_REQUIRED,
        input_round=1,
        input_keys_pending=("k",),
        input_deadline_at=deadline,
    )


def _person_deadlines_filled(open_at: Callable[[], Ledger], insert: Callable[[Any], None]) -> None:
    """Rows written before migration 8 that wait for a person are found by the inbox's
    read, nearest deadline first and none last; the others are not."""
    insert(_asking("none", None))
    insert(_asking("later", 2_000.0))
    insert(_asking("sooner", 1_000.0))
    insert(dataclasses.replace(fresh("answered", submission_key="key-answered"),
                               state=State.INPUT_REQUIRED))  # fmt: skip
    with open_at() as ledger:
        query = OperationQuery(waiting="person", now=1.0, nearest_input_deadline_first=True)
        found = [row.record.call_node_id for row in ledger.browse(query)]
        assert found == ["sooner", "later", "none"]


def test_migration_8_fills_person_deadlines_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"

    class V7(sqlite_backend.SQLiteLedger):
        migrations = sqlite_backend.MIGRATIONS[:7]

    V7(path).close()
    _person_deadlines_filled(
        lambda: sqlite_backend.SQLiteLedger(path), lambda r: insert_old_row(path, r, open=1)
    )


def test_migration_8_fills_person_deadlines_postgres() -> None:
    with pg_schema() as (dsn, schema):

        class V7(pg_backend.PostgresLedger):
            migrations = pg_backend.MIGRATIONS[:7]

        V7(dsn, schema=schema).close()
        _person_deadlines_filled(
            lambda: pg_backend.PostgresLedger(dsn, schema=schema),
            lambda r: insert_old_row((dsn, schema), r, open=1),
        )


def test_the_inbox_order_is_only_for_a_persons_waits() -> None:
    """Ordering by the input deadline is refused where it has no meaning."""
    with pytest.raises(ValueError, match="waiting='person'"):
        OperationQuery(nearest_input_deadline_first=True)
    with pytest.raises(ValueError, match="no after_seq"):
        OperationQuery(waiting="person", nearest_input_deadline_first=True, after_seq=5)


def test_recent_accepted_reads_the_figures_of_each_record(ledger: Ledger) -> None:
    """The health figures' fields, read without decoding whole records, are the
    records' own, newest accepted first, at most the limit."""
    nodes = fill(ledger, now=NOW)
    fill(ledger, now=NOW + 1_000.0, prefix="b-")
    records = {r.call_node_id: r for r in ledger.list_by_state(*TERMINAL_STATES)}
    figures = ledger.recent_accepted(limit=len(records))
    newest_first = [r.call_node_id for r in reversed(ledger.list_by_state(*TERMINAL_STATES))]
    assert len(figures) == len(newest_first) == 2 * len(TERMINAL_KINDS)
    for node, figure in zip(newest_first, figures, strict=True):
        record = records[node]
        assert figure == AcceptedFigures(
            state=record.state,
            result_kind=record.result_kind,
            server_status=record.server_status,
            created_at=record.created_at,
            updated_at=record.updated_at,
            cancel_requested_at=record.cancel_requested_at,
            cancel_acknowledged_at=record.cancel_acknowledged_at,
        )
    assert set(nodes) >= set(TERMINAL_KINDS)
    assert any(f.cancel_acknowledged_at is not None for f in figures)
    assert {f.state for f in figures} == set(TERMINAL_STATES)
    assert len(ledger.recent_accepted(limit=3)) == 3
