"""Safety checks after every committed step, and the end-of-run ledger audit (SPEC F2).

:class:`ObservedLedger` is the real SQLite ledger with one addition: after each
successful write it tells the :class:`Checker`, which checks that write at once
(at most one receipt per call node; no completed receipt without a fetched payload of
that digest; nothing moves after an accepted cancel; every SUBMISSION_UNKNOWN and
RECONCILIATION_REQUIRED record findable by key or operation id; every edge in
:data:`~longcall.core.TRANSITIONS`; versions advance by one and the execution epoch
never goes back). :func:`audit` re-reads the whole ledger at the end.

This module only observes: it never changes what the ledger stores or refuses.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

from longcall.core import (
    TERMINAL_STATES,
    TRANSITIONS,
    OperationRecord,
    ServerStatus,
    State,
    TerminalReceipt,
)
from longcall.ledger import SQLiteLedger

UNKNOWN_STATES = (State.SUBMISSION_UNKNOWN, State.RECONCILIATION_REQUIRED)


class Checker:
    """Per-write invariants and the timings the gates need."""

    def __init__(self) -> None:
        self.now = 0.0
        self.violations: list[str] = []
        self.state: dict[str, State] = {}
        self.version: dict[str, int] = {}
        self.epoch: dict[str, int] = {}
        self.receipts: dict[str, int] = {}
        self.fetched: dict[str, set[str]] = {}
        """call node -> digests of result bodies a server actually sent for it (X6)."""
        self.unknown_since: dict[str, float] = {}
        self.unknown_durations: list[float] = []
        self.cancel_since: dict[str, float] = {}
        self.cancel_latencies: list[float] = []
        self.cancel_latencies_operator: list[float] = []
        """The subset settled by an operator's reconciliation (reported apart)."""
        self.ledger: SQLiteLedger | None = None

    def fail(self, message: str) -> None:
        self.violations.append(f"t={self.now:.3f} {message}")

    def on_write(
        self, record: OperationRecord, event: str, receipt: TerminalReceipt | None
    ) -> None:
        node = record.call_node_id
        before = self.state.get(node)
        if event == "Created":
            if before is not None:
                self.fail(f"{node}: created twice")
        else:
            if before is None:
                self.fail(f"{node}: written before it was created")
            elif record.state not in TRANSITIONS.get((before, event), frozenset()):
                # F2: the ledger only ever holds what the table allows.
                self.fail(
                    f"{node}: edge {before.name} --{event}--> {record.state.name} not in table"
                )
            if before in TERMINAL_STATES and record.state is not before:
                self.fail(f"{node}: left terminal {before.name} for {record.state.name}")
            expected = self.version.get(node, 0) + 1
            if record.version != expected:
                self.fail(f"{node}: version {record.version} written, expected {expected} (L4)")
            if record.execution_epoch < self.epoch.get(node, 0):
                self.fail(
                    f"{node}: execution epoch went back from {self.epoch[node]} to "
                    f"{record.execution_epoch} (a stale executor's write, D1)"
                )
        self.state[node] = record.state
        self.version[node] = max(self.version.get(node, 0), record.version)
        self.epoch[node] = max(self.epoch.get(node, 0), record.execution_epoch)
        if receipt is not None:
            self._on_receipt(node, receipt)
        if event == "CancelRefused":
            self._cancel_done(node)
        self._track_unknown(record)

    def _on_receipt(self, node: str, receipt: TerminalReceipt) -> None:
        count = self.receipts.get(node, 0) + 1
        self.receipts[node] = count
        if count > 1:
            self.fail(f"{node}: {count} terminal receipts (L5)")
        if receipt.execution_epoch < self.epoch.get(node, 0):
            self.fail(f"{node}: receipt from stale epoch {receipt.execution_epoch}")
        fetched = receipt.terminal_status in (ServerStatus.COMPLETED, ServerStatus.FAILED)
        unfetched = receipt.result_digest not in self.fetched.get(node, set())
        if fetched and receipt.resolved_by is None and unfetched:
            # F2/X6: a completed status whose result was not fetched never advances.
            self.fail(f"{node}: accepted {receipt.terminal_status.value} without fetching it")
        if receipt.resolved_by is not None and node in self.cancel_since:
            self.cancel_latencies_operator.append(self.now - self.cancel_since[node])
        self._cancel_done(node)

    def _cancel_done(self, node: str) -> None:
        since = self.cancel_since.pop(node, None)
        if since is not None:
            self.cancel_latencies.append(self.now - since)

    def _track_unknown(self, record: OperationRecord) -> None:
        node = record.call_node_id
        if record.state in UNKNOWN_STATES:
            self.unknown_since.setdefault(node, self.now)
            if self.ledger is not None and not _findable(self.ledger, record):
                self.fail(f"{node}: {record.state.name} but not findable by key or id (X7)")
        elif node in self.unknown_since:
            self.unknown_durations.append(self.now - self.unknown_since.pop(node))

    def close(self, end: float) -> None:
        """End of run: open timings count up to ``end``."""
        for since in self.unknown_since.values():
            self.unknown_durations.append(end - since)
        for since in self.cancel_since.values():
            self.cancel_latencies.append(end - since)
        self.unknown_since.clear()
        self.cancel_since.clear()


