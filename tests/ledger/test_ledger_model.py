"""Hypothesis stateful test of the ledger against an in-memory model (SPEC L4, L5, L6).

Random creates (fresh and duplicate), legal and illegal events through the runtime's
``apply_event``, stale-version writes, forged acceptances and outbox deliveries run
against a real ledger (an SQLite file in a temp dir; a PostgreSQL schema of its own)
and a model made of plain dicts. After every step the ledger must equal the model,
and the receipt/outbox rules must hold in the stored rows themselves.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from longcall.core import (
    ConflictError,
    IntegrityError,
    LongcallError,
    NotFoundError,
    OperationRecord,
    ResultKind,
    ServerStatus,
    State,
    TerminalReceipt,
    VersionConflict,
    handle,
)
from longcall.core import events as e
from longcall.core.commands import AcceptTerminal
from longcall.core.keys import canonical_json, digest_bytes
from longcall.ledger import DuplicateCallNode, Ledger, SQLiteLedger
from longcall.runtime.step import apply_event, commit

from .conftest import drop_schema, require_pg
from .test_contract import fresh

NODES = ("n0", "n1", "n2", "n3")
OP_IDS = ("op-1", "op-2")
PAYLOADS = (canonical_json({"rows": [1]}), canonical_json({"rows": []}))
DIGESTS = tuple(digest_bytes(p) for p in PAYLOADS)
FORGERIES = (
    "payload",
    "receipt_digest",
    "request_digest",
    "execution_epoch",
    "cancel_generation",
    "terminal_status",
    "operation_id",
    "stale_version",
)
text = st.sampled_from(("x", "lost", "server said so"))
digest = st.sampled_from(DIGESTS)
terminal_status = st.sampled_from((ServerStatus.COMPLETED, ServerStatus.FAILED))

# Every row whose (receipt_id, call_node_id) is not one receipt's: L6 checked in SQL.
UNTRACEABLE_OUTBOX_SQL = (
    "SELECT o.outbox_id FROM outbox o LEFT JOIN receipts r"
    " ON r.receipt_id = o.receipt_id AND r.call_node_id = o.call_node_id"
    " WHERE r.receipt_id IS NULL"
)


def events_for(record: OperationRecord) -> st.SearchStrategy[e.Event]:
    """Well-formed events of most types, legal or not in the record's state."""
    epoch = record.execution_epoch
    kinds: list[st.SearchStrategy[e.Event]] = [
        st.builds(e.SubmitAcknowledged, operation_id=st.sampled_from(OP_IDS)),
        st.builds(e.SubmitOutcomeLost, reason=text),
        st.builds(e.SubmitRejected, reason=text, result_digest=digest),
        st.builds(e.SubmissionFound, operation_id=st.sampled_from(OP_IDS)),
        st.just(e.SubmissionNeverCreated()),
        st.builds(e.WorkingObserved, progressed=st.booleans()),
        st.builds(e.InputRequestObserved, keys=st.just(("a",))),
        st.builds(e.InputAnswered, input_round=st.just(record.input_round), keys=st.just(("a",))),
        st.builds(e.TerminalObserved, status=terminal_status),
        st.just(e.ResultFetchStarted()),
        st.builds(
            e.ResultFetched,
            status=terminal_status,
            result_kind=st.sampled_from((ResultKind.VALUE, ResultKind.TOOL_ERROR)),
            result_digest=digest,
            operation_id=st.none() | st.sampled_from(OP_IDS),
        ),
        st.builds(e.ResultFetchFailed, reason=text, retryable=st.booleans()),
        st.just(e.CancelRequested()),
        st.builds(e.CancelAcknowledged, cancel_generation=st.just(record.cancel_generation)),
        st.builds(e.CancellationObserved, result_digest=digest),
        st.builds(e.OperationNotFound),
        st.builds(e.ExecutionClaimed, new_epoch=st.integers(epoch, epoch + 1)),
        st.builds(e.ReconciliationEscalated, reason=text),
        st.builds(
            e.ReconciledManually,
            resolution=st.sampled_from(e.Resolution),
            actor=st.just("ops@example"),
            note=text,
            operation_id=st.none() | st.sampled_from(OP_IDS),
            result_digest=digest,
        ),
    ]
    epochs = st.sampled_from((None, epoch, epoch + 1))
    return st.tuples(st.one_of(kinds), epochs).map(
        lambda pair: dataclasses.replace(pair[0], execution_epoch=pair[1])
    )


