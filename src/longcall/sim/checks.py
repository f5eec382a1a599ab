"""Safety checks after every committed step, and the end-of-run ledger audit (SPEC F2).

:class:`ObservedLedger` is the real SQLite ledger with one addition: after each
successful write it tells the :class:`Checker`, which checks that write at once. Each
check has a name (the catch table of ``longcall sim --mutants`` shows which one caught
what):

* ``transition table`` — every edge is in :data:`~longcall.core.TRANSITIONS`, terminal
  states are never left, a node is created once and written only after;
* ``versions and epochs`` — versions advance by one (L4), the execution epoch never goes
  back (D1);
* ``accepted without fetching`` — a completed/failed receipt not settled by an operator
  has the digest of a result body a server actually sent for that node (X6);
* ``receipt from a stale epoch`` (D1);
* ``findable unknown`` — every SUBMISSION_UNKNOWN / RECONCILIATION_REQUIRED record is
  found by its submission key or operation id (X7);
* ``never created without proof`` — a SubmissionNeverCreated is backed by a lookup
  answer ``found: false`` the server sent for that key (X2);
* ``one terminal per task`` — no escalation for reading two different terminals of one
  task: the simulated server never changes a terminal (S4), so such a read is the
  client's own contradiction;
* ``cancel ack for its own request`` — a cancel generation is acknowledged only once
  its request reached the server (X5);
* ``stale-epoch reply committed`` — a reply to an older execution epoch changes
  nothing (D1; checked by the world around each delivery);
* ``stale write fenced`` — a worker's write to an operation it no longer holds (another
  worker took it over, or it was released) is refused by the ledger as ``Fenced``, not
  as anything else (D1: the database is the judge);
* ``one owner per epoch`` — in an operation's history, every write of one execution
  epoch comes from one owner (D1; re-read by :func:`audit`).

The structural guarantees (one receipt per node: a UNIQUE constraint; every outbox row
traced to its receipt: a foreign key) are re-read by :func:`audit` and reported apart.

This module only observes: it never changes what the ledger stores or refuses.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Collection, Mapping

from longcall.core import (
    TERMINAL_STATES,
    TRANSITIONS,
    OperationRecord,
    ServerStatus,
    State,
    TerminalReceipt,
)
from longcall.errors import Fenced
from longcall.ledger import Claim, Fence, SQLiteLedger, VersionSet
from longcall.ledger.base import ClaimDecision

UNKNOWN_STATES = (State.SUBMISSION_UNKNOWN, State.RECONCILIATION_REQUIRED)
TERMINAL_READS = frozenset({"ResultFetched", "TerminalObserved", "CancellationObserved"})
"""Events that read a terminal: escalating on one means two terminals were read."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Violation:
    """One finding: which check or gate, and what it saw."""

    check: str
    detail: str

    def __str__(self) -> str:
        return f"{self.check}: {self.detail}"


