"""The ``toolOperation.v1`` record and the terminal receipt (SPEC L1, L3, L5).

A record is a frozen value: the machine returns a new one for every accepted event,
and the ledger stores it under compare-and-set on :attr:`OperationRecord.version`.
Times are seconds on the driver's clock (see docs/design/time-in-the-core.md); the
record never reads a clock itself.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from typing import Any

from longcall.core.states import NOT_POLLING_STATES, SETTLED_STATES, TERMINAL_STATES, State

RECORD_SCHEMA = "toolOperation.v1"


class ServerStatus(enum.Enum):
    """The server's status, normalised; kept apart from the local state (SPEC L3).

    The protocol's own word is kept beside it in ``server_status_raw``.
    """

    WORKING = "working"
    INPUT_REQUIRED = "input_required"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    __hash__ = object.__hash__  # identity, as for State: a member is a singleton

    def __repr__(self) -> str:
        return f"ServerStatus.{self.name}"

    @property
    def is_terminal(self) -> bool:
        return self in (ServerStatus.COMPLETED, ServerStatus.FAILED, ServerStatus.CANCELLED)


class ResultKind(enum.Enum):
    """What an accepted outcome holds. A tool error and a protocol error stay distinct (X6)."""

    VALUE = "value"
    TOOL_ERROR = "tool_error"
    PROTOCOL_ERROR = "protocol_error"
    CANCELLED = "cancelled"

    __hash__ = object.__hash__  # identity, as for State: a member is a singleton

    def __repr__(self) -> str:
        return f"ResultKind.{self.name}"


KINDS_OF_TERMINAL: dict[ServerStatus, tuple[ResultKind, ...]] = {
    ServerStatus.COMPLETED: (ResultKind.VALUE, ResultKind.TOOL_ERROR),
    ServerStatus.FAILED: (ResultKind.TOOL_ERROR, ResultKind.PROTOCOL_ERROR),
    ServerStatus.CANCELLED: (ResultKind.CANCELLED,),
}
"""The result kinds an outcome with each terminal status may hold, the one the status
implies first (a completed task holds a value unless its result says it is a tool
error; a failed one a tool error unless it is a protocol error)."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class OperationRecord:
    """One durable tool call (SPEC L1). Identity is the call node id."""

    schema: str = RECORD_SCHEMA
    # identity and request
    call_node_id: str
    request_digest: str
    tool_name: str
    tool_descriptor_digest: str
    principal: str
    server: str
    protocol: str
    adapter_version: str
    shadow_of: str | None = None
    """The primary call node this operation shadows through another adapter version
    (R1), or None: a shadow's acceptance advances nothing downstream."""
    # submission (X2)
    submission_key: str
    step_index: int = 0
    submit_attempts: int = 1
    submission_lookup: bool = False
    """The server can prove by submission key whether it created the operation."""
    tool_idempotent: bool = False
    """The tool declares that a resubmission with the same key is harmless."""
    server_store_id: str | None = None
    """The identity of the server's durable store when we submitted (C5): a lookup
    answered by another store proves nothing about this submission."""
    operation_id: str | None = None
    # state (L2) and server status (L3)
    state: State = State.SUBMITTING
    server_status: ServerStatus | None = None
    server_status_raw: str | None = None
    status_message: str | None = None
    # poll cursor (X3)
    poll_interval_s: float | None = None
    next_poll_at: float | None = None
    poll_count: int = 0
    backoff_step: int = 0
    failed_attempts: int = 0
    """Requests failed in a row since the server last answered: bounds retries (X9).

    Kept apart from ``backoff_step``, which also grows while polls see no change (X3).
    """
    # input (X4)
    input_round: int = 0
    input_keys_pending: tuple[str, ...] = ()
    input_keys_answered: tuple[str, ...] = ()
    input_schema_digest: str | None = None
    input_deadline_at: float | None = None
    # cancel (X5) and fencing (D1, R3)
    cancel_generation: int = 0
    cancel_requested_at: float | None = None
    cancel_acknowledged_at: float | None = None
    execution_epoch: int = 0
    # time and limits
    created_at: float
    updated_at: float
    expires_at: float | None = None
    """Server-side expiry (created + ttl) where the server told us one (X7)."""
    deadline_at: float | None = None
    """Our own total wait budget for this operation (X3)."""
    # outcome (X6, L5)
    result_digest: str | None = None
    result_kind: ResultKind | None = None
    warnings: tuple[str, ...] = ()
    effect_reconciliation_required: bool = False
    reconciliation_reason: str | None = None
    resolved_by: str | None = None
    """The operator who supplied the outcome by manual reconciliation (X7), if any."""
    last_error: str | None = None
    # compare-and-set (L4)
    version: int = 1

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def is_settled(self) -> bool:
        """Nothing more happens without an operator: accepted, or handed to one."""
        return self.state in SETTLED_STATES

    @property
    def waits_for_answers(self) -> bool:
        """An input round is open: automatic polling pauses until it is answered (X4)."""
        return self.state is State.INPUT_REQUIRED and bool(self.input_keys_pending)

    @property
    def may_poll(self) -> bool:
        """Whether a status poll may go out in this state (X3, X4, X6)."""
        return self.state not in NOT_POLLING_STATES and not self.waits_for_answers

    def polling_ended_by(self, now: float) -> str | None:
        """What ends polling at ``now`` (X3): ``"wait budget"``, ``"expiry"``, or None
        while neither has passed."""
        if self.deadline_at is not None and now >= self.deadline_at:
            return "wait budget"
        if self.expires_at is not None and now >= self.expires_at:
            return "expiry"
        return None


