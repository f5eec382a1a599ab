"""Several engines on one ledger, in virtual time (SPEC D1, X3): leases, takeover,
fencing of a paused worker, one poll budget for all, and no claim ping-pong."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from longcall.core import State
from longcall.ledger import Ledger, SQLiteLedger
from longcall.runtime.engine import Action, CallSpec, Engine
from longcall.runtime.leases import LeasePolicy

from .test_engine import ScriptedServer, binding

LEASE = LeasePolicy.of(3.0)
TICK_S = 0.05


class World:
    """Engines on one SQLite file, each with its own connection, driven tick by tick."""

    def __init__(self, tmp_path: Path, *, qps: float = 20.0) -> None:
        self.path = tmp_path / "l.db"
        self.ledgers: list[Ledger] = []
        self.engines: dict[str, Engine] = {}
        self.paused: set[str] = set()
        self.held_back: dict[str, list[Action]] = {}
        self.server = ScriptedServer(polls_until_done=3, interval_s=0.5)
        self.poll_times: list[float] = []
        self.qps = qps
        self.now = 0.0

    def ledger(self) -> Ledger:
        ledger = SQLiteLedger(self.path, synchronous="off")
        self.ledgers.append(ledger)
        return ledger

    def seed(self, count: int) -> None:
        """Operations created by a caller that went away (nobody holds them)."""
        creator = Engine(self.ledger(), rng=random.Random(0))
        for i in range(count):
            spec = CallSpec(call_node_id=f"n{i:03d}", binding=binding(), arguments={"i": i})
            creator.start_call(spec, now=0.0)

    def worker(self, owner: str, **kw: object) -> Engine:
        engine = Engine(
            self.ledger(),
            rng=random.Random(owner),
            owner=owner,
            lease=LEASE,
            poll_qps_max=self.qps,
            **kw,  # type: ignore[arg-type]
        )
        self.engines[owner] = engine
        return engine

    def run(self, until: float) -> None:
        while self.now < until:
            for owner, engine in self.engines.items():
                if owner in self.paused:
                    continue
                engine.housekeep(now=self.now)
                for action in engine.due(self.now):
                    if action.kind == "Poll":
                        self.poll_times.append(self.now)
                    outcome = self.server.answer(action, self.now)
                    if owner in self.held_back:
                        self.held_back[owner].append(action)
                    elif outcome is None:
                        engine.end_without_reply(action)
                    else:
                        engine.apply_reply(action, outcome, now=self.now)
            self.now = round(self.now + TICK_S, 6)

    def close(self) -> None:
        for ledger in self.ledgers:
            ledger.close()


@pytest.fixture
def world(tmp_path: Path) -> World:
    """An empty ledger file and a scripted server."""
    made = World(tmp_path)
    yield made  # type: ignore[misc]
    made.close()


def claims_per_node(ledger: Ledger, nodes: list[str]) -> Counter[str]:
    return Counter(
        node for node in nodes for h in ledger.history(node) if h.event == "ExecutionClaimed"
    )


def test_workers_share_the_work_and_finish_it_once(world: World) -> None:
    """Two workers take about half each; every operation ends with one receipt."""
    world.seed(20)
    a, b = world.worker("a"), world.worker("b")
    world.run(until=1.0)
    assert 5 <= len(a.records) <= 15
    assert len(a.records) + len(b.records) == 20
    world.run(until=20.0)
    ledger = world.ledgers[0]
    assert [r.state for r in ledger.list_by_state()] == [State.ACCEPTED] * 20
    assert len(ledger.receipts()) == 20
    assert a.stats["fenced"] == b.stats["fenced"] == 0
    nodes = [r.call_node_id for r in ledger.list_by_state()]
    assert max(claims_per_node(ledger, nodes).values()) == 1


def test_paused_worker_is_taken_over_and_its_late_write_is_fenced(world: World) -> None:
    """A paused worker's operations go to the other after the lease; its late replies
    are refused by the database, it lets them go, and no receipt is written twice."""
    world.seed(10)
    a, b = world.worker("a"), world.worker("b")
    world.run(until=1.0)
    held_by_a = set(a.records)
    assert held_by_a
    world.held_back["a"] = []  # a's next requests get no reply yet
    world.run(until=1.3)
    late = world.held_back.pop("a")
    assert late
    world.paused.add("a")  # a stops (SIGSTOP, a GC pause) holding those requests
    world.run(until=1.3 + LEASE.lease_s + 2.0)
    assert held_by_a <= set(b.records) | {
        r.call_node_id for r in world.ledgers[0].list_by_state(State.ACCEPTED)
    }
    assert b.stats["takeovers"] >= 1
    world.paused.discard("a")
    for action in late:  # the replies reach a after the takeover
        outcome = world.server.answer(action, world.now)
        if outcome is not None:
            a.apply_reply(action, outcome, now=world.now)
    assert a.stats["fenced"] >= 1
    world.run(until=world.now + 20.0)
    ledger = world.ledgers[0]
    assert [r.state for r in ledger.list_by_state()] == [State.ACCEPTED] * 10
    assert len(ledger.receipts()) == 10
    for node in held_by_a:
        history = ledger.history(node)
        taken = max(h.version for h in history if h.owner == "b" and h.event == "ExecutionClaimed")
        assert all(h.owner == "b" for h in history if h.version >= taken), history


def test_all_workers_poll_within_one_budget(tmp_path: Path) -> None:
    """Three workers polling one server stay within its cap in every one-second window."""
    world = World(tmp_path, qps=5.0)
    world.server = ScriptedServer(polls_until_done=6, interval_s=0.2)
    world.seed(30)
    for owner in ("a", "b", "c"):
        world.worker(owner)
    world.run(until=60.0)
    times = sorted(world.poll_times)
    assert len(times) >= 100
    for start in times:
        assert sum(1 for t in times if start <= t < start + 1.0) <= 5
    world.close()


def test_late_joiners_rebalance_without_ping_pong(world: World) -> None:
    """One worker starts alone; two join later: the first sheds down to its share plus
    the slack, and each operation is claimed at most twice (the first claim and one
    hand-over of a surplus)."""
    world.server = ScriptedServer(polls_until_done=400, interval_s=0.5)
    world.seed(30)
    a = world.worker("a")
    world.run(until=2.0)
    assert len(a.records) == 30
    world.worker("b")
    world.worker("c")
    world.run(until=12.0)
    sizes = sorted(len(e.records) for e in world.engines.values())
    # Each holds at most its share (10) plus the slack (25 %, at least 2) it keeps.
    assert sum(sizes) == 30
    assert sizes[-1] <= 10 + 3, sizes
    nodes = [f"n{i:03d}" for i in range(30)]
    assert max(claims_per_node(world.ledgers[0], nodes).values()) <= 2


def test_caller_waits_while_a_worker_holds_its_node(world: World) -> None:
    """A caller attached to a node a live worker drives does not compete; it takes the
    node over only once that worker's lease lapsed."""
    world.server = ScriptedServer(polls_until_done=400, interval_s=0.5)
    world.seed(1)
    worker = world.worker("w")
    world.run(until=1.0)
    assert "n000" in worker.records
    caller = world.worker("caller", claim_all=False)
    caller.attach("n000", "report", {"i": 0}, now=world.now)
    world.run(until=2.0)
    assert "n000" not in caller.records
    world.paused.add("w")
    world.run(until=2.0 + LEASE.lease_s + 1.0)
    assert "n000" in caller.records
    assert caller.stats["takeovers"] == 1


