"""Adapter versions side by side and shadow operations in the ledger (SPEC R1-R3, P6),
on both backends: claims and the census filtered by (protocol, adapter version), a
rollback's rebinding seen by the filter, a shadow's acceptance without an outbox row,
and migration 6 filling the version columns of older rows."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from longcall.core import OperationRecord, ServerStatus
from longcall.core import events as e
from longcall.ledger import WORKER, Ledger, ShadowComparison
from longcall.ledger import postgres as pg_backend
from longcall.ledger import sqlite as sqlite_backend

from .conftest import insert_old_row, pg_schema
from .test_contract import PAYLOAD, fetched, fresh, step, to_fetching

V1 = frozenset({("test", "1")})
V2 = frozenset({("test", "2")})


def claimed(record: OperationRecord) -> OperationRecord:
    return dataclasses.replace(
        record, execution_epoch=record.execution_epoch + 1, version=record.version + 1
    )


def test_claims_and_census_take_only_the_versions_asked_for(ledger: Ledger) -> None:
    """A worker of version 1 sees, counts and claims only version 1's operations; a
    worker that names no versions counts as a worker of every version."""
    for node, version in (("a", "1"), ("b", "2"), ("c", "1"), ("d", "2")):
        ledger.create(fresh(node, adapter_version=version))
    ledger.register_worker("w1", kind=WORKER, now=100.0, lease_s=30.0, versions=V1)
    ledger.register_worker("w2", kind=WORKER, now=100.0, lease_s=30.0, versions=V2)
    census = ledger.census("w1", now=100.0, versions=V1)
    assert (census.open_operations, census.live_workers, census.claimable) == (2, 1, 2)
    ledger.register_worker("any", kind=WORKER, now=100.0, lease_s=30.0)
    assert ledger.census("w1", now=100.0, versions=V1).live_workers == 2
    assert ledger.census("any", now=100.0).open_operations == 4
    assert ledger.claim("w1", now=100.0, limit=10, decide=claimed, versions=frozenset()) == []
    mine = ledger.claim("w1", now=100.0, limit=10, decide=claimed, versions=V1)
    assert [c.record.call_node_id for c in mine] == ["a", "c"]
    theirs = ledger.claim("w2", now=100.0, limit=10, decide=claimed, versions=V2)
    assert [c.record.call_node_id for c in theirs] == ["b", "d"]
    assert ledger.census("w1", now=100.0, versions=V1).held == 2


def test_census_by_version_is_each_versions_census_read_at_once(ledger: Ledger) -> None:
    """One read gives, per version, what ``census`` gives for that version alone: its
    open operations, the live workers that run it (a worker naming none runs all), what
    the asker holds, and as claimable the unowned and a lapsed worker's; a version with
    nothing open counts zero."""
    for node, version in (("a", "1"), ("b", "2"), ("c", "1"), ("d", "2"), ("e", "3")):
        ledger.create(fresh(node, adapter_version=version))
    ledger.register_worker("gone", kind=WORKER, now=90.0, lease_s=5.0, versions=V2)
    assert len(ledger.claim("gone", now=90.0, limit=1, decide=claimed, versions=V2)) == 1
    ledger.register_worker("w1", kind=WORKER, now=100.0, lease_s=30.0, versions=V1)
    assert len(ledger.claim("w1", now=100.0, limit=1, decide=claimed, versions=V1)) == 1
    ledger.register_worker("any", kind=WORKER, now=100.0, lease_s=30.0)
    wanted = V1 | V2 | frozenset({("test", "9")})
    by_version = ledger.census_by_version("w1", now=100.0, versions=wanted)
    assert set(by_version) == wanted
    for pair in wanted:
        assert by_version[pair] == ledger.census("w1", now=100.0, versions=frozenset({pair}))
    one, two = by_version[("test", "1")], by_version[("test", "2")]
    assert (one.open_operations, one.live_workers, one.held, one.claimable) == (2, 2, 1, 1)
    assert (two.open_operations, two.live_workers, two.held, two.claimable) == (2, 1, 0, 2)
    assert by_version[("test", "9")].open_operations == 0


def test_a_rebound_operation_is_claimable_only_by_its_new_version(ledger: Ledger) -> None:
    """R3: after rebinding 2 -> 1, the filter follows the record's adapter version."""
    ledger.create(fresh("r", adapter_version="2"))
    ledger.register_worker("w2", kind=WORKER, now=100.0, lease_s=30.0, versions=V2)
    (held,) = ledger.claim("w2", now=100.0, limit=1, decide=claimed, versions=V2)
    (rebound,) = ledger.rebind_open(
        "test",
        "2",
        decide=lambda r: dataclasses.replace(claimed(r), adapter_version="1"),
    )
    assert rebound.execution_epoch == held.record.execution_epoch + 1
    assert ledger.claim("w2", now=100.0, limit=1, decide=claimed, versions=V2) == []
    ledger.register_worker("w1", kind=WORKER, now=100.0, lease_s=30.0, versions=V1)
    (taken,) = ledger.claim("w1", now=100.0, limit=1, decide=claimed, versions=V1)
    assert (taken.record.call_node_id, taken.record.adapter_version) == ("r", "1")
    assert ledger.rebind_open("test", "2", decide=claimed) == []


