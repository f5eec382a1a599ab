"""Events: past-tense facts fed into the machine (docs/design/layers.md).

Adapters turn wire messages into these; the runtime adds local facts (a cancel
asked for, an answer given, an executor claiming the operation). An event never
carries a protocol's vocabulary beyond the raw status word kept for the record
(SPEC L3). The class name is the event's key in :data:`~longcall.core.states.TRANSITIONS`.
"""

from __future__ import annotations

import dataclasses
import enum

from longcall.core.record import KINDS_OF_TERMINAL, ResultKind, ServerStatus
from longcall.core.retry import FailureKind, RequestKind


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """Base of every event.

    ``execution_epoch`` fences events produced by an execution of this operation: an
    event from another epoch is stale and rejected (SPEC D1, R3; F1 "callback from an
    old execution epoch"). Operator and local-intent events leave it ``None``.
    """

    execution_epoch: int | None = None

    @property
    def name(self) -> str:
        return type(self).__name__


# --- submission (X2) ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SubmitAcknowledged(Event):
    """The server returned a queryable operation id for our create."""

    operation_id: str
    server_status: ServerStatus = ServerStatus.WORKING
    server_status_raw: str | None = None
    status_message: str | None = None
    poll_interval_s: float | None = None
    ttl_s: float | None = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SubmitOutcomeLost(Event):
    """We cannot tell whether the create happened (timeout, reset, crash mid-send)."""

    reason: str


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SubmitRejected(Event):
    """The server refused the create outright (validation, unknown tool): no operation exists.

    ``result_digest`` is the digest of the error body, which becomes the accepted outcome.
    """

    reason: str
    result_digest: str


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SubmissionFound(Event):
    """A lookup by submission key found the operation our create made."""

    operation_id: str
    server_status_raw: str | None = None
    poll_interval_s: float | None = None
    ttl_s: float | None = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SubmissionNeverCreated(Event):
    """A lookup by submission key proved the server never created the operation."""