def happy_event(record: OperationRecord) -> e.Event:
    """The event that moves ``record`` one step towards acceptance."""
    match record.state:
        case State.SUBMITTING | State.NOT_FOUND_SAFE | State.SUBMISSION_UNKNOWN:
            return e.SubmitAcknowledged(operation_id=f"op-{record.call_node_id}")
        case State.CANCEL_REQUESTED:
            return e.CancellationObserved(result_digest=DIGESTS[1])
        case State.WORKING | State.INPUT_REQUIRED:
            return e.TerminalObserved(status=ServerStatus.COMPLETED)
        case State.TERMINAL_OBSERVED:
            return e.ResultFetchStarted()
        case State.FETCHING_RESULT:
            status = record.server_status or ServerStatus.COMPLETED
            return e.ResultFetched(
                status=status, result_kind=ResultKind.VALUE, result_digest=DIGESTS[0]
            )
        case State.RECONCILIATION_REQUIRED:
            return e.ReconciledManually(
                resolution=e.Resolution.COMPLETED,
                actor="ops@example",
                note="checked by hand",
                result_digest=DIGESTS[0],
            )
        case _:  # terminal: a late completion only marks the record (X5)
            return e.TerminalObserved(status=ServerStatus.COMPLETED)


def payload_for(event: e.Event) -> bytes | None:
    """The bytes whose digest the event claims, if it claims one."""
    claimed = getattr(event, "result_digest", None)
    return PAYLOADS[DIGESTS.index(claimed)] if claimed in DIGESTS else None


def raw_rows(ledger: Ledger, query: str) -> list[tuple[Any, ...]]:
    """Rows of a read-only query on the ledger's own connection (both DB-API-like)."""
    conn = ledger._conn  # type: ignore[attr-defined]
    return list(conn.execute(query).fetchall())


