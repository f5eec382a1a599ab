"""Hypothesis stateful test of the machine: random well-formed events (legal or not,
replays, stale epochs) at random moments must keep the machine's invariants (SPEC L2,
L4, L5, X3, X5).
"""

from __future__ import annotations

import copy
import dataclasses
import functools

import hypothesis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from longcall.core import commands as c
from longcall.core import events as e
from longcall.core.machine import Policy, handle, new_operation, resume
from longcall.core.record import OperationRecord, ResultKind, ServerStatus, TerminalReceipt
from longcall.core.retry import FailureKind, RequestKind, RetryPolicy
from longcall.core.states import TERMINAL_STATES, TRANSITIONS, State
from longcall.errors import IllegalTransition, StaleEpoch, StaleEvent

KEYS = ("a", "b", "c")
OP_IDS = ("op-1", "op-2")
DIGESTS = ("sha256:" + "1" * 64, "sha256:" + "2" * 64)
text = st.sampled_from(("x", "reason", "server said so"))
maybe_interval = st.none() | st.floats(0.0, 30.0)
terminal_status = st.sampled_from((ServerStatus.COMPLETED, ServerStatus.FAILED))


def events_for(record: OperationRecord) -> st.SearchStrategy[e.Event]:
    """Well-formed events of every type, some aimed at ``record``, some stale or replayed."""
    return _events(
        record.state,
        record.execution_epoch,
        record.input_round,
        record.input_keys_pending,
        record.cancel_generation,
    )


