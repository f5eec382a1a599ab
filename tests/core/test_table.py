"""The transition table (SPEC L2): every (state, event type) pair, the graph's shape,
terminal absorption, and execution-epoch fencing.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
from collections.abc import Callable

import pytest

from longcall.core import events as e
from longcall.core import machine
from longcall.core.machine import Transition
from longcall.core.record import OperationRecord, ResultKind, ServerStatus
from longcall.core.retry import FailureKind, RequestKind
from longcall.core.states import TERMINAL_STATES, TRANSITIONS, State
from longcall.errors import IllegalTransition, StaleEpoch, StaleEvent

from .builders import (
    CANCEL_DIGEST,
    OP_ID,
    REQUEST_FOR_STATE,
    RESULT_DIGEST,
    T0,
    event_for,
    new_record,
    record_in,
    step,
)

PAIRS = list(itertools.product(State, e.EVENT_TYPES))
EVENT_NAMES = {t.__name__ for t in e.EVENT_TYPES}

# Pairs the table allows in which a *replayed or older* instance of the event raises
# StaleEvent (the handler's documented replay cases). The representatives from
# builders.event_for are never replays, so every allowed pair must move; these are
# exercised with explicit replays in test_documented_replays_are_stale.
DOCUMENTED_REPLAYS = {
    (State.INPUT_REQUIRED, "InputRequestObserved"),
    (State.INPUT_REQUIRED, "InputAnswered"),
    (State.INPUT_REQUIRED, "InputRefused"),
    (State.TERMINAL_OBSERVED, "TerminalObserved"),
    (State.FETCHING_RESULT, "TerminalObserved"),
    (State.CANCELLED_ACCEPTED, "TerminalObserved"),
    (State.CANCEL_REQUESTED, "CancelAcknowledged"),
}


def _graph() -> dict[State, set[State]]:
    graph: dict[State, set[State]] = {s: set() for s in State}
    for (source, _event), targets in TRANSITIONS.items():
        graph[source] |= targets
    return graph


def _reachable(start: State) -> set[State]:
    graph, seen, todo = _graph(), {start}, [start]
    while todo:
        for nxt in graph[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_table_names_only_known_events_and_every_event_has_a_handler() -> None:
    """Every event name in the table is an event type, and every type is handled."""
    assert {name for _state, name in TRANSITIONS} <= EVENT_NAMES
    assert set(machine._HANDLERS) == set(e.EVENT_TYPES)
    assert all(targets for targets in TRANSITIONS.values())


@pytest.mark.parametrize(
    ("state", "event_type"), PAIRS, ids=[f"{s.name}-{t.__name__}" for s, t in PAIRS]
)
def test_every_pair(state: State, event_type: type[e.Event]) -> None:
    """An allowed pair moves to a listed target; any other is refused, record unchanged."""
    record = record_in(state)
    before = copy.deepcopy(record)
    event = event_for(event_type, record)
    allowed = TRANSITIONS.get((state, event_type.__name__))
    if allowed is None:
        with pytest.raises(IllegalTransition) as info:
            step(record, event)
        assert info.value.state is state
        assert info.value.event_type == event_type.__name__
        assert record == before
        return
    try:
        moved = step(record, event)
    except StaleEvent:  # pragma: no cover - a representative is never a replay
        assert record == before
        pytest.fail(f"representative {event!r} was refused as stale in {state}")
    assert moved.record.state in allowed
    assert moved.record.version == record.version + 1
    assert record == before


def test_pair_count() -> None:
    """The exhaustive test covers |State| × |EVENT_TYPES| pairs, and the table is a subset."""
    assert len(PAIRS) == len(State) * len(e.EVENT_TYPES) == 11 * 22
    assert set(TRANSITIONS) <= set(itertools.product(State, EVENT_NAMES))


def test_documented_replays_are_stale() -> None:
    """A replay of each documented replay case raises StaleEvent and changes nothing."""
    replays: list[tuple[State, e.Event]] = []
    inp = record_in(State.INPUT_REQUIRED)
    replays.append((State.INPUT_REQUIRED, e.InputRequestObserved(keys=inp.input_keys_pending)))
    replays.append((State.INPUT_REQUIRED, e.InputAnswered(input_round=0, keys=("q1",))))
    replays.append((State.INPUT_REQUIRED, e.InputRefused(input_round=0, keys=("q1",))))
    done = e.TerminalObserved(status=ServerStatus.COMPLETED)
    replays.append((State.TERMINAL_OBSERVED, done))
    replays.append((State.FETCHING_RESULT, done))
    cancel = record_in(State.CANCEL_REQUESTED)
    stale_ack = e.CancelAcknowledged(cancel_generation=cancel.cancel_generation - 1)
    replays.append((State.CANCEL_REQUESTED, stale_ack))
    assert {(s, ev.name) for s, ev in replays} | {
        (State.CANCELLED_ACCEPTED, "TerminalObserved")
    } == DOCUMENTED_REPLAYS
    for state, event in replays:
        record = record_in(state)
        before = copy.deepcopy(record)
        with pytest.raises(StaleEvent):
            step(record, event)
        assert record == before
    # The late completion after a won cancel is recorded once; its replay is stale.
    won = record_in(State.CANCELLED_ACCEPTED)
    marked = step(won, done).record
    before = copy.deepcopy(marked)
    with pytest.raises(StaleEvent):
        step(marked, done)
    assert marked == before


@pytest.mark.parametrize("state", sorted(TERMINAL_STATES, key=lambda s: s.name))
def test_terminal_states_are_absorbing(state: State) -> None:
    """From a terminal state the only edge is CANCELLED_ACCEPTED's TerminalObserved self-loop."""
    edges = {(name, targets) for (s, name), targets in TRANSITIONS.items() if s is state}
    if state is State.CANCELLED_ACCEPTED:
        assert edges == {("TerminalObserved", frozenset({State.CANCELLED_ACCEPTED}))}
        record = record_in(state)
        moved = step(record, e.TerminalObserved(status=ServerStatus.COMPLETED))
        assert moved.record.state is State.CANCELLED_ACCEPTED
    else:
        assert edges == set()


