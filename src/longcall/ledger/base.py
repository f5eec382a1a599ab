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
import time
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

from longcall.core import (
    TERMINAL_STATES,
    OperationRecord,
    ResultKind,
    ServerStatus,
    State,
    TerminalReceipt,
)
from longcall.core.keys import digest_bytes
from longcall.core.retry import BreakerState
from longcall.errors import (
    AcceptanceMismatch,
    DigestMismatch,
    Fenced,
    LocalProtocolError,
    VersionConflict,
)
from longcall.ledger.budget import BudgetUse, PollGrant

STATES_WITH_OBSERVED_TERMINAL = (State.TERMINAL_OBSERVED, State.FETCHING_RESULT)
REFUSALS_KEPT_PER_NODE = 50
"""Refused writes kept per call node: the first ones tell the story; a stale worker
that kept trying must not grow the ledger without bound."""


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
    owner: str | None = None
    """The worker that wrote this version under its lease (None: an unowned write,
    e.g. an operator's cancel, answer or reconciliation)."""
    execution_epoch: int = 0


WORKER = "worker"
"""A worker process: it takes a fair share of the open operations."""
CLIENT = "client"
"""A caller waiting on its own call nodes: it claims only those and takes no share."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class WorkerRow:
    """One registered lease holder (a worker or a waiting client)."""

    owner: str
    kind: str
    lease_until: float
    started_at_utc: str
    renewed_at_utc: str


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Downtime:
    """A span in which no gateway process of this ledger was alive (its clock)."""

    started_at: float
    ended_at: float | None
    """None: a clean stop, the gateway not started again yet."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Census:
    """What a worker needs to size its share of the open operations (D1)."""

    open_operations: int
    live_workers: int
    """Workers (not clients) whose lease has not lapsed at the asker's ``now`` (asked
    for some versions: those that run at least one of them)."""
    held: int
    """Open operations the asking owner holds."""
    claimable: int
    """Open operations nobody live holds (unowned, or their owner's lease lapsed)."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Fence:
    """The (owner, execution epoch) a worker's write requires the row still to hold."""

    owner: str
    execution_epoch: int


ADAPTER_STATES = ("enabled", "canary", "shadow", "draining", "disabled")
"""A protocol adapter version's place in the rollout plan (R1-R3, P6): ``enabled`` takes
new calls; ``canary`` takes a stable share of them; ``shadow`` takes none, but gets a
copy of each new call of a read-only tool; ``draining`` and ``disabled`` take none,
while the operations they already started go on to their terminal."""

VersionSet = frozenset[tuple[str, str]]
"""The (protocol, adapter version) pairs a worker runs: it claims only operations bound
to one of them. None in their place means every version (one build, no filter)."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ShadowComparison:
    """What comparing a shadow operation with its primary found, once both were
    terminal (R1)."""

    shadow_node: str
    primary_node: str
    protocol: str
    adapter_version: str
    """The shadow's adapter version."""
    verdict: str
    """``match`` or ``differ``."""
    detail: str = ""
    """What differed (empty for a match)."""
    compared_at_utc: str = ""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AdapterPlan:
    """One row of the rollout plan."""

    protocol: str
    adapter_version: str
    state: str
    canary_percent: float = 0.0
    note: str = ""
    updated_at_utc: str = ""

    def __post_init__(self) -> None:
        if self.state not in ADAPTER_STATES:
            raise ValueError(f"adapter state must be one of {ADAPTER_STATES}, not {self.state!r}")
        if not 0.0 <= self.canary_percent <= 100.0:
            raise ValueError(f"canary_percent must be in [0, 100], not {self.canary_percent!r}")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Claim:
    """One operation a claim took: the record as now stored, and whose it was."""

    record: OperationRecord
    taken_from: str | None
    """The holder whose lease had lapsed (a takeover), or None (nobody held it)."""


