"""Leases with fencing and the shared poll budget, on both backends (SPEC D1, X3).

A claim takes open operations nobody live holds and raises their execution epoch; a
worker's write names its (owner, epoch) in SQL, so once another worker took the
operation over the database refuses the stale write (Fenced) — while an operator's
unowned write still goes through on the version alone.
"""

from __future__ import annotations

import itertools
import threading

import pytest

from longcall.core import ConflictError, OperationRecord, handle
from longcall.core import events as e
from longcall.ledger import Ledger
from longcall.ledger.base import CLIENT, WORKER, Fence, Fenced
from longcall.ledger.budget import SLOT_VALID_S, grant_size_max, slot_spacing_s
from longcall.runtime.step import commit

from .test_contract import PAYLOAD, fetched, fresh

LEASE_S = 10.0


def claimed(record: OperationRecord) -> OperationRecord:
    """What a claim writes: the machine's ExecutionClaimed at the next epoch."""
    event = e.ExecutionClaimed(new_epoch=record.execution_epoch + 1)
    return handle(record, event, now=record.updated_at + 1, jitter=0.5).record


def acked(record: OperationRecord) -> OperationRecord:
    return handle(
        record, e.SubmitAcknowledged(operation_id="op-1"), now=record.updated_at + 1, jitter=0.5
    ).record


def test_claim_takes_unowned_and_raises_the_epoch(twins: tuple[Ledger, Ledger]) -> None:
    """A claim holds unowned open operations at a higher epoch; a live lease keeps others off."""
    a, b = twins
    for n in range(3):
        a.create(fresh(f"node-{n}"))
    a.register_worker("w1", kind=WORKER, now=100.0, lease_s=LEASE_S)
    b.register_worker("w2", kind=WORKER, now=100.0, lease_s=LEASE_S)
    mine = [c.record for c in a.claim("w1", now=100.0, limit=2, decide=claimed)]
    assert [r.call_node_id for r in mine] == ["node-0", "node-1"]
    assert all(r.execution_epoch == 1 and r.version == 2 for r in mine)
    assert a.get("node-0") == mine[0]
    theirs = b.claim("w2", now=101.0, limit=10, decide=claimed)
    assert [(c.record.call_node_id, c.taken_from) for c in theirs] == [("node-2", None)]
    assert b.claim("w2", now=105.0, limit=10, decide=claimed) == []
    assert a.held_versions("w1") == {"node-0": 2, "node-1": 2}
    history = a.history("node-0")
    assert [(h.event, h.owner, h.execution_epoch) for h in history] == [
        ("Created", None, 0),
        ("ExecutionClaimed", "w1", 1),
    ]


def test_takeover_after_lapse_fences_the_stale_worker(twins: tuple[Ledger, Ledger]) -> None:
    """After w1's lease lapsed w2 takes over; w1's update and blob are refused, and each
    refusal is kept beside the timeline."""
    a, b = twins
    a.create(fresh())
    a.register_worker("w1", kind=WORKER, now=100.0, lease_s=LEASE_S)
    (first,) = a.claim("w1", now=100.0, limit=10, decide=claimed)
    held = first.record
    working = acked(held)
    a.update(working, expected_version=held.version, event="SubmitAcknowledged", owner="w1")
    b.register_worker("w2", kind=WORKER, now=120.0, lease_s=LEASE_S)
    (second,) = b.claim("w2", now=120.0, limit=10, decide=claimed)
    taken = second.record
    assert (taken.execution_epoch, second.taken_from) == (2, "w1")
    # The stale worker wakes up and writes what it decided before the takeover.
    history = b.history("node-1")
    stale = handle(working, e.WorkingObserved(status_message="x"), now=121.0, jitter=0.5)
    with pytest.raises(Fenced):
        commit(a, working, stale, event="WorkingObserved", owner="w1")
    with pytest.raises(Fenced):
        a.put_blob("node-1", "input:k", b"1", fence=Fence(owner="w1", execution_epoch=1))
    assert a.get("node-1") == taken
    # Each refusal is kept beside the timeline (who, at which epoch), none in it.
    assert b.history("node-1") == history
    refused = b.refused_writes("node-1")
    assert [(r.event, r.owner, r.execution_epoch, r.reason) for r in refused] == [
        ("WorkingObserved", "w1", 1, "fenced"),
        ("store input:k", "w1", 1, "fenced"),
    ]
    assert refused[0].expected_version == working.version
    assert "epoch 2" in refused[0].detail
    assert refused[0].at_utc >= history[-1].at_utc
    assert a.renew_worker("w1", now=121.0, lease_s=LEASE_S) is False
    assert a.held_versions("w1") == {}
    assert [h.owner for h in b.history("node-1")] == [None, "w1", "w1", "w2"]