def test_every_state_reachable_from_submitting() -> None:
    """Every state can be reached from SUBMITTING in the table graph."""
    assert _reachable(State.SUBMITTING) == set(State)


@pytest.mark.parametrize("state", [s for s in State if s not in TERMINAL_STATES])
def test_every_open_state_can_reach_a_terminal(state: State) -> None:
    """From every non-terminal state some path leads to a terminal state."""
    assert _reachable(state) & TERMINAL_STATES


def test_table_keeps_the_spec_l2_edges() -> None:
    """The minimum transitions of SPEC L2 are all in the table."""
    s = State
    required = [
        (s.SUBMITTING, s.WORKING),
        (s.WORKING, s.INPUT_REQUIRED),
        (s.INPUT_REQUIRED, s.WORKING),
        (s.SUBMITTING, s.SUBMISSION_UNKNOWN),
        (s.SUBMISSION_UNKNOWN, s.WORKING),
        (s.SUBMISSION_UNKNOWN, s.NOT_FOUND_SAFE),
        (s.WORKING, s.CANCEL_REQUESTED),
        (s.INPUT_REQUIRED, s.CANCEL_REQUESTED),
        (s.WORKING, s.TERMINAL_OBSERVED),
        (s.INPUT_REQUIRED, s.TERMINAL_OBSERVED),
        (s.TERMINAL_OBSERVED, s.FETCHING_RESULT),
        (s.FETCHING_RESULT, s.ACCEPTED),
        (s.CANCEL_REQUESTED, s.CANCELLED_ACCEPTED),
        (s.CANCEL_REQUESTED, s.TERMINAL_OBSERVED),
    ]
    graph = _graph()
    assert [edge for edge in required if edge[1] not in graph[edge[0]]] == []


@pytest.mark.parametrize(
    ("state", "event_type"), PAIRS, ids=[f"{s.name}-{t.__name__}" for s, t in PAIRS]
)
@pytest.mark.parametrize("offset", [-1, 1])
def test_other_epoch_is_stale(state: State, event_type: type[e.Event], offset: int) -> None:
    """An event from another execution epoch raises StaleEpoch and changes nothing."""
    record = record_in(state)
    if not record.is_terminal:
        record = step(record, e.ExecutionClaimed(new_epoch=3)).record
    claimed, before = record, copy.deepcopy(record)
    event = event_for(event_type, claimed)
    stale = dataclasses.replace(event, execution_epoch=claimed.execution_epoch + offset)
    with pytest.raises(StaleEpoch):
        step(claimed, stale)
    assert claimed == before


def test_lower_claim_is_stale_epoch() -> None:
    """ExecutionClaimed with an epoch not above the record's raises StaleEpoch."""
    record = step(record_in(State.WORKING), e.ExecutionClaimed(new_epoch=2)).record
    before = copy.deepcopy(record)
    for epoch in (0, 1, 2):
        with pytest.raises(StaleEpoch):
            step(record, e.ExecutionClaimed(new_epoch=epoch))
    assert record == before


# --- the exact target and commands of every (state, event) pair ---------------------------
#
# Each pin says, for the record that leads into a state and one event, which target the
# machine chooses and exactly which commands it returns (the ``at`` of a command relative
# to the event's time; jitter 0.5; the representatives of builders.py). Every (state,
# event, target) triple the table allows is pinned by at least one case, so a handler
# that sent, say, every WorkingObserved to reconciliation fails here.

