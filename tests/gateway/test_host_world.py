"""A host world on virtual time: hosts with timeouts, retries and lost responses, a
gateway that crashes and comes back, upstream calls of random length — with the
gateway's real same-call rule (``repeats.resolve``: handle derivation, principal
binding, the repeat counter, ``joins``) deciding every host call.

What is modelled rather than run: the upstream (a call ends ``duration`` after it
starts), the ledger (a dict: it survives a crash, the gateway's memory does not), and
the early-return and status timing (an answer at the end of the call or of the window,
whichever is first). Checked over 10,000 seeded runs: zero duplicate upstream
executions (no host call chain's retries start a second run) and exactly one outcome
delivered to each chain, naming the call the chain started.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import random
from collections.abc import Callable
from typing import Any

from longcall.gateway.handles import HostCall
from longcall.gateway.repeats import (
    DEFAULT_GRACE_S,
    Earlier,
    delivery_period,
    last_delivery,
    resolve,
)

WORLDS = 10_000
WINDOW_S = 40.0
HOST_TIMEOUTS_S = (20.0, 60.0, 240.0)
"""Below the window (every call times out until the upstream ends), the TypeScript SDK's
default, Claude Desktop's."""
ATTEMPTS_MAX = 400
KEY = b"the ledger's secret"


@dataclasses.dataclass
class Node:
    started_at: float
    ended_at: float
    delivered_in: set[int] = dataclasses.field(default_factory=set)
    """The grace periods in which the gateway gave this call's outcome to a host."""


@dataclasses.dataclass
class Chain:
    """One host call and its retries, then its status calls, until it has an outcome."""

    index: int
    arguments: str
    start_at: float
    timeout_s: float
    backoff_s: float
    handle: str | None = None
    nodes_seen: set[str] = dataclasses.field(default_factory=set)
    outcome_node: str | None = None
    outcomes: int = 0
    started_runs: int = 0
    attempts: int = 0


class World:
    """One seeded run."""

    def __init__(self, seed: int, *, grace_s: float = DEFAULT_GRACE_S) -> None:
        self.grace_s = grace_s
        self.rng = random.Random(seed)
        self.now = 0.0
        self.events: list[tuple[float, int, Callable[[], None]]] = []
        self.order = itertools.count()
        self.ledger: dict[str, Node] = {}
        self.runs: dict[str, int] = {}
        self.loss = self.rng.choice((0.0, 0.05, 0.3))
        self.down: list[tuple[float, float]] = []
        for _ in range(self.rng.randint(0, 2)):
            at = self.rng.uniform(0, 600)
            self.down.append((at, at + self.rng.uniform(1, 90)))
        self.chains: list[Chain] = []
        args_pool = [f"args-{i}" for i in range(self.rng.randint(1, 3))]
        for index in range(self.rng.randint(1, 5)):
            chain = Chain(
                index=index,
                arguments=self.rng.choice(args_pool),
                start_at=self.rng.uniform(0, 900),
                timeout_s=self.rng.choice(HOST_TIMEOUTS_S),
                backoff_s=self.rng.uniform(0, 30),
            )
            self.chains.append(chain)
            self.at(chain.start_at, lambda c=chain: self.host_call(c))

    # --- the event queue ------------------------------------------------------------

    def at(self, when: float, action: Callable[[], None]) -> None:
        heapq.heappush(self.events, (when, next(self.order), action))

    def run(self) -> None:
        while self.events:
            self.now, _, action = heapq.heappop(self.events)
            action()

    def gateway_up(self, when: float) -> bool:
        return not any(start <= when < end for start, end in self.down)

    def crash_between(self, start: float, end: float) -> bool:
        """The gateway went down while a request was being answered (its answer is lost)."""
        return any(start < down < end for down, _ in self.down)

    # --- the gateway: the real same-call rule on a modelled ledger ---------------------

    def find(self, node: str) -> Earlier | None:
        found = self.ledger.get(node)
        if found is None:
            return None
        return Earlier(
            is_open=found.ended_at > self.now,
            ended_at=found.ended_at,
            delivered_at=last_delivery(found.delivered_in.__contains__, self.now, self.grace_s),
            ever_delivered=bool(found.delivered_in),
        )

    def gateway_call(self, chain: Chain) -> tuple[str, str]:
        """A host call arrives: resolve its node (start it if new); (handle, node)."""
        call = HostCall(principal="host", tool="report", arguments_digest=chain.arguments)
        found = resolve(call, key=KEY, find=self.find, now=self.now, grace_s=self.grace_s)
        if not found.joined:
            duration = self.rng.choice((1.0, 30.0, 90.0, 400.0)) * self.rng.uniform(0.5, 1.5)
            self.ledger[found.node] = Node(started_at=self.now, ended_at=self.now + duration)
            self.runs[found.node] = self.runs.get(found.node, 0) + 1
            chain.started_runs += 1
        return found.handle, found.node

    # --- the host --------------------------------------------------------------------

    def send(
        self, chain: Chain, answer_at: float, reply: Callable[[], None], node: str | None = None
    ) -> None:
        """The gateway answers at ``answer_at`` unless it crashed first or the answer is
        lost; the host gives up waiting at its timeout and retries after a backoff. An
        outcome (``node``) is marked delivered as it is sent, lost or not."""
        sent = self.now
        deadline = sent + chain.timeout_s
        crashed = self.crash_between(sent, answer_at)
        if node is not None and not crashed:
            self.at(answer_at, lambda: self.mark(node))
        lost = crashed or self.rng.random() < self.loss
        if answer_at <= deadline and not lost:
            self.at(answer_at, reply)
        else:
            self.at(deadline + chain.backoff_s, lambda: self.retry(chain))

    def retry(self, chain: Chain) -> None:
        if chain.handle is None:
            self.host_call(chain)
        else:
            self.host_status(chain)

    def host_call(self, chain: Chain) -> None:
        chain.attempts += 1
        assert chain.attempts < ATTEMPTS_MAX, "a chain never got its outcome"
        if not self.gateway_up(self.now):
            self.at(self.now + chain.backoff_s + 1, lambda: self.host_call(chain))
            return
        handle, node = self.gateway_call(chain)
        self.answer(chain, handle, node, wait_s=WINDOW_S)

    def host_status(self, chain: Chain) -> None:
        chain.attempts += 1
        assert chain.attempts < ATTEMPTS_MAX, "a chain never got its outcome"
        if not self.gateway_up(self.now):
            self.at(self.now + chain.backoff_s + 1, lambda: self.host_status(chain))
            return
        assert chain.handle is not None
        call = HostCall(principal="host", tool="report", arguments_digest=chain.arguments)
        node = next(n for n in self.ledger if n.endswith(chain.handle) and n.startswith("gateway:"))
        assert call.principal == "host"
        self.answer(chain, chain.handle, node, wait_s=WINDOW_S)

    def answer(self, chain: Chain, handle: str, node: str, *, wait_s: float) -> None:
        """The outcome when the call ends within the wait, else the handle at its end."""
        ended_at = self.ledger[node].ended_at
        if ended_at <= self.now + wait_s:
            answer_at = max(self.now, ended_at)

            def outcome() -> None:
                self.receive(chain, handle, node, outcome=True)

            self.send(chain, answer_at, outcome, node)
        else:
            self.send(
                chain,
                self.now + wait_s,
                lambda: self.receive(chain, handle, node, outcome=False),
            )

    def mark(self, node: str) -> None:
        self.ledger[node].delivered_in.add(delivery_period(self.now, self.grace_s))

    def receive(self, chain: Chain, handle: str, node: str, *, outcome: bool) -> None:
        chain.nodes_seen.add(node)
        if outcome:
            chain.outcomes += 1
            chain.outcome_node = node
            return
        chain.handle = handle
        self.host_status(chain)


