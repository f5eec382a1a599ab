"""Regressions for the bugs the simulator found in core and runtime (one test each).

Each drives the real Engine, core and SQLite ledger by hand, in virtual time.
"""

from __future__ import annotations

import random

import pytest

from longcall.adapters.base import Outcome, ToolBinding
from longcall.core import ServerStatus, State
from longcall.core import commands as c
from longcall.core import events as e
from longcall.core.retry import FailureKind, RequestKind
from longcall.ledger import SQLiteLedger
from longcall.runtime.engine import Action, CallSpec, Engine
from longcall.runtime.leases import LeasePolicy
from longcall.runtime.step import apply_event
from longcall.sim import run_one
from longcall.sim.config import GENTLE, HARSH
from longcall.sim.truth import Task


def _binding(*, lookup: bool = False, idempotent: bool = False) -> ToolBinding:
    return ToolBinding(
        server="sim://s",
        tool_name="work",
        protocol="test",
        adapter_version="1",
        descriptor_digest="sha256:d",
        task_support="required",
        idempotent=idempotent,
        submission_lookup=lookup,
    )


def _engine() -> Engine:
    return Engine(SQLiteLedger(":memory:"), rng=random.Random(1), poll_qps_max=100.0)


def _start(engine: Engine, node: str, *, now: float = 0.0, **kw: bool) -> Action:
    engine.start_call(CallSpec(call_node_id=node, binding=_binding(**kw), arguments={}), now=now)
    (action,) = [a for a in engine.due(now) if a.call_node_id == node]
    return action


def _ack(op: str, *, interval_s: float = 5.0, ttl_s: float | None = None) -> Outcome:
    return Outcome(
        event=e.SubmitAcknowledged(operation_id=op, poll_interval_s=interval_s, ttl_s=ttl_s)
    )


def test_a_reused_operation_id_sends_both_holders_to_reconciliation() -> None:
    """F1 id reuse: a second call node handed a held id is never polled or accepted."""
    engine = _engine()
    engine.apply_reply(_start(engine, "a"), _ack("t1"), now=0.1)
    record = engine.apply_reply(_start(engine, "b", now=1.0), _ack("t1"), now=1.1)
    assert record is not None
    assert record.state is State.RECONCILIATION_REQUIRED
    assert engine.ledger.get("a").state is State.RECONCILIATION_REQUIRED
    assert "more than one call node" in (record.reconciliation_reason or "")
    assert engine.next_wakeup() is None


def test_an_operators_never_created_is_resubmitted_not_escalated_again() -> None:
    """X2: after an operator proves absence, refresh resends the create (same key)."""
    engine = _engine()
    action = _start(engine, "a")
    lost = Outcome(event=e.SubmitOutcomeLost(reason="timeout"))
    record = engine.apply_reply(action, lost, now=15.0)
    assert record is not None
    assert record.state is State.RECONCILIATION_REQUIRED
    resolution = e.ReconciledManually(
        resolution=e.Resolution.NEVER_CREATED, actor="op", note="server has no such task"
    )
    apply_event(engine.ledger, record, resolution, now=20.0, jitter=0.5)
    engine.refresh(now=20.0)
    (resend,) = engine.due(20.0)
    assert isinstance(resend.command, c.SendSubmit)
    assert resend.command.submission_key == record.submission_key
    assert engine.ledger.get("a").state is State.NOT_FOUND_SAFE


def test_a_refused_cancel_reads_the_terminal_one_interval_later() -> None:
    """X3/X5: the poll after -32602 keeps the server's interval as its floor."""
    engine = _engine()
    engine.apply_reply(_start(engine, "a"), _ack("t1", interval_s=5.0), now=0.1)
    engine.cancel("a", now=1.0)
    (cancel,) = engine.due(1.0)
    engine.apply_reply(cancel, Outcome(event=e.CancelRefused(reason="-32602")), now=1.2)
    wake = engine.next_wakeup()
    assert wake is not None
    assert wake >= 1.2 + 5.0