def _fetch_delay(tmp_path: Path, *, result_in_hand: bool) -> float:
    """How long after the terminal poll's reply the result fetch leaves, for a worker on
    a shared budget of one poll a second."""
    engine = Engine(
        SQLiteLedger(tmp_path / f"{result_in_hand}.db", synchronous="off"),
        rng=random.Random(0),
        owner="w",
        lease=LEASE,
        poll_qps_max=1.0,
    )
    server = ScriptedServer(polls_until_done=1, interval_s=0.5)
    engine.start_call(CallSpec(call_node_id="n", binding=binding(), arguments={}), now=0.0)
    replied_at = None
    now = 0.0
    while now < 30.0:
        for action in engine.due(now):
            if action.kind == "FetchResult":
                assert replied_at is not None
                return now - replied_at
            outcome = server.answer(action, now)
            assert outcome is not None
            if action.kind == "Poll":
                replied_at = now
                if result_in_hand:  # what the executor says when the adapter holds it
                    engine.scheduler.result_in_hand(action.call_node_id)
            engine.apply_reply(action, outcome, now=now)
        now = round(now + TICK_S, 6)
    raise AssertionError("no result fetch")


def test_a_result_in_hand_is_fetched_without_a_send_slot(tmp_path: Path) -> None:
    """A terminal poll whose reply inlined the result: the fetch sends nothing, so it
    leaves at once instead of waiting for the shared budget's next slot (X3)."""
    assert _fetch_delay(tmp_path, result_in_hand=True) <= TICK_S
    assert _fetch_delay(tmp_path, result_in_hand=False) >= 1.0 - TICK_S
