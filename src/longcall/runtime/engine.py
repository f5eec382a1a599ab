"""The operations one process drives: what each event means and what it needs next.

Owns: the records this process holds, and the path of every event to them — a reply
to a request (:meth:`Engine.apply_reply`), a caller's intent (cancel, answer: X4,
X5), a takeover (L7) — decided by the core machine and committed through the ledger
shell (:mod:`longcall.runtime.step`, the only path to the ledger: it also decides an
event again after a lost race, L4), then planned: each request command goes to the
pure scheduler (:mod:`longcall.runtime.scheduler`: timers, admission, breaker, send
slots), an automatic answer or an acceptance to its callback. How operations come to
be held — alone on a ledger, or as one of several workers with leases and claim rounds
(D1) — is :mod:`longcall.runtime.claims`'.

Must not: await, sleep or read a clock (``now`` is an argument; the jitter comes from
the ``random.Random`` it is given, through the shell), or call the ledger but through
the shell. The asyncio executor (:mod:`longcall.runtime.executor`) turns its actions
into adapter calls; the simulator (:mod:`longcall.sim`) into simulated-server calls on
virtual time: both run the same decision code.
"""

from __future__ import annotations

import collections
import dataclasses
import random
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from longcall.adapters.base import Outcome
from longcall.adapters.outcomes import as_input_refusal
from longcall.core import (
    DEFAULT_POLICY,
    OperationRecord,
    Policy,
    ServerStatus,
    State,
    Transition,
    recovery_event,
    resume,
)
from longcall.core.commands import (
    AcceptTerminal,
    AskInput,
    Command,
    EscalateReconciliation,
    SendSubmit,
    StartResultFetch,
)
from longcall.core.events import (
    Event,
    ExecutionClaimed,
    InputRequestObserved,
    ReconciliationEscalated,
    ResultFetchStarted,
    SubmissionFound,
    SubmitAcknowledged,
    SubmitOutcomeLost,
)
from longcall.core.keys import canonical_json, request_digest
from longcall.core.retry import CircuitBreaker
from longcall.errors import RequestDigestMismatch
from longcall.ledger import WORKER, Census, Fenced, Ledger, VersionSet
from longcall.ledger.owners import OwnerLocks
from longcall.runtime.claims import Claims, SoleDriver
from longcall.runtime.leases import LeasePolicy
from longcall.runtime.scheduler import REQUEST_COMMANDS, Action, Scheduler
from longcall.runtime.step import CallSpec, CancelOutcome, LedgerShell

T = TypeVar("T")

_COUNTED = (
    "stale_replies",
    "conflicts",
    "integrity_failures",
    "requests",
    "fenced",
    "claimed",
    "takeovers",
)
"""The counters every engine reports from the start, at zero until they count."""

InputPolicy = Callable[[OperationRecord, AskInput], Mapping[str, Any] | None]
"""Answers an input request automatically (keys → values), or None to leave it to a human."""