ANSWERED = e.InputAnswered(input_round=1, keys=("q1",))
OK = ServerStatus.COMPLETED


def _no_lookup(**kw: object) -> OperationRecord:
    return new_record(submission_lookup=False, **kw)  # type: ignore[arg-type]


def _spent(state: State) -> OperationRecord:
    """A record in ``state`` whose 0.5 s wait budget is spent by the next event."""
    record = new_record(budget_s=0.5)
    ack = e.SubmitAcknowledged(operation_id=OP_ID, poll_interval_s=5.0)
    working = step(record, ack, now=T0 + 0.1).record
    match state:
        case State.SUBMITTING | State.SUBMISSION_UNKNOWN:
            lost = step(record, e.SubmitOutcomeLost(reason="reset"), now=T0 + 0.1).record
            return record if state is State.SUBMITTING else lost
        case State.NOT_FOUND_SAFE:
            lost = step(record, e.SubmitOutcomeLost(reason="reset"), now=T0 + 0.1).record
            return step(lost, e.SubmissionNeverCreated(), now=T0 + 0.2).record
        case State.WORKING:
            return working
        case State.INPUT_REQUIRED:
            return step(working, e.InputRequestObserved(keys=("q1",)), now=T0 + 0.2).record
        case State.CANCEL_REQUESTED:
            return step(working, e.CancelRequested(), now=T0 + 0.2).record
        case State.RECONCILIATION_REQUIRED:
            return lost_no_lookup()
    raise AssertionError(state)  # pragma: no cover


def lost_no_lookup() -> OperationRecord:
    """A lost create that no protocol can prove: waiting for an operator."""
    return step(_no_lookup(budget_s=0.5), e.SubmitOutcomeLost(reason="reset"), now=T0).record


def _answered_then_working() -> OperationRecord:
    """WORKING again after the round's only key was answered (budget spent next)."""
    record = _spent(State.INPUT_REQUIRED)
    answered = step(record, ANSWERED, now=T0 + 0.3).record
    return step(answered, e.WorkingObserved(poll_interval_s=5.0), now=T0 + 0.4).record


def _describe(transition: Transition, now: float) -> tuple[str, ...]:
    out = []
    for command in transition.commands:
        parts = []
        for field in dataclasses.fields(command):
            value = getattr(command, field.name)
            if field.name == "at":
                parts.append(f"at=+{value - now:.4g}")
            elif field.name == "receipt":
                parts.append(f"{value.terminal_status.value}/{value.result_kind.value}")
            elif field.name == "submission_key":
                parts.append("key")
            elif field.name == "reason":
                parts.append(value.split(":")[0])
            elif value not in (None, ()):
                parts.append(f"{field.name}={value!r}")
        out.append(f"{command.name}({', '.join(parts)})")
    return tuple(out)


Case = tuple[
    State, str, Callable[[], tuple[OperationRecord, e.Event]] | None, State, tuple[str, ...]
]

POLL = "Poll(operation_id='op-1', at=+5.5)"
ESCALATE = "EscalateReconciliation(operator asked)"
BUDGET = "EscalateReconciliation(wait budget reached while the server still reports it running)"
UNKNOWN = (
    "EscalateReconciliation(operation 'op-1' is unknown to the server before its expiry"
    " (id reused, purged early, or no longer ours))"
)
LOOKUP = "LookupSubmission(key, at=+0)"
S = State

