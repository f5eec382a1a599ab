"""The executor's decision loop without I/O: what to send, when, and what a reply means.

The engine owns everything the runtime decides between two network calls: which
operation's request is due (timers), how fast one server may be polled (a token
bucket shared by all its operations, X3), whether a server is cut off (a circuit
breaker, X9), and how a reply is applied (the core machine, then the ledger, SPEC
L4/L5). It never awaits, sleeps or reads a clock: ``now`` is an argument and the
jitter comes from the ``random.Random`` it is given. The asyncio executor
(:mod:`longcall.runtime.executor`) turns its actions into adapter calls; the simulator
(:mod:`longcall.sim`) turns them into simulated-server calls on virtual time. Both
therefore run the same decision code.

An :class:`Action` is one request to carry out. The driver reports back with
:meth:`Engine.apply_reply` (an adapter :class:`~longcall.adapters.base.Outcome`).

Several processes on one ledger (D1): an engine with an ``owner`` drives only the
operations it holds a lease on. It claims its fair share of the open operations
(:meth:`Engine.housekeep`: renew the lease, claim, shed a surplus, notice operator
writes), writes every step under its (owner, epoch) so the database refuses a stale
write (:class:`~longcall.ledger.Fenced`: the engine lets the operation go), sends
nothing once its lease is about to run out, and takes its polls' send slots from the
ledger's one budget per server (:mod:`longcall.ledger.budget`). Every decision takes
``now``; the simulator drives the same methods on virtual time. An engine without an
owner is the single-process mode: it must be the only driver of its ledger.
"""

from __future__ import annotations

import collections
import dataclasses
import random
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from longcall.adapters.base import Outcome, ToolBinding
from longcall.core import (
    DEFAULT_POLICY,
    OperationRecord,
    Policy,
    ServerStatus,
    State,
    Transition,
    new_operation,
    recovery_event,
    resume,
)
from longcall.core import commands as c
from longcall.core import events as e
from longcall.core.keys import canonical_json, check_call_node_id, request_digest
from longcall.core.record import evolve
from longcall.core.retry import CircuitBreaker, FailureKind
from longcall.core.states import NOT_POLLING_STATES
from longcall.errors import (
    RequestDigestMismatch,
)
from longcall.ledger import WORKER, Census, Fenced, Ledger, VersionSet
from longcall.runtime import leases
from longcall.runtime.leases import LeaseClock, LeasePolicy
from longcall.runtime.scheduler import REQUEST_COMMANDS, Action, Scheduler
from longcall.runtime.step import CancelOutcome, LedgerShell


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


T = TypeVar("T")

InputPolicy = Callable[[OperationRecord, c.AskInput], Mapping[str, Any] | None]
"""Answers an input request automatically (keys → values), or None to leave it to a human."""