@functools.lru_cache(maxsize=4096)
def _events(
    state: State, epoch: int, input_round: int, pending: tuple[str, ...], cancel_generation: int
) -> st.SearchStrategy[e.Event]:
    key_sets = st.lists(st.sampled_from(KEYS), min_size=1, max_size=3, unique=True).map(tuple)
    answer_keys = (
        st.lists(st.sampled_from(pending), min_size=1, max_size=len(pending), unique=True).map(
            tuple
        )
        if pending
        else key_sets
    )
    per_type: list[st.SearchStrategy[e.Event]] = [
        st.builds(
            e.SubmitAcknowledged,
            operation_id=st.sampled_from(OP_IDS),
            poll_interval_s=maybe_interval,
            ttl_s=st.none() | st.floats(0.0, 500.0),
        ),
        st.builds(e.SubmitOutcomeLost, reason=text),
        st.builds(e.SubmitRejected, reason=text, result_digest=st.sampled_from(DIGESTS)),
        st.builds(
            e.SubmissionFound,
            operation_id=st.sampled_from(OP_IDS),
            poll_interval_s=maybe_interval,
            ttl_s=st.none() | st.floats(0.0, 500.0),
        ),
        st.just(e.SubmissionNeverCreated()),
        st.builds(
            e.WorkingObserved,
            poll_interval_s=maybe_interval,
            progressed=st.booleans(),
            status_message=st.none() | text,
        ),
        st.builds(
            e.InputRequestObserved,
            keys=st.just(pending) if pending else key_sets,
            deadline_at=st.none() | st.floats(0.0, 10_000.0),
            poll_interval_s=maybe_interval,
        )
        | st.builds(e.InputRequestObserved, keys=key_sets),
        st.builds(
            e.InputAnswered,
            input_round=st.sampled_from((input_round, input_round - 1)),
            keys=answer_keys,
        ),
        st.builds(
            e.InputRefused,
            input_round=st.sampled_from((input_round, input_round - 1)),
            keys=key_sets,
            reason=text,
        ),
        st.builds(e.TerminalObserved, status=terminal_status),
        st.just(e.ResultFetchStarted()),
        st.builds(
            e.ResultFetched,
            status=terminal_status,
            result_kind=st.sampled_from(
                (ResultKind.VALUE, ResultKind.TOOL_ERROR, ResultKind.PROTOCOL_ERROR)
            ),
            result_digest=st.sampled_from(DIGESTS),
            empty=st.booleans(),
            operation_id=st.none() | st.sampled_from(OP_IDS),
            warnings=st.sampled_from(((), ("partial_schema",))),
        ),
        st.builds(
            e.ResultFetchFailed,
            reason=text,
            retryable=st.booleans(),
            retry_after_s=st.none() | st.floats(0.0, 120.0),
        ),
        st.just(e.CancelRequested()),
        st.builds(
            e.CancelAcknowledged,
            cancel_generation=st.sampled_from((cancel_generation, cancel_generation - 1)),
        ),
        st.builds(e.CancelRefused, reason=text),
        st.builds(e.CancellationObserved, result_digest=st.sampled_from(DIGESTS)),
        st.builds(
            e.RequestFailed,
            request=st.sampled_from(RequestKind),
            failure=st.sampled_from(FailureKind),
            retry_after_s=st.none() | st.floats(0.0, 120.0),
        ),
        st.builds(e.OperationNotFound, detail=st.sampled_from(("", "404"))),
        st.builds(e.ExecutionClaimed, new_epoch=st.integers(epoch - 1, epoch + 2)),
        st.builds(e.ReconciliationEscalated, reason=text),
        st.builds(
            e.ReconciledManually,
            resolution=st.sampled_from(e.Resolution),
            actor=st.just("ops@example"),
            note=text,
            operation_id=st.none() | st.sampled_from(OP_IDS),
            result_digest=st.sampled_from(DIGESTS),
        ),
    ]
    assert len(per_type) == len(e.EVENT_TYPES)
    # Three draws in four come from the types the table allows here, leaving out the
    # shortcuts straight to a terminal before the server made any progress, so runs go
    # deep (those shortcuts still come from the pool of every type).
    legal = [
        strategy
        for strategy, event_type in zip(per_type, e.EVENT_TYPES, strict=True)
        if (state, event_type.__name__) in TRANSITIONS
        and (
            not TRANSITIONS[(state, event_type.__name__)] <= TERMINAL_STATES
            or state in (State.FETCHING_RESULT, State.CANCEL_REQUESTED)
        )
    ]
    any_event = (
        st.one_of(*[st.one_of(legal)] * 3, st.one_of(per_type)) if legal else st.one_of(per_type)
    )
    epochs = st.sampled_from((None, None, epoch, epoch, epoch, epoch, epoch - 1, epoch + 1))
    return st.tuples(any_event, epochs).map(
        lambda pair: dataclasses.replace(pair[0], execution_epoch=pair[1])
    )


