"""The asyncio executor: carries out the engine's actions through protocol adapters.

The :class:`~longcall.runtime.engine.Engine` decides; this module only waits and
talks. It wakes at the engine's next deadline (``loop.call_at`` semantics through a
timed wait), on a push notification, or when a reply arrives; it sends each due
action through the adapter of the operation's server and protocol, and hands the
reply back. Nothing here decides a state: a crash of this process loses no decision,
because the engine committed each one to the ledger before the action existed.

Push (X3: "poll for truth, listen for speed"): while it holds operations on a server
that are polled less often than every :data:`PUSH_POLL_INTERVAL_MIN_S`, one listener
per (server, protocol) keeps the adapter's push stream open
(:meth:`~longcall.adapters.base.Adapter.listen`); a pushed change of a status we have
not yet seen only asks the engine to poll that operation soon (:meth:`Executor.notify`),
once per version of its record, never sooner than the server's interval after the
previous poll. A missing or broken
stream costs speed, never correctness: the planned polls go on regardless.

Time is wall-clock seconds since the epoch (``time.time()``): records outlive the
process, and a monotonic clock does not survive a restart (docs/design/time-in-the-core.md).
A client going away only stops local waiting; it never cancels (X8).

Ledger I/O never runs on the event loop: every engine call (each one may commit, and a
commit may fsync) runs on one dedicated thread, ``longcall-ledger``, one at a time;
the loop only awaits it. The synchronous methods (:meth:`Executor.call`,
:meth:`~Executor.cancel`, …) are for scripts and tests: they block the calling thread
for their commit; async code uses the ``a…`` twins (:meth:`Executor.acall`, …).

Several processes on one ledger (D1): an executor holds leases as ``owner``. As a
worker (``adopt_new=True``) it claims a fair share of every open operation; as a
caller (``adopt_new=False``) it drives only the call nodes it started or attached,
and while a worker holds one of those it waits on the ledger instead of competing —
taking the node over only if that worker's lease lapses.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import dataclasses
import enum
import functools
import logging
import os
import random
import secrets
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Any, TypeVar

from longcall.adapters.base import Adapter, AdapterError, Outcome, ToolBinding
from longcall.adapters.exchange import TransportFailure
from longcall.adapters.http import send_window
from longcall.adapters.mcp.client import McpAdapter
from longcall.adapters.outcomes import failure_outcome
from longcall.adapters.routing import Connector, connect_any
from longcall.adapters.servers import default_token_dir
from longcall.core import DEFAULT_POLICY, OperationRecord, Policy, State, TerminalReceipt
from longcall.core import TERMINAL_STATES as TERMINAL
from longcall.core.commands import (
    FetchResult,
    LookupSubmission,
    Poll,
    SendCancel,
    SendInputResponse,
    SendSubmit,
)
from longcall.core.events import SubmissionFound, SubmitAcknowledged, WorkingObserved
from longcall.core.retry import CircuitBreaker, FailureKind
from longcall.errors import (
    AdapterDisabled,
    DuplicateCallNode,
    ExecutorFailed,
    LongcallError,
    SendWindowPassed,
)
from longcall.ledger import CLIENT, WORKER, AdapterPlan, Ledger
from longcall.runtime.breakers import keep_breaker
from longcall.runtime.claims import worker_locks
from longcall.runtime.engine import Action, CallSpec, Engine, InputPolicy
from longcall.runtime.leases import LeasePolicy
from longcall.runtime.metrics import ExecutorMetrics
from longcall.runtime.rollout import compare_shadow, route, shadow_call_node, shadow_versions
from longcall.runtime.step import CancelOutcome

log = logging.getLogger("longcall.executor")

LISTEN_EAGER_MAX = 256
"""Up to this many open operations, push listeners follow every new operation at once
(a running stream is replaced at most once per :data:`LISTEN_COALESCE_S`)."""
LISTEN_COALESCE_S = 0.5
"""A running listener is replaced by one covering new operations at most this often.
Replacing it breaks its stream, and a broken stream's connection cannot go back to the
pool: replaced at every create, a caller opened a new connection (and a new stream)
for nearly every operation. Polling carries the operations a listener does not cover
yet (X3); a server's first listener, or one that has returned, opens at once."""
LISTEN_RESYNC_S = 1.0
FINISHED_KEPT = 1024
"""How many records accepted lately :meth:`Executor.latest` still knows (the waits of
their calls read them there, not in the ledger)."""
PUSH_POLL_INTERVAL_MIN_S = 1.0
"""Operations whose server asks to be polled more often than this get no push stream:
a push could only bring their poll forward by less than this, and each stream costs a
request and a connection of its own (reopened as operations come and go) — more than
the polls it would save. Polling carries them, as it always may (X3)."""
"""Beyond that, they are re-synced with the open operations at most this often."""

EXECUTOR_POLICY = dataclasses.replace(
    DEFAULT_POLICY, poll=dataclasses.replace(DEFAULT_POLICY.poll, jitter_fraction=0.1)
)
"""The machine's limits as an executor applies them: a poll jitter of at most a tenth of
the server's interval (the core's default is a fifth). A completion just after a poll
waits for the next one, up to the interval plus the jitter, and then for the poll's
round trip, its commits and the result's: with a fifth, that wait ran past 1.25 times
the interval (X3 "accepted within pollIntervalMs × 1.25"); a tenth still spreads the
polls of operations created together."""

AdapterFactory = Callable[[str, str], Awaitable[Adapter]]
"""(server URL, protocol name) → a connected adapter for that protocol version."""

T = TypeVar("T")


class NotSent(enum.Enum):
    """Why an action ended without a reply: it was never sent."""

    SLOT_MISSED = "slot missed"
    """A poll whose send slot passed before it could leave (it waits for a new slot)."""
    HELD = "held"
    """A Retry-After that arrived after the action was issued holds its server: planned
    again by the engine (:meth:`Engine.held`)."""


