"""One simulated world: the real executor and mappings against simulated servers.

A :class:`World` is built from one ``random.Random`` (and nothing else random, no wall
clock), so one seed replays one run exactly and hypothesis can shrink a failing
schedule. It owns the virtual clock and the seeded discrete-event queue, the
simulated network, crashes and restarts of the executor, a second racing executor
with a stale epoch, the caller's cancels, the people who answer input, and an
operator who resolves reconciliations where the simulated server knows the truth.

The executor side is real: :class:`~longcall.runtime.engine.Engine` with the real core
and SQLite ledger decides; each engine :class:`~longcall.runtime.engine.Action` becomes
the real mapping's exchange (:mod:`longcall.adapters.mcp`, one mapping per executor
process and server, as the executor holds them), and this module plays the part of
the I/O driver (:class:`~longcall.adapters.http.HttpDriver`): each request the
exchange yields is one network hop (latency, loss of the request or of the response,
reordering); an answer comes back as the ``HttpReply`` the driver would build (an event
stream decoded by the real :class:`~longcall.adapters.sse.SseDecoder`), a request that
gets no answer as the driver's ``TransportFailure(TIMEOUT)`` after the request's time
budget, a body cut mid-way as the driver's translation of the reset; an action still
unanswered after the executor's per-action budget ends as
:func:`~longcall.adapters.outcomes.failure_outcome`. The outcome the exchange returns
goes to ``Engine.apply_reply`` at the virtual time it arrives.

Faults live here, in the simulated servers and in the network, never as flags inside
``core``, ``runtime`` or ``adapters``.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import heapq
import itertools
import math
import os
import random
import shutil
import tempfile
from collections import defaultdict
from collections.abc import Callable, Generator
from typing import Any, Protocol

import httpx

from longcall.adapters.base import Outcome
from longcall.adapters.exchange import HttpReply, HttpRequest, TransportFailure
from longcall.adapters.http import failure_of_exception
from longcall.adapters.kinds import result_kind_of
from longcall.adapters.outcomes import failure_outcome
from longcall.adapters.sse import SseDecoder
from longcall.core import DEFAULT_POLICY, OperationRecord, ServerStatus, State, TerminalReceipt
from longcall.core.commands import AskInput, Command
from longcall.core.events import (
    Event,
    ReconciledManually,
    RequestFailed,
    Resolution,
)
from longcall.core.keys import digest_json
from longcall.core.retry import FailureKind
from longcall.errors import IllegalTransition, LongcallError, StaleEvent
from longcall.ledger import WORKER
from longcall.runtime import rollout
from longcall.runtime.engine import Action, CallSpec, Engine
from longcall.runtime.leases import LeasePolicy
from longcall.runtime.step import LedgerShell
from longcall.sim import measures
from longcall.sim.adapter import Route, connect, exchange_for
from longcall.sim.aip151 import Aip151Server
from longcall.sim.apify import ApifyServer
from longcall.sim.checks import Checker, ObservedLedger, Violation, audit
from longcall.sim.config import DEFAULT, ROLLBACK_TO, SKEW_MAX_S, Config, Profile
from longcall.sim.mcp import McpServer, Wire
from longcall.sim.server import AIP151, APIFY, Hold, Hop, Served, SimServer
from longcall.sim.truth import TERMINAL

FAULT_CLASSES: tuple[str, ...] = (
    "create_response_lost",
    "replies_reordered",
    "input_required_replayed",
    "completion_cancel_together",
    "cancel_ack_lost",
    "result_lost_or_truncated",
    "stale_epoch_callback",
    "task_id_reused",
    "not_found_before_expiry",
    "not_found_after_expiry",
    "poll_429",
    "poll_503",
    "executor_crash",
    "executor_race",
    "request_refused_unread",
    "reply_crossed",
    "aip151_start_response_lost",
    "aip151_cancel_races_completion",
    "apify_page_lost",
    "apify_page_contradicts",
    "apify_zero_items",
    "apify_abort_races_completion",
    "not_found_after_retention",
    "worker_paused",
    "lease_expired",
    "worker_killed",
    "worker_retired",
    "clock_skew",
    "poll_slot_missed",
    "adapter_rollback",
)
"""Every fault class of SPEC F1, each with its own counter in the report (seven belong
to the AIP-151 and Apify-style worlds, SPEC P3, P4; the last seven to the worlds of
several workers on one ledger, D1, R3)."""

POLL_QPS_LIMIT = 2.0
"""The configured per-server poll QPS of every simulated executor (X3, F3)."""
HEAL_AT_S = 900.0
"""Faults stop here; the liveness phase follows (virtual seconds)."""
LIVENESS_BOUND_S = 1800.0
"""After healing, every node must be terminal within this much virtual time."""
ACTION_TIMEOUT_S = 60.0
"""The executor's budget for one action, all its requests together
(``Executor(request_timeout_s=60)``): past it the action has failed with a timeout."""
CLAIMS_SLACK = 2
"""Claims an operation may take beyond one per fault that took its worker away (D1)."""
WORKER_STATS = (
    "claimed",
    "takeovers",
    "fenced",
    "lease_lapses",
    "slots_missed",
    "released",
    "rebound",
)
"""The engine counters a world of several workers adds up (``Engine.stats``), and the
operations a rollback rebound (R3, counted by the world)."""
OPERATOR = "sim-operator"
OPERATOR_NOTE = "resolved from the simulated server's truth"

LedgerFactory = Callable[..., ObservedLedger]
"""(path, *, new_identity) → the ledger a world runs on."""
Exchange = Generator[Any, Any, Outcome | None]


class Channel(Protocol):
    """A push channel riding on a world (webhook deliveries): its events come back
    through :meth:`World.at` as ``channel`` events."""

    def on_event(self, what: str, *args: Any) -> None: ...


STEPS_AT_ONE_INSTANT_MAX = 20_000
"""More loop steps than this at one virtual instant is a busy loop (a finding)."""


@dataclasses.dataclass(slots=True, kw_only=True)
class Flight:
    """One action on its way: its exchange and the hop it waits on."""

    eid: int
    action: Action
    exchange: Exchange
    deadline: float
    hop: int = 0
    """The number of the hop in flight: events of older hops are void."""
    done: bool = False
    deadline_armed: bool = False


@dataclasses.dataclass(slots=True, kw_only=True)
class Result:
    """What one permutation measured; every gate with the number of cases it judged."""

    seed: int | None
    violations: list[Violation]
    divergence: int = 0
    receipts_compared: int = 0
    duplicates: int = 0
    requests: int = 0
    polls: measures.PollJudgement = dataclasses.field(default_factory=measures.PollJudgement)
    cancel_latencies: list[float] = dataclasses.field(default_factory=list)
    cancel_latencies_operator: list[float] = dataclasses.field(default_factory=list)
    unknown_durations: list[float] = dataclasses.field(default_factory=list)
    receipts_max: int = 0
    receipts: int = 0
    outbox_rows: int = 0
    outbox_traced: int = 0
    faults: dict[str, int] = dataclasses.field(default_factory=dict)
    operator_resolutions: int = 0
    nodes: int = 0
    virtual_s: float = 0.0
    workers: int = 1
    """Lease-mode workers this world started (1: one single-process executor)."""
    claims_judged: int = 0
    claims_over: int = 0
    """Operations claimed more often than ``CLAIMS_SLACK`` + the faults that took their
    worker away (ping-pong between workers)."""
    claims_max: int = 0
    worker_stats: dict[str, int] = dataclasses.field(default_factory=dict)
    stale_sends: int = 0
    """Requests a worker sent for an operation the ledger no longer said it held."""
    trace: list[str] | None = None


class World:
    """One permutation: build, run to quiescence or the liveness bound, check."""

    def __init__(
        self,
        rng: random.Random,
        *,
        seed: int | None = None,
        trace: bool = False,
        profile: Profile = DEFAULT,
        ledger_factory: LedgerFactory = ObservedLedger,
        channel: Callable[[World], Channel] | None = None,
    ) -> None:
        """``channel``: builds a push channel over this world's servers and
        processes (:mod:`longcall.sim.webhooks`); None: the caller only polls."""
        self.rng = rng
        self.seed = seed
        self.trace: list[str] | None = [] if trace else None
        self.config = self._draw(rng, profile)
        self.faults: dict[str, int] = dict.fromkeys(FAULT_CLASSES, 0)
        self.checker = Checker()
        self._ledger_factory = ledger_factory
        self._tmpdir = tempfile.mkdtemp(prefix="longcall-sim-") if self.config.file_ledger else None
        self._ledger_path = (
            os.path.join(self._tmpdir, "ledger.db") if self._tmpdir is not None else ":memory:"
        )
        self._pooled = self._tmpdir is None and ledger_factory is ObservedLedger
        self.ledger = self._open_ledger()
        self.servers: dict[str, SimServer] = {
            sc.name: self._server(sc) for sc in self.config.servers
        }
        self.checker.cancel_received = self._cancel_received
        self.routes: dict[tuple[int, str], Route] = {}
        """One route (mapping) per executor process and server (a restart forgets, P3)."""
        self.node_server = {node: server for node, server, _ in self.config.nodes}
        self.request_of: dict[str, str] = {}
        self.now = 0.0
        self._queue: list[tuple[float, int, str, bool, tuple[Any, ...]]] = []
        """(when, order of scheduling, kind, essential, arguments of ``_on_<kind>``)."""
        self._seq = itertools.count()
        self._engine_ids = itertools.count()
        self.engines: dict[int, Engine] = {}
        self.workers = self.config.workers
        self.skew: dict[int, float] = {}
        """Per lease-mode worker: its clock minus the world's."""
        self.paused: dict[int, list[tuple[str, tuple[Any, ...]]]] = {}
        """Paused workers, and what reached them meanwhile (run when they resume)."""
        self.stalled: set[int] = set()
        """Workers whose lease renewal stopped (the rest of them runs)."""
        self.sending: dict[int, dict[int, Action]] = defaultdict(dict)
        """Per worker, the actions between ``due`` and their adapter call."""
        self._sends = itertools.count()
        self._owners = itertools.count()
        self.worker_stats: dict[str, int] = dict.fromkeys(WORKER_STATS, 0)
        self.took_away: dict[str, int] = defaultdict(int)
        """call node -> the faults that took the process driving it away (crash, race,
        kill, pause, lease expiry, retire): each may cost it one more claim."""
        self.workers_started = 0
        self.stale_sends = 0
        self.flights: dict[int, dict[int, Flight]] = defaultdict(dict)
        """Per worker, its actions on the network (a clean stop requeues them)."""
        self.newest_id = self._new_engine() if self.workers is None else -1
        self.started: set[str] = set()
        self.told: dict[tuple[int, str], list[tuple[float, float]]] = defaultdict(list)
        """(executor, task id) -> (delivered at, interval) the servers told it (X3)."""
        self.bases: dict[tuple[int, str], list[tuple[float, bool]]] = defaultdict(list)
        """(executor, node) -> when it applied a reply or an answer, and whether plainly."""
        self.retry_afters: dict[str, list[tuple[int, float, float]]] = defaultdict(list)
        """server -> (executor, delivered at, Retry-After) of its 429/503 answers."""
        self.departures: dict[str, list[tuple[int, float, str, str]]] = defaultdict(list)
        """server -> (executor, sent at, request kind, node) of every action's request as
        it left the executor, whatever became of it (the Retry-After gate's measure)."""
        self.operator_resolutions = 0
        self.actions_sent = 0
        self.cancels_requested: set[str] = set()
        self._essential = 0
        self.channel = channel(self) if channel is not None else None

    def _draw(self, rng: random.Random, profile: Profile) -> Config:
        """The world's configuration (a world of another kind reshapes it)."""
        return Config.draw(rng, profile)

    @property
    def newest(self) -> Engine:
        return self.engines[self.newest_id]

    # --- plumbing --------------------------------------------------------------------

    def _server(self, sc: Any) -> SimServer:
        common: dict[str, Any] = {
            "lookup": sc.lookup,
            "idempotent": sc.idempotent,
            "poll_interval_s": sc.poll_interval_s,
            "ttl_s": sc.ttl_s,
            "rng": self.rng,
            "faults": self.config.server_faults,
            "count": self.count,
            "violation": self.checker.fail,
        }
        if sc.protocol == AIP151:
            return Aip151Server(sc.name, **common)
        if sc.protocol == APIFY:
            return ApifyServer(sc.name, **common)
        wire = Wire(streams=sc.streams, input_interval_s=sc.input_interval_s)
        return McpServer(sc.name, protocol=sc.protocol, wire=wire, **common)

    def _ledger_identity(self) -> tuple[str, str]:
        digest = hashlib.sha256(f"longcall-sim-ledger:{self.seed}".encode()).hexdigest()
        return f"sim-{self.seed}", digest

    def count(self, fault: str) -> None:
        self.faults[fault] = self.faults.get(fault, 0) + 1
        self.log("fault", fault)

    def log(self, who: str, what: str) -> None:
        if self.trace is not None:
            self.trace.append(f"{self.now:11.4f} {who:<8} {what}")

    def _open_ledger(self) -> ObservedLedger:
        # The ledger's identity comes from the seed, not from the system's randomness:
        # its caller key is in every submission key, and a seed replays byte for byte.
        if self._pooled:
            ledger = memory_ledger(self._ledger_identity)
        else:
            ledger = self._ledger_factory(self._ledger_path, new_identity=self._ledger_identity)
        ledger.checker = self.checker
        self.checker.ledger = ledger
        return ledger

    def _new_engine(self, *, skew: float = 0.0) -> int:
        owner: str | None = None
        lease: LeasePolicy | None = None
        if self.workers is not None:
            owner = f"w{next(self._owners)}"
            lease = LeasePolicy.of(self.workers.lease_s)
        engine = Engine(
            self.ledger,
            rng=self.rng,
            poll_qps_max=POLL_QPS_LIMIT,
            input_policy=self._human_gate if self.config.human_gate else _answer_everything,
            owner=owner,
            kind=WORKER,
            lease=lease,
        )
        eid = next(self._engine_ids)
        self.engines[eid] = engine
        if owner is not None:
            # As the executor runs a worker: renewal on a thread of its own (heartbeat),
            # a first claim round one interval after registering (resume_all).
            engine.external_heartbeat = True
            self.skew[eid] = skew
            self.workers_started += 1
            engine.resume_all(now=self.clock(eid))
            self.at(self.now + engine.lease.renew_every_s, "beat", eid, essential=False)
            self.log(f"e{eid}", f"worker {owner} starts (clock {skew:+.4f} s)")
        return eid

    def clock(self, eid: int) -> float:
        """What worker ``eid``'s clock reads now (world time plus its skew)."""
        return self.now + self.skew.get(eid, 0.0)

    def _active(self, eid: int) -> bool:
        return eid in self.engines and eid not in self.paused

    def _retire_stats(self, engine: Engine) -> None:
        for name in WORKER_STATS:
            self.worker_stats[name] += engine.stats.get(name, 0)

    def _held_by(self, eid: int) -> list[str]:
        """The open operations the ledger says worker ``eid`` holds."""
        engine = self.engines.get(eid)
        if engine is None or engine.owner is None:
            return []
        return [n for n, owner in self.checker.owner.items() if owner == engine.owner]

    def _route(self, eid: int, server: str) -> Route:
        route = self.routes.get((eid, server))
        if route is None:
            target = self.servers[server]
            graceful = next(s.graceful for s in self.config.servers if s.name == server)
            route = connect(
                target,
                lambda request: self._direct(target, request),
                clock=lambda: self.now,
                abort_gracefully=graceful,
            )
            self.routes[(eid, server)] = route
        return route

    def _direct(self, server: SimServer, request: HttpRequest) -> HttpReply | TransportFailure:
        """Negotiation's link: answered at once, no fault (X1 happens before any call)."""
        assert isinstance(server, McpServer | Aip151Server)
        served = server.serve(request, self.now, None)
        assert isinstance(served, Served)
        reply: HttpReply | TransportFailure = received(served)
        return reply

    def _cancel_received(self, node: str) -> int:
        """The highest cancel generation of ``node`` whose request reached a server."""
        return max((s.cancels_received.get(node, 0) for s in self.servers.values()), default=0)

    def at(self, t: float, kind: str, *args: Any, essential: bool = True) -> None:
        if essential:
            self._essential += 1
        heapq.heappush(self._queue, (t, next(self._seq), kind, essential, args))

    def _intent_eid(self, node: str) -> int | None:
        """The process a caller's intent for ``node`` goes through: the single executor,
        or the running worker that drives it, else any running worker (its write is
        then unowned, as an operator's). None: no worker runs right now."""
        if self.workers is None:
            return self.newest_id
        active = [eid for eid in self.engines if eid not in self.paused]
        for eid in active:
            if node in self.engines[eid].records:
                return eid
        return active[0] if active else None

    def _call(self, eid: int, fn: Callable[[Engine], Any]) -> Any:
        """Call an engine; an exception out of it is a finding, not a sim crash."""
        engine = self.engines.get(eid)
        if engine is None:
            return None
        try:
            return fn(engine)
        except LongcallError as exc:
            self.checker.fail("engine raised", f"{type(exc).__name__}: {exc}")
            return None
        except Exception as exc:  # foreign: it should have been translated where it entered
            self.checker.fail("engine raised", f"untranslated {type(exc).__name__}: {exc}")
            return None

    # --- the run ---------------------------------------------------------------------

    def run(self) -> Result:
        cfg = self.config
        if self.trace is not None:
            self._log_config()
        if self.workers is not None:
            for index in range(self.workers.count):
                self.newest_id = self._new_engine(skew=self.workers.skews[index])
            if any(self.workers.skews):
                self.count("clock_skew")
        for node, _server, start in cfg.nodes:
            self.at(start, "start", node)
        for node, t in cfg.cancels:
            self.at(t, "cancel", node)
        for t in cfg.crashes:
            self.at(t, "crash")
        if cfg.race_at is not None:
            self.at(cfg.race_at, "race")
        if self.workers is not None:
            for worker, t, away in self.workers.pauses:
                self.at(t, "pause", worker, away, essential=False)
            for worker, t, away in self.workers.stalls:
                self.at(t, "stall", worker, away, essential=False)
            for worker, t, after in self.workers.kills:
                self.at(t, "kill", worker, after, essential=False)
            for worker, t in self.workers.retires:
                self.at(t, "retire", worker, essential=False)
            if self.workers.rollback is not None:
                server, t = self.workers.rollback
                self.at(t, "rollback", server, essential=False)
        self.at(HEAL_AT_S, "heal", essential=False)
        self.at(cfg.operator_tick_s, "operator", essential=False)
        end = HEAL_AT_S + LIVENESS_BOUND_S
        try:
            self._loop(end)
        finally:
            result = self._finish(end)
        return result

    def _log_config(self) -> None:
        """The world as drawn: the first trace line (formatted only when tracing)."""
        cfg = self.config
        plans = [(n, dataclasses.astuple(p)) for n, p in cfg.plans.items()]
        self.log(
            "config",
            f"profile={cfg.profile} servers={[dataclasses.astuple(s) for s in cfg.servers]} "
            f"nodes={cfg.nodes} plans={plans} "
            f"cancels={cfg.cancels} crashes={cfg.crashes} race_at={cfg.race_at} "
            f"crash_on_action={cfg.crash_on_action} budgets={cfg.budgets} "
            f"repeat_cancel={cfg.repeat_cancel} human_gate={cfg.human_gate} "
            f"double_answer={cfg.double_answer} file_ledger={cfg.file_ledger} "
            f"workers={cfg.workers} "
            f"net={dataclasses.astuple(cfg.net)} "
            f"server_faults={dataclasses.astuple(cfg.server_faults)} latency={cfg.latency_s}",
        )

    def _loop(self, end: float) -> None:
        nodes = [n for n, _, _ in self.config.nodes]
        still, stood_at = 0, -1.0
        while True:
            if self._essential == 0 and all(self._terminal(n) for n in nodes):
                break
            # Liveness of the loop itself: a wake-up (engine or simulated server) that
            # names the present for ever would freeze virtual time and hang the run.
            still = still + 1 if self.now == stood_at else 0
            stood_at = self.now
            if still > STEPS_AT_ONE_INSTANT_MAX:
                self.checker.fail(
                    "time stands still",
                    f"{STEPS_AT_ONE_INSTANT_MAX} steps at t={self.now:.4f} without time moving",
                )
                break
            t_queue = self._queue[0][0] if self._queue else None
            t_engine: float | None = None
            for eid, engine in self.engines.items():
                if eid in self.paused:
                    continue
                wake = engine.next_wakeup()
                if engine.owner is not None:
                    # The executor's step wakes at the engine's next request or its
                    # next housekeeping turn, on the worker's own clock.
                    turn = engine.next_housekeeping()
                    if turn is not None and (wake is None or turn < wake):
                        wake = turn
                    if wake is not None:
                        wake = _world_time(wake, self.skew[eid])
                if wake is not None and (t_engine is None or wake < t_engine):
                    t_engine = wake
            if t_queue is None and t_engine is None:
                break
            if t_queue is not None and (t_engine is None or t_queue <= t_engine):
                t, _, kind, essential, args = heapq.heappop(self._queue)
                self._advance(t)
                if self.now > end:
                    break
                if essential:
                    self._essential -= 1
                getattr(self, "_on_" + kind)(*args)
            else:
                assert t_engine is not None
                self._advance(t_engine)
                if self.now > end:
                    break
                self._dispatch()

    def _dispatch(self) -> None:
        for eid in list(self.engines):
            if eid in self.paused:
                continue
            now = self.clock(eid)
            if self.engines[eid].owner is not None:
                # The executor's step: housekeeping first (claim rounds, re-reads),
                # then what is due.
                self._call(eid, functools.partial(Engine.housekeep, now=now))
            due: list[Action] = self._call(eid, functools.partial(Engine.due, now=now)) or []
            for action in due:
                self.actions_sent += 1
                if self.actions_sent == self.config.crash_on_action:
                    # L7: the decision is committed, its request never leaves.
                    self.log(f"e{eid}", f"crash before sending {action.kind}")
                    if self.workers is None:
                        self._on_crash()
                        return
                    self._kill(eid, round(self.rng.uniform(1.0, 30.0), 3))
                    break
                if self.workers is not None and self.workers.send_lag_s > 0:
                    token = next(self._sends)
                    self.sending[eid][token] = action
                    lag = self.rng.uniform(0.0, self.workers.send_lag_s)
                    self.at(self.now + lag, "send", eid, token)
                    continue
                self._start_flight(eid, action)

    def _on_channel(self, what: str, *args: Any) -> None:
        """An event of the push channel (a delivery arriving, a server's next change)."""
        assert self.channel is not None
        self.channel.on_event(what, *args)

    def _on_send(self, eid: int, token: int) -> None:
        """The executor's request task reaches its adapter call (after the loop's lag)."""
        if eid in self.paused:
            self.paused[eid].append(("send", (eid, token)))
            return
        action = self.sending[eid].pop(token, None)
        if action is None or eid not in self.engines:
            return  # the process stopped meanwhile
        if self._call(eid, lambda en: en.held(action, now=self.clock(eid))):
            # A 429/503 that reached the worker during the lag holds its server (X3, X9).
            self.log(f"e{eid}", f"held {action.kind} {action.call_node_id} (Retry-After)")
            return
        if action.slot_passed(self.clock(eid)):
            # The shared budget's slot passed: the read waits for a new one (X3).
            self.count("poll_slot_missed")
            self._call(eid, lambda en: en.slot_missed(action, now=self.clock(eid)))
            return
        self._start_flight(eid, action)

    def _advance(self, t: float) -> None:
        self.now = max(self.now, t)
        self.checker.now = self.now

    def _terminal(self, node: str) -> bool:
        return node in self.started and self.checker.state.get(node) in (
            State.ACCEPTED,
            State.CANCELLED_ACCEPTED,
        )

    # --- the driver: one action's exchange over the network ----------------------------

    def _start_flight(self, eid: int, action: Action) -> None:
        engine = self.engines[eid]
        node = action.call_node_id
        holder = self.checker.owner.get(node, engine.owner)  # absent: accepted meanwhile
        if engine.owner is not None and holder != engine.owner:
            # A request for an operation the ledger no longer gives this worker: the
            # other gates judge whether it did harm.
            self.stale_sends += 1
            self.log(f"e{eid}", f"stale send {action.kind} {node}")
        if self.trace is not None:
            self.log(f"e{eid}", f"send {action.kind} {node} {_detail(action.command)}")
        route = self._route(eid, action.server)
        exchange = exchange_for(route, action, engine)
        flight = Flight(
            eid=eid, action=action, exchange=exchange, deadline=self.now + ACTION_TIMEOUT_S
        )
        if engine.owner is not None:
            self.flights[eid][id(flight)] = flight
        try:
            request = next(exchange)
        except StopIteration as stop:
            # Settled without the network (known locally, or a cache): lands now.
            self.at(self.now, "land", flight, stop.value)
            return
        self._hop(flight, request)

    def _flight_at(self, flight: Flight, t: float, kind: str, *args: Any) -> None:
        """Schedule a flight's next step; past its deadline, the deadline comes first."""
        if t > flight.deadline:
            if not flight.deadline_armed:
                flight.deadline_armed = True
                self.at(flight.deadline, "deadline", flight)
            return
        self.at(t, kind, flight, flight.hop, *args)

    def _hop(self, flight: Flight, request: HttpRequest) -> None:
        flight.hop += 1
        action = flight.action
        sent = self.now + request.delay_s
        command = action.command
        if flight.hop == 1:
            self.departures[action.server].append(
                (flight.eid, sent, action.kind, action.call_node_id)
            )
        hop = Hop(
            client=flight.eid,
            action=action.kind,
            node=action.call_node_id,
            sent_at=sent,
            cancel_generation=getattr(command, "cancel_generation", 0),
        )
        if self.rng.random() < self.config.net.request_loss:
            self.log("net", f"request lost {action.kind} {action.call_node_id}")
            self._flight_at(flight, sent + request.timeout_s, "timeout", request)
            return
        lo, hi = self.config.latency_s
        self._flight_at(flight, sent + self.rng.uniform(lo, hi), "arrive", request, hop, None)

    def _on_arrive(
        self,
        flight: Flight,
        number: int,
        request: HttpRequest,
        hop: Hop,
        held_since: float | None,
    ) -> None:
        if flight.done or number != flight.hop:
            return
        server = self.servers[flight.action.server]
        assert isinstance(server, McpServer | Aip151Server)
        answer = server.serve(request, self.now, hop, held_since=held_since)
        node = hop.node
        if isinstance(answer, Hold):
            since = self.now if held_since is None else held_since
            self.log("server", f"{server.name} holds {hop.action} {node} to {answer.until:.4f}")
            later = request if answer.request is None else answer.request
            self._flight_at(flight, answer.until, "arrive", later, hop, since)
            return
        if answer.timed_out:
            self._flight_at(flight, hop.sent_at + request.timeout_s, "timeout", request)
            return
        if self.trace is not None:
            self.log("server", f"{server.name} {hop.action} {node} -> {_served_text(answer)}")
        net = self.config.net
        loss = net.response_loss
        if answer.what == "cancel":
            loss = max(loss, net.cancel_ack_loss)
        elif answer.what == "create":
            loss = max(loss, net.create_response_loss)
        if answer.dropped or self.rng.random() < loss:
            fault = {
                "create": "aip151_start_response_lost"
                if server.protocol == AIP151
                else "create_response_lost",
                "cancel": "cancel_ack_lost",
                "result": "result_lost_or_truncated",
            }.get(answer.what)
            if fault is not None:
                self.count(fault)
            self.log("net", f"response lost {hop.action} {node}")
            timeout_at = max(self.now, hop.sent_at + request.timeout_s)
            self._flight_at(flight, timeout_at, "timeout", request)
            return
        cut = self._cut(answer.what)
        if cut:
            self.count("result_lost_or_truncated")
        reply = received(answer, cut=self.rng.uniform(0.2, 0.9) if cut else None)
        intact = not cut
        lo, hi = self.config.latency_s
        delay = self.rng.uniform(lo, hi) + answer.delay_s
        if self.rng.random() < net.reorder:
            self.count("replies_reordered")
            delay += self.rng.uniform(2.0, 12.0)
        self._flight_at(flight, self.now + delay, "deliver", reply, answer, intact)

    def _cut(self, what: str) -> bool:
        """Whether the network truncates this reply's body (F1): a result's, and the
        2025-11-25 input side channel's stream. The side channel was never cut, so a
        read whose second hop failed fast and retryably after its first told a new
        interval was drawn about once in 10,000 worlds, and the corpus never met it.
        It draws only where truncation is on, so other worlds keep their draws."""
        truncate = self.config.net.truncate
        if what == "result":
            return self.rng.random() < truncate
        return what == "input" and truncate > 0 and self.rng.random() < truncate

    def _held(self, flight: Flight, kind: str, *args: Any) -> bool:
        """A paused worker reads nothing: what reaches it waits until it resumes."""
        if flight.eid not in self.paused:
            return False
        self.paused[flight.eid].append((kind, (flight, *args)))
        return True

    def _on_deliver(
        self, flight: Flight, number: int, reply: Any, served: Served, intact: bool
    ) -> None:
        if flight.done or number != flight.hop:
            return
        if self._held(flight, "deliver", number, reply, served, intact):
            return
        alive = flight.eid in self.engines
        if alive and intact:
            self._note(flight, served)
        elif not alive and self.rng.random() >= self.config.net.stale_callback:
            # The executor that sent this died. F1 "a callback from an old execution
            # epoch": sometimes its reply still reaches the new executor.
            self.log("net", f"reply to dead e{flight.eid} dropped {flight.action.kind}")
            flight.done = True
            return
        self._resume(flight, reply)

    def _note(self, flight: Flight, served: Served) -> None:
        """What a live executor was told: the ids it holds (only those are ever reused,
        F1), the poll interval and Retry-After it must honour (X3), the result bodies it
        received (X6) and the proofs of absence it got (X2)."""
        node = flight.action.call_node_id
        server = self.servers[flight.action.server]
        if served.handed is not None:
            server.handed.add(served.handed)
        if served.task_id is not None and served.interval_s is not None:
            self.told[(flight.eid, served.task_id)].append((self.now, served.interval_s))
        if served.retry_after_s is not None:
            self.retry_afters[server.name].append((flight.eid, self.now, served.retry_after_s))
        if served.result_digest is not None:
            self.checker.fetched.setdefault(node, set()).add(served.result_digest)
        if served.absent_key is not None:
            self.checker.proofs[node] = self.checker.proofs.get(node, 0) + 1

    def _resume(self, flight: Flight, reply: Any) -> None:
        """Send ``reply`` into the exchange: it asks again or returns the outcome."""
        try:
            request = flight.exchange.send(reply)
        except StopIteration as stop:
            self._land(flight, stop.value)
            return
        if flight.eid not in self.engines:
            flight.done = True  # a dead process sends nothing more
            flight.exchange.close()
            return
        self._hop(flight, request)

    def _on_timeout(self, flight: Flight, number: int, request: HttpRequest) -> None:
        if flight.done or number != flight.hop:
            return
        if self._held(flight, "timeout", number, request):
            return
        if flight.eid not in self.engines:
            flight.done = True
            return
        self.log(f"e{flight.eid}", f"timeout {flight.action.kind} {flight.action.call_node_id}")
        self._resume(flight, _timed_out(request))

    def _on_deadline(self, flight: Flight) -> None:
        """The action's whole budget is spent: the executor gives up on it (X9)."""
        if flight.done or self._held(flight, "deadline"):
            return
        flight.done = True
        flight.exchange.close()
        if flight.eid not in self.engines:
            return
        failure = TransportFailure(
            kind=FailureKind.TIMEOUT, detail="no reply in time", processed_possible=True
        )
        self._land(flight, failure_outcome(flight.action.kind, failure))

    def _on_land(self, flight: Flight, outcome: Outcome | None) -> None:
        if self._held(flight, "land", outcome):
            return
        self._land(flight, outcome)

    def _land(self, flight: Flight, outcome: Outcome | None) -> None:
        flight.done = True
        action = flight.action
        node = action.call_node_id
        eid = flight.eid
        if eid not in self.engines:
            if outcome is None or not self._active(self.newest_id):
                return
            self.count("stale_epoch_callback")
            eid = self.newest_id
        if outcome is None:
            self._call(eid, lambda en: en.end_without_reply(action))
            return
        if self.trace is not None:
            self.log(f"e{eid}", f"recv {action.kind} {node} {outcome.event.name}")
        stale = action.record.execution_epoch < self.checker.epoch.get(node, 0)
        writes = self.checker.writes
        now = self.clock(eid)
        self._call(eid, lambda en: en.apply_reply(action, outcome, now=now))
        plain = not isinstance(outcome.event, RequestFailed) or outcome.event.retry_after_s is None
        self.bases[(eid, node)].append((self.now, plain))
        if stale and self.checker.writes != writes:
            self.checker.fail(
                "stale-epoch reply committed",
                f"{node}: a {outcome.event.name} of epoch {action.record.execution_epoch}"
                f" changed the ledger at epoch {self.checker.epoch.get(node, 0)}",
            )

    # --- scripted happenings ---------------------------------------------------------

    def _on_start(self, node: str) -> None:
        server = self.servers[self.node_server[node]]
        plan = self.config.plans[node]
        arguments = {"node": node}
        business = digest_json(arguments)
        eid = self._intent_eid(node)
        if eid is None:
            self.at(self.now + 1.0, "start", node)  # no worker runs: the caller retries
            return
        server.plans[business] = plan
        self.request_of[node] = business
        route = self._route(eid, server.name)
        spec = CallSpec(
            call_node_id=node,
            binding=route.binding,
            arguments=arguments,
            budget_s=self.config.budgets.get(node),
        )
        self.started.add(node)
        self.log("caller", f"start {node} on {server.name}")
        version: str | None = None
        if self.workers is not None:
            # As the executor does: the ledger's rollout plan routes a new call (R2);
            # after a rollback, to the version rolled back to.
            version = rollout.route(
                self.ledger.rollout_plan(),
                protocol=route.binding.protocol,
                offered=route.binding.adapter_version,
                call_node_id=node,
            )
        self._call(eid, lambda en: en.start_call(spec, now=self.clock(eid), version=version))

    def _on_cancel(self, node: str) -> None:
        if node not in self.started or self._terminal(node):
            return
        eid = self._intent_eid(node)
        if eid is None:
            self.at(self.now + 1.0, "cancel", node)
            return
        outcome = self._call(eid, lambda en: en.cancel(node, now=self.clock(eid)))
        self.log("caller", f"cancel {node} -> {outcome.outcome if outcome else 'error'}")
        if outcome is not None and outcome.outcome == "requested":
            first = node not in self.cancels_requested
            self.cancels_requested.add(node)
            self.checker.cancel_since.setdefault(node, self.now)
            if first and self.config.repeat_cancel:
                self.at(self.now + self.rng.uniform(0.1, 10.0), "cancel", node)
        elif outcome is None or outcome.outcome == "not_cancellable":
            self.at(self.now + 5.0, "cancel", node)

    def _on_crash(self) -> None:
        """Kill every executor (drop its memory and in-flight replies) and restart one."""
        self.count("executor_crash")
        self._take_away(self._open_nodes())
        self.engines.clear()
        if self._tmpdir is not None:
            self.ledger.close()
            self.ledger = self._open_ledger()
        self.newest_id = self._new_engine()
        count = self._call(self.newest_id, lambda en: en.resume_all(now=self.now))
        self.log(f"e{self.newest_id}", f"restart: resumed {count}")

    def _on_race(self) -> None:
        """A second executor takes every open operation over; the first keeps going
        with its stale epoch (two pollers, fencing by CAS, D1)."""
        self.count("executor_race")
        self._take_away(self._open_nodes())
        self.newest_id = self._new_engine()
        count = self._call(self.newest_id, lambda en: en.resume_all(now=self.now))
        self.log(f"e{self.newest_id}", f"race: claimed {count}")

    def _open_nodes(self) -> list[str]:
        return [n for n, state in self.checker.state.items() if state not in _ACCEPTED]

    def _take_away(self, nodes: list[str]) -> None:
        for node in nodes:
            self.took_away[node] += 1

    # --- several workers (D1) --------------------------------------------------------

    def _worker(self, index: int) -> int | None:
        """The running process of drawn worker ``index`` (the index-th started)."""
        return index if index in self.engines else None

    def _on_beat(self, eid: int) -> None:
        """The worker's lease thread: renew every ``renew_every_s`` (not while the process
        is paused, nor while its renewal is stalled)."""
        engine = self.engines.get(eid)
        if engine is None:
            return
        self.at(self.now + engine.lease.renew_every_s, "beat", eid, essential=False)
        if eid in self.paused or eid in self.stalled:
            return
        self._call(eid, lambda en: en.heartbeat(self.clock(eid)))

    def _on_pause(self, index: int, away: float) -> None:
        eid = self._worker(index)
        if eid is None or eid in self.paused:
            return
        self.count("worker_paused")
        self._take_away(self._held_by(eid))
        self.paused[eid] = []
        self.log(f"e{eid}", f"paused for {away:g} s")
        self.at(self.now + away, "resume", eid, essential=False)

    def _on_resume(self, eid: int) -> None:
        """The process runs again: its lease thread and its loop wake in either order,
        then everything that reached it meanwhile is read, in order."""
        held = self.paused.pop(eid, [])
        if eid not in self.engines:
            return
        self.log(f"e{eid}", f"resumes ({len(held)} waiting)")
        beat_first = self.rng.random() < 0.5
        if beat_first and eid not in self.stalled:
            self._call(eid, lambda en: en.heartbeat(self.clock(eid)))
        for kind, args in held:
            getattr(self, "_on_" + kind)(*args)

    def _on_stall(self, index: int, away: float) -> None:
        eid = self._worker(index)
        if eid is None or eid in self.stalled:
            return
        self.count("lease_expired")
        self._take_away(self._held_by(eid))
        self.stalled.add(eid)
        self.log(f"e{eid}", f"lease renewal stalls for {away:g} s")
        self.at(self.now + away, "unstall", eid, essential=False)

    def _on_unstall(self, eid: int) -> None:
        self.stalled.discard(eid)
        if eid in self.engines and eid not in self.paused:
            self._call(eid, lambda en: en.heartbeat(self.clock(eid)))

    def _on_kill(self, index: int, after: float | None) -> None:
        eid = self._worker(index)
        if eid is not None:
            self._kill(eid, after)

    def _kill(self, eid: int, after: float | None) -> None:
        """SIGKILL: the process and its memory go, its leases stay until they lapse."""
        self.count("worker_killed")
        self._take_away(self._held_by(eid))
        self._drop(eid)
        self.log(f"e{eid}", "killed")
        self._replace(after)

    def _on_retire(self, index: int) -> None:
        """SIGTERM, as ``Executor.aclose``: the requests in flight are cancelled and
        planned again, then every held operation is released at once."""
        eid = self._worker(index)
        if eid is None or eid in self.paused:
            return
        self.count("worker_retired")
        self._take_away(self._held_by(eid))
        engine = self.engines[eid]
        now = self.clock(eid)
        stopped = list(self.sending.pop(eid, {}).values())
        for flight in self.flights.pop(eid, {}).values():
            if not flight.done:
                flight.done = True
                flight.exchange.close()
                stopped.append(flight.action)
        for action in stopped:
            self._call(eid, functools.partial(_requeue, action=action, now=now))
        released = self._call(eid, lambda en: en.retire())
        self.log(f"e{eid}", f"retired, released {released}")
        self._retire_stats(engine)
        del self.engines[eid]
        self._replace(round(self.rng.uniform(1.0, 30.0), 3) if self.rng.random() < 0.5 else None)

    def _on_rollback(self, index: int) -> None:
        """An operator rolls back the protocol of one server (R3): the real
        ``rollout.rollback`` on the world's ledger, from the version its calls are bound
        to. Every open operation of it is rebound at a higher epoch and let go: whoever
        drove it is fenced, a worker claims it afresh (one claim more, allowed)."""
        name = self.config.servers[index].name
        binding = next((r.binding for (_, s), r in self.routes.items() if s == name), None)
        if binding is None:
            if self.now < HEAL_AT_S:  # no call has reached that server yet
                self.at(self.now + 5.0, "rollback", index, essential=False)
            return
        self.count("adapter_rollback")
        rebound = rollout.rollback(
            self.ledger,
            protocol=binding.protocol,
            from_version=binding.adapter_version,
            to_version=ROLLBACK_TO,
            now=self.now,
            rng=self.rng,
            note="simulated rollback",
        )
        nodes = [record.call_node_id for record in rebound]
        self._take_away(nodes)
        self.worker_stats["rebound"] += len(nodes)
        self.log(
            "operator",
            f"rollback {binding.protocol} {binding.adapter_version} -> {ROLLBACK_TO}:"
            f" rebound {nodes}",
        )

    def _drop(self, eid: int) -> None:
        engine = self.engines.pop(eid)
        self._retire_stats(engine)
        self.paused.pop(eid, None)
        self.stalled.discard(eid)
        self.sending.pop(eid, None)
        self.flights.pop(eid, None)
        if self.newest_id == eid and self.engines:
            self.newest_id = max(self.engines)

    def _replace(self, after: float | None) -> None:
        """A supervisor starts a new worker process (a new owner id) ``after`` seconds
        later; always when no other worker is left."""
        if after is None and not self.engines:
            after = round(self.rng.uniform(1.0, 30.0), 3)
        if after is not None:
            self.at(self.now + after, "spawn", essential=False)

    def _on_spawn(self) -> None:
        skew = (
            round(self.rng.uniform(-SKEW_MAX_S, SKEW_MAX_S), 4) if any(self.skew.values()) else 0.0
        )
        self.newest_id = self._new_engine(skew=skew)

    def _human_gate(self, record: OperationRecord, command: AskInput) -> None:
        """The approval gate shows the request to a person, who answers later (X4); some
        answers are sent twice (a double submit)."""
        delay = self.rng.uniform(1.0, 30.0)
        self.at(self.now + delay, "answer", record.call_node_id, command.keys)
        if self.rng.random() < self.config.double_answer:
            self.at(
                self.now + delay + self.rng.uniform(1.0, 20.0),
                "answer",
                record.call_node_id,
                command.keys,
            )
        return

    def _on_answer(self, node: str, keys: tuple[str, ...]) -> None:
        answers = {key: _approval(key) for key in keys}
        eid = self._intent_eid(node)
        if eid is None:
            self.at(self.now + 1.0, "answer", node, keys)
            return
        try:
            record = self.engines[eid].answer(node, answers, now=self.clock(eid))
        except (StaleEvent, IllegalTransition) as exc:
            # The round moved on (answered, replayed, restarted) or the operation left
            # the input state (reconciliation, cancel): a typed refusal, as X4 wants.
            self.log("caller", f"answer {node} {list(keys)} refused: {exc}")
            return
        except LongcallError as exc:
            self.checker.fail("engine raised", f"{type(exc).__name__} on an answer: {exc}")
            return
        self.bases[(eid, node)].append((self.now, True))
        self.log("caller", f"answer {node} round {record.input_round} keys={list(keys)}")

    def _on_heal(self) -> None:
        self.config.net.heal()
        self.config.server_faults.heal()
        self.log("world", "faults healed")

    def _on_operator(self) -> None:
        """An operator works the reconciliation queue with the server's truth (X7)."""
        self.at(self.now + self.config.operator_tick_s, "operator", essential=False)
        if State.RECONCILIATION_REQUIRED not in self.checker.state.values():
            return  # the queue is empty (the checker sees every committed write)
        waiting = self.ledger.list_by_state(State.RECONCILIATION_REQUIRED)
        changed = False
        for record in waiting:
            since = self.checker.unknown_since.get(record.call_node_id, self.now)
            if self.now - since < self.config.operator_delay_s:
                continue
            event, payload = self._resolution(record)
            if event is None:
                continue
            try:
                operator = LedgerShell(self.ledger, rng=self.rng)
                operator.reconcile(record, event, now=self.now, result_payload=payload)
            except LongcallError as exc:
                self.log("operator", f"{record.call_node_id} not resolved: {exc}")
                continue
            self.operator_resolutions += 1
            self.log("operator", f"{record.call_node_id} {event.resolution.value}")  # type: ignore[attr-defined]
            # The driving process re-adopts what the operator rewrote, at a new epoch:
            # one claim the claims gate allows, like a fault that took it away.
            self._take_away([record.call_node_id])
            changed = True
        if changed and self.workers is None:
            # Workers notice an operator's write at their next claim round's re-read.
            self._call(self.newest_id, lambda en: en.refresh(now=self.now))

    def _resolution(self, record: OperationRecord) -> tuple[Event | None, bytes | None]:
        server = self.servers[record.server]
        request = self.request_of.get(record.call_node_id)
        task = server.truth(request, self.now) if request is not None else None
        if task is None:
            if record.operation_id is not None:
                return None, None
            return ReconciledManually(
                resolution=Resolution.NEVER_CREATED, actor=OPERATOR, note=OPERATOR_NOTE
            ), None
        if task.status in TERMINAL:
            payload = server.truth_payload(task)
            resolution = Resolution(task.status)
            kind = result_kind_of(record.protocol, ServerStatus(resolution.value), payload)
            return (
                ReconciledManually(
                    resolution=resolution,
                    operation_id=task.task_id,
                    result_digest=server.truth_digest(task),
                    result_kind=kind,
                    actor=OPERATOR,
                    note=OPERATOR_NOTE,
                ),
                payload,
            )
        shared = sum(1 for t in server.tasks if t.task_id == task.task_id) > 1
        spent = record.deadline_at is not None and self.now >= record.deadline_at
        # A resume with the wait budget spent lands straight back in reconciliation
        # (the core's rule), so the operator waits for the truth's terminal then too.
        if shared or spent or self.now >= task.expires_at:
            # Unreachable by its id: wait for the truth's terminal, answering its input
            # request on the server's console if it waits for one.
            pending = task.pending_round(self.now)
            if pending is not None:
                task.answer(pending.key, self.now)
                self.log("operator", f"{record.call_node_id} answered input on the server")
            return None, None
        return (
            ReconciledManually(
                resolution=Resolution.RESUME,
                operation_id=task.task_id,
                actor=OPERATOR,
                note=OPERATOR_NOTE,
            ),
            None,
        )

    # --- the end ---------------------------------------------------------------------

    def _finish(self, end: float) -> Result:
        now = self.now
        self.checker.close(now)
        nodes = [n for n, _, _ in self.config.nodes]
        result = Result(seed=self.seed, violations=list(self.checker.violations))
        found = audit(self.ledger, nodes)
        result.violations.extend(found.problems)
        result.receipts_max, result.receipts = found.receipts_max, found.receipts
        result.outbox_rows, result.outbox_traced = found.outbox_rows, found.outbox_traced
        self._judge_terminals(result, nodes, found.by_node, max(now, end))
        self._judge_polls(result)
        result.duplicates = sum(s.duplicates() for s in self.servers.values())
        result.requests = sum(len({t.request for t in s.tasks}) for s in self.servers.values())
        if result.duplicates:
            self._gate(result, "duplicate operations", f"{result.duplicates} second operations")
        result.cancel_latencies = self.checker.cancel_latencies
        result.cancel_latencies_operator = self.checker.cancel_latencies_operator
        result.unknown_durations = self.checker.unknown_durations
        result.faults = self.faults
        result.operator_resolutions = self.operator_resolutions
        result.nodes = len(nodes)
        result.virtual_s = now
        self._judge_claims(result, nodes)
        if self.workers is not None:
            for engine in self.engines.values():
                self._retire_stats(engine)
            result.workers = self.workers_started
            result.worker_stats = self.worker_stats
            result.stale_sends = self.stale_sends
        result.trace = self.trace
        if not self._pooled:
            self.ledger.close()
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
        return result

    def _gate(self, result: Result, check: str, detail: str) -> None:
        result.violations.append(Violation(check=check, detail=detail))

    def _judge_claims(self, result: Result, nodes: list[str]) -> None:
        """Every operation makes progress without being handed back and forth: it is
        claimed at most ``CLAIMS_SLACK`` times more than the faults that took the
        process driving it away (D1)."""
        for node in nodes:
            if node not in self.checker.state:
                continue
            claims = self.checker.claims.get(node, 0)
            bound = CLAIMS_SLACK + self.took_away.get(node, 0)
            result.claims_judged += 1
            result.claims_max = max(result.claims_max, claims)
            if claims > bound:
                result.claims_over += 1
                self._gate(
                    result,
                    "claims per operation",
                    f"{node} claimed {claims} times; at most {bound} expected",
                )

    def _judge_terminals(
        self, result: Result, nodes: list[str], receipts: dict[str, TerminalReceipt], at: float
    ) -> None:
        """Liveness, and every receipt against the server's truth (F3 divergence)."""
        for node in nodes:
            record = self.ledger.find(node)
            if record is None or not record.is_terminal:
                state = record.state.name if record else "never created"
                self._gate(result, "liveness", f"{node} not terminal by t={self.now:.1f} ({state})")
                continue
            receipt = receipts.get(node)
            request = self.request_of.get(node)
            server = self.servers[self.node_server[node]]
            task = server.truth(request, at) if request else None
            if receipt is not None and task is None and receipt.resolved_by is None:
                # Never created: the only truth a receipt can match is the server's
                # refusal of the create (a rejection is an outcome, X6).
                result.receipts_compared += 1
                if server.rejected.get(request or "") != receipt.result_digest:
                    result.divergence += 1
                    self._gate(
                        result,
                        "terminal divergence",
                        f"{node} accepted {receipt.terminal_status.value} "
                        f"({receipt.result_digest[:15]}) but the server never created it"
                        " nor refused it so",
                    )
                continue
            if receipt is None or task is None or task.status not in TERMINAL:
                continue
            result.receipts_compared += 1
            same = receipt.terminal_status.value == task.status and (
                task.status == "cancelled" or receipt.result_digest == server.truth_digest(task)
            )
            if not same:
                result.divergence += 1
                self._gate(
                    result,
                    "terminal divergence",
                    f"{node} accepted {receipt.terminal_status.value} "
                    f"({receipt.result_digest[:15]}) but the server's truth is {task.status} "
                    f"of {task.task_id}",
                )

    def _judge_polls(self, result: Result) -> None:
        """The poll gates, measured on the wire at the servers (X3)."""
        reads = [read for server in self.servers.values() for read in server.reads]
        # One budget per executor process in single-process mode (two racing ones
        # share none); one budget per server for every worker of the ledger (X3, D1).
        shared = self.workers is not None
        per_server = [
            (0 if shared else client, name, sent)
            for name, server in self.servers.items()
            for client, sent, _task, _node in server.reads
        ]
        polls = result.polls
        polls.qps_max, polls.reads = measures.poll_rate(per_server)
        if polls.qps_max > POLL_QPS_LIMIT:
            self._gate(result, "poll QPS", f"{polls.qps_max} reads of one budget in one second")
        findings, polls.interval_judged = measures.interval_findings(reads, self.told)
        polls.interval_violations = len(findings)
        for finding in findings[:3]:
            self._gate(result, "poll interval", finding)
        limits = {
            node: min(
                record.deadline_at if record.deadline_at is not None else float("inf"),
                record.expires_at if record.expires_at is not None else float("inf"),
            )
            for node, record in self.checker.last.items()
        }
        findings, polls.jitter_judged = measures.jitter_findings(
            reads,
            self.told,
            self.bases,
            limits,
            jitter_fraction=DEFAULT_POLICY.poll.jitter_fraction,
        )
        polls.unjittered = len(findings)
        for finding in findings[:3]:
            self._gate(result, "poll jitter", finding)
        findings = []
        for name in self.servers:
            found, judged = measures.retry_after_findings(
                self.departures[name], self.retry_afters[name]
            )
            findings.extend(found)
            polls.retry_after_judged += judged
        polls.retry_after_violations = len(findings)
        for finding in findings[:3]:
            self._gate(result, "Retry-After honoured", finding)


