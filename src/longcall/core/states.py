"""Every local state of an operation and every legal transition, as data (SPEC L2).

This file owns the rules; :mod:`longcall.core.machine` only looks them up, and
``scripts/gen_state_diagram.py`` draws ``docs/states.md`` from :data:`TRANSITIONS`.

The table maps ``(state, event type name) -> allowed target states``. A pair that is
not in the table is rejected with :class:`~longcall.errors.IllegalTransition`
and the record stays as it was. Where one event can lead to more than one target
(for example a lost submission either waits for a lookup or goes straight to
reconciliation, depending on what the protocol can prove), every target is listed
here and the machine picks one of them; it can never pick a target not listed.

The states are ours, never a protocol's words (SPEC L3): the server's status is kept
beside the state in the record.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping


class State(enum.Enum):
    """The local state of one operation (SPEC L2)."""

    SUBMITTING = "submitting"
    """Persisted with its submission key; the create request may be on the wire."""
    SUBMISSION_UNKNOWN = "submission_unknown"
    """The create may or may not have happened (response lost); resolve by key (X2)."""
    NOT_FOUND_SAFE = "not_found_safe"
    """The server proved by key that it never created the operation: resubmit allowed."""
    WORKING = "working"
    """The server returned a queryable id; we poll it."""
    INPUT_REQUIRED = "input_required"
    """The server waits for input; automatic polling pauses (X4)."""
    CANCEL_REQUESTED = "cancel_requested"
    """Cancel generation bumped and persisted, then the request sent; no terminal yet (X5)."""
    TERMINAL_OBSERVED = "terminal_observed"
    """The server reported completed/failed; the result has not been fetched yet (X6)."""
    FETCHING_RESULT = "fetching_result"
    """The result fetch has started (a crash here resumes the fetch)."""
    RECONCILIATION_REQUIRED = "reconciliation_required"
    """Nobody can prove the outcome automatically: an operator decides (X2, X7)."""
    ACCEPTED = "accepted"
    """Terminal: a completed/failed result was verified, and its receipt written (L5)."""
    CANCELLED_ACCEPTED = "cancelled_accepted"
    """Terminal: cancellation won and is proven, and its receipt written (L5, X5)."""

    # Members are singletons, so the identity hash agrees with equality. Enum's own
    # hash is a Python-level method, and states are looked up in sets and tables at
    # every event the machine handles.
    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"State.{self.name}"


TERMINAL_STATES: frozenset[State] = frozenset({State.ACCEPTED, State.CANCELLED_ACCEPTED})
SETTLED_STATES: frozenset[State] = TERMINAL_STATES | {State.RECONCILIATION_REQUIRED}
"""Nothing more happens without an operator: accepted, or handed to one (X7). An input
round is not settled: the tool goes on once it is answered."""
UNSUBMITTED_STATES: frozenset[State] = frozenset(
    {State.SUBMITTING, State.SUBMISSION_UNKNOWN, State.NOT_FOUND_SAFE}
)
"""No server operation is known yet (X2): nothing to poll or cancel at the server."""
NOT_POLLING_STATES: frozenset[State] = UNSUBMITTED_STATES | {
    State.TERMINAL_OBSERVED,
    State.FETCHING_RESULT,
    State.RECONCILIATION_REQUIRED,
}
"""No status poll may go out (X3, X4, X6): a poll planned earlier is obsolete there
(found by the simulator: a stray poll after the terminal was observed)."""

S = State
_PRE_ID = (S.SUBMITTING, S.NOT_FOUND_SAFE)
_LIVE = (S.WORKING, S.INPUT_REQUIRED, S.CANCEL_REQUESTED)
_OPEN = tuple(s for s in State if s not in TERMINAL_STATES)


def _rows(
    sources: tuple[State, ...], event: str, *targets: State
) -> dict[tuple[State, str], frozenset[State]]:
    return {(source, event): frozenset(targets) for source in sources}


TRANSITIONS: Mapping[tuple[State, str], frozenset[State]] = {
    # --- submission (X2) -------------------------------------------------------------
    # Every handler that plans the next poll escalates instead when the wait budget or
    # the expiry is already spent (X3), so each such row lists RECONCILIATION_REQUIRED.
    **_rows(
        (*_PRE_ID, S.SUBMISSION_UNKNOWN),
        "SubmitAcknowledged",
        S.WORKING,
        S.RECONCILIATION_REQUIRED,
    ),
    # A synchronous tool (X10) or an inline answer carries the result itself.
    **_rows((*_PRE_ID, S.SUBMISSION_UNKNOWN), "ResultFetched", S.ACCEPTED),
    # The server refused the request (validation, unknown tool): that IS the outcome.
    **_rows((*_PRE_ID, S.SUBMISSION_UNKNOWN), "SubmitRejected", S.ACCEPTED),
    # Lost response: wait for proof by key, resend an idempotent create with the SAME
    # key, or hand it to an operator when the protocol can prove nothing.
    **_rows(
        (*_PRE_ID, S.SUBMISSION_UNKNOWN),
        "SubmitOutcomeLost",
        S.SUBMISSION_UNKNOWN,
        S.RECONCILIATION_REQUIRED,
    ),
    **_rows(
        (S.SUBMISSION_UNKNOWN, S.RECONCILIATION_REQUIRED),
        "SubmissionFound",
        S.WORKING,
        S.RECONCILIATION_REQUIRED,
    ),
    # Proven absent, but the resubmit limit is spent: an operator decides.
    **_rows(
        (S.SUBMISSION_UNKNOWN, S.RECONCILIATION_REQUIRED),
        "SubmissionNeverCreated",
        S.NOT_FOUND_SAFE,
        S.RECONCILIATION_REQUIRED,
    ),
    # --- polling (X3) ----------------------------------------------------------------
    (S.WORKING, "WorkingObserved"): frozenset({S.WORKING, S.RECONCILIATION_REQUIRED}),
    (S.INPUT_REQUIRED, "WorkingObserved"): frozenset({S.WORKING, S.RECONCILIATION_REQUIRED}),
    (S.CANCEL_REQUESTED, "WorkingObserved"): frozenset(
        {S.CANCEL_REQUESTED, S.RECONCILIATION_REQUIRED}
    ),
    # --- input (X4) ------------------------------------------------------------------
    # With every key already answered (or a cancel pending) polling goes on: budget.
    (S.WORKING, "InputRequestObserved"): frozenset({S.INPUT_REQUIRED, S.RECONCILIATION_REQUIRED}),
    (S.INPUT_REQUIRED, "InputRequestObserved"): frozenset(
        {S.INPUT_REQUIRED, S.RECONCILIATION_REQUIRED}
    ),
    (S.CANCEL_REQUESTED, "InputRequestObserved"): frozenset(
        {S.CANCEL_REQUESTED, S.RECONCILIATION_REQUIRED}
    ),
    (S.INPUT_REQUIRED, "InputAnswered"): frozenset({S.INPUT_REQUIRED, S.RECONCILIATION_REQUIRED}),
    # The server refused an answer: the same keys are asked again in a new round.
    (S.INPUT_REQUIRED, "InputRefused"): frozenset({S.INPUT_REQUIRED}),
    # --- terminal and result (X6) ----------------------------------------------------
    **_rows(_LIVE, "TerminalObserved", S.TERMINAL_OBSERVED),
    # A second, different terminal for one operation is a server contradiction.
    **_rows(
        (S.TERMINAL_OBSERVED, S.FETCHING_RESULT), "TerminalObserved", S.RECONCILIATION_REQUIRED
    ),
    (S.TERMINAL_OBSERVED, "ResultFetchStarted"): frozenset({S.FETCHING_RESULT}),
    # A fetched result contradicting the observed terminal goes to an operator.
    (S.FETCHING_RESULT, "ResultFetched"): frozenset({S.ACCEPTED, S.RECONCILIATION_REQUIRED}),
    # --- cancel (X5) -----------------------------------------------------------------
    **_rows(_LIVE, "CancelRequested", S.CANCEL_REQUESTED),
    (S.CANCEL_REQUESTED, "CancelAcknowledged"): frozenset(
        {S.CANCEL_REQUESTED, S.RECONCILIATION_REQUIRED}
    ),
    (S.CANCEL_REQUESTED, "CancelRefused"): frozenset({S.CANCEL_REQUESTED}),
    **_rows(_LIVE, "CancellationObserved", S.CANCELLED_ACCEPTED),
    **_rows(
        (S.TERMINAL_OBSERVED, S.FETCHING_RESULT), "CancellationObserved", S.RECONCILIATION_REQUIRED
    ),
    # Cancel won, then a completion shows up: the state stays, the record is marked
    # EFFECT_RECONCILIATION_REQUIRED (X5). Terminal states stay absorbing.
    (S.CANCELLED_ACCEPTED, "TerminalObserved"): frozenset({S.CANCELLED_ACCEPTED}),
    # --- failures, not found, retries (X7, X9) ---------------------------------------
    # A failed request is retried later from the same state, or (when it can never
    # succeed: 401/403, validation) handed to an operator.
    **{
        (s, "RequestFailed"): frozenset({s, S.RECONCILIATION_REQUIRED})
        for s in (*_PRE_ID, S.SUBMISSION_UNKNOWN, *_LIVE, S.FETCHING_RESULT)
    },
    **_rows(
        (*_LIVE, S.TERMINAL_OBSERVED, S.FETCHING_RESULT),
        "OperationNotFound",
        S.RECONCILIATION_REQUIRED,
    ),
    (S.FETCHING_RESULT, "ResultFetchFailed"): frozenset(
        {S.FETCHING_RESULT, S.RECONCILIATION_REQUIRED}
    ),
    # --- fencing and operators (R3, D1, X7) ------------------------------------------
    **{(s, "ExecutionClaimed"): frozenset({s}) for s in _OPEN},
    **_rows(
        tuple(s for s in _OPEN if s is not S.RECONCILIATION_REQUIRED),
        "ReconciliationEscalated",
        S.RECONCILIATION_REQUIRED,
    ),
    # A resume whose wait budget or expiry is already spent lands back here.
    (S.RECONCILIATION_REQUIRED, "ReconciledManually"): frozenset(
        {
            S.WORKING,
            S.NOT_FOUND_SAFE,
            S.ACCEPTED,
            S.CANCELLED_ACCEPTED,
            S.RECONCILIATION_REQUIRED,
        }
    ),
}