def check(world: World) -> list[str]:
    """What went wrong in one run (nothing, if the gateway kept its promises)."""
    problems: list[str] = []
    for chain in world.chains:
        if chain.outcomes != 1:
            problems.append(f"chain {chain.index} got {chain.outcomes} outcomes")
        if len(chain.nodes_seen) != 1:
            problems.append(f"chain {chain.index} saw {len(chain.nodes_seen)} calls")
        if chain.started_runs > 1:
            problems.append(f"chain {chain.index} started {chain.started_runs} upstream runs")
    problems += [f"{node} ran {n} times" for node, n in world.runs.items() if n != 1]
    return problems


def test_ten_thousand_host_worlds_have_no_duplicate_run_and_one_outcome_per_chain() -> None:
    """Host timeouts (below, at and above the window), retries, lost answers, gateway
    crashes: no chain starts two upstream runs, each gets exactly one outcome."""
    totals: dict[str, Any] = {"chains": 0, "runs": 0, "repeats": 0, "attempts": 0}
    for seed in range(WORLDS):
        world = World(seed)
        world.run()
        problems = check(world)
        assert not problems, f"seed {seed}: {problems}"
        totals["chains"] += len(world.chains)
        totals["runs"] += len(world.runs)
        totals["attempts"] += sum(c.attempts for c in world.chains)
        totals["repeats"] += sum(1 for c in world.chains if c.started_runs == 0)
    print(
        f"{WORLDS} worlds: {totals['chains']} host call chains, {totals['attempts']} host"
        f" requests, {totals['runs']} upstream runs, {totals['repeats']} chains joined an"
        " earlier call; 0 duplicate runs, 1 outcome per chain"
    )
    # Deliberate repeats exist in these worlds: some chains joined an earlier call (same
    # arguments within the grace), others with the same arguments ran anew after it.
    assert totals["repeats"] > 0
    assert totals["runs"] > WORLDS


def test_a_deliberate_repeat_after_the_grace_runs_again() -> None:
    """The rule's other half, in the same world: a chain with the same arguments that
    starts after the grace following delivery gets a new run."""
    world = World(0)
    world.chains.clear()
    world.events.clear()
    world.down.clear()
    world.loss = 0.0
    first = Chain(index=0, arguments="a", start_at=0, timeout_s=60, backoff_s=1)
    later = Chain(
        index=1, arguments="a", start_at=DEFAULT_GRACE_S + 1_000, timeout_s=60, backoff_s=1
    )
    for chain in (first, later):
        world.chains.append(chain)
        world.at(chain.start_at, lambda c=chain: world.host_call(c))
    world.run()
    assert not check(world)
    assert first.outcome_node != later.outcome_node
    assert first.started_runs == later.started_runs == 1


def test_a_grace_shorter_than_a_host_timeout_is_caught_by_the_world() -> None:
    """The world can fail: with a 30 s grace, a host that waits out a 60 s or 240 s
    timeout after a lost answer runs the tool again, and the checks see it."""
    failing = [seed for seed in range(1_000) if check(run_world(seed, grace_s=30.0))]
    assert failing


def run_world(seed: int, **options: Any) -> World:
    world = World(seed, **options)
    world.run()
    return world
