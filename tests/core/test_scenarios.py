"""Readable example-based walks through the machine's main paths, with the exact
commands each step returns (SPEC X2–X9, L5).
"""

from __future__ import annotations

import copy

import pytest

from longcall.core import commands as c
from longcall.core import events as e
from longcall.core.machine import (
    DEFAULT_POLICY,
    EMPTY_RESULT_WARNING,
    LATE_COMPLETION_WARNING,
    handle,
    next_deadline,
    recovery_event,
    resume,
)
from longcall.core.record import ResultKind, ServerStatus, TerminalReceipt
from longcall.core.retry import FailureKind, RequestKind
from longcall.core.states import State
from longcall.errors import StaleEpoch, StaleEvent

from .builders import (
    CANCEL_DIGEST,
    OP_ID,
    RESULT_DIGEST,
    T0,
    new_record,
    record_in,
    step,
    working_record,
)

DONE = e.TerminalObserved(status=ServerStatus.COMPLETED)


def test_happy_path_with_input_ends_in_one_receipt() -> None:
    """Submit → ack → polls → input → working → terminal → fetch → AcceptTerminal."""
    r = new_record()
    assert r.state is State.SUBMITTING
    t = handle(
        r, e.SubmitAcknowledged(operation_id=OP_ID, poll_interval_s=5.0), now=T0 + 1, jitter=0.0
    )
    assert t.record.state is State.WORKING
    assert t.commands == (c.Poll(operation_id=OP_ID, at=T0 + 6),)
    r = t.record
    for i, jitter in enumerate((0.0, 0.5, 1.0)):
        now = T0 + 10 + i * 10
        t = handle(r, e.WorkingObserved(), now=now, jitter=jitter)
        (poll,) = t.commands
        assert isinstance(poll, c.Poll)
        # X3: the server's interval is the floor, jitter at most 20% above it.
        assert now + 5.0 <= poll.at <= now + 5.0 * 1.2
        assert t.record.poll_count == i + 1
        r = t.record

    t = handle(
        r,
        e.InputRequestObserved(
            keys=("approve", "budget"), schema_digest="sha256:s", deadline_at=T0 + 500
        ),
        now=T0 + 50,
        jitter=0.5,
    )
    r = t.record
    assert r.state is State.INPUT_REQUIRED
    assert t.commands == (
        c.AskInput(
            operation_id=OP_ID,
            input_round=1,
            keys=("approve", "budget"),
            schema_digest="sha256:s",
            deadline_at=T0 + 500,
        ),
    )
    # X4: automatic polling pauses while the gate decides.
    assert r.next_poll_at is None
    assert next_deadline(r) == T0 + 500

    # F1 "input_required replayed": the same request again is stale.
    with pytest.raises(StaleEvent):
        handle(r, e.InputRequestObserved(keys=("budget", "approve")), now=T0 + 51, jitter=0.5)
    # A partial answer sends those keys and keeps waiting for the rest.
    t = handle(r, e.InputAnswered(input_round=1, keys=("approve",)), now=T0 + 60, jitter=0.5)
    assert t.commands == (
        c.SendInputResponse(operation_id=OP_ID, input_round=1, keys=("approve",), at=T0 + 60),
    )
    r = t.record
    assert r.input_keys_pending == ("budget",)
    assert r.input_keys_answered == ("approve",)
    # An answer for another round, or for an answered key, is stale.
    with pytest.raises(StaleEvent):
        handle(r, e.InputAnswered(input_round=0, keys=("budget",)), now=T0 + 61, jitter=0.5)
    with pytest.raises(StaleEvent):
        handle(r, e.InputAnswered(input_round=1, keys=("approve",)), now=T0 + 61, jitter=0.5)
    t = handle(r, e.InputAnswered(input_round=1, keys=("budget",)), now=T0 + 70, jitter=0.0)
    assert t.commands == (
        c.SendInputResponse(operation_id=OP_ID, input_round=1, keys=("budget",), at=T0 + 70),
        c.Poll(operation_id=OP_ID, at=T0 + 75),
    )
    r = t.record
    t = handle(r, e.WorkingObserved(), now=T0 + 80, jitter=0.0)
    r = t.record
    assert r.state is State.WORKING

    t = handle(r, DONE, now=T0 + 90, jitter=0.0)
    assert t.record.state is State.TERMINAL_OBSERVED
    assert t.commands == (c.StartResultFetch(operation_id=OP_ID),)
    t = handle(t.record, e.ResultFetchStarted(), now=T0 + 91, jitter=0.0)
    assert t.record.state is State.FETCHING_RESULT
    assert t.commands == (c.FetchResult(operation_id=OP_ID, at=T0 + 91),)
    t = handle(
        t.record,
        e.ResultFetched(
            status=ServerStatus.COMPLETED, result_kind=ResultKind.VALUE, result_digest=RESULT_DIGEST
        ),
        now=T0 + 92,
        jitter=0.0,
    )
    r = t.record
    assert r.state is State.ACCEPTED
    (accept,) = t.commands
    assert isinstance(accept, c.AcceptTerminal)
    receipt = accept.receipt
    assert receipt == TerminalReceipt.for_record(r)
    # L5: the eight matched fields.
    assert (
        receipt.call_node_id,
        receipt.request_digest,
        receipt.operation_id,
        receipt.tool_descriptor_digest,
        receipt.execution_epoch,
        receipt.cancel_generation,
        receipt.terminal_status,
        receipt.result_digest,
    ) == (
        r.call_node_id,
        r.request_digest,
        OP_ID,
        r.tool_descriptor_digest,
        0,
        0,
        ServerStatus.COMPLETED,
        RESULT_DIGEST,
    )
    assert receipt.result_kind is ResultKind.VALUE
    assert receipt.accepted_at == T0 + 92
    assert next_deadline(r) is None


