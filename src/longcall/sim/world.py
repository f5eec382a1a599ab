"""One simulated world: the real executor against simulated servers on virtual time.

A :class:`World` is built from one ``random.Random`` (and nothing else random, no wall
clock), so one seed replays one run exactly and hypothesis can shrink a failing
schedule. It owns the virtual clock and the seeded discrete-event queue, the
simulated network (latency, loss of a request or of a response, reordering), the
simulated servers (their truth), crashes and restarts of the executor, a second racing
executor with a stale epoch, the caller's cancels, and an operator who resolves
reconciliations where the simulated server knows the truth.

The executor side is the REAL :class:`~longcall.runtime.engine.Engine` with the real
core and the real SQLite ledger: the world takes the engine's actions from
``due(now)``, carries them over the simulated network, and hands each reply back with
``complete(action, outcome, now)`` at the virtual time it arrives (SPEC F1–F3).
Faults live only here, in :mod:`longcall.sim.server` and in the sim adapter, never
as flags inside ``core`` or ``runtime``; the world never patches or reaches into
those, never reads a wall clock and draws nothing from any generator but its own.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import os
import random
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

from longcall.adapters.base import Outcome, ToolBinding
from longcall.core import IllegalTransition, LongcallError, OperationRecord, StaleEvent, State
from longcall.core import commands as c
from longcall.core import events as e
from longcall.core.keys import digest_bytes
from longcall.runtime.engine import Action, CallSpec, Engine
from longcall.runtime.step import apply_event
from longcall.sim.adapter import AdapterFactory, Request, SimAdapter, sim_adapter
from longcall.sim.checks import Checker, ObservedLedger, audit
from longcall.sim.server import (
    AIP151,
    APIFY,
    LEGACY,
    MCP_PROTOCOLS,
    MODERN,
    TERMINAL,
    Aip151Server,
    ApifyServer,
    Reply,
    ServerFaults,
    SimServer,
)

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
    "aip151_start_response_lost",
    "aip151_cancel_races_completion",
    "apify_page_lost",
    "apify_page_contradicts",
    "apify_zero_items",
    "apify_abort_races_completion",
    "not_found_after_retention",
)
"""Every fault class of SPEC F1, each with its own counter in the report (the last
seven belong to the AIP-151 and Apify-style worlds, SPEC P3, P4)."""
PROTOCOL_SHARES = ((0.15, AIP151), (0.30, APIFY))
"""A world is AIP-151 below 0.15 of its draw, Apify-style below 0.30, else MCP (70 %)."""

POLL_QPS_LIMIT = 2.0
"""The configured per-server poll QPS of every simulated executor (X3, F3)."""
HEAL_AT_S = 900.0
"""Faults stop here; the liveness phase follows (virtual seconds)."""
LIVENESS_BOUND_S = 1800.0
"""After healing, every node must be terminal within this much virtual time."""
POLL_INTERVAL_EPSILON_S = 1e-6
OPERATOR_TICK_S = 10.0
OPERATOR = "sim-operator"
OPERATOR_NOTE = "resolved from the simulated server's truth"

LedgerFactory = Callable[[str], ObservedLedger]


@dataclasses.dataclass(slots=True, kw_only=True)
class NetFaults:
    request_loss: float = 0.0
    response_loss: float = 0.0
    reorder: float = 0.0
    truncate: float = 0.0
    stale_callback: float = 0.0
    cancel_ack_loss: float = 0.0
    create_response_loss: float = 0.0

    def heal(self) -> None:
        for field in dataclasses.fields(self):
            setattr(self, field.name, 0.0)


@dataclasses.dataclass(slots=True, kw_only=True)
class ServerConfig:
    name: str
    protocol: str
    lookup: bool
    idempotent: bool
    poll_interval_s: float
    ttl_s: float
    graceful: bool = False
    """Apify: ``abort-actor-run`` aborts gracefully (ABORTING first)."""


@dataclasses.dataclass(slots=True, kw_only=True)
class Config:
    """Everything a seed expands into (printed first by ``--replay``)."""

    servers: list[ServerConfig]
    nodes: list[tuple[str, str, float]]
    """(call node id, server name, start time)."""
    cancels: list[tuple[str, float]]
    crashes: list[float]
    race_at: float | None
    crash_on_action: int | None
    """Crash between a committed decision and its request: at the n-th action sent."""
    file_ledger: bool
    net: NetFaults
    server_faults: ServerFaults
    latency_s: tuple[float, float]
    operator_delay_s: float
    plans: dict[str, tuple[float, str, float | None]]
    budgets: dict[str, float]
    """Call nodes with a total wait budget (X3); the others wait as long as it takes."""
    repeat_cancel: bool
    human_gate: bool
    """Input is answered by a person through ``Engine.answer`` after a while (X4),
    not by a policy hook at once."""
    """The caller asks to cancel a second time (a new cancel generation, X5)."""

    @classmethod
    def draw(cls, rng: random.Random) -> Config:
        servers = []
        for i in range(rng.choice((1, 1, 2))):
            short_ttl = rng.random() < 0.15
            servers.append(
                ServerConfig(
                    name=f"s{i}",
                    protocol=rng.choice((MODERN, LEGACY)),
                    lookup=rng.random() < 0.5,
                    idempotent=rng.random() < 0.5,
                    poll_interval_s=round(rng.uniform(1.0, 6.0), 3),
                    ttl_s=round(rng.uniform(30.0, 120.0) if short_ttl else 3600.0, 3),
                )
            )
        nodes = []
        plans: dict[str, tuple[float, str, float | None]] = {}
        budgets: dict[str, float] = {}
        for i in range(rng.randint(1, 4)):
            node = f"n{i}"
            nodes.append((node, rng.choice(servers).name, round(rng.uniform(0.0, 60.0), 3)))
            duration = round(rng.uniform(1.0, 60.0), 3)
            outcome = "completed" if rng.random() < 0.85 else "failed"
            input_at = round(rng.uniform(0.0, duration), 3) if rng.random() < 0.25 else None
            plans[node] = (duration, outcome, input_at)
            if rng.random() < 0.1:
                budgets[node] = round(rng.uniform(20.0, 120.0), 3)
        cancels = [
            (n, round(start + rng.uniform(0.0, 60.0), 3))
            for n, _, start in nodes
            if rng.random() < 0.3
        ]
        crashes = (
            sorted(round(rng.uniform(0.0, 600.0), 3) for _ in range(rng.randint(1, 3)))
            if rng.random() < 0.3
            else []
        )
        race_at = round(rng.uniform(0.0, 300.0), 3) if rng.random() < 0.15 else None
        crash_on_action = rng.randint(1, 40) if rng.random() < 0.15 else None

        def pick(p: float, values: tuple[float, ...]) -> float:
            return rng.choice(values) if rng.random() < p else 0.0

        net = NetFaults(
            request_loss=pick(0.4, (0.01, 0.03, 0.08)),
            response_loss=pick(0.4, (0.01, 0.03, 0.08)),
            reorder=pick(0.3, (0.05, 0.2)),
            truncate=pick(0.2, (0.1, 0.3)),
            stale_callback=pick(0.5, (0.5, 1.0)),
            cancel_ack_loss=pick(0.3, (0.3, 0.6)),
            create_response_loss=pick(0.3, (0.2, 0.5)),
        )
        faults = ServerFaults(
            id_reuse=pick(0.05, (0.3, 1.0)),
            not_found_early=pick(0.05, (0.01, 0.03)),
            rate_limited=pick(0.25, (0.05, 0.15)),
            unavailable=pick(0.25, (0.05, 0.15)),
            input_replay=pick(0.3, (0.2, 0.5)),
            cancel_completion_tie=pick(0.3, (0.5, 1.0)),
        )
        # SPEC P3, P4: the world's protocol, drawn last so the MCP draws above keep
        # their shape; a world is all MCP, all AIP-151 or all Apify-style.
        family = rng.random()
        protocol = next((p for share, p in PROTOCOL_SHARES if family < share), None)
        if protocol is not None:
            for server in servers:
                server.protocol = protocol
                server.graceful = protocol == APIFY and rng.random() < 0.5
            if protocol == APIFY:
                faults.page_loss = pick(0.4, (0.1, 0.3))
                faults.page_contradict = pick(0.2, (0.05, 0.2))
                faults.zero_items = pick(0.4, (0.3, 1.0))
        return cls(
            servers=servers,
            nodes=nodes,
            cancels=cancels,
            crashes=crashes,
            race_at=race_at,
            crash_on_action=crash_on_action,
            file_ledger=bool(crashes) and rng.random() < 0.05,
            net=net,
            server_faults=faults,
            latency_s=(round(rng.uniform(0.005, 0.05), 4), round(rng.uniform(0.05, 0.5), 4)),
            operator_delay_s=round(rng.uniform(10.0, 45.0), 3),
            plans=plans,
            budgets=budgets,
            repeat_cancel=rng.random() < 0.3,
            human_gate=rng.random() < 0.3,
        )


@dataclasses.dataclass(slots=True, kw_only=True)
class Result:
    """What one permutation measured."""

    seed: int | None
    violations: list[str]
    divergence: int
    duplicates: int
    receipts_max: int
    poll_qps_max: float
    poll_qps_max_all_executors: float
    """Informational: all executors of a world together (racing ones share no bucket)."""
    poll_interval_violations: int
    cancel_latencies: list[float]
    cancel_latencies_operator: list[float]
    unknown_durations: list[float]
    outbox_rows: int
    outbox_traced: int
    faults: dict[str, int]
    operator_resolutions: int
    nodes: int
    virtual_s: float
    trace: list[str] | None


class World:
    """One permutation: build, run to quiescence or the liveness bound, check."""

    def __init__(
        self,
        rng: random.Random,
        *,
        seed: int | None = None,
        trace: bool = False,
        ledger_factory: LedgerFactory = ObservedLedger,
        adapter_factory: AdapterFactory = sim_adapter,
    ) -> None:
        self.rng = rng
        self.seed = seed
        self.trace: list[str] | None = [] if trace else None
        self.config = Config.draw(rng)
        self.faults: dict[str, int] = dict.fromkeys(FAULT_CLASSES, 0)
        self.checker = Checker()
        self._ledger_factory = ledger_factory
        self._tmpdir = tempfile.mkdtemp(prefix="longcall-sim-") if self.config.file_ledger else None
        self._ledger_path = (
            os.path.join(self._tmpdir, "ledger.db") if self._tmpdir is not None else ":memory:"
        )
        self.ledger = self._open_ledger()
        self.servers: dict[str, SimServer] = {}
        self.adapters: dict[tuple[int, str], SimAdapter] = {}
        """One sim adapter per executor process and server (a restart forgets, P3)."""
        self._adapter_factory = adapter_factory
        for sc in self.config.servers:
            server: SimServer
            common: dict[str, Any] = {
                "lookup": sc.lookup,
                "idempotent": sc.idempotent,
                "poll_interval_s": sc.poll_interval_s,
                "ttl_s": sc.ttl_s,
                "rng": rng,
                "faults": self.config.server_faults,
                "count": self.count,
            }
            if sc.protocol == AIP151:
                server = Aip151Server(sc.name, **common)
            elif sc.protocol == APIFY:
                server = ApifyServer(sc.name, graceful=sc.graceful, **common)
            else:
                server = SimServer(sc.name, protocol=sc.protocol, **common)
            self.servers[sc.name] = server
        self.node_server = {node: server for node, server, _ in self.config.nodes}
        self.request_of: dict[str, str] = {}
        self.now = 0.0
        self._queue: list[tuple[float, int, str, tuple[Any, ...]]] = []
        self._seq = itertools.count()
        self._engine_ids = itertools.count()
        self.engines: dict[int, Engine] = {}
        self.newest = self._new_engine()
        self.started: set[str] = set()
        self.cancel_pending: set[str] = {node for node, _ in self.config.cancels}
        self.poll_sends: dict[tuple[int, str], list[float]] = {}
        self.last_poll: dict[tuple[int, str], float] = {}
        self.told_interval: dict[str, float] = {}
        self.poll_interval_violations = 0
        self.operator_resolutions = 0
        self.actions_sent = 0
        self.cancels_requested: set[str] = set()
        self._essential = 0

    # --- plumbing --------------------------------------------------------------------

    def count(self, fault: str) -> None:
        self.faults[fault] = self.faults.get(fault, 0) + 1
        self.log("fault", fault)

    def log(self, who: str, what: str) -> None:
        if self.trace is not None:
            self.trace.append(f"{self.now:11.4f} {who:<8} {what}")

    def _open_ledger(self) -> ObservedLedger:
        if self._tmpdir is not None:
            ledger = self._ledger_factory(self._ledger_path)
        else:
            ledger = self._ledger_factory(":memory:")
        ledger.checker = self.checker
        self.checker.ledger = ledger
        return ledger

    def _new_engine(self) -> Engine:
        engine = Engine(
            self.ledger,
            rng=self.rng,
            poll_qps_max=POLL_QPS_LIMIT,
            input_policy=self._human_gate if self.config.human_gate else _answer_everything,
        )
        self.engines[next(self._engine_ids)] = engine
        return engine

    def _adapter(self, eid: int, server: str) -> SimAdapter:
        adapter = self.adapters.get((eid, server))
        if adapter is None:
            adapter = self._adapter_factory(self.servers[server].protocol)
            self.adapters[(eid, server)] = adapter
        return adapter

    def _engine_id(self, engine: Engine) -> int:
        for eid, candidate in self.engines.items():
            if candidate is engine:
                return eid
        return -1

    def at(self, t: float, kind: str, *args: Any, essential: bool = True) -> None:
        if essential:
            self._essential += 1
        heapq.heappush(self._queue, (t, next(self._seq), kind, (essential, *args)))

    # --- the run ---------------------------------------------------------------------

    def run(self) -> Result:
        cfg = self.config
        self.log(
            "config",
            f"servers={[dataclasses.astuple(s) for s in cfg.servers]} nodes={cfg.nodes} "
            f"cancels={cfg.cancels} crashes={cfg.crashes} race_at={cfg.race_at} "
            f"crash_on_action={cfg.crash_on_action} budgets={cfg.budgets} "
            f"repeat_cancel={cfg.repeat_cancel} human_gate={cfg.human_gate} "
            f"file_ledger={cfg.file_ledger} net={dataclasses.astuple(cfg.net)} "
            f"server_faults={dataclasses.astuple(cfg.server_faults)} latency={cfg.latency_s}",
        )
        for node, _server, start in cfg.nodes:
            self.at(start, "start", node)
        for node, t in cfg.cancels:
            self.at(t, "cancel", node)
        for t in cfg.crashes:
            self.at(t, "crash")
        if cfg.race_at is not None:
            self.at(cfg.race_at, "race")
        self.at(HEAL_AT_S, "heal", essential=False)
        self.at(OPERATOR_TICK_S, "operator", essential=False)
        end = HEAL_AT_S + LIVENESS_BOUND_S
        try:
            self._loop(end)
        finally:
            result = self._finish(end)
        return result

    def _loop(self, end: float) -> None:
        nodes = [n for n, _, _ in self.config.nodes]
        while True:
            if self._essential == 0 and all(self._terminal(n) for n in nodes):
                break
            t_queue = self._queue[0][0] if self._queue else None
            t_engine: float | None = None
            for engine in self.engines.values():
                wake = engine.next_wakeup()
                if wake is not None and (t_engine is None or wake < t_engine):
                    t_engine = wake
            if t_queue is None and t_engine is None:
                break
            if t_queue is not None and (t_engine is None or t_queue <= t_engine):
                t, _, kind, args = heapq.heappop(self._queue)
                self._advance(t)
                if self.now > end:
                    break
                essential, *rest = args
                if essential:
                    self._essential -= 1
                getattr(self, "_on_" + kind)(*rest)
            else:
                assert t_engine is not None
                self._advance(t_engine)
                if self.now > end:
                    break
                for eid, engine in list(self.engines.items()):
                    for action in self._call(engine, lambda en: en.due(self.now)) or []:
                        self.actions_sent += 1
                        if self.actions_sent == self.config.crash_on_action:
                            # L7: the decision is committed, its request never leaves.
                            self.log(f"e{eid}", f"crash before sending {action.kind}")
                            self._on_crash()
                            break
                        self._send(eid, engine, action)

    def _advance(self, t: float) -> None:
        self.now = max(self.now, t)
        self.checker.now = self.now

    def _terminal(self, node: str) -> bool:
        return node in self.started and self.checker.state.get(node) in (
            State.ACCEPTED,
            State.CANCELLED_ACCEPTED,
        )

    def _call(self, engine: Engine, fn: Callable[[Engine], Any]) -> Any:
        """Call the engine; an exception out of it is a finding, not a sim crash."""
        try:
            return fn(engine)
        except LongcallError as exc:
            self.checker.fail(f"engine raised {type(exc).__name__}: {exc}")
            return None

    # --- network ---------------------------------------------------------------------

    def _send(self, eid: int, engine: Engine, action: Action) -> None:
        node = action.call_node_id
        adapter = self._adapter(eid, action.server)
        self.log(f"e{eid}", f"send {action.kind} {node} {_detail(action.command)}")
        if isinstance(action.command, c.Poll):
            self._note_poll(eid, action)
        shortcut = adapter.shortcut(action)
        if shortcut is not None:
            self.at(self.now, "deliver", eid, action, shortcut, None)
            return
        request = adapter.request_at(action, action.record.request_digest, self.now)
        net = self.config.net
        lo, hi = self.config.latency_s
        if self.rng.random() < net.request_loss:
            self.log("net", f"request lost {action.kind} {node}")
            self.at(self.now + adapter.timeout_s(request), "timeout", eid, action)
            return
        self.at(self.now + self.rng.uniform(lo, hi), "arrive", eid, action, request, self.now)

    def _on_arrive(
        self, eid: int, action: Action, request: Request, sent_at: float, held: bool = False
    ) -> None:
        server = self.servers[action.server]
        node = action.call_node_id
        if isinstance(server, ApifyServer) and request.wait_s > 0:
            # P4: the start and get-actor-run long-poll; the answer leaves when the run
            # changes or waitSecs ends (the run is created on arrival).
            if request.method == "create":
                created = self._serve(server, action, request)
                run_id = created.task_id or ""
            else:
                run_id = request.task_id
            release = server.release_at(run_id, self.now, request.wait_s)
            if release > self.now:
                later = dataclasses.replace(request, wait_s=0.0, task_id=run_id)
                self.log("server", f"{server.name} holds {request.method} {node} to {release:.4f}")
                self.at(release, "arrive", eid, action, later, sent_at, True)
                return
            if request.method == "create":
                request = dataclasses.replace(request, wait_s=0.0, task_id=run_id)
        reply = self._serve(server, action, request)
        self.log("server", f"{server.name} {request.method} {node} -> {_reply_text(reply)}")
        net = self.config.net
        lo, hi = self.config.latency_s
        loss = net.response_loss
        if request.method == "cancel":
            loss = max(loss, net.cancel_ack_loss)
        elif request.method == "create":
            loss = max(loss, net.create_response_loss)
        if self.rng.random() < loss:
            fault = {
                "create": "aip151_start_response_lost"
                if server.protocol == AIP151
                else "create_response_lost",
                "cancel": "cancel_ack_lost",
                "result": "result_lost_or_truncated",
            }.get(request.method)
            if fault is not None:
                self.count(fault)
            self.log("net", f"response lost {action.kind} {node}")
            timeout_s = self._adapter(eid, action.server).timeout_s(request)
            self.at((self.now if held else sent_at) + timeout_s, "timeout", eid, action)
            return
        if (
            server.protocol in MCP_PROTOCOLS
            and request.method == "result"
            and reply.payload is not None
            and self.rng.random() < net.truncate
        ):
            self.count("result_lost_or_truncated")
            reply = dataclasses.replace(reply, payload=reply.payload[: len(reply.payload) // 2])
        delay = self.rng.uniform(lo, hi)
        if self.rng.random() < net.reorder:
            self.count("replies_reordered")
            delay += self.rng.uniform(2.0, 12.0)
        fetched = request.method == "result" or server.protocol == AIP151
        if fetched and reply.payload is not None and reply.error is None:
            ok = reply.content_length is None or len(reply.payload) == reply.content_length
            if ok and reply.status in TERMINAL:
                self.checker.fetched.setdefault(node, set()).add(digest_bytes(reply.payload))
        self.at(self.now + delay, "deliver", eid, action, None, reply)

    def _serve(self, server: SimServer, action: Action, request: Request) -> Reply:
        if isinstance(server, Aip151Server) and request.method in ("create", "restart"):
            # P3: a start, or the lookup's resend of it; the requestId deduplicates.
            self.request_of[action.call_node_id] = request.request
            server.plans.setdefault(request.request, self.config.plans[action.call_node_id])
            return server.start(request.request_id, request.key, request.request, self.now)
        if isinstance(server, Aip151Server) and request.method == "list":
            return server.list_request(request.request_id, self.now)
        if isinstance(server, ApifyServer) and request.method == "create" and request.task_id:
            return server.view(request.task_id, self.now)
        match request.method:
            case "create":
                self.request_of[action.call_node_id] = request.request
                server.plans.setdefault(request.request, self.config.plans[action.call_node_id])
                return server.create(request.key, request.request, self.now)
            case "lookup":
                return server.lookup(request.key, self.now)
            case "get":
                return server.get(request.task_id, self.now)
            case "result":
                return server.result(request.task_id, self.now)
            case "cancel":
                return server.cancel(request.task_id, self.now, self.rng.uniform(0.0, 10.0))
            case "answer":
                return server.answer(request.task_id, request.keys, self.now)
        raise ValueError(request.method)

    def _on_timeout(self, eid: int, action: Action) -> None:
        outcome = self._adapter(eid, action.server).timeout(action)
        self._deliver(eid, action, outcome)

    def _on_deliver(
        self, eid: int, action: Action, outcome: Outcome | None, reply: Reply | None
    ) -> None:
        if reply is not None:
            # What a live executor was told: the ids it holds (only those are ever
            # reused, F1) and the poll interval it must honour (X3).
            alive = eid in self.engines
            handed = isinstance(action.command, (c.SendSubmit, c.LookupSubmission))
            if alive and handed and reply.task_id is not None:
                self.servers[action.server].handed.add(reply.task_id)
            if alive and reply.poll_interval_s is not None and reply.error is None:
                self.told_interval[action.call_node_id] = reply.poll_interval_s
            outcome = self._adapter(eid, action.server).outcome(action, reply)
            if outcome is None:
                engine = self.engines.get(eid)
                if engine is not None:
                    engine.finish(action)
                return
        assert outcome is not None
        self._deliver(eid, action, outcome)

    def _deliver(self, eid: int, action: Action, outcome: Outcome) -> None:
        engine = self.engines.get(eid)
        node = action.call_node_id
        if engine is None:
            # The executor that sent this died. F1 "a callback from an old execution
            # epoch": sometimes its reply still reaches the new executor.
            if self.rng.random() < self.config.net.stale_callback:
                self.count("stale_epoch_callback")
                engine, eid = self.newest, self._engine_id(self.newest)
            else:
                self.log("net", f"reply to dead e{eid} dropped {action.kind} {node}")
                return
        self.log(f"e{eid}", f"recv {action.kind} {node} {outcome.event.name}")
        self._call(engine, lambda en: en.complete(action, outcome, now=self.now))

    def _note_poll(self, eid: int, action: Action) -> None:
        op = action.command.operation_id  # type: ignore[attr-defined]
        self.poll_sends.setdefault((eid, action.server), []).append(self.now)
        key = (eid, op)
        last = self.last_poll.get(key)
        # The floor is the interval the server told the executor about this operation
        # (a reply it received carried it); until then nobody could honour it.
        interval = self.told_interval.get(action.call_node_id, 0.0)
        if last is not None and self.now - last < interval - POLL_INTERVAL_EPSILON_S:
            self.poll_interval_violations += 1
            self.log("check", f"poll of {op} {self.now - last:.3f}s after the previous one")
        self.last_poll[key] = self.now

    # --- scripted happenings ---------------------------------------------------------

    def _on_start(self, node: str) -> None:
        server = self.servers[self.node_server[node]]
        idempotent, lookup = server.idempotent, server.lookup_offered
        protocol = f"mcp-{server.protocol}"
        if server.protocol == AIP151:
            # P3: AIP-155 proves a start by requestId, so a lost start is looked up.
            protocol, lookup = AIP151, True
        elif server.protocol == APIFY:
            # P4: no lookup by key; a resend is safe when the server advertises the
            # submission-key extension (``lookup`` here) or the tool is idempotent.
            protocol, lookup = APIFY, False
            idempotent = server.lookup_offered or server.idempotent
        binding = ToolBinding(
            server=server.name,
            tool_name="work",
            protocol=protocol,
            adapter_version="sim",
            descriptor_digest=digest_bytes(b"work"),
            task_support="required",
            idempotent=idempotent,
            submission_lookup=lookup,
        )
        spec = CallSpec(
            call_node_id=node,
            binding=binding,
            arguments={"node": node},
            budget_s=self.config.budgets.get(node),
        )
        self.started.add(node)
        self.log("caller", f"start {node} on {server.name}")
        self._call(self.newest, lambda en: en.start_call(spec, now=self.now))

    def _on_cancel(self, node: str) -> None:
        if node not in self.started or self._terminal(node):
            self.cancel_pending.discard(node)
            return
        outcome = self._call(self.newest, lambda en: en.cancel(node, now=self.now))
        self.log("caller", f"cancel {node} -> {outcome.outcome if outcome else 'error'}")
        if outcome is not None and outcome.outcome == "requested":
            first = node not in self.cancels_requested
            self.cancels_requested.add(node)
            self.checker.cancel_since.setdefault(node, self.now)
            self.cancel_pending.discard(node)
            if first and self.config.repeat_cancel:
                self.at(self.now + self.rng.uniform(0.5, 20.0), "cancel", node)
        elif outcome is None or outcome.outcome == "not_cancellable":
            self.at(self.now + 5.0, "cancel", node)
        else:
            self.cancel_pending.discard(node)

    def _on_crash(self) -> None:
        """Kill every executor (drop its memory and in-flight replies) and restart one."""
        self.count("executor_crash")
        self.engines.clear()
        if self._tmpdir is not None:
            self.ledger.close()
            self.ledger = self._open_ledger()
        self.newest = self._new_engine()
        eid = self._engine_id(self.newest)
        count = self._call(self.newest, lambda en: en.resume_all(now=self.now))
        self.log(f"e{eid}", f"restart: resumed {count}")

    def _on_race(self) -> None:
        """A second executor takes every open operation over; the first keeps going
        with its stale epoch (two pollers, fencing by CAS, D1)."""
        self.count("executor_race")
        self.newest = self._new_engine()
        eid = self._engine_id(self.newest)
        count = self._call(self.newest, lambda en: en.resume_all(now=self.now))
        self.log(f"e{eid}", f"race: claimed {count}")

    def _human_gate(self, record: OperationRecord, command: c.AskInput) -> None:
        """The approval gate shows the request to a person, who answers later (X4)."""
        delay = self.rng.uniform(1.0, 30.0)
        self.at(self.now + delay, "answer", record.call_node_id, command.input_round, command.keys)
        return None

    def _on_answer(self, node: str, input_round: int, keys: tuple[str, ...]) -> None:
        answers = {key: {"approved": True} for key in keys}
        try:
            record = self.newest.answer(node, answers, now=self.now)
        except (StaleEvent, IllegalTransition) as exc:
            # The round moved on (answered, replayed, restarted) or the operation left
            # the input state (reconciliation, cancel): a typed refusal, as X4 wants.
            self.log("caller", f"answer {node} round {input_round} refused: {exc}")
            return
        except LongcallError as exc:
            self.checker.fail(f"engine raised {type(exc).__name__} on an answer: {exc}")
            return
        self.log("caller", f"answer {node} round {record.input_round} keys={list(keys)}")

    def _on_heal(self) -> None:
        self.config.net.heal()
        self.config.server_faults.heal()
        self.log("world", "faults healed")

    def _on_operator(self) -> None:
        """An operator works the reconciliation queue with the server's truth (X7)."""
        self.at(self.now + OPERATOR_TICK_S, "operator", essential=False)
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
                apply_event(
                    self.ledger,
                    record,
                    event,
                    now=self.now,
                    jitter=self.rng.random(),
                    result_payload=payload,
                )
            except LongcallError as exc:
                self.log("operator", f"{record.call_node_id} not resolved: {exc}")
                continue
            self.operator_resolutions += 1
            self.log("operator", f"{record.call_node_id} {event.resolution.value}")  # type: ignore[attr-defined]
            changed = True
        if changed:
            self._call(self.newest, lambda en: en.refresh(now=self.now))

    def _resolution(self, record: OperationRecord) -> tuple[e.Event | None, bytes | None]:
        server = self.servers[record.server]
        request = self.request_of.get(record.call_node_id)
        task = server.truth(request, self.now) if request is not None else None
        if task is None:
            if record.operation_id is not None:
                return None, None
            return e.ReconciledManually(
                resolution=e.Resolution.NEVER_CREATED, actor=OPERATOR, note=OPERATOR_NOTE
            ), None
        if task.status in TERMINAL:
            payload = task.payload()
            resolution = e.Resolution(task.status)
            return (
                e.ReconciledManually(
                    resolution=resolution,
                    operation_id=task.task_id,
                    result_digest=digest_bytes(payload),
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
            if task.status == "input_required" and task.answered_at is None:
                task.answered_at = self.now
                self.log("operator", f"{record.call_node_id} answered input on the server")
            return None, None
        return (
            e.ReconciledManually(
                resolution=e.Resolution.RESUME,
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
        violations = list(self.checker.violations)
        problems, receipts_max, rows, traced = audit(self.ledger, nodes)
        violations.extend(problems)
        divergence = 0
        for node in nodes:
            record = self.ledger.find(node)
            if record is None or not record.is_terminal:
                state = record.state.name if record else "never created"
                violations.append(f"liveness: {node} not terminal by t={now:.1f} ({state})")
                continue
            receipt = self.ledger.receipt(node)
            request = self.request_of.get(node)
            server = self.servers[self.node_server[node]]
            task = server.truth(request, max(now, end)) if request else None
            if receipt is None or task is None or task.status not in TERMINAL:
                continue
            same = receipt.terminal_status.value == task.status and (
                task.status == "cancelled" or receipt.result_digest == digest_bytes(task.payload())
            )
            if not same:
                divergence += 1
                violations.append(
                    f"divergence: {node} accepted {receipt.terminal_status.value} "
                    f"({receipt.result_digest[:15]}) but the server's truth is {task.status} "
                    f"of {task.task_id}"
                )
        duplicates = sum(s.duplicates() for s in self.servers.values())
        if duplicates:
            violations.append(f"duplicate remote operations: {duplicates}")
        qps = max((_max_per_second(times) for times in self.poll_sends.values()), default=0.0)
        merged: dict[str, list[float]] = {}
        for (_eid, server_name), times in self.poll_sends.items():
            merged.setdefault(server_name, []).extend(times)
        qps_all = max((_max_per_second(sorted(t)) for t in merged.values()), default=0.0)
        if self.poll_interval_violations:
            violations.append(f"poll interval violated {self.poll_interval_violations} times")
        if qps > POLL_QPS_LIMIT:
            violations.append(f"poll rate {qps} per second above {POLL_QPS_LIMIT}")
        self.ledger.close()
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
        return Result(
            seed=self.seed,
            violations=violations,
            divergence=divergence,
            duplicates=duplicates,
            receipts_max=receipts_max,
            poll_qps_max=qps,
            poll_qps_max_all_executors=qps_all,
            poll_interval_violations=self.poll_interval_violations,
            cancel_latencies=self.checker.cancel_latencies,
            cancel_latencies_operator=self.checker.cancel_latencies_operator,
            unknown_durations=self.checker.unknown_durations,
            outbox_rows=rows,
            outbox_traced=traced,
            faults=self.faults,
            operator_resolutions=self.operator_resolutions,
            nodes=len(nodes),
            virtual_s=now,
            trace=self.trace,
        )


def _answer_everything(record: OperationRecord, command: c.AskInput) -> dict[str, Any]:
    """The approval gate of the simulated caller answers every key at once (X4)."""
    return {key: {"approved": True} for key in command.keys}


def _max_per_second(times: list[float]) -> float:
    """The most requests in any window [t, t + 1) of virtual time."""
    best = 0
    lo = 0
    for hi, t in enumerate(times):
        while times[lo] <= t - 1.0 + POLL_INTERVAL_EPSILON_S:
            lo += 1
        best = max(best, hi - lo + 1)
    return float(best)


def _detail(command: c.Command) -> str:
    op = getattr(command, "operation_id", None)
    if op is not None:
        return f"op={op}"
    key = getattr(command, "submission_key", "")
    return f"key={key[:12]}"


def _reply_text(reply: Reply) -> str:
    if reply.error is not None:
        return f"error {reply.error}" + (
            f" retry_after={reply.retry_after_s:.3f}" if reply.retry_after_s is not None else ""
        )
    parts = [p for p in (reply.task_id, reply.status) if p]
    if reply.found:
        parts.append("found")
    return " ".join(parts) or "ok"


def run_one(
    seed: int,
    *,
    trace: bool = False,
    ledger_factory: LedgerFactory = ObservedLedger,
    adapter_factory: AdapterFactory = sim_adapter,
) -> Result:
    """Run the permutation of ``seed``."""
    world = World(
        random.Random(seed),
        seed=seed,
        trace=trace,
        ledger_factory=ledger_factory,
        adapter_factory=adapter_factory,
    )
    return world.run()