_RECORD_FIELDS = tuple(field.name for field in dataclasses.fields(OperationRecord))
_FIELD_NAMES = frozenset(_RECORD_FIELDS)
# The slot descriptors' setters write past the frozen ``__setattr__`` (as __init__ does).
_SETTER_BY_NAME = {name: OperationRecord.__dict__[name].__set__ for name in _RECORD_FIELDS}


class _Draft:
    """A record being made: the same slots as :class:`OperationRecord` in the same order,
    but plain attribute writes. A new record is filled in as a draft, then becomes an
    ``OperationRecord`` by class assignment (the layouts are the same, so Python allows
    it) before anyone else sees it. A plain slot write costs about a quarter of a call
    to the frozen class's slot setter, and a copy writes every field."""

    __slots__ = OperationRecord.__slots__


def _make_copier() -> Callable[[OperationRecord], _Draft]:
    """A function copying every field of a record into a new draft, one straight line
    per field: generated once, like attrs' ``evolve``, because a loop over the fields
    costs the machine's hot path (the ledger benchmark, the simulator) about three
    times as much. The generated text uses nothing but the field names."""
    namespace: dict[str, object] = {"_new": object.__new__, "_Draft": _Draft}
    lines = ["def copy(record):", "    new = _new(_Draft)"]
    lines += [f"    new.{name} = record.{name}" for name in _RECORD_FIELDS]
    lines.append("    return new")
    exec("\n".join(lines), namespace)  # the text names only the fields above
    return namespace["copy"]  # type: ignore[return-value]


_draft_of = _make_copier()


def evolve(record: OperationRecord, **changes: object) -> OperationRecord:
    """``dataclasses.replace`` for records, without re-running ``__init__``.

    The machine makes a few new records per event; this is its hot path. Unknown field
    names are refused like ``replace`` refuses them.
    """
    new = _draft_of(record)
    for name, value in changes.items():
        if name not in _FIELD_NAMES:
            raise TypeError(f"OperationRecord has no field {name!r}")
        setattr(new, name, value)
    new.__class__ = OperationRecord  # type: ignore[assignment]
    return new  # type: ignore[return-value]


_BLANK = OperationRecord(
    call_node_id="",
    request_digest="",
    tool_name="",
    tool_descriptor_digest="",
    principal="",
    server="",
    protocol="",
    adapter_version="",
    submission_key="",
    created_at=0.0,
    updated_at=0.0,
)
"""Every field at its default and the required ones blank: what a new record is
drafted from (:func:`blank_draft`)."""


def blank_draft() -> Any:
    """A draft of a new record: every field at its default, the required ones blank
    until the caller writes them, which it must all do before :func:`finish`. Plain
    slot writes instead of the frozen ``__init__``'s guarded one per field."""
    return _draft_of(_BLANK)


def finish(draft: Any) -> OperationRecord:
    """The filled-in draft as the record it now is (nothing else holds it yet)."""
    draft.__class__ = OperationRecord
    return draft  # type: ignore[no-any-return]


def stamp_unshared(record: OperationRecord, *, version: int, updated_at: float) -> None:
    """Set the version and time of ``record`` in place. Only for a record that
    :func:`evolve` made within the same call and that nothing else holds yet: the
    machine stamps every new record this way, instead of copying it once more."""
    _SETTER_BY_NAME["version"](record, version)
    _SETTER_BY_NAME["updated_at"](record, updated_at)


def set_unshared(record: OperationRecord, name: str, value: object) -> None:
    """Set one field of ``record`` in place; the same rule as :func:`stamp_unshared`:
    only for a record :func:`evolve` made within the same call, held by nothing else."""
    _SETTER_BY_NAME[name](record, value)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TerminalReceipt:
    """The single acceptance of one call node's outcome (SPEC L5).

    The first eight fields are the ones ``accept_terminal`` matches against the row.
    """

    call_node_id: str
    request_digest: str
    operation_id: str | None
    tool_descriptor_digest: str
    execution_epoch: int
    cancel_generation: int
    terminal_status: ServerStatus
    result_digest: str
    result_kind: ResultKind
    warnings: tuple[str, ...] = ()
    resolved_by: str | None = None
    """Set when an operator, not the server, supplied the outcome (X7 reconciliation)."""
    accepted_at: float

    @classmethod
    def for_record(cls, record: OperationRecord) -> TerminalReceipt:
        """The receipt that accepting ``record`` (already in a terminal state) writes."""
        if not record.is_terminal or record.server_status is None:
            raise ValueError(f"record {record.call_node_id!r} is not terminal")
        if record.result_digest is None or record.result_kind is None:
            raise ValueError(f"record {record.call_node_id!r} has no result digest")
        return cls(
            call_node_id=record.call_node_id,
            request_digest=record.request_digest,
            operation_id=record.operation_id,
            tool_descriptor_digest=record.tool_descriptor_digest,
            execution_epoch=record.execution_epoch,
            cancel_generation=record.cancel_generation,
            terminal_status=record.server_status,
            result_digest=record.result_digest,
            result_kind=record.result_kind,
            warnings=record.warnings,
            resolved_by=record.resolved_by,
            accepted_at=record.updated_at,
        )
