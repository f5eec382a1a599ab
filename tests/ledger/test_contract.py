"""The ledger contract (SPEC L4, L5, L6): every backend must pass all of it."""

from __future__ import annotations

import dataclasses

import pytest

from longcall.core import (
    AcceptanceMismatch,
    ConflictError,
    DigestMismatch,
    LocalProtocolError,
    OperationRecord,
    ServerStatus,
    State,
    TerminalReceipt,
    UnknownCallNode,
    handle,
    new_operation,
)
from longcall.core import events as e
from longcall.core.commands import AcceptTerminal
from longcall.core.keys import canonical_json, digest_bytes, request_digest
from longcall.core.record import ResultKind
from longcall.ledger import DuplicateCallNode, Ledger
from longcall.runtime.step import apply_event

PAYLOAD = canonical_json({"rows": [1, 2]})


def fresh(node: str = "node-1", **overrides: object) -> OperationRecord:
    record = new_operation(
        call_node_id=node,
        request_digest=request_digest("t", {"a": 1}),
        tool_name="t",
        tool_descriptor_digest="sha256:tool",
        principal="alice",
        server="http://127.0.0.1:1/mcp",
        protocol="test",
        adapter_version="1",
        now=10.0,
        submission_lookup=True,
    ).record
    return dataclasses.replace(record, **overrides)  # type: ignore[arg-type]


def step(ledger: Ledger, record: OperationRecord, event: e.Event, **kw: object) -> OperationRecord:
    return apply_event(ledger, record, event, now=record.updated_at + 1, jitter=0.5, **kw).record  # type: ignore[arg-type]


def to_fetching(ledger: Ledger, node: str = "node-1") -> OperationRecord:
    """Drive a stored record to FETCHING_RESULT (completed observed)."""
    r = ledger.create(fresh(node))
    r = step(ledger, r, e.SubmitAcknowledged(operation_id=f"op-{node}", poll_interval_s=1.0))
    r = step(ledger, r, e.TerminalObserved(status=ServerStatus.COMPLETED))
    return step(ledger, r, e.ResultFetchStarted())


def fetched(record: OperationRecord, payload: bytes = PAYLOAD):
    """The transition that accepts ``record``'s result."""
    event = e.ResultFetched(
        status=ServerStatus.COMPLETED,
        result_kind=ResultKind.VALUE,
        result_digest=digest_bytes(payload),
    )
    transition = handle(record, event, now=record.updated_at + 1, jitter=0.5)
    (accept,) = [c for c in transition.commands if isinstance(c, AcceptTerminal)]
    return transition.record, accept.receipt


def test_create_and_lookups(ledger: Ledger) -> None:
    """A created record is found by call node, operation id, submission key and state."""
    r = ledger.create(fresh())
    assert ledger.get("node-1") == r
    assert ledger.find_by_submission_key(r.submission_key) == r
    r = step(ledger, r, e.SubmitAcknowledged(operation_id="op-1"))
    assert ledger.find_by_operation_id("op-1") == [r]
    assert ledger.find_by_operation_id("op-1", server=r.server) == [r]
    assert ledger.find_by_operation_id("op-1", server="elsewhere") == []
    assert ledger.list_by_state(State.WORKING) == [r]
    assert ledger.list_by_state(State.SUBMITTING) == []
    assert ledger.list_by_state() == [r]


def test_unknown_call_node_is_typed(ledger: Ledger) -> None:
    """get() of an unknown node raises UnknownCallNode; find() returns None."""
    with pytest.raises(UnknownCallNode, match="nope"):
        ledger.get("nope")
    assert ledger.find("nope") is None
    with pytest.raises(UnknownCallNode):
        ledger.update(dataclasses.replace(fresh("nope"), version=2), expected_version=1, event="x")


def test_duplicate_call_node_is_refused(ledger: Ledger) -> None:
    """A second create for one call node raises and leaves the first untouched."""
    first = ledger.create(fresh())
    with pytest.raises(DuplicateCallNode):
        ledger.create(fresh(request_digest="sha256:other"))
    assert ledger.get("node-1") == first


def test_update_is_compare_and_set(ledger: Ledger) -> None:
    """An update against a stale version raises ConflictError and writes nothing (L4)."""
    r = ledger.create(fresh())
    moved = step(ledger, r, e.SubmitAcknowledged(operation_id="op-1"))
    stale = handle(r, e.SubmitOutcomeLost(reason="x"), now=12.0, jitter=0.5).record
    with pytest.raises(ConflictError):
        ledger.update(stale, expected_version=r.version, event="SubmitOutcomeLost")
    assert ledger.get("node-1") == moved
    assert [h.version for h in ledger.history("node-1")] == [1, 2]


