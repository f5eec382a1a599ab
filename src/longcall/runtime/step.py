"""The one path from the runtime to the ledger: find, create, commit, decide again.

Owns: every ledger read and write made for an operation — finding a call node, creating
it with its request, running the core machine on an event and committing the result
(a compare-and-set ``update``, or ``accept_terminal`` for a transition that carries
:class:`~longcall.core.commands.AcceptTerminal`: receipt, result and outbox in one
transaction, SPEC L4/L5), deciding an event again on the fresh row after a lost race,
the intents a caller or an operator writes (cancel, answer, reconcile: X4, X5, X7), the
stored request and answers, the lease rows of a worker and its claims (D1), and the
shared poll budget's send slots (X3). The engine, the executor, the simulator and
``Client`` (an operator's writes, without an engine) all go through it.

Must not: hold operations in memory, plan a request or keep a timer: what a committed
record needs next is the engine's to decide (a lost race hands the fresh row back to it
through :meth:`Holder.replan` before the event is decided again). Nothing is carried out
before its record is committed (X2): callers act on a transition's commands only after
it returns.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import random
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from longcall.adapters.base import ToolBinding
from longcall.core import (
    DEFAULT_POLICY,
    TERMINAL_STATES,
    OperationRecord,
    Policy,
    State,
    Transition,
    events,
    handle,
    new_operation,
)
from longcall.core.commands import AcceptTerminal
from longcall.core.keys import canonical_json, check_call_node_id, request_digest
from longcall.core.record import evolve
from longcall.errors import (
    ConflictError,
    IllegalTransition,
    IntegrityError,
    MissingPayload,
    MissingResultPayload,
    StaleEvent,
    VersionConflict,
)
from longcall.ledger import (
    Census,
    Claim,
    Fence,
    Fenced,
    Ledger,
    PollGrant,
    VersionSet,
)
from longcall.runtime import inputs

REQUEST_BLOB = "request"
"""The blob that holds a call's arguments (canonical JSON), written with its record."""
LOST_RACE_RETRIES = 3
"""How often one event is decided again after losing a compare-and-set race (L4)."""
OPERATOR_JITTER = 0.5
"""The jitter an operator's write gives the machine: it has no random source, and the
driver that holds the operation plans its own requests on its next re-read."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CallSpec:
    """A durable call to make: the unit of idempotency is the call node (X2)."""

    call_node_id: str
    binding: ToolBinding
    arguments: Mapping[str, Any]
    principal: str = "anonymous"
    budget_s: float | None = None
    step_index: int = 0
    shadow_of: str | None = None
    """The primary call node this call shadows through another adapter version (R1)."""

    def __post_init__(self) -> None:
        check_call_node_id(self.call_node_id)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CancelOutcome:
    """What a cancel call achieved (X5): never a silent no-op."""

    outcome: str
    """``requested``, ``cancelled``, ``already_terminal`` or ``not_cancellable``."""
    cancel_generation: int
    status: str | None = None
    detail: str = ""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Decided:
    """What :meth:`LedgerShell.decide` made of one event."""

    transition: Transition | None = None
    """Committed: the record as written and the commands it carries."""
    fenced: bool = False
    """Refused by the database: another worker took the operation over (D1)."""
    integrity_error: IntegrityError | None = None
    """Refused as contradicting the stored row: retrying cannot cure it (X7)."""


class Holder(Protocol):
    """Whoever drives the operations a :meth:`LedgerShell.decide` writes (the engine)."""

    def writer_of(self, call_node_id: str) -> str | None:
        """The lease holder to write ``call_node_id`` as (None: an unowned write)."""
        ...

    def replan(
        self, lost: OperationRecord, fresh: OperationRecord | None, *, now: float
    ) -> OperationRecord | None:
        """After a lost race: hold and plan ``fresh`` (None: the row is gone or at another
        epoch, so let it go), and return the record to decide the event on again (None:
        nothing left to decide)."""
        ...


def commit(
    ledger: Ledger,
    before: OperationRecord,
    transition: Transition,
    *,
    event: str,
    result_payload: bytes | None = None,
    owner: str | None = None,
) -> OperationRecord:
    """Write ``transition`` over ``before`` (which must still be the stored version).

    ``owner`` makes it a worker's write under its lease: the database refuses it
    (Fenced) once another worker took the operation over (D1)."""
    accepts = [cmd for cmd in transition.commands if isinstance(cmd, AcceptTerminal)]
    if accepts:
        if result_payload is None:
            raise MissingResultPayload(
                f"operation {before.call_node_id!r}: accepting needs the result payload"
            )
        ledger.accept_terminal(
            transition.record,
            accepts[0].receipt,
            expected_version=before.version,
            result_payload=result_payload,
            event=event,
            owner=owner,
        )
    else:
        ledger.update(transition.record, expected_version=before.version, event=event, owner=owner)
    return transition.record


def apply_event(
    ledger: Ledger,
    record: OperationRecord,
    event: events.Event,
    *,
    now: float,
    jitter: float,
    result_payload: bytes | None = None,
    policy: Policy = DEFAULT_POLICY,
) -> Transition:
    """Run the machine on ``record`` and commit the result; raise and write nothing if
    the machine refuses the event or the row moved on (ConflictError)."""
    transition = handle(record, event, now=now, jitter=jitter, policy=policy)
    commit(ledger, record, transition, event=event.name, result_payload=result_payload)
    return transition


def request_cancel(
    ledger: Ledger,
    record: OperationRecord,
    *,
    now: float,
    jitter: float,
    requested_by: str = "caller",
    owner: str | None = None,
) -> tuple[CancelOutcome, Transition | None]:
    """Record a cancel request by CAS (X5) and say what it achieved.

    Returns the outcome and, when a request must now be sent, the transition.
    ``owner``: written under that worker's lease (fenced), else as an operator.
    """
    if record.state is State.CANCELLED_ACCEPTED:
        return CancelOutcome(
            outcome="cancelled", cancel_generation=record.cancel_generation, status="cancelled"
        ), None
    if record.is_terminal or record.state in (State.TERMINAL_OBSERVED, State.FETCHING_RESULT):
        status = record.server_status.value if record.server_status else None
        return (
            CancelOutcome(
                outcome="already_terminal",
                cancel_generation=record.cancel_generation,
                status=status,
                detail="the server reported a terminal status before the cancel",
            ),
            None,
        )
    if record.state not in (State.WORKING, State.INPUT_REQUIRED, State.CANCEL_REQUESTED):
        return (
            CancelOutcome(
                outcome="not_cancellable",
                cancel_generation=record.cancel_generation,
                detail=f"the operation is {record.state.value}: "
                "no server operation is known to cancel yet",
            ),
            None,
        )
    transition = handle(
        record, events.CancelRequested(requested_by=requested_by), now=now, jitter=jitter
    )
    commit(ledger, record, transition, event="CancelRequested", owner=owner)
    generation = transition.record.cancel_generation
    return CancelOutcome(outcome="requested", cancel_generation=generation), transition


def record_answers(
    ledger: Ledger,
    record: OperationRecord,
    answers: Mapping[str, Any],
    *,
    now: float,
    jitter: float,
    owner: str | None = None,
) -> Transition:
    """Check answers against their questions, store them (write-once per round and key)
    and record them against the current round (X4).

    Every answer is checked against the form the server sent for its key (when one was
    kept) before anything is stored: a wrong-shaped answer raises InvalidAnswer and is
    never sent.

    ``owner``: written under that worker's lease (fenced), else as an operator."""
    keys = tuple(k for k in record.input_keys_pending if k in answers)
    unknown = sorted(set(answers) - set(record.input_keys_pending))
    if unknown or not keys:
        raise StaleEvent(
            f"{record.call_node_id!r}: keys {unknown or sorted(answers)} are not pending "
            f"(pending: {list(record.input_keys_pending)})"
        )
    checked = {
        key: inputs.validate_answer(
            inputs.question_of(ledger, record.call_node_id, key), answers[key]
        )
        for key in keys
    }
    event = events.InputAnswered(input_round=record.input_round, keys=keys)
    # Decide first (pure): an answer the machine refuses stores nothing.
    transition = handle(record, event, now=now, jitter=jitter)
    fence = None if owner is None else Fence(owner=owner, execution_epoch=record.execution_epoch)
    for key in keys:
        ledger.put_blob(
            record.call_node_id,
            inputs.answer_blob(record.input_round, key),
            canonical_json(checked[key]),
            fence=fence,
        )
    commit(ledger, record, transition, event=event.name, owner=owner)
    return transition