REPRESENTATIVE: list[Case] = [
    (S.SUBMITTING, "SubmitAcknowledged", None, S.WORKING, (POLL,)),
    (S.SUBMITTING, "SubmitOutcomeLost", None, S.SUBMISSION_UNKNOWN, (LOOKUP,)),
    (S.SUBMITTING, "SubmitRejected", None, S.ACCEPTED, ("AcceptTerminal(failed/protocol_error)",)),
    (S.SUBMITTING, "ResultFetched", None, S.ACCEPTED, ("AcceptTerminal(completed/value)",)),
    (S.SUBMITTING, "RequestFailed", None, S.SUBMITTING, ("SendSubmit(key, attempt=1, at=+0.25)",)),
    (S.SUBMITTING, "ExecutionClaimed", None, S.SUBMITTING, ()),
    (S.SUBMITTING, "ReconciliationEscalated", None, S.RECONCILIATION_REQUIRED, (ESCALATE,)),
    (S.SUBMISSION_UNKNOWN, "SubmitAcknowledged", None, S.WORKING, (POLL,)),
    (S.SUBMISSION_UNKNOWN, "SubmitOutcomeLost", None, S.SUBMISSION_UNKNOWN, (LOOKUP,)),
    (
        S.SUBMISSION_UNKNOWN,
        "SubmitRejected",
        None,
        S.ACCEPTED,
        ("AcceptTerminal(failed/protocol_error)",),
    ),
    (
        S.SUBMISSION_UNKNOWN,
        "SubmissionFound",
        None,
        S.WORKING,
        ("Poll(operation_id='op-1', at=+2.2)",),
    ),
    (
        S.SUBMISSION_UNKNOWN,
        "SubmissionNeverCreated",
        None,
        S.NOT_FOUND_SAFE,
        ("SendSubmit(key, attempt=2, at=+0)",),
    ),
    (S.SUBMISSION_UNKNOWN, "ResultFetched", None, S.ACCEPTED, ("AcceptTerminal(completed/value)",)),
    (
        S.SUBMISSION_UNKNOWN,
        "RequestFailed",
        None,
        S.SUBMISSION_UNKNOWN,
        ("LookupSubmission(key, at=+0.25)",),
    ),
    (S.SUBMISSION_UNKNOWN, "ExecutionClaimed", None, S.SUBMISSION_UNKNOWN, (LOOKUP,)),
    (S.SUBMISSION_UNKNOWN, "ReconciliationEscalated", None, S.RECONCILIATION_REQUIRED, (ESCALATE,)),
    (S.NOT_FOUND_SAFE, "SubmitAcknowledged", None, S.WORKING, (POLL,)),
    (S.NOT_FOUND_SAFE, "SubmitOutcomeLost", None, S.SUBMISSION_UNKNOWN, (LOOKUP,)),
    (
        S.NOT_FOUND_SAFE,
        "SubmitRejected",
        None,
        S.ACCEPTED,
        ("AcceptTerminal(failed/protocol_error)",),
    ),
    (S.NOT_FOUND_SAFE, "ResultFetched", None, S.ACCEPTED, ("AcceptTerminal(completed/value)",)),
    (
        S.NOT_FOUND_SAFE,
        "RequestFailed",
        None,
        S.NOT_FOUND_SAFE,
        ("SendSubmit(key, attempt=2, at=+0.25)",),
    ),
    (S.NOT_FOUND_SAFE, "ExecutionClaimed", None, S.NOT_FOUND_SAFE, ()),
    (S.NOT_FOUND_SAFE, "ReconciliationEscalated", None, S.RECONCILIATION_REQUIRED, (ESCALATE,)),
    (S.WORKING, "WorkingObserved", None, S.WORKING, (POLL,)),
    (
        S.WORKING,
        "InputRequestObserved",
        None,
        S.INPUT_REQUIRED,
        ("AskInput(operation_id='op-1', input_round=1, keys=('q2',))",),
    ),
    (
        S.WORKING,
        "TerminalObserved",
        None,
        S.TERMINAL_OBSERVED,
        ("StartResultFetch(operation_id='op-1')",),
    ),
    (
        S.WORKING,
        "CancelRequested",
        None,
        S.CANCEL_REQUESTED,
        ("SendCancel(operation_id='op-1', cancel_generation=1, at=+0)",),
    ),
    (
        S.WORKING,
        "CancellationObserved",
        None,
        S.CANCELLED_ACCEPTED,
        ("AcceptTerminal(cancelled/cancelled)",),
    ),
    (S.WORKING, "RequestFailed", None, S.WORKING, ("Poll(operation_id='op-1', at=+6.25)",)),
    (S.WORKING, "OperationNotFound", None, S.RECONCILIATION_REQUIRED, (UNKNOWN,)),
    # A claim keeps the poll the previous executor planned (no sooner, X3).
    (S.WORKING, "ExecutionClaimed", None, S.WORKING, ("Poll(operation_id='op-1', at=+4.5)",)),
    (S.WORKING, "ReconciliationEscalated", None, S.RECONCILIATION_REQUIRED, (ESCALATE,)),
    (S.INPUT_REQUIRED, "WorkingObserved", None, S.WORKING, (POLL,)),
    (
        S.INPUT_REQUIRED,
        "InputRequestObserved",
        None,
        S.INPUT_REQUIRED,
        ("AskInput(operation_id='op-1', input_round=2, keys=('q2',))",),
    ),
    (
        S.INPUT_REQUIRED,
        "InputAnswered",
        None,
        S.INPUT_REQUIRED,
        ("SendInputResponse(operation_id='op-1', input_round=1, keys=('q1',), at=+0)", POLL),
    ),
    # A refused answer: the same key is asked again, in a new round (X4).
    (
        S.INPUT_REQUIRED,
        "InputRefused",
        None,
        S.INPUT_REQUIRED,
        ("AskInput(operation_id='op-1', input_round=2, keys=('q1',))",),
    ),
    (
        S.INPUT_REQUIRED,
        "TerminalObserved",
        None,
        S.TERMINAL_OBSERVED,
        ("StartResultFetch(operation_id='op-1')",),
    ),
    (
        S.INPUT_REQUIRED,
        "CancelRequested",
        None,
        S.CANCEL_REQUESTED,
        ("SendCancel(operation_id='op-1', cancel_generation=1, at=+0)",),
    ),
    (
        S.INPUT_REQUIRED,
        "CancellationObserved",
        None,
        S.CANCELLED_ACCEPTED,
        ("AcceptTerminal(cancelled/cancelled)",),
    ),
    (
        S.INPUT_REQUIRED,
        "RequestFailed",
        None,
        S.INPUT_REQUIRED,
        ("Poll(operation_id='op-1', at=+6.25)",),
    ),
    (S.INPUT_REQUIRED, "OperationNotFound", None, S.RECONCILIATION_REQUIRED, (UNKNOWN,)),
    (
        S.INPUT_REQUIRED,
        "ExecutionClaimed",
        None,
        S.INPUT_REQUIRED,
        ("AskInput(operation_id='op-1', input_round=1, keys=('q1',))",),
    ),
    (S.INPUT_REQUIRED, "ReconciliationEscalated", None, S.RECONCILIATION_REQUIRED, (ESCALATE,)),
    (S.CANCEL_REQUESTED, "WorkingObserved", None, S.CANCEL_REQUESTED, (POLL,)),
    # A cancel is pending: nobody is asked for input, polling goes on (X4, X5).
    (S.CANCEL_REQUESTED, "InputRequestObserved", None, S.CANCEL_REQUESTED, (POLL,)),
    (
        S.CANCEL_REQUESTED,
        "TerminalObserved",
        None,
        S.TERMINAL_OBSERVED,
        ("StartResultFetch(operation_id='op-1')",),
    ),
    (
        S.CANCEL_REQUESTED,
        "CancelRequested",
        None,
        S.CANCEL_REQUESTED,
        ("SendCancel(operation_id='op-1', cancel_generation=2, at=+0)",),
    ),
    (S.CANCEL_REQUESTED, "CancelAcknowledged", None, S.CANCEL_REQUESTED, (POLL,)),
    (S.CANCEL_REQUESTED, "CancelRefused", None, S.CANCEL_REQUESTED, (POLL,)),
    (
        S.CANCEL_REQUESTED,
        "CancellationObserved",
        None,
        S.CANCELLED_ACCEPTED,
        ("AcceptTerminal(cancelled/cancelled)",),
    ),
    (
        S.CANCEL_REQUESTED,
        "RequestFailed",
        None,
        S.CANCEL_REQUESTED,
        ("SendCancel(operation_id='op-1', cancel_generation=1, at=+0.25)",),
    ),
    (S.CANCEL_REQUESTED, "OperationNotFound", None, S.RECONCILIATION_REQUIRED, (UNKNOWN,)),
    (
        S.CANCEL_REQUESTED,
        "ExecutionClaimed",
        None,
        S.CANCEL_REQUESTED,
        ("SendCancel(operation_id='op-1', cancel_generation=1, at=+0)",),
    ),
    (S.CANCEL_REQUESTED, "ReconciliationEscalated", None, S.RECONCILIATION_REQUIRED, (ESCALATE,)),
    (
        S.TERMINAL_OBSERVED,
        "TerminalObserved",
        None,
        S.RECONCILIATION_REQUIRED,
        ("EscalateReconciliation(server reported two terminals)",),
    ),
    (
        S.TERMINAL_OBSERVED,
        "ResultFetchStarted",
        None,
        S.FETCHING_RESULT,
        ("FetchResult(operation_id='op-1', at=+0)",),
    ),
    (
        S.TERMINAL_OBSERVED,
        "CancellationObserved",
        None,
        S.RECONCILIATION_REQUIRED,
        ("EscalateReconciliation(server reported two terminals)",),
    ),
    (S.TERMINAL_OBSERVED, "OperationNotFound", None, S.RECONCILIATION_REQUIRED, (UNKNOWN,)),
    (
        S.TERMINAL_OBSERVED,
        "ExecutionClaimed",
        None,
        S.TERMINAL_OBSERVED,
        ("StartResultFetch(operation_id='op-1')",),
    ),
    (S.TERMINAL_OBSERVED, "ReconciliationEscalated", None, S.RECONCILIATION_REQUIRED, (ESCALATE,)),
    (
        S.FETCHING_RESULT,
        "TerminalObserved",
        None,
        S.RECONCILIATION_REQUIRED,
        ("EscalateReconciliation(server reported two terminals)",),
    ),
    (S.FETCHING_RESULT, "ResultFetched", None, S.ACCEPTED, ("AcceptTerminal(completed/value)",)),
    (
        S.FETCHING_RESULT,
        "ResultFetchFailed",
        None,
        S.FETCHING_RESULT,
        ("FetchResult(operation_id='op-1', at=+0.25)",),
    ),
    (
        S.FETCHING_RESULT,
        "CancellationObserved",
        None,
        S.RECONCILIATION_REQUIRED,
        ("EscalateReconciliation(server reported two terminals)",),
    ),
    (
        S.FETCHING_RESULT,
        "RequestFailed",
        None,
        S.FETCHING_RESULT,
        ("FetchResult(operation_id='op-1', at=+0.25)",),
    ),
    (S.FETCHING_RESULT, "OperationNotFound", None, S.RECONCILIATION_REQUIRED, (UNKNOWN,)),
    (
        S.FETCHING_RESULT,
        "ExecutionClaimed",
        None,
        S.FETCHING_RESULT,
        ("FetchResult(operation_id='op-1', at=+0)",),
    ),
    (S.FETCHING_RESULT, "ReconciliationEscalated", None, S.RECONCILIATION_REQUIRED, (ESCALATE,)),
    (
        S.RECONCILIATION_REQUIRED,
        "SubmissionFound",
        None,
        S.WORKING,
        ("Poll(operation_id='op-1', at=+2.2)",),
    ),
    (
        S.RECONCILIATION_REQUIRED,
        "SubmissionNeverCreated",
        None,
        S.NOT_FOUND_SAFE,
        ("SendSubmit(key, attempt=2, at=+0)",),
    ),
    (S.RECONCILIATION_REQUIRED, "ExecutionClaimed", None, S.RECONCILIATION_REQUIRED, ()),
    (S.RECONCILIATION_REQUIRED, "ReconciledManually", None, S.WORKING, (POLL,)),
    (
        S.CANCELLED_ACCEPTED,
        "TerminalObserved",
        None,
        S.CANCELLED_ACCEPTED,
        ("EscalateReconciliation(EFFECT_RECONCILIATION_REQUIRED)",),
    ),
]

