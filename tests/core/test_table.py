"""The transition table (SPEC L2): every (state, event type) pair, the graph's shape,
terminal absorption, and execution-epoch fencing.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools

import pytest

from longcall.core import events as e
from longcall.core import machine
from longcall.core.record import ServerStatus
from longcall.core.states import TERMINAL_STATES, TRANSITIONS, State
from longcall.errors import IllegalTransition, StaleEpoch, StaleEvent

from .builders import event_for, record_in, step

PAIRS = list(itertools.product(State, e.EVENT_TYPES))
EVENT_NAMES = {t.__name__ for t in e.EVENT_TYPES}

# Pairs the table allows in which a *replayed or older* instance of the event raises
# StaleEvent (the handler's documented replay cases). The representatives from
# builders.event_for are never replays, so every allowed pair must move; these are
# exercised with explicit replays in test_documented_replays_are_stale.
DOCUMENTED_REPLAYS = {
    (State.INPUT_REQUIRED, "InputRequestObserved"),
    (State.INPUT_REQUIRED, "InputAnswered"),
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
    assert len(PAIRS) == len(State) * len(e.EVENT_TYPES) == 11 * 21
    assert set(TRANSITIONS) <= set(itertools.product(State, EVENT_NAMES))


def test_documented_replays_are_stale() -> None:
    """A replay of each documented replay case raises StaleEvent and changes nothing."""
    replays: list[tuple[State, e.Event]] = []
    inp = record_in(State.INPUT_REQUIRED)
    replays.append((State.INPUT_REQUIRED, e.InputRequestObserved(keys=inp.input_keys_pending)))
    replays.append((State.INPUT_REQUIRED, e.InputAnswered(input_round=0, keys=("q1",))))
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
