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
import heapq
import itertools
import json
import math
import random
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from longcall.adapters.base import Outcome, ToolBinding
from longcall.core import (
    DEFAULT_POLICY,
    TERMINAL_STATES,
    OperationRecord,
    Policy,
    ServerStatus,
    State,
    Transition,
    handle,
    new_operation,
    recovery_event,
    resume,
)
from longcall.core import commands as c
from longcall.core import events as e
from longcall.core.keys import canonical_json, check_call_node_id, request_digest
from longcall.core.record import evolve
from longcall.core.retry import CircuitBreaker, FailureKind
from longcall.core.schedule import TokenBucket, WindowLimit, poll_delay_s
from longcall.core.states import NOT_POLLING_STATES
from longcall.errors import (
    ConflictError,
    IllegalTransition,
    IntegrityError,
    MissingPayload,
    RequestDigestMismatch,
    StaleEvent,
)
from longcall.ledger import WORKER, Census, Fence, Fenced, Ledger, VersionSet
from longcall.ledger.budget import GRANT_HORIZON_S, SLOT_VALID_S
from longcall.runtime import inputs
from longcall.runtime.step import commit

REQUEST_BLOB = "request"
FORGET_LET_GO_POLL_S = 3600.0
"""How long a process remembers its last poll of an operation it let go (a claim back
within that time keeps the server's interval after it, X3 rule 1)."""
SURPLUS_MIN = 2
"""A worker keeps at least this many operations above its fair share before shedding."""
LOST_RACE_RETRIES = 3
"""How often one event is decided again after losing a compare-and-set race (L4)."""