_ACCEPTED = (State.ACCEPTED, State.CANCELLED_ACCEPTED)
_MEMORY_LEDGER: list[ObservedLedger] = []


def memory_ledger(identity: Callable[[], tuple[str, str]]) -> ObservedLedger:
    """This process's in-memory ledger, emptied and given the world's ``identity``: one
    connection and one migrated schema serve every world the process runs (opening and
    migrating one per world cost about as much as the world itself). The ledger code is
    the same; only its rows go."""
    if not _MEMORY_LEDGER:
        _MEMORY_LEDGER.append(ObservedLedger(":memory:", new_identity=identity))
    else:
        _MEMORY_LEDGER[0].empty(identity)
    return _MEMORY_LEDGER[0]


def _requeue(engine: Engine, *, action: Action, now: float) -> None:
    engine.requeue(action, now=now)


def _world_time(worker_time: float, skew: float) -> float:
    """The world moment a worker's clock reads ``worker_time`` at: the first one whose
    ``+ skew`` is not below it (floating point must not wake a worker just short of
    the moment it asked for, for ever)."""
    t = worker_time - skew
    while t + skew < worker_time:
        t = math.nextafter(t, math.inf)
    return t


def _approval(key: str) -> dict[str, Any]:
    """An approver's answer to input request ``key``: it names the request it answers."""
    return {"action": "accept", "content": {"approved": True, "for": key}}