class Checker:
    """Per-write invariants and the timings the gates need."""

    def __init__(self) -> None:
        self.now = 0.0
        self.violations: list[Violation] = []
        self.state: dict[str, State] = {}
        self.last: dict[str, OperationRecord] = {}
        self.version: dict[str, int] = {}
        self.epoch: dict[str, int] = {}
        self.receipts: dict[str, int] = {}
        self.writes = 0
        self.fetched: dict[str, set[str]] = {}
        """call node -> digests of result bodies a server sent for it that arrived (X6)."""
        self.proofs: dict[str, int] = {}
        """call node -> lookup answers ``found: false`` for its key that arrived (X2)."""
        self.cancel_received: Callable[[str], int] = lambda node: 0
        """call node -> the highest cancel generation whose request reached a server."""
        self.unknown_since: dict[str, float] = {}
        self.unknown_durations: list[float] = []
        self.cancel_since: dict[str, float] = {}
        self.cancel_latencies: list[float] = []
        self.cancel_latencies_operator: list[float] = []
        """The subset settled by an operator's reconciliation (reported apart)."""
        self.ledger: SQLiteLedger | None = None
        self.owner: dict[str, str | None] = {}
        """call node -> the worker the ledger says holds it (open operations only)."""
        self.claims: dict[str, int] = {}
        """call node -> how often an execution was claimed (a new epoch taken)."""

    def fail(self, check: str, detail: str) -> None:
        self.violations.append(Violation(check=check, detail=f"t={self.now:.3f} {detail}"))

    def on_write(
        self,
        record: OperationRecord,
        event: str,
        receipt: TerminalReceipt | None,
        *,
        owner: str | None = None,
        claim: bool = True,
    ) -> None:
        """``claim``: an ``ExecutionClaimed`` that some process claims (False: a
        rollback's rebind, a higher epoch that no one holds, R3)."""
        node = record.call_node_id
        self.writes += 1
        if event == "ExecutionClaimed":
            if claim:
                self.claims[node] = self.claims.get(node, 0) + 1
            self.owner[node] = owner
        elif event == "Created":
            self.owner[node] = owner
        if record.is_terminal:
            self.owner.pop(node, None)
        before = self.state.get(node)
        if event == "Created":
            if before is not None:
                self.fail("transition table", f"{node}: created twice")
        else:
            self._edge(node, before, record, event)
        self.state[node] = record.state
        self.last[node] = record
        self.version[node] = max(self.version.get(node, 0), record.version)
        self.epoch[node] = max(self.epoch.get(node, 0), record.execution_epoch)
        if receipt is not None:
            self._on_receipt(node, receipt)
        self._evidence(node, record, event, before)
        if event == "CancelRefused":
            self._cancel_done(node)
        self._track_unknown(record)

    def _edge(self, node: str, before: State | None, record: OperationRecord, event: str) -> None:
        if before is None:
            self.fail("transition table", f"{node}: written before it was created")
            return
        if record.state not in TRANSITIONS.get((before, event), frozenset()):
            # F2: the ledger only ever holds what the table allows.
            self.fail(
                "transition table",
                f"{node}: edge {before.name} --{event}--> {record.state.name} not in table",
            )
        if before in TERMINAL_STATES and record.state is not before:
            self.fail("transition table", f"{node}: left terminal {before.name}")
        expected = self.version.get(node, 0) + 1
        if record.version != expected:
            self.fail(
                "versions and epochs",
                f"{node}: version {record.version} written, expected {expected}",
            )
        if record.execution_epoch < self.epoch.get(node, 0):
            self.fail(
                "versions and epochs",
                f"{node}: execution epoch went back from {self.epoch[node]} to "
                f"{record.execution_epoch} (a stale executor's write)",
            )

    def _evidence(
        self, node: str, record: OperationRecord, event: str, before: State | None
    ) -> None:
        """What the servers must have said for this write to be sound (X2, X5, S4)."""
        if event == "SubmissionNeverCreated":
            proofs = self.proofs.get(node, 0)
            if proofs <= 0:
                self.fail(
                    "never created without proof",
                    f"{node}: taken as never created, but no lookup said found: false",
                )
            self.proofs[node] = max(0, proofs - 1)
        elif event == "CancelAcknowledged":
            received = self.cancel_received(node)
            if received < record.cancel_generation:
                self.fail(
                    "cancel ack for its own request",
                    f"{node}: cancel generation {record.cancel_generation} acknowledged, but"
                    f" the server has received generation {received} at most",
                )
        elif event in TERMINAL_READS and record.state is State.RECONCILIATION_REQUIRED:
            self.fail(
                "one terminal per task",
                f"{node}: escalated from {before.name if before else '?'} on {event}"
                f" ({record.reconciliation_reason}); the server's terminal never changes",
            )

    def _on_receipt(self, node: str, receipt: TerminalReceipt) -> None:
        count = self.receipts.get(node, 0) + 1
        self.receipts[node] = count
        if count > 1:
            self.fail("one receipt per node", f"{node}: {count} terminal receipts")
        if receipt.execution_epoch < self.epoch.get(node, 0):
            self.fail("receipt from a stale epoch", f"{node}: epoch {receipt.execution_epoch}")
        fetched = receipt.terminal_status in (ServerStatus.COMPLETED, ServerStatus.FAILED)
        unfetched = receipt.result_digest not in self.fetched.get(node, set())
        if fetched and receipt.resolved_by is None and unfetched:
            # F2/X6: a completed status whose result was not fetched never advances.
            self.fail(
                "accepted without fetching",
                f"{node}: accepted {receipt.terminal_status.value} whose result no server sent",
            )
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
                self.fail(
                    "findable unknown",
                    f"{node}: {record.state.name} but not findable by key or id",
                )
        elif node in self.unknown_since:
            self.unknown_durations.append(self.now - self.unknown_since.pop(node))

    def refused(self, node: str, owner: str, epoch: int, error: Exception) -> None:
        """A worker's write was refused: if the operation is no longer its own at that
        epoch, the refusal must be the fence's (D1)."""
        held = self.owner.get(node) == owner and self.epoch.get(node, 0) == epoch
        if not held and not isinstance(error, Fenced) and node in self.owner:
            self.fail(
                "stale write fenced",
                f"{node}: a write of {owner} at epoch {epoch} (held by {self.owner.get(node)}"
                f" at {self.epoch.get(node, 0)}) was refused as {type(error).__name__}, not"
                " Fenced",
            )

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
    _emptying_order: list[str] | None = None

    def empty(self, new_identity: Callable[[], tuple[str, str]]) -> None:
        """Delete every row (the schema stays) and make the ledger's identity anew from
        ``new_identity``: the next world starts from nothing, as on a new ledger."""
        tables = self._tables_referrers_first()
        with self._write() as conn:
            for table in tables:
                conn.execute(f'DELETE FROM "{table}"')
            self._new_identity = new_identity
            self._identity(conn)

    def _tables_referrers_first(self) -> list[str]:
        """The tables of rows, each before the tables its foreign keys reference: deleted
        in this order, no row ever points at a deleted one. (Deferring the foreign keys
        instead, ``PRAGMA defer_foreign_keys``, expires every statement the connection
        has prepared, and the next world compiled each one anew.) Read from the schema
        once: it never changes under a pooled ledger."""
        if self._emptying_order is None:
            rows = self._read(
                "SELECT name FROM sqlite_master WHERE type = 'table'"
                " AND name NOT LIKE 'sqlite_%' AND name != 'schema_version'"
            )
            references = {
                str(table): {
                    str(key[2]) for key in self._read(f'PRAGMA foreign_key_list("{table}")')
                }
                for (table,) in rows
            }
            order: list[str] = []
            while len(order) < len(references):
                left = [t for t in references if t not in order]
                referenced = {r for t in left for r in references[t] if r != t}
                ready = sorted(t for t in left if t not in referenced)
                if not ready:
                    raise RuntimeError(f"foreign keys in a cycle among {sorted(left)}")
                order.extend(ready)
            self._emptying_order = order
        return self._emptying_order

    def create(
        self,
        record: OperationRecord,
        *,
        blobs: Mapping[str, bytes] | None = None,
        owner: str | None = None,
    ) -> OperationRecord:
        out = super().create(record, blobs=blobs, owner=owner)
        if self.checker is not None:
            self.checker.on_write(record, "Created", None, owner=owner)
        return out

    def update(
        self,
        record: OperationRecord,
        *,
        expected_version: int,
        event: str,
        owner: str | None = None,
    ) -> None:
        try:
            super().update(record, expected_version=expected_version, event=event, owner=owner)
        except Exception as exc:
            if self.checker is not None and owner is not None:
                self.checker.refused(record.call_node_id, owner, record.execution_epoch, exc)
            raise
        if self.checker is not None:
            self.checker.on_write(record, event, None, owner=owner)

    def accept_terminal(
        self,
        record: OperationRecord,
        receipt: TerminalReceipt,
        *,
        expected_version: int,
        result_payload: bytes,
        event: str,
        owner: str | None = None,
    ) -> int:
        try:
            receipt_id = super().accept_terminal(
                record,
                receipt,
                expected_version=expected_version,
                result_payload=result_payload,
                event=event,
                owner=owner,
            )
        except Exception as exc:
            if self.checker is not None and owner is not None:
                self.checker.refused(record.call_node_id, owner, record.execution_epoch, exc)
            raise
        if self.checker is not None:
            self.checker.on_write(record, event, receipt)
        return receipt_id

    def put_blob(
        self, call_node_id: str, name: str, payload: bytes, *, fence: Fence | None = None
    ) -> bool:
        try:
            return super().put_blob(call_node_id, name, payload, fence=fence)
        except Exception as exc:
            if self.checker is not None and fence is not None:
                self.checker.refused(call_node_id, fence.owner, fence.execution_epoch, exc)
            raise

    def claim(
        self,
        owner: str,
        *,
        now: float,
        limit: int,
        decide: ClaimDecision,
        nodes: Collection[str] | None = None,
        versions: VersionSet | None = None,
    ) -> list[Claim]:
        claimed = super().claim(
            owner, now=now, limit=limit, decide=decide, nodes=nodes, versions=versions
        )
        if self.checker is not None:
            for one in claimed:
                self.checker.on_write(one.record, "ExecutionClaimed", None, owner=owner)
        return claimed

    def release(self, owner: str, call_node_ids: Collection[str]) -> int:
        released = super().release(owner, call_node_ids)
        if self.checker is not None:
            for node in call_node_ids:
                if self.checker.owner.get(node) == owner:
                    self.checker.owner[node] = None
        return released

    def rebind_open(
        self, protocol: str, from_version: str, *, decide: ClaimDecision
    ) -> list[OperationRecord]:
        rebound = super().rebind_open(protocol, from_version, decide=decide)
        if self.checker is not None:
            for record in rebound:
                # A higher epoch, let go: the worker that then claims it is the claim.
                self.checker.on_write(record, "ExecutionClaimed", None, owner=None, claim=False)
        return rebound

    def retire_worker(self, owner: str) -> int:
        released = super().retire_worker(owner)
        if self.checker is not None:
            held = self.checker.owner
            for node in [n for n, holder in held.items() if holder == owner]:
                held[node] = None
        return released


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Audit:
    """The end-of-run re-read: history problems, and the structural guarantees."""

    problems: list[Violation]
    by_node: dict[str, TerminalReceipt]
    """The receipt of each node that holds one."""
    receipts_max: int
    """Receipts of the busiest node (a UNIQUE constraint keeps it at 1)."""
    receipts: int
    outbox_rows: int
    outbox_traced: int
    """Outbox rows whose node holds a receipt (a foreign key keeps them all)."""


