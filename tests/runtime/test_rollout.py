"""The rollout plan (SPEC R1-R3, P6): canary routing, disabled adapters, rollback of
in-flight operations to the old version at a higher epoch — never a second call."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from tests.bounds import LOADED_MACHINE_S
from tests.ledger.conftest import pg_schema

from longcall.cli import main
from longcall.core import State
from longcall.errors import AdapterDisabled
from longcall.ledger import AdapterPlan, Ledger, SQLiteLedger
from longcall.runtime.engine import CallSpec, Engine
from longcall.runtime.executor import Executor
from longcall.runtime.rollout import canary_bucket, rollback, route

from .test_engine import binding
from .test_leases import LEASE, World


def plan(*rows: tuple[str, str, float]) -> list[AdapterPlan]:
    return [
        AdapterPlan(protocol="test", adapter_version=v, state=s, canary_percent=pct)
        for v, s, pct in rows
    ]


def test_canary_takes_a_stable_share_of_new_calls() -> None:
    """5 % canary: about 5 % of call nodes, the same ones every time, on every worker."""
    rows = plan(("1", "enabled", 0.0), ("2", "canary", 5.0))
    nodes = [f"node-{i}" for i in range(4000)]
    chosen = [route(rows, protocol="test", offered="1", call_node_id=n) for n in nodes]
    share = chosen.count("2") / len(nodes)
    assert 0.04 <= share <= 0.06
    assert chosen == [route(rows, protocol="test", offered="1", call_node_id=n) for n in nodes]
    assert all((c == "2") == (canary_bucket(n) < 5.0) for n, c in zip(nodes, chosen, strict=True))


def test_plan_states_route_new_calls() -> None:
    """No plan: the offered version; draining/disabled take nothing new; none left: refused."""
    assert route([], protocol="test", offered="1", call_node_id="n") == "1"
    rows = plan(("1", "enabled", 0.0), ("2", "draining", 0.0))
    assert route(rows, protocol="test", offered="2", call_node_id="n") == "1"
    with pytest.raises(AdapterDisabled, match="no test adapter version takes new calls"):
        route(plan(("1", "disabled", 0.0)), protocol="test", offered="1", call_node_id="n")


def test_a_canary_on_a_fresh_plan_is_a_share_not_every_call() -> None:
    """A canary row alone (no version enabled): its share goes to the canary, every other
    call to the adapter's own version; only with that version taken out does the canary
    take them all."""
    rows = plan(("2", "canary", 10.0))
    nodes = [f"node-{i}" for i in range(2000)]
    chosen = [route(rows, protocol="test", offered="1", call_node_id=n) for n in nodes]
    assert all((c == "2") == (canary_bucket(n) < 10.0) for n, c in zip(nodes, chosen, strict=True))
    assert 0.07 <= chosen.count("2") / len(nodes) <= 0.13
    taken_out = plan(("1", "draining", 0.0), ("2", "canary", 10.0))
    assert {route(taken_out, protocol="test", offered="1", call_node_id=n) for n in nodes} == {"2"}


def test_disabled_adapter_refuses_new_calls_and_keeps_its_own(tmp_path: Path) -> None:
    """P6: disabling the version stops new operations; an existing one is still attached."""
    with SQLiteLedger(tmp_path / "l.db", synchronous="off") as ledger:
        executor = Executor(ledger, single_process=True)
        spec = CallSpec(call_node_id="old", binding=binding(), arguments={"a": 1})
        executor.call(spec)
        ledger.set_rollout(
            AdapterPlan(protocol="test", adapter_version="1", state="disabled", note="bad")
        )
        with pytest.raises(AdapterDisabled):
            executor.call(CallSpec(call_node_id="new", binding=binding(), arguments={}))
        assert ledger.find("new") is None
        assert executor.call(spec).call_node_id == "old"


def test_rollback_hands_in_flight_operations_to_the_old_version(tmp_path: Path) -> None:
    """R3: the new version's in-flight operations go on under the old one at a higher
    epoch; the worker that drove them is fenced; each ends with one receipt."""
    world = World(tmp_path)
    world.server.polls_until_done = 40
    creator_binding = binding(adapter_version="2")
    seeder = world.ledger()
    creator = Engine(seeder, rng=random.Random(0))
    for i in range(6):
        spec = CallSpec(call_node_id=f"r{i}", binding=creator_binding, arguments={"i": i})
        creator.start_call(spec, now=0.0)
    a = world.worker("a")
    world.held_back["a"] = []
    world.run(until=2.0)
    assert len(a.records) == 6
    late = world.held_back.pop("a")
    rebound = rollback(
        seeder, protocol="test", from_version="2", to_version="1", now=world.now,
        rng=random.Random(1),
    )  # fmt: skip
    assert sorted(r.call_node_id for r in rebound) == [f"r{i}" for i in range(6)]
    assert all(r.adapter_version == "1" for r in rebound)
    for action in late:
        outcome = world.server.answer(action, world.now)
        if outcome is not None:
            a.apply_reply(action, outcome, now=world.now)
    assert a.stats["fenced"] >= 1
    world.server.polls_until_done = 1
    world.worker("b")
    world.run(until=world.now + LEASE.lease_s + 30.0)
    records = seeder.list_by_state()
    assert [r.state for r in records] == [State.ACCEPTED] * 6
    assert all(r.adapter_version == "1" for r in records)
    assert len(seeder.receipts()) == 6
    assert len(world.server.created) == 6  # the same remote operations, never a new call
    world.close()


def test_rollout_commands(tmp_path: Path) -> None:
    """longcall rollout set, canary, status --json and rollback write and show the plan."""
    ledger = f"sqlite:///{tmp_path / 'l.db'}"
    runner = CliRunner()
    for args in (
        ["set", "mcp", "1", "enabled", "--for-other-builds"],
        ["canary", "mcp", "2", "5", "--note", "new reader", "--for-other-builds"],
    ):
        done = runner.invoke(main, ["rollout", *args, "--ledger", ledger])
        assert done.exit_code == 0, done.output
    shown = runner.invoke(main, ["rollout", "status", "--json", "--ledger", ledger])
    rows = {
        (r["adapter_version"], r["state"], r["canary_percent"]) for r in json.loads(shown.output)
    }
    assert rows == {("1", "enabled", 0.0), ("2", "canary", 5.0)}
    done = runner.invoke(
        main,
        [
            "rollout",
            "rollback",
            "mcp",
            "--from",
            "2",
            "--to",
            "1",
            "--for-other-builds",
            "--ledger",
            ledger,
        ],
    )
    assert done.exit_code == 0, done.output
    assert "0 in-flight operations handed to 1" in done.output
    shown = runner.invoke(main, ["rollout", "status", "--json", "--ledger", ledger])
    assert {(r["adapter_version"], r["state"]) for r in json.loads(shown.output)} == {
        ("1", "enabled"),
        ("2", "disabled"),
    }
    bad = runner.invoke(main, ["rollout", "set", "mcp", "1", "paused", "--ledger", ledger])
    assert bad.exit_code != 0


def test_rollout_notes_a_version_no_worker_of_this_build_runs(tmp_path: Path) -> None:
    """Sending calls (a canary) or in-flight operations (a rollback) to a version this
    build's adapters do not bind says which worker will drive them; this build's own
    version, or taking a version out, says nothing more."""
    ledger = f"sqlite:///{tmp_path / 'l.db'}"
    runner = CliRunner()

    def run(*args: str) -> str:
        done = runner.invoke(main, ["rollout", *args, "--ledger", ledger])
        assert done.exit_code == 0, done.output
        return done.output

    assert "note:" not in run("set", "2026-07-28", "1", "enabled")
    assert "--runs 2026-07-28=2" in run("canary", "2026-07-28", "2", "5", "--for-other-builds")
    assert "note:" not in run("set", "2026-07-28", "2", "draining")
    assert "note:" not in run("rollback", "2026-07-28", "--from", "2", "--to", "1")
    assert "--runs 2026-07-28=0" in run(
        "rollback", "2026-07-28", "--from", "1", "--to", "0", "--for-other-builds"
    )


def test_a_plan_routing_new_calls_where_no_worker_of_this_build_goes_is_refused(
    tmp_path: Path,
) -> None:
    """The help's canary of a version this build does not run, on a fresh ledger: refused
    when set (exit 5, nothing stored) with what to do instead; enabling it or rolling back
    to it too; status lists what this build runs."""
    ledger = f"sqlite:///{tmp_path / 'l.db'}"
    runner = CliRunner()

    def run(*args: str) -> Any:
        return runner.invoke(main, ["rollout", *args, "--ledger", ledger])

    refused = run("canary", "2026-07-28", "2", "10", "--note", "x")
    assert refused.exit_code == 5, refused.output
    assert "no worker of this build runs 2026-07-28 2" in refused.output
    assert "--for-other-builds" in refused.output
    assert "runs 2026-07-28 1" in refused.output
    assert run("set", "2026-07-28", "2", "enabled").exit_code == 5
    assert run("rollback", "2026-07-28", "--from", "1", "--to", "2").exit_code == 5
    assert run("canary", "2026-07-28", "2", "0").exit_code == 0  # a share of nothing
    assert run("set", "2026-07-28", "2", "disabled").exit_code == 0  # taking out: always
    shown = run("status")
    assert shown.exit_code == 0, shown.output
    assert "this build runs:" in shown.output
    assert "2026-07-28 1" in shown.output
    status = json.loads(run("status", "--json").output)
    assert {(r["adapter_version"], r["state"]) for r in status} == {("2", "disabled")}


# --- claims filtered by adapter version (two builds side by side) ---------------------

V1 = frozenset({("test", "1")})
V2 = frozenset({("test", "2")})


class BackendWorld(World):
    """The virtual-time world of test_leases on either backend: one connection per
    engine to the same SQLite file or PostgreSQL schema."""

    def __init__(self, tmp_path: Path, open_ledger: Callable[[], Ledger]) -> None:
        super().__init__(tmp_path)
        self._open = open_ledger

    def ledger(self) -> Ledger:
        ledger = self._open()
        self.ledgers.append(ledger)
        return ledger


@pytest.fixture(params=["sqlite", "postgres"])
def bworld(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BackendWorld]:
    """An empty ledger of each backend, and a scripted server."""
    if request.param == "sqlite":
        path = tmp_path / "l.db"
        world = BackendWorld(tmp_path, lambda: SQLiteLedger(path, synchronous="off"))
        yield world
        world.close()
        return
    from longcall.ledger.postgres import PostgresLedger

    with pg_schema() as (dsn, schema):
        world = BackendWorld(tmp_path, lambda: PostgresLedger(dsn, schema=schema))
        yield world
        world.close()


def seed_versions(world: World, count: int, *versions: str) -> Ledger:
    """``count`` operations per adapter version, created by a caller that went away."""
    seeder = world.ledger()
    creator = Engine(seeder, rng=random.Random(0))
    for version in versions:
        for i in range(count):
            spec = CallSpec(
                call_node_id=f"v{version}-{i}",
                binding=binding(adapter_version=version),
                arguments={"i": i},
            )
            creator.start_call(spec, now=0.0)
    return seeder


def claimers(ledger: Ledger, node: str) -> set[str | None]:
    return {h.owner for h in ledger.history(node) if h.event == "ExecutionClaimed"}


def test_workers_claim_only_the_versions_they_run(bworld: BackendWorld) -> None:
    """Two workers running different versions never claim each other's operations,
    and each one's fair share counts only the operations it can drive."""
    seeder = seed_versions(bworld, 8, "1", "2")
    a = bworld.worker("a", versions=V1)
    b = bworld.worker("b", versions=V2)
    bworld.run(until=1.5)
    # Alone on its version, each holds all of it (not half of everything).
    assert sorted(a.records) == [f"v1-{i}" for i in range(8)]
    assert sorted(b.records) == [f"v2-{i}" for i in range(8)]
    census = seeder.census("a", now=bworld.now, versions=V1)
    assert (census.open_operations, census.live_workers, census.held) == (8, 1, 8)
    bworld.run(until=30.0)
    records = seeder.list_by_state()
    assert [r.state for r in records] == [State.ACCEPTED] * 16
    assert len(seeder.receipts()) == 16
    for record in records:
        expected = "a" if record.adapter_version == "1" else "b"
        assert claimers(seeder, record.call_node_id) == {expected}, record.call_node_id