def test_refused_answer_reopens_its_keys_in_a_new_round() -> None:
    """A server refusing an answer voids it: the key is asked again in a new round, polling
    stays paused, and the refusal's replay (or an answer for the old round) is stale (X4)."""
    r = step(working_record(), e.InputRequestObserved(keys=("approve",))).record
    r = step(r, e.InputAnswered(input_round=1, keys=("approve",))).record
    assert (r.input_keys_pending, r.input_keys_answered) == ((), ("approve",))
    t = step(r, e.InputRefused(input_round=1, keys=("approve",), reason="not an object"))
    r = t.record
    assert r.state is State.INPUT_REQUIRED
    assert (r.input_round, r.input_keys_pending, r.input_keys_answered) == (2, ("approve",), ())
    assert r.last_error == "the server refused the answer: not an object"
    assert [type(cmd) for cmd in t.commands] == [c.AskInput]
    assert r.next_poll_at is None
    with pytest.raises(StaleEvent):
        step(r, e.InputRefused(input_round=1, keys=("approve",)))
    with pytest.raises(StaleEvent):
        step(r, e.InputAnswered(input_round=1, keys=("approve",)))
    t = step(r, e.InputAnswered(input_round=2, keys=("approve",)))
    assert (
        c.SendInputResponse(
            operation_id=OP_ID, input_round=2, keys=("approve",), at=t.record.updated_at
        )
        in t.commands
    )


def test_empty_result_is_a_warning_outcome() -> None:
    """X6: a completed result with zero items is accepted with an empty_result warning."""
    r = record_in(State.FETCHING_RESULT)
    t = handle(
        r,
        e.ResultFetched(
            status=ServerStatus.COMPLETED,
            result_kind=ResultKind.VALUE,
            result_digest=RESULT_DIGEST,
            empty=True,
        ),
        now=T0 + 100,
        jitter=0.0,
    )
    (accept,) = t.commands
    assert isinstance(accept, c.AcceptTerminal)
    assert accept.receipt.warnings == (EMPTY_RESULT_WARNING,)


