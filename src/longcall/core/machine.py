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

from longcall.core.commands import (
    AcceptTerminal,
    AskInput,
    Command,
    EscalateReconciliation,
    FetchResult,
    LookupSubmission,
    Poll,
    SendCancel,
    SendInputResponse,
    SendSubmit,
    StartResultFetch,
)
from longcall.core.events import (
    CancelAcknowledged,
    CancellationObserved,
    CancelRefused,
    CancelRequested,
    Event,
    ExecutionClaimed,
    InputAnswered,
    InputRefused,
    InputRequestObserved,
    OperationNotFound,
    ReconciledManually,
    ReconciliationEscalated,
    RequestFailed,
    Resolution,
    ResultFetched,
    ResultFetchFailed,
    ResultFetchStarted,
    SubmissionFound,
    SubmissionNeverCreated,
    SubmitAcknowledged,
    SubmitOutcomeLost,
    SubmitRejected,
    TerminalObserved,
    WorkingObserved,
)
from longcall.core.keys import derive_submission_key
from longcall.core.notfound import unknown_reason
from longcall.core.record import (
    KINDS_OF_TERMINAL,
    OperationRecord,
    ResultKind,
    ServerStatus,
    TerminalReceipt,
    blank_draft,
    evolve,
    finish,
    set_unshared,
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
    commands: tuple[Command, ...]


class _Ctx:
    """What a handler decides with besides the record and the event. A plain slotted
    class, not a frozen dataclass: one is made per event, and the frozen ``__init__``
    (a guarded ``object.__setattr__`` per field) was a measurable share of ``handle``.
    Handlers only read it."""

    __slots__ = ("given", "jitter", "now", "policy")

    def __init__(self, given: OperationRecord, now: float, jitter: float, policy: Policy) -> None:
        self.given = given
        """The record :func:`handle` was given: any other a handler holds is its own."""
        self.now = now
        self.jitter = jitter
        self.policy = policy


_Out = tuple[OperationRecord, list[Command]]
_E = TypeVar("_E", bound=Event)
_HANDLERS: dict[type[Event], Callable[[OperationRecord, Any, _Ctx], _Out]] = {}


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
    # Drafted, as evolve makes records: the same record as OperationRecord(...) with
    # these fields, without a guarded write per field (every call starts here).
    draft = blank_draft()
    draft.call_node_id = call_node_id
    draft.request_digest = request_digest
    draft.tool_name = tool_name
    draft.tool_descriptor_digest = tool_descriptor_digest
    draft.principal = principal
    draft.server = server
    draft.protocol = protocol
    draft.adapter_version = adapter_version
    draft.submission_key = key
    draft.step_index = step_index
    draft.submission_lookup = submission_lookup
    draft.tool_idempotent = tool_idempotent
    draft.server_store_id = server_store_id
    draft.execution_epoch = execution_epoch
    draft.created_at = now
    draft.updated_at = now
    draft.deadline_at = None if budget_s is None else now + budget_s
    return Transition(
        record=finish(draft), commands=(SendSubmit(submission_key=key, attempt=1, at=now),)
    )


def handle(
    record: OperationRecord,
    event: Event,
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
    updated, commands = handler(record, event, _Ctx(record, now, jitter, policy))
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


def resume(record: OperationRecord, *, now: float) -> tuple[Command, ...]:
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
            return (LookupSubmission(submission_key=record.submission_key, at=at),)
        case State.WORKING:
            return (Poll(operation_id=op, at=at),)
        case State.INPUT_REQUIRED:
            return _input_commands(record, at)
        case State.CANCEL_REQUESTED if record.cancel_acknowledged_at is None:
            return (SendCancel(operation_id=op, cancel_generation=record.cancel_generation, at=at),)
        case State.CANCEL_REQUESTED:
            return (Poll(operation_id=op, at=at),)
        case State.TERMINAL_OBSERVED:
            return (StartResultFetch(operation_id=op),)
        case State.FETCHING_RESULT:
            return (FetchResult(operation_id=op, at=at),)
        case _:
            return ()


def recovery_event(record: OperationRecord) -> Event | None:
    """The event a restarted executor applies before resuming, if any.

    A record found in SUBMITTING (or NOT_FOUND_SAFE) may have had its create sent
    just before the crash: its outcome is unknown, never "not sent" (X2). So may a
    record in SUBMISSION_UNKNOWN that resends an idempotent create (no lookup by key):
    its planned resend may have left, so the next one is a new attempt, counted and
    committed before it is sent — a restart never resends uncounted (X2, L7).
    """
    resends = record.state is State.SUBMISSION_UNKNOWN and not record.submission_lookup
    if record.state in (State.SUBMITTING, State.NOT_FOUND_SAFE) or resends:
        return SubmitOutcomeLost(
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


@_on(SubmitAcknowledged)
def _submit_acknowledged(record: OperationRecord, event: SubmitAcknowledged, ctx: _Ctx) -> _Out:
    return _start_polling(
        record,
        event.operation_id,
        event.server_status_raw,
        event.status_message,
        event.poll_interval_s,
        event.ttl_s,
        ctx,
    )


@_on(SubmissionFound)
def _submission_found(record: OperationRecord, event: SubmissionFound, ctx: _Ctx) -> _Out:
    record = evolve(record, reconciliation_reason=None)
    return _start_polling(
        record,
        event.operation_id,
        event.server_status_raw,
        None,
        event.poll_interval_s,
        event.ttl_s,
        ctx,
    )


def _start_polling(
    record: OperationRecord,
    operation_id: str,
    status_raw: str | None,
    message: str | None,
    interval_s: float | None,
    ttl_s: float | None,
    ctx: _Ctx,
) -> _Out:
    record = evolve(
        record,
        state=State.WORKING,
        operation_id=operation_id,
        server_status=ServerStatus.WORKING,
        server_status_raw=status_raw,
        status_message=message,
        poll_interval_s=interval_s,
        # A reply without a ttl says nothing new about expiry: keep what we knew (X7).
        expires_at=record.expires_at if ttl_s is None else ctx.now + ttl_s,
        backoff_step=0,
        failed_attempts=0,
    )
    return _schedule_poll(record, ctx)


@_on(SubmitOutcomeLost)
def _submit_outcome_lost(record: OperationRecord, event: SubmitOutcomeLost, ctx: _Ctx) -> _Out:
    record = evolve(record, last_error=event.reason)
    if record.submission_lookup:
        record = evolve(record, state=State.SUBMISSION_UNKNOWN, next_poll_at=ctx.now)
        return record, [LookupSubmission(submission_key=record.submission_key, at=ctx.now)]
    if record.tool_idempotent and record.submit_attempts < ctx.policy.submit_attempts_max:
        # X2: an idempotent tool may be sent again, with the SAME key.
        attempt = record.submit_attempts + 1
        at = ctx.now + backoff_delay_s(ctx.policy.retry, attempt, ctx.jitter)
        record = evolve(
            record, state=State.SUBMISSION_UNKNOWN, submit_attempts=attempt, next_poll_at=at
        )
        return record, [SendSubmit(submission_key=record.submission_key, attempt=attempt, at=at)]
    if record.tool_idempotent:
        return _escalate(
            record,
            f"create outcome unknown after {record.submit_attempts} attempts: {event.reason}",
        )
    return _escalate(
        record,
        "create outcome unknown and unprovable: the server offers no lookup by submission "
        f"key and the tool is not declared idempotent ({event.reason})",
    )


@_on(SubmitRejected)
def _submit_rejected(record: OperationRecord, event: SubmitRejected, ctx: _Ctx) -> _Out:
    record = evolve(
        record,
        state=State.ACCEPTED,
        server_status=ServerStatus.FAILED,
        result_kind=ResultKind.PROTOCOL_ERROR,
        result_digest=event.result_digest,
        last_error=event.reason,
        next_poll_at=None,
    )
    return record, [_ACCEPT]


@_on(SubmissionNeverCreated)
def _never_created(record: OperationRecord, event: SubmissionNeverCreated, ctx: _Ctx) -> _Out:
    if record.submit_attempts >= ctx.policy.submit_attempts_max:
        return _escalate(
            record, f"never created, but {record.submit_attempts} creates were sent already"
        )
    attempt = record.submit_attempts + 1
    record = evolve(
        record,
        state=State.NOT_FOUND_SAFE,
        submit_attempts=attempt,
        next_poll_at=ctx.now,
        reconciliation_reason=None,
        failed_attempts=0,
    )
    # Resubmission is allowed only now, after the proof, and with the same key (X2).
    return record, [SendSubmit(submission_key=record.submission_key, attempt=attempt, at=ctx.now)]


# --- polling and input (X3, X4) ----------------------------------------------------


@_on(WorkingObserved)
def _working(record: OperationRecord, event: WorkingObserved, ctx: _Ctx) -> _Out:
    interval = (
        event.poll_interval_s if event.poll_interval_s is not None else record.poll_interval_s
    )
    # Without a server interval, an unchanged status backs the schedule off (X3).
    step = 0 if (event.progressed or interval is not None) else record.backoff_step + 1
    state = State.CANCEL_REQUESTED if record.state is State.CANCEL_REQUESTED else State.WORKING
    record = evolve(
        record,
        state=state,
        server_status=ServerStatus.WORKING,
        server_status_raw=event.server_status_raw,
        status_message=event.status_message
        if event.status_message is not None
        else record.status_message,
        poll_interval_s=interval,
        poll_count=record.poll_count + 1,
        backoff_step=step,
        failed_attempts=0,
        input_keys_pending=(),
        input_deadline_at=None,
    )
    return _schedule_poll(record, ctx)


@_on(InputRequestObserved)
def _input_requested(record: OperationRecord, event: InputRequestObserved, ctx: _Ctx) -> _Out:
    if event.poll_interval_s is not None:
        # X3: the interval comes with every status, an input request's too.
        record = evolve(record, poll_interval_s=event.poll_interval_s)
    if record.state is State.CANCEL_REQUESTED:
        # The cancel is pending: no input is asked for; keep polling for the terminal.
        record = evolve(
            record,
            poll_count=record.poll_count + 1,
            server_status_raw=event.server_status_raw,
            failed_attempts=0,
        )
        return _schedule_poll(record, ctx)
    unanswered = tuple(k for k in event.keys if k not in record.input_keys_answered)
    waiting_on_gate = record.waits_for_answers
    if waiting_on_gate and set(unanswered) == set(record.input_keys_pending):
        # F1 "input_required replayed": the gate already has this request.
        raise StaleEvent(f"operation {record.call_node_id!r}: input request replayed")
    fresh = any(k not in record.input_keys_pending for k in unanswered)
    record = evolve(
        record,
        state=State.INPUT_REQUIRED,
        server_status=ServerStatus.INPUT_REQUIRED,
        server_status_raw=event.server_status_raw,
        status_message=event.status_message
        if event.status_message is not None
        else record.status_message,
        poll_count=record.poll_count + 1,
        failed_attempts=0,
        input_round=record.input_round + 1 if fresh else record.input_round,
        input_keys_pending=unanswered,
        input_schema_digest=event.schema_digest,
        input_deadline_at=event.deadline_at,
        next_poll_at=None,
    )
    if not unanswered:
        # Every key is answered, yet the server still asks: it has not caught up, or
        # the delivery was lost (found by the simulator: polling alone then waits for
        # ever). Answers are idempotent per key, so deliver them again and keep polling.
        record, more = _schedule_poll(record, ctx)
        if record.state is State.RECONCILIATION_REQUIRED:
            return record, more
        resend = SendInputResponse(
            operation_id=_op(record),
            input_round=record.input_round,
            keys=tuple(event.keys),
            at=ctx.now,
        )
        return record, [resend, *more]
    # X4: automatic polling pauses until the gate answers.
    return record, [_ask_input(record)]


@_on(InputAnswered)
def _input_answered(record: OperationRecord, event: InputAnswered, ctx: _Ctx) -> _Out:
    if event.input_round != record.input_round:
        raise StaleEvent(
            f"operation {record.call_node_id!r}: answer for input round {event.input_round}, "
            f"current round is {record.input_round}"
        )
    unknown = [k for k in event.keys if k not in record.input_keys_pending]
    if unknown or not event.keys:
        raise StaleEvent(
            f"operation {record.call_node_id!r}: keys {unknown or list(event.keys)} are not"
            " pending (already answered or never asked)"
        )
    pending = tuple(k for k in record.input_keys_pending if k not in event.keys)
    record = evolve(
        record,
        input_keys_pending=pending,
        input_keys_answered=record.input_keys_answered + tuple(event.keys),
    )
    send = SendInputResponse(
        operation_id=_op(record), input_round=record.input_round, keys=event.keys, at=ctx.now
    )
    if pending:
        return record, [send]
    record, more = _schedule_poll(record, ctx)
    return record, [send, *more]


@_on(InputRefused)
def _input_refused(record: OperationRecord, event: InputRefused, ctx: _Ctx) -> _Out:
    if event.input_round != record.input_round:
        raise StaleEvent(
            f"operation {record.call_node_id!r}: refusal for input round {event.input_round}, "
            f"current round is {record.input_round}"
        )
    # X4: a refused answer is void. Its keys go back to the gate in a new round, so the
    # next answer is stored apart from the refused one (answers are write-once per
    # round) and a replay of this refusal is stale. Polling stays paused meanwhile.
    reopened = tuple(
        k for k in event.keys if k in record.input_keys_answered or k in record.input_keys_pending
    )
    if not reopened:
        raise StaleEvent(f"operation {record.call_node_id!r}: refusal for keys it never asked")
    pending = record.input_keys_pending + tuple(
        k for k in reopened if k not in record.input_keys_pending
    )
    record = evolve(
        record,
        input_round=record.input_round + 1,
        input_keys_pending=pending,
        input_keys_answered=tuple(k for k in record.input_keys_answered if k not in reopened),
        last_error=f"the server refused the answer: {event.reason}"
        if event.reason
        else record.last_error,
        next_poll_at=None,
    )
    return record, [_ask_input(record)]


# --- terminal and result (X6) ------------------------------------------------------


@_on(TerminalObserved)
def _terminal(record: OperationRecord, event: TerminalObserved, ctx: _Ctx) -> _Out:
    if record.state is State.CANCELLED_ACCEPTED:
        # X5: cancel won; a completion now must never advance downstream.
        if record.effect_reconciliation_required:
            raise StaleEvent(f"operation {record.call_node_id!r}: late completion already recorded")
        record = evolve(
            record,
            effect_reconciliation_required=True,
            warnings=_add(record.warnings, LATE_COMPLETION_WARNING),
        )
        return record, [
            EscalateReconciliation(
                reason=f"EFFECT_RECONCILIATION_REQUIRED: {event.status.value} reported after the "
                "cancellation was accepted; external effects may exist"
            )
        ]
    if record.state in (State.TERMINAL_OBSERVED, State.FETCHING_RESULT):
        if event.status is record.server_status:
            raise StaleEvent(f"operation {record.call_node_id!r}: terminal already observed")
        assert record.server_status is not None
        return _escalate(
            record,
            f"server reported two terminals: {record.server_status.value},"
            f" then {event.status.value}",
        )
    record = evolve(
        record,
        state=State.TERMINAL_OBSERVED,
        server_status=event.status,
        server_status_raw=event.server_status_raw,
        status_message=event.status_message
        if event.status_message is not None
        else record.status_message,
        poll_count=record.poll_count + 1,
        failed_attempts=0,
        input_keys_pending=(),
        next_poll_at=None,
    )
    # X6: a completed status is not an outcome until its result is fetched.
    return record, [StartResultFetch(operation_id=_op(record))]


@_on(ResultFetchStarted)
def _fetch_started(record: OperationRecord, event: ResultFetchStarted, ctx: _Ctx) -> _Out:
    record = evolve(
        record, state=State.FETCHING_RESULT, backoff_step=0, failed_attempts=0, next_poll_at=ctx.now
    )
    return record, [FetchResult(operation_id=_op(record), at=ctx.now)]


@_on(ResultFetched)
def _fetched(record: OperationRecord, event: ResultFetched, ctx: _Ctx) -> _Out:
    if record.state is State.FETCHING_RESULT and event.status is not record.server_status:
        observed = record.server_status.value if record.server_status else None
        return _escalate(record, f"fetched a {event.status.value} result, but observed {observed}")
    warnings = record.warnings
    for warning in event.warnings:
        warnings = _add(warnings, warning)
    if event.empty:
        warnings = _add(warnings, EMPTY_RESULT_WARNING)
    record = evolve(
        record,
        state=State.ACCEPTED,
        operation_id=record.operation_id if record.operation_id is not None else event.operation_id,
        server_status=event.status,
        result_kind=event.result_kind,
        result_digest=event.result_digest,
        warnings=warnings,
        next_poll_at=None,
    )
    return record, [_ACCEPT]


@_on(ResultFetchFailed)
def _fetch_failed(record: OperationRecord, event: ResultFetchFailed, ctx: _Ctx) -> _Out:
    step = record.backoff_step + 1
    if not event.retryable or step > ctx.policy.retry.attempts_max:
        # X6: nothing is accepted without a complete, verified result.
        return _escalate(record, f"result could not be obtained: {event.reason}")
    at = ctx.now + max(
        backoff_delay_s(ctx.policy.retry, step, ctx.jitter), event.retry_after_s or 0.0
    )
    record = evolve(record, backoff_step=step, next_poll_at=at, last_error=event.reason)
    return record, [FetchResult(operation_id=_op(record), at=at)]


# --- cancel (X5) -------------------------------------------------------------------


@_on(CancelRequested)
def _cancel_requested(record: OperationRecord, event: CancelRequested, ctx: _Ctx) -> _Out:
    # The generation is bumped (and persisted by the caller) before anything is sent.
    generation = record.cancel_generation + 1
    record = evolve(
        record,
        state=State.CANCEL_REQUESTED,
        cancel_generation=generation,
        cancel_requested_at=ctx.now,
        cancel_acknowledged_at=None,
        input_keys_pending=(),
        next_poll_at=ctx.now,
        backoff_step=0,
        failed_attempts=0,
    )
    return record, [SendCancel(operation_id=_op(record), cancel_generation=generation, at=ctx.now)]


@_on(CancelAcknowledged)
def _cancel_acknowledged(record: OperationRecord, event: CancelAcknowledged, ctx: _Ctx) -> _Out:
    if (
        event.cancel_generation != record.cancel_generation
        or record.cancel_acknowledged_at is not None
    ):
        raise StaleEvent(
            f"operation {record.call_node_id!r}: cancel ack for generation"
            f" {event.cancel_generation} (current {record.cancel_generation}, acknowledged:"
            f" {record.cancel_acknowledged_at is not None})"
        )
    # The ack is only a request taken: keep polling for the real terminal (X5). It is
    # progress too (the task is about to change), so the polls that look for that
    # change start again from the server's interval: the backoff the cancel's own
    # failed sends built up would otherwise delay its confirmation (X3 rule 3).
    record = evolve(record, cancel_acknowledged_at=ctx.now, failed_attempts=0, backoff_step=0)
    return _schedule_poll(record, ctx)


@_on(CancelRefused)
def _cancel_refused(record: OperationRecord, event: CancelRefused, ctx: _Ctx) -> _Out:
    # Already terminal on the server: read that terminal, never rewrite it as cancelled.
    # The read is a poll like any other: not sooner than the server's interval (X3).
    at = ctx.now + poll_delay_s(
        ctx.policy.poll, server_interval_s=record.poll_interval_s, backoff_step=0, jitter=ctx.jitter
    )
    record = evolve(
        record,
        cancel_acknowledged_at=ctx.now,
        last_error=event.reason,
        next_poll_at=at,
        failed_attempts=0,
    )
    return record, [Poll(operation_id=_op(record), at=at)]


@_on(CancellationObserved)
def _cancelled(record: OperationRecord, event: CancellationObserved, ctx: _Ctx) -> _Out:
    if record.state in (State.TERMINAL_OBSERVED, State.FETCHING_RESULT):
        assert record.server_status is not None
        return _escalate(
            record, f"server reported two terminals: {record.server_status.value}, then cancelled"
        )
    record = evolve(
        record,
        state=State.CANCELLED_ACCEPTED,
        server_status=ServerStatus.CANCELLED,
        server_status_raw=event.server_status_raw,
        result_kind=ResultKind.CANCELLED,
        result_digest=event.result_digest,
        input_keys_pending=(),
        next_poll_at=None,
    )
    return record, [_ACCEPT]


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


@_on(RequestFailed)
def _request_failed(record: OperationRecord, event: RequestFailed, ctx: _Ctx) -> _Out:
    if event.request not in _REQUESTS_BY_STATE.get(record.state, frozenset()):
        raise StaleEvent(
            f"operation {record.call_node_id!r}: a failed {event.request.value} request "
            f"is stale in {record.state}"
        )
    detail = f": {event.detail}" if event.detail else ""
    error = f"{event.request.value} failed ({event.failure.value}){detail}"
    # X9: the retry limit counts failures in a row, not the poll backoff of X3.
    failures = record.failed_attempts + 1
    if not is_retryable(event.failure):
        return _escalate(evolve(record, last_error=error), f"not retryable: {error}")
    if failures > ctx.policy.retry.attempts_max:
        return _escalate(evolve(record, last_error=error), f"retries exhausted: {error}")
    record = evolve(
        record, backoff_step=record.backoff_step + 1, failed_attempts=failures, last_error=error
    )
    if event.poll_interval_s is not None:
        # X3 rule 1: an interval the server gave before the exchange failed still holds;
        # the retry is a read like any other, never sooner than it.
        record = evolve(record, poll_interval_s=event.poll_interval_s)
    if event.request is RequestKind.POLL:
        return _schedule_poll(record, ctx, retry_after_s=event.retry_after_s)
    at = ctx.now + max(
        backoff_delay_s(ctx.policy.retry, failures, ctx.jitter), event.retry_after_s or 0.0
    )
    record = evolve(record, next_poll_at=at)
    return record, [_retry_command(record, event.request, at)]


def _retry_command(record: OperationRecord, request: RequestKind, at: float) -> Command:
    match request:
        case RequestKind.SUBMIT:
            return SendSubmit(
                submission_key=record.submission_key, attempt=record.submit_attempts, at=at
            )
        case RequestKind.LOOKUP:
            return LookupSubmission(submission_key=record.submission_key, at=at)
        case RequestKind.CANCEL:
            return SendCancel(
                operation_id=_op(record), cancel_generation=record.cancel_generation, at=at
            )
        case RequestKind.FETCH:
            return FetchResult(operation_id=_op(record), at=at)
        case RequestKind.INPUT:
            return SendInputResponse(
                operation_id=_op(record),
                input_round=record.input_round,
                keys=record.input_keys_answered,
                at=at,
            )
        case RequestKind.POLL:  # pragma: no cover - handled by the caller
            return Poll(operation_id=_op(record), at=at)


@_on(OperationNotFound)
def _not_found(record: OperationRecord, event: OperationNotFound, ctx: _Ctx) -> _Out:
    # X7: a not-found by id is never proof of "never created": only the key proves that.
    reason = unknown_reason(record, ctx.now)
    return _escalate(record, f"{reason}{': ' + event.detail if event.detail else ''}")


# --- fencing and operators ---------------------------------------------------------


@_on(ExecutionClaimed)
def _claimed(record: OperationRecord, event: ExecutionClaimed, ctx: _Ctx) -> _Out:
    if event.new_epoch <= record.execution_epoch:
        raise StaleEpoch(
            f"operation {record.call_node_id!r}: claim with epoch {event.new_epoch}, "
            f"record is at {record.execution_epoch}"
        )
    record = evolve(record, execution_epoch=event.new_epoch)
    return record, list(resume(record, now=ctx.now))


@_on(ReconciliationEscalated)
def _escalated(record: OperationRecord, event: ReconciliationEscalated, ctx: _Ctx) -> _Out:
    return _escalate(record, event.reason)


@_on(ReconciledManually)
def _reconciled(record: OperationRecord, event: ReconciledManually, ctx: _Ctx) -> _Out:
    who = f"{event.actor}: {event.note}"
    match event.resolution:
        case Resolution.RESUME:
            operation_id = event.operation_id or record.operation_id
            if operation_id is None:
                raise StaleEvent("resume needs an operation id: none is recorded or given")
            record = evolve(record, reconciliation_reason=None, last_error=f"resumed by {who}")
            return _start_polling(
                record,
                operation_id,
                record.server_status_raw,
                record.status_message,
                record.poll_interval_s,
                None,
                ctx,
            )
        case Resolution.NEVER_CREATED:
            if record.operation_id is not None:
                raise StaleEvent("an operation id is recorded: it was created")
            record = evolve(
                record,
                state=State.NOT_FOUND_SAFE,
                reconciliation_reason=None,
                last_error=f"by {who}",
            )
            return record, [
                SendSubmit(
                    submission_key=record.submission_key, attempt=record.submit_attempts, at=ctx.now
                )
            ]
        case _:
            status = ServerStatus(event.resolution.value)
            kind = event.result_kind or KINDS_OF_TERMINAL[status][0]
            state = State.CANCELLED_ACCEPTED if status is ServerStatus.CANCELLED else State.ACCEPTED
            record = evolve(
                record,
                state=state,
                server_status=status,
                result_kind=kind,
                result_digest=event.result_digest,
                resolved_by=who,
                operation_id=event.operation_id or record.operation_id,
                next_poll_at=None,
            )
            return record, [_ACCEPT]


# --- helpers -----------------------------------------------------------------------

_ACCEPT = Command()
"""Placeholder: replaced by AcceptTerminal once the final record (version, time) exists."""


def _finish(record: OperationRecord, commands: list[Command]) -> list[Command]:
    return [
        AcceptTerminal(receipt=TerminalReceipt.for_record(record)) if cmd is _ACCEPT else cmd
        for cmd in commands
    ]


def _schedule_poll(
    record: OperationRecord, ctx: _Ctx, *, retry_after_s: float | None = None
) -> _Out:
    """Plan the next poll under X3, or escalate when the budget or expiry is spent."""
    ended_by = record.polling_ended_by(ctx.now)
    if ended_by is not None:
        return _escalate(record, f"{ended_by} reached while the server still reports it running")
    limit = cap_at_limits(float("inf"), record.deadline_at, record.expires_at)
    delay = poll_delay_s(
        ctx.policy.poll,
        server_interval_s=record.poll_interval_s,
        backoff_step=record.backoff_step,
        jitter=ctx.jitter,
        retry_after_s=retry_after_s,
    )
    # X3 rules 1 and 4 before rule 5: a limit may pull the next poll in, but never
    # closer than the server's interval (the floor) after this one, nor before the
    # server's Retry-After (found by the simulator's Retry-After gate).
    floor_s = poll_delay_s(
        ctx.policy.poll, server_interval_s=record.poll_interval_s, backoff_step=0, jitter=0.0
    )
    floor_s = max(floor_s, retry_after_s or 0.0)
    at = min(ctx.now + delay, max(limit, ctx.now + floor_s))
    if record is ctx.given:
        record = evolve(record, next_poll_at=at)
    else:
        # The handler's own record, made by evolve in this call and held by nothing
        # else yet (as handle stamps it): planned in place, not copied once more.
        set_unshared(record, "next_poll_at", at)
    return record, [Poll(operation_id=_op(record), at=at)]


def _escalate(record: OperationRecord, reason: str) -> _Out:
    record = evolve(
        record, state=State.RECONCILIATION_REQUIRED, reconciliation_reason=reason, next_poll_at=None
    )
    return record, [EscalateReconciliation(reason=reason)]


def _input_commands(record: OperationRecord, at: float) -> tuple[Command, ...]:
    out: list[Command] = []
    answered_this_round = record.input_keys_answered
    if answered_this_round:
        # Answers are idempotent per key on the server: re-deliver after a restart.
        out.append(
            SendInputResponse(
                operation_id=_op(record),
                input_round=record.input_round,
                keys=answered_this_round,
                at=at,
            )
        )
    if record.input_keys_pending:
        out.append(_ask_input(record))
    else:
        out.append(Poll(operation_id=_op(record), at=at))
    return tuple(out)


def _ask_input(record: OperationRecord) -> AskInput:
    """The gate's question for the record's pending keys of its current round (X4)."""
    return AskInput(
        operation_id=_op(record),
        input_round=record.input_round,
        keys=record.input_keys_pending,
        schema_digest=record.input_schema_digest,
        deadline_at=record.input_deadline_at,
    )


def _op(record: OperationRecord) -> str:
    if record.operation_id is None:
        raise LocalProtocolError(f"operation {record.call_node_id!r} has no operation id yet")
    return record.operation_id


def _add(items: tuple[str, ...], item: str) -> tuple[str, ...]:
    return items if item in items else (*items, item)