# Commands that become a request to the server, in the order a tie is served.
_REQUEST_COMMANDS: tuple[type[c.Command], ...] = (
    c.SendCancel,
    c.SendSubmit,
    c.LookupSubmission,
    c.SendInputResponse,
    c.FetchResult,
    c.Poll,
)
_PRIORITY = {cls.__name__: rank for rank, cls in enumerate(_REQUEST_COMMANDS)}
# Requests that read an operation's status from the server: with several workers they
# all draw send slots from the server's one budget (X3) — a result fetch is a
# ``tasks/get`` too in 2026-07-28, and the server's load is what the cap protects.
_BUDGETED = frozenset({"Poll", "FetchResult"})


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
class LeasePolicy:
    """The lease numbers of a worker (docs/design/leases-and-fencing.md says why)."""

    lease_s: float = 30.0
    """How long a lease lasts without renewal: a worker that stops (killed, paused,
    cut off) loses its operations to the others this long after its last renewal."""
    renew_every_s: float = 10.0
    """Two renewals may fail in a row before the lease runs out."""
    send_margin_s: float = 5.0
    """No new request leaves when the lease has less than this left."""
    claim_every_s: float = 1.0
    """How often the worker looks for operations to take (and for operator writes)."""
    claim_batch: int = 500
    """At most this many operations are taken in one claim transaction."""
    surplus_slack: float = 0.25
    """A worker sheds operations only when it holds more than its fair share plus this
    fraction of it (and at least ``SURPLUS_MIN`` more), and claims only below its share:
    between the two each worker stays put, so operations do not ping-pong."""

    def __post_init__(self) -> None:
        if not 0 < self.renew_every_s < self.lease_s - self.send_margin_s:
            raise ValueError("need 0 < renew_every_s < lease_s - send_margin_s")

    @classmethod
    def of(cls, lease_s: float, **changes: Any) -> LeasePolicy:
        """A lease of ``lease_s`` with the default proportions: renewed every third of
        it, no new request in its last sixth, claim rounds at most every second."""
        if lease_s <= 0:
            raise ValueError(f"lease_s must be > 0, got {lease_s!r}")
        return cls(
            lease_s=lease_s,
            renew_every_s=lease_s / 3,
            send_margin_s=lease_s / 6,
            claim_every_s=min(1.0, lease_s / 6),
            **changes,
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Action:
    """One request for the driver to send, for one operation at one execution epoch."""

    call_node_id: str
    server: str
    command: c.Command
    record: OperationRecord
    """The record as it was when the action was issued (its epoch fences the reply)."""
    not_after: float | None = None
    """A poll's send slot ends here: later than this it must not leave (X3, the shared
    budget); the driver reports :meth:`Engine.slot_missed` instead."""

    @property
    def kind(self) -> str:
        return self.command.name

    def slot_passed(self, now: float) -> bool:
        """Whether the send slot this action holds has ended at ``now`` (never, without
        one): every driver asks this, before the adapter call and as the bytes leave."""
        return self.not_after is not None and now > self.not_after


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CancelOutcome:
    """What a cancel call achieved (X5): never a silent no-op."""

    outcome: str
    """``requested``, ``cancelled``, ``already_terminal`` or ``not_cancellable``."""
    cancel_generation: int
    status: str | None = None
    detail: str = ""


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
        self.ledger = ledger
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
        self._lease_until = -math.inf
        self.last_census: Census | None = None
        """What the last claim round saw of the whole ledger (a worker only)."""
        self.external_heartbeat = False
        """True when the driver renews the lease from its own thread (:meth:`heartbeat`)."""
        self._lapsed_at: float | None = None
        """When the heartbeat found the lease lapsed, until the next claim round counts it."""
        self._held_back = False
        """:meth:`due` found the lease too short to send: nothing is due (and
        :meth:`next_wakeup` plans no request) until the lease is renewed."""
        self._registered = False
        self._next_renew = 0.0
        self._next_claim = 0.0
        self._poll_queue: dict[str, collections.deque[tuple[str, str, int]]] = {}
        """Per server, the status reads (node, kind, plan) due and waiting for a slot."""
        self._slot_of: dict[tuple[str, str], float] = {}
        """The send slot assigned to an operation's next status read."""
        self._granted_until: dict[str, float] = {}
        """Per server, the last send slot this engine was granted."""
        self.rng = rng
        self.policy = policy
        self.poll_qps_max = poll_qps_max
        self.server_qps_max = dict(server_qps_max or {})
        """Per-server caps that replace ``poll_qps_max`` (a servers file's, C1)."""
        self.poll_burst = poll_burst
        self.input_policy = input_policy
        self.on_accepted = on_accepted
        self.on_escalated = on_escalated
        self._breaker_template = breaker or CircuitBreaker()
        self.records: dict[str, OperationRecord] = {}
        self._timers: list[tuple[float, int, int, str, str]] = []
        self._pending: dict[tuple[str, str], tuple[float, int, c.Command]] = {}
        self._token_held: set[tuple[str, str]] = set()
        self._in_flight: set[tuple[str, str]] = set()
        self._deferred: set[tuple[str, str]] = set()
        self._last_poll_at: dict[str, float] = {}
        """When each operation's last poll left: a push never polls sooner than the
        server's interval after it (X3 rule 1)."""
        self._let_go_polls: collections.deque[tuple[float, str]] = collections.deque()
        """(last poll, node) of the operations let go, in the order they were let go."""
        self._told_when_fenced: dict[str, float] = {}
        """The poll interval of a reply whose write was refused as Fenced (the ledger
        never learnt it), for as long as :attr:`_last_poll_at` remembers the poll."""
        self._not_before: dict[str, float] = {}
        """Per server: a 429/503's Retry-After holds every request to it until then (X3,
        X9), whichever operation's request met it (found by the simulator's Retry-After
        gate), and also one issued before the Retry-After arrived but not yet sent
        (:meth:`held`)."""
        self._seq = itertools.count()
        self._buckets: dict[str, TokenBucket] = {}
        self._windows: dict[str, WindowLimit] = {}
        self.breakers: dict[str, CircuitBreaker] = {}
        self.stats: dict[str, int] = collections.Counter(
            stale_replies=0,
            conflicts=0,
            integrity_failures=0,
            requests=0,
            fenced=0,
            claimed=0,
            takeovers=0,
        )
        self.polls_by_server: collections.Counter[str] = collections.Counter()
        self.failures_by_server: collections.Counter[str] = collections.Counter()

    # --- intake ----------------------------------------------------------------------

    def start_call(
        self, spec: CallSpec, *, now: float, version: str | None = None
    ) -> OperationRecord:
        """Create the operation, or attach to the existing one of this call node (X2).

        The record and its arguments are committed before any request is planned.
        ``version``: bind the new operation to this adapter version instead of the
        binding's. If this engine does not run it, the record is created unowned and
        left to a worker that does (claims filter by version); nothing is planned.
        """
        attached = self.attach(spec.call_node_id, spec.binding.tool_name, spec.arguments, now=now)
        if attached is not None:
            return attached
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
            caller_key=self.ledger.caller_key,
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
                self.ledger.create(record, blobs={REQUEST_BLOB: request}, owner=None)
                return record
        if self.owner is not None:
            self._ensure_registered(now)
            self.wanted.add(spec.call_node_id)
        self.ledger.create(record, blobs={REQUEST_BLOB: request}, owner=self.owner)
        self.records[spec.call_node_id] = record
        self._plan(record, transition.commands, now=now)
        return record

    def attach(
        self, call_node_id: str, tool_name: str, arguments: Mapping[str, Any], *, now: float
    ) -> OperationRecord | None:
        """The existing operation of this call node (taken over if open), or None when
        the node is new. The same node with another request is refused (X2)."""
        existing = self.ledger.find(call_node_id)
        if existing is None:
            return None
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
        for record in self.ledger.list_by_state(*(s for s in State if s not in TERMINAL_STATES)):
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
        if record.state is not State.NOT_FOUND_SAFE:
            return False
        history = self.ledger.history(record.call_node_id)
        before = history[:-1] if claimed else history
        return bool(before) and before[-1].event == "ReconciledManually"

    def _taken_over(self, record: OperationRecord, *, proven_absent: bool, now: float) -> None:
        """Plan a record this engine just took over at a new epoch (L7): resume it, and
        treat a create that may have left as in doubt (X2)."""
        node = record.call_node_id
        self.records[node] = record
        self._forget_timers(node)
        self._plan(record, resume(record, now=now), now=now)
        last = self._last_poll_at.get(node)
        planned = self._pending.get((node, "Poll"))
        if last is not None and planned is not None:
            # This process polled it before it was let go (a rollback's rebind, a lease
            # lost and won back): the server's interval after that poll still stands
            # (X3 rule 1); the stored record does not know of it.
            told = self._told_when_fenced.pop(node, None)
            at = last + self._poll_floor_s(record, told=told)
            if planned[0] < at:
                self._push(node, "Poll", planned[2], at)
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
        versions = self.ledger.open_versions()
        for node, version in versions.items():
            known = self.records.get(node)
            if known is None and not adopt_new:
                continue
            if known is None or known.version != version:
                record = self.ledger.get(node)
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
        held = self.ledger.held_versions(self.owner)
        busy = {node for node, _kind in self._in_flight}
        changed = 0
        for node, known in list(self.records.items()):
            if node in busy:
                continue  # its reply's write decides: applied, or refused as Fenced (D1)
            version = held.get(node)
            if version is None:
                self._let_go(node)  # accepted, released, or taken over by another worker
                continue
            if version != known.version:
                record = self.ledger.find(node)
                if record is None or record.is_terminal:
                    self._let_go(node)
                    continue
                changed += 1
                self.records[node] = record
                self._forget_timers(node)
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
        self._forget_timers(node)
        # Its last poll is kept: should this process claim it back, the server's
        # interval after that poll still floors the next one (:meth:`_taken_over`).
        last = self._last_poll_at.get(node)
        if last is not None:
            self._let_go_polls.append((last, node))

    def _forget_old_let_go_polls(self, now: float) -> None:
        """Drop the kept last polls of let-go operations older than
        ``FORGET_LET_GO_POLL_S``, oldest first (no scan of everything held)."""
        kept = self._let_go_polls
        while kept and now - kept[0][0] > FORGET_LET_GO_POLL_S:
            at, node = kept.popleft()
            if node not in self.records and self._last_poll_at.get(node) == at:
                del self._last_poll_at[node]
                self._told_when_fenced.pop(node, None)

    # --- leases (D1) -----------------------------------------------------------------

    def housekeep(self, *, now: float) -> None:
        """What keeps a worker's leases: renew when due; at each claim round, take a
        fair share of what nobody live holds (a caller: only its wanted call nodes),
        shed a surplus, and re-plan what an operator changed. Single-process mode has
        no lease to keep; both forget the last polls of operations let go long ago."""
        self._forget_old_let_go_polls(now)
        if self.owner is None:
            return
        self._ensure_registered(now)
        if self._lapsed_at is not None:
            # The driver's heartbeat found the lease lapsed (this process was paused
            # or cut off): count it; what others took is found at the claim round's
            # re-read, or by the database refusing the write (Fenced).
            self._lapsed_at = None
            self.stats["lease_lapses"] += 1
            self._next_claim = min(self._next_claim, now)
        elif not self.external_heartbeat and now >= self._next_renew:
            self._renew(now)
        if now >= self._next_claim:
            self._next_claim = now + self.lease.claim_every_s
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
        if self.external_heartbeat:
            return self._next_claim
        return min(self._next_renew, self._next_claim)

    def heartbeat(self, now: float) -> None:
        """Renew the lease from a thread of the driver's own (any thread: it touches
        only the ledger's workers row and the lease deadline). A worker whose ledger
        thread is busy with a long queue of commits must not lose its lease for it;
        a process that is killed or stopped stops its heartbeat too, so takeover
        still happens exactly when it should."""
        if self.owner is None or not self._registered:
            return
        lease_s = self.lease.lease_s
        if not self.ledger.renew_worker(self.owner, now=now, lease_s=lease_s):
            self.ledger.register_worker(
                self.owner, kind=self.kind, now=now, lease_s=lease_s, versions=self.versions
            )
            self._lapsed_at = now
        self._lease_until = now + lease_s
        self._held_back = False

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
        return self.owner is None or now < self._lease_until - self.lease.send_margin_s

    def retire(self) -> int:
        """A clean stop: hand every held operation back at once (no lease wait) and
        forget this owner. Returns how many were released."""
        if self.owner is None or not self._registered:
            return 0
        released = self.ledger.retire_worker(self.owner)
        for node in list(self.records):
            self._let_go(node)
        self._registered = False
        self._lease_until = -math.inf
        return released

    def _ensure_registered(self, now: float) -> None:
        if self._registered:
            return
        assert self.owner is not None
        self.ledger.register_worker(
            self.owner, kind=self.kind, now=now, lease_s=self.lease.lease_s, versions=self.versions
        )
        self._registered = True
        self._lease_until = now + self.lease.lease_s
        self._held_back = False
        self._next_renew = now + self.lease.renew_every_s
        # The first claim round waits one interval, so that workers started together
        # see each other in the census and split the work at once: otherwise the
        # first would take everything and shed most of it again.
        self._next_claim = now + self.lease.claim_every_s

    def _renew(self, now: float) -> None:
        assert self.owner is not None
        if not self.ledger.renew_worker(self.owner, now=now, lease_s=self.lease.lease_s):
            # Lapsed (paused, cut off): others may have taken some of ours. What we
            # still hold is read back at once; a stale write would be fenced anyway.
            self.stats["lease_lapses"] += 1
            self.ledger.register_worker(
                self.owner,
                kind=self.kind,
                now=now,
                lease_s=self.lease.lease_s,
                versions=self.versions,
            )
            self._refresh_held(now=now)
        self._lease_until = now + self.lease.lease_s
        self._next_renew = now + self.lease.renew_every_s
        self._held_back = False

    def _claim_share(self, now: float) -> None:
        """Hold about ``open / live workers`` operations: claim up to that, shed above
        it (plus the slack) what has no request in flight. With :attr:`versions`, the
        share is taken per (protocol, adapter version) this engine runs, among the
        workers that run it: a version only some workers run is shared by those. One
        census read serves every version."""
        assert self.owner is not None
        if self.versions is None:
            census = self.ledger.census(self.owner, now=now)
            self._take_share(census, list(self.records), None, now=now)
            self.last_census = census
            return
        by_version = self.ledger.census_by_version(self.owner, now=now, versions=self.versions)
        held: dict[tuple[str, str], list[str]] = {}
        for node, record in self.records.items():
            held.setdefault((record.protocol, record.adapter_version), []).append(node)
        for pair in sorted(self.versions):
            self._take_share(by_version[pair], held.get(pair, []), frozenset({pair}), now=now)
        censuses = by_version.values()
        self.last_census = Census(
            open_operations=sum(c.open_operations for c in censuses),
            live_workers=max((c.live_workers for c in censuses), default=0),
            held=sum(c.held for c in censuses),
            claimable=sum(c.claimable for c in censuses),
        )

    def _take_share(
        self, census: Census, held: list[str], versions: VersionSet | None, *, now: float
    ) -> None:
        """Claim up to the share ``census`` gives of ``versions`` (None: every version),
        or shed above it; ``held``: the nodes of those versions held now, oldest first."""
        assert self.owner is not None
        share = math.ceil(census.open_operations / max(1, census.live_workers))
        if census.claimable and len(held) < share:
            limit = min(self.lease.claim_batch, share - len(held))
            if self._claim(now=now, limit=limit, versions=versions):
                held = [
                    node
                    for node, r in self.records.items()
                    if versions is None or (r.protocol, r.adapter_version) in versions
                ]
        slack = max(SURPLUS_MIN, math.ceil(share * self.lease.surplus_slack))
        surplus = len(held) - share - slack
        if surplus > 0:
            # The most recently taken go first: claims take the oldest, so shedding the
            # oldest would hand the same operations back and forth at every change.
            busy = {node for node, _kind in self._in_flight}
            idle = [n for n in reversed(held) if n not in busy and n not in self.wanted]
            release = idle[:surplus]
            self.ledger.release(self.owner, release)
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

        def decide(record: OperationRecord) -> OperationRecord:
            claim = e.ExecutionClaimed(new_epoch=record.execution_epoch + 1)
            return handle(
                record, claim, now=now, jitter=self.rng.random(), policy=self.policy
            ).record

        for claimed in self.ledger.claim(
            self.owner, now=now, limit=limit, decide=decide, nodes=nodes, versions=versions
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
        self, call_node_id: str, *, now: float, requested_by: str = "caller"
    ) -> CancelOutcome:
        """Ask for cancellation: bump the generation by CAS, then send (X5)."""

        def write(owner: str | None) -> tuple[CancelOutcome, Transition | None]:
            return request_cancel(
                self.ledger,
                self.ledger.get(call_node_id),
                now=now,
                jitter=self.rng.random(),
                requested_by=requested_by,
                owner=owner,
            )

        outcome, transition = self._intent(call_node_id, write)
        if transition is not None:
            self._hold_intent(transition, now=now)
        return outcome

    def answer(
        self, call_node_id: str, answers: Mapping[str, Any], *, now: float
    ) -> OperationRecord:
        """Answer pending input keys of the current round (X4)."""

        def write(owner: str | None) -> Transition:
            return record_answers(
                self.ledger,
                self.ledger.get(call_node_id),
                answers,
                now=now,
                jitter=self.rng.random(),
                owner=owner,
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
        owner = self._owner_for(call_node_id)
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
        if self._held_back:
            # Past the lease's send margin nothing leaves until a renewal: a driver
            # woken at the planned (past) moment would only spin (found by the
            # simulator's lease-expiry worlds). Housekeeping turns still come.
            return None
        wake: float | None = None
        while self._timers:
            at, _, seq, node, kind = self._timers[0]
            if self._pending.get((node, kind), (None, None))[1] == seq:
                wake = at
                break
            heapq.heappop(self._timers)
        for server, queue in self._poll_queue.items():
            if queue:
                at = self._granted_until.get(server, -math.inf) - GRANT_HORIZON_S
                wake = at if wake is None else min(wake, at)
        return wake

    def due(self, now: float, *, limit: int | None = None) -> list[Action]:
        """Pop the requests whose time has come, within the server's limits (at most
        ``limit`` of them: the driver's free sending capacity). Nothing leaves while
        this engine's lease is about to run out (D1)."""
        if not self.lease_valid(now):
            self._held_back = True
            return []
        self._held_back = False
        shared = self.owner is not None
        if shared:
            self._assign_slots(now)
        actions: list[Action] = []
        while self._timers and self._timers[0][0] <= now:
            if limit is not None and len(actions) >= limit:
                break
            _at, _, seq, node, kind = heapq.heappop(self._timers)
            planned = self._pending.get((node, kind))
            if planned is None or planned[1] != seq:
                continue  # replaced by a later plan
            record = self.records.get(node)
            if record is None:
                continue
            if (node, kind) in self._in_flight:
                # Re-armed when the request in flight comes back: its reply may be
                # stale and plan nothing (a newer cancel generation, found by the
                # simulator), and this command must not be lost then.
                self._deferred.add((node, kind))
                continue
            server = record.server
            breaker = self.breakers.get(server, self._breaker_template)
            if not breaker.allows(now):
                retry_at = breaker.retry_at() or now
                self._push(node, kind, planned[2], max(retry_at, now))
                continue
            not_before = self._not_before.get(server, now)
            if not_before > now:
                self._push(node, kind, planned[2], not_before)
                continue
            not_after = None
            if kind in _BUDGETED and shared:
                slot = self._slot_of.pop((node, kind), None)
                if slot is None or now > slot + SLOT_VALID_S:
                    # No send slot yet (or it passed unused): queue for the next grant
                    # from the server's one budget (X3, shared by every worker).
                    self.stats["slots_missed"] += slot is not None
                    self._poll_queue.setdefault(server, collections.deque()).append(
                        (node, kind, planned[1])
                    )
                    continue
                if slot > now:
                    # Moved earlier since the slot was assigned (a push wake-up): it
                    # still leaves no sooner than its slot.
                    self._slot_of[(node, kind)] = slot
                    self._push(node, kind, planned[2], slot)
                    continue
                not_after = slot + SLOT_VALID_S
            elif kind == "Poll" and (node, kind) not in self._token_held:
                wait_s = self._take_poll_token(server, now)
                if wait_s > 0:
                    # The token is reserved for that slot: the request goes then (X3).
                    self._token_held.add((node, kind))
                    self._push(node, kind, planned[2], now + wait_s)
                    continue
            if kind == "Poll" and not shared:
                wait_s = self._admit_poll(server, now)
                if wait_s > 0:
                    self._token_held.add((node, kind))
                    self._push(node, kind, planned[2], now + wait_s)
                    continue
            self._token_held.discard((node, kind))
            del self._pending[(node, kind)]
            if kind == "Poll":
                self._last_poll_at[node] = now
                self.polls_by_server[server] += 1
            self._in_flight.add((node, kind))
            self.breakers[server] = breaker.on_request(now)
            self.stats["requests"] += 1
            actions.append(
                Action(
                    call_node_id=node,
                    server=server,
                    command=planned[2],
                    record=record,
                    not_after=not_after,
                )
            )
        if shared:
            self._assign_slots(now)
        return actions

    def _assign_slots(self, now: float) -> None:
        """Give queued polls send slots from each server's shared budget: one grant per
        server, taken once the slots already assigned run out within the horizon."""
        for server, queue in self._poll_queue.items():
            while queue and not self._awaits_slot(*queue[0]):
                queue.popleft()
            # The same expression as next_wakeup's: at the moment it names, a grant is
            # taken (with ``>=`` on ``now + GRANT_HORIZON_S`` a driver on a virtual clock
            # woke at exactly that moment for nothing, for ever: found by the simulator).
            if not queue or self._granted_until.get(server, -math.inf) - GRANT_HORIZON_S > now:
                continue
            grant = self.ledger.take_poll_slots(
                server, now=now, count=len(queue), qps_max=self.qps_max(server)
            )
            for slot in grant.slots():
                while queue and not self._awaits_slot(*queue[0]):
                    queue.popleft()
                if not queue:
                    self.stats["slots_unused"] += 1
                    continue
                node, kind, _seq = queue.popleft()
                self._slot_of[(node, kind)] = slot
                self._push(node, kind, self._pending[(node, kind)][2], slot)
                self._granted_until[server] = slot

    def _awaits_slot(self, node: str, kind: str, seq: int) -> bool:
        """A queued read still stands (not re-planned, sent or dropped since)."""
        planned = self._pending.get((node, kind))
        return planned is not None and planned[1] == seq and (node, kind) not in self._slot_of

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
        if self._not_before.get(action.server, now) <= now:
            if action.kind == "Poll":
                # It leaves now, not when due() issued it: the interval counts from here.
                self._last_poll_at[action.call_node_id] = now
            return False
        key = (action.call_node_id, action.kind)
        self._in_flight.discard(key)
        self.stats["requests"] -= 1
        self.stats["held_by_retry_after"] += 1
        if action.kind == "Poll":
            self.polls_by_server[action.server] -= 1
        if action.call_node_id in self.records and key not in self._pending:
            # The same command (never sent: a create here is not an unknown outcome);
            # due() holds it to the Retry-After's end, and a shared-budget read then
            # takes a new send slot.
            self._push(action.call_node_id, action.kind, action.command, now)
        self._rearm(key)
        return True

    def requeue(self, action: Action, *, now: float) -> None:
        """The action was not carried out (the driver stopped, or a poll missed its
        slot): plan it again, unless something newer of its kind is planned."""
        key = (action.call_node_id, action.kind)
        self._in_flight.discard(key)
        record = self.records.get(action.call_node_id)
        if record is not None and isinstance(action.command, c.SendSubmit):
            # The create may have reached the server: its outcome is unknown, and
            # sending it again blind is what X2 forbids.
            lost = e.SubmitOutcomeLost(reason="the executor stopped while the create was sent")
            self._apply_and_plan(record, lost, now=now)
        elif record is not None and key not in self._pending:
            self._push(action.call_node_id, action.kind, action.command, now)
        self._rearm(key)

    def wake(self, call_node_id: str, *, now: float) -> None:
        """A push notification says something changed: poll soon (X3: "listen for
        speed"), but not sooner than the server's interval after the previous poll of
        this process, and not during a failure backoff; the poll, not the
        notification, is the truth."""
        planned = self._pending.get((call_node_id, "Poll"))
        record = self.records.get(call_node_id)
        if planned is None or record is None or record.failed_attempts > 0:
            # After a failure the backoff and any Retry-After stand (X3, X9).
            return
        at = now
        last = self._last_poll_at.get(call_node_id)
        if last is not None:
            # X3 rule 1: the server's interval is the floor between two polls, pushed or not.
            at = max(now, last + self._poll_floor_s(record))
        if planned[0] > at:
            self._push(call_node_id, "Poll", planned[2], at)

    def _poll_floor_s(self, record: OperationRecord, *, told: float | None = None) -> float:
        """The least time between two polls of ``record`` (X3 rule 1); ``told``: an
        interval the server told this process that the record does not hold."""
        interval = record.poll_interval_s
        if told is not None:
            interval = told if interval is None else max(interval, told)
        return poll_delay_s(
            self.policy.poll, server_interval_s=interval, backoff_step=0, jitter=0.0
        )

    # --- replies ---------------------------------------------------------------------

    def apply_reply(
        self, action: Action, outcome: Outcome, *, now: float
    ) -> OperationRecord | None:
        """Apply the reply to an action; returns the record as it now stands."""
        key = (action.call_node_id, action.kind)
        self._in_flight.discard(key)
        self._rearm(key)
        self._note_server_health(action.server, outcome.event, now)
        if isinstance(outcome.event, e.RequestFailed):
            self.failures_by_server[action.server] += 1
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
            inputs.store_requests(self.ledger, action.call_node_id, outcome.payload)
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
        assert record.operation_id is not None
        holders = self.ledger.find_by_operation_id(record.operation_id, server=record.server)
        if all(r.call_node_id == record.call_node_id for r in holders):
            return None
        reason = (
            f"the server handed operation id {record.operation_id!r} to more than one call "
            f"node ({', '.join(sorted(r.call_node_id for r in holders))})"
        )
        for holder in holders:
            if holder.is_settled:
                continue
            self._forget_timers(holder.call_node_id)
            # From the stored row, whoever holds it in memory: a lost race is a
            # conflict, never an overwrite (L4).
            self._apply_and_plan(holder, e.ReconciliationEscalated(reason=reason), now=now)
        return self.records.get(record.call_node_id, record)

    def end_without_reply(self, action: Action) -> None:
        """The action ended with nothing to apply (an input delivery acknowledged): it
        is no longer in flight."""
        key = (action.call_node_id, action.kind)
        self._in_flight.discard(key)
        self._rearm(key)

    def _rearm(self, key: tuple[str, str]) -> None:
        """Put a command that fell due while its kind was in flight back on the timers."""
        if key in self._deferred:
            self._deferred.discard(key)
            planned = self._pending.get(key)
            if planned is not None:
                self._push(key[0], key[1], planned[2], planned[0])

    def request_payload(self, call_node_id: str) -> dict[str, Any]:
        payload = self.ledger.blob(call_node_id, REQUEST_BLOB)
        if payload is None:
            raise MissingPayload(f"{call_node_id!r}: the request arguments are not stored")
        data = json.loads(payload)
        assert isinstance(data, dict)
        return data

    def input_answers(self, record: OperationRecord, keys: tuple[str, ...]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in keys:
            answer = inputs.read_answer(self.ledger, record, key)
            if answer is not None:
                out[key] = answer
        return out

    # --- internals -------------------------------------------------------------------

    def _apply(
        self,
        record: OperationRecord,
        event: e.Event,
        *,
        now: float,
        payload: bytes | None = None,
    ) -> Transition | None:
        """Machine then ledger; a refused or stale event changes nothing (None).

        The two ways a commit can fail are told apart (``longcall.errors``): a lost
        race (ConflictError) means somebody else wrote the row — another process's
        cancel, answer or reconciliation — so the row is re-read, whatever it now needs
        is planned, and the event is decided again against it (L4). An integrity
        failure (IntegrityError: a digest or acceptance mismatch, a foreign identity)
        cannot be cured by retrying: the operation goes to reconciliation with the
        reason, never into a silent retry loop (X7).
        """
        for _attempt in range(LOST_RACE_RETRIES):
            try:
                transition = handle(
                    record, event, now=now, jitter=self.rng.random(), policy=self.policy
                )
            except (StaleEvent, IllegalTransition):
                self.stats["stale_replies"] += 1
                return None
            try:
                commit(
                    self.ledger,
                    record,
                    transition,
                    event=event.name,
                    result_payload=payload,
                    owner=self._owner_for(record.call_node_id),
                )
            except Fenced:
                # Another worker took the operation over (our lease lapsed): the
                # database refused the write. Not ours to re-decide: let it go (D1).
                self.stats["fenced"] += 1
                self._let_go(record.call_node_id)
                told = getattr(event, "poll_interval_s", None)
                if told is not None:
                    # The server told this process so, whatever the ledger holds: it
                    # floors this process's next poll should it claim it back (X3).
                    self._told_when_fenced[record.call_node_id] = told
                return None
            except ConflictError:
                self.stats["conflicts"] += 1
                fresh = self._redecide(record, now=now)
                if fresh is None:
                    return None
                record = fresh
                continue
            except IntegrityError as exc:
                self.stats["integrity_failures"] += 1
                if not isinstance(event, e.ReconciliationEscalated):
                    self._escalate(record, f"{type(exc).__name__}: {exc}", now=now)
                return None
            self.records[record.call_node_id] = transition.record
            return transition
        # Still losing after re-reading each time: the row is busy elsewhere. The
        # re-read record is held and planned (above), so nothing is lost; the event
        # is dropped as stale.
        self.stats["stale_replies"] += 1
        return None

    def _redecide(self, lost: OperationRecord, *, now: float) -> OperationRecord | None:
        """After a lost race: re-read the row, let it go when another executor took it
        over (fencing, D1), else hold the fresh record and plan what ITS state needs —
        a cancel or an answer written by another process must be sent (X4, X5) — and
        return it so the event is decided again. None: nothing left to decide."""
        fresh = self.ledger.find(lost.call_node_id)
        if fresh is None or fresh.execution_epoch != lost.execution_epoch:
            self.records.pop(lost.call_node_id, None)
            self._forget_timers(lost.call_node_id)
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
        fresh = self.ledger.find(record.call_node_id)
        if fresh is None or fresh.is_settled:
            return
        self._forget_timers(fresh.call_node_id)
        self._apply_and_plan(fresh, e.ReconciliationEscalated(reason=reason), now=now)

    def _owner_for(self, call_node_id: str) -> str | None:
        """Write as the lease holder only what this engine holds; anything else (an
        operation another worker drives) is an unowned write, like an operator's."""
        return self.owner if call_node_id in self.records else None

    def _apply_and_plan(self, record: OperationRecord, event: e.Event, *, now: float) -> None:
        transition = self._apply(record, event, now=now)
        if transition is not None:
            self._plan(transition.record, transition.commands, now=now)

    def _plan(
        self, record: OperationRecord, commands: tuple[c.Command, ...], *, now: float
    ) -> None:
        if record.is_terminal:
            self.records.pop(record.call_node_id, None)
            self._forget_timers(record.call_node_id)
            self._last_poll_at.pop(record.call_node_id, None)
        elif record.state in NOT_POLLING_STATES or (
            record.state is State.INPUT_REQUIRED and record.input_keys_pending
        ):
            self._pending.pop((record.call_node_id, "Poll"), None)
            self._token_held.discard((record.call_node_id, "Poll"))
        for command in commands:
            if isinstance(command, _REQUEST_COMMANDS):
                at = getattr(command, "at", now)
                self._push(record.call_node_id, command.name, command, at)
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
            transition = record_answers(
                self.ledger,
                record,
                answers,
                now=now,
                jitter=self.rng.random(),
                owner=self._owner_for(record.call_node_id),
            )
            self.records[record.call_node_id] = transition.record
            self._plan(transition.record, transition.commands, now=now)

    def _push(self, node: str, kind: str, command: c.Command, at: float) -> None:
        seq = next(self._seq)
        self._pending[(node, kind)] = (at, seq, command)
        heapq.heappush(self._timers, (at, _PRIORITY[kind], seq, node, kind))

    def _forget_timers(self, node: str) -> None:
        for cls in _REQUEST_COMMANDS:
            self._pending.pop((node, cls.__name__), None)
            self._token_held.discard((node, cls.__name__))
            self._slot_of.pop((node, cls.__name__), None)

    def qps_max(self, server: str) -> float:
        """The poll cap of ``server``: its own where configured, else the default (X3)."""
        return self.server_qps_max.get(server, self.poll_qps_max)

    def _take_poll_token(self, server: str, now: float) -> float:
        bucket = self._buckets.get(server) or TokenBucket.full(
            self.qps_max(server), burst=self.poll_burst, now=now
        )
        self._buckets[server], wait_s = bucket.take(now)
        return wait_s

    def _admit_poll(self, server: str, now: float) -> float:
        """The strict per-window check at the moment a poll leaves (X3)."""
        window = self._windows.get(server)
        if window is None:
            qps = self.qps_max(server)
            if qps >= 1:
                window = WindowLimit(limit=int(qps), window_s=1.0)
            else:
                window = WindowLimit(limit=1, window_s=1.0 / qps)
        self._windows[server], wait_s = window.admit(now)
        return wait_s

    def _note_server_health(self, server: str, event: e.Event, now: float) -> None:
        breaker = self.breakers.get(server, self._breaker_template)
        if isinstance(event, e.RequestFailed):
            self.breakers[server] = breaker.on_failure(now, event.failure)
            if event.retry_after_s:
                until = max(self._not_before.get(server, now), now + event.retry_after_s)
                self._not_before[server] = until
        elif not isinstance(event, (e.SubmitOutcomeLost, e.ResultFetchFailed)):
            self.breakers[server] = breaker.on_success()


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


# --- shared with the CLI (which has no engine) ----------------------------------------


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
        record, e.CancelRequested(requested_by=requested_by), now=now, jitter=jitter
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
    event = e.InputAnswered(input_round=record.input_round, keys=keys)
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


__all__ = [
    "Action",
    "CallSpec",
    "CancelOutcome",
    "Engine",
    "InputPolicy",
    "ServerStatus",
    "record_answers",
    "request_cancel",
]