def test_fetched_result_contradicting_the_observed_terminal_escalates() -> None:
    """X6: a failed result after a completed status is never accepted."""
    r = record_in(State.FETCHING_RESULT)
    t = handle(
        r,
        e.ResultFetched(
            status=ServerStatus.FAILED,
            result_kind=ResultKind.TOOL_ERROR,
            result_digest=RESULT_DIGEST,
        ),
        now=T0 + 100,
        jitter=0.0,
    )
    assert t.record.state is State.RECONCILIATION_REQUIRED
    assert [type(x) for x in t.commands] == [c.EscalateReconciliation]


def test_lost_submit_with_lookup_looks_up_the_key() -> None:
    """X2: with lookup by key, a lost create response leads to LookupSubmission."""
    r = new_record(submission_lookup=True)
    t = handle(r, e.SubmitOutcomeLost(reason="reset"), now=T0 + 1, jitter=0.5)
    assert t.record.state is State.SUBMISSION_UNKNOWN
    assert t.commands == (c.LookupSubmission(submission_key=r.submission_key, at=T0 + 1),)
    found = handle(
        t.record, e.SubmissionFound(operation_id=OP_ID, poll_interval_s=3.0), now=T0 + 2, jitter=0.0
    )
    assert found.record.state is State.WORKING
    assert found.commands == (c.Poll(operation_id=OP_ID, at=T0 + 5),)


def test_lost_submit_of_idempotent_tool_resends_the_same_key() -> None:
    """X2: without lookup, an idempotent tool is sent again with the SAME key."""
    r = new_record(submission_lookup=False, tool_idempotent=True)
    t = handle(r, e.SubmitOutcomeLost(reason="reset"), now=T0 + 1, jitter=0.0)
    assert t.record.state is State.SUBMISSION_UNKNOWN
    assert t.commands == (c.SendSubmit(submission_key=r.submission_key, attempt=2, at=T0 + 1),)
    assert t.record.submission_key == r.submission_key


def test_lost_submit_without_lookup_or_idempotency_needs_an_operator() -> None:
    """X2: no lookup and no idempotency → RECONCILIATION_REQUIRED with a clear reason."""
    r = new_record(submission_lookup=False, tool_idempotent=False)
    t = handle(r, e.SubmitOutcomeLost(reason="reset"), now=T0 + 1, jitter=0.0)
    assert t.record.state is State.RECONCILIATION_REQUIRED
    (escalate,) = t.commands
    assert isinstance(escalate, c.EscalateReconciliation)
    assert "not declared idempotent" in escalate.reason
    assert t.record.reconciliation_reason == escalate.reason


def test_never_created_allows_a_resubmit_with_the_same_key() -> None:
    """X2: proof by key → NOT_FOUND_SAFE and SendSubmit with the same key."""
    r = record_in(State.SUBMISSION_UNKNOWN)
    t = handle(r, e.SubmissionNeverCreated(), now=T0 + 10, jitter=0.0)
    assert t.record.state is State.NOT_FOUND_SAFE
    assert t.commands == (c.SendSubmit(submission_key=r.submission_key, attempt=2, at=T0 + 10),)


def test_cancel_ack_keeps_polling_then_cancellation_is_accepted() -> None:
    """X5: the cancel ack is only a request; the observed cancellation is the terminal."""
    r = working_record()
    t = handle(r, e.CancelRequested(), now=T0 + 10, jitter=0.0)
    assert t.record.state is State.CANCEL_REQUESTED
    assert t.record.cancel_generation == 1
    assert t.commands == (c.SendCancel(operation_id=OP_ID, cancel_generation=1, at=T0 + 10),)
    t = handle(t.record, e.CancelAcknowledged(cancel_generation=1), now=T0 + 11, jitter=0.0)
    assert t.record.state is State.CANCEL_REQUESTED
    assert t.commands == (c.Poll(operation_id=OP_ID, at=T0 + 16),)
    t = handle(
        t.record, e.CancellationObserved(result_digest=CANCEL_DIGEST), now=T0 + 16, jitter=0.0
    )
    assert t.record.state is State.CANCELLED_ACCEPTED
    (accept,) = t.commands
    assert isinstance(accept, c.AcceptTerminal)
    assert accept.receipt.terminal_status is ServerStatus.CANCELLED
    assert accept.receipt.result_kind is ResultKind.CANCELLED
    assert accept.receipt.cancel_generation == 1


