"""Every refusal of an acceptance whose record and receipt agree with each other (the
case SQLite's guarded write tries first) raises exactly the error the checked path
raises: the same type and the same message, whichever backend (L5)."""

from __future__ import annotations

import dataclasses

import pytest

from longcall.core import OperationRecord, ServerStatus, TerminalReceipt
from longcall.errors import CorruptRow
from longcall.ledger import Ledger
from longcall.ledger.base import check_acceptance

from .test_contract import PAYLOAD, fetched, to_fetching


def _refusal(row: OperationRecord, record: OperationRecord, expected_version: int) -> str:
    """What check_acceptance says of this acceptance against ``row``."""
    receipt = TerminalReceipt.for_record(record)
    with pytest.raises(Exception) as raised:
        check_acceptance(row, record, receipt, expected_version, PAYLOAD)
    return f"{type(raised.value).__name__}: {raised.value}"


@pytest.mark.parametrize(
    "change",
    [
        {"execution_epoch": 7},
        {"cancel_generation": 3},
        {"operation_id": "op-other"},
        {"operation_id": None},
        {"server_status": ServerStatus.FAILED},
        {"submission_key": "sk-other"},
        {"request_digest": "sha256:other"},
        {"tool_descriptor_digest": "sha256:other-tool"},
        {"stale": True},
    ],
)
def test_refusal_is_the_checked_one(ledger: Ledger, change: dict[str, object]) -> None:
    r = to_fetching(ledger)
    accepted, _ = fetched(r)
    expected_version = r.version
    if change == {"stale": True}:
        expected_version -= 1
        record = dataclasses.replace(accepted, version=expected_version + 1)
    else:
        record = dataclasses.replace(accepted, **change)  # type: ignore[arg-type]
    wanted = _refusal(ledger.get("node-1"), record, expected_version)
    with pytest.raises(Exception) as raised:
        ledger.accept_terminal(
            record,
            TerminalReceipt.for_record(record),
            expected_version=expected_version,
            result_payload=PAYLOAD,
            event="x",
        )
    assert f"{type(raised.value).__name__}: {raised.value}" == wanted
    assert ledger.get("node-1") == r
    assert ledger.receipts() == []


def test_second_acceptance_and_unknown_node(ledger: Ledger) -> None:
    r = to_fetching(ledger)
    accepted, receipt = fetched(r)
    ledger.accept_terminal(
        accepted, receipt, expected_version=r.version, result_payload=PAYLOAD, event="x"
    )
    again = dataclasses.replace(accepted, version=accepted.version + 1)
    wanted = _refusal(ledger.get("node-1"), again, accepted.version)
    with pytest.raises(Exception) as raised:
        ledger.accept_terminal(
            again,
            TerminalReceipt.for_record(again),
            expected_version=accepted.version,
            result_payload=PAYLOAD,
            event="x",
        )
    assert f"{type(raised.value).__name__}: {raised.value}" == wanted
    unknown = dataclasses.replace(accepted, call_node_id="nope")
    with pytest.raises(Exception, match="no operation is recorded for call node 'nope'"):
        ledger.accept_terminal(
            unknown,
            TerminalReceipt.for_record(unknown),
            expected_version=r.version,
            result_payload=PAYLOAD,
            event="x",
        )


def test_a_damaged_stored_record_is_reported_as_damage(ledger: Ledger) -> None:
    """An acceptance against a stored record that is no longer JSON raises CorruptRow,
    as the checked path always did, not an unavailable ledger, and writes nothing."""
    r = to_fetching(ledger)
    accepted, receipt = fetched(r)
    with ledger._write() as conn:  # type: ignore[attr-defined]
        conn.execute("UPDATE operations SET record_json = '{' WHERE call_node_id = 'node-1'")
    with pytest.raises(CorruptRow, match="record JSON is damaged"):
        ledger.accept_terminal(
            accepted, receipt, expected_version=r.version, result_payload=PAYLOAD, event="x"
        )
    assert ledger.receipts() == []
