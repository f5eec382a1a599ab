"""The operation machine: ``(record, event, now, jitter) -> (new record, commands)``.

This module owns *how* each event changes a record; :mod:`longcall.core.states` owns
*whether* it may. Every call looks the pair up in the table first; a pair that is not
there raises :class:`IllegalTransition`, a replay or an older fact raises
:class:`StaleEvent`, and in both cases the caller's record is untouched (records are
frozen values). A handler can only pick a target the table lists.

Nothing here reads a clock or draws a random number: ``now`` and the jitter draw
(a float in [0, 1]) come from the driver, so the simulator replays it exactly.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

from longcall.core import commands as c
from longcall.core import events as e
from longcall.core.keys import derive_submission_key
from longcall.core.notfound import unknown_reason
from longcall.core.record import (
    OperationRecord,
    ResultKind,
    ServerStatus,
    TerminalReceipt,
    evolve,
    stamp_unshared,
)
from longcall.core.retry import RequestKind, RetryPolicy, backoff_delay_s, is_retryable
from longcall.core.schedule import PollPolicy, cap_at_limits, poll_delay_s
from longcall.core.states import TRANSITIONS, State
from longcall.errors import IllegalTransition, LocalProtocolError, StaleEpoch, StaleEvent

EMPTY_RESULT_WARNING = "empty_result"
LATE_COMPLETION_WARNING = "late_completion_after_cancel"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    """Every limit the machine applies, in one value (named, units last)."""

    poll: PollPolicy = dataclasses.field(default_factory=PollPolicy)
    retry: RetryPolicy = dataclasses.field(default_factory=RetryPolicy)
    submit_attempts_max: int = 5
    """Creates sent under one key (resends of an idempotent tool, proven-absent resubmits)."""


DEFAULT_POLICY = Policy()


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Transition:
    """The outcome of one accepted event."""

    record: OperationRecord
    commands: tuple[c.Command, ...]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _Ctx:
    now: float
    jitter: float
    policy: Policy


_Out = tuple[OperationRecord, list[c.Command]]
_E = TypeVar("_E", bound=e.Event)
_HANDLERS: dict[type[e.Event], Callable[[OperationRecord, Any, _Ctx], _Out]] = {}


def _on(event_type: type[_E]) -> Callable[[Callable[[OperationRecord, _E, _Ctx], _Out]], Any]:
    def register(fn: Callable[[OperationRecord, _E, _Ctx], _Out]) -> Any:
        _HANDLERS[event_type] = fn
        return fn

    return register


# --- public API --------------------------------------------------------------------


def new_operation(
    *,
    call_node_id: str,
    request_digest: str,
    tool_name: str,
    tool_descriptor_digest: str,
    principal: str,
    server: str,
    protocol: str,
    adapter_version: str,
    now: float,
    step_index: int = 0,
    submission_lookup: bool = False,
    tool_idempotent: bool = False,
    budget_s: float | None = None,
    execution_epoch: int = 0,
    caller_key: bytes | None = None,
    server_store_id: str | None = None,
) -> Transition:
    """A fresh record in SUBMITTING, persisted by the caller before the SendSubmit (X2).

    ``caller_key`` is the ledger's secret that scopes the submission key to this caller
    (C2); the runtime always passes it."""
    key = derive_submission_key(call_node_id, step_index, caller_key=caller_key)
    record = OperationRecord(
        call_node_id=call_node_id,
        request_digest=request_digest,
        tool_name=tool_name,
        tool_descriptor_digest=tool_descriptor_digest,
        principal=principal,
        server=server,
        protocol=protocol,
        adapter_version=adapter_version,
        submission_key=key,
        step_index=step_index,
        submission_lookup=submission_lookup,
        tool_idempotent=tool_idempotent,
        server_store_id=server_store_id,
        execution_epoch=execution_epoch,
        created_at=now,
        updated_at=now,
        deadline_at=None if budget_s is None else now + budget_s,
    )
    return Transition(
        record=record, commands=(c.SendSubmit(submission_key=key, attempt=1, at=now),)
    )


def handle(
    record: OperationRecord,
    event: e.Event,
    *,
    now: float,
    jitter: float,
    policy: Policy = DEFAULT_POLICY,
) -> Transition:
    """Apply one event. Raises and leaves ``record`` as it was when the event is refused."""
    if event.execution_epoch is not None and event.execution_epoch != record.execution_epoch:
        raise StaleEpoch(
            f"operation {record.call_node_id!r}: event {event.name} from epoch "
            f"{event.execution_epoch}, record is at epoch {record.execution_epoch}"
        )
    allowed = TRANSITIONS.get((record.state, event.name))
    if allowed is None:
        raise IllegalTransition(record.state, event.name, record.call_node_id)
    handler = _HANDLERS[type(event)]
    updated, commands = handler(record, event, _Ctx(now=now, jitter=jitter, policy=policy))
    if updated.state not in allowed:
        raise LocalProtocolError(
            f"handler for {event.name} chose {updated.state} from {record.state}, "
            f"which the table does not allow"
        )
    if updated is record:
        updated = evolve(record, version=record.version + 1, updated_at=now)
    else:
        # Any other record is the handler's own, made by evolve in this call (handlers
        # are pure and commands hold no records): stamped without another copy.
        stamp_unshared(updated, version=record.version + 1, updated_at=now)
    return Transition(record=updated, commands=tuple(_finish(updated, commands)))


def resume(record: OperationRecord, *, now: float) -> tuple[c.Command, ...]:
    """What a freshly started executor must (re)do for ``record`` (SPEC L7).

    Every command is safe to repeat: same submission key, same cancel generation,
    answers idempotent per key. SUBMITTING is not resumed by a send: the first
    executor may have sent the create already, so the caller first applies
    :func:`recovery_event`.
    """
    op = record.operation_id or ""
    at = max(now, record.next_poll_at or now)
    match record.state:
        case State.SUBMISSION_UNKNOWN if record.submission_lookup:
            return (c.LookupSubmission(submission_key=record.submission_key, at=at),)
        case State.WORKING:
            return (c.Poll(operation_id=op, at=at),)
        case State.INPUT_REQUIRED:
            return _input_commands(record, at)
        case State.CANCEL_REQUESTED if record.cancel_acknowledged_at is None:
            return (
                c.SendCancel(operation_id=op, cancel_generation=record.cancel_generation, at=at),
            )
        case State.CANCEL_REQUESTED:
            return (c.Poll(operation_id=op, at=at),)
        case State.TERMINAL_OBSERVED:
            return (c.StartResultFetch(operation_id=op),)
        case State.FETCHING_RESULT:
            return (c.FetchResult(operation_id=op, at=at),)
        case _:
            return ()


def recovery_event(record: OperationRecord) -> e.Event | None:
    """The event a restarted executor applies before resuming, if any.

    A record found in SUBMITTING (or NOT_FOUND_SAFE) may have had its create sent
    just before the crash: its outcome is unknown, never "not sent" (X2). So may a
    record in SUBMISSION_UNKNOWN that resends an idempotent create (no lookup by key):
    its planned resend may have left, so the next one is a new attempt, counted and
    committed before it is sent — a restart never resends uncounted (X2, L7).
    """
    resends = record.state is State.SUBMISSION_UNKNOWN and not record.submission_lookup
    if record.state in (State.SUBMITTING, State.NOT_FOUND_SAFE) or resends:
        return e.SubmitOutcomeLost(
            reason="executor restarted before the create response was recorded"
        )
    return None


def next_deadline(record: OperationRecord) -> float | None:
    """When the driver must wake up for this record next (None: only an event wakes it)."""
    if record.is_settled:
        return None
    if record.state is State.INPUT_REQUIRED and record.input_keys_pending:
        return record.input_deadline_at
    return record.next_poll_at


# --- submission (X2) ---------------------------------------------------------------


@_on(e.SubmitAcknowledged)
def _submit_acknowledged(r: OperationRecord, ev: e.SubmitAcknowledged, x: _Ctx) -> _Out:
    return _start_polling(
        r, ev.operation_id, ev.server_status_raw, ev.status_message, ev.poll_interval_s, ev.ttl_s, x
    )


@_on(e.SubmissionFound)
def _submission_found(r: OperationRecord, ev: e.SubmissionFound, x: _Ctx) -> _Out:
    r = evolve(r, reconciliation_reason=None)
    return _start_polling(
        r, ev.operation_id, ev.server_status_raw, None, ev.poll_interval_s, ev.ttl_s, x
    )


def _start_polling(
    r: OperationRecord,
    operation_id: str,
    status_raw: str | None,
    message: str | None,
    interval_s: float | None,
    ttl_s: float | None,
    x: _Ctx,
) -> _Out:
    r = evolve(
        r,
        state=State.WORKING,
        operation_id=operation_id,
        server_status=ServerStatus.WORKING,
        server_status_raw=status_raw,
        status_message=message,
        poll_interval_s=interval_s,
        # A reply without a ttl says nothing new about expiry: keep what we knew (X7).
        expires_at=r.expires_at if ttl_s is None else x.now + ttl_s,
        backoff_step=0,
        failed_attempts=0,
    )
    return _schedule_poll(r, x)


@_on(e.SubmitOutcomeLost)
def _submit_outcome_lost(r: OperationRecord, ev: e.SubmitOutcomeLost, x: _Ctx) -> _Out:
    r = evolve(r, last_error=ev.reason)
    if r.submission_lookup:
        r = evolve(r, state=State.SUBMISSION_UNKNOWN, next_poll_at=x.now)
        return r, [c.LookupSubmission(submission_key=r.submission_key, at=x.now)]
    if r.tool_idempotent and r.submit_attempts < x.policy.submit_attempts_max:
        # X2: an idempotent tool may be sent again, with the SAME key.
        attempt = r.submit_attempts + 1
        at = x.now + backoff_delay_s(x.policy.retry, attempt, x.jitter)
        r = evolve(r, state=State.SUBMISSION_UNKNOWN, submit_attempts=attempt, next_poll_at=at)
        return r, [c.SendSubmit(submission_key=r.submission_key, attempt=attempt, at=at)]
    if r.tool_idempotent:
        return _escalate(
            r, f"create outcome unknown after {r.submit_attempts} attempts: {ev.reason}"
        )
    return _escalate(
        r,
        "create outcome unknown and unprovable: the server offers no lookup by submission "
        f"key and the tool is not declared idempotent ({ev.reason})",
    )


@_on(e.SubmitRejected)
def _submit_rejected(r: OperationRecord, ev: e.SubmitRejected, x: _Ctx) -> _Out:
    r = evolve(
        r,
        state=State.ACCEPTED,
        server_status=ServerStatus.FAILED,
        result_kind=ResultKind.PROTOCOL_ERROR,
        result_digest=ev.result_digest,
        last_error=ev.reason,
        next_poll_at=None,
    )
    return r, [_ACCEPT]


@_on(e.SubmissionNeverCreated)
def _never_created(r: OperationRecord, ev: e.SubmissionNeverCreated, x: _Ctx) -> _Out:
    if r.submit_attempts >= x.policy.submit_attempts_max:
        return _escalate(r, f"never created, but {r.submit_attempts} creates were sent already")
    attempt = r.submit_attempts + 1
    r = evolve(
        r,
        state=State.NOT_FOUND_SAFE,
        submit_attempts=attempt,
        next_poll_at=x.now,
        reconciliation_reason=None,
        failed_attempts=0,
    )
    # Resubmission is allowed only now, after the proof, and with the same key (X2).
    return r, [c.SendSubmit(submission_key=r.submission_key, attempt=attempt, at=x.now)]


# --- polling and input (X3, X4) ----------------------------------------------------


@_on(e.WorkingObserved)
def _working(r: OperationRecord, ev: e.WorkingObserved, x: _Ctx) -> _Out:
    interval = ev.poll_interval_s if ev.poll_interval_s is not None else r.poll_interval_s
    # Without a server interval, an unchanged status backs the schedule off (X3).
    step = 0 if (ev.progressed or interval is not None) else r.backoff_step + 1
    state = State.CANCEL_REQUESTED if r.state is State.CANCEL_REQUESTED else State.WORKING
    r = evolve(
        r,
        state=state,
        server_status=ServerStatus.WORKING,
        server_status_raw=ev.server_status_raw,
        status_message=ev.status_message if ev.status_message is not None else r.status_message,
        poll_interval_s=interval,
        poll_count=r.poll_count + 1,
        backoff_step=step,
        failed_attempts=0,
        input_keys_pending=(),
        input_deadline_at=None,
    )
    return _schedule_poll(r, x)


@_on(e.InputRequestObserved)
def _input_requested(r: OperationRecord, ev: e.InputRequestObserved, x: _Ctx) -> _Out:
    if ev.poll_interval_s is not None:
        # X3: the interval comes with every status, an input request's too.
        r = evolve(r, poll_interval_s=ev.poll_interval_s)
    if r.state is State.CANCEL_REQUESTED:
        # The cancel is pending: no input is asked for; keep polling for the terminal.
        r = evolve(
            r,
            poll_count=r.poll_count + 1,
            server_status_raw=ev.server_status_raw,
            failed_attempts=0,
        )
        return _schedule_poll(r, x)
    unanswered = tuple(k for k in ev.keys if k not in r.input_keys_answered)
    waiting_on_gate = r.waits_for_answers
    if waiting_on_gate and set(unanswered) == set(r.input_keys_pending):
        # F1 "input_required replayed": the gate already has this request.
        raise StaleEvent(f"operation {r.call_node_id!r}: input request replayed")
    fresh = any(k not in r.input_keys_pending for k in unanswered)
    r = evolve(
        r,
        state=State.INPUT_REQUIRED,
        server_status=ServerStatus.INPUT_REQUIRED,
        server_status_raw=ev.server_status_raw,
        status_message=ev.status_message if ev.status_message is not None else r.status_message,
        poll_count=r.poll_count + 1,
        failed_attempts=0,
        input_round=r.input_round + 1 if fresh else r.input_round,
        input_keys_pending=unanswered,
        input_schema_digest=ev.schema_digest,
        input_deadline_at=ev.deadline_at,
        next_poll_at=None,
    )
    if not unanswered:
        # Every key is answered, yet the server still asks: it has not caught up, or
        # the delivery was lost (found by the simulator: polling alone then waits for
        # ever). Answers are idempotent per key, so deliver them again and keep polling.
        r, more = _schedule_poll(r, x)
        if r.state is State.RECONCILIATION_REQUIRED:
            return r, more
        resend = c.SendInputResponse(
            operation_id=_op(r), input_round=r.input_round, keys=tuple(ev.keys), at=x.now
        )
        return r, [resend, *more]
    # X4: automatic polling pauses until the gate answers.
    return r, [_ask_input(r)]


@_on(e.InputAnswered)
def _input_answered(r: OperationRecord, ev: e.InputAnswered, x: _Ctx) -> _Out:
    if ev.input_round != r.input_round:
        raise StaleEvent(
            f"operation {r.call_node_id!r}: answer for input round {ev.input_round}, "
            f"current round is {r.input_round}"
        )
    unknown = [k for k in ev.keys if k not in r.input_keys_pending]
    if unknown or not ev.keys:
        raise StaleEvent(
            f"operation {r.call_node_id!r}: keys {unknown or list(ev.keys)} are not pending "
            "(already answered or never asked)"
        )
    pending = tuple(k for k in r.input_keys_pending if k not in ev.keys)
    r = evolve(
        r,
        input_keys_pending=pending,
        input_keys_answered=r.input_keys_answered + tuple(ev.keys),
    )
    send = c.SendInputResponse(
        operation_id=_op(r), input_round=r.input_round, keys=ev.keys, at=x.now
    )
    if pending:
        return r, [send]
    r, more = _schedule_poll(r, x)
    return r, [send, *more]


@_on(e.InputRefused)
def _input_refused(r: OperationRecord, ev: e.InputRefused, x: _Ctx) -> _Out:
    if ev.input_round != r.input_round:
        raise StaleEvent(
            f"operation {r.call_node_id!r}: refusal for input round {ev.input_round}, "
            f"current round is {r.input_round}"
        )
    # X4: a refused answer is void. Its keys go back to the gate in a new round, so the
    # next answer is stored apart from the refused one (answers are write-once per
    # round) and a replay of this refusal is stale. Polling stays paused meanwhile.
    reopened = tuple(k for k in ev.keys if k in r.input_keys_answered or k in r.input_keys_pending)
    if not reopened:
        raise StaleEvent(f"operation {r.call_node_id!r}: refusal for keys it never asked")
    pending = r.input_keys_pending + tuple(k for k in reopened if k not in r.input_keys_pending)
    r = evolve(
        r,
        input_round=r.input_round + 1,
        input_keys_pending=pending,
        input_keys_answered=tuple(k for k in r.input_keys_answered if k not in reopened),
        last_error=f"the server refused the answer: {ev.reason}" if ev.reason else r.last_error,
        next_poll_at=None,
    )
    return r, [_ask_input(r)]


# --- terminal and result (X6) ------------------------------------------------------


@_on(e.TerminalObserved)
def _terminal(r: OperationRecord, ev: e.TerminalObserved, x: _Ctx) -> _Out:
    if r.state is State.CANCELLED_ACCEPTED:
        # X5: cancel won; a completion now must never advance downstream.
        if r.effect_reconciliation_required:
            raise StaleEvent(f"operation {r.call_node_id!r}: late completion already recorded")
        r = evolve(
            r,
            effect_reconciliation_required=True,
            warnings=_add(r.warnings, LATE_COMPLETION_WARNING),
        )
        return r, [
            c.EscalateReconciliation(
                reason=f"EFFECT_RECONCILIATION_REQUIRED: {ev.status.value} reported after the "
                "cancellation was accepted; external effects may exist"
            )
        ]
    if r.state in (State.TERMINAL_OBSERVED, State.FETCHING_RESULT):
        if ev.status is r.server_status:
            raise StaleEvent(f"operation {r.call_node_id!r}: terminal already observed")
        assert r.server_status is not None
        return _escalate(
            r, f"server reported two terminals: {r.server_status.value}, then {ev.status.value}"
        )
    r = evolve(
        r,
        state=State.TERMINAL_OBSERVED,
        server_status=ev.status,
        server_status_raw=ev.server_status_raw,
        status_message=ev.status_message if ev.status_message is not None else r.status_message,
        poll_count=r.poll_count + 1,
        failed_attempts=0,
        input_keys_pending=(),
        next_poll_at=None,
    )
    # X6: a completed status is not an outcome until its result is fetched.
    return r, [c.StartResultFetch(operation_id=_op(r))]


@_on(e.ResultFetchStarted)
def _fetch_started(r: OperationRecord, ev: e.ResultFetchStarted, x: _Ctx) -> _Out:
    r = evolve(
        r, state=State.FETCHING_RESULT, backoff_step=0, failed_attempts=0, next_poll_at=x.now
    )
    return r, [c.FetchResult(operation_id=_op(r), at=x.now)]


@_on(e.ResultFetched)
def _fetched(r: OperationRecord, ev: e.ResultFetched, x: _Ctx) -> _Out:
    if r.state is State.FETCHING_RESULT and ev.status is not r.server_status:
        observed = r.server_status.value if r.server_status else None
        return _escalate(r, f"fetched a {ev.status.value} result, but observed {observed}")
    warnings = r.warnings
    for warning in ev.warnings:
        warnings = _add(warnings, warning)
    if ev.empty:
        warnings = _add(warnings, EMPTY_RESULT_WARNING)
    r = evolve(
        r,
        state=State.ACCEPTED,
        operation_id=r.operation_id if r.operation_id is not None else ev.operation_id,
        server_status=ev.status,
        result_kind=ev.result_kind,
        result_digest=ev.result_digest,
        warnings=warnings,
        next_poll_at=None,
    )
    return r, [_ACCEPT]


@_on(e.ResultFetchFailed)
def _fetch_failed(r: OperationRecord, ev: e.ResultFetchFailed, x: _Ctx) -> _Out:
    step = r.backoff_step + 1
    if not ev.retryable or step > x.policy.retry.attempts_max:
        # X6: nothing is accepted without a complete, verified result.
        return _escalate(r, f"result could not be obtained: {ev.reason}")
    at = x.now + max(backoff_delay_s(x.policy.retry, step, x.jitter), ev.retry_after_s or 0.0)
    r = evolve(r, backoff_step=step, next_poll_at=at, last_error=ev.reason)
    return r, [c.FetchResult(operation_id=_op(r), at=at)]


# --- cancel (X5) -------------------------------------------------------------------


@_on(e.CancelRequested)
def _cancel_requested(r: OperationRecord, ev: e.CancelRequested, x: _Ctx) -> _Out:
    # The generation is bumped (and persisted by the caller) before anything is sent.
    generation = r.cancel_generation + 1
    r = evolve(
        r,
        state=State.CANCEL_REQUESTED,
        cancel_generation=generation,
        cancel_requested_at=x.now,
        cancel_acknowledged_at=None,
        input_keys_pending=(),
        next_poll_at=x.now,
        backoff_step=0,
        failed_attempts=0,
    )
    return r, [c.SendCancel(operation_id=_op(r), cancel_generation=generation, at=x.now)]


@_on(e.CancelAcknowledged)
def _cancel_acknowledged(r: OperationRecord, ev: e.CancelAcknowledged, x: _Ctx) -> _Out:
    if ev.cancel_generation != r.cancel_generation or r.cancel_acknowledged_at is not None:
        raise StaleEvent(
            f"operation {r.call_node_id!r}: cancel ack for generation {ev.cancel_generation} "
            f"(current {r.cancel_generation}, acknowledged: {r.cancel_acknowledged_at is not None})"
        )
    # The ack is only a request taken: keep polling for the real terminal (X5). It is
    # progress too (the task is about to change), so the polls that look for that
    # change start again from the server's interval: the backoff the cancel's own
    # failed sends built up would otherwise delay its confirmation (X3 rule 3).
    r = evolve(r, cancel_acknowledged_at=x.now, failed_attempts=0, backoff_step=0)
    return _schedule_poll(r, x)


@_on(e.CancelRefused)
def _cancel_refused(r: OperationRecord, ev: e.CancelRefused, x: _Ctx) -> _Out:
    # Already terminal on the server: read that terminal, never rewrite it as cancelled.
    # The read is a poll like any other: not sooner than the server's interval (X3).
    at = x.now + poll_delay_s(
        x.policy.poll, server_interval_s=r.poll_interval_s, backoff_step=0, jitter=x.jitter
    )
    r = evolve(
        r, cancel_acknowledged_at=x.now, last_error=ev.reason, next_poll_at=at, failed_attempts=0
    )
    return r, [c.Poll(operation_id=_op(r), at=at)]


@_on(e.CancellationObserved)
def _cancelled(r: OperationRecord, ev: e.CancellationObserved, x: _Ctx) -> _Out:
    if r.state in (State.TERMINAL_OBSERVED, State.FETCHING_RESULT):
        assert r.server_status is not None
        return _escalate(
            r, f"server reported two terminals: {r.server_status.value}, then cancelled"
        )
    r = evolve(
        r,
        state=State.CANCELLED_ACCEPTED,
        server_status=ServerStatus.CANCELLED,
        server_status_raw=ev.server_status_raw,
        result_kind=ResultKind.CANCELLED,
        result_digest=ev.result_digest,
        input_keys_pending=(),
        next_poll_at=None,
    )
    return r, [_ACCEPT]


# --- failures, not found (X7, X9) --------------------------------------------------

_REQUESTS_BY_STATE: dict[State, frozenset[RequestKind]] = {
    State.SUBMITTING: frozenset({RequestKind.SUBMIT}),
    State.NOT_FOUND_SAFE: frozenset({RequestKind.SUBMIT}),
    State.SUBMISSION_UNKNOWN: frozenset({RequestKind.SUBMIT, RequestKind.LOOKUP}),
    State.WORKING: frozenset({RequestKind.POLL}),
    State.INPUT_REQUIRED: frozenset({RequestKind.POLL, RequestKind.INPUT}),
    State.CANCEL_REQUESTED: frozenset({RequestKind.CANCEL, RequestKind.POLL}),
    State.FETCHING_RESULT: frozenset({RequestKind.FETCH}),
}


@_on(e.RequestFailed)
def _request_failed(r: OperationRecord, ev: e.RequestFailed, x: _Ctx) -> _Out:
    if ev.request not in _REQUESTS_BY_STATE.get(r.state, frozenset()):
        raise StaleEvent(
            f"operation {r.call_node_id!r}: a failed {ev.request.value} request "
            f"is stale in {r.state}"
        )
    error = f"{ev.request.value} failed ({ev.failure.value}){': ' + ev.detail if ev.detail else ''}"
    # X9: the retry limit counts failures in a row, not the poll backoff of X3.
    failures = r.failed_attempts + 1
    if not is_retryable(ev.failure):
        return _escalate(evolve(r, last_error=error), f"not retryable: {error}")
    if failures > x.policy.retry.attempts_max:
        return _escalate(evolve(r, last_error=error), f"retries exhausted: {error}")
    r = evolve(r, backoff_step=r.backoff_step + 1, failed_attempts=failures, last_error=error)
    if ev.poll_interval_s is not None:
        # X3 rule 1: an interval the server gave before the exchange failed still holds;
        # the retry is a read like any other, never sooner than it.
        r = evolve(r, poll_interval_s=ev.poll_interval_s)
    if ev.request is RequestKind.POLL:
        return _schedule_poll(r, x, retry_after_s=ev.retry_after_s)
    at = x.now + max(backoff_delay_s(x.policy.retry, failures, x.jitter), ev.retry_after_s or 0.0)
    r = evolve(r, next_poll_at=at)
    return r, [_retry_command(r, ev.request, at)]


def _retry_command(r: OperationRecord, request: RequestKind, at: float) -> c.Command:
    match request:
        case RequestKind.SUBMIT:
            return c.SendSubmit(submission_key=r.submission_key, attempt=r.submit_attempts, at=at)
        case RequestKind.LOOKUP:
            return c.LookupSubmission(submission_key=r.submission_key, at=at)
        case RequestKind.CANCEL:
            return c.SendCancel(operation_id=_op(r), cancel_generation=r.cancel_generation, at=at)
        case RequestKind.FETCH:
            return c.FetchResult(operation_id=_op(r), at=at)
        case RequestKind.INPUT:
            return c.SendInputResponse(
                operation_id=_op(r),
                input_round=r.input_round,
                keys=r.input_keys_answered,
                at=at,
            )
        case RequestKind.POLL:  # pragma: no cover - handled by the caller
            return c.Poll(operation_id=_op(r), at=at)


@_on(e.OperationNotFound)
def _not_found(r: OperationRecord, ev: e.OperationNotFound, x: _Ctx) -> _Out:
    # X7: a not-found by id is never proof of "never created": only the key proves that.
    reason = unknown_reason(r, x.now)
    return _escalate(r, f"{reason}{': ' + ev.detail if ev.detail else ''}")


# --- fencing and operators ---------------------------------------------------------


@_on(e.ExecutionClaimed)
def _claimed(r: OperationRecord, ev: e.ExecutionClaimed, x: _Ctx) -> _Out:
    if ev.new_epoch <= r.execution_epoch:
        raise StaleEpoch(
            f"operation {r.call_node_id!r}: claim with epoch {ev.new_epoch}, "
            f"record is at {r.execution_epoch}"
        )
    r = evolve(r, execution_epoch=ev.new_epoch)
    return r, list(resume(r, now=x.now))


@_on(e.ReconciliationEscalated)
def _escalated(r: OperationRecord, ev: e.ReconciliationEscalated, x: _Ctx) -> _Out:
    return _escalate(r, ev.reason)


@_on(e.ReconciledManually)
def _reconciled(r: OperationRecord, ev: e.ReconciledManually, x: _Ctx) -> _Out:
    who = f"{ev.actor}: {ev.note}"
    match ev.resolution:
        case e.Resolution.RESUME:
            operation_id = ev.operation_id or r.operation_id
            if operation_id is None:
                raise StaleEvent("resume needs an operation id: none is recorded or given")
            r = evolve(r, reconciliation_reason=None, last_error=f"resumed by {who}")
            return _start_polling(
                r, operation_id, r.server_status_raw, r.status_message, r.poll_interval_s, None, x
            )
        case e.Resolution.NEVER_CREATED:
            if r.operation_id is not None:
                raise StaleEvent("an operation id is recorded: it was created")
            r = evolve(
                r, state=State.NOT_FOUND_SAFE, reconciliation_reason=None, last_error=f"by {who}"
            )
            return r, [
                c.SendSubmit(submission_key=r.submission_key, attempt=r.submit_attempts, at=x.now)
            ]
        case _:
            status = ServerStatus(ev.resolution.value)
            kind = {
                ServerStatus.COMPLETED: ResultKind.VALUE,
                ServerStatus.FAILED: ResultKind.TOOL_ERROR,
                ServerStatus.CANCELLED: ResultKind.CANCELLED,
            }[status]
            state = State.CANCELLED_ACCEPTED if status is ServerStatus.CANCELLED else State.ACCEPTED
            r = evolve(
                r,
                state=state,
                server_status=status,
                result_kind=kind,
                result_digest=ev.result_digest,
                resolved_by=who,
                operation_id=ev.operation_id or r.operation_id,
                next_poll_at=None,
            )
            return r, [_ACCEPT]


# --- helpers -----------------------------------------------------------------------

_ACCEPT = c.Command()
"""Placeholder: replaced by AcceptTerminal once the final record (version, time) exists."""


def _finish(record: OperationRecord, commands: list[c.Command]) -> list[c.Command]:
    return [
        c.AcceptTerminal(receipt=TerminalReceipt.for_record(record)) if cmd is _ACCEPT else cmd
        for cmd in commands
    ]


def _schedule_poll(r: OperationRecord, x: _Ctx, *, retry_after_s: float | None = None) -> _Out:
    """Plan the next poll under X3, or escalate when the budget or expiry is spent."""
    ended_by = r.polling_ended_by(x.now)
    if ended_by is not None:
        return _escalate(r, f"{ended_by} reached while the server still reports it running")
    limit = cap_at_limits(float("inf"), r.deadline_at, r.expires_at)
    delay = poll_delay_s(
        x.policy.poll,
        server_interval_s=r.poll_interval_s,
        backoff_step=r.backoff_step,
        jitter=x.jitter,
        retry_after_s=retry_after_s,
    )
    # X3 rules 1 and 4 before rule 5: a limit may pull the next poll in, but never
    # closer than the server's interval (the floor) after this one, nor before the
    # server's Retry-After (found by the simulator's Retry-After gate).
    floor_s = poll_delay_s(
        x.policy.poll, server_interval_s=r.poll_interval_s, backoff_step=0, jitter=0.0
    )
    floor_s = max(floor_s, retry_after_s or 0.0)
    at = min(x.now + delay, max(limit, x.now + floor_s))
    r = evolve(r, next_poll_at=at)
    return r, [c.Poll(operation_id=_op(r), at=at)]


def _escalate(r: OperationRecord, reason: str) -> _Out:
    r = evolve(
        r, state=State.RECONCILIATION_REQUIRED, reconciliation_reason=reason, next_poll_at=None
    )
    return r, [c.EscalateReconciliation(reason=reason)]


def _input_commands(r: OperationRecord, at: float) -> tuple[c.Command, ...]:
    out: list[c.Command] = []
    answered_this_round = r.input_keys_answered
    if answered_this_round:
        # Answers are idempotent per key on the server: re-deliver after a restart.
        out.append(
            c.SendInputResponse(
                operation_id=_op(r), input_round=r.input_round, keys=answered_this_round, at=at
            )
        )
    if r.input_keys_pending:
        out.append(_ask_input(r))
    else:
        out.append(c.Poll(operation_id=_op(r), at=at))
    return tuple(out)


def _ask_input(r: OperationRecord) -> c.AskInput:
    """The gate's question for the record's pending keys of its current round (X4)."""
    return c.AskInput(
        operation_id=_op(r),
        input_round=r.input_round,
        keys=r.input_keys_pending,
        schema_digest=r.input_schema_digest,
        deadline_at=r.input_deadline_at,
    )


def _op(r: OperationRecord) -> str:
    if r.operation_id is None:
        raise LocalProtocolError(f"operation {r.call_node_id!r} has no operation id yet")
    return r.operation_id


def _add(items: tuple[str, ...], item: str) -> tuple[str, ...]:
    return items if item in items else (*items, item)