def test_cancel_ack_confirms_at_the_server_interval_whatever_the_sends_cost() -> None:
    """X3 rule 3, X5: failed cancel sends build up backoff; the ack is progress, so the
    polls that confirm the cancel start again from the server's interval (a harsh
    network once stretched them to a minute each)."""
    t = handle(working_record(), e.CancelRequested(), now=T0 + 10, jitter=0.0)
    now = T0 + 10
    for _ in range(4):
        now += 15
        failed = e.RequestFailed(request=RequestKind.CANCEL, failure=FailureKind.TIMEOUT)
        t = handle(t.record, failed, now=now, jitter=1.0)
    assert t.record.backoff_step == 4
    t = handle(t.record, e.CancelAcknowledged(cancel_generation=1), now=now, jitter=1.0)
    assert t.record.backoff_step == 0
    (poll,) = t.commands
    assert isinstance(poll, c.Poll)
    interval = t.record.poll_interval_s or 0.0
    assert interval < poll.at - now <= interval * 1.2 + 1e-9


def test_completion_racing_cancel_is_accepted_as_completed() -> None:
    """X5: a completion observed while the cancel is pending is the real terminal."""
    r = record_in(State.CANCEL_REQUESTED)
    t = handle(r, DONE, now=T0 + 20, jitter=0.0)
    assert t.record.state is State.TERMINAL_OBSERVED
    t = handle(t.record, e.ResultFetchStarted(), now=T0 + 21, jitter=0.0)
    t = handle(
        t.record,
        e.ResultFetched(
            status=ServerStatus.COMPLETED, result_kind=ResultKind.VALUE, result_digest=RESULT_DIGEST
        ),
        now=T0 + 22,
        jitter=0.0,
    )
    assert t.record.state is State.ACCEPTED
    (accept,) = t.commands
    assert isinstance(accept, c.AcceptTerminal)
    assert accept.receipt.terminal_status is ServerStatus.COMPLETED
    assert accept.receipt.cancel_generation == 1


def test_late_completion_after_won_cancel_never_accepts() -> None:
    """X5: after CANCELLED_ACCEPTED a completion marks effect reconciliation, no receipt."""
    r = record_in(State.CANCELLED_ACCEPTED)
    t = handle(r, DONE, now=T0 + 30, jitter=0.0)
    assert t.record.state is State.CANCELLED_ACCEPTED
    assert t.record.effect_reconciliation_required
    assert LATE_COMPLETION_WARNING in t.record.warnings
    (escalate,) = t.commands
    assert isinstance(escalate, c.EscalateReconciliation)
    assert escalate.reason.startswith("EFFECT_RECONCILIATION_REQUIRED")
    with pytest.raises(StaleEvent):
        handle(t.record, DONE, now=T0 + 31, jitter=0.0)


def test_second_cancel_bumps_the_generation_and_old_ack_is_stale() -> None:
    """X5: a second cancel sends generation 2; an ack for generation 1 is stale."""
    r = record_in(State.CANCEL_REQUESTED)
    t = handle(r, e.CancelRequested(), now=T0 + 40, jitter=0.0)
    assert t.record.cancel_generation == 2
    assert t.commands == (c.SendCancel(operation_id=OP_ID, cancel_generation=2, at=T0 + 40),)
    with pytest.raises(StaleEvent):
        handle(t.record, e.CancelAcknowledged(cancel_generation=1), now=T0 + 41, jitter=0.0)


