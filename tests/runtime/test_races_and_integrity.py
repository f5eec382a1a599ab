"""A lost race is re-read and re-decided; an integrity failure goes to an operator (L4, X7).

Regressions: a cancel written by another process while the engine drove the node was
lost (the next poll reply was re-applied over it and planned only another poll); a
fetched result whose digest did not match stalled the operation in FETCHING_RESULT
(taken for a lost race and retried into silence); a restart resent an idempotent
create without counting the attempt.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from longcall.adapters.base import Outcome
from longcall.core import ServerStatus, State
from longcall.core import events as e
from longcall.core.keys import canonical_json, digest_bytes
from longcall.core.machine import DEFAULT_POLICY
from longcall.core.record import ResultKind
from longcall.ledger import Ledger, SQLiteLedger
from longcall.runtime.engine import CallSpec, Engine
from longcall.runtime.step import request_cancel

from .test_engine import binding


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    """A real SQLite file ledger."""
    return SQLiteLedger(tmp_path / "l.db", synchronous="off")


def working(engine: Engine, node: str = "n") -> None:
    """Create ``node`` and acknowledge its create: it is WORKING with a poll planned."""
    engine.start_call(CallSpec(call_node_id=node, binding=binding(), arguments={}), now=0.0)
    (submit,) = engine.due(0.0)
    engine.apply_reply(submit, Outcome(event=e.SubmitAcknowledged(operation_id="op")), now=0.1)


def test_cancel_written_by_another_process_survives_a_poll_reply(ledger: Ledger) -> None:
    """The driver's poll reply loses the race to a CLI cancel: the engine re-reads the
    row and sends the cancel, instead of re-applying the poll and planning only a poll."""
    engine = Engine(ledger, rng=random.Random(1))
    working(engine)
    (poll,) = engine.due(10.0)
    # Another process (``longcall ops cancel``) writes the cancel while the poll is out.
    outcome, _ = request_cancel(ledger, ledger.get("n"), now=10.05, jitter=0.5)
    assert outcome.outcome == "requested"
    engine.apply_reply(poll, Outcome(event=e.WorkingObserved()), now=10.1)
    assert engine.stats["conflicts"] == 1
    assert ledger.get("n").state is State.CANCEL_REQUESTED
    kinds = [a.kind for a in engine.due(10.1)]
    assert "SendCancel" in kinds


def test_digest_mismatch_goes_to_reconciliation_with_its_reason(ledger: Ledger) -> None:
    """A result whose bytes do not hash to the claimed digest is an integrity failure:
    the operation is handed to an operator with the reason, never left to stall (X6, X7)."""
    engine = Engine(ledger, rng=random.Random(1))
    working(engine)
    (poll,) = engine.due(10.0)
    engine.apply_reply(
        poll, Outcome(event=e.TerminalObserved(status=ServerStatus.COMPLETED)), now=10.1
    )
    (fetch,) = engine.due(10.1)
    payload = canonical_json({"rows": [1]})
    lying = e.ResultFetched(
        status=ServerStatus.COMPLETED,
        result_kind=ResultKind.VALUE,
        result_digest=digest_bytes(b"something else"),
    )
    engine.apply_reply(fetch, Outcome(event=lying, payload=payload), now=10.2)
    record = ledger.get("n")
    assert record.state is State.RECONCILIATION_REQUIRED
    assert "DigestMismatch" in (record.reconciliation_reason or "")
    assert engine.stats["integrity_failures"] == 1
    assert ledger.receipt("n") is None


def test_restarts_count_every_resend_of_an_idempotent_create(ledger: Ledger) -> None:
    """Each restart in SUBMISSION_UNKNOWN (no lookup, idempotent tool) commits a new
    attempt before resending; past the limit an operator decides (X2, L7)."""
    spec = CallSpec(
        call_node_id="n",
        binding=binding(submission_lookup=False, idempotent=True),
        arguments={},
    )
    first = Engine(ledger, rng=random.Random(1))
    first.start_call(spec, now=0.0)
    (submit,) = first.due(0.0)
    first.apply_reply(submit, Outcome(event=e.SubmitOutcomeLost(reason="reset")), now=0.1)
    sends = 1
    for restart in range(1, 10):
        engine = Engine(ledger, rng=random.Random(restart))
        engine.resume_all(now=restart * 100.0)
        for action in engine.due(restart * 100.0 + 60.0):
            assert action.kind == "SendSubmit"
            # Counted and committed before it leaves.
            assert ledger.get("n").submit_attempts == action.command.attempt  # type: ignore[attr-defined]
            sends += 1
    assert sends <= DEFAULT_POLICY.submit_attempts_max
    assert ledger.get("n").state is State.RECONCILIATION_REQUIRED
