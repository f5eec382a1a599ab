"""The ledger contract: what every backend (SQLite, PostgreSQL) must do (SPEC L4–L7).

A ledger stores operation records under compare-and-set on the row version, and
accepts a terminal outcome in exactly one transaction that also writes the receipt,
the result and one ready-outbox row. The checks that decide whether an acceptance is
allowed are here, once, so every backend applies the same rules; the backends add the
database constraints that make a second receipt or outbox row impossible even for a
buggy caller.
"""

from __future__ import annotations

import abc
import dataclasses
import datetime as dt
from collections.abc import Mapping
from typing import Any

from longcall.core import (
    TERMINAL_STATES,
    OperationRecord,
    ServerStatus,
    State,
    TerminalReceipt,
)
from longcall.core.keys import digest_bytes
from longcall.errors import (
    AcceptanceMismatch,
    DigestMismatch,
    LocalProtocolError,
    VersionConflict,
)

_STATES_WITH_OBSERVED_TERMINAL = (State.TERMINAL_OBSERVED, State.FETCHING_RESULT)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class OutboxRow:
    """One downstream advance, ready to deliver; it always points at its receipt (L6)."""

    outbox_id: int
    receipt_id: int
    call_node_id: str
    created_at_utc: str
    delivered_at_utc: str | None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class HistoryRow:
    """One committed version of a record: the operation's timeline."""

    call_node_id: str
    version: int
    state: State
    event: str
    at: float
    at_utc: str


def utc_now_iso() -> str:
    """The wall-clock stamp every backend writes beside a row (never read by the core)."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="microseconds")


class Ledger(abc.ABC):
    """The durable store of operations, receipts, results and the ready outbox."""

    ledger_id: str
    """This ledger's identity, made once when it is created."""
    caller_key: bytes
    """The secret that scopes this caller's submission keys (C2): made once with the
    ledger, shared by every worker of it, never sent anywhere (only HMACs of it are)."""

    @abc.abstractmethod
    def create(
        self, record: OperationRecord, *, blobs: Mapping[str, bytes] | None = None
    ) -> OperationRecord:
        """Insert a new record (version 1) and its blobs (e.g. the request arguments) in
        one transaction. Raises DuplicateCallNode if the node exists."""

    @abc.abstractmethod
    def server_session(self, server: str) -> dict[str, Any] | None:
        """The protocol session this caller holds at ``server`` (its id and what was
        negotiated in it), if a stateful server issued one."""

    @abc.abstractmethod
    def put_server_session(self, server: str, session: Mapping[str, Any] | None) -> None:
        """Keep (or, with None, forget) the protocol session held at ``server``."""

    @abc.abstractmethod
    def put_blob(self, call_node_id: str, name: str, payload: bytes) -> bool:
        """Store a write-once payload of a call node (an input answer, X4).

        True when written, False when the same bytes were already there; different
        bytes under the same name raise BlobConflict (an answer is given once).
        """

    @abc.abstractmethod
    def blob(self, call_node_id: str, name: str) -> bytes | None:
        """A stored payload of a call node, or None."""

    @abc.abstractmethod
    def open_versions(self) -> dict[str, int]:
        """The row version of every non-terminal operation: how a worker notices that
        another process (the CLI, another worker) wrote a record it holds."""

    @abc.abstractmethod
    def get(self, call_node_id: str) -> OperationRecord:
        """The record of a call node; raises UnknownCallNode."""

    @abc.abstractmethod
    def find(self, call_node_id: str) -> OperationRecord | None:
        """The record of a call node, or None."""

    @abc.abstractmethod
    def find_by_operation_id(
        self, operation_id: str, *, server: str | None = None
    ) -> list[OperationRecord]:
        """Every record holding this remote operation id (a list: servers reuse ids, F1)."""

    @abc.abstractmethod
    def find_by_submission_key(self, submission_key: str) -> OperationRecord | None:
        """The record created with this submission key (X7: every UNKNOWN is findable)."""

    @abc.abstractmethod
    def list_by_state(self, *states: State) -> list[OperationRecord]:
        """Records in any of these states (all records when none are given), oldest first."""

    @abc.abstractmethod
    def update(self, record: OperationRecord, *, expected_version: int, event: str) -> None:
        """Store ``record`` if the row is still at ``expected_version`` (L4).

        ``record.version`` must be ``expected_version + 1``. A lost race raises
        VersionConflict and writes nothing. Entering a terminal state is not an update:
        that is :meth:`accept_terminal`.
        """

    @abc.abstractmethod
    def accept_terminal(
        self,
        record: OperationRecord,
        receipt: TerminalReceipt,
        *,
        expected_version: int,
        result_payload: bytes,
        event: str,
    ) -> int:
        """The single acceptance point (L5): one transaction that checks the row, stores
        the result, writes the receipt and one ready-outbox row, and moves the state.
        Returns the receipt id."""

    @abc.abstractmethod
    def receipt(self, call_node_id: str) -> TerminalReceipt | None:
        """The terminal receipt of a call node, if accepted."""

    @abc.abstractmethod
    def receipts(self) -> list[TerminalReceipt]:
        """Every receipt, in acceptance order."""

    @abc.abstractmethod
    def result_payload(self, call_node_id: str) -> bytes | None:
        """The accepted result bytes of a call node (their digest is in the receipt)."""

    @abc.abstractmethod
    def outbox_pending(self, *, limit: int = 100) -> list[OutboxRow]:
        """Undelivered outbox rows, oldest first."""

    @abc.abstractmethod
    def outbox(self) -> list[OutboxRow]:
        """Every outbox row, delivered or not."""

    @abc.abstractmethod
    def mark_delivered(self, outbox_id: int) -> bool:
        """Mark an outbox row delivered; False if it already was. Raises NotFoundError."""

    @abc.abstractmethod
    def history(self, call_node_id: str) -> list[HistoryRow]:
        """Every committed version of a call node's record, oldest first."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the connection."""

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_update(row: OperationRecord, record: OperationRecord, expected_version: int) -> None:
    """The rules of a plain update, checked against the stored row (L4)."""
    _check_version(row, record, expected_version)
    if row.state in TERMINAL_STATES and record.state is not row.state:
        raise LocalProtocolError(f"operation {row.call_node_id!r} is terminal ({row.state})")
    if record.state in TERMINAL_STATES and row.state is not record.state:
        raise LocalProtocolError(
            f"operation {row.call_node_id!r}: entering {record.state} needs accept_terminal"
        )
    _check_identity(row, record)