# --- polling and input (X3, X4) ----------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class WorkingObserved(Event):
    """A poll says the operation is still running (proves nothing about completion)."""

    server_status_raw: str | None = None
    status_message: str | None = None
    poll_interval_s: float | None = None
    progressed: bool = False
    """Status message, progress or last-update time changed since the last poll."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class InputRequestObserved(Event):
    """The server waits for input under these keys (unique for the operation's life)."""

    keys: tuple[str, ...]
    schema_digest: str | None = None
    deadline_at: float | None = None
    server_status_raw: str | None = None
    status_message: str | None = None
    poll_interval_s: float | None = None
    """The server's interval, which comes with every status (X3)."""

    def __post_init__(self) -> None:
        if not self.keys:
            raise ValueError("an input request names at least one key")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class InputAnswered(Event):
    """The approval gate answered these keys of this input round (X4)."""

    input_round: int
    keys: tuple[str, ...]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class InputRefused(Event):
    """The server refused the answers delivered for these keys of this round (X4).

    The answers are void: the keys are asked again, in a new round, so a person can
    give a better answer (a wrong answer must never strand the operation).
    """

    input_round: int
    keys: tuple[str, ...]
    reason: str = ""


# --- terminal and result (X6) ------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TerminalObserved(Event):
    """A poll says completed or failed. The result is not in hand yet."""

    status: ServerStatus
    server_status_raw: str | None = None
    status_message: str | None = None

    def __post_init__(self) -> None:
        if self.status not in (ServerStatus.COMPLETED, ServerStatus.FAILED):
            raise ValueError("TerminalObserved is for completed or failed")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ResultFetchStarted(Event):
    """The runtime begins fetching the result (a commit point before the fetch)."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ResultFetched(Event):
    """The complete result is in hand and verified: digest computed, not truncated,
    valid against the declared output schema (X6).

    For a synchronous tool or an inline answer this arrives straight after submission.
    """

    status: ServerStatus
    result_kind: ResultKind
    result_digest: str
    empty: bool = False
    """Completed with no content or only empty collections: a warning outcome (X6)."""
    operation_id: str | None = None
    warnings: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.status not in (ServerStatus.COMPLETED, ServerStatus.FAILED):
            raise ValueError("ResultFetched is for completed or failed")
        if self.result_kind is ResultKind.CANCELLED:
            raise ValueError("a cancellation is reported by CancellationObserved")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ResultFetchFailed(Event):
    """The result could not be obtained or failed verification (truncated, malformed,
    schema violation)."""

    reason: str
    retryable: bool
    retry_after_s: float | None = None


# --- cancel (X5) -------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CancelRequested(Event):
    """Somebody asked us to cancel. Bumps the cancel generation before anything is sent."""

    requested_by: str = "caller"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CancelAcknowledged(Event):
    """The server took the cancel request. Not a terminal (2026-07-28, AIP-151)."""

    cancel_generation: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CancelRefused(Event):
    """The server refused the cancel because the operation is already terminal."""

    reason: str


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CancellationObserved(Event):
    """Proof of the cancelled terminal: a ``cancelled`` status, or a 2025-11-25 cancel
    response. ``result_digest`` is the digest of that evidence."""

    result_digest: str
    server_status_raw: str | None = None


# --- failures, not found (X7, X9) --------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RequestFailed(Event):
    """One of our requests failed without telling us anything about the operation.

    For a create, only failures that prove the request was not processed belong
    here (refused connection, 429); an ambiguous one is :class:`SubmitOutcomeLost`.
    """

    request: RequestKind
    failure: FailureKind
    retry_after_s: float | None = None
    detail: str = ""
    poll_interval_s: float | None = None
    """The interval a reply earlier in the same exchange gave (a 2025-11-25 status read
    whose ``tasks/result`` side channel then failed): the server said it, so it floors
    the retry like any other interval it gave (X3 rule 1)."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class OperationNotFound(Event):
    """The server says it does not know our operation id (X7)."""

    detail: str = ""


# --- fencing and operators (R3, D1, X7) --------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ExecutionClaimed(Event):
    """An executor takes the operation over with a higher epoch (restart, rollback)."""

    new_epoch: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ReconciliationEscalated(Event):
    """Hand the operation to an operator, with the reason."""

    reason: str


class Resolution(enum.Enum):
    """What an operator found out about an operation in reconciliation."""

    RESUME = "resume"
    NEVER_CREATED = "never_created"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    def __repr__(self) -> str:
        return f"Resolution.{self.name}"


SETTLING = (Resolution.COMPLETED, Resolution.FAILED, Resolution.CANCELLED)
"""The resolutions that settle an operation with an outcome (its result's digest and
kind); the others set it going again."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ReconciledManually(Event):
    """An operator resolved the operation (recorded with who and why)."""

    resolution: Resolution
    actor: str
    note: str
    operation_id: str | None = None
    result_digest: str | None = None
    result_kind: ResultKind | None = None
    """What the result holds, read from it the way the protocol's own fetch reads a
    result (a tool error that completed, a protocol error that failed); None: the kind
    the resolution implies. The same bytes are then accepted as the same kind whether
    the engine fetched them or an operator supplied them."""

    def __post_init__(self) -> None:
        settles = self.resolution in SETTLING
        if settles and self.result_digest is None:
            raise ValueError(f"resolution {self.resolution.value} needs a result digest")
        if self.result_kind is not None:
            status = ServerStatus(self.resolution.value) if settles else None
            if status is None or self.result_kind not in KINDS_OF_TERMINAL[status]:
                raise ValueError(
                    f"resolution {self.resolution.value} cannot hold a result of kind "
                    f"{self.result_kind.value}"
                )
        if not self.actor or not self.note:
            raise ValueError("a manual reconciliation records who and why")


EVENT_TYPES: tuple[type[Event], ...] = (
    SubmitAcknowledged,
    SubmitOutcomeLost,
    SubmitRejected,
    SubmissionFound,
    SubmissionNeverCreated,
    WorkingObserved,
    InputRequestObserved,
    InputAnswered,
    InputRefused,
    TerminalObserved,
    ResultFetchStarted,
    ResultFetched,
    ResultFetchFailed,
    CancelRequested,
    CancelAcknowledged,
    CancelRefused,
    CancellationObserved,
    RequestFailed,
    OperationNotFound,
    ExecutionClaimed,
    ReconciliationEscalated,
    ReconciledManually,
)
