"""Scripted operations through the real core and a real ledger, with no network.

A :class:`Scenario` stands in for a server that behaves in one known way (completes
after an input round, loses the create response, is cancelled mid-flight). ``drive``
plays it against the machine and the ledger one committed step at a time, exactly as
the runtime would, so the same scripts serve ``make demo``'s walkthrough, the crash
test (SIGKILL at every commit point, SPEC L7) and the ledger benchmark.

The driver decides only from the stored record, never from memory of earlier steps:
after a crash it picks up wherever the ledger says the operation is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from longcall.core import (
    OperationRecord,
    ResultKind,
    ServerStatus,
    State,
    handle,
    new_operation,
)
from longcall.core.events import (
    CancelAcknowledged,
    CancellationObserved,
    CancelRequested,
    Event,
    ExecutionClaimed,
    InputAnswered,
    InputRequestObserved,
    ResultFetched,
    ResultFetchStarted,
    SubmissionFound,
    SubmitAcknowledged,
    SubmitOutcomeLost,
    TerminalObserved,
    WorkingObserved,
)
from longcall.core.keys import canonical_json, digest_bytes, request_digest
from longcall.core.machine import recovery_event
from longcall.ledger import Ledger
from longcall.runtime.step import apply_event

POLL_INTERVAL_S = 2.0


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    """How the scripted server answers one operation."""

    name: str
    tool: str
    arguments: dict[str, object]
    input_keys: tuple[str, ...] = ()
    working_polls: int = 2
    cancel: bool = False
    lose_create_response: bool = False
    result: dict[str, object] = dataclasses.field(default_factory=dict)


COMPLETED = Scenario(
    name="completed",
    tool="approve",
    arguments={"change": "rotate keys"},
    input_keys=("approved",),
    result={"approved": True, "change": "rotate keys"},
)
CANCELLED = Scenario(
    name="cancelled-wins",
    tool="crawl",
    arguments={"pages": 40, "items_per_page": 10},
    cancel=True,
)
SUBMISSION_UNKNOWN = Scenario(
    name="submission-unknown",
    tool="sleep_report",
    arguments={"seconds": 30, "rows": 3},
    lose_create_response=True,
    result={"rows": [1, 2, 3]},
)
SCENARIOS = (COMPLETED, CANCELLED, SUBMISSION_UNKNOWN)


def start(ledger: Ledger, call_node_id: str, scenario: Scenario, *, now: float) -> OperationRecord:
    """Create the operation's record (the first commit point)."""
    return ledger.create(_new_record(call_node_id, scenario, now=now))


def _new_record(call_node_id: str, scenario: Scenario, *, now: float) -> OperationRecord:
    return new_operation(
        call_node_id=call_node_id,
        request_digest=request_digest(scenario.tool, scenario.arguments),
        tool_name=scenario.tool,
        tool_descriptor_digest=digest_bytes(scenario.tool.encode()),
        principal="demo",
        server="scripted://walkthrough",
        protocol="scripted",
        adapter_version="1",
        now=now,
        submission_lookup=True,
    ).record