def test_stale_acceptance_is_fenced(twins: tuple[Ledger, Ledger]) -> None:
    """An acceptance by a worker that lost the operation writes no receipt."""
    a, b = twins
    a.create(fresh())
    a.register_worker("w1", kind=WORKER, now=100.0, lease_s=LEASE_S)
    r = a.claim("w1", now=100.0, limit=1, decide=claimed)[0].record
    for event in (
        e.SubmitAcknowledged(operation_id="op-1"),
        e.TerminalObserved(status=e.ServerStatus.COMPLETED),
        e.ResultFetchStarted(),
    ):
        transition = handle(r, event, now=r.updated_at + 1, jitter=0.5)
        r = commit(a, r, transition, event=event.name, owner="w1")
    b.register_worker("w2", kind=WORKER, now=200.0, lease_s=LEASE_S)
    assert len(b.claim("w2", now=200.0, limit=1, decide=claimed)) == 1
    accepted, receipt = fetched(r)
    with pytest.raises(Fenced):
        a.accept_terminal(
            accepted,
            receipt,
            expected_version=r.version,
            result_payload=PAYLOAD,
            event="ResultFetched",
            owner="w1",
        )
    assert a.receipt("node-1") is None


def test_operator_write_is_a_version_race_not_a_fence(twins: tuple[Ledger, Ledger]) -> None:
    """An unowned (operator) write passes while leased; the holder then loses on the version."""
    a, b = twins
    a.create(fresh())
    a.register_worker("w1", kind=WORKER, now=100.0, lease_s=LEASE_S)
    held = a.claim("w1", now=100.0, limit=1, decide=claimed)[0].record
    working = acked(held)
    a.update(working, expected_version=held.version, event="SubmitAcknowledged", owner="w1")
    cancel = handle(working, e.CancelRequested(requested_by="cli"), now=150.0, jitter=0.5)
    commit(b, working, cancel, event="CancelRequested")
    mine = handle(working, e.WorkingObserved(status_message="x"), now=150.0, jitter=0.5)
    with pytest.raises(ConflictError) as raised:
        commit(a, working, mine, event="WorkingObserved", owner="w1")
    assert not isinstance(raised.value, Fenced)
    assert a.held_versions("w1") == {"node-1": cancel.record.version}