RECON = S.RECONCILIATION_REQUIRED
NOT_RETRYABLE = "EscalateReconciliation(not retryable)"
UNAUTHORIZED = FailureKind.UNAUTHORIZED


def _failed(state: State) -> Callable[[], tuple[OperationRecord, e.Event]]:
    """A request of ``state`` that can never succeed (401): an operator looks (X9)."""

    def setup() -> tuple[OperationRecord, e.Event]:
        record = record_in(state)
        request = REQUEST_FOR_STATE.get(state, RequestKind.POLL)
        return record, e.RequestFailed(request=request, failure=UNAUTHORIZED)

    return setup


def _lost_times(times: int, **kw: object) -> OperationRecord:
    record = new_record(**kw)  # type: ignore[arg-type]
    for _ in range(times):
        record = step(record, e.SubmitOutcomeLost(reason="reset")).record
    return record


def _proven_absent_times(times: int) -> OperationRecord:
    """SUBMISSION_UNKNOWN after ``times`` proofs of absence and resends (key lookup)."""
    record = step(new_record(), e.SubmitOutcomeLost(reason="reset")).record
    for _ in range(times):
        record = step(record, e.SubmissionNeverCreated()).record
        record = step(record, e.SubmitOutcomeLost(reason="reset")).record
    return record