def next_event(record: OperationRecord, scenario: Scenario) -> tuple[Event, bytes | None] | None:
    """The scripted server's next answer for ``record`` as stored, with any payload."""
    op_id = f"op-{record.call_node_id}"
    match record.state:
        case State.SUBMITTING | State.NOT_FOUND_SAFE:
            if scenario.lose_create_response and record.submit_attempts == 1:
                return SubmitOutcomeLost(reason="create response lost (scripted)"), None
            return _ack(op_id), None
        case State.SUBMISSION_UNKNOWN:
            return SubmissionFound(operation_id=op_id, poll_interval_s=POLL_INTERVAL_S), None
        case State.WORKING if scenario.cancel:
            return CancelRequested(requested_by="walkthrough"), None
        case State.WORKING if any(k not in record.input_keys_answered for k in scenario.input_keys):
            return InputRequestObserved(keys=scenario.input_keys, status_message="approve?"), None
        case State.WORKING if record.poll_count < scenario.working_polls:
            return WorkingObserved(
                status_message=f"step {record.poll_count + 1}", progressed=True
            ), None
        case State.WORKING:
            return TerminalObserved(status=ServerStatus.COMPLETED), None
        case State.INPUT_REQUIRED if record.input_keys_pending:
            return InputAnswered(
                input_round=record.input_round, keys=record.input_keys_pending
            ), None
        case State.INPUT_REQUIRED:
            return WorkingObserved(status_message="input received", progressed=True), None
        case State.CANCEL_REQUESTED if record.cancel_acknowledged_at is None:
            return CancelAcknowledged(cancel_generation=record.cancel_generation), None
        case State.CANCEL_REQUESTED:
            evidence = canonical_json({"taskId": op_id, "status": "cancelled"})
            return CancellationObserved(result_digest=digest_bytes(evidence)), evidence
        case State.TERMINAL_OBSERVED:
            return ResultFetchStarted(), None
        case State.FETCHING_RESULT:
            payload = canonical_json(scenario.result)
            return ResultFetched(
                status=ServerStatus.COMPLETED,
                result_kind=ResultKind.VALUE,
                result_digest=digest_bytes(payload),
                empty=not scenario.result,
            ), payload
        case _:
            return None


def _ack(op_id: str) -> SubmitAcknowledged:
    return SubmitAcknowledged(operation_id=op_id, poll_interval_s=POLL_INTERVAL_S, ttl_s=3600.0)


Answer = tuple[Event, bytes | None]
"""One answer of the scripted server: an event, with the payload it carries."""


def answers(call_node_id: str, scenario: Scenario, *, now: float) -> list[Answer]:
    """Every answer the scripted server gives a new operation of ``scenario``, in order,
    made beforehand by playing it against the machine alone: what :func:`drive` asks
    :func:`next_event` for, step by step (the ledger benchmark times the ledger and the
    machine, not the server)."""
    record = _new_record(call_node_id, scenario, now=now)
    made: list[Answer] = []
    while (step := next_event(record, scenario)) is not None:
        made.append(step)
        now = max(now, record.next_poll_at or now)
        record = handle(record, step[0], now=now, jitter=0.5).record
        now += 0.001
    return made


def drive(
    ledger: Ledger,
    call_node_id: str,
    scenario: Scenario,
    *,
    now: float,
    on_step: Callable[[OperationRecord], None] | None = None,
    steps_max: int = 100,
    record: OperationRecord | None = None,
    script: list[Answer] | None = None,
) -> OperationRecord:
    """Play ``scenario`` from wherever the ledger has the operation until it is terminal.

    Virtual time moves to each record's next planned action; the jitter draw is fixed,
    so a run is reproducible. ``record``: the operation as the caller just committed it
    (as the engine holds its records), instead of reading it back first. ``script``:
    the server's answers made beforehand by :func:`answers`, played in order instead of
    asking :func:`next_event` (only from the record :func:`start` made).
    """
    if record is None:
        record = ledger.get(call_node_id)
    given = iter(script) if script is not None else None
    for _ in range(steps_max):
        step = next_event(record, scenario) if given is None else next(given, None)
        if step is None:
            return record
        event, payload = step
        now = max(now, record.next_poll_at or now)
        transition = apply_event(ledger, record, event, now=now, jitter=0.5, result_payload=payload)
        record = transition.record
        if on_step is not None:
            on_step(record)
        now += 0.001
    raise RuntimeError(f"{call_node_id}: not terminal after {steps_max} steps")


def restart(ledger: Ledger, call_node_id: str, *, now: float) -> OperationRecord:
    """What a new executor does first: claim a higher epoch, then recover an in-doubt
    create (SUBMITTING means the create may have been sent, X2)."""
    record = ledger.get(call_node_id)
    if record.is_terminal:
        return record
    record = apply_event(
        ledger,
        record,
        ExecutionClaimed(new_epoch=record.execution_epoch + 1),
        now=now,
        jitter=0.5,
    ).record
    recovery = recovery_event(record)
    if recovery is not None:
        record = apply_event(ledger, record, recovery, now=now, jitter=0.5).record
    return record