class LedgerModel(RuleBasedStateMachine):
    """One ledger and its model: records, receipts (in order), results and the outbox."""

    open_ledger: Callable[[], tuple[Ledger, Callable[[], None]]]

    def __init__(self) -> None:
        super().__init__()
        self.ledger, self._cleanup = self.open_ledger()
        self.records: dict[str, OperationRecord] = {}
        self.versions: dict[str, list[OperationRecord]] = {}
        self.receipts: dict[str, TerminalReceipt] = {}
        self.results: dict[str, bytes] = {}
        self.delivered: dict[str, bool] = {}

    def teardown(self) -> None:
        self.ledger.close()
        self._cleanup()

    # --- rules ---------------------------------------------------------------------

    @rule(node=st.sampled_from(NODES), steal_key=st.booleans())
    def create(self, node: str, steal_key: bool) -> None:
        """Create a record; a known node (or another node's submission key) is refused."""
        record = fresh(node)
        owner = next(iter(self.records), None)
        if steal_key and owner is not None and owner != node:
            record = dataclasses.replace(record, submission_key=self.records[owner].submission_key)
        if node in self.records or record.submission_key != fresh(node).submission_key:
            with pytest.raises(DuplicateCallNode):
                self.ledger.create(record)
            return
        assert self.ledger.create(record) == record
        self.records[node] = record
        self.versions[node] = [record]

    @precondition(lambda self: self.records)
    @rule(data=st.data(), jitter=st.floats(0.0, 1.0), payload=st.sampled_from(("match", "other")))
    def feed(self, data: st.DataObject, jitter: float, payload: str) -> None:
        """Apply a random event through apply_event; a refused one changes nothing."""
        node = data.draw(st.sampled_from(sorted(self.records)), label="node")
        event = data.draw(events_for(self.records[node]), label="event")
        claimed = payload_for(event)
        if payload == "other" and claimed is not None:
            claimed = b"not-" + claimed
        self._apply(node, event, claimed, jitter)

    @precondition(lambda self: self.records)
    @rule(data=st.data())
    def advance(self, data: st.DataObject) -> None:
        """Apply the event that moves a record towards acceptance (reaches L5 often)."""
        node = data.draw(st.sampled_from(sorted(self.records)), label="node")
        event = happy_event(self.records[node])
        self._apply(node, event, payload_for(event), 0.5)

    @precondition(lambda self: any(len(v) > 1 for v in self.versions.values()))
    @rule(data=st.data())
    def stale_write(self, data: st.DataObject) -> None:
        """A transition computed from an older version raises ConflictError (L4)."""
        node = data.draw(
            st.sampled_from(sorted(n for n, v in self.versions.items() if len(v) > 1)),
            label="node",
        )
        old = data.draw(st.sampled_from(self.versions[node][:-1]), label="old")
        event = data.draw(events_for(old) | st.just(happy_event(old)), label="event")
        try:
            transition = handle(old, event, now=old.updated_at + 1, jitter=0.5)
        except LongcallError:
            return  # the machine refused it: nothing reaches the ledger
        with pytest.raises(ConflictError):
            commit(
                self.ledger,
                old,
                transition,
                event=event.name,
                result_payload=payload_for(event) or PAYLOADS[0],
            )

    @precondition(lambda self: self.records)
    @rule(data=st.data(), forgery=st.sampled_from(FORGERIES))
    def forged_accept(self, data: st.DataObject, forgery: str) -> None:
        """accept_terminal with a wrong payload or a forged field raises, writes nothing (L5)."""
        node = data.draw(st.sampled_from(sorted(self.records)), label="node")
        row = self.records[node]
        payload = PAYLOADS[0]
        record = dataclasses.replace(
            row,
            state=State.ACCEPTED,
            server_status=ServerStatus.COMPLETED,
            result_digest=DIGESTS[0],
            result_kind=ResultKind.VALUE,
            version=row.version + 1,
            updated_at=row.updated_at + 1,
        )
        expected = row.version
        changed: dict[str, object] = {}
        match forgery:
            case "payload":
                payload = b"truncated"
            case "receipt_digest":
                pass  # the receipt alone is forged, below
            case "request_digest":
                changed = {"request_digest": "sha256:forged"}
            case "execution_epoch":
                changed = {"execution_epoch": row.execution_epoch + 1}
            case "cancel_generation":
                changed = {"cancel_generation": row.cancel_generation + 1}
            case "terminal_status":
                changed = {"server_status": ServerStatus.CANCELLED}
            case "operation_id":
                # Only a row that holds an id can be contradicted by another one.
                changed = {"operation_id": "op-forged"} if row.operation_id else {}
                payload = payload if row.operation_id else b"truncated"
            case _:
                changed = {"version": row.version}
                expected = row.version - 1
        record = dataclasses.replace(record, **changed)  # type: ignore[arg-type]
        receipt = TerminalReceipt.for_record(record)
        if forgery == "receipt_digest":
            receipt = dataclasses.replace(receipt, result_digest=DIGESTS[1])
        # A stale version, or a row somebody accepted already, is a lost race; every
        # other forgery is an integrity failure.
        lost_race = forgery == "stale_version" or row.is_terminal
        error = VersionConflict if lost_race else IntegrityError
        with pytest.raises(error):
            self.ledger.accept_terminal(
                record, receipt, expected_version=expected, result_payload=payload, event="Forged"
            )

    @precondition(lambda self: self.delivered)
    @rule(data=st.data())
    def deliver(self, data: st.DataObject) -> None:
        """Mark an outbox row delivered: True the first time, False after."""
        node = data.draw(st.sampled_from(sorted(self.delivered)), label="node")
        (row,) = [r for r in self.ledger.outbox() if r.call_node_id == node]
        assert self.ledger.mark_delivered(row.outbox_id) is not self.delivered[node]
        self.delivered[node] = True

    @rule()
    def deliver_unknown(self) -> None:
        """Marking an outbox row that does not exist raises NotFoundError."""
        with pytest.raises(NotFoundError):
            self.ledger.mark_delivered(10_000)

    def _apply(self, node: str, event: e.Event, payload: bytes | None, jitter: float) -> None:
        before = self.records[node]
        try:
            transition = apply_event(
                self.ledger,
                before,
                event,
                now=before.updated_at + 1,
                jitter=jitter,
                result_payload=payload,
            )
        except LongcallError:
            return  # refused: the invariants check that the ledger did not move
        accepts = [c for c in transition.commands if isinstance(c, AcceptTerminal)]
        if accepts:
            (accept,) = accepts
            assert payload is not None
            assert digest_bytes(payload) == accept.receipt.result_digest
            assert node not in self.receipts
            self.receipts[node] = accept.receipt
            self.results[node] = payload
            self.delivered[node] = False
        self.records[node] = transition.record
        self.versions[node].append(transition.record)

    # --- invariants ----------------------------------------------------------------

    @invariant()
    def records_equal_model(self) -> None:
        """Every stored record equals the model's, in creation order."""
        assert self.ledger.list_by_state() == list(self.records.values())

    @invariant()
    def receipts_equal_model(self) -> None:
        """Receipts and results are the model's; terminal ⇔ exactly one receipt (L5)."""
        assert self.ledger.receipts() == list(self.receipts.values())
        for node, record in self.records.items():
            assert self.ledger.receipt(node) == self.receipts.get(node)
            assert self.ledger.result_payload(node) == self.results.get(node)
            assert record.is_terminal == (node in self.receipts)

    @invariant()
    def outbox_traces_to_receipts(self) -> None:
        """One outbox row per accepted node, each pointing at that node's receipt (L6)."""
        rows = self.ledger.outbox()
        nodes = [r.call_node_id for r in rows]
        assert sorted(nodes) == sorted(self.delivered)
        assert len({r.receipt_id for r in rows}) == len(rows)
        for row in rows:
            assert (row.delivered_at_utc is not None) == self.delivered[row.call_node_id]
        assert [r.call_node_id for r in self.ledger.outbox_pending()] == [
            n for n in nodes if not self.delivered[n]
        ]
        assert raw_rows(self.ledger, UNTRACEABLE_OUTBOX_SQL) == []

    @invariant()
    def history_is_contiguous(self) -> None:
        """History holds versions 1..version, with the state of each committed version."""
        for node, versions in self.versions.items():
            history = self.ledger.history(node)
            assert [h.version for h in history] == list(range(1, len(versions) + 1))
            assert [h.state for h in history] == [v.state for v in versions]