def test_update_needs_next_version(ledger: Ledger) -> None:
    """A record whose version is not expected+1 is refused."""
    r = ledger.create(fresh())
    with pytest.raises(LocalProtocolError):
        ledger.update(dataclasses.replace(r, version=5), expected_version=1, event="x")
    assert ledger.get("node-1") == r


def test_update_cannot_enter_terminal_or_change_identity(ledger: Ledger) -> None:
    """Terminal states are entered only by accept_terminal; identity fields never change."""
    r = to_fetching(ledger)
    accepted, _ = fetched(r)
    with pytest.raises(LocalProtocolError, match="accept_terminal"):
        ledger.update(accepted, expected_version=r.version, event="x")
    changed = dataclasses.replace(r, version=r.version + 1, request_digest="sha256:x")
    with pytest.raises(AcceptanceMismatch):
        ledger.update(changed, expected_version=r.version, event="x")
    assert ledger.get("node-1") == r


def test_accept_terminal_writes_receipt_result_outbox_once(ledger: Ledger) -> None:
    """accept_terminal stores the result, one receipt and one outbox row pointing at it (L5, L6)."""
    r = to_fetching(ledger)
    accepted, receipt = fetched(r)
    receipt_id = ledger.accept_terminal(
        accepted, receipt, expected_version=r.version, result_payload=PAYLOAD, event="ResultFetched"
    )
    assert ledger.get("node-1").state is State.ACCEPTED
    assert ledger.receipt("node-1") == receipt
    assert ledger.receipts() == [receipt]
    assert ledger.result_payload("node-1") == PAYLOAD
    (row,) = ledger.outbox()
    assert (row.receipt_id, row.call_node_id, row.delivered_at_utc) == (receipt_id, "node-1", None)
    with pytest.raises(ConflictError):
        ledger.accept_terminal(
            accepted, receipt, expected_version=r.version, result_payload=PAYLOAD, event="again"
        )
    assert len(ledger.receipts()) == 1
    assert len(ledger.outbox()) == 1


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("request_digest", "sha256:other"),
        ("operation_id", "op-other"),
        ("tool_descriptor_digest", "sha256:other-tool"),
        ("execution_epoch", 7),
        ("cancel_generation", 3),
        ("terminal_status", ServerStatus.FAILED),
        ("call_node_id", "node-2"),
    ],
)
def test_accept_terminal_checks_every_matching_field(
    ledger: Ledger, field: str, value: object
) -> None:
    """A receipt differing from the row in any L5 field is refused and nothing is written."""
    r = to_fetching(ledger)
    ledger.create(fresh("node-2"))
    accepted, receipt = fetched(r)
    forged_record = accepted
    if field in ("execution_epoch", "cancel_generation", "operation_id"):
        forged_record = dataclasses.replace(accepted, **{field: value})  # type: ignore[arg-type]
    forged = dataclasses.replace(receipt, **{field: value})  # type: ignore[arg-type]
    if field in ("execution_epoch", "cancel_generation", "operation_id"):
        forged = TerminalReceipt.for_record(forged_record)
    with pytest.raises((AcceptanceMismatch, UnknownCallNode)):
        ledger.accept_terminal(
            forged_record, forged, expected_version=r.version, result_payload=PAYLOAD, event="x"
        )
    assert ledger.get("node-1") == r
    assert ledger.receipts() == []
    assert ledger.outbox() == []


def test_accept_terminal_checks_result_digest(ledger: Ledger) -> None:
    """A payload that does not hash to the receipt's digest is refused (L5, X6)."""
    r = to_fetching(ledger)
    accepted, receipt = fetched(r)
    with pytest.raises(DigestMismatch, match="hashes to"):
        ledger.accept_terminal(
            accepted, receipt, expected_version=r.version, result_payload=b"truncated", event="x"
        )
    assert ledger.get("node-1") == r
    assert ledger.receipt("node-1") is None
    assert ledger.result_payload("node-1") is None


def test_accept_terminal_checks_version(ledger: Ledger) -> None:
    """An acceptance against a stale row version is a conflict."""
    r = to_fetching(ledger)
    accepted, receipt = fetched(r)
    with pytest.raises(ConflictError):
        ledger.accept_terminal(
            dataclasses.replace(accepted, version=r.version),
            receipt,
            expected_version=r.version - 1,
            result_payload=PAYLOAD,
            event="x",
        )
    assert ledger.receipts() == []