def test_rollback_moves_in_flight_operations_to_the_old_versions_workers(
    bworld: BackendWorld,
) -> None:
    """R3 across builds: operations of version 2 in flight on its worker are rebound to
    version 1; only the worker running version 1 claims them; the same remote
    operations finish, one receipt each."""
    bworld.server.polls_until_done = 400
    seeder = seed_versions(bworld, 6, "2")
    a = bworld.worker("a", versions=V1)
    b = bworld.worker("b", versions=V2)
    bworld.run(until=2.0)
    assert len(b.records) == 6
    assert not a.records
    rebound = rollback(
        seeder, protocol="test", from_version="2", to_version="1", now=bworld.now,
        rng=random.Random(1),
    )  # fmt: skip
    assert len(rebound) == 6
    assert seeder.census("b", now=bworld.now, versions=V2).open_operations == 0
    bworld.server.polls_until_done = 1
    bworld.run(until=bworld.now + 10.0)
    records = seeder.list_by_state()
    assert [r.state for r in records] == [State.ACCEPTED] * 6
    assert all(r.adapter_version == "1" for r in records)
    assert not b.records
    assert len(seeder.receipts()) == 6
    assert len(bworld.server.created) == 6  # the same remote operations
    for record in records:
        history = seeder.history(record.call_node_id)
        rebind = max(h.version for h in history if h.event == "ExecutionClaimed" and not h.owner)
        assert {h.owner for h in history if h.version > rebind} == {"a"}