WAITING_REASONS = ("operator", "person", "worker", "backoff", "server", "nothing")
"""What an operation waits on, as the ledger alone can tell, first match wins:
``nothing`` (accepted), ``operator`` (reconciliation), ``person`` (an input round with
questions unanswered), ``worker`` (open, and nobody with a live lease drives it),
``backoff`` (its last request failed and is retried later), ``server`` (the server's
next answer: a poll, a submission, a fetch)."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class OperationQuery:
    """A filtered, paged read of the operations (the operator console's list): every
    condition given must hold. Pages go by creation order, newest first unless
    ``oldest_first``; ``after_seq`` continues a page from the last row's ``seq``."""

    states: tuple[State, ...] = ()
    server: str | None = None
    tool: str | None = None
    server_status: ServerStatus | None = None
    created_after_utc: str | None = None
    """Created at or after this ledger stamp (``utc_now_iso``'s text, which sorts)."""
    created_before_utc: str | None = None
    search: str | None = None
    """A call node id, its beginning, or a remote operation (task) id."""
    waiting: str | None = None
    """One of :data:`WAITING_REASONS`."""
    min_epoch: int | None = None
    now: float = 0.0
    """When leases are judged (``waiting="worker"``)."""
    after_seq: int | None = None
    oldest_first: bool = False
    nearest_input_deadline_first: bool = False
    """With ``waiting="person"``: order by the input round's deadline (none last), then
    by creation (the inbox's order), read as one page (no ``after_seq``)."""
    limit: int = 50

    def __post_init__(self) -> None:
        if self.waiting is not None and self.waiting not in WAITING_REASONS:
            raise ValueError(f"waiting must be one of {WAITING_REASONS}, not {self.waiting!r}")
        if self.nearest_input_deadline_first and (
            self.waiting != "person" or self.after_seq is not None
        ):
            raise ValueError(
                "nearest_input_deadline_first orders one page of the operations waiting"
                " for a person (waiting='person', no after_seq)"
            )
        if not 1 <= self.limit <= 10_000:
            raise ValueError(f"limit must be in [1, 10000], not {self.limit!r}")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ListedOperation:
    """One row of an :class:`OperationQuery`: the record and what only the row holds."""

    seq: int
    """Its place in creation order (the page cursor)."""
    record: OperationRecord
    owner: str | None
    created_at_utc: str


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ServerUse:
    """The operations of one server at one (protocol, adapter version)."""

    server: str
    protocol: str
    adapter_version: str
    operations: int
    open: int
    failing: int
    """Open operations whose last request to the server failed."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class BreakerRow:
    """One lease holder's circuit breaker for one server, as it last opened or closed
    (X9): each worker keeps its own breakers in memory and writes this row when one
    changes, so an operator can see them."""

    server: str
    owner: str
    state: BreakerState
    open_until: float | None
    """When the open breaker lets a trial request through (the worker's clock)."""
    failures: int
    """Failed requests in a row to this server when it changed."""
    last_error: str = ""
    changed_at_utc: str = ""


REFUSAL_REASONS = ("fenced", "version_conflict")
"""Why the ledger refused a write: another holder or a newer execution epoch holds the
row (D1), or the row moved past the version the write was drawn from (L4)."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RefusedWrite:
    """A write the ledger refused as stale, kept beside the timeline: the write itself
    left nothing (its transaction was rolled back); this row says it was tried."""

    call_node_id: str
    event: str
    owner: str | None
    """The writer (None: an unowned write, an operator's or a caller's)."""
    execution_epoch: int
    """The epoch the writer held the operation at."""
    expected_version: int | None
    reason: str
    """One of :data:`REFUSAL_REASONS`."""
    detail: str
    at_utc: str


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PollBudgetRow:
    """One server's shared poll budget (X3): the cap of its last grant and its use."""

    server: str
    qps_max: float | None
    """The cap the last grant was taken at (None: granted before the ledger kept it)."""
    use: BudgetUse
    granted_at_utc: str
    """When the last grant was taken ('' before the ledger kept it)."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Holding:
    """The open operations one lease holder holds, and those it holds at an execution
    epoch of 2 or more (taken over from a holder whose lease lapsed, or rebound)."""

    owner: str
    operations: int
    taken_over: int = 0
    epoch_max: int | None = None
    """The highest epoch among those taken over (None: none is)."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AcceptedFigures:
    """What the health figures read of one accepted operation, not its whole record."""

    state: State
    result_kind: ResultKind | None
    server_status: ServerStatus | None
    created_at: float
    updated_at: float
    cancel_requested_at: float | None
    cancel_acknowledged_at: float | None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ServerRetries:
    """Failed requests to one server since a moment, from the operations' history."""

    server: str
    retried: int
    """Failed requests that were retried (the operation stayed open)."""
    given_up: int
    """Failed requests that were not retried (not retryable, or retries exhausted)."""


ClaimDecision = Callable[[OperationRecord], OperationRecord]
"""Given a stored open record, the record a claim writes (same identity, version + 1,
a higher execution epoch): the engine runs the core machine here."""


_SECOND_STAMP: tuple[int, str] = (-1, "")
"""The last whole second stamped and its text: the date and time part changes once a
second, and formatting it at every write cost a measurable share of a write (L4)."""


def utc_now_iso() -> str:
    """The wall-clock stamp every backend writes beside a row (never read by the core):
    ``YYYY-MM-DDTHH:MM:SS.ffffff+00:00``, as ``datetime.isoformat`` writes it."""
    global _SECOND_STAMP  # a tuple replaced whole: threads read one consistent pair
    seconds, micros = divmod(time.time_ns() // 1000, 1_000_000)
    second, text = _SECOND_STAMP
    if second != seconds:
        text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
        _SECOND_STAMP = (seconds, text)
    return f"{text}.{micros:06d}+00:00"


def utc_iso(at: float) -> str:
    """A wall-clock time (seconds since the epoch) as :func:`utc_now_iso` writes it, so
    that it compares as text with the stamps of rows (a ``created_…_utc`` bound)."""
    seconds, micros = divmod(round(at * 1_000_000), 1_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{micros:06d}+00:00"


class Ledger(abc.ABC):
    """The durable store of operations, receipts, results and the ready outbox."""

    ledger_id: str
    """This ledger's identity, made once when it is created."""
    caller_key: bytes
    """The secret that scopes this caller's submission keys (C2): made once with the
    ledger, shared by every worker of it, never sent anywhere (only HMACs of it are)."""

    @abc.abstractmethod
    def create(
        self,
        record: OperationRecord,
        *,
        blobs: Mapping[str, bytes] | None = None,
        owner: str | None = None,
    ) -> OperationRecord:
        """Insert a new record (version 1) and its blobs (e.g. the request arguments) in
        one transaction. Raises DuplicateCallNode if the node exists. With ``owner``
        (a registered lease holder) the new operation is held by it from the start."""

    @abc.abstractmethod
    def server_session(self, server: str) -> dict[str, Any] | None:
        """The protocol session this caller holds at ``server`` (its id and what was
        negotiated in it), if a stateful server issued one."""

    @abc.abstractmethod
    def put_server_session(self, server: str, session: Mapping[str, Any] | None) -> None:
        """Keep (or, with None, forget) the protocol session held at ``server``."""

    @abc.abstractmethod
    def put_blob(
        self, call_node_id: str, name: str, payload: bytes, *, fence: Fence | None = None
    ) -> bool:
        """Store a write-once payload of a call node (an input answer, X4).

        True when written, False when the same bytes were already there; different
        bytes under the same name raise BlobConflict (an answer is given once). With
        ``fence``, the row must still be held by that (owner, epoch), else Fenced.
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
    def recent_open_by_prefix(self, prefix: str, *, limit: int) -> list[OperationRecord]:
        """At most ``limit`` open (non-terminal) records whose call node id starts with
        ``prefix``, newest first: a bounded look-up that never reads the whole ledger."""

    @abc.abstractmethod
    def update(
        self,
        record: OperationRecord,
        *,
        expected_version: int,
        event: str,
        owner: str | None = None,
    ) -> None:
        """Store ``record`` if the row is still at ``expected_version`` (L4).

        ``record.version`` must be ``expected_version + 1``. A lost race raises
        VersionConflict and writes nothing. Entering a terminal state is not an update:
        that is :meth:`accept_terminal`.

        With ``owner`` (a worker's write under its lease) the row must also still be
        held by ``owner`` at ``record.execution_epoch``, checked in the same SQL
        statement; otherwise the write raises :class:`Fenced` (D1). Without it (an
        operator's write) only the version is checked.
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
        owner: str | None = None,
    ) -> int:
        """The single acceptance point (L5): one transaction that checks the row, stores
        the result, writes the receipt and one ready-outbox row (none for a shadow
        operation, R1: nothing downstream advances on it), and moves the state.
        Returns the receipt id. ``owner`` fences it like :meth:`update`; the lease
        ends with the acceptance."""

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

    # --- leases (D1): who drives which operation -----------------------------------

    @abc.abstractmethod
    def register_worker(
        self,
        owner: str,
        *,
        kind: str,
        now: float,
        lease_s: float,
        versions: VersionSet | None = None,
    ) -> None:
        """Record (or refresh) a lease holder with a lease until ``now + lease_s``, and
        the adapter versions it runs (None: every one)."""

    @abc.abstractmethod
    def renew_worker(self, owner: str, *, now: float, lease_s: float) -> bool:
        """Extend the owner's lease to ``now + lease_s``. False when it had lapsed at
        ``now`` (or was gone): others may have taken some of its operations over, so
        the owner must re-read what it still holds (:meth:`held_versions`). The lease
        is extended either way: what nobody took is still the owner's."""

    @abc.abstractmethod
    def retire_worker(self, owner: str) -> int:
        """Release every open operation the owner holds and forget the owner (a clean
        shutdown: others take over at once instead of after the lease). Returns how
        many operations were released."""

    @abc.abstractmethod
    def workers(self) -> list[WorkerRow]:
        """Every registered lease holder."""

    @abc.abstractmethod
    def end_lease(self, owner: str, *, lease_until: float, now: float) -> bool:
        """End the owner's lease at ``now`` (its process was proven gone: nothing it
        holds is driven any more), so claims take its operations over at once. Fenced
        by the lease as read: False, and nothing written, when the row's lease is no
        longer ``lease_until`` (renewed since, retired, or ended by another claimer)."""

    def worker_locks_dir(self) -> Path | None:
        """Where the workers of this ledger on this host keep the lock files that prove
        a dead one gone (:mod:`longcall.ledger.owners`); None: no proof is made here,
        and leases decide alone."""
        return None

    # --- the gateway's downtimes ---------------------------------------------------

    @abc.abstractmethod
    def record_downtime(
        self, started_at: float, ended_at: float | None, *, forget_before: float
    ) -> None:
        """Record that no gateway process of this ledger was alive from ``started_at``
        to ``ended_at``; None: a clean stop, its end not known yet. A downtime with an
        end settles every clean stop recorded before (their end is now known), and
        downtimes that ended before ``forget_before`` are forgotten."""

    @abc.abstractmethod
    def downtimes(self, *, ending_after: float) -> list[Downtime]:
        """The downtimes that end after ``ending_after`` (and the clean stops not
        settled yet), oldest first."""

    @abc.abstractmethod
    def census(self, owner: str, *, now: float, versions: VersionSet | None = None) -> Census:
        """Open operations, live workers, what ``owner`` holds and what is claimable;
        with ``versions``, only operations bound to one of them and the live workers
        that run at least one of them (a worker's share of what it can drive)."""

    @abc.abstractmethod
    def census_by_version(
        self, owner: str, *, now: float, versions: VersionSet
    ) -> dict[tuple[str, str], Census]:
        """:meth:`census` for each of ``versions`` on its own, read at once: a worker
        that runs several versions takes its share of each (one read per claim round,
        not one per version)."""

    @abc.abstractmethod
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
        """Take over up to ``limit`` open operations nobody live holds (unowned, or
        their owner's lease lapsed at ``now``), oldest first; with ``nodes``, only
        those call nodes; with ``versions``, only operations bound to one of those
        (protocol, adapter version) pairs. Each is rewritten as ``decide`` says (a
        higher execution epoch) and held by ``owner``, in one transaction. Rows another
        claimer holds locked are skipped, not waited for. Returns the claimed records."""

    @abc.abstractmethod
    def release(self, owner: str, call_node_ids: Collection[str]) -> int:
        """Let go of these operations (if ``owner`` still holds them); others may claim
        them at once. Returns how many were released."""

    @abc.abstractmethod
    def held_versions(self, owner: str) -> dict[str, int]:
        """The row version of every open operation ``owner`` holds."""

    @abc.abstractmethod
    def take_poll_slots(self, server: str, *, now: float, count: int, qps_max: float) -> PollGrant:
        """Take up to ``count`` send slots from the server's one poll budget, shared
        by every worker of this ledger (X3; :mod:`longcall.ledger.budget`)."""

    @abc.abstractmethod
    def put_breaker(self, row: BreakerRow) -> None:
        """Keep the state of one holder's breaker for one server (insert or replace)."""

    @abc.abstractmethod
    def breakers(self) -> list[BreakerRow]:
        """Every kept breaker of a registered holder, by server then holder."""

    @abc.abstractmethod
    def poll_budgets(self) -> list[PollBudgetRow]:
        """Every server's shared poll budget, by server."""

    # --- rollout (R1-R3, P6) -------------------------------------------------------

    @abc.abstractmethod
    def rollout_plan(self) -> list[AdapterPlan]:
        """Every row of the rollout plan, by protocol then version."""

    @abc.abstractmethod
    def set_rollout(self, plan: AdapterPlan) -> None:
        """Write one row of the rollout plan (insert or replace)."""

    @abc.abstractmethod
    def rebind_open(
        self, protocol: str, from_version: str, *, decide: ClaimDecision
    ) -> list[OperationRecord]:
        """Rollback (R3): every open operation of ``protocol`` on ``from_version`` is
        rewritten as ``decide`` says (the old version, a higher execution epoch) and
        let go, in one transaction: whoever held it is fenced from then on, and a worker
        claims it afresh. Returns the rewritten records."""

    @abc.abstractmethod
    def shadow_pairs(self) -> list[tuple[str, str]]:
        """(shadow call node, primary call node) of every shadow operation (R1), in
        creation order."""

    @abc.abstractmethod
    def put_shadow_comparison(self, comparison: ShadowComparison) -> bool:
        """Record what comparing a shadow with its primary found; False (nothing
        written) when that shadow was already compared: a comparison is made once."""

    @abc.abstractmethod
    def shadow_comparisons(self) -> list[ShadowComparison]:
        """Every recorded shadow comparison, by shadow call node."""

    # --- the operator's view (the console) ------------------------------------------

    @abc.abstractmethod
    def browse(self, query: OperationQuery) -> list[ListedOperation]:
        """One page of the operations ``query`` selects, in creation order."""

    @abc.abstractmethod
    def outbox_of(self, call_node_id: str) -> OutboxRow | None:
        """The outbox row of one call node's receipt, if it was accepted."""

    @abc.abstractmethod
    def count(self, query: OperationQuery) -> int:
        """How many operations ``query`` selects (its page bounds ignored)."""

    @abc.abstractmethod
    def count_by_state(self) -> dict[State, int]:
        """Operations per local state (states with none left out)."""

    @abc.abstractmethod
    def server_use(self) -> list[ServerUse]:
        """Operations per (server, protocol, adapter version), by server."""

    @abc.abstractmethod
    def failing_by_server(self) -> dict[tuple[str, str, str], int]:
        """Open operations whose last request failed, per (server, protocol, adapter
        version) that has any: a read of those few rows alone."""

    @abc.abstractmethod
    def recent_accepted(self, *, limit: int) -> list[AcceptedFigures]:
        """The health figures' fields of the last ``limit`` accepted operations (by
        creation, newest first)."""

    @abc.abstractmethod
    def holdings(self) -> list[Holding]:
        """Per lease holder, the open operations it holds and those taken over, by
        holder: two reads by index (the holders' and the second claims')."""

    @abc.abstractmethod
    def retries_by_server(self, *, since_utc: str) -> list[ServerRetries]:
        """Failed requests per server written since ``since_utc`` (a ledger stamp), by
        server: retried, or given up on."""

    @abc.abstractmethod
    def refused_writes(self, call_node_id: str) -> list[RefusedWrite]:
        """The writes of a call node the ledger refused as stale, oldest first (at most
        :data:`REFUSALS_KEPT_PER_NODE`)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the connection."""

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_fence(
    call_node_id: str, row_owner: str | None, row_epoch: int, owner: str, epoch: int
) -> None:
    """Raise Fenced unless the row is held by ``owner`` at ``epoch`` (D1)."""
    if row_owner != owner or row_epoch != epoch:
        raise Fenced(
            f"operation {call_node_id!r} is held by {row_owner!r} at epoch {row_epoch}; "
            f"the write of {owner!r} at epoch {epoch} is refused"
        )


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
        if row.state in STATES_WITH_OBSERVED_TERMINAL
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