def test_cancel_acceptance_and_late_completion_mark(ledger: Ledger) -> None:
    """A won cancel is accepted once; a later completion only marks the record (X5)."""
    r = ledger.create(fresh())
    r = step(ledger, r, e.SubmitAcknowledged(operation_id="op-1"))
    r = step(ledger, r, e.CancelRequested())
    assert r.cancel_generation == 1
    evidence = canonical_json({"status": "cancelled"})
    r = step(
        ledger,
        r,
        e.CancellationObserved(result_digest=digest_bytes(evidence)),
        result_payload=evidence,
    )
    assert r.state is State.CANCELLED_ACCEPTED
    r = step(ledger, r, e.TerminalObserved(status=ServerStatus.COMPLETED))
    stored = ledger.get("node-1")
    assert stored.state is State.CANCELLED_ACCEPTED
    assert stored.effect_reconciliation_required
    assert len(ledger.receipts()) == 1
    assert ledger.receipt("node-1").terminal_status is ServerStatus.CANCELLED  # type: ignore[union-attr]


def test_outbox_mark_delivered(ledger: Ledger) -> None:
    """Delivered rows leave the pending list; marking twice answers False; unknown id raises."""
    r = to_fetching(ledger)
    accepted, receipt = fetched(r)
    ledger.accept_terminal(
        accepted, receipt, expected_version=r.version, result_payload=PAYLOAD, event="x"
    )
    (row,) = ledger.outbox_pending()
    assert ledger.mark_delivered(row.outbox_id) is True
    assert ledger.mark_delivered(row.outbox_id) is False
    assert ledger.outbox_pending() == []
    assert ledger.outbox()[0].delivered_at_utc is not None
    from longcall.core import NotFoundError

    with pytest.raises(NotFoundError):
        ledger.mark_delivered(999)


def test_history_is_the_timeline(ledger: Ledger) -> None:
    """Every committed version is in the history, with the event that made it."""
    r = to_fetching(ledger)
    events = [(h.version, h.state, h.event) for h in ledger.history("node-1")]
    assert events == [
        (1, State.SUBMITTING, "Created"),
        (2, State.WORKING, "SubmitAcknowledged"),
        (3, State.TERMINAL_OBSERVED, "TerminalObserved"),
        (4, State.FETCHING_RESULT, "ResultFetchStarted"),
    ]
    assert r.version == 4


def test_inline_result_accepts_from_submitting(ledger: Ledger) -> None:
    """A synchronous result is accepted straight from SUBMITTING with its operation id."""
    r = ledger.create(fresh())
    event = e.ResultFetched(
        status=ServerStatus.COMPLETED,
        result_kind=ResultKind.VALUE,
        result_digest=digest_bytes(PAYLOAD),
        operation_id=None,
    )
    r = step(ledger, r, event, result_payload=PAYLOAD)
    assert r.state is State.ACCEPTED
    assert ledger.receipt("node-1").operation_id is None  # type: ignore[union-attr]


def test_blobs_are_write_once_and_created_atomically(ledger: Ledger) -> None:
    """Request blobs are stored with the record; a blob is written once (X2, X4)."""
    from longcall.errors import BlobConflict

    ledger.create(fresh(), blobs={"request": b'{"a":1}'})
    assert ledger.blob("node-1", "request") == b'{"a":1}'
    assert ledger.blob("node-1", "missing") is None
    assert ledger.put_blob("node-1", "input:approved", b"true") is True
    assert ledger.put_blob("node-1", "input:approved", b"true") is False
    with pytest.raises(BlobConflict):
        ledger.put_blob("node-1", "input:approved", b"false")
    assert ledger.blob("node-1", "input:approved") == b"true"
    with pytest.raises(UnknownCallNode):
        ledger.put_blob("nope", "x", b"1")


def test_open_versions_lists_only_open_operations(ledger: Ledger) -> None:
    """open_versions maps every non-terminal call node to its row version."""
    r = to_fetching(ledger, "node-a")
    ledger.create(fresh("node-b"))
    assert ledger.open_versions() == {"node-a": r.version, "node-b": 1}
    accepted, receipt = fetched(r)
    ledger.accept_terminal(
        accepted, receipt, expected_version=r.version, result_payload=PAYLOAD, event="x"
    )
    assert ledger.open_versions() == {"node-b": 1}


def test_recent_open_by_prefix_is_bounded_newest_first_and_open_only(ledger: Ledger) -> None:
    """Only open nodes starting with the prefix (a % or _ in it is literal), newest first,
    at most ``limit``."""
    r = to_fetching(ledger, "gw:a_%:1")
    for node in ("gw:a_%:2", "gw:a_%:3", "gw:aXY:4", "other:a_%:5"):
        ledger.create(fresh(node))
    accepted, receipt = fetched(r)
    ledger.accept_terminal(
        accepted, receipt, expected_version=r.version, result_payload=PAYLOAD, event="x"
    )
    found = ledger.recent_open_by_prefix("gw:a_%:", limit=5)
    assert [rec.call_node_id for rec in found] == ["gw:a_%:3", "gw:a_%:2"]
    assert [rec.call_node_id for rec in ledger.recent_open_by_prefix("gw:a_%:", limit=1)] == [
        "gw:a_%:3"
    ]
