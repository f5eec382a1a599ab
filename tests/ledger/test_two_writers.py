"""Two ledger connections racing on one store: exactly one write wins (SPEC L4, L5, D1)."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable

from longcall.core import ConflictError, handle
from longcall.core import events as e
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