def test_the_expiry_cap_never_pulls_a_poll_under_the_interval() -> None:
    """X3: near the expiry the last poll still waits the server's interval."""
    engine = _engine()
    engine.apply_reply(_start(engine, "a"), _ack("t1", interval_s=5.0, ttl_s=7.0), now=0.0)
    (poll,) = engine.due(6.0)
    engine.apply_reply(poll, Outcome(event=e.WorkingObserved(poll_interval_s=5.0)), now=6.0)
    wake = engine.next_wakeup()
    assert wake is not None
    assert wake >= 6.0 + 5.0


def test_an_input_request_carries_the_poll_interval() -> None:
    """X3: an operation whose first status is input_required learns the interval too."""
    engine = _engine()
    engine.apply_reply(
        _start(engine, "a", lookup=True), Outcome(event=e.SubmitOutcomeLost(reason="x")), now=0.1
    )
    (lookup,) = engine.due(0.1)
    engine.apply_reply(lookup, Outcome(event=e.SubmissionFound(operation_id="t1")), now=0.2)
    (poll,) = engine.due(10.0)
    observed = e.InputRequestObserved(keys=("k",), poll_interval_s=7.0)
    record = engine.apply_reply(poll, Outcome(event=observed), now=10.0)
    assert record is not None
    assert record.poll_interval_s == 7.0


def test_answers_are_delivered_again_while_the_server_still_asks() -> None:
    """X4: a lost answer delivery is repeated when the server keeps asking for the key."""
    engine = Engine(
        SQLiteLedger(":memory:"),
        rng=random.Random(1),
        poll_qps_max=100.0,
        input_policy=lambda record, ask: dict.fromkeys(ask.keys, True),
    )
    engine.apply_reply(_start(engine, "a"), _ack("t1", interval_s=2.0), now=0.1)
    (poll,) = engine.due(5.0)
    asks = e.InputRequestObserved(keys=("k",), poll_interval_s=2.0)
    engine.apply_reply(poll, Outcome(event=asks), now=5.0)
    (delivery,) = [a for a in engine.due(5.0) if a.kind == "SendInputResponse"]
    engine.end_without_reply(delivery)  # acknowledged by the network, never reached the server
    (poll,) = engine.due(10.0)
    engine.apply_reply(poll, Outcome(event=asks), now=10.0)
    answered = [
        a.command.keys for a in engine.due(10.0) if isinstance(a.command, c.SendInputResponse)
    ]
    assert answered == [("k",)]


def test_a_command_due_while_its_kind_is_in_flight_is_not_lost() -> None:
    """A second cancel's request, due while the first is in flight, goes out after it."""
    engine = _engine()
    engine.apply_reply(_start(engine, "a"), _ack("t1"), now=0.1)
    engine.cancel("a", now=1.0)
    (first,) = engine.due(1.0)
    engine.cancel("a", now=2.0)
    assert engine.due(2.0) == []  # the first cancel is still in flight
    stale = Outcome(event=e.CancelAcknowledged(cancel_generation=1))
    engine.apply_reply(first, stale, now=3.0)  # stale now: generation 2 is current
    (second,) = engine.due(3.0)
    assert isinstance(second.command, c.SendCancel)
    assert second.command.cancel_generation == 2


def test_no_stray_poll_once_the_terminal_is_observed() -> None:
    """X3/X6: a poll planned before the terminal was observed is dropped, not sent."""
    engine = _engine()
    engine.apply_reply(_start(engine, "a"), _ack("t1", interval_s=5.0), now=0.1)
    (poll,) = engine.due(6.0)
    engine.cancel("a", now=6.0)
    (cancel,) = engine.due(6.0)
    engine.apply_reply(cancel, Outcome(event=e.CancelRefused(reason="-32602")), now=6.1)
    completed = Outcome(event=e.TerminalObserved(status=ServerStatus.COMPLETED))
    engine.apply_reply(poll, completed, now=6.2)
    kinds = [a.kind for a in engine.due(60.0)]
    assert kinds == ["FetchResult"]