def check_acceptance(
    row: OperationRecord,
    record: OperationRecord,
    receipt: TerminalReceipt,
    expected_version: int,
    result_payload: bytes,
) -> None:
    """The eight matching fields of L5, and the payload's digest, against the row."""
    _check_version(row, record, expected_version)
    if row.state in TERMINAL_STATES:
        raise VersionConflict(f"operation {row.call_node_id!r} is already accepted ({row.state})")
    if record.state not in TERMINAL_STATES:
        raise LocalProtocolError(f"accept_terminal needs a terminal record, got {record.state}")
    _check_identity(row, record)
    if receipt != TerminalReceipt.for_record(record):
        raise AcceptanceMismatch(
            f"operation {row.call_node_id!r}: the receipt does not describe the record"
        )
    expected_op = row.operation_id if row.operation_id is not None else receipt.operation_id
    terminal_ok = (
        row.server_status is receipt.terminal_status
        if row.state in _STATES_WITH_OBSERVED_TERMINAL
        else True
    )
    cancelled = receipt.terminal_status is ServerStatus.CANCELLED
    mismatches = [
        name
        for name, ok in (
            ("call_node_id", receipt.call_node_id == row.call_node_id),
            ("request_digest", receipt.request_digest == row.request_digest),
            ("operation_id", receipt.operation_id == expected_op),
            (
                "tool_descriptor_digest",
                receipt.tool_descriptor_digest == row.tool_descriptor_digest,
            ),
            ("execution_epoch", receipt.execution_epoch == row.execution_epoch),
            ("cancel_generation", receipt.cancel_generation == row.cancel_generation),
            (
                "terminal_status",
                terminal_ok and cancelled == (record.state is State.CANCELLED_ACCEPTED),
            ),
        )
        if not ok
    ]
    if mismatches:
        raise AcceptanceMismatch(
            f"operation {row.call_node_id!r}: receipt does not match the stored row on "
            + ", ".join(mismatches)
        )
    actual = digest_bytes(result_payload)
    if actual != receipt.result_digest:
        raise DigestMismatch(
            f"operation {row.call_node_id!r}: result payload hashes to {actual}, "
            f"the receipt claims {receipt.result_digest}"
        )


def _check_version(row: OperationRecord, record: OperationRecord, expected_version: int) -> None:
    if row.version != expected_version:
        raise VersionConflict(
            f"operation {row.call_node_id!r}: row is at version {row.version}, "
            f"expected {expected_version}"
        )
    if record.version != expected_version + 1:
        raise LocalProtocolError(
            f"operation {row.call_node_id!r}: new version must be {expected_version + 1}, "
            f"got {record.version}"
        )


def _check_identity(row: OperationRecord, record: OperationRecord) -> None:
    fixed = ("call_node_id", "request_digest", "submission_key", "tool_descriptor_digest")
    changed = [name for name in fixed if getattr(row, name) != getattr(record, name)]
    if changed:
        raise AcceptanceMismatch(
            f"operation {row.call_node_id!r}: identity fields changed: {', '.join(changed)}"
        )