def test_racing_claims_take_disjoint_batches(twins: tuple[Ledger, Ledger]) -> None:
    """Two workers claiming at once never take the same operation (SKIP LOCKED / one writer)."""
    a, b = twins
    for n in range(40):
        a.create(fresh(f"node-{n:02d}"))
    a.register_worker("w1", kind=WORKER, now=100.0, lease_s=LEASE_S)
    b.register_worker("w2", kind=WORKER, now=100.0, lease_s=LEASE_S)
    barrier = threading.Barrier(2)
    results: dict[str, list[str]] = {}

    def run(ledger: Ledger, owner: str) -> None:
        barrier.wait()
        got: list[str] = []
        for _ in range(10):
            got += [
                c.record.call_node_id
                for c in ledger.claim(owner, now=100.0, limit=3, decide=claimed)
            ]
        results[owner] = got

    threads = [threading.Thread(target=run, args=pair) for pair in ((a, "w1"), (b, "w2"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not set(results["w1"]) & set(results["w2"])
    assert len(results["w1"]) + len(results["w2"]) == 40
    assert all(r.execution_epoch == 1 for r in a.list_by_state())


def test_claim_only_named_nodes_and_release(twins: tuple[Ledger, Ledger]) -> None:
    """A client claims only its own call node; a release lets a worker take it at once."""
    a, b = twins
    for n in range(3):
        a.create(fresh(f"node-{n}"))
    a.register_worker("client", kind=CLIENT, now=100.0, lease_s=LEASE_S)
    got = a.claim("client", now=100.0, limit=10, decide=claimed, nodes=["node-2"])
    assert [c.record.call_node_id for c in got] == ["node-2"]
    b.register_worker("w2", kind=WORKER, now=100.0, lease_s=LEASE_S)
    census = b.census("w2", now=100.0)
    assert (census.open_operations, census.live_workers, census.held, census.claimable) == (
        3,
        1,
        0,
        2,
    )
    assert a.release("client", ["node-2"]) == 1
    assert sorted(
        c.record.call_node_id for c in b.claim("w2", now=100.0, limit=10, decide=claimed)
    ) == [
        "node-0",
        "node-1",
        "node-2",
    ]
    assert b.get("node-2").execution_epoch == 2


def test_renewal_in_time_at_the_deadline_and_forgotten(twins: tuple[Ledger, Ledger]) -> None:
    """A lease renewed before it runs out is extended (True); one renewed at or after
    its end is extended all the same but reported lapsed (False); an owner the ledger
    forgot is not registered by a renewal (False)."""
    a, b = twins
    a.register_worker("w1", kind=WORKER, now=100.0, lease_s=LEASE_S)
    in_time = 100.0 + LEASE_S - 1.0
    assert a.renew_worker("w1", now=in_time, lease_s=LEASE_S) is True
    assert [w.lease_until for w in b.workers()] == [in_time + LEASE_S]
    at_the_end = in_time + LEASE_S
    assert a.renew_worker("w1", now=at_the_end, lease_s=LEASE_S) is False
    assert [w.lease_until for w in b.workers()] == [at_the_end + LEASE_S]
    assert a.renew_worker("w9", now=at_the_end, lease_s=LEASE_S) is False
    assert [w.owner for w in b.workers()] == ["w1"]


def test_retire_releases_and_forgets(twins: tuple[Ledger, Ledger]) -> None:
    """A clean shutdown hands every held operation back and removes the worker."""
    a, b = twins
    for n in range(2):
        a.create(fresh(f"node-{n}"))
    a.register_worker("w1", kind=WORKER, now=100.0, lease_s=LEASE_S)
    assert len(a.claim("w1", now=100.0, limit=10, decide=claimed)) == 2
    assert a.renew_worker("w1", now=105.0, lease_s=LEASE_S) is True
    assert a.retire_worker("w1") == 2
    assert [w.owner for w in b.workers()] == []
    b.register_worker("w2", kind=WORKER, now=106.0, lease_s=LEASE_S)
    assert len(b.claim("w2", now=106.0, limit=10, decide=claimed)) == 2


def test_lapsed_worker_is_forgotten_once_empty(twins: tuple[Ledger, Ledger]) -> None:
    """A dead worker's row goes once all its operations were taken over."""
    a, b = twins
    a.create(fresh())
    a.register_worker("dead", kind=WORKER, now=100.0, lease_s=LEASE_S)
    assert len(a.claim("dead", now=100.0, limit=1, decide=claimed)) == 1
    b.register_worker("w2", kind=WORKER, now=200.0, lease_s=LEASE_S)
    assert len(b.claim("w2", now=200.0, limit=5, decide=claimed)) == 1
    assert [w.owner for w in b.workers()] == ["w2"]


def test_accepted_operation_leaves_the_lease(twins: tuple[Ledger, Ledger]) -> None:
    """Acceptance ends the lease: the row is no longer open, held or claimable."""
    a, _ = twins
    a.create(fresh())
    a.register_worker("w1", kind=WORKER, now=100.0, lease_s=LEASE_S)
    r = a.claim("w1", now=100.0, limit=1, decide=claimed)[0].record
    for event in (
        e.SubmitAcknowledged(operation_id="op-1"),
        e.TerminalObserved(status=e.ServerStatus.COMPLETED),
        e.ResultFetchStarted(),
    ):
        r = commit(
            a, r, handle(r, event, now=r.updated_at + 1, jitter=0.5), event=event.name, owner="w1"
        )
    accepted, receipt = fetched(r)
    a.accept_terminal(
        accepted,
        receipt,
        expected_version=r.version,
        result_payload=PAYLOAD,
        event="ResultFetched",
        owner="w1",
    )
    assert a.held_versions("w1") == {}
    assert a.open_versions() == {}
    assert a.census("w1", now=500.0).open_operations == 0
    assert a.claim("w1", now=500.0, limit=5, decide=claimed) == []


def test_poll_slots_are_one_sequence_for_all_workers(twins: tuple[Ledger, Ledger]) -> None:
    """Grants to two workers interleave into one sequence: no window holds more than the cap."""
    a, b = twins
    qps = 10.0
    slots: list[float] = []
    now = 1000.0
    for i in range(40):
        ledger = a if i % 2 else b
        grant = ledger.take_poll_slots("http://s/mcp", now=now, count=3, qps_max=qps)
        slots += grant.slots()
        now += 0.05
    slots.sort()
    spacing = slot_spacing_s(qps)
    assert all(y - x >= spacing - 1e-9 for x, y in itertools.pairwise(slots))
    # A poll leaves up to SLOT_VALID_S after its slot: the worst case still holds the cap.
    for start in slots:
        window = [s for s in slots if start - SLOT_VALID_S < s < start + 1.0]
        assert len(window) <= qps
    other = a.take_poll_slots("http://other/mcp", now=now, count=1, qps_max=qps)
    assert other.first_at == now


def test_grant_restarts_at_now_after_a_quiet_spell(twins: tuple[Ledger, Ledger]) -> None:
    """Unused time is not saved up: after a pause the next grant starts at now (no burst)."""
    a, _ = twins
    first = a.take_poll_slots("s", now=10.0, count=2, qps_max=4.0)
    later = a.take_poll_slots("s", now=500.0, count=2, qps_max=4.0)
    assert first.first_at == 10.0
    assert later.first_at == 500.0
    # One grant covers at most GRANT_HORIZON_S of the schedule, whatever was asked for.
    assert later.count == grant_size_max(4.0) == 1


def test_census_counts_what_a_lapsed_worker_holds_as_claimable(
    twins: tuple[Ledger, Ledger],
) -> None:
    """The census at one moment: open operations, live workers (a lapsed one and a
    client are not), what the asking worker holds, and as claimable both the unowned
    rows and those of a worker whose lease lapsed — accepted rows not counted."""
    a, b = twins
    for n in range(6):
        a.create(fresh(f"node-{n}"))
    a.register_worker("w1", kind=WORKER, now=100.0, lease_s=LEASE_S)
    assert len(a.claim("w1", now=100.0, limit=3, decide=claimed)) == 3
    b.register_worker("w2", kind=WORKER, now=105.0, lease_s=LEASE_S)
    assert len(b.claim("w2", now=105.0, limit=1, decide=claimed)) == 1
    b.register_worker("c", kind=CLIENT, now=105.0, lease_s=LEASE_S)
    accepted, receipt = fetched(a.get("node-5"))
    record = a.get("node-5")
    a.accept_terminal(
        accepted, receipt, expected_version=record.version, result_payload=PAYLOAD, event="x"
    )
    before = b.census("w2", now=109.0)  # w1's lease runs to 110
    assert (before.open_operations, before.live_workers, before.held, before.claimable) == (
        5,
        2,
        1,
        1,
    )
    after = b.census("w2", now=111.0)
    assert (after.open_operations, after.live_workers, after.held, after.claimable) == (
        5,
        1,
        1,
        4,
    )


def test_end_lease_of_a_proven_dead_worker_makes_its_operations_claimable(
    twins: tuple[Ledger, Ledger],
) -> None:
    """Ending a running lease (its holder proven gone) lets a claim at the same moment
    take its operations over; the lease as read fences it: a renewed, ended or unknown
    lease is left alone."""
    a, b = twins
    a.create(fresh())
    a.register_worker("w1", kind=WORKER, now=100.0, lease_s=LEASE_S)
    a.claim("w1", now=100.0, limit=10, decide=claimed)
    b.register_worker("w2", kind=WORKER, now=101.0, lease_s=LEASE_S)
    assert b.claim("w2", now=102.0, limit=10, decide=claimed) == []
    (row,) = [w for w in b.workers() if w.owner == "w1"]
    a.renew_worker("w1", now=101.5, lease_s=LEASE_S)  # alive after all: renewed since
    assert b.end_lease("w1", lease_until=row.lease_until, now=102.0) is False
    assert b.claim("w2", now=102.0, limit=10, decide=claimed) == []
    (row,) = [w for w in b.workers() if w.owner == "w1"]
    assert b.end_lease("w1", lease_until=row.lease_until, now=102.0) is True
    assert b.end_lease("w1", lease_until=row.lease_until, now=102.0) is False
    assert b.end_lease("nobody", lease_until=row.lease_until, now=102.0) is False
    assert b.census("w2", now=102.0).live_workers == 1
    (taken,) = b.claim("w2", now=102.0, limit=10, decide=claimed)
    assert (taken.record.execution_epoch, taken.taken_from) == (2, "w1")
    assert "w1" not in {w.owner for w in b.workers()}  # it held nothing more: forgotten