def _sqlite_ledger() -> tuple[Ledger, Callable[[], None]]:
    directory = tempfile.mkdtemp(prefix="lc-model-")
    ledger = SQLiteLedger(Path(directory) / "ledger.db", synchronous="off")
    return ledger, lambda: shutil.rmtree(directory, ignore_errors=True)


MODEL_SETTINGS = settings(
    max_examples=100,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


class SQLiteLedgerModel(LedgerModel):
    """The model run on an SQLite file."""

    open_ledger = staticmethod(_sqlite_ledger)


TestSQLiteLedgerModel = SQLiteLedgerModel.TestCase
TestSQLiteLedgerModel.settings = MODEL_SETTINGS


@pytest.fixture
def pg_dsn() -> str:
    """The PostgreSQL DSN, or a skip (a failure under LONGCALL_REQUIRE_PG=1)."""
    return require_pg()


def test_postgres_ledger_matches_model(pg_dsn: str) -> None:
    """The same model, run on PostgreSQL (a fresh schema per example)."""
    import secrets

    from hypothesis.stateful import run_state_machine_as_test

    from longcall.ledger.postgres import PostgresLedger

    def open_pg() -> tuple[Ledger, Callable[[], None]]:
        schema = f"lc_test_{secrets.token_hex(6)}"
        ledger = PostgresLedger(pg_dsn, schema=schema)
        return ledger, lambda: drop_schema(pg_dsn, schema)

    class PostgresLedgerModel(LedgerModel):
        open_ledger = staticmethod(open_pg)

    run_state_machine_as_test(
        PostgresLedgerModel,
        settings=settings(MODEL_SETTINGS, max_examples=30),
    )
