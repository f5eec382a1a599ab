"""Worlds of several lease-mode workers on one ledger (SPEC D1, X3): the real Engine and
SQLite ledger, driven as the executor drives a worker, with pauses, lease expiry, kills,
clean stops and skewed clocks. Each pinned seed is a permutation of the CI corpus."""

from __future__ import annotations

import random

from longcall.core import State
from longcall.sim import World, run_one
from longcall.sim.config import ROLLBACK_TO, SKEW_MAX_S
from longcall.sim.mutants import applied, mutant

PAUSED = 181922460370211
"""A worker paused past its lease: the others take its operations over, and when it
resumes, its late writes are refused by the ledger (Fenced)."""
KILLED = 104379953139112
"""A worker killed holding leases: after they lapse, the others take its operations."""
SKEWED = 243295072864028
"""Four workers whose clocks disagree (and one paused, stalled, then killed)."""
ROLLED_BACK = 3609958148174
"""An operator rolls the protocol back from version 1 to 0 with two calls in flight
(and no other worker fault): their driver is fenced, a worker claims them afresh."""


def _world(seed: int) -> World:
    return World(random.Random(seed), seed=seed)


def test_a_paused_worker_resumes_after_takeover_and_its_writes_are_fenced() -> None:
    world = _world(PAUSED)
    assert world.config.workers is not None
    assert world.config.workers.pauses
    result = world.run()
    assert result.violations == []
    assert result.faults["worker_paused"] == 1
    assert result.worker_stats["takeovers"] > 0
    assert result.worker_stats["fenced"] > 0  # the database refused its late writes
    assert result.duplicates == 0
    assert result.divergence == 0


def test_a_killed_workers_operations_are_taken_over_after_its_lease() -> None:
    world = _world(KILLED)
    workers = world.config.workers
    assert workers is not None
    assert workers.kills
    assert not workers.pauses
    result = world.run()
    assert result.violations == []
    assert result.faults["worker_killed"] >= 1
    assert result.worker_stats["takeovers"] > 0
    assert result.claims_max <= 2 + 1


def test_skewed_clocks_keep_the_shared_poll_budget() -> None:
    world = _world(SKEWED)
    workers = world.config.workers
    assert workers is not None
    assert any(workers.skews)
    assert all(abs(skew) <= SKEW_MAX_S for skew in workers.skews)
    result = world.run()
    assert result.violations == []
    assert result.faults["clock_skew"] == 1
    assert result.polls.reads > 10
    assert result.polls.qps_max <= 2  # all workers together, at the server


def test_a_rollback_mid_flight_rebinds_the_open_operations_and_fences_their_driver() -> None:
    world = _world(ROLLED_BACK)
    workers = world.config.workers
    assert workers is not None
    assert workers.rollback is not None
    assert (workers.pauses, workers.stalls, workers.kills, workers.retires) == ((),) * 4
    result = world.run()
    assert result.violations == []
    assert result.faults["adapter_rollback"] == 1
    assert result.worker_stats["rebound"] == 2  # in flight when it came
    assert result.worker_stats["fenced"] > 0  # the previous driver's late write refused
    rebound = 0
    for node, _server, _start in world.config.nodes:
        record = world.ledger.get(node)
        assert record.state in (State.ACCEPTED, State.CANCELLED_ACCEPTED)  # accepted once
        assert record.adapter_version == ROLLBACK_TO  # rebound, or routed there when new
        history = world.ledger.history(node)
        rebinds = [
            i for i, row in enumerate(history) if row.event == "ExecutionClaimed" and not row.owner
        ]
        if rebinds:
            rebound += 1
            (at,) = rebinds
            before, rebind = history[at - 1], history[at]
            assert rebind.execution_epoch == before.execution_epoch + 1  # the epoch raised
            after = history[at + 1 :]
            assert after
            # Claimed afresh by a worker (one claim): every later owned write is its.
            owned = {(row.owner, row.execution_epoch) for row in after if row.owner}
            assert len(owned) == 1
            assert {epoch for _, epoch in owned} == {rebind.execution_epoch + 1}
    assert rebound == 2
    assert result.receipts == result.nodes
    assert result.requests == result.nodes  # one remote operation per node
    assert result.duplicates == 0
    assert result.divergence == 0
    assert result.claims_max <= 2 + 1


def test_claims_ping_pong_fails_the_claims_gate() -> None:
    """A worker that hands back what it holds at every claim round: the operations are
    claimed over and over, and the claims gate says so."""
    with applied(mutant("shed-every-round")):
        result = run_one(16202876749587)
    assert "claims per operation" in {v.check for v in result.violations}
    assert result.claims_over > 0


def test_a_takeover_before_the_lease_ran_out_fails_the_claims_gate() -> None:
    with applied(mutant("lease-ignored")):
        result = run_one(16202876749587)
    assert "claims per operation" in {v.check for v in result.violations}


def test_a_ledger_without_the_fence_is_caught() -> None:
    """Without the (owner, epoch) guard a stale worker's write is refused only by the
    version check, not by the fence: the ledger no longer judges ownership."""
    with applied(mutant("fence-removed")):
        result = run_one(127282544367544)
    assert "stale write fenced" in {v.check for v in result.violations}
    assert run_one(127282544367544).violations == []


def test_multi_worker_worlds_replay_byte_for_byte() -> None:
    first, second = run_one(PAUSED, trace=True), run_one(PAUSED, trace=True)
    assert first.trace == second.trace