def test_cancel_refused_reads_the_existing_terminal() -> None:
    """X5: a refused cancel (already terminal) polls for that terminal one interval later."""
    r = record_in(State.CANCEL_REQUESTED)
    t = handle(r, e.CancelRefused(reason="-32602 already completed"), now=T0 + 50, jitter=0.0)
    assert t.record.state is State.CANCEL_REQUESTED
    assert r.poll_interval_s is not None
    assert t.commands == (c.Poll(operation_id=OP_ID, at=T0 + 50 + r.poll_interval_s),)


def test_retryable_poll_failure_backs_off_and_honours_retry_after() -> None:
    """X3/X9: a 429 poll retries later, not before Retry-After."""
    r = working_record()
    failed = e.RequestFailed(
        request=RequestKind.POLL, failure=FailureKind.RATE_LIMITED, retry_after_s=120.0
    )
    t = handle(r, failed, now=T0 + 10, jitter=0.0)
    assert t.record.state is State.WORKING
    assert t.record.backoff_step == 1
    assert t.commands == (c.Poll(operation_id=OP_ID, at=T0 + 130),)


@pytest.mark.parametrize("jitter", [0.0, 0.5, 1.0])
def test_a_failed_read_is_retried_no_sooner_than_the_interval_its_exchange_gave(
    jitter: float,
) -> None:
    """X3 rule 1: a status read answered a new interval and its side channel then failed;
    the retry honours that interval, not the older one the record held."""
    r = working_record()
    assert r.poll_interval_s == 5.0
    failed = e.RequestFailed(
        request=RequestKind.POLL, failure=FailureKind.MALFORMED_RESPONSE, poll_interval_s=12.0
    )
    t = handle(r, failed, now=T0 + 10, jitter=jitter)
    assert t.record.poll_interval_s == 12.0
    (poll,) = t.commands
    assert isinstance(poll, c.Poll)
    assert poll.at >= T0 + 10 + 12.0
    # And the next normal reply is planned from it too (no interval of its own).
    after = handle(t.record, e.WorkingObserved(), now=poll.at, jitter=0.0)
    (next_poll,) = after.commands
    assert isinstance(next_poll, c.Poll)
    assert next_poll.at == poll.at + 12.0


def test_non_retryable_failure_escalates() -> None:
    """X9: a 403 is never retried: the operation goes to an operator."""
    r = working_record()
    failed = e.RequestFailed(request=RequestKind.POLL, failure=FailureKind.FORBIDDEN)
    t = handle(r, failed, now=T0 + 10, jitter=0.0)
    assert t.record.state is State.RECONCILIATION_REQUIRED
    (escalate,) = t.commands
    assert isinstance(escalate, c.EscalateReconciliation)
    assert "not retryable" in escalate.reason


def test_wait_budget_caps_polls_then_escalates() -> None:
    """X3: the budget pulls a poll in, never below the server's interval; then it escalates."""
    r = working_record(budget_s=20.0)
    assert r.deadline_at == T0 + 20
    t = handle(r, e.WorkingObserved(poll_interval_s=10.0), now=T0 + 5, jitter=1.0)
    assert t.commands == (c.Poll(operation_id=OP_ID, at=T0 + 17),)
    t = handle(t.record, e.WorkingObserved(), now=T0 + 17, jitter=0.0)
    assert t.commands == (c.Poll(operation_id=OP_ID, at=T0 + 27),)
    t = handle(t.record, e.WorkingObserved(), now=T0 + 27, jitter=0.0)
    assert t.record.state is State.RECONCILIATION_REQUIRED
    (escalate,) = t.commands
    assert isinstance(escalate, c.EscalateReconciliation)
    assert "wait budget" in escalate.reason