class MachineModel(RuleBasedStateMachine):
    """Feeds random events to one operation and checks the invariants after each."""

    def __init__(self) -> None:
        super().__init__()
        self.record: OperationRecord
        self.now = 0.0
        self.policy = Policy()
        self.accepts = 0
        self.cancel_won = False
        self.accepted_events = 0

    @initialize(
        lookup=st.booleans(),
        idempotent=st.booleans(),
        budget_s=st.none() | st.floats(1.0, 600.0),
        attempts_max=st.integers(1, 4),
        now=st.floats(0.0, 1e6),
    )
    def start(
        self,
        lookup: bool,
        idempotent: bool,
        budget_s: float | None,
        attempts_max: int,
        now: float,
    ) -> None:
        """Create the operation with random capabilities, budget and retry limits."""
        self.policy = Policy(
            retry=RetryPolicy(attempts_max=attempts_max), submit_attempts_max=attempts_max
        )
        self.now = now
        made = new_operation(
            call_node_id="run/node",
            request_digest="sha256:req",
            tool_name="tool",
            tool_descriptor_digest="sha256:desc",
            principal="p",
            server="s",
            protocol="mcp-2026-07-28",
            adapter_version="1",
            now=now,
            submission_lookup=lookup,
            tool_idempotent=idempotent,
            budget_s=budget_s,
        )
        assert made.commands == (
            c.SendSubmit(submission_key=made.record.submission_key, attempt=1, at=now),
        )
        self.record = made.record

    @rule(data=st.data(), dt=st.just(0.0) | st.floats(0.0, 200.0), jitter=st.floats(0.0, 1.0))
    def feed(self, data: st.DataObject, dt: float, jitter: float) -> None:
        """Let time pass, feed one random event; a refused one leaves the record unchanged."""
        self.now += dt
        self._check_resume()
        old = self.record
        snapshot = copy.deepcopy(old)
        event = data.draw(events_for(old), label="event")
        try:
            moved = handle(old, event, now=self.now, jitter=jitter, policy=self.policy)
        except IllegalTransition:
            assert (old.state, event.name) not in TRANSITIONS
            assert old == snapshot
            return
        except StaleEvent as refused:
            if isinstance(refused, StaleEpoch):
                assert event.execution_epoch not in (None, old.execution_epoch) or (
                    isinstance(event, e.ExecutionClaimed) and event.new_epoch <= old.execution_epoch
                )
            assert old == snapshot
            return
        new = moved.record
        assert old == snapshot
        self.accepted_events += 1
        assert new.state in TRANSITIONS[(old.state, event.name)]
        assert new.version == old.version + 1
        assert new.updated_at == self.now
        if old.state in TERMINAL_STATES:
            assert new.state is old.state
        if new.next_poll_at is not None and new.next_poll_at != old.next_poll_at:
            assert new.next_poll_at >= self.now
        assert new.cancel_generation >= old.cancel_generation
        for command in moved.commands:
            at = getattr(command, "at", None)
            if at is not None:
                assert at >= self.now
        accepts = [cmd for cmd in moved.commands if isinstance(cmd, c.AcceptTerminal)]
        if accepts:
            assert len(accepts) == 1
            assert new.state in TERMINAL_STATES
            assert old.state not in TERMINAL_STATES
            assert accepts[0].receipt == TerminalReceipt.for_record(new)
        elif new.state in TERMINAL_STATES:
            assert old.state in TERMINAL_STATES
        if self.cancel_won:
            assert new.state is State.CANCELLED_ACCEPTED
            assert not accepts
            if isinstance(event, e.TerminalObserved):
                assert new.effect_reconciliation_required
        self.accepts += len(accepts)
        hypothesis.event(f"{old.state.name} -{event.name}-> {new.state.name}")
        if new.state is State.CANCELLED_ACCEPTED:
            self.cancel_won = True
        self.record = new

    def _check_resume(self) -> None:
        """Resuming never accepts anything nor plans anything in the past."""
        for command in resume(self.record, now=self.now):
            assert not isinstance(command, c.AcceptTerminal)
            at = getattr(command, "at", None)
            assert at is None or at >= self.now

    @invariant()
    def at_most_one_terminal(self) -> None:
        """At most one AcceptTerminal over the whole run."""
        assert self.accepts <= 1
        if self.record.is_terminal:
            assert self.accepts == 1

    @invariant()
    def terminal_has_outcome(self) -> None:
        """ACCEPTED and CANCELLED_ACCEPTED carry a result digest, kind and server status."""
        record = self.record
        if record.is_terminal:
            assert record.result_digest is not None
            assert record.result_kind is not None
            assert record.server_status is not None
            assert record.server_status.is_terminal
        if record.state is State.CANCELLED_ACCEPTED:
            assert record.result_kind is ResultKind.CANCELLED

    @invariant()
    def retries_stay_bounded(self) -> None:
        """Failed requests in a row never exceed the retry policy's attempts_max."""
        assert 0 <= self.record.failed_attempts <= self.policy.retry.attempts_max

    @invariant()
    def version_counts_accepted_events(self) -> None:
        """The row version is 1 plus the number of accepted events."""
        assert self.record.version == 1 + self.accepted_events


MachineModel.TestCase.settings = settings(
    max_examples=300,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestMachine = MachineModel.TestCase