def _never_created_no_lookup() -> OperationRecord:
    """NOT_FOUND_SAFE by an operator's proof, at a server without lookup by key."""
    never = e.ReconciledManually(resolution=e.Resolution.NEVER_CREATED, actor="op", note="n")
    return step(lost_no_lookup(), never).record


def _resolved(resolution: e.Resolution, **kw: object) -> e.Event:
    return e.ReconciledManually(resolution=resolution, actor="op", note="checked", **kw)  # type: ignore[arg-type]


ACK = e.SubmitAcknowledged(operation_id=OP_ID, poll_interval_s=5.0)
LOST = e.SubmitOutcomeLost(reason="reset")
UNPROVABLE = "EscalateReconciliation(create outcome unknown and unprovable)"

BRANCHES: list[Case] = [
    # The wait budget spent: every handler that would plan a poll escalates (X3).
    (S.SUBMITTING, "SubmitAcknowledged", lambda: (_spent(S.SUBMITTING), ACK), RECON, (BUDGET,)),
    (
        S.NOT_FOUND_SAFE,
        "SubmitAcknowledged",
        lambda: (_spent(S.NOT_FOUND_SAFE), ACK),
        RECON,
        (BUDGET,),
    ),
    (
        S.SUBMISSION_UNKNOWN,
        "SubmitAcknowledged",
        lambda: (_spent(S.SUBMISSION_UNKNOWN), ACK),
        RECON,
        (BUDGET,),
    ),
    (
        S.SUBMISSION_UNKNOWN,
        "SubmissionFound",
        lambda: (_spent(S.SUBMISSION_UNKNOWN), e.SubmissionFound(operation_id=OP_ID)),
        RECON,
        (BUDGET,),
    ),
    (
        S.RECONCILIATION_REQUIRED,
        "SubmissionFound",
        lambda: (_spent(RECON), e.SubmissionFound(operation_id=OP_ID)),
        RECON,
        (BUDGET,),
    ),
    (
        S.WORKING,
        "WorkingObserved",
        lambda: (_spent(S.WORKING), e.WorkingObserved()),
        RECON,
        (BUDGET,),
    ),
    (
        S.INPUT_REQUIRED,
        "WorkingObserved",
        lambda: (_spent(S.INPUT_REQUIRED), e.WorkingObserved()),
        RECON,
        (BUDGET,),
    ),
    (
        S.CANCEL_REQUESTED,
        "WorkingObserved",
        lambda: (_spent(S.CANCEL_REQUESTED), e.WorkingObserved()),
        RECON,
        (BUDGET,),
    ),
    # Every key answered, the server still asks: deliver again and poll, budget allowing.
    (
        S.WORKING,
        "InputRequestObserved",
        lambda: (_answered_then_working(), e.InputRequestObserved(keys=("q1",))),
        RECON,
        (BUDGET,),
    ),
    (
        S.INPUT_REQUIRED,
        "InputRequestObserved",
        lambda: (
            step(_spent(S.INPUT_REQUIRED), ANSWERED, now=T0 + 0.3).record,
            e.InputRequestObserved(keys=("q1",)),
        ),
        RECON,
        (BUDGET,),
    ),
    (
        S.CANCEL_REQUESTED,
        "InputRequestObserved",
        lambda: (_spent(S.CANCEL_REQUESTED), e.InputRequestObserved(keys=("q1",))),
        RECON,
        (BUDGET,),
    ),
    (
        S.INPUT_REQUIRED,
        "InputAnswered",
        lambda: (_spent(S.INPUT_REQUIRED), ANSWERED),
        RECON,
        ("SendInputResponse(operation_id='op-1', input_round=1, keys=('q1',), at=+0)", BUDGET),
    ),
    (
        S.CANCEL_REQUESTED,
        "CancelAcknowledged",
        lambda: (_spent(S.CANCEL_REQUESTED), e.CancelAcknowledged(cancel_generation=1)),
        RECON,
        (BUDGET,),
    ),
    # A lost create nobody can prove (X2): no lookup, not idempotent, or attempts spent.
    (S.SUBMITTING, "SubmitOutcomeLost", lambda: (_no_lookup(), LOST), RECON, (UNPROVABLE,)),
    (
        S.SUBMISSION_UNKNOWN,
        "SubmitOutcomeLost",
        lambda: (_lost_times(4, submission_lookup=False, tool_idempotent=True), LOST),
        RECON,
        ("EscalateReconciliation(create outcome unknown after 5 attempts)",),
    ),
    (
        S.NOT_FOUND_SAFE,
        "SubmitOutcomeLost",
        lambda: (_never_created_no_lookup(), LOST),
        RECON,
        (UNPROVABLE,),
    ),
    (
        S.SUBMISSION_UNKNOWN,
        "SubmissionNeverCreated",
        lambda: (_proven_absent_times(4), e.SubmissionNeverCreated()),
        RECON,
        ("EscalateReconciliation(never created, but 5 creates were sent already)",),
    ),
    (
        S.RECONCILIATION_REQUIRED,
        "SubmissionNeverCreated",
        lambda: (
            step(_proven_absent_times(4), e.ReconciliationEscalated(reason="x")).record,
            e.SubmissionNeverCreated(),
        ),
        RECON,
        ("EscalateReconciliation(never created, but 5 creates were sent already)",),
    ),
    # Contradictions and failures that retrying cannot cure (X6, X9).
    (
        S.FETCHING_RESULT,
        "ResultFetched",
        lambda: (
            record_in(S.FETCHING_RESULT),
            e.ResultFetched(
                status=ServerStatus.FAILED,
                result_kind=ResultKind.VALUE,
                result_digest=RESULT_DIGEST,
            ),
        ),
        RECON,
        ("EscalateReconciliation(fetched a failed result, but observed completed)",),
    ),
    (
        S.FETCHING_RESULT,
        "ResultFetchFailed",
        lambda: (record_in(S.FETCHING_RESULT), e.ResultFetchFailed(reason="bad", retryable=False)),
        RECON,
        ("EscalateReconciliation(result could not be obtained)",),
    ),
    *(
        (state, "RequestFailed", _failed(state), RECON, (NOT_RETRYABLE,))
        for state in (
            S.SUBMITTING,
            S.NOT_FOUND_SAFE,
            S.SUBMISSION_UNKNOWN,
            S.WORKING,
            S.INPUT_REQUIRED,
            S.CANCEL_REQUESTED,
            S.FETCHING_RESULT,
        )
    ),
    # An operator's resolutions (X7).
    (
        RECON,
        "ReconciledManually",
        lambda: (
            record_in(RECON),
            _resolved(e.Resolution.COMPLETED, operation_id=OP_ID, result_digest=RESULT_DIGEST),
        ),
        S.ACCEPTED,
        ("AcceptTerminal(completed/value)",),
    ),
    # The kind the operator's result carries, read by its protocol's rules, is kept.
    (
        RECON,
        "ReconciledManually",
        lambda: (
            record_in(RECON),
            _resolved(
                e.Resolution.COMPLETED,
                result_digest=RESULT_DIGEST,
                result_kind=ResultKind.TOOL_ERROR,
            ),
        ),
        S.ACCEPTED,
        ("AcceptTerminal(completed/tool_error)",),
    ),
    (
        RECON,
        "ReconciledManually",
        lambda: (
            record_in(RECON),
            _resolved(
                e.Resolution.FAILED,
                result_digest=RESULT_DIGEST,
                result_kind=ResultKind.PROTOCOL_ERROR,
            ),
        ),
        S.ACCEPTED,
        ("AcceptTerminal(failed/protocol_error)",),
    ),
    (
        RECON,
        "ReconciledManually",
        lambda: (record_in(RECON), _resolved(e.Resolution.CANCELLED, result_digest=CANCEL_DIGEST)),
        S.CANCELLED_ACCEPTED,
        ("AcceptTerminal(cancelled/cancelled)",),
    ),
    (
        RECON,
        "ReconciledManually",
        lambda: (lost_no_lookup(), _resolved(e.Resolution.NEVER_CREATED)),
        S.NOT_FOUND_SAFE,
        ("SendSubmit(key, attempt=1, at=+0)",),
    ),
    (
        RECON,
        "ReconciledManually",
        lambda: (_spent(RECON), _resolved(e.Resolution.RESUME, operation_id=OP_ID)),
        RECON,
        (BUDGET,),
    ),
]
PINNED = REPRESENTATIVE + BRANCHES
EVENT_BY_NAME = {t.__name__: t for t in e.EVENT_TYPES}