def test_a_shadow_is_accepted_without_an_outbox_row(ledger: Ledger) -> None:
    """R1: a shadow's acceptance writes its receipt and result, and nothing downstream;
    its comparison is recorded once."""
    primary = to_fetching(ledger, "p")
    shadow_record = ledger.create(fresh("p~shadow-2", adapter_version="2", shadow_of="p"))
    shadow_record = to_fetching_from(ledger, shadow_record)
    for record in (primary, shadow_record):
        accepted, receipt = fetched(record)
        ledger.accept_terminal(
            accepted, receipt, expected_version=record.version, result_payload=PAYLOAD, event="x"
        )
    assert [row.call_node_id for row in ledger.outbox()] == ["p"]
    assert {r.call_node_id for r in ledger.receipts()} == {"p", "p~shadow-2"}
    assert ledger.result_payload("p~shadow-2") == PAYLOAD
    assert ledger.shadow_pairs() == [("p~shadow-2", "p")]
    comparison = ShadowComparison(
        shadow_node="p~shadow-2",
        primary_node="p",
        protocol="test",
        adapter_version="2",
        verdict="match",
    )
    assert ledger.put_shadow_comparison(comparison)
    assert not ledger.put_shadow_comparison(dataclasses.replace(comparison, verdict="differ"))
    (stored,) = ledger.shadow_comparisons()
    assert (stored.verdict, stored.primary_node) == ("match", "p")
    assert stored.compared_at_utc


def to_fetching_from(ledger: Ledger, record: OperationRecord) -> OperationRecord:
    node = record.call_node_id
    record = step(ledger, record, e.SubmitAcknowledged(operation_id=f"op-{node}"))
    record = step(ledger, record, e.TerminalObserved(status=ServerStatus.COMPLETED))
    return step(ledger, record, e.ResultFetchStarted())


def _filled_from_records(open_at: Callable[[], Ledger], insert: Callable[[Any], None]) -> None:
    """Rows written before migration 6 gain their protocol and adapter version from
    their records, so the version filter sees them."""
    insert(fresh("old-1", adapter_version="1"))
    insert(fresh("old-2", adapter_version="2"))
    with open_at() as ledger:
        assert ledger.census("w", now=1.0, versions=V2).open_operations == 1
        ledger.register_worker("w", kind=WORKER, now=1.0, lease_s=5.0, versions=V2)
        (taken,) = ledger.claim("w", now=1.0, limit=5, decide=claimed, versions=V2)
        assert taken.record.call_node_id == "old-2"
        assert ledger.shadow_pairs() == []


def test_migration_6_fills_version_columns_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"

    class V5(sqlite_backend.SQLiteLedger):
        migrations = sqlite_backend.MIGRATIONS[:5]

    V5(path).close()

    def insert(record: Any) -> None:
        insert_old_row(path, record, open=1)

    _filled_from_records(lambda: sqlite_backend.SQLiteLedger(path), insert)


def test_migration_6_fills_version_columns_postgres() -> None:
    with pg_schema() as (dsn, schema):

        class V5(pg_backend.PostgresLedger):
            migrations = pg_backend.MIGRATIONS[:5]

        V5(dsn, schema=schema).close()

        def insert(record: Any) -> None:
            insert_old_row((dsn, schema), record, open=1)

        _filled_from_records(lambda: pg_backend.PostgresLedger(dsn, schema=schema), insert)