def _answer_everything(record: OperationRecord, command: AskInput) -> dict[str, Any]:
    """The approval gate of the simulated caller answers every key at once (X4)."""
    return {key: _approval(key) for key in command.keys}


def received(served: Served, *, cut: float | None = None) -> HttpReply | TransportFailure:
    """What the I/O driver hands the exchange for this answer: the reply, its event
    stream decoded by the real decoder; ``cut``: only that share of the body arrived
    (a JSON body cut mid-way is the reset the driver reports as a failure; an event
    stream that ends early just ends)."""
    reply = served.reply
    if served.stream is None:
        if cut is not None:
            reset = httpx.RemoteProtocolError(
                "peer closed connection without sending complete message body"
            )
            return failure_of_exception(reset)
        return reply
    body = served.stream if cut is None else served.stream[: int(len(served.stream) * cut)]
    decoder = SseDecoder()
    events = tuple(decoder.feed(body))
    return dataclasses.replace(
        reply,
        events=events,
        stopped=served.stopped and cut is None,
        last_event_id=decoder.last_event_id,
        retry_ms=decoder.retry_ms,
    )


def _timed_out(request: HttpRequest) -> TransportFailure:
    """What the driver reports when no (complete) answer came within the budget."""
    return TransportFailure(
        kind=FailureKind.TIMEOUT,
        detail=f"no complete answer within {request.timeout_s:g} s",
        processed_possible=True,
    )


def _detail(command: Command) -> str:
    op = getattr(command, "operation_id", None)
    if op is not None:
        return f"op={op}"
    key = getattr(command, "submission_key", "")
    return f"key={key[:12]}"


def _served_text(served: Served) -> str:
    reply = served.reply
    if served.timed_out:
        return "blocked past the request's time budget"
    body = served.stream if served.stream is not None else reply.body
    text = body.decode("utf-8", "replace").replace("\n", " ")
    retry = reply.headers.get("retry-after")
    after = "" if retry is None else f" (Retry-After {retry})"
    return f"{reply.status}{after} {text[:160]}"


def run_one(
    seed: int,
    *,
    trace: bool = False,
    profile: Profile = DEFAULT,
    ledger_factory: LedgerFactory = ObservedLedger,
) -> Result:
    """Run the permutation of ``seed``."""
    world = World(
        random.Random(seed),
        seed=seed,
        trace=trace,
        profile=profile,
        ledger_factory=ledger_factory,
    )
    return world.run()