def test_a_wait_budget_never_pulls_a_poll_before_the_retry_after() -> None:
    """X3 rule 4 before rule 5: near the budget, the last poll still waits out the
    server's Retry-After (found by the simulator's Retry-After gate)."""
    engine = _engine()
    spec = CallSpec(call_node_id="a", binding=_binding(), arguments={}, budget_s=20.0)
    engine.start_call(spec, now=0.0)
    (submit,) = engine.due(0.0)
    engine.apply_reply(submit, _ack("t1", interval_s=2.0), now=0.1)
    (poll,) = engine.due(18.0)
    limited = e.RequestFailed(
        request=RequestKind.POLL, failure=FailureKind.RATE_LIMITED, retry_after_s=8.0
    )
    engine.apply_reply(poll, Outcome(event=limited), now=18.1)
    wake = engine.next_wakeup()
    assert wake is not None
    assert wake >= 18.1 + 8.0


def test_a_retry_after_holds_every_poll_of_that_server() -> None:
    """X3: a 429's Retry-After holds the server's other polls too, whichever request
    met it (a cancel ack re-planned a poll before the wait was over)."""
    engine = _engine()
    engine.apply_reply(_start(engine, "a"), _ack("t1", interval_s=2.0), now=0.1)
    engine.apply_reply(_start(engine, "b", now=0.2), _ack("t2", interval_s=2.0), now=0.3)
    # (the token bucket spaces the two polls out by 10 ms)
    first, second = [a for t in (5.0, 5.02) for a in engine.due(t) if a.kind == "Poll"]
    limited = e.RequestFailed(
        request=RequestKind.POLL, failure=FailureKind.RATE_LIMITED, retry_after_s=9.0
    )
    engine.apply_reply(first, Outcome(event=limited), now=5.1)
    engine.apply_reply(second, Outcome(event=e.WorkingObserved(poll_interval_s=2.0)), now=5.2)
    assert [a for a in engine.due(14.0) if a.kind == "Poll"] == []
    released = [a for t in (14.1, 14.2) for a in engine.due(t) if a.kind == "Poll"]
    assert sorted(a.call_node_id for a in released) == ["a", "b"]


def test_a_retry_after_holds_every_request_of_that_server() -> None:
    """X3, X9: the wait holds the server's creates, cancels and input answers too, not
    only its polls."""
    engine = _engine()
    engine.apply_reply(_start(engine, "a"), _ack("t1", interval_s=2.0), now=0.1)
    (poll,) = engine.due(5.0)
    limited = e.RequestFailed(
        request=RequestKind.POLL, failure=FailureKind.RATE_LIMITED, retry_after_s=9.0
    )
    engine.apply_reply(poll, Outcome(event=limited), now=5.1)
    engine.start_call(CallSpec(call_node_id="b", binding=_binding(), arguments={}), now=6.0)
    assert engine.due(14.0) == []
    assert [a.kind for a in engine.due(14.1) if a.call_node_id == "b"] == ["SendSubmit"]


def test_a_request_issued_before_a_retry_after_arrived_is_held_at_its_send() -> None:
    """X3, X9: due() issued b's poll; before the driver's adapter call (the event loop
    ran a's reply meanwhile) a 429 with Retry-After reached the process. The poll left
    anyway, 0.02 s after the 429 (found by the simulator's worlds of workers, whose loop
    lags: seeds 137608456191015, 260780867349910, 91976830195074 of harsh). At the send
    the driver asks :meth:`Engine.held`: the request stays, and goes when the wait is over."""
    engine = _engine()
    engine.apply_reply(_start(engine, "a"), _ack("t1", interval_s=2.0), now=0.1)
    engine.apply_reply(_start(engine, "b", now=0.2), _ack("t2", interval_s=2.0), now=0.3)
    first, second = [a for t in (5.0, 5.02) for a in engine.due(t) if a.kind == "Poll"]
    assert not engine.held(first, now=5.0)
    limited = e.RequestFailed(
        request=RequestKind.POLL, failure=FailureKind.RATE_LIMITED, retry_after_s=5.0
    )
    engine.apply_reply(first, Outcome(event=limited), now=5.1)
    assert engine.held(second, now=5.12)
    assert [a for a in engine.due(10.0) if a.call_node_id == "b"] == []
    # (the token bucket spaces it 10 ms after a's retried poll)
    (released,) = [a for t in (10.15, 10.2) for a in engine.due(t) if a.call_node_id == "b"]
    assert released.kind == "Poll"
    assert not engine.held(released, now=10.15)