def _findable(ledger: SQLiteLedger, record: OperationRecord) -> bool:
    by_key = ledger.find_by_submission_key(record.submission_key)
    if by_key is not None and by_key.call_node_id == record.call_node_id:
        return True
    if record.operation_id is None:
        return False
    found = ledger.find_by_operation_id(record.operation_id, server=record.server)
    return any(r.call_node_id == record.call_node_id for r in found)


class ObservedLedger(SQLiteLedger):
    """The real SQLite ledger, reporting every successful write to a checker."""

    checker: Checker | None = None

    def create(
        self, record: OperationRecord, *, blobs: Mapping[str, bytes] | None = None
    ) -> OperationRecord:
        out = super().create(record, blobs=blobs)
        if self.checker is not None:
            self.checker.on_write(record, "Created", None)
        return out

    def update(self, record: OperationRecord, *, expected_version: int, event: str) -> None:
        self.write_update(record, expected_version=expected_version, event=event)
        if self.checker is not None:
            self.checker.on_write(record, event, None)

    def accept_terminal(
        self,
        record: OperationRecord,
        receipt: TerminalReceipt,
        *,
        expected_version: int,
        result_payload: bytes,
        event: str,
    ) -> int:
        receipt_id = self.write_accept(
            record,
            receipt,
            expected_version=expected_version,
            result_payload=result_payload,
            event=event,
        )
        if self.checker is not None:
            self.checker.on_write(record, event, receipt)
        return receipt_id

    # The writes themselves: the real ones (planted-bug tests override these).
    def write_update(self, record: OperationRecord, *, expected_version: int, event: str) -> None:
        SQLiteLedger.update(self, record, expected_version=expected_version, event=event)

    def write_accept(
        self,
        record: OperationRecord,
        receipt: TerminalReceipt,
        *,
        expected_version: int,
        result_payload: bytes,
        event: str,
    ) -> int:
        return SQLiteLedger.accept_terminal(
            self,
            record,
            receipt,
            expected_version=expected_version,
            result_payload=result_payload,
            event=event,
        )


def audit(ledger: SQLiteLedger, nodes: list[str]) -> tuple[list[str], int, int, int]:
    """Re-read the ledger: history edges, receipts per node, outbox traceability (L6).

    Returns (violations, max receipts per node, outbox rows, traced outbox rows).
    """
    problems: list[str] = []
    receipts = ledger.receipts()
    per_node: dict[str, int] = {}
    for receipt in receipts:
        per_node[receipt.call_node_id] = per_node.get(receipt.call_node_id, 0) + 1
    for node in nodes:
        rows = ledger.history(node)
        for before, after in itertools.pairwise(rows):
            allowed = TRANSITIONS.get((before.state, after.event), frozenset())
            if after.state not in allowed:
                problems.append(
                    f"audit {node}: history edge {before.state.name} --{after.event}--> "
                    f"{after.state.name} not in table"
                )
            if after.version != before.version + 1:
                problems.append(f"audit {node}: history version gap at {after.version}")
    by_node = {r.call_node_id: r for r in receipts}
    outbox = ledger.outbox()
    traced = sum(1 for row in outbox if row.call_node_id in by_node)
    if len(outbox) != len(receipts):
        problems.append(f"audit: {len(outbox)} outbox rows for {len(receipts)} receipts")
    return problems, max(per_node.values(), default=0), len(outbox), traced