def test_a_call_routed_to_another_version_is_left_to_its_workers(tmp_path: Path) -> None:
    """A process that names the versions it runs creates a call the plan routes to
    another version, unowned and bound to that version; a worker running it drives it.
    A process that names none still refuses (it would drive it with its own code)."""
    world = World(tmp_path)
    ledger = world.ledger()
    ledger.set_rollout(AdapterPlan(protocol="test", adapter_version="1", state="enabled"))
    ledger.set_rollout(
        AdapterPlan(protocol="test", adapter_version="2", state="canary", canary_percent=100.0)
    )
    with pytest.raises(AdapterDisabled, match="does not name the versions it runs"):
        Executor(ledger, single_process=True).call(
            CallSpec(call_node_id="refused", binding=binding(), arguments={})
        )
    assert ledger.find("refused") is None
    executor = Executor(ledger, versions=V1, owner="v1-caller")
    record = executor.call(CallSpec(call_node_id="routed", binding=binding(), arguments={}))
    assert record.adapter_version == "2"
    assert "routed" not in executor.engine.records
    assert ledger.census("v1-caller", now=0.0, versions=V1).open_operations == 0
    assert ledger.census("x", now=0.0, versions=V2).claimable == 1
    world.worker("b", versions=V2)
    world.run(until=10.0)
    assert ledger.get("routed").state is State.ACCEPTED
    assert claimers(ledger, "routed") == {"b"}
    world.close()