def test_a_create_held_at_its_send_is_not_an_unknown_outcome() -> None:
    """A create the driver never sent (held by a Retry-After) is sent again as it was,
    not looked up as one whose outcome is unknown (X2)."""
    engine = _engine()
    engine.apply_reply(_start(engine, "a"), _ack("t1", interval_s=2.0), now=0.1)
    (poll,) = engine.due(5.0)
    engine.start_call(CallSpec(call_node_id="b", binding=_binding(), arguments={}), now=5.0)
    (create,) = [a for a in engine.due(5.0) if a.call_node_id == "b"]
    limited = e.RequestFailed(
        request=RequestKind.POLL, failure=FailureKind.UNAVAILABLE, retry_after_s=3.0
    )
    engine.apply_reply(poll, Outcome(event=limited), now=5.1)
    assert engine.held(create, now=5.1)
    assert engine.records["b"].state is State.SUBMITTING
    assert [a.kind for a in engine.due(8.1) if a.call_node_id == "b"] == ["SendSubmit"]


RETRY_AFTER_DURING_LAG = 91976830195074
"""A permutation of the harsh profile at 10,000: three lease-mode workers; w0's poll of
n0 is issued, and a 503 with ``Retry-After: 1`` reaches w0 before the poll's adapter
call (the loop's lag)."""


def test_a_poll_issued_before_a_retry_after_waits_it_out_in_a_world() -> None:
    result = run_one(RETRY_AFTER_DURING_LAG, trace=True, profile=HARSH)
    assert result.violations == []
    assert result.trace is not None
    assert any("held Poll n0 (Retry-After)" in line for line in result.trace)


# --- found by the worlds of several workers on one ledger (D1) ---------------------------


def _worker(ledger: SQLiteLedger, owner: str, *, now: float = 0.0) -> Engine:
    engine = Engine(
        ledger,
        rng=random.Random(1),
        poll_qps_max=2.0,
        owner=owner,
        lease=LeasePolicy.of(6.0),
    )
    engine.external_heartbeat = True
    engine.resume_all(now=now)
    return engine


def test_a_lapsing_lease_plans_no_wakeup_in_the_past() -> None:
    """Past the send margin nothing is due; next_wakeup used to name the past moment of
    the planned request, so a driver woke for nothing, for ever. It names none until a
    renewal, and the request goes after it."""
    engine = _worker(SQLiteLedger(":memory:"), "w0")
    engine.start_call(CallSpec(call_node_id="a", binding=_binding(), arguments={}), now=0.0)
    late = 5.5  # the lease (6 s) has less than its send margin (1 s) left
    assert engine.due(late) == []
    assert engine.next_wakeup() is None
    engine.heartbeat(late)
    assert engine.next_wakeup() is not None
    assert [a.kind for a in engine.due(late)] == ["SendSubmit"]