def audit(ledger: SQLiteLedger, nodes: list[str]) -> Audit:
    """Re-read the ledger: history edges and versions, receipts, outbox rows (L6)."""
    problems: list[Violation] = []
    receipts = ledger.receipts()
    per_node: dict[str, int] = {}
    for receipt in receipts:
        per_node[receipt.call_node_id] = per_node.get(receipt.call_node_id, 0) + 1
    for node in nodes:
        rows = ledger.history(node)
        for before, after in itertools.pairwise(rows):
            allowed = TRANSITIONS.get((before.state, after.event), frozenset())
            if after.state not in allowed:
                detail = (
                    f"{node}: history edge {before.state.name} --{after.event}--> "
                    f"{after.state.name} not in table"
                )
                problems.append(Violation(check="transition table", detail=detail))
            if after.version != before.version + 1:
                detail = f"{node}: history version gap at {after.version}"
                problems.append(Violation(check="versions and epochs", detail=detail))
        owners: dict[int, str] = {}
        for row in rows:
            if row.owner is None:
                continue  # an operator's (or a non-holder's) write by version alone
            first = owners.setdefault(row.execution_epoch, row.owner)
            if first != row.owner:
                detail = (
                    f"{node}: epoch {row.execution_epoch} written by {first} and {row.owner}"
                    f" ({row.event} at version {row.version})"
                )
                problems.append(Violation(check="one owner per epoch", detail=detail))
    by_node = {r.call_node_id: r for r in receipts}
    outbox = ledger.outbox()
    traced = sum(1 for row in outbox if row.call_node_id in by_node)
    return Audit(
        problems=problems,
        by_node=by_node,
        receipts_max=max(per_node.values(), default=0),
        receipts=len(receipts),
        outbox_rows=len(outbox),
        outbox_traced=traced,
    )


__all__ = ["Audit", "Checker", "ObservedLedger", "Violation", "audit"]