def test_worker_runs_takes_protocol_version_pairs(tmp_path: Path) -> None:
    """``longcall worker --runs`` wants PROTOCOL=VERSION; anything else is a usage error."""
    done = CliRunner().invoke(
        main, ["worker", "--runs", "mcp", "--ledger", f"sqlite:///{tmp_path / 'l.db'}"]
    )
    assert done.exit_code == 2
    assert "PROTOCOL=VERSION" in done.output


def _waiting_for_a_person(path: Path, *, adapter_version: str) -> None:
    """One open operation of the 2026-07-28 adapter at ``adapter_version``, waiting for
    an answer: a worker that takes it has nothing to send (no server is needed)."""
    from tests.core.builders import new_record

    from longcall.core import events as e
    from longcall.core.record import evolve
    from longcall.runtime.step import apply_event

    with SQLiteLedger(path) as ledger:
        record = ledger.create(
            evolve(
                new_record(call_node_id="v-node", now=0.0),
                server="http://127.0.0.1:9/mcp",
                protocol="2026-07-28",
                adapter_version=adapter_version,
            )
        )
        for event in (
            e.SubmitAcknowledged(operation_id="op-1", poll_interval_s=1.0),
            e.InputRequestObserved(keys=("k",), server_status_raw="input_required"),
        ):
            record = apply_event(ledger, record, event, now=1.0, jitter=0.5).record
        assert record.state is State.INPUT_REQUIRED


@pytest.mark.parametrize(
    ("adapter_version", "runs", "taken"),
    [
        pytest.param("1", (), True, id="this-builds-version"),
        pytest.param("2", (), False, id="another-builds-version"),
        pytest.param("2", ("--runs", "any"), True, id="any"),
        pytest.param("2", ("--runs", "2026-07-28=2"), True, id="named"),
    ],
)
def test_a_worker_runs_the_versions_its_build_carries_by_default(
    tmp_path: Path, adapter_version: str, runs: tuple[str, ...], taken: bool
) -> None:
    """Without --runs a worker drives only what this build's adapters bind: an
    operation bound to another build's adapter version is never claimed (its epoch
    stays 0); ``--runs any`` or the named version takes it. Either way the worker
    exits 4 once idle, since the ledger holds an operation waiting for a person."""
    import subprocess
    import sys

    path = tmp_path / "l.db"
    _waiting_for_a_person(path, adapter_version=adapter_version)
    argv = [sys.executable, "-m", "longcall", "worker", "--until-idle", "--quiet"]
    done = subprocess.run(
        [*argv, *runs, "--ledger", f"sqlite:///{path}"],
        capture_output=True,
        text=True,
        timeout=LOADED_MACHINE_S,
        check=False,
    )
    assert done.returncode == 4, done.stderr
    with SQLiteLedger(path) as ledger:
        assert (ledger.get("v-node").execution_epoch > 0) is taken