class Engine:
    """Every operation one process drives: events in, committed records and actions out."""

    def __init__(
        self,
        ledger: Ledger,
        *,
        rng: random.Random,
        policy: Policy = DEFAULT_POLICY,
        poll_qps_max: float = 20.0,
        server_qps_max: Mapping[str, float] | None = None,
        poll_burst: float = 1.0,
        input_policy: InputPolicy | None = None,
        on_accepted: Callable[[OperationRecord], None] | None = None,
        on_escalated: Callable[[OperationRecord, str], None] | None = None,
        breaker: CircuitBreaker | None = None,
        owner: str | None = None,
        kind: str = WORKER,
        lease: LeasePolicy | None = None,
        claim_all: bool = True,
        versions: VersionSet | None = None,
        owner_locks: OwnerLocks | None = None,
    ) -> None:
        self.owner = owner
        """The lease holder this engine writes as (None: single-process mode)."""
        self.versions = versions
        """The (protocol, adapter version) pairs this engine runs: it claims only
        operations bound to one of them, and its fair share counts only those (None:
        every version, one build on the ledger)."""
        self.lease = lease or LeasePolicy()
        self.claim_all = claim_all
        """True: take a fair share of every open operation (a worker). False: claim
        only the call nodes its callers wait on (a caller's, :attr:`Claims.wanted`)."""
        self.external_heartbeat = False
        """True when the driver renews the lease from its own thread (:meth:`heartbeat`)."""
        self.input_policy = input_policy
        self.on_accepted = on_accepted
        self.on_escalated = on_escalated
        self.records: dict[str, OperationRecord] = {}
        """The operations this engine drives, as last committed."""
        self.stats: collections.Counter[str] = collections.Counter(dict.fromkeys(_COUNTED, 0))
        """What this engine did (requests, lost races, claims…), for metrics and reports."""
        self.shell = LedgerShell(ledger, rng=rng, policy=policy, stats=self.stats)
        """The engine's one path to the ledger."""
        self.scheduler = Scheduler(
            policy=policy,
            poll_qps_max=poll_qps_max,
            server_qps_max=server_qps_max or {},
            poll_burst=poll_burst,
            breaker=breaker or CircuitBreaker(),
            stats=self.stats,
        )
        """When each planned request may leave (timers, admission, breaker, slots)."""
        self.holding: Claims | SoleDriver = SoleDriver(self.shell)
        """How this engine comes to hold operations: alone, or by a worker's claims."""
        if owner is not None:
            self.holding = Claims(
                self.shell,
                owner=owner,
                kind=kind,
                versions=versions,
                policy=self.lease,
                claim_all=claim_all,
                stats=self.stats,
                locks=owner_locks,
            )

    @property
    def ledger(self) -> Ledger:
        """The ledger this engine drives (read and written through :attr:`shell` only)."""
        return self.shell.ledger

    @property
    def _last_poll_at(self) -> Mapping[str, float]:
        """When this process last polled each operation (the scheduler keeps it)."""
        return self.scheduler.last_poll_at

    # --- intake ----------------------------------------------------------------------

    def start_call(
        self, spec: CallSpec, *, now: float, version: str | None = None
    ) -> OperationRecord:
        """Create the operation, or attach to the existing one of this call node (X2):
        the node is looked up once, here."""
        existing = self.shell.find(spec.call_node_id)
        if existing is not None:
            return self.attach_to(existing, spec.binding.tool_name, spec.arguments, now=now)
        return self.create(spec, now=now, version=version)

    def create(self, spec: CallSpec, *, now: float, version: str | None = None) -> OperationRecord:
        """Create the operation of a call node its caller found absent (one lookup per
        call); DuplicateCallNode if another process created it meanwhile.

        The record and its arguments are committed before any request is planned.
        ``version``: bind the new operation to this adapter version instead of the
        binding's. If this engine does not run it, the record is created unowned and
        left to a worker that does (claims filter by version); nothing is planned.
        """
        transition = self.shell.new_call(spec, now=now, version=version)
        record = transition.record
        request = canonical_json(dict(spec.arguments))
        # Routed to a version this engine does not run: created unowned, for a worker
        # that runs it to claim (R2; claims filter by version).
        routed_away = version not in (None, spec.binding.adapter_version) and not self.runs(record)
        if not routed_away:
            self.holding.started(spec.call_node_id, now=now)
        self.shell.create(record, request, owner=None if routed_away else self.owner)
        if not routed_away:
            self.records[spec.call_node_id] = record
            self._plan(record, transition.commands, now=now)
        return record

    def attach(
        self, call_node_id: str, tool_name: str, arguments: Mapping[str, Any], *, now: float
    ) -> OperationRecord | None:
        """The existing operation of this call node (taken over if open), or None when
        the node is new. The same node with another request is refused (X2)."""
        existing = self.shell.find(call_node_id)
        if existing is None:
            return None
        return self.attach_to(existing, tool_name, arguments, now=now)

    def attach_to(
        self,
        existing: OperationRecord,
        tool_name: str,
        arguments: Mapping[str, Any],
        *,
        now: float,
    ) -> OperationRecord:
        """:meth:`attach` with the node's stored record already in hand (no lookup)."""
        call_node_id = existing.call_node_id
        digest = request_digest(tool_name, dict(arguments))
        if existing.request_digest != digest:
            raise RequestDigestMismatch(
                f"call node {call_node_id!r} already holds a different request "
                f"({existing.request_digest} != {digest}); a call node is one request"
            )
        # An operation bound to a version another worker runs waits on the ledger.
        if not existing.is_terminal and call_node_id not in self.records and self.runs(existing):
            self.holding.take(existing, self, now=now)
        return self.records.get(call_node_id, existing)

    def resume_all(self, *, now: float) -> int:
        """Take over open operations in the ledger (SPEC L7): claim a higher epoch,
        recover in-doubt creates, and re-plan each one. Returns how many.

        With an owner: registers the lease holder, and claims nothing yet: claims come
        in :meth:`housekeep` rounds, the first one claim interval later, up to this
        engine's fair share of what no live worker holds. Without: every open
        operation, at once."""
        return self.holding.resume(self, now=now)

    def runs(self, record: OperationRecord) -> bool:
        """Whether this engine runs the adapter version ``record`` is bound to."""
        return self.versions is None or (record.protocol, record.adapter_version) in self.versions

    def adopt(self, record: OperationRecord, *, now: float) -> None:
        """Single-process mode: take one stored open operation over with a new epoch
        (an unowned write) and plan what it needs. With an owner, claims do this."""
        if record.is_terminal:
            self.records.pop(record.call_node_id, None)
            return
        proven_absent = self.shell.reconciled_as_absent(record, claimed=False)
        claim = ExecutionClaimed(new_epoch=record.execution_epoch + 1)
        transition = self._apply(record, claim, now=now)
        if transition is None:
            return
        self.stats["recoveries"] += 1
        self.taken_over(transition.record, proven_absent=proven_absent, now=now)

    def taken_over(self, record: OperationRecord, *, proven_absent: bool, now: float) -> None:
        """Plan a record this engine just took over at a new epoch (L7): resume it, and
        treat a create that may have left as in doubt (X2)."""
        node = record.call_node_id
        self.records[node] = record
        self.scheduler.forget(node)
        self._plan(record, resume(record, now=now), now=now)
        self.scheduler.keep_poll_floor(record)
        if proven_absent:
            self._resubmit(record, now=now)
            return
        recovery = recovery_event(record)
        if recovery is not None:
            self._apply_and_plan(record, recovery, now=now)

    def refresh(self, *, now: float, adopt_new: bool = True) -> int:
        """Notice records another process wrote (CLI cancel/answer/reconcile, another
        worker) and re-plan them. Returns how many changed.

        With an owner: only the operations this engine holds; one another worker took
        over is let go, one an operator changed is re-planned at the same epoch.
        Without (single-process mode), ``adopt_new`` also takes over open operations
        this engine does not hold yet."""
        return self.holding.reread(self, now=now, adopt_new=adopt_new)

    def changed_elsewhere(self, record: OperationRecord, *, now: float) -> None:
        """Re-plan, at the same epoch, a held operation another process (an operator)
        wrote: what its state needs now, and a create an operator proved absent."""
        node = record.call_node_id
        self.records[node] = record
        self.scheduler.forget(node)
        self._plan(record, resume(record, now=now), now=now)
        if self.shell.reconciled_as_absent(record, claimed=False):
            self._resubmit(record, now=now)

    def _resubmit(self, record: OperationRecord, *, now: float) -> None:
        """Send the create again with the same key: an operator proved that no create
        went out before (X2), so treating it as in doubt would loop back to them."""
        resubmit = SendSubmit(
            submission_key=record.submission_key, attempt=record.submit_attempts, at=now
        )
        self._plan(record, (resubmit,), now=now)

    def busy_nodes(self) -> set[str]:
        """The call nodes with a request in flight."""
        return self.scheduler.busy_nodes()

    def let_go(self, node: str) -> None:
        """Stop driving an operation (terminal, released, or no longer ours)."""
        self.records.pop(node, None)
        self.scheduler.let_go(node)

    # --- leases (D1) -----------------------------------------------------------------

    def housekeep(self, *, now: float) -> None:
        """What keeps a worker's leases (:meth:`Claims.turn`: renew, claim rounds, shed,
        re-read what is held); single-process mode has none. Both forget the last polls
        of operations let go long ago."""
        self.scheduler.forget_old_let_go_polls(now, held=self.records)
        self.holding.turn(now, self, external_heartbeat=self.external_heartbeat)

    def next_housekeeping(self) -> float | None:
        """When :meth:`housekeep` has work next (None in single-process mode)."""
        return self.holding.next_turn(external_heartbeat=self.external_heartbeat)

    def heartbeat(self, now: float) -> None:
        """Renew the lease from a thread of the driver's own (any thread: it touches
        only the ledger's workers row and the lease deadline). A worker whose ledger
        thread is busy with a long queue of commits must not lose its lease for it;
        a process that is killed or stopped stops its heartbeat too, so takeover
        still happens exactly when it should."""
        self.holding.heartbeat(now)

    @property
    def last_census(self) -> Census | None:
        """What the last claim round saw of the whole ledger (a worker only)."""
        return self.holding.last_census

    def idle(self) -> bool:
        """Nothing left to drive: nothing held and, for a worker, no open operation in
        the ledger at the last claim round (others' leases may still run out)."""
        if self.records:
            return False
        if self.owner is None or not self.claim_all:
            return True
        census = self.last_census  # None: no claim round yet, nothing is known
        return census is not None and census.open_operations == 0

    def retire(self) -> int:
        """A clean stop: hand every held operation back at once (no lease wait) and
        forget this owner. Returns how many were released."""
        return self.holding.retire(self)

    # --- local intents (X4, X5, X7) --------------------------------------------------

    def cancel(
        self,
        call_node_id: str,
        *,
        now: float,
        requested_by: str = "caller",
        expected_version: int | None = None,
    ) -> CancelOutcome:
        """Ask for cancellation: bump the generation by CAS, then send (X5).
        ``expected_version``: written on that version of the row only (VersionConflict)."""

        def write(owner: str | None) -> tuple[CancelOutcome, Transition | None]:
            return self.shell.cancel(
                call_node_id,
                now=now,
                requested_by=requested_by,
                owner=owner,
                expected_version=expected_version,
            )

        outcome, transition = self._intent(call_node_id, write)
        if transition is not None:
            self._hold_intent(transition, now=now)
        return outcome

    def answer(
        self,
        call_node_id: str,
        answers: Mapping[str, Any],
        *,
        now: float,
        expected_version: int | None = None,
    ) -> OperationRecord:
        """Answer pending input keys of the current round (X4). ``expected_version``:
        written on that version of the row only (VersionConflict)."""

        def write(owner: str | None) -> Transition:
            return self.shell.answer(
                call_node_id, answers, now=now, owner=owner, expected_version=expected_version
            )

        transition = self._intent(call_node_id, write)
        self._hold_intent(transition, now=now)
        return transition.record

    def _intent(self, call_node_id: str, write: Callable[[str | None], T]) -> T:
        """Write a caller's intent: under this worker's lease if it holds the operation,
        else by version alone, as an operator would. Held here but fenced (the lease
        lapsed and another worker took it over): let it go and write it by version
        alone; the holder re-plans it at its next claim round (D1). Found by the
        simulator: the fenced write used to escape to the caller as an error."""
        owner = self.writer_of(call_node_id)
        try:
            return write(owner)
        except Fenced:
            if owner is None:
                raise
            self.stats["fenced"] += 1
            self.let_go(call_node_id)
            return write(None)

    def _hold_intent(self, transition: Transition, *, now: float) -> None:
        """Plan what an intent needs, where this engine drives the operation: alone on
        its ledger, or holding it. Another worker's operation is left to it (a
        request from here would be one more sender of a request that is not ours)."""
        record = transition.record
        if self.owner is not None and record.call_node_id not in self.records:
            return
        self.records[record.call_node_id] = record
        self._plan(record, transition.commands, now=now)

    # --- scheduling ------------------------------------------------------------------

    def next_wakeup(self) -> float | None:
        """The earliest planned request, or the moment polls waiting for a send slot
        ask for more (None when nothing is planned)."""
        if self.holding.held_back:
            # Past the lease's send margin nothing leaves until a renewal: a driver
            # woken at the planned (past) moment would only spin (found by the
            # simulator's lease-expiry worlds). Housekeeping turns still come.
            return None
        return self.scheduler.next_wakeup()

    def due(self, now: float, *, limit: int | None = None) -> list[Action]:
        """Pop the requests whose time has come, within the server's limits (at most
        ``limit`` of them: the driver's free sending capacity). Nothing leaves while
        this engine's lease is about to run out (D1)."""
        if self.holding.hold_back(now):
            return []
        shared = self.owner is not None
        # Grants are only for status reads queued for a send slot: with none queued
        # there is nothing to ask, and the driver passes here on every turn.
        queued = self.scheduler.poll_queue.values()
        if shared and any(queued):
            self._take_slots(now)
        actions = self.scheduler.due(now, self.records, shared=shared, limit=limit)
        if shared and any(queued):
            self._take_slots(now)
        return actions

    def _take_slots(self, now: float) -> None:
        """Give queued status reads send slots from each server's shared budget (X3)."""
        for server, count in self.scheduler.slot_wants(now):
            grant = self.shell.take_poll_slots(
                server, now=now, count=count, qps_max=self.scheduler.qps_max(server)
            )
            self.scheduler.assign_slots(server, grant.slots())

    def slot_missed(self, action: Action, *, now: float) -> None:
        """The driver could not send a poll within its slot: it waits for a new one."""
        self.stats["slots_missed"] += 1
        self.requeue(action, now=now)

    def held(self, action: Action, *, now: float) -> bool:
        """Asked by the driver at the moment it would send ``action``: True when a
        Retry-After that arrived since :meth:`due` holds it back (:meth:`Scheduler.held`)."""
        holds = action.call_node_id in self.records
        return self.scheduler.held(action, now=now, holds=holds)

    def requeue(self, action: Action, *, now: float) -> None:
        """The action was not carried out (the driver stopped, or a poll missed its
        slot): plan it again, unless something newer of its kind is planned."""
        record = self.records.get(action.call_node_id)
        if record is not None and isinstance(action.command, SendSubmit):
            # The create may have reached the server: its outcome is unknown, and
            # sending it again blind is what X2 forbids.
            self.scheduler.landed(action)
            lost = SubmitOutcomeLost(reason="the executor stopped while the create was sent")
            self._apply_and_plan(record, lost, now=now)
            self.scheduler.rearm(action)
            return
        self.scheduler.requeue(action, now=now, holds=record is not None)

    def wake(self, call_node_id: str, *, now: float) -> None:
        """A push notification says something changed: poll soon (X3: "listen for
        speed"), within the floors of :meth:`Scheduler.wake`; the poll is the truth."""
        record = self.records.get(call_node_id)
        if record is not None:
            self.scheduler.wake(record, now=now)

    def hint(
        self,
        *,
        operation_id: str | None,
        call_node_id: str | None,
        status: str | None,
        server: str | None,
        now: float,
    ) -> list[str]:
        """Something outside the poll (a webhook delivery) names an operation: wake the
        poll (:meth:`wake`) of each open operation held here that it names, and return
        those call nodes. It never touches a record. ``status``: the status the hint
        claims; one equal to the status last polled wakes nothing. ``server``: only
        operations at this server (a delivery verified by that server's own key)."""
        if call_node_id is None and operation_id is None:
            return []
        woken = []
        for node, record in list(self.records.items()):
            if record.is_terminal or record.state is State.RECONCILIATION_REQUIRED:
                continue
            if call_node_id is not None and node != call_node_id:
                continue
            if operation_id is not None and record.operation_id != operation_id:
                continue
            if server is not None and record.server.rstrip("/") != server.rstrip("/"):
                continue  # a delivery signed with one server's key names only its operations
            if status is not None and status == record.server_status_raw:
                continue  # nothing we have not polled already
            self.wake(node, now=now)
            woken.append(node)
        return woken

    # --- replies ---------------------------------------------------------------------

    def apply_reply(
        self, action: Action, outcome: Outcome, *, now: float
    ) -> OperationRecord | None:
        """Apply the reply to an action; returns the record as it now stands."""
        self.scheduler.replied(action, outcome.event, now=now)
        event = as_input_refusal(action.command, outcome.event)
        if event.execution_epoch is None:
            # Fence the reply to the epoch that issued the request (D1, R3).
            event = dataclasses.replace(event, execution_epoch=action.record.execution_epoch)
        record = self.records.get(action.call_node_id)
        if record is None:
            self.stats["stale_replies"] += 1
            return None
        if isinstance(event, InputRequestObserved) and outcome.payload is not None:
            # X4: the question and its form are kept before the round is recorded, so a
            # person (CLI, callback, worker log) can always see what a pending key asks.
            self.shell.keep_input_requests(action.call_node_id, outcome.payload)
        transition = self._apply(record, event, now=now, payload=outcome.payload)
        if transition is None:
            return self.records.get(action.call_node_id)
        if isinstance(event, (SubmitAcknowledged, SubmissionFound)):
            reused = self._id_reused(transition.record, now=now)
            if reused is not None:
                return reused
        self._plan(transition.record, transition.commands, now=now)
        return transition.record

    def _id_reused(self, record: OperationRecord, *, now: float) -> OperationRecord | None:
        """F1 "task id wrongly reused": an id the server also handed to another call
        node names operations whose results cannot be told apart, so none may be
        accepted through it; every open holder goes to an operator (X7). None when
        the id is this call node's alone."""
        holders = self.shell.sharing_operation_id(record)
        if all(r.call_node_id == record.call_node_id for r in holders):
            return None
        reason = (
            f"the server handed operation id {record.operation_id!r} to more than one call "
            f"node ({', '.join(sorted(r.call_node_id for r in holders))})"
        )
        for holder in holders:
            if holder.is_settled:
                continue
            self.scheduler.forget(holder.call_node_id)
            # From the stored row, whoever holds it in memory: a lost race is a
            # conflict, never an overwrite (L4).
            self._apply_and_plan(holder, ReconciliationEscalated(reason=reason), now=now)
        return self.records.get(record.call_node_id, record)

    def end_without_reply(self, action: Action) -> None:
        """The action ended with nothing to apply (an input delivery acknowledged): it
        is no longer in flight."""
        self.scheduler.end(action)

    def request_payload(self, call_node_id: str) -> dict[str, Any]:
        return self.shell.request_payload(call_node_id)

    def input_answers(self, record: OperationRecord, keys: tuple[str, ...]) -> dict[str, Any]:
        return self.shell.input_answers(record, keys)

    # --- internals -------------------------------------------------------------------

    def _apply(
        self,
        record: OperationRecord,
        event: Event,
        *,
        now: float,
        payload: bytes | None = None,
    ) -> Transition | None:
        """Decide and commit through the shell; a refused or stale event changes nothing
        (None). A write refused as Fenced lets the operation go; one that contradicts
        the stored row goes to an operator with the reason (X7)."""
        decided = self.shell.decide(record, event, now=now, holder=self, payload=payload)
        if decided.transition is not None:
            self.records[record.call_node_id] = decided.transition.record
            return decided.transition
        if decided.fenced:
            # Another worker took the operation over (our lease lapsed): the database
            # refused the write. Not ours to re-decide: let it go (D1).
            self.let_go(record.call_node_id)
            told = getattr(event, "poll_interval_s", None)
            if told is not None:
                # The server told this process so, whatever the ledger holds: it
                # floors this process's next poll should it claim it back (X3).
                self.scheduler.told_when_fenced(record.call_node_id, told)
        elif decided.integrity_error is not None and not isinstance(event, ReconciliationEscalated):
            exc = decided.integrity_error
            self._escalate(record, f"{type(exc).__name__}: {exc}", now=now)
        return None

    def writer_of(self, call_node_id: str) -> str | None:
        """Write as the lease holder only what this engine holds; anything else (an
        operation another worker drives) is an unowned write, like an operator's."""
        return self.owner if call_node_id in self.records else None

    def replan(
        self, lost: OperationRecord, fresh: OperationRecord | None, *, now: float
    ) -> OperationRecord | None:
        """After a lost race (the shell re-read the row): let it go when another
        executor took it over (``fresh`` None: fencing, D1), else hold the fresh record
        and plan what ITS state needs — a cancel or an answer written by another
        process must be sent (X4, X5) — and return it so the event is decided again.
        None: nothing left to decide."""
        if fresh is None:
            self.records.pop(lost.call_node_id, None)
            self.scheduler.forget(lost.call_node_id)
            return None
        self.records[fresh.call_node_id] = fresh
        if fresh.is_terminal:
            self._plan(fresh, (), now=now)
            return None
        self._plan(fresh, resume(fresh, now=now), now=now)
        return fresh

    def _escalate(self, record: OperationRecord, reason: str, *, now: float) -> None:
        """Hand an operation whose data contradicts itself to an operator (X7), from the
        stored row (whoever holds it in memory)."""
        fresh = self.shell.find(record.call_node_id)
        if fresh is None or fresh.is_settled:
            return
        self.scheduler.forget(fresh.call_node_id)
        self._apply_and_plan(fresh, ReconciliationEscalated(reason=reason), now=now)

    def _apply_and_plan(self, record: OperationRecord, event: Event, *, now: float) -> None:
        transition = self._apply(record, event, now=now)
        if transition is not None:
            self._plan(transition.record, transition.commands, now=now)

    def _plan(self, record: OperationRecord, commands: tuple[Command, ...], *, now: float) -> None:
        if record.is_terminal:
            self.records.pop(record.call_node_id, None)
            self.scheduler.finished(record.call_node_id)
        elif not record.may_poll:
            self.scheduler.stop_polling(record.call_node_id)
        for command in commands:
            if isinstance(command, REQUEST_COMMANDS):
                at = getattr(command, "at", now)
                self.scheduler.plan(record.call_node_id, command, at)
            elif isinstance(command, StartResultFetch):
                self._apply_and_plan(record, ResultFetchStarted(), now=now)
            elif isinstance(command, AcceptTerminal):
                if self.on_accepted is not None:
                    self.on_accepted(record)
            elif isinstance(command, AskInput):
                self._ask_input(record, command, now=now)
            elif isinstance(command, EscalateReconciliation) and self.on_escalated:
                self.on_escalated(record, command.reason)

    def _ask_input(self, record: OperationRecord, command: AskInput, *, now: float) -> None:
        if self.input_policy is None:
            return  # a human answers through the CLI; polling stays paused (X4)
        answers = self.input_policy(record, command)
        if answers:
            transition = self.shell.answer_record(
                record, answers, now=now, owner=self.writer_of(record.call_node_id)
            )
            self.records[record.call_node_id] = transition.record
            self._plan(transition.record, transition.commands, now=now)


__all__ = [
    "Action",
    "CallSpec",
    "CancelOutcome",
    "Engine",
    "InputPolicy",
    "ServerStatus",
]
