"""Two ledger connections racing on one store: exactly one write wins (SPEC L4, L5, D1)."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable

from longcall.core import ConflictError, OperationRecord, handle
from longcall.core import events as e
from longcall.core.record import evolve
from longcall.ledger import Ledger

from .test_contract import PAYLOAD, fetched, fresh, to_fetching

ROUNDS = 10


def race(*attempts: Callable[[], object]) -> list[object]:
    """Run the attempts in threads released together; each result or exception, in order."""
    barrier = threading.Barrier(len(attempts))
    outcomes: list[object] = [None] * len(attempts)

    def run(index: int, attempt: Callable[[], object]) -> None:
        barrier.wait()
        try:
            outcomes[index] = attempt()
        except Exception as exc:
            outcomes[index] = exc

    threads = [threading.Thread(target=run, args=pair) for pair in enumerate(attempts)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def test_racing_updates_one_wins(twins: tuple[Ledger, Ledger]) -> None:
    """Two connections updating one version: one commits, the other gets ConflictError."""
    a, b = twins
    for n in range(ROUNDS):
        r = a.create(fresh(f"node-{n}"))
        mine = handle(r, e.SubmitAcknowledged(operation_id="op-a"), now=11.0, jitter=0.5).record
        theirs = handle(r, e.SubmitAcknowledged(operation_id="op-b"), now=11.0, jitter=0.5).record
        outcomes = race(
            lambda mine=mine: a.update(mine, expected_version=1, event="SubmitAcknowledged"),
            lambda theirs=theirs: b.update(theirs, expected_version=1, event="SubmitAcknowledged"),
        )
        lost = [o for o in outcomes if isinstance(o, ConflictError)]
        assert len(lost) == 1, outcomes
        winner = mine if outcomes[0] is None else theirs
        assert a.get(r.call_node_id) == winner
        assert b.get(r.call_node_id) == winner
        assert [h.version for h in b.history(r.call_node_id)] == [1, 2]


def test_racing_acceptances_write_one_receipt(twins: tuple[Ledger, Ledger]) -> None:
    """Two connections accepting one operation: one receipt, one outbox row (L5, L6)."""
    a, b = twins
    for n in range(ROUNDS):
        r = to_fetching(a, f"node-{n}")
        accepted, receipt = fetched(r)

        outcomes = race(
            *(
                functools.partial(
                    ledger.accept_terminal,
                    accepted,
                    receipt,
                    expected_version=r.version,
                    result_payload=PAYLOAD,
                    event="x",
                )
                for ledger in (a, b)
            )
        )
        assert sum(isinstance(o, int) for o in outcomes) == 1, outcomes
        assert sum(isinstance(o, ConflictError) for o in outcomes) == 1, outcomes
    assert len(a.receipts()) == ROUNDS
    rows = b.outbox()
    assert len(rows) == ROUNDS
    assert len({row.call_node_id for row in rows}) == ROUNDS


def test_a_write_stores_its_operation_id_whatever_another_connection_wrote_since(
    twins: tuple[Ledger, Ledger],
) -> None:
    """A connection's next write is made from the last record it wrote. When another
    connection has stored another operation id since, a write whose id is the first
    one's still stores that id: the column (what a lookup by id reads) follows the
    record, and the write is not refused."""
    a, b = twins
    node = "node-1"

    def polled(record: OperationRecord, operation_id: str) -> OperationRecord:
        seen = e.WorkingObserved(status_message="working", progressed=True)
        return evolve(handle(record, seen, now=12.0, jitter=0.5).record, operation_id=operation_id)

    created = a.create(fresh(node))
    acked = handle(created, e.SubmitAcknowledged(operation_id="op-a"), now=11.0, jitter=0.5)
    a.update(acked.record, expected_version=1, event="SubmitAcknowledged")
    b.update(polled(b.get(node), "op-b"), expected_version=2, event="WorkingObserved")
    assert [r.call_node_id for r in a.find_by_operation_id("op-b")] == [node]
    a.update(polled(a.get(node), "op-a"), expected_version=3, event="WorkingObserved")
    assert b.get(node).operation_id == "op-a"
    assert [r.call_node_id for r in b.find_by_operation_id("op-a")] == [node]
    assert b.find_by_operation_id("op-b") == []
