"""The host world: task-unaware MCP hosts in front of the gateway, on virtual time (G1).

A :class:`HostWorld` is a :class:`~longcall.sim.world.World` whose calls come from hosts
through the gateway instead of from a script. The gateway's part is real code: each
host call is decided by :mod:`longcall.gateway.hostcalls` — ``resolve_call`` (the
same-call rule: handle derivation, principal binding, the repeat counter, ``joins``,
over the delivery marks on the world's real SQLite ledger), ``early_wait_s`` /
``status_wait_s`` (how long a call waits), ``answer_for`` (outcome or handle),
``mark_delivered`` (the marks the rule reads back) and ``owned_node`` (a handle back to
its call). A call the rule says to start is started on the world's real engine
(``Engine.start_call``, as ``Client.call(node=…)`` does for the gateway) and driven like
every call of the simulator, against the simulated upstream servers and network of the
drawn profile. A gateway crash is an executor crash that lasts a while: the engine's
memory and every host request the gateway was answering go, the ledger stays, and the
restarted engine resumes every open call (``resume_all``). The gateway process's lease
row is on the ledger as the product keeps it (registered at each start, renewed every
heartbeat until the crash), and each start runs the product's ``note_start`` on it: the
downtime a restart ends is recorded as the gateway records it, and the same-call rule
counts it out of its windows.

What is modelled: the hosts (each chain is one host call, its retries after its own
timeout — below the early-return window, 60 s as the TypeScript SDK, 240 s as Claude
Desktop — with capped exponential backoff, then status calls with the handle until the
outcome comes), the host side of the network (answers lost, hosts that drop the
connection mid-wait, a timed-out request the gateway goes on answering into the void
or drops), the MCP transport (an answer reaches the host the moment the gateway sends
it), and the gateway's wait (``Client.wait``: it ends when the ledger says the call is
terminal, or at the end of the wait).

Gates, per host call chain: zero duplicate upstream executions (every request of a
chain resolves to the one call its first request resolved to, and a chain starts at
most one upstream run; the servers see no business request twice), and exactly one
outcome delivered, naming the call the chain started, of its own principal.

Must not: import the gateway's I/O shell (``gateway.app``) or the server library.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import random
import time
from collections.abc import Callable
from typing import Any

from longcall.core import TERMINAL_STATES, State
from longcall.core.keys import digest_json
from longcall.errors import HandleRefused
from longcall.gateway.hostcalls import (
    Answer,
    GatewayOptions,
    HostCall,
    answer_for,
    early_wait_s,
    mark_delivered,
    note_start,
    owned_node,
    resolve_call,
    status_wait_s,
)
from longcall.ledger import WORKER
from longcall.runtime.leases import LeasePolicy
from longcall.sim.checks import Violation
from longcall.sim.config import DEFAULT, PROFILES, Config, Profile
from longcall.sim.report import (
    Gate,
    batches,
    checks_gate,
    derive_seed,
    divergence_gate,
    gates_json,
    guarded_as,
    note_failure,
)
from longcall.sim.truth import OUTCOMES, Plan
from longcall.sim.world import Result, World

HOST_TIMEOUTS_S = (20.0, 60.0, 240.0)
"""Below the early-return window (every call times out until the upstream ends), the
TypeScript SDK's default, Claude Desktop's."""
BACKOFF_MAX_S = 45.0
"""A host's longest pause before a retry: its timeout plus this stays within the
gateway's repeat grace (300 s), the envelope the same-call rule promises to cover."""
DURATIONS_S = (1.0, 30.0, 90.0, 400.0)
"""Upstream work times (each × 0.5–1.5): within the window, past a host's timeout,
past the window, past every host's timeout."""
GATEWAY_LEASE = LeasePolicy()
"""The lease of the gateway's ``Client`` worker, as the product runs it by default."""
note_gateway_start = functools.partial(
    note_start, lease_s=GATEWAY_LEASE.lease_s, heartbeat_s=GATEWAY_LEASE.renew_every_s
)
"""The gateway's ``note_start`` with that lease."""
PRINCIPALS = ("alice", "bob")
CHAINS_MAX = 5
CHAINS_START_S = 900.0
"""Chains start within this: a same call may come back after the grace (a deliberate
repeat), and every chain still ends well before the world's liveness bound."""
ATTEMPTS_MAX = 400
"""Requests one chain may make; more is a chain that never gets its outcome."""
CRASH_DOWN_S = (1.0, 90.0)
HOST_CHECKS = (
    "duplicate upstream executions",
    "one outcome per host call chain",
    "handle refused",
)