def _outcome(case: Case) -> tuple[State, tuple[str, ...]]:
    state, name, setup, _target, _commands = case
    if setup is None:
        record = record_in(state)
        event = event_for(EVENT_BY_NAME[name], record)
    else:
        record, event = setup()
    assert record.state is state
    assert event.name == name
    now = record.updated_at + 1.0
    moved = step(record, event, now=now)
    return moved.record.state, _describe(moved, now)


@pytest.mark.parametrize("case", PINNED, ids=[f"{c[0].name}-{c[1]}-{c[3].name}" for c in PINNED])
def test_each_pair_chooses_its_pinned_target_and_commands(case: Case) -> None:
    """Given the record that leads into the state, the event moves it to exactly the
    pinned target with exactly the pinned commands."""
    assert _outcome(case) == (case[3], case[4])


def test_every_allowed_pair_and_target_is_pinned() -> None:
    """Every (state, event) pair has its representative pin, and every target the table
    allows for it is pinned by some case."""
    assert {(c[0], c[1]) for c in REPRESENTATIVE} == set(TRANSITIONS)
    allowed = {(s, n, t) for (s, n), targets in TRANSITIONS.items() for t in targets}
    assert {(c[0], c[1], c[3]) for c in PINNED} == allowed


@pytest.mark.parametrize(
    ("resolution", "kind"),
    [
        (e.Resolution.COMPLETED, ResultKind.PROTOCOL_ERROR),
        (e.Resolution.COMPLETED, ResultKind.CANCELLED),
        (e.Resolution.FAILED, ResultKind.VALUE),
        (e.Resolution.CANCELLED, ResultKind.VALUE),
        (e.Resolution.RESUME, ResultKind.VALUE),
    ],
)
def test_a_resolution_refuses_a_kind_its_status_cannot_hold(
    resolution: e.Resolution, kind: ResultKind
) -> None:
    """A completed outcome holds a value or a tool error, a failed one a tool error or a
    protocol error, a cancelled one a cancellation, and a resolution that settles
    nothing holds none."""
    with pytest.raises(ValueError, match="cannot hold a result of kind"):
        _resolved(resolution, result_digest=RESULT_DIGEST, result_kind=kind)