def test_expiry_escalates() -> None:
    """X3/X7: the server's ttl bounds polling too."""
    r = new_record()
    t = handle(r, e.SubmitAcknowledged(operation_id=OP_ID, ttl_s=60.0), now=T0, jitter=0.0)
    assert t.record.expires_at == T0 + 60
    t = handle(t.record, e.WorkingObserved(), now=T0 + 60, jitter=0.0)
    assert t.record.state is State.RECONCILIATION_REQUIRED
    assert "expiry" in (t.record.reconciliation_reason or "")


def test_ack_after_the_budget_is_spent_escalates() -> None:
    """X3: an acknowledgement that arrives after the wait budget escalates instead of polling."""
    r = new_record(budget_s=10.0)
    t = handle(r, e.SubmitAcknowledged(operation_id=OP_ID), now=T0 + 11, jitter=0.0)
    assert t.record.state is State.RECONCILIATION_REQUIRED
    assert t.record.operation_id == OP_ID


def test_operation_not_found_escalates_with_a_reason() -> None:
    """X7: a 404 by id is never proof of never-created: reconciliation with a reason."""
    r = working_record()
    t = handle(r, e.OperationNotFound(detail="404"), now=T0 + 10, jitter=0.0)
    assert t.record.state is State.RECONCILIATION_REQUIRED
    reason = t.record.reconciliation_reason or ""
    assert "unknown to the server before its expiry" in reason
    assert reason.endswith(": 404")


def test_execution_claimed_moves_the_epoch_and_resumes() -> None:
    """R3/D1: a higher epoch is accepted with resume commands; a lower one is stale."""
    r = working_record()
    t = handle(r, e.ExecutionClaimed(new_epoch=2), now=T0 + 10, jitter=0.0)
    assert t.record.execution_epoch == 2
    assert t.record.state is State.WORKING
    assert t.commands == (c.Poll(operation_id=OP_ID, at=max(T0 + 10, r.next_poll_at or 0)),)
    before = copy.deepcopy(t.record)
    with pytest.raises(StaleEpoch):
        handle(t.record, e.ExecutionClaimed(new_epoch=1), now=T0 + 11, jitter=0.0)
    with pytest.raises(StaleEpoch):
        handle(t.record, e.WorkingObserved(execution_epoch=0), now=T0 + 11, jitter=0.0)
    assert t.record == before


def test_recovery_of_a_submitting_record_treats_the_send_as_unknown() -> None:
    """X2/L7: a record found in SUBMITTING after a crash is resolved by key, never resent blind."""
    r = new_record(submission_lookup=True)
    assert resume(r, now=T0 + 5) == ()
    event = recovery_event(r)
    assert isinstance(event, e.SubmitOutcomeLost)
    t = handle(r, event, now=T0 + 5, jitter=0.0)
    assert t.commands == (c.LookupSubmission(submission_key=r.submission_key, at=T0 + 5),)
    assert recovery_event(t.record) is None
    assert resume(t.record, now=T0 + 6) == (
        c.LookupSubmission(submission_key=r.submission_key, at=T0 + 6),
    )