def check_version(record: OperationRecord, expected_version: int | None) -> None:
    """A write meant for one version of the row lands on that version only: another
    raises VersionConflict and nothing is written."""
    if expected_version is not None and record.version != expected_version:
        raise VersionConflict(
            f"{record.call_node_id!r} changed: expected row version {expected_version}, it"
            f" is at {record.version} ({record.state.value}); nothing was written"
        )


class LedgerShell:
    """The ledger as the runtime uses it: one object per ledger and random source.

    ``rng``: where the machine's jitter comes from (the engine's seeded source); without
    one, every write gets :data:`OPERATOR_JITTER` (an operator's write). ``stats``: the
    counters to add lost races and refusals to (the engine's)."""

    def __init__(
        self,
        ledger: Ledger,
        *,
        rng: random.Random | None = None,
        policy: Policy = DEFAULT_POLICY,
        stats: collections.Counter[str] | None = None,
    ) -> None:
        self.ledger = ledger
        self.policy = policy
        self.stats: collections.Counter[str] = collections.Counter() if stats is None else stats
        self._jitter: Callable[[], float] = rng.random if rng is not None else _operator_jitter

    # --- one operation ----------------------------------------------------------------

    def find(self, call_node_id: str) -> OperationRecord | None:
        return self.ledger.find(call_node_id)

    def get(self, call_node_id: str) -> OperationRecord:
        """The stored record (UnknownCallNode when there is none)."""
        return self.ledger.get(call_node_id)

    def new_call(self, spec: CallSpec, *, now: float, version: str | None = None) -> Transition:
        """The new operation of ``spec`` (not written yet) and the commands it starts
        with; ``version``: bound to this adapter version instead of the binding's."""
        binding = spec.binding
        transition = new_operation(
            call_node_id=spec.call_node_id,
            request_digest=request_digest(binding.tool_name, dict(spec.arguments)),
            tool_name=binding.tool_name,
            tool_descriptor_digest=binding.descriptor_digest,
            principal=spec.principal,
            server=binding.server,
            protocol=binding.protocol,
            adapter_version=binding.adapter_version,
            now=now,
            step_index=spec.step_index,
            submission_lookup=binding.submission_lookup,
            tool_idempotent=binding.idempotent,
            budget_s=spec.budget_s,
            caller_key=self.ledger.caller_key,
            server_store_id=binding.store_id,
        )
        record = transition.record
        if spec.shadow_of is not None:
            record = evolve(record, shadow_of=spec.shadow_of)
        if version is not None and version != binding.adapter_version:
            record = evolve(record, adapter_version=version)
        return dataclasses.replace(transition, record=record)

    def create(self, record: OperationRecord, request: bytes, *, owner: str | None) -> None:
        """Create the operation with its arguments (``request``, canonical JSON),
        committed before any request is planned; DuplicateCallNode when the call node
        (or its submission key) exists already."""
        self.ledger.create(record, blobs={REQUEST_BLOB: request}, owner=owner)

    def request_payload(self, call_node_id: str) -> dict[str, Any]:
        """The call's arguments as stored with its record."""
        payload = self.ledger.blob(call_node_id, REQUEST_BLOB)
        if payload is None:
            raise MissingPayload(f"{call_node_id!r}: the request arguments are not stored")
        data = json.loads(payload)
        assert isinstance(data, dict)
        return data

    def input_answers(self, record: OperationRecord, keys: tuple[str, ...]) -> dict[str, Any]:
        """The stored answers of ``keys`` in the record's current round."""
        out: dict[str, Any] = {}
        for key in keys:
            answer = inputs.read_answer(self.ledger, record, key)
            if answer is not None:
                out[key] = answer
        return out

    def keep_input_requests(self, call_node_id: str, payload: bytes) -> None:
        """Keep the questions (and forms) a server asked before the round is recorded,
        so a person can always see what a pending key asks (X4)."""
        inputs.store_requests(self.ledger, call_node_id, payload)

    def sharing_operation_id(self, record: OperationRecord) -> list[OperationRecord]:
        """Every stored record holding ``record``'s operation id at its server."""
        assert record.operation_id is not None
        return self.ledger.find_by_operation_id(record.operation_id, server=record.server)

    def reconciled_as_absent(self, record: OperationRecord, *, claimed: bool) -> bool:
        """Whether ``record`` is NOT_FOUND_SAFE by an operator's manual reconciliation,
        with nothing committed since but (``claimed``) the claim that just took it. Such
        a proof of absence means no create went out after it: resubmit with the same
        key (X2); treated as an in-doubt create it would go straight back to
        reconciliation, for ever."""
        if record.state is not State.NOT_FOUND_SAFE:
            return False
        history = self.ledger.history(record.call_node_id)
        before = history[:-1] if claimed else history
        return bool(before) and before[-1].event == "ReconciledManually"

    def decide(
        self,
        record: OperationRecord,
        event: events.Event,
        *,
        now: float,
        holder: Holder,
        payload: bytes | None = None,
    ) -> Decided:
        """Machine then ledger; a refused or stale event commits nothing.

        The two ways a commit can fail are told apart (``longcall.errors``): a lost
        race (ConflictError) means somebody else wrote the row — another process's
        cancel, answer or reconciliation — so the row is re-read, handed to ``holder``
        to plan what it now needs, and the event is decided again against it (L4). An
        integrity failure (a digest or acceptance mismatch, a foreign identity) cannot
        be cured by retrying: it is returned for the holder to escalate (X7). A write
        the database refuses as Fenced (another worker took the operation over) is
        returned too: not ours to decide again (D1).
        """
        for _attempt in range(LOST_RACE_RETRIES):
            try:
                transition = handle(
                    record, event, now=now, jitter=self._jitter(), policy=self.policy
                )
            except (StaleEvent, IllegalTransition):
                self.stats["stale_replies"] += 1
                return Decided()
            try:
                commit(
                    self.ledger,
                    record,
                    transition,
                    event=event.name,
                    result_payload=payload,
                    owner=holder.writer_of(record.call_node_id),
                )
            except Fenced:
                self.stats["fenced"] += 1
                return Decided(fenced=True)
            except ConflictError:
                self.stats["conflicts"] += 1
                fresh = self.ledger.find(record.call_node_id)
                if fresh is not None and fresh.execution_epoch != record.execution_epoch:
                    fresh = None  # taken over at a new epoch (fencing, D1)
                again = holder.replan(record, fresh, now=now)
                if again is None:
                    return Decided()
                record = again
                continue
            except IntegrityError as exc:
                self.stats["integrity_failures"] += 1
                return Decided(integrity_error=exc)
            return Decided(transition=transition)
        # Still losing after re-reading each time: the row is busy elsewhere. The
        # re-read record is held and planned, so nothing is lost; the event is dropped
        # as stale.
        self.stats["stale_replies"] += 1
        return Decided()

    # --- intents (X4, X5, X7) -----------------------------------------------------------

    def cancel(
        self,
        call_node_id: str,
        *,
        now: float,
        requested_by: str = "caller",
        owner: str | None = None,
        expected_version: int | None = None,
    ) -> tuple[CancelOutcome, Transition | None]:
        """Ask for cancellation of the stored row (X5): :func:`request_cancel`."""
        record = self.ledger.get(call_node_id)
        check_version(record, expected_version)
        return request_cancel(
            self.ledger,
            record,
            now=now,
            jitter=self._jitter(),
            requested_by=requested_by,
            owner=owner,
        )

    def answer(
        self,
        call_node_id: str,
        answers: Mapping[str, Any],
        *,
        now: float,
        owner: str | None = None,
        expected_version: int | None = None,
    ) -> Transition:
        """Answer pending input keys of the stored row (X4): :func:`record_answers`."""
        record = self.ledger.get(call_node_id)
        check_version(record, expected_version)
        return self.answer_record(record, answers, now=now, owner=owner)

    def answer_record(
        self,
        record: OperationRecord,
        answers: Mapping[str, Any],
        *,
        now: float,
        owner: str | None = None,
    ) -> Transition:
        """Answer pending input keys of ``record``, held as the stored version (X4)."""
        return record_answers(
            self.ledger, record, answers, now=now, jitter=self._jitter(), owner=owner
        )

    def reconcile(
        self,
        record: OperationRecord,
        event: events.Event,
        *,
        now: float,
        result_payload: bytes | None = None,
    ) -> Transition:
        """Write an operator's resolution of ``record`` (X7): :func:`apply_event`."""
        return apply_event(
            self.ledger,
            record,
            event,
            now=now,
            jitter=self._jitter(),
            result_payload=result_payload,
            policy=self.policy,
        )

    # --- the whole ledger ---------------------------------------------------------------

    def open_records(self) -> list[OperationRecord]:
        return self.ledger.list_by_state(*(s for s in State if s not in TERMINAL_STATES))

    def open_versions(self) -> dict[str, int]:
        """Every open call node and its row version."""
        return self.ledger.open_versions()

    def held_versions(self, owner: str) -> dict[str, int]:
        """Every open call node ``owner`` holds and its row version."""
        return self.ledger.held_versions(owner)

    # --- leases and claims (D1) ---------------------------------------------------------

    def register(
        self, owner: str, *, kind: str, now: float, lease_s: float, versions: VersionSet | None
    ) -> None:
        self.ledger.register_worker(owner, kind=kind, now=now, lease_s=lease_s, versions=versions)

    def renew(
        self, owner: str, *, kind: str, now: float, lease_s: float, versions: VersionSet | None
    ) -> bool:
        """Renew ``owner``'s lease; when it had lapsed, register it again and say so
        (False): others may have taken some of its operations meanwhile."""
        if self.ledger.renew_worker(owner, now=now, lease_s=lease_s):
            return True
        self.register(owner, kind=kind, now=now, lease_s=lease_s, versions=versions)
        return False

    def retire(self, owner: str) -> int:
        """Hand back everything ``owner`` holds and forget it; how many it held."""
        return self.ledger.retire_worker(owner)

    def running_leases(self, owner: str, *, now: float) -> dict[str, float]:
        """The other lease holders whose leases still run at ``now``: when each ends."""
        return {
            w.owner: w.lease_until
            for w in self.ledger.workers()
            if w.owner != owner and w.lease_until > now
        }

    def is_leaseholder(self, owner: str) -> bool:
        """Whether ``owner`` still has a row (a lapsed holder keeps it while it holds
        open operations)."""
        return any(w.owner == owner for w in self.ledger.workers())

    def end_lease(self, owner: str, *, lease_until: float, now: float) -> bool:
        """End the lease (read as ``lease_until``) of a holder proven gone; False when
        it changed since (renewed, retired, ended by another claimer)."""
        return self.ledger.end_lease(owner, lease_until=lease_until, now=now)

    def census(self, owner: str, *, now: float) -> Census:
        return self.ledger.census(owner, now=now)

    def census_by_version(
        self, owner: str, *, now: float, versions: VersionSet
    ) -> dict[tuple[str, str], Census]:
        return self.ledger.census_by_version(owner, now=now, versions=versions)

    def claim(
        self,
        owner: str,
        *,
        now: float,
        limit: int,
        nodes: list[str] | None,
        versions: VersionSet | None,
    ) -> list[Claim]:
        """Take up to ``limit`` operations nobody live holds, each at a new epoch decided
        by the machine (an ExecutionClaimed) in the claim's own transaction."""

        def decide(record: OperationRecord) -> OperationRecord:
            claim = events.ExecutionClaimed(new_epoch=record.execution_epoch + 1)
            return handle(record, claim, now=now, jitter=self._jitter(), policy=self.policy).record

        return self.ledger.claim(
            owner, now=now, limit=limit, decide=decide, nodes=nodes, versions=versions
        )

    def release(self, owner: str, nodes: Iterable[str]) -> None:
        self.ledger.release(owner, list(nodes))

    def take_poll_slots(self, server: str, *, now: float, count: int, qps_max: float) -> PollGrant:
        """Send slots for ``count`` status reads from ``server``'s one budget (X3)."""
        return self.ledger.take_poll_slots(server, now=now, count=count, qps_max=qps_max)


def _operator_jitter() -> float:
    return OPERATOR_JITTER


__all__ = [
    "LOST_RACE_RETRIES",
    "REQUEST_BLOB",
    "CallSpec",
    "CancelOutcome",
    "Decided",
    "Holder",
    "LedgerShell",
    "apply_event",
    "check_version",
    "commit",
    "record_answers",
    "request_cancel",
]