def new_owner_id() -> str:
    """A lease holder id unique to this process incarnation: host, pid, 64 random bits
    (a restarted process is a new holder, so its old leases are never mistaken for
    its own)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(8)}"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _Step:
    """What one engine step on the ledger thread hands back to the loop."""

    actions: list[Action]
    wake_at: float | None
    idle: bool
    listeners: tuple[dict[tuple[str, str], set[str]], dict[tuple[str, str], str]] | None
    finished: list[OperationRecord]
    changed: list[str]
    """Call nodes a reply applied in this turn changed, or another process changed (a
    refresh re-planned them, or a watched one moved): whoever waits on them re-checks."""
    settled: bool
    """Nothing is planned: every held operation waits for a person (or none is held)."""


async def default_adapter_factory(server: str, protocol: str) -> Adapter:
    """The protocol a record is bound to, or else the one the URL and the server name:
    ``/v1`` AIP-151, ``/apify/mcp`` Apify-style, otherwise MCP negotiation (X1, P3, P4).
    No credentials, no kept sessions: an executor builds a :class:`Connector` over its
    ledger unless given a factory."""
    return await connect_any(server, protocol or None)


class Executor:
    """Drives every open operation of one ledger, concurrently, in one process."""

    def __init__(
        self,
        ledger: Ledger,
        *,
        adapter_factory: AdapterFactory | None = None,
        poll_qps_max: float = 20.0,
        server_qps_max: Mapping[str, float] | None = None,
        input_policy: InputPolicy | None = None,
        disabled_protocols: Collection[str] = (),
        refresh_interval_s: float = 1.0,
        adopt_new: bool = True,
        request_timeout_s: float = 60.0,
        in_flight_max: int = 64,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.time,
        on_progress: Callable[[str, float | None, str | None], None] | None = None,
        owner: str | None = None,
        lease: LeasePolicy | None = None,
        single_process: bool = False,
        metrics: ExecutorMetrics | None = None,
        on_change: Callable[[str], None] | None = None,
        versions: Collection[tuple[str, str]] | None = None,
        push: bool = True,
        breaker: CircuitBreaker | None = None,
        policy: Policy = EXECUTOR_POLICY,
    ) -> None:
        """``push=False``: never open a push listener (a caller that returns once its
        call is submitted would only open one to drop it as it exits, an aborted
        request the server counts as refused). ``adopt_new``: a worker (claims a fair
        share of every open operation) or a caller (drives only its own call nodes).
        ``owner``: the lease holder id
        (default: a new one for this process). ``single_process``: no leases at all —
        only for a process that is alone on its ledger. ``on_change``: called on the
        loop with a call node id after each change this executor applied or noticed.
        ``versions``: the (protocol, adapter version) pairs this process runs: it
        claims only operations bound to one of them, and a new call the rollout plan
        routes to another version is created and left to a worker that runs it
        (default: every version — one build on the ledger). ``breaker``: the circuit
        breaker each server starts with (its limits; default ``CircuitBreaker()``). ``policy``: the
        machine's limits (default :data:`EXECUTOR_POLICY`)."""
        if not poll_qps_max > 0:
            raise ValueError(f"poll_qps_max must be above 0, not {poll_qps_max!r}")
        self.ledger = ledger
        self.clock = clock
        self.disabled_protocols = frozenset(disabled_protocols)
        self.refresh_interval_s = refresh_interval_s
        self.adopt_new = adopt_new
        self.request_timeout_s = request_timeout_s
        self.in_flight_max = in_flight_max
        self.on_progress = on_progress
        self.on_change = on_change
        self.push = push
        self.metrics = metrics or ExecutorMetrics(clock=clock)
        self._failure: ExecutorFailed | None = None
        """Set once an error escaped the loop: every wait ends with it."""
        self._crashed: BaseException | None = None
        """An error that escaped a request task: the loop stops on it."""
        self._settled = False
        # By default: no credentials, and the sessions of stateful servers kept in the
        # ledger so every process of this caller resumes them (their tasks live there).
        self._adapter_factory = adapter_factory or Connector(
            sessions=ledger, token_dir=default_token_dir()
        )
        self._adapters: dict[tuple[str, str], Adapter] = {}
        self._adapter_locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._wakeup = asyncio.Event()
        self._accepted: dict[str, list[asyncio.Future[OperationRecord]]] = {}
        self._finished: dict[str, OperationRecord] = {}
        """The last :data:`FINISHED_KEPT` records accepted here, oldest first."""
        self._escalated: dict[str, str] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._replies: collections.deque[tuple[str, Callable[[], None]]] = collections.deque()
        """What requests came back with, to apply on the ledger thread at its next turn
        (the loop appends, the ledger thread takes): the replies of one wake in one turn,
        and before that turn plans anything."""
        self._changed = asyncio.Event()
        self._listeners: dict[tuple[str, str], tuple[frozenset[str], asyncio.Task[None]]] = {}
        """(server, protocol) → the operation ids its push stream covers, and its task."""
        self._push_nodes: dict[tuple[str, str], str] = {}
        """(server, operation id) → call node, for the operations a listener covers."""
        self._pushed: dict[str, int] = {}
        """Call node → the record version a push last asked a poll for (one per version)."""
        self._listen_dirty = True
        self._next_listen_sync = 0.0
        self._listener_opened_at: dict[tuple[str, str], float] = {}
        self._listen_retry_at: float | None = None
        """When a listener held back by :data:`LISTEN_COALESCE_S` may be reopened."""
        self._next_refresh = 0.0
        self._watched: set[str] = set()
        """Call nodes someone waits on that another process drives (read from the ledger)."""
        self._watched_versions: dict[str, int] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._io = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="longcall-ledger"
        )
        self._engine_lock = threading.RLock()
        """Held by whoever runs the engine: the ledger thread, or a synchronous caller."""
        self.engine = Engine(
            ledger,
            rng=rng or random.Random(),
            poll_qps_max=poll_qps_max,
            server_qps_max=server_qps_max,
            input_policy=input_policy,
            on_accepted=self._note_accepted,
            on_escalated=self._note_escalated,
            owner=None if single_process else (owner or new_owner_id()),
            kind=WORKER if adopt_new else CLIENT,
            lease=lease,
            claim_all=adopt_new,
            versions=None if versions is None else frozenset(versions),
            breaker=breaker,
            policy=policy,
            # A real process: its death is proven to the others by its lock file.
            owner_locks=None if single_process else worker_locks(ledger),
        )
        self._shadows: dict[str, list[str]] = {}
        """Primary call node → the shadow call nodes this process started for it (R1),
        so that a primary accepted after its shadow is compared at once; a shadow's
        record names its primary, so a shadow accepted last is compared wherever it
        is accepted."""
        self.metrics.bind(self.engine, self._engine_lock)
        self.engine.external_heartbeat = self.engine.owner is not None
        self._heartbeat_stop = threading.Event()
        self._heartbeat: threading.Thread | None = None

    @property
    def owner(self) -> str | None:
        """The lease holder id this executor writes as (None: single-process mode)."""
        return self.engine.owner

    # --- the ledger thread ------------------------------------------------------------

    def _bind_loop(self) -> asyncio.AbstractEventLoop:
        """Remember the running loop (and its thread): engine callbacks on the ledger
        thread hand their results back to it."""
        loop = asyncio.get_running_loop()
        self._loop, self._loop_thread = loop, threading.current_thread()
        return loop

    def _locked(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        with self._engine_lock:
            return fn(*args, **kwargs)

    async def _off_loop(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``fn`` on the ledger thread (one engine call at a time); the loop waits."""
        loop = self._bind_loop()
        job = functools.partial(self._locked, fn, *args, **kwargs)
        return await loop.run_in_executor(self._io, job)

    async def on_ledger_thread(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn`` (a ledger read, an operator's write) on the ledger thread, in turn
        with the engine's work: what drives this executor never reads the ledger on
        the event loop (D1)."""
        return await self._off_loop(fn, *args)

    # --- the API callers use ---------------------------------------------------------

    async def bind(
        self, server: str, tool_name: str, *, protocol: str | None = None, fresh: bool = False
    ) -> ToolBinding:
        """Negotiate with the server and describe the tool (X1); ``fresh``: from a new
        listing, not one the adapter read earlier in its session."""
        adapter = await self._adapter(server, protocol or "")
        if fresh:
            adapter.forget_listing(tool_name)
        return await adapter.bind(tool_name)

    async def tools(self, server: str, *, protocol: str | None = None) -> list[dict[str, Any]]:
        """Negotiate with the server and list its tools (as listed, with task support)."""
        adapter = await self._adapter(server, protocol or "")
        return await adapter.tools()

    async def list_tools(self, server: str, *, protocol: str | None = None) -> list[dict[str, Any]]:
        """Every tool ``server`` lists that this caller may call, as listed (a gateway
        re-serves them under its own names)."""
        adapter = await self._adapter(server, protocol or "")
        return await adapter.list_tools()

    def call(self, spec: CallSpec) -> OperationRecord:
        """Record a durable call (or attach to its call node) and plan its first request."""
        return self._locked(self._call, spec)

    async def acall(self, spec: CallSpec) -> OperationRecord:
        """:meth:`call` without blocking the event loop."""
        return await self._off_loop(self._call, spec)

    async def acreate(self, spec: CallSpec) -> OperationRecord:
        """:meth:`acall` for a call node its caller has just looked up and found absent:
        not looked up again (one lookup per call). Should another process create it
        meanwhile, this call attaches to that one."""
        return await self._off_loop(self._call, spec, True)

    def _call(self, spec: CallSpec, known_absent: bool = False) -> OperationRecord:
        binding = spec.binding
        if binding.protocol in self.disabled_protocols:
            raise AdapterDisabled(f"the {binding.protocol} adapter is disabled for new operations")
        now = self.clock()
        existing = None if known_absent else self.ledger.find(spec.call_node_id)
        if existing is not None:
            return self._attach_to(existing, spec.binding.tool_name, spec.arguments)
        # A new operation follows the ledger's rollout plan (R2, P6).
        plan = self.ledger.rollout_plan()
        version = route(
            plan,
            protocol=binding.protocol,
            offered=binding.adapter_version,
            call_node_id=spec.call_node_id,
        )
        if version != binding.adapter_version and self.engine.versions is None:
            # This process claims every version: a record bound to another one could be
            # driven here by this version's code. Only a process that names the
            # versions it runs leaves such a call to a worker that runs it.
            raise AdapterDisabled(
                f"the rollout plan routes this call to {binding.protocol} adapter "
                f"{version}; this process runs {binding.adapter_version} and does not "
                "name the versions it runs, so it cannot leave the call to another worker"
            )
        try:
            record = self.engine.create(spec, now=now, version=version)
        except DuplicateCallNode:
            existing = self.ledger.find(spec.call_node_id)
            if existing is None:
                raise  # its submission key is taken, not the node: no race was lost
            # Created by another process since it was looked up: attach to that one.
            return self._attach_to(existing, spec.binding.tool_name, spec.arguments)
        self._start_shadows(spec, plan, now=now)
        self._wake_soon(spec.call_node_id)
        return record

    def _start_shadows(self, spec: CallSpec, plan: Sequence[AdapterPlan], *, now: float) -> None:
        """R1: a new call of a read-only tool is copied to each shadow version of its
        protocol, under a derived call node. A shadow never affects its primary: one
        that cannot be started is logged and left out."""
        binding = spec.binding
        versions = shadow_versions(plan, protocol=binding.protocol)
        if not versions or spec.shadow_of is not None or not binding.read_only:
            return
        for version in versions:
            node = shadow_call_node(spec.call_node_id, version)
            shadow = dataclasses.replace(spec, call_node_id=node, shadow_of=spec.call_node_id)
            try:
                self.engine.start_call(shadow, now=now, version=version)
            except LongcallError as exc:
                log.warning("shadow %s of %s not started: %s", node, spec.call_node_id, exc)
                continue
            self._shadows.setdefault(spec.call_node_id, []).append(node)
            self._wake_soon(node)

    def attach(
        self, call_node_id: str, tool_name: str, arguments: Mapping[str, Any]
    ) -> OperationRecord | None:
        """Attach to the call node's existing operation (None if it has none), X2."""
        return self._locked(self._attach, call_node_id, tool_name, arguments)

    async def aattach(
        self, call_node_id: str, tool_name: str, arguments: Mapping[str, Any]
    ) -> OperationRecord | None:
        """:meth:`attach` without blocking the event loop."""
        return await self._off_loop(self._attach, call_node_id, tool_name, arguments)

    async def aattach_to(
        self, existing: OperationRecord, tool_name: str, arguments: Mapping[str, Any]
    ) -> OperationRecord:
        """:meth:`aattach` with the call node's record its caller has just read (not
        looked up again: one lookup per call)."""
        return await self._off_loop(self._attach_to, existing, tool_name, arguments)

    def _attach_to(
        self, existing: OperationRecord, tool_name: str, arguments: Mapping[str, Any]
    ) -> OperationRecord:
        # Attaching to an existing operation never re-routes it.
        record = self.engine.attach_to(existing, tool_name, arguments, now=self.clock())
        self._wake_soon(existing.call_node_id)
        return record

    def _attach(
        self, call_node_id: str, tool_name: str, arguments: Mapping[str, Any]
    ) -> OperationRecord | None:
        record = self.engine.attach(call_node_id, tool_name, arguments, now=self.clock())
        self._wake_soon(call_node_id)
        return record

    async def aadopt(self, call_node_id: str) -> OperationRecord:
        """Drive the call node's stored operation from here (if it is still open), with
        no need to know its request (``ops wait``): attach with the request the ledger
        holds. Raises UnknownCallNode. A node held here already (a call just made) needs
        no ledger read: it is adopted on the loop at once, unless the engine is busy."""
        if call_node_id in self.engine.records and self._engine_lock.acquire(blocking=False):
            try:
                if call_node_id in self.engine.records:
                    return self._adopt(call_node_id)
            finally:
                self._engine_lock.release()
        return await self._off_loop(self._adopt, call_node_id)

    def _adopt(self, call_node_id: str) -> OperationRecord:
        held = self.engine.records.get(call_node_id)
        # Held here already (a call just made): no need to read it again.
        record = held if held is not None else self.ledger.get(call_node_id)
        if held is None and not record.is_terminal:
            arguments = self.engine.request_payload(call_node_id)
            self.engine.attach_to(record, record.tool_name, arguments, now=self.clock())
            self._listen_dirty = True
        self._watched_versions.setdefault(call_node_id, record.version)
        self._watched.add(call_node_id)
        self._wake_soon(call_node_id)
        return self.engine.records.get(call_node_id) or record

    def cancel(self, call_node_id: str, *, expected_version: int | None = None) -> CancelOutcome:
        """Ask for cancellation (X5); ``expected_version``: on that row version only."""
        return self._locked(self._cancel, call_node_id, expected_version)

    async def acancel(
        self, call_node_id: str, *, expected_version: int | None = None
    ) -> CancelOutcome:
        """:meth:`cancel` without blocking the event loop."""
        return await self._off_loop(self._cancel, call_node_id, expected_version)

    def _cancel(self, call_node_id: str, expected_version: int | None) -> CancelOutcome:
        outcome = self.engine.cancel(
            call_node_id, now=self.clock(), expected_version=expected_version
        )
        self._wake_soon(call_node_id)
        return outcome

    def answer(
        self,
        call_node_id: str,
        answers: Mapping[str, Any],
        *,
        expected_version: int | None = None,
    ) -> OperationRecord:
        """Answer pending input (X4); ``expected_version``: on that row version only."""
        return self._locked(self._answer, call_node_id, answers, expected_version)

    async def aanswer(
        self,
        call_node_id: str,
        answers: Mapping[str, Any],
        *,
        expected_version: int | None = None,
    ) -> OperationRecord:
        """:meth:`answer` without blocking the event loop."""
        return await self._off_loop(self._answer, call_node_id, answers, expected_version)

    def _answer(
        self, call_node_id: str, answers: Mapping[str, Any], expected_version: int | None
    ) -> OperationRecord:
        record = self.engine.answer(
            call_node_id, answers, now=self.clock(), expected_version=expected_version
        )
        self._wake_soon(call_node_id)
        return record

    def held(self, call_node_id: str) -> OperationRecord | None:
        """The record this executor drives ``call_node_id`` at (None: not held here)."""
        return self.engine.records.get(call_node_id)

    def latest(self, call_node_id: str) -> OperationRecord | None:
        """The record as this executor last knew it: held here, or accepted here lately
        (a terminal record changes no more); None: read the ledger."""
        held = self.engine.records.get(call_node_id)
        return held if held is not None else self._finished.get(call_node_id)

    def held_records(self) -> list[OperationRecord]:
        """The records of the call nodes this executor drives now (a snapshot)."""
        return list(self.engine.records.values())

    def is_idle(self) -> bool:
        """Nothing left to do without a person: no request in flight or planned, and
        every operation held (or, for a worker, open in the ledger at the last claim
        round) waits for an answer or an operator."""
        return self._settled and not self._tasks

    def resume_all(self) -> int:
        """Take over the open operations this process may drive (run this once at
        start): with leases, a first fair share; alone on a ledger, all of them."""
        return self._locked(self._resume_all)

    async def aresume_all(self) -> int:
        """:meth:`resume_all` without blocking the event loop."""
        return await self._off_loop(self._resume_all)

    def _resume_all(self) -> int:
        count = self.engine.resume_all(now=self.clock())
        self._listen_dirty = True
        self._wake_soon()
        return count

    def notify(self, call_node_id: str) -> None:
        """A push notification arrived for this operation: poll it soon (X3)."""
        self._io.submit(self._locked, self.engine.wake, call_node_id, now=self.clock())
        self._wake_soon()

    def hint(
        self,
        *,
        operation_id: str | None = None,
        call_node_id: str | None = None,
        status: str | None = None,
        server: str | None = None,
    ) -> concurrent.futures.Future[list[str]]:
        """Something outside the poll (a webhook delivery) says an operation changed:
        wake the poll of each open operation it names, exactly as a push notification
        does (:meth:`notify` → ``Engine.wake``, floored by the server's interval). It
        never touches a record. ``status``: the status the hint claims; one equal to
        the status last polled wakes nothing. Resolves to the call nodes woken (an
        operation id may be held at two servers: both are polled). ``server``: only
        operations at this server URL (a delivery verified by that server's own key)."""
        return self._io.submit(self._locked, self._hint, operation_id, call_node_id, status, server)

    def _hint(
        self,
        operation_id: str | None,
        call_node_id: str | None,
        status: str | None,
        server: str | None = None,
    ) -> list[str]:
        woken = self.engine.hint(
            operation_id=operation_id,
            call_node_id=call_node_id,
            status=status,
            server=server,
            now=self.clock(),
        )
        if woken:
            self._wake_soon()
        return woken

    def _wake_soon(self, changed: str | None = None) -> None:
        """Wake the loop (from the loop or from the ledger thread), and report the call
        node a local intent just changed."""
        self._settled = False  # new work may be planned: the next step judges again
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                # One hand-over for both: each thread-safe one writes to the loop's pipe.
                loop.call_soon_threadsafe(self._woken, changed)
                return
        self._wakeup.set()
        if changed is not None and threading.current_thread() is self._loop_thread:
            self._signal_change(changed)

    def _woken(self, changed: str | None) -> None:
        """On the loop: wake it, and report the call node a local intent changed."""
        self._wakeup.set()
        if changed is not None:
            self._signal_change(changed)

    async def wait_terminal(self, call_node_id: str) -> OperationRecord:
        """Wait until the call node is accepted (or escalated); only local waiting (X8).

        A node another process drives is watched in the ledger, not competed for.
        Raises ExecutorFailed if the loop stops on an error meanwhile."""
        self._raise_if_failed()
        record = await self._off_loop(self.ledger.get, call_node_id)
        if record.is_settled or call_node_id in self._escalated:
            return record
        self._raise_if_failed()  # the loop may have failed meanwhile: never wait on it
        future: asyncio.Future[OperationRecord] = asyncio.get_running_loop().create_future()
        self._accepted.setdefault(call_node_id, []).append(future)
        self._watched.add(call_node_id)
        self._wakeup.set()
        return await future

    async def wait_for(
        self, call_node_id: str, predicate: Callable[[OperationRecord], bool]
    ) -> OperationRecord:
        """Wait until the stored record satisfies ``predicate`` (checked after each
        change); raises ExecutorFailed if the loop stops on an error meanwhile."""
        while True:
            self._raise_if_failed()
            changed = self._changed
            record = await self._off_loop(self.ledger.get, call_node_id)
            if predicate(record):
                return record
            await changed.wait()

    def wait_change(self) -> Awaitable[None]:
        """Return after the next change this executor applies or notices (any node), or
        after a request ends; raises ExecutorFailed once the loop has failed.

        The change counted is the next one after this call, not after the awaitable
        first runs: a caller that checks a condition and then schedules the wait
        (``ensure_future``) loses no change made in between. (A worker with
        ``--until-idle`` once missed the step that made it idle and waited for ever.)"""
        return self._wait_for(self._changed)

    async def _wait_for(self, changed: asyncio.Event) -> None:
        self._raise_if_failed()
        await changed.wait()
        self._raise_if_failed()

    def receipt(self, call_node_id: str) -> TerminalReceipt | None:
        return self.ledger.receipt(call_node_id)

    # --- the loop --------------------------------------------------------------------

    async def run(self, *, stop: asyncio.Event | None = None, until_idle: bool = False) -> None:
        """Send due requests and apply replies until ``stop`` is set (or, with
        ``until_idle``, until no operation is open or in flight)."""
        stop = stop or asyncio.Event()
        self._raise_if_failed()
        self._bind_loop()
        self._start_heartbeat()
        self._next_refresh = self.clock() + self.refresh_interval_s
        try:
            await self._loop_until(stop, until_idle)
        except ExecutorFailed:
            raise
        except (Exception, KeyboardInterrupt) as exc:
            # Whatever escapes the loop ends every wait with an error, never a hang.
            raise self._fail(exc) from exc
        finally:
            await self._drain()

    async def _loop_until(self, stop: asyncio.Event, until_idle: bool) -> None:
        while not stop.is_set():
            if self._crashed is not None:
                raise self._crashed
            # A bounded number of requests in flight: memory stays flat and servers
            # are not flooded when thousands of operations fall due at once.
            capacity = max(0, self.in_flight_max - len(self._tasks))
            self._wakeup.clear()
            step = await self._off_loop(self._step, self.clock(), capacity)
            if step.listeners is not None:
                self._apply_listeners(*step.listeners, now=self.clock())
            for record in step.finished:
                self._resolve(record)
            for node in step.changed:
                self._signal_change(node)
            if step.settled != self._settled:
                self._settled = step.settled
                self._signal_change(None)
            for action in step.actions:
                task = asyncio.create_task(self._perform(action))
                self._tasks.add(task)
                task.add_done_callback(self._task_done)
            if until_idle and step.idle and not self._tasks:
                return
            wake_at = step.wake_at if step.wake_at is not None else self._next_refresh
            retry_at = self._listen_retry_at
            if retry_at is not None and retry_at > self.clock():
                wake_at = min(wake_at, retry_at)  # a held-back listener's reopen
            else:
                self._listen_retry_at = None
            timeout = max(0.0, min(self._next_refresh, wake_at) - self.clock())
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wait_any(stop)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        """A request task ended: an error escaping it (a ledger failure while applying a
        reply) stops the loop, so that no wait hangs on an operation nobody drives."""
        self._tasks.discard(task)
        self._settled = False  # its reply may have planned more: the next step judges again
        if not task.cancelled() and task.exception() is not None and self._crashed is None:
            self._crashed = task.exception()
            self._wakeup.set()
        self._signal_change(None)  # one fewer in flight: an idle wait may end now

    def _fail(self, exc: BaseException) -> ExecutorFailed:
        """End every wait with ExecutorFailed (chained to ``exc``), and return it."""
        if self._failure is None:
            failure = ExecutorFailed(f"the executor stopped: {type(exc).__name__}: {exc}")
            failure.__cause__ = exc
            self._failure = failure
        log.error("executor loop failed: %r", exc)
        for futures in self._accepted.values():
            for future in futures:
                if not future.done():
                    future.set_exception(self._failure)
        self._accepted.clear()
        self._signal_change(None)
        return self._failure

    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            raise self._failure

    def _start_heartbeat(self) -> None:
        """Renew the lease on a thread of its own, beside the ledger thread's queue."""
        if self.engine.owner is None or self._heartbeat is not None:
            return
        every_s = self.engine.lease.renew_every_s

        def beat() -> None:
            while not self._heartbeat_stop.wait(every_s):
                try:
                    self.engine.heartbeat(self.clock())
                except Exception:  # the ledger may be away: the next beat tries again
                    log.exception("lease renewal failed")

        self._heartbeat = threading.Thread(target=beat, name="longcall-lease", daemon=True)
        self._heartbeat.start()

    def _stop_heartbeat(self) -> None:
        self._heartbeat_stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join()

    def _step(self, now: float, capacity: int) -> _Step:
        """One turn of the engine, on the ledger thread: keep the leases, notice other
        processes' writes, read the watched nodes, and pop what is due."""
        finished: list[OperationRecord] = []
        changed = self._apply_replies()
        refresh_due = now >= self._next_refresh
        housekeeping = self.engine.next_housekeeping()
        rounds_due = refresh_due or (housekeeping is not None and now >= housekeeping)
        held_before = (
            {node: record.version for node, record in self.engine.records.items()}
            if rounds_due
            else {}
        )
        if refresh_due:
            self._next_refresh = now + self.refresh_interval_s
            self._listen_dirty = True
            if self.engine.owner is None:
                self.engine.refresh(now=now, adopt_new=self.adopt_new)
            for node in [n for n in self._watched if n not in self.engine.records]:
                record = self.ledger.find(node)
                if record is not None and record.version != self._watched_versions.get(node):
                    self._watched_versions[node] = record.version
                    changed.append(node)
                if record is None or record.is_settled:
                    self._watched.discard(node)
                    self._watched_versions.pop(node, None)
                    if record is not None:
                        finished.append(record)
        self.engine.housekeep(now=now)
        if rounds_due:
            # What a refresh or a claim round took, let go or re-planned (another
            # process's cancel or answer): reported, so a wait on it re-checks at once.
            held = self.engine.records
            changed += [
                node
                for node in {*held_before, *held}
                if node not in changed
                and (node not in held or held_before.get(node) != held[node].version)
            ]
        listeners = None
        if self._listen_dirty and (
            now >= self._next_listen_sync or len(self.engine.records) <= LISTEN_EAGER_MAX
        ):
            # With many operations, re-syncing on every create would reopen a stream per
            # create with every id in it; once in a while is enough, since polling
            # covers the gap (X3).
            listeners = self._listener_targets()
            self._next_listen_sync = now + LISTEN_RESYNC_S
        actions = self.engine.due(now, limit=capacity)
        full = len(actions) >= capacity
        wakes = [
            None if full else self.engine.next_wakeup(),
            self.engine.next_housekeeping(),
        ]
        present = [w for w in wakes if w is not None]
        return _Step(
            actions=actions,
            wake_at=min(present) if present else None,
            idle=self.engine.idle() and not self._watched,
            listeners=listeners,
            finished=finished,
            changed=changed,
            settled=not actions and self._waits_for_people(),
        )

    def _waits_for_people(self) -> bool:
        """On the ledger thread: no request planned, and every operation there is to
        drive is held here waiting for a person (an answer, or an operator)."""
        if self.engine.idle():
            return True
        if self.engine.next_wakeup() is not None:
            return False
        census = self.engine.last_census
        if self.engine.owner is None or not self.engine.claim_all or census is None:
            return self.engine.owner is None or not self.engine.claim_all
        return census.open_operations <= len(self.engine.records)

    async def _wait_any(self, stop: asyncio.Event) -> None:
        waiters = [asyncio.ensure_future(self._wakeup.wait()), asyncio.ensure_future(stop.wait())]
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    async def _drain(self) -> None:
        listeners = [task for _ids, task in self._listeners.values()]
        self._listeners.clear()
        self._listener_opened_at.clear()
        self._listen_dirty = True
        for task in [*self._tasks, *listeners]:
            task.cancel()
        if self._tasks or listeners:
            await asyncio.gather(*self._tasks, *listeners, return_exceptions=True)
        if self._replies:  # what came back before the stop is kept
            try:
                applied = await self._off_loop(self._apply_replies)
            except Exception:  # the ledger failed (the loop's failure, say)
                log.exception("replies not applied at the stop")
            else:
                for node in applied:
                    self._signal_change(node)

    # --- push (X3: listen for speed) -------------------------------------------------

    def _listener_targets(
        self,
    ) -> tuple[dict[tuple[str, str], set[str]], dict[tuple[str, str], str]]:
        """On the ledger thread: which operation ids each (server, protocol) listener
        should cover, and the call node of each."""
        self._listen_dirty = False
        wanted: dict[tuple[str, str], set[str]] = {}
        nodes: dict[tuple[str, str], str] = {}
        for node, record in self.engine.records.items() if self.push else ():
            if record.operation_id is None or record.state is State.RECONCILIATION_REQUIRED:
                continue
            interval = record.poll_interval_s
            if interval is not None and interval < PUSH_POLL_INTERVAL_MIN_S:
                continue  # polled soon enough: a stream would cost more than it saves
            wanted.setdefault((record.server, record.protocol), set()).add(record.operation_id)
            nodes[(record.server, record.operation_id)] = node
        return wanted, nodes

    def _apply_listeners(
        self,
        wanted: dict[tuple[str, str], set[str]],
        nodes: dict[tuple[str, str], str],
        *,
        now: float,
    ) -> None:
        """Keep one push listener per (server, protocol) holding open operations; reopen
        it when an operation it does not cover appears (a running stream at most once
        per :data:`LISTEN_COALESCE_S`), stop it when none is left."""
        self._push_nodes = nodes
        listened = set(nodes.values())
        self._pushed = {n: v for n, v in self._pushed.items() if n in listened}
        self._listen_retry_at = None
        for key in [k for k in self._listeners if k not in wanted]:
            self._listeners.pop(key)[1].cancel()
            self._listener_opened_at.pop(key, None)
        for key, ids in wanted.items():
            adapter = self._adapters.get(key)
            if adapter is None:
                self._listen_dirty = True  # made by the first request; a later sync starts it
                continue
            current = self._listeners.get(key)
            # A listener that returned (no push, or all its operations ended) stays
            # recorded, so it is not reopened until a new operation appears.
            if current is not None and ids <= current[0]:
                continue
            if current is not None and not current[1].done():
                reopen_at = self._listener_opened_at.get(key, now) + LISTEN_COALESCE_S
                if now < reopen_at:
                    # Breaking the running stream now would cost its connection; the
                    # new operations wait for the next reopen (polls carry them).
                    self._listen_dirty = True
                    retry: float | None = self._listen_retry_at
                    self._listen_retry_at = reopen_at if retry is None else min(retry, reopen_at)
                    continue
                current[1].cancel()
            covered = frozenset(ids)
            task = asyncio.create_task(self._listen(key[0], adapter, covered))
            self._listeners[key] = (covered, task)
            self._listener_opened_at[key] = now

    async def _listen(self, server: str, adapter: Adapter, operation_ids: frozenset[str]) -> None:
        def on_change(operation_id: str, status: str | None) -> None:
            node = self._push_nodes.get((server, operation_id))
            record = self.engine.records.get(node) if node is not None else None
            if node is None or record is None:
                return  # not ours, or no longer open
            if status is not None and status == record.server_status_raw:
                return  # nothing we have not polled already (a snapshot, a progress tick)
            if self._pushed.get(node) == record.version:
                return  # its poll is asked for already: the poll reads the newest status
            self._pushed[node] = record.version
            self.notify(node)

        try:
            await adapter.listen(operation_ids, on_change)
        except Exception:  # a push bug must not stop anything: polling carries on (X3)
            log.exception("push listener failed at %s", server)

    async def aclose(self) -> None:
        """Stop: cancel what is in flight, hand every held operation back (no lease
        wait for the next worker), close the adapters and the ledger thread."""
        await self._drain()
        self._stop_heartbeat()
        with contextlib.suppress(Exception):
            await self._off_loop(self.engine.retire)
        open_servers: set[str] | None
        try:
            open_servers = {
                r.server
                for r in await self._off_loop(
                    self.ledger.list_by_state, *(s for s in State if s not in TERMINAL)
                )
            }
        except Exception:  # the ledger failed (the loop's failure, say): keep every session
            log.warning("closing without ending sessions: the ledger cannot be read")
            open_servers = None
        for (server, _protocol), adapter in {
            id(a): (k, a) for k, a in self._adapters.items()
        }.values():
            with contextlib.suppress(Exception):
                ending = open_servers is not None and server not in open_servers
                if ending and isinstance(adapter, McpAdapter):
                    # Nothing of ours is open there: end the session (Streamable HTTP).
                    await adapter.end_session()
                await adapter.aclose()
        self._adapters.clear()
        closer = getattr(self._adapter_factory, "aclose", None)
        if closer is not None:
            with contextlib.suppress(Exception):
                await closer()
        self._io.shutdown(wait=True)
        self.metrics.close()

    # --- one action ------------------------------------------------------------------

    async def _perform(self, action: Action) -> None:
        outcome: Outcome | NotSent | None
        try:
            async with asyncio.timeout(self.request_timeout_s):
                outcome = await self._send(action)
        except asyncio.CancelledError:
            # Stopped mid-request: plan it again for whoever runs this engine next.
            self._io.submit(self._locked, self.engine.requeue, action, now=self.clock())
            raise
        except SendWindowPassed:
            outcome = NotSent.SLOT_MISSED  # stopped before its bytes were written: never late
        except TimeoutError:
            outcome = failure_outcome(
                action.kind, _failure(FailureKind.TIMEOUT, "no reply in time")
            )
        except AdapterError as exc:
            # No adapter to send with (negotiation failed): nothing left this process.
            failure = _failure(FailureKind.CONNECT_FAILED, str(exc), processed_possible=False)
            outcome = failure_outcome(action.kind, failure)
        except Exception as exc:  # an adapter bug must not kill the executor
            log.exception("adapter failed on %s for %s", action.kind, action.call_node_id)
            outcome = failure_outcome(action.kind, _failure(FailureKind.TRANSPORT, repr(exc)))
        # Applied at the ledger thread's next turn, with whatever else came back by then;
        # the loop reports the node changed once it is applied (_step).
        now = self.clock()
        node = action.call_node_id
        if outcome is None:
            self._replies.append((node, functools.partial(self.engine.end_without_reply, action)))
        elif outcome is NotSent.SLOT_MISSED:
            self._replies.append(
                (node, functools.partial(self.engine.slot_missed, action, now=now))
            )
        elif outcome is NotSent.HELD:
            self._signal_change(node)  # the engine planned it again for the Retry-After's end
        else:
            assert isinstance(outcome, Outcome)
            in_hand = action.kind == "Poll" and self._holds_result(action)
            apply = functools.partial(self._apply_reply, action, outcome, now, in_hand)
            self._replies.append((node, apply))
            if isinstance(outcome.event, (SubmitAcknowledged, SubmissionFound)):
                self._listen_dirty = True  # a new operation id to listen for (X3)
            if outcome.progress is not None or isinstance(outcome.event, WorkingObserved):
                self._report_progress(node, outcome)
        self._wakeup.set()

    def _apply_replies(self) -> list[str]:
        """On the ledger thread (the engine held): apply every reply waiting, in the
        order they came; the call nodes they changed."""
        applied = []
        while self._replies:
            node, apply = self._replies.popleft()
            apply()
            applied.append(node)
        return applied

    async def _is_held(self, action: Action) -> bool:
        """:meth:`Engine.held` at the moment ``action`` would leave. It reads and plans in
        memory only: on the loop at once while nobody holds the engine and no reply
        waits to be applied (one may hold the server: a 429), else on the ledger
        thread after the replies waiting (the loop never waits for the engine's lock:
        a commit may hold it)."""
        if not self._replies and self._engine_lock.acquire(blocking=False):
            try:
                return self.engine.held(action, now=self.clock())
            finally:
                self._engine_lock.release()
        return await self._off_loop(self._held_after_replies, action)

    def _held_after_replies(self, action: Action) -> bool:
        for node in self._apply_replies():
            self._wake_soon(node)
        return self.engine.held(action, now=self.clock())

    def _holds_result(self, action: Action) -> bool:
        """On the loop: whether the adapter that polled ``action`` now holds its result."""
        adapter = self._adapters.get((action.server, action.record.protocol))
        return adapter is not None and adapter.holds_result(action.record)

    def _apply_reply(
        self, action: Action, outcome: Outcome, now: float, in_hand: bool = False
    ) -> None:
        """On the ledger thread: apply a reply, then keep the server's breaker in the
        ledger if the reply opened or closed it (the operator's console reads it).
        ``in_hand``: the poll's reply inlined the result, so the fetch that follows
        sends nothing and waits for no send slot."""
        if in_hand:
            self.engine.scheduler.result_in_hand(action.call_node_id)
        before = self.engine.scheduler.breakers.get(action.server)
        self.engine.apply_reply(action, outcome, now=now)
        if self.engine.owner is not None:
            after = self.engine.scheduler.breakers.get(action.server)
            keep_breaker(self.ledger, server=action.server, owner=self.engine.owner,
                         before=before, after=after, event=outcome.event)  # fmt: skip

    def _signal_change(self, call_node_id: str | None) -> None:
        """On the loop: wake every waiter, and tell ``on_change`` which node changed."""
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
        if call_node_id is not None and self.on_change is not None:
            self.on_change(call_node_id)

    async def _send(self, action: Action) -> Outcome | NotSent | None:
        adapter = await self._adapter(action.server, action.record.protocol)
        record = action.record
        # Other replies ran since due() issued this: a 429/503 among them holds the
        # server (X3, X9), and nothing leaves before its Retry-After is over.
        if await self._is_held(action):
            return NotSent.HELD
        match action.command:
            case SendSubmit():
                payload = await self._off_loop(self.engine.request_payload, record.call_node_id)
                return await adapter.submit(record, payload)
            case LookupSubmission():
                return await adapter.lookup(record)
            case Poll():
                return await self._within_slot(action, lambda: adapter.poll(record), poll=True)
            case FetchResult():
                return await self._within_slot(action, lambda: adapter.fetch_result(record))
            case SendCancel():
                return await adapter.cancel(record)
            case SendInputResponse(keys=keys):
                answers = await self._off_loop(self.engine.input_answers, record, keys)
                return await adapter.send_input(record, answers)
        raise AssertionError(f"no adapter call for {action.kind}")

    async def _within_slot(
        self, action: Action, send: Callable[[], Awaitable[Outcome]], *, poll: bool = False
    ) -> Outcome | NotSent:
        """Send a read that may hold a send slot of its server's shared budget (X3): a
        slot is used at its moment or up to its validity later, never after. Checked
        before the adapter call and again by the HTTP driver as the request is written
        (``send_window``); a poll is counted when it leaves."""
        if action.not_after is None:
            if poll:
                self.metrics.observe_poll(action.server, self.clock())
            return await send()
        if action.slot_passed(self.clock()):
            return NotSent.SLOT_MISSED

        def may_leave() -> bool:
            now = self.clock()
            if action.slot_passed(now):
                return False
            if poll:
                self.metrics.observe_poll(action.server, now)
            return True

        with send_window(may_leave, lambda: not action.slot_passed(self.clock())) as window:
            outcome = await send()
        if poll and not window.asked:  # an adapter that sends without the HTTP driver
            self.metrics.observe_poll(action.server, self.clock())
        return outcome

    async def _adapter(self, server: str, protocol: str) -> Adapter:
        key = (server, protocol)
        adapter = self._adapters.get(key)
        if adapter is not None:
            return adapter
        lock = self._adapter_locks.setdefault(key, asyncio.Lock())
        async with lock:
            adapter = self._adapters.get(key)
            if adapter is None:
                adapter = await self._adapter_factory(server, protocol)
                self._adapters[key] = adapter
                if protocol == "":
                    self._adapters[(server, adapter.protocol)] = adapter
            return adapter

    # --- callbacks from the engine ---------------------------------------------------

    def _note_accepted(self, record: OperationRecord) -> None:
        """From the engine (on the ledger thread, or a synchronous caller's)."""
        self.metrics.observe_accepted(record)
        if record.shadow_of is not None:
            self._compare(record.call_node_id)
        for node in self._shadows.pop(record.call_node_id, ()):
            self._compare(node)
        self._resolve_soon(record)

    def _compare(self, shadow_node: str) -> None:
        """Record a shadow pair's comparison once both are terminal (R1); a failure
        here is logged, never the primary's concern (``rollout status`` compares
        whatever is left)."""
        try:
            compare_shadow(self.ledger, shadow_node)
        except LongcallError as exc:
            log.warning("shadow %s not compared: %s", shadow_node, exc)

    def _note_escalated(self, record: OperationRecord, reason: str) -> None:
        log.warning("operation %s needs reconciliation: %s", record.call_node_id, reason)
        self.metrics.observe_escalated(record)
        self._escalated[record.call_node_id] = reason
        self._resolve_soon(record)

    def _resolve_soon(self, record: OperationRecord) -> None:
        loop = self._loop
        if loop is None or loop.is_closed() or threading.current_thread() is self._loop_thread:
            self._resolve(record)
        else:
            loop.call_soon_threadsafe(self._resolve, record)

    def _resolve(self, record: OperationRecord) -> None:
        """On the loop: wake whoever waits on this call node."""
        self._watched.discard(record.call_node_id)
        if record.is_terminal:
            self._finished[record.call_node_id] = record
            if len(self._finished) > FINISHED_KEPT:
                del self._finished[next(iter(self._finished))]
        for future in self._accepted.pop(record.call_node_id, []):
            if not future.done():
                future.set_result(record)

    def _report_progress(self, call_node_id: str, outcome: Outcome) -> None:
        if self.on_progress is None:
            return
        message = getattr(outcome.event, "status_message", None)
        self.on_progress(call_node_id, outcome.progress, message)


def _failure(
    kind: FailureKind, detail: str, *, processed_possible: bool = True
) -> TransportFailure:
    """A failure around an adapter call; what it means is the adapters' one
    classification (``longcall.adapters.outcomes``), not decided here."""
    return TransportFailure(kind=kind, detail=detail, processed_possible=processed_possible)