@dataclasses.dataclass(slots=True, kw_only=True)
class Chain:
    """One host call, its retries, then its status calls, until it has an outcome."""

    index: int
    principal: str
    tool: str
    server: str
    arguments: dict[str, Any]
    start_at: float
    timeout_s: float
    backoff_s: float
    attempts: int = 0
    retries: int = 0
    handle: str | None = None
    resolved: list[str] = dataclasses.field(default_factory=list)
    """The call node each request of the chain resolved to, in order."""
    started_runs: int = 0
    outcomes: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    """(handle, call node) of each outcome the host received."""
    refused: int = 0
    request: int | None = None
    """The request the host waits on (None: none outstanding)."""

    @property
    def done(self) -> bool:
        return bool(self.outcomes) or self.refused > 0 or self.attempts >= ATTEMPTS_MAX

    def call(self) -> HostCall:
        return HostCall(
            principal=self.principal, tool=self.tool, arguments_digest=digest_json(self.arguments)
        )


@dataclasses.dataclass(slots=True, kw_only=True)
class Waiter:
    """A host request the gateway is answering: it waits on a call node until ``until``."""

    chain: Chain
    request: int
    handle: str
    node: str
    until: float


@dataclasses.dataclass(slots=True, kw_only=True)
class HostCounts:
    """What the hosts and the gateway did, and what the gates judged."""

    chains: int = 0
    host_requests: int = 0
    status_calls: int = 0
    upstream_runs: int = 0
    attached_open: int = 0
    """Requests the same-call rule attached to a call still running."""
    attached_ended: int = 0
    """Requests attached to a call that had ended (its outcome given again)."""
    deliberate_repeats: int = 0
    """Chains that ran a same call anew (after the grace), as the rule says."""
    handles_given: int = 0
    outcomes_delivered: int = 0
    answers_lost: int = 0
    host_timeouts: int = 0
    disconnects: int = 0
    gateway_crashes: int = 0
    downtime_s: int = 0
    """Seconds of gateway downtime recorded by the gateway's starts (rounded)."""
    duplicate_runs: int = 0
    outcome_problems: int = 0
    receipts_compared: int = 0
    divergence: int = 0
    server_duplicates: int = 0

    def counts(self) -> dict[str, int]:
        """Every count by name."""
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(HostCounts)}


@dataclasses.dataclass(slots=True, kw_only=True)
class HostResult(HostCounts):
    """What one host world measured."""

    seed: int | None
    violations: list[Violation]
    virtual_s: float = 0.0
    trace: list[str] | None = None