class Engine:
    """Timers, limits and reply handling for every operation of one executor process."""

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
    ) -> None:
        self.owner = owner
        self.versions = versions
        """The (protocol, adapter version) pairs this engine runs: it claims only
        operations bound to one of them, and its fair share counts only those (None:
        every version, one build on the ledger)."""
        """The lease holder this engine writes as (None: single-process mode)."""
        self.kind = kind
        self.lease = lease or LeasePolicy()
        self.claim_all = claim_all
        """True: take a fair share of every open operation (a worker). False: claim
        only :attr:`wanted` call nodes (a caller waiting on its own)."""
        self.wanted: set[str] = set()
        self.clock = LeaseClock(self.lease)
        """The deadlines of this worker's lease (unused in single-process mode)."""
        self.last_census: Census | None = None
        """What the last claim round saw of the whole ledger (a worker only)."""
        self.external_heartbeat = False
        """True when the driver renews the lease from its own thread (:meth:`heartbeat`)."""
        self.policy = policy
        self.input_policy = input_policy
        self.on_accepted = on_accepted
        self.on_escalated = on_escalated
        self.records: dict[str, OperationRecord] = {}
        """The operations this engine drives, as last committed."""
        self.stats: collections.Counter[str] = collections.Counter(
            stale_replies=0,
            conflicts=0,
            integrity_failures=0,
            requests=0,
            fenced=0,
            claimed=0,
            takeovers=0,
        )
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
        call); should another process create it first, attach to that one instead.

        The record and its arguments are committed before any request is planned.
        ``version``: bind the new operation to this adapter version instead of the
        binding's. If this engine does not run it, the record is created unowned and
        left to a worker that does (claims filter by version); nothing is planned.
        """
        digest = request_digest(spec.binding.tool_name, dict(spec.arguments))
        binding = spec.binding
        transition = new_operation(
            call_node_id=spec.call_node_id,
            request_digest=digest,
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
            caller_key=self.shell.caller_key,
            server_store_id=binding.store_id,
        )
        record = transition.record
        if spec.shadow_of is not None:
            record = evolve(record, shadow_of=spec.shadow_of)
        request = canonical_json(dict(spec.arguments))
        if version is not None and version != binding.adapter_version:
            record = evolve(record, adapter_version=version)
            if not self.runs(record):
                # Routed to a version this engine does not run: created unowned, for a
                # worker that runs it to claim (R2; claims filter by version).
                first = self.shell.create(record, request, owner=None)
                if first is not None:
                    return self.attach_to(first, binding.tool_name, spec.arguments, now=now)
                return record
        if self.owner is not None:
            self._ensure_registered(now)
            self.wanted.add(spec.call_node_id)
        first = self.shell.create(record, request, owner=self.owner)
        if first is not None:
            return self.attach_to(first, binding.tool_name, spec.arguments, now=now)
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
        if not existing.is_terminal and call_node_id not in self.records:
            if not self.runs(existing):
                pass  # bound to a version another worker runs: wait on the ledger
            elif self.owner is None:
                self.adopt(existing, now=now)
            else:
                # Held by a live worker: wait on the ledger; claimed only if nobody holds
                # it (or its holder's lease lapsed), now or at a later claim round.
                self.wanted.add(call_node_id)
                self._claim_nodes([call_node_id], now=now)
        return self.records.get(call_node_id, existing)

    def resume_all(self, *, now: float) -> int:
        """Take over open operations in the ledger (SPEC L7): claim a higher epoch,
        recover in-doubt creates, and re-plan each one. Returns how many.

        With an owner: registers the lease holder, and claims nothing yet: claims come
        in :meth:`housekeep` rounds, the first one claim interval later, up to this
        engine's fair share of what no live worker holds. Without: every open
        operation, at once."""
        if self.owner is not None:
            held = len(self.records)
            self.housekeep(now=now)
            return len(self.records) - held
        count = 0
        for record in self.shell.open_records():
            if self.runs(record):
                self.adopt(record, now=now)
                count += 1
        return count

    def runs(self, record: OperationRecord) -> bool:
        """Whether this engine runs the adapter version ``record`` is bound to."""
        return self.versions is None or (record.protocol, record.adapter_version) in self.versions

    def adopt(self, record: OperationRecord, *, now: float) -> None:
        """Single-process mode: take one stored open operation over with a new epoch
        (an unowned write) and plan what it needs. With an owner, claims do this."""
        if record.is_terminal:
            self.records.pop(record.call_node_id, None)
            return
        proven_absent = self._proven_absent(record, claimed=False)
        claim = e.ExecutionClaimed(new_epoch=record.execution_epoch + 1)
        transition = self._apply(record, claim, now=now)
        if transition is None:
            return
        self.stats["recoveries"] += 1
        self._taken_over(transition.record, proven_absent=proven_absent, now=now)

    def _proven_absent(self, record: OperationRecord, *, claimed: bool) -> bool:
        """An operator's proof of absence (NOT_FOUND_SAFE written by a manual
        reconciliation, nothing committed since but, with ``claimed``, the claim that
        just took it) means no create went out after it: resubmit with the same key
        (X2). Treating it as an in-doubt create would send it straight back to
        reconciliation, for ever."""
        return self.shell.reconciled_as_absent(record, claimed=claimed)

    def _taken_over(self, record: OperationRecord, *, proven_absent: bool, now: float) -> None:
        """Plan a record this engine just took over at a new epoch (L7): resume it, and
        treat a create that may have left as in doubt (X2)."""
        node = record.call_node_id
        self.records[node] = record
        self.scheduler.forget(node)
        self._plan(record, resume(record, now=now), now=now)
        self.scheduler.keep_poll_floor(record)
        if proven_absent:
            resubmit = c.SendSubmit(
                submission_key=record.submission_key, attempt=record.submit_attempts, at=now
            )
            self._plan(record, (resubmit,), now=now)
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
        if self.owner is not None:
            return self._refresh_held(now=now)
        changed = 0
        versions = self.shell.open_versions()
        for node, version in versions.items():
            known = self.records.get(node)
            if known is None and not adopt_new:
                continue
            if known is None or known.version != version:
                record = self.shell.get(node)
                if not self.runs(record):
                    self._let_go(node)  # bound to a version this engine does not run
                    continue
                changed += 1
                self.adopt(record, now=now)
        for node in [n for n in self.records if n not in versions]:
            self._let_go(node)
        return changed

    def _refresh_held(self, *, now: float) -> int:
        assert self.owner is not None
        held = self.shell.held_versions(self.owner)
        busy = self.scheduler.busy_nodes()
        changed = 0
        for node, known in list(self.records.items()):
            if node in busy:
                continue  # its reply's write decides: applied, or refused as Fenced (D1)
            version = held.get(node)
            if version is None:
                self._let_go(node)  # accepted, released, or taken over by another worker
                continue
            if version != known.version:
                record = self.shell.find(node)
                if record is None or record.is_terminal:
                    self._let_go(node)
                    continue
                changed += 1
                self.records[node] = record
                self.scheduler.forget(node)
                self._plan(record, resume(record, now=now), now=now)
                if self._proven_absent(record, claimed=False):
                    resubmit = c.SendSubmit(
                        submission_key=record.submission_key,
                        attempt=record.submit_attempts,
                        at=now,
                    )
                    self._plan(record, (resubmit,), now=now)
        return changed

    def _let_go(self, node: str) -> None:
        """Stop driving an operation (terminal, released, or no longer ours)."""
        self.records.pop(node, None)
        self.scheduler.let_go(node)

    # --- leases (D1) -----------------------------------------------------------------

    def housekeep(self, *, now: float) -> None:
        """What keeps a worker's leases: renew when due; at each claim round, take a
        fair share of what nobody live holds (a caller: only its wanted call nodes),
        shed a surplus, and re-plan what an operator changed. Single-process mode has
        no lease to keep; both forget the last polls of operations let go long ago."""
        self.scheduler.forget_old_let_go_polls(now, held=self.records)
        if self.owner is None:
            return
        self._ensure_registered(now)
        if self.clock.lapsed_at is not None:
            # The driver's heartbeat found the lease lapsed (this process was paused
            # or cut off): count it; what others took is found at the claim round's
            # re-read, or by the database refusing the write (Fenced).
            self.clock.lapsed_at = None
            self.stats["lease_lapses"] += 1
            self.clock.claim_soon(now)
        elif not self.external_heartbeat and self.clock.renew_due(now):
            self._renew(now)
        if self.clock.claim_due(now):
            if self.claim_all:
                self._claim_share(now)
            else:
                missing = [n for n in self.wanted if n not in self.records]
                if missing:
                    self._claim_nodes(missing, now=now)
            self._refresh_held(now=now)

    def next_housekeeping(self) -> float | None:
        """When :meth:`housekeep` has work next (None in single-process mode)."""
        if self.owner is None:
            return None
        return self.clock.next_turn(external_heartbeat=self.external_heartbeat)

    def heartbeat(self, now: float) -> None:
        """Renew the lease from a thread of the driver's own (any thread: it touches
        only the ledger's workers row and the lease deadline). A worker whose ledger
        thread is busy with a long queue of commits must not lose its lease for it;
        a process that is killed or stopped stops its heartbeat too, so takeover
        still happens exactly when it should."""
        if self.owner is None or not self.clock.registered:
            return
        if not self.shell.renew(
            self.owner, kind=self.kind, now=now, lease_s=self.lease.lease_s, versions=self.versions
        ):
            self.clock.lapsed_at = now
        self.clock.renewed(now, next_renew=False)

    def idle(self) -> bool:
        """Nothing left to drive: nothing held and, for a worker, no open operation in
        the ledger at the last claim round (others' leases may still run out)."""
        if self.records:
            return False
        if self.owner is None or not self.claim_all:
            return True
        census = self.last_census  # None: no claim round yet, nothing is known
        return census is not None and census.open_operations == 0

    def lease_valid(self, now: float) -> bool:
        """Whether a new request may leave now: the lease has the send margin left."""
        return self.owner is None or self.clock.valid(now)

    def retire(self) -> int:
        """A clean stop: hand every held operation back at once (no lease wait) and
        forget this owner. Returns how many were released."""
        if self.owner is None or not self.clock.registered:
            return 0
        released = self.shell.retire(self.owner)
        for node in list(self.records):
            self._let_go(node)
        self.clock.stop()
        return released

    def _ensure_registered(self, now: float) -> None:
        if self.clock.registered:
            return
        assert self.owner is not None
        self.shell.register(
            self.owner, kind=self.kind, now=now, lease_s=self.lease.lease_s, versions=self.versions
        )
        self.clock.start(now)

    def _renew(self, now: float) -> None:
        assert self.owner is not None
        renewed = self.shell.renew(
            self.owner, kind=self.kind, now=now, lease_s=self.lease.lease_s, versions=self.versions
        )
        if not renewed:
            # Lapsed (paused, cut off): others may have taken some of ours. What we
            # still hold is read back at once; a stale write would be fenced anyway.
            self.stats["lease_lapses"] += 1
            self._refresh_held(now=now)
        self.clock.renewed(now)

    def _claim_share(self, now: float) -> None:
        """Hold about ``open / live workers`` operations: claim up to that, shed above
        it (plus the slack) what has no request in flight. With :attr:`versions`, the
        share is taken per (protocol, adapter version) this engine runs, among the
        workers that run it: a version only some workers run is shared by those. One
        census read serves every version."""
        assert self.owner is not None
        if self.versions is None:
            census = self.shell.census(self.owner, now=now)
            self._take_share(census, list(self.records), None, now=now)
            self.last_census = census
            return
        by_version = self.shell.census_by_version(self.owner, now=now, versions=self.versions)
        held: dict[tuple[str, str], list[str]] = {}
        for node, record in self.records.items():
            held.setdefault((record.protocol, record.adapter_version), []).append(node)
        for pair in sorted(self.versions):
            self._take_share(by_version[pair], held.get(pair, []), frozenset({pair}), now=now)
        self.last_census = leases.combined(by_version.values())

    def _take_share(
        self, census: Census, held: list[str], versions: VersionSet | None, *, now: float
    ) -> None:
        """Claim up to the share ``census`` gives of ``versions`` (None: every version),
        or shed above it; ``held``: the nodes of those versions held now, oldest first."""
        assert self.owner is not None
        share = leases.fair_share(census)
        limit = leases.claim_limit(census, held=len(held), share=share, policy=self.lease)
        if limit and self._claim(now=now, limit=limit, versions=versions):
            held = [
                node
                for node, r in self.records.items()
                if versions is None or (r.protocol, r.adapter_version) in versions
            ]
        release = leases.to_shed(
            held,
            share=share,
            busy=self.scheduler.busy_nodes(),
            wanted=self.wanted,
            policy=self.lease,
        )
        if release is not None:
            self.shell.release(self.owner, release)
            self.stats["released"] += len(release)
            for node in release:
                self._let_go(node)

    def _claim_nodes(self, nodes: list[str], *, now: float) -> None:
        self._ensure_registered(now)
        self._claim(now=now, limit=len(nodes), nodes=nodes)

    def _claim(
        self,
        *,
        now: float,
        limit: int,
        nodes: list[str] | None = None,
        versions: VersionSet | None = None,
    ) -> int:
        """Claim up to ``limit`` operations (of ``nodes``, or any due); how many it took."""
        assert self.owner is not None
        versions = self.versions if versions is None else versions
        taken = 0
        for claimed in self.shell.claim(
            self.owner, now=now, limit=limit, nodes=nodes, versions=versions
        ):
            record = claimed.record
            self.stats["claimed"] += 1
            if claimed.taken_from is not None:
                self.stats["takeovers"] += 1  # its holder's lease had lapsed
            if record.execution_epoch > 1:
                self.stats["recoveries"] += 1  # driven before, by a process now gone
            proven_absent = self._proven_absent(record, claimed=True)
            self._taken_over(record, proven_absent=proven_absent, now=now)
            taken += 1
        return taken

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
            self._let_go(call_node_id)
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
        if self.clock.held_back:
            # Past the lease's send margin nothing leaves until a renewal: a driver
            # woken at the planned (past) moment would only spin (found by the
            # simulator's lease-expiry worlds). Housekeeping turns still come.
            return None
        return self.scheduler.next_wakeup()

    def due(self, now: float, *, limit: int | None = None) -> list[Action]:
        """Pop the requests whose time has come, within the server's limits (at most
        ``limit`` of them: the driver's free sending capacity). Nothing leaves while
        this engine's lease is about to run out (D1)."""
        if not self.lease_valid(now):
            self.clock.held_back = True
            return []
        self.clock.held_back = False
        shared = self.owner is not None
        if shared:
            self._take_slots(now)
        actions = self.scheduler.due(now, self.records, shared=shared, limit=limit)
        if shared:
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
        """Called by the driver at the moment it would send ``action``: True when a
        429/503's Retry-After that reached this process since :meth:`due` issued it
        holds its server past ``now``. The action must not leave then; it is planned
        again for the end of the wait (X3, X9). Between ``due`` and the adapter call an
        event loop runs other replies: a poll issued an instant before a 429 arrived
        left after it (found by the simulator's worlds of workers, whose loop lags)."""
        holds = action.call_node_id in self.records
        return self.scheduler.held(action, now=now, holds=holds)

    def requeue(self, action: Action, *, now: float) -> None:
        """The action was not carried out (the driver stopped, or a poll missed its
        slot): plan it again, unless something newer of its kind is planned."""
        record = self.records.get(action.call_node_id)
        if record is not None and isinstance(action.command, c.SendSubmit):
            # The create may have reached the server: its outcome is unknown, and
            # sending it again blind is what X2 forbids.
            self.scheduler.landed(action)
            lost = e.SubmitOutcomeLost(reason="the executor stopped while the create was sent")
            self._apply_and_plan(record, lost, now=now)
            self.scheduler.rearm(action)
            return
        self.scheduler.requeue(action, now=now, holds=record is not None)

    def wake(self, call_node_id: str, *, now: float) -> None:
        """A push notification says something changed: poll soon (X3: "listen for
        speed"), but not sooner than the server's interval after the previous poll of
        this process, and not during a failure backoff; the poll, not the
        notification, is the truth."""
        record = self.records.get(call_node_id)
        if record is not None:
            self.scheduler.wake(record, now=now)

    # --- replies ---------------------------------------------------------------------

    def apply_reply(
        self, action: Action, outcome: Outcome, *, now: float
    ) -> OperationRecord | None:
        """Apply the reply to an action; returns the record as it now stands."""
        self.scheduler.replied(action, outcome.event, now=now)
        event = _refusal_of_answer(action.command, outcome.event)
        if event.execution_epoch is None:
            # Fence the reply to the epoch that issued the request (D1, R3).
            event = dataclasses.replace(event, execution_epoch=action.record.execution_epoch)
        record = self.records.get(action.call_node_id)
        if record is None:
            self.stats["stale_replies"] += 1
            return None
        if isinstance(event, e.InputRequestObserved) and outcome.payload is not None:
            # X4: the question and its form are kept before the round is recorded, so a
            # person (CLI, callback, worker log) can always see what a pending key asks.
            self.shell.keep_input_requests(action.call_node_id, outcome.payload)
        transition = self._apply(record, event, now=now, payload=outcome.payload)
        if transition is None:
            return self.records.get(action.call_node_id)
        if isinstance(event, (e.SubmitAcknowledged, e.SubmissionFound)):
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
            self._apply_and_plan(holder, e.ReconciliationEscalated(reason=reason), now=now)
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
        event: e.Event,
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
            self._let_go(record.call_node_id)
            told = getattr(event, "poll_interval_s", None)
            if told is not None:
                # The server told this process so, whatever the ledger holds: it
                # floors this process's next poll should it claim it back (X3).
                self.scheduler.told_when_fenced(record.call_node_id, told)
        elif decided.integrity_error is not None and not isinstance(
            event, e.ReconciliationEscalated
        ):
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
        self._apply_and_plan(fresh, e.ReconciliationEscalated(reason=reason), now=now)

    def _apply_and_plan(self, record: OperationRecord, event: e.Event, *, now: float) -> None:
        transition = self._apply(record, event, now=now)
        if transition is not None:
            self._plan(transition.record, transition.commands, now=now)

    def _plan(
        self, record: OperationRecord, commands: tuple[c.Command, ...], *, now: float
    ) -> None:
        if record.is_terminal:
            self.records.pop(record.call_node_id, None)
            self.scheduler.finished(record.call_node_id)
        elif record.state in NOT_POLLING_STATES or (
            record.state is State.INPUT_REQUIRED and record.input_keys_pending
        ):
            self.scheduler.stop_polling(record.call_node_id)
        for command in commands:
            if isinstance(command, REQUEST_COMMANDS):
                at = getattr(command, "at", now)
                self.scheduler.plan(record.call_node_id, command, at)
            elif isinstance(command, c.StartResultFetch):
                self._apply_and_plan(record, e.ResultFetchStarted(), now=now)
            elif isinstance(command, c.AcceptTerminal):
                if self.on_accepted is not None:
                    self.on_accepted(record)
            elif isinstance(command, c.AskInput):
                self._ask_input(record, command, now=now)
            elif isinstance(command, c.EscalateReconciliation) and self.on_escalated:
                self.on_escalated(record, command.reason)

    def _ask_input(self, record: OperationRecord, command: c.AskInput, *, now: float) -> None:
        if self.input_policy is None:
            return  # a human answers through the CLI; polling stays paused (X4)
        answers = self.input_policy(record, command)
        if answers:
            transition = self.shell.answer_record(
                record, answers, now=now, owner=self.writer_of(record.call_node_id)
            )
            self.records[record.call_node_id] = transition.record
            self._plan(transition.record, transition.commands, now=now)


_REFUSED_ANSWER = frozenset({FailureKind.BAD_REQUEST, FailureKind.VALIDATION})
"""How a server says "this answer is wrong": it keeps waiting for a better one."""


def _refusal_of_answer(command: c.Command, event: e.Event) -> e.Event:
    """A delivery of answers the server refused as invalid is an InputRefused of that
    round's keys (X4): a person answers again, instead of the operation going to an
    operator with the bad answer stored for every resend."""
    if (
        isinstance(command, c.SendInputResponse)
        and isinstance(event, e.RequestFailed)
        and event.failure in _REFUSED_ANSWER
    ):
        return e.InputRefused(
            input_round=command.input_round,
            keys=command.keys,
            reason=event.detail or event.failure.value,
            execution_epoch=event.execution_epoch,
        )
    return event


__all__ = [
    "Action",
    "CallSpec",
    "CancelOutcome",
    "Engine",
    "InputPolicy",
    "ServerStatus",
]