def test_manual_reconciliation_paths() -> None:
    """X7: an operator resumes, proves never-created, or supplies the outcome."""
    stuck = record_in(State.RECONCILIATION_REQUIRED)
    resumed = handle(
        stuck,
        e.ReconciledManually(resolution=e.Resolution.RESUME, actor="ops", note="still running"),
        now=T0 + 100,
        jitter=0.0,
    )
    assert resumed.record.state is State.WORKING
    assert resumed.record.reconciliation_reason is None
    assert resumed.commands == (c.Poll(operation_id=OP_ID, at=T0 + 105),)

    with pytest.raises(StaleEvent):
        handle(
            stuck,
            e.ReconciledManually(resolution=e.Resolution.NEVER_CREATED, actor="ops", note="n"),
            now=T0 + 100,
            jitter=0.0,
        )

    lost = handle(
        new_record(submission_lookup=False),
        e.SubmitOutcomeLost(reason="reset"),
        now=T0 + 1,
        jitter=0.0,
    ).record
    again = handle(
        lost,
        e.ReconciledManually(resolution=e.Resolution.NEVER_CREATED, actor="ops", note="logs"),
        now=T0 + 100,
        jitter=0.0,
    )
    assert again.record.state is State.NOT_FOUND_SAFE
    assert again.commands == (
        c.SendSubmit(submission_key=lost.submission_key, attempt=1, at=T0 + 100),
    )

    done = handle(
        stuck,
        e.ReconciledManually(
            resolution=e.Resolution.COMPLETED,
            actor="ops",
            note="seen in UI",
            result_digest=RESULT_DIGEST,
        ),
        now=T0 + 100,
        jitter=0.0,
    )
    assert done.record.state is State.ACCEPTED
    (accept,) = done.commands
    assert isinstance(accept, c.AcceptTerminal)
    assert accept.receipt.resolved_by == "ops: seen in UI"
    assert accept.receipt.result_kind is ResultKind.VALUE

    cancelled = handle(
        stuck,
        e.ReconciledManually(
            resolution=e.Resolution.CANCELLED,
            actor="ops",
            note="aborted",
            result_digest=CANCEL_DIGEST,
        ),
        now=T0 + 100,
        jitter=0.0,
    )
    assert cancelled.record.state is State.CANCELLED_ACCEPTED


def test_synchronous_result_and_rejection_are_accepted_from_submitting() -> None:
    """X10: an inline result or a refused create is the outcome itself."""
    r = new_record()
    inline = handle(
        r,
        e.ResultFetched(
            status=ServerStatus.COMPLETED,
            result_kind=ResultKind.VALUE,
            result_digest=RESULT_DIGEST,
            operation_id="sync-1",
        ),
        now=T0 + 1,
        jitter=0.0,
    )
    assert inline.record.state is State.ACCEPTED
    assert inline.record.operation_id == "sync-1"
    rejected = handle(
        r, e.SubmitRejected(reason="bad args", result_digest=RESULT_DIGEST), now=T0 + 1, jitter=0.0
    )
    assert rejected.record.state is State.ACCEPTED
    assert rejected.record.result_kind is ResultKind.PROTOCOL_ERROR
    assert rejected.record.server_status is ServerStatus.FAILED


def test_poll_backoff_does_not_use_up_the_retry_budget() -> None:
    """X9: after many unchanged polls a transient failure is retried; only failures count."""
    r = step(new_record(), e.SubmitAcknowledged(operation_id=OP_ID)).record
    for _ in range(DEFAULT_POLICY.retry.attempts_max + 2):
        r = step(r, e.WorkingObserved()).record
    assert r.backoff_step > DEFAULT_POLICY.retry.attempts_max
    timeout = e.RequestFailed(request=RequestKind.POLL, failure=FailureKind.TIMEOUT)
    for _ in range(DEFAULT_POLICY.retry.attempts_max):
        t = step(r, timeout)
        assert t.record.state is State.WORKING
        assert [type(x) for x in t.commands] == [c.Poll]
        r = t.record
    # An answer resets the count of failures in a row.
    assert step(step(r, e.WorkingObserved()).record, timeout).record.state is State.WORKING
    t = step(r, timeout)
    assert t.record.state is State.RECONCILIATION_REQUIRED
    assert "retries exhausted" in (t.record.reconciliation_reason or "")


def test_manual_resume_keeps_the_known_expiry() -> None:
    """A resume by an operator (no ttl in hand) keeps the expiry the server gave (X7)."""
    record = step(new_record(), e.SubmitAcknowledged(operation_id=OP_ID, ttl_s=3600.0)).record
    assert record.expires_at is not None
    escalated = step(record, e.ReconciliationEscalated(reason="check")).record
    resumed = step(
        escalated,
        e.ReconciledManually(resolution=e.Resolution.RESUME, actor="ops", note="still running"),
    ).record
    assert resumed.expires_at == record.expires_at