class HostWorld(World):
    """One host world: draw hosts and gateway crashes, run, judge every chain."""

    def __init__(
        self,
        rng: random.Random,
        *,
        seed: int | None = None,
        trace: bool = False,
        profile: Profile = DEFAULT,
        options: GatewayOptions | None = None,
    ) -> None:
        super().__init__(rng, seed=seed, trace=trace, profile=profile)
        self.options = options or GatewayOptions()
        self.loss = rng.choice((0.0, 0.05, 0.3))
        self.disconnect = rng.choice((0.0, 0.1))
        self.downs = [
            (round(rng.uniform(0.0, 600.0), 3), round(rng.uniform(*CRASH_DOWN_S), 3))
            for _ in range(rng.choice((0, 0, 1, 2)))
        ]
        self.chains = self._draw_chains(rng)
        self.waiters: dict[int, Waiter] = {}
        self.requests = itertools.count(1)
        self.down = False
        self.gateway_starts = itertools.count(1)
        self.gateway_owner = ""
        self.gateway_started_at = 0.0
        self.creator: dict[str, Chain] = {}
        self.same_calls: dict[HostCall, list[str]] = {}
        self.host = HostResult(seed=seed, violations=[], chains=len(self.chains))

    def _draw(self, rng: random.Random, profile: Profile) -> Config:
        """The profile's upstream world without its scripted calls, cancels, people or
        workers: calls come from the hosts, and a crash is the gateway's."""
        config = Config.draw(rng, profile)
        config.nodes, config.plans, config.budgets, config.cancels = [], {}, {}, []
        config.crashes, config.workers, config.file_ledger = [], None, False
        config.human_gate, config.double_answer = False, 0.0
        return config

    def _draw_chains(self, rng: random.Random) -> list[Chain]:
        arguments = [{"query": f"q{i}"} for i in range(rng.randint(1, 3))]
        servers = [server.name for server in self.config.servers]
        chains = []
        for index in range(rng.randint(1, CHAINS_MAX)):
            server = rng.choice(servers)
            chains.append(
                Chain(
                    index=index,
                    principal=rng.choice(PRINCIPALS),
                    tool=f"{server}_report",
                    server=server,
                    arguments=rng.choice(arguments),
                    start_at=round(rng.uniform(0.0, CHAINS_START_S), 3),
                    timeout_s=rng.choice(HOST_TIMEOUTS_S),
                    backoff_s=round(rng.uniform(0.5, 10.0), 3),
                )
            )
        return chains

    # --- the run ---------------------------------------------------------------------

    def run_host(self) -> HostResult:
        for chain in self.chains:
            self.at(chain.start_at, "host_call", chain)
        for at, down_s in self.downs:
            self.at(at, "gateway_crash", down_s, essential=False)
        if self.trace is not None:
            self.log("hosts", f"loss={self.loss} disconnect={self.disconnect} downs={self.downs}")
        self._gateway_starts()
        upstream = self.run()
        return self._judge(upstream)

    def _advance(self, t: float) -> None:
        if t > self.now:
            self._settle()  # before time moves: a call that ended now is answered now
        super()._advance(t)

    def _settle(self) -> None:
        """``Client.wait`` returns: every wait whose call is terminal ends now."""
        for waiter in list(self.waiters.values()):
            if self.checker.state.get(waiter.node) in TERMINAL_STATES:
                self._answer(waiter)

    # --- the gateway -----------------------------------------------------------------

    def _on_host_call(self, chain: Chain) -> None:
        """A host's tool call reaches the gateway: the real same-call rule resolves it."""
        if not self._sent(chain):
            return
        try:
            start = resolve_call(self.ledger, chain.call(), now=self.now, options=self.options)
        except ValueError as exc:
            self._fail("duplicate upstream executions", f"chain {chain.index}: {exc}")
            chain.refused += 1
            return
        chain.resolved.append(start.node)
        if start.existing is None:
            self._start_upstream(chain, start.node)
        elif start.attaches_to_open:
            self.host.attached_open += 1
        else:
            self.host.attached_ended += 1
        self.log(
            "gateway", f"chain {chain.index} -> {start.handle} joined={start.existing is not None}"
        )
        wait = early_wait_s(self.options, started=self.now, now=self.now)
        self._wait(chain, start.handle, start.node, wait)

    def _on_host_status(self, chain: Chain) -> None:
        """``longcall_status(handle, wait_s=window)``, as the handle's ``next`` says."""
        if not self._sent(chain):
            return
        self.host.status_calls += 1
        try:
            handle, node = owned_node(self.ledger, chain.principal, chain.handle)
        except HandleRefused as exc:
            node, handle = None, str(exc)
        if node is None:
            chain.refused += 1
            self._fail("handle refused", f"chain {chain.index}: its handle {handle} was refused")
            return
        wait = status_wait_s(self.options, self.options.early_return_s)
        self._wait(chain, handle, node, wait)

    def _start_upstream(self, chain: Chain, node: str) -> None:
        """``Client.call(node=…, wait=False)``: the call starts on the real engine."""
        duration = round(self.rng.choice(DURATIONS_S) * self.rng.uniform(0.5, 1.5), 3)
        draw = self.rng.random()
        outcome = OUTCOMES[0] if draw < 0.85 else OUTCOMES[1] if draw < 0.95 else OUTCOMES[2]
        self.config.nodes.append((node, chain.server, self.now))
        self.config.plans[node] = Plan(duration_s=duration, outcome=outcome)
        self.node_server[node] = chain.server
        self.creator[node] = chain
        chain.started_runs += 1
        self.host.upstream_runs += 1
        same = self.same_calls.setdefault(chain.call(), [])
        if same and chain.started_runs == 1:
            self.host.deliberate_repeats += 1
        same.append(node)
        self._on_start(node)

    def _wait(self, chain: Chain, handle: str, node: str, wait_s: float) -> None:
        request = chain.request
        assert request is not None
        waiter = Waiter(
            chain=chain, request=request, handle=handle, node=node, until=self.now + wait_s
        )
        self.waiters[request] = waiter
        self.at(waiter.until, "wait_end", request)
        if self.checker.state.get(node) in TERMINAL_STATES:
            self._answer(waiter)

    def _on_wait_end(self, request: int) -> None:
        waiter = self.waiters.get(request)
        if waiter is not None:
            self._answer(waiter)

    def _answer(self, waiter: Waiter) -> None:
        """The wait ended: the real decision says what the host is told."""
        del self.waiters[waiter.request]
        record = self.ledger.find(waiter.node)
        assert record is not None
        answer = answer_for(record)
        if answer is Answer.OUTCOME:
            mark_delivered(self.ledger, waiter.node, now=self.now, options=self.options)
        chain = waiter.chain
        if chain.request != waiter.request:
            self.log("gateway", f"chain {chain.index}: {answer.value} to a host that left")
            return
        if self.rng.random() < self.loss:
            self.host.answers_lost += 1
            self.log("net", f"chain {chain.index}: {answer.value} lost on its way to the host")
            return  # the host waits out its timeout
        chain.request = None
        if answer is Answer.OUTCOME:
            self.host.outcomes_delivered += 1
            chain.outcomes.append((waiter.handle, waiter.node))
            self.log("host", f"chain {chain.index} got the outcome of {waiter.handle}")
            return
        self.host.handles_given += 1
        chain.handle = waiter.handle
        self.at(self.now, "host_status", chain)

    # --- the hosts ---------------------------------------------------------------------

    def _sent(self, chain: Chain) -> bool:
        """A host sends a request: True when the gateway is there to take it."""
        if chain.done:
            return False
        chain.attempts += 1
        self.host.host_requests += 1
        if self.down:
            self.log("host", f"chain {chain.index}: connection refused")
            self._retry(chain)
            return False
        request = next(self.requests)
        chain.request = request
        self.at(self.now + chain.timeout_s, "host_timeout", chain, request)
        if self.rng.random() < self.disconnect:
            self.at(self.now + self.rng.uniform(0.0, chain.timeout_s), "host_drop", chain, request)
        return True

    def _retry(self, chain: Chain) -> None:
        """The same request again after a capped exponential backoff."""
        chain.retries += 1
        pause = min(BACKOFF_MAX_S, chain.backoff_s * 2 ** min(chain.retries - 1, 8))
        kind = "host_call" if chain.handle is None else "host_status"
        self.at(self.now + pause, kind, chain)

    def _on_host_timeout(self, chain: Chain, request: int) -> None:
        if chain.request != request:
            return
        self.host.host_timeouts += 1
        chain.request = None
        if self.rng.random() < 0.5:
            # The host's SDK says it gave up (a cancel notification): the gateway stops.
            self.waiters.pop(request, None)
        self._retry(chain)

    def _on_host_drop(self, chain: Chain, request: int) -> None:
        """The host drops the connection mid-wait: the gateway's handler is cancelled."""
        if chain.request != request:
            return
        self.host.disconnects += 1
        chain.request = None
        self.waiters.pop(request, None)
        self._retry(chain)

    # --- gateway crashes -------------------------------------------------------------

    def _on_gateway_crash(self, down_s: float) -> None:
        """The gateway process dies: its engine and the requests it was answering go
        (each host sees its connection reset), the ledger stays; back ``down_s`` later."""
        if self.down:
            return
        self.down = True
        self.host.gateway_crashes += 1
        self._last_heartbeat()
        self.count("executor_crash")
        self._take_away(self._open_nodes())
        self.engines.clear()
        for waiter in list(self.waiters.values()):
            if waiter.chain.request == waiter.request:
                waiter.chain.request = None
                self._retry(waiter.chain)
        self.waiters.clear()
        self.log("gateway", f"crash; back in {down_s:g} s")
        self.at(self.now + down_s, "gateway_restart")

    def _on_gateway_restart(self) -> None:
        self.down = False
        self._gateway_starts()
        self.newest_id = self._new_engine()
        count = self._call(self.newest_id, lambda en: en.resume_all(now=self.now))
        self.log(f"e{self.newest_id}", f"gateway restart: resumed {count}")

    def _gateway_starts(self) -> None:
        """A gateway process starts as the product's does: before its worker renews or
        claims anything, ``note_start`` reads the lease rows and records the downtime
        this start ends; then its worker's lease row is registered."""
        downtime = note_gateway_start(self.ledger, now=self.now, options=self.options)
        if downtime is not None:
            self.host.downtime_s += round(downtime[1] - downtime[0])
            self.log("gateway", f"down {downtime[0]:g}–{downtime[1]:g} s, recorded")
        self.gateway_owner = f"gateway-{next(self.gateway_starts)}"
        self.gateway_started_at = self.now
        self.ledger.register_worker(
            self.gateway_owner, kind=WORKER, now=self.now, lease_s=GATEWAY_LEASE.lease_s
        )

    def _last_heartbeat(self) -> None:
        """The gateway dies: its lease row holds its last heartbeat before now (the
        renewals between are not written one by one; only the last one is read)."""
        every = GATEWAY_LEASE.renew_every_s
        beats = int((self.now - self.gateway_started_at) // every)
        if beats:
            at = self.gateway_started_at + beats * every
            self.ledger.renew_worker(self.gateway_owner, now=at, lease_s=GATEWAY_LEASE.lease_s)

    def _on_crash(self) -> None:
        """A crash between a committed decision and its request is the gateway's too."""
        self._on_gateway_crash(round(self.rng.uniform(*CRASH_DOWN_S), 3))

    # --- the gates -------------------------------------------------------------------

    def _fail(self, check: str, detail: str) -> None:
        self.host.violations.append(Violation(check=check, detail=detail))

    def _judge(self, upstream: Result) -> HostResult:
        host = self.host
        for chain in self.chains:
            self._judge_chain(chain)
        host.violations = upstream.violations + host.violations
        host.receipts_compared = upstream.receipts_compared
        host.divergence = upstream.divergence
        host.server_duplicates = upstream.duplicates
        host.virtual_s = upstream.virtual_s
        host.trace = upstream.trace
        return host

    def _judge_chain(self, chain: Chain) -> None:
        """Zero duplicate runs and one outcome, of the call it started, per chain."""
        calls = len(set(chain.resolved))
        if chain.started_runs > 1 or calls > 1:
            self.host.duplicate_runs += 1
            self._fail(
                "duplicate upstream executions",
                f"chain {chain.index} resolved to {calls} calls and started"
                f" {chain.started_runs} upstream runs",
            )
        problem = self._outcome_problem(chain)
        if problem is not None:
            self.host.outcome_problems += 1
            self._fail("one outcome per host call chain", f"chain {chain.index} {problem}")

    def _outcome_problem(self, chain: Chain) -> str | None:
        if len(chain.outcomes) != 1:
            return f"got {len(chain.outcomes)} outcomes in {chain.attempts} requests"
        handle, node = chain.outcomes[0]
        started = chain.resolved[0] if chain.resolved else None
        if node != started:
            return f"got the outcome of {handle}, not of the call it started"
        if self.creator[node].principal != chain.principal:
            return f"got the outcome of {handle}, another principal's call"
        if self.checker.state.get(node) not in (State.ACCEPTED, State.CANCELLED_ACCEPTED):
            return f"got an outcome of {handle}, which the ledger holds no terminal for"
        return None


def run_host(
    seed: int,
    *,
    trace: bool = False,
    profile: Profile = DEFAULT,
    options: GatewayOptions | None = None,
) -> HostResult:
    """Run the host world of ``seed``."""
    world = HostWorld(random.Random(seed), seed=seed, trace=trace, profile=profile, options=options)
    return world.run_host()


# --- many host worlds --------------------------------------------------------------------


@dataclasses.dataclass(slots=True, kw_only=True)
class HostReport(HostCounts):
    """The host world's gates over a run of permutations."""

    permutations: int
    seed: int
    profile: str = DEFAULT.name
    virtual_hours: float = 0.0
    checks_failed: dict[str, int] = dataclasses.field(default_factory=dict)
    failures: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    failed_permutations: int = 0
    elapsed_s: float = 0.0

    def gate_list(self) -> list[Gate]:
        return [
            Gate(
                name="duplicate upstream executions = 0",
                value=f"{self.duplicate_runs} chains, {self.server_duplicates} at the servers",
                judged=self.chains,
                judged_what="host call chains",
                met=self.duplicate_runs == 0 and self.server_duplicates == 0,
            ),
            Gate(
                name="one outcome per host call chain",
                value=f"{self.outcome_problems} chains without exactly one, of their call",
                judged=self.chains,
                judged_what="host call chains",
                met=self.outcome_problems == 0,
            ),
            divergence_gate(self.divergence, self.receipts_compared),
            checks_gate(self.failed_permutations, self.permutations),
        ]

    @property
    def ok(self) -> bool:
        return all(gate.holds for gate in self.gate_list())

    def as_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["world"] = "host"
        data["gates"] = gates_json(self.gate_list())
        data["ok"] = self.ok
        return data

    def add(self, result: HostResult) -> None:
        for name, count in result.counts().items():
            setattr(self, name, getattr(self, name) + count)
        self.virtual_hours += result.virtual_s / 3600.0
        if result.violations:
            self.failed_permutations += 1
            replay = host_replay_command(result.seed or 0, self.profile)
            note_failure(self.checks_failed, self.failures, result.seed, result.violations, replay)


def host_replay_command(seed: int, profile: str = DEFAULT.name) -> str:
    suffix = "" if profile == DEFAULT.name else f" --profile {profile}"
    return f"longcall sim --world host --replay {seed}{suffix}"


def _crashed(seed: int, detail: str) -> HostResult:
    return HostResult(seed=seed, violations=[Violation(check="world raised", detail=detail)])


def guarded_host(seed: int, *, profile: Profile = DEFAULT) -> HostResult:
    """Run one host world; an exception out of it is that world's failure."""
    return guarded_as(lambda s: run_host(s, profile=profile), seed, _crashed)


def _host_chunk(job: tuple[list[int], str]) -> list[HostResult]:
    seeds, profile = job
    return [guarded_host(seed, profile=PROFILES[profile]) for seed in seeds]


def run_hosts(
    permutations: int,
    *,
    seed: int = 0,
    profile: Profile = DEFAULT,
    workers: int = 1,
    on_progress: Callable[[int], None] | None = None,
) -> HostReport:
    """Run ``permutations`` host worlds and judge them."""
    started = time.perf_counter()
    report = HostReport(permutations=permutations, seed=seed, profile=profile.name)
    seeds = [derive_seed(seed, i) for i in range(permutations)]
    for batch in batches(_host_chunk, seeds, profile=profile, workers=workers):
        for result in batch:
            report.add(result)
        if on_progress is not None:
            on_progress(len(batch))
    report.virtual_hours = round(report.virtual_hours, 1)
    report.elapsed_s = round(time.perf_counter() - started, 3)
    return report


__all__ = [
    "HOST_CHECKS",
    "HOST_TIMEOUTS_S",
    "Chain",
    "HostCounts",
    "HostReport",
    "HostResult",
    "HostWorld",
    "guarded_host",
    "host_replay_command",
    "run_host",
    "run_hosts",
]
