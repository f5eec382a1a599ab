"""Builders for the core tests: one representative record per state and one valid event
per (event type, state), all produced through the real machine, never by hand-set fields.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from longcall.core import events as e
from longcall.core.machine import DEFAULT_POLICY, Policy, Transition, handle, new_operation
from longcall.core.record import OperationRecord, ResultKind, ServerStatus
from longcall.core.retry import FailureKind, RequestKind
from longcall.core.states import State

T0 = 1000.0
OP_ID = "op-1"
RESULT_DIGEST = "sha256:" + "a" * 64
ERROR_DIGEST = "sha256:" + "e" * 64
CANCEL_DIGEST = "sha256:" + "c" * 64


def new_record(
    *,
    now: float = T0,
    submission_lookup: bool = True,
    tool_idempotent: bool = False,
    budget_s: float | None = None,
    call_node_id: str = "run-1/node-7",
    step_index: int = 0,
    protocol: str = "mcp-2026-07-28",
) -> OperationRecord:
    """A fresh record in SUBMITTING, as :func:`new_operation` makes it."""
    return new_operation(
        call_node_id=call_node_id,
        request_digest="sha256:" + "r" * 64,
        tool_name="analyze_upload",
        tool_descriptor_digest="sha256:" + "d" * 64,
        principal="tenant-a",
        server="https://tools.example",
        protocol=protocol,
        adapter_version="1",
        now=now,
        step_index=step_index,
        submission_lookup=submission_lookup,
        tool_idempotent=tool_idempotent,
        budget_s=budget_s,
    ).record


def step(
    record: OperationRecord,
    event: e.Event,
    *,
    now: float | None = None,
    jitter: float = 0.5,
    policy: Policy = DEFAULT_POLICY,
) -> Transition:
    """Apply one event at ``now`` (default: one second after the record's last update)."""
    at = record.updated_at + 1.0 if now is None else now
    return handle(record, event, now=at, jitter=jitter, policy=policy)


def _chain(record: OperationRecord, *events: e.Event) -> OperationRecord:
    for event in events:
        record = step(record, event).record
    return record


def working_record(**kwargs: Any) -> OperationRecord:
    """A record the server acknowledged (WORKING, operation ``op-1``, 5 s interval)."""
    return _chain(
        new_record(**kwargs), e.SubmitAcknowledged(operation_id=OP_ID, poll_interval_s=5.0)
    )


def record_in(state: State) -> OperationRecord:
    """The representative record for ``state``, reached through the machine."""
    match state:
        case State.SUBMITTING:
            return new_record()
        case State.SUBMISSION_UNKNOWN:
            return _chain(new_record(), e.SubmitOutcomeLost(reason="connection reset"))
        case State.NOT_FOUND_SAFE:
            return _chain(record_in(State.SUBMISSION_UNKNOWN), e.SubmissionNeverCreated())
        case State.WORKING:
            return working_record()
        case State.INPUT_REQUIRED:
            return _chain(working_record(), e.InputRequestObserved(keys=("q1",)))
        case State.CANCEL_REQUESTED:
            return _chain(working_record(), e.CancelRequested())
        case State.TERMINAL_OBSERVED:
            return _chain(working_record(), e.TerminalObserved(status=ServerStatus.COMPLETED))
        case State.FETCHING_RESULT:
            return _chain(record_in(State.TERMINAL_OBSERVED), e.ResultFetchStarted())
        case State.RECONCILIATION_REQUIRED:
            return _chain(working_record(), e.ReconciliationEscalated(reason="operator asked"))
        case State.ACCEPTED:
            return _chain(
                record_in(State.FETCHING_RESULT),
                e.ResultFetched(
                    status=ServerStatus.COMPLETED,
                    result_kind=ResultKind.VALUE,
                    result_digest=RESULT_DIGEST,
                ),
            )
        case State.CANCELLED_ACCEPTED:
            return _chain(
                record_in(State.CANCEL_REQUESTED),
                e.CancellationObserved(result_digest=CANCEL_DIGEST),
            )
    raise AssertionError(state)  # pragma: no cover


REQUEST_FOR_STATE = {
    State.SUBMITTING: RequestKind.SUBMIT,
    State.NOT_FOUND_SAFE: RequestKind.SUBMIT,
    State.SUBMISSION_UNKNOWN: RequestKind.LOOKUP,
    State.FETCHING_RESULT: RequestKind.FETCH,
    State.CANCEL_REQUESTED: RequestKind.CANCEL,
}


def event_for(event_type: type[e.Event], record: OperationRecord) -> e.Event:
    """One valid, non-replayed instance of ``event_type`` aimed at ``record``.

    Fields that must match the record (input round and keys, cancel generation, the
    failed request's kind, the next epoch) are taken from it; every event carries the
    record's execution epoch.
    """
    epoch = record.execution_epoch
    observed = record.server_status
    other_terminal = (
        ServerStatus.FAILED if observed is ServerStatus.COMPLETED else ServerStatus.COMPLETED
    )
    fetched_status = (
        observed
        if observed in (ServerStatus.COMPLETED, ServerStatus.FAILED)
        else (ServerStatus.COMPLETED)
    )
    made: dict[type[e.Event], e.Event] = {
        e.SubmitAcknowledged: e.SubmitAcknowledged(operation_id=OP_ID, poll_interval_s=5.0),
        e.SubmitOutcomeLost: e.SubmitOutcomeLost(reason="read timeout"),
        e.SubmitRejected: e.SubmitRejected(reason="invalid arguments", result_digest=ERROR_DIGEST),
        e.SubmissionFound: e.SubmissionFound(operation_id=OP_ID),
        e.SubmissionNeverCreated: e.SubmissionNeverCreated(),
        e.WorkingObserved: e.WorkingObserved(status_message="40%", progressed=True),
        e.InputRequestObserved: e.InputRequestObserved(keys=("q2",)),
        e.InputAnswered: e.InputAnswered(
            input_round=record.input_round, keys=record.input_keys_pending or ("q1",)
        ),
        e.InputRefused: e.InputRefused(
            input_round=record.input_round,
            keys=record.input_keys_answered or record.input_keys_pending or ("q1",),
            reason="invalid params",
        ),
        # Never the terminal the record already holds: that one is a replay.
        e.TerminalObserved: e.TerminalObserved(status=other_terminal),
        e.ResultFetchStarted: e.ResultFetchStarted(),
        e.ResultFetched: e.ResultFetched(
            status=fetched_status, result_kind=ResultKind.VALUE, result_digest=RESULT_DIGEST
        ),
        e.ResultFetchFailed: e.ResultFetchFailed(reason="truncated body", retryable=True),
        e.CancelRequested: e.CancelRequested(),
        e.CancelAcknowledged: e.CancelAcknowledged(cancel_generation=record.cancel_generation),
        e.CancelRefused: e.CancelRefused(reason="already completed"),
        e.CancellationObserved: e.CancellationObserved(result_digest=CANCEL_DIGEST),
        e.RequestFailed: e.RequestFailed(
            request=REQUEST_FOR_STATE.get(record.state, RequestKind.POLL),
            failure=FailureKind.TIMEOUT,
        ),
        e.OperationNotFound: e.OperationNotFound(detail="404"),
        e.ExecutionClaimed: e.ExecutionClaimed(new_epoch=epoch + 1),
        e.ReconciliationEscalated: e.ReconciliationEscalated(reason="operator asked"),
        e.ReconciledManually: e.ReconciledManually(
            resolution=e.Resolution.RESUME, actor="ops@example", note="server says running"
        ),
    }
    event = made[event_type]
    return dataclasses.replace(event, execution_epoch=epoch)