def test_a_cancel_through_a_worker_that_lost_the_operation_is_written_not_raised() -> None:
    """A worker whose lease lapsed still holds the operation in memory; a caller's cancel
    through it used to end in Fenced. It lets the operation go and writes the cancel by
    version alone, for the worker that holds it now to send."""
    ledger = SQLiteLedger(":memory:")
    first = _worker(ledger, "w0")
    first.apply_reply(_start(first, "a"), _ack("t1"), now=0.1)
    second = _worker(ledger, "w1", now=7.0)
    second.housekeep(now=8.0)  # w0's lease ran out at 6 s: w1 claims "a"
    assert "a" in second.records
    outcome = first.cancel("a", now=8.5)
    assert outcome.outcome == "requested"
    assert "a" not in first.records
    assert first.stats["fenced"] == 1
    second.housekeep(now=9.5)  # the re-read finds the cancel and plans its request
    assert "SendCancel" in [a.kind for a in second.due(9.5)]


EXPIRED_AFTER_TERMINAL = 235574786770139
"""A permutation of the CI corpus: a 2025-11-25 task expires between its terminal status
and the fetch of its result."""


def test_a_task_expired_before_its_result_was_fetched_goes_to_reconciliation() -> None:
    """``tasks/result`` answered -32602 for a task ``tasks/get`` cannot find either: not
    the task's own error (once accepted as its outcome, diverging from the server's
    truth), but a task gone with its result, for an operator (adapters/mcp/legacy.py)."""
    result = run_one(EXPIRED_AFTER_TERMINAL, trace=True)
    assert result.violations == []
    assert result.divergence == 0
    assert result.trace is not None
    fetched = [line for line in result.trace if "FetchResult" in line]
    assert any('"code":-32602' in line for line in fetched), fetched
    assert any(line.rstrip().endswith("OperationNotFound") for line in fetched), fetched


SIDE_CHANNEL_HELD = 159810944167279
"""A permutation of the gentle profile: a 2025-11-25 task asks for input and the
executor watches its ``tasks/result`` side channel until the watch ends."""


def test_a_watched_side_channel_ends_when_its_watch_does() -> None:
    """The simulated server held the watch to ``since + wait_s`` but tested
    ``now - since >= wait_s``, false at that instant by rounding: it held to the present
    for ever and the run hung (sim/mcp.py; the same expression on both sides now)."""
    result = run_one(SIDE_CHANNEL_HELD, profile=GENTLE)
    assert result.violations == []


def test_a_world_whose_time_stands_still_fails_instead_of_hanging(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A wake-up that names the present for ever is a finding with its seed, not a run
    that never ends."""
    monkeypatch.setattr(Task, "next_change", lambda self, now: now)
    result = run_one(SIDE_CHANNEL_HELD, profile=GENTLE)
    assert "time stands still" in {v.check for v in result.violations}


@pytest.mark.parametrize(
    "seed",
    [
        59624519868143,  # the driver claims back what a rollback let go (corpus seed 0)
        235032333352551,  # the same, corpus seed 0
        89799891736373,  # the interval was in the reply whose write was fenced (seed 1)
    ],
)
def test_a_worker_that_claims_back_an_operation_keeps_the_servers_interval(seed: int) -> None:
    """Finding 16: after a rollback (R3) rebinds and lets go an operation mid-flight, the
    worker that drove it often claims it back at once; it re-planned from the stored
    record and polled sooner than the server had told it after its own last poll."""
    result = run_one(seed)
    assert result.faults["adapter_rollback"] == 1
    assert result.violations == []


INTERVAL_LOST_WITH_THE_SIDE_CHANNEL = 240426977556928
"""Permutation of ``longcall sim --permutations 2000 --seed 90210`` (default profile): a
2025-11-25 status read answers ``input_required`` with a longer interval (6.663 s, the
working one was 2.539 s), and the ``tasks/result`` side channel read right after it is
refused (HTTP 400, -32700)."""


def test_a_read_retried_after_its_side_channel_failed_keeps_the_interval_it_was_told() -> None:
    """The failed exchange dropped the interval its status read had told, so the retry
    left 3.226 s after that read: the failure reports it now, and the retry honours it."""
    result = run_one(INTERVAL_LOST_WITH_THE_SIDE_CHANNEL, trace=True)
    assert result.faults["request_refused_unread"] > 0
    assert result.polls.interval_judged > 0
    assert result.violations == []
