"""The pure core: records, states, events, commands, the machine and its policies.

Nothing in this package reads a clock, draws a random number, awaits, or touches a
file or socket (DESIGN.md; enforced by ruff's banned-api rule and import-linter).
``now`` and every random draw are arguments, so the simulator replays it exactly.
"""

from longcall.core.errors import (
    AcceptanceMismatch,
    ConflictError,
    DigestMismatch,
    IllegalTransition,
    LocalProtocolError,
    LongcallError,
    NotFoundError,
    RemoteProtocolError,
    RequestDigestMismatch,
    StaleEpoch,
    StaleEvent,
    UnknownCallNode,
)
from longcall.core.machine import (
    DEFAULT_POLICY,
    Policy,
    Transition,
    handle,
    new_operation,
    next_deadline,
    recovery_event,
    resume,
)
from longcall.core.record import (
    RECORD_SCHEMA,
    OperationRecord,
    ResultKind,
    ServerStatus,
    TerminalReceipt,
)
from longcall.core.states import TERMINAL_STATES, TRANSITIONS, State

__all__ = [
    "DEFAULT_POLICY",
    "RECORD_SCHEMA",
    "TERMINAL_STATES",
    "TRANSITIONS",
    "AcceptanceMismatch",
    "ConflictError",
    "DigestMismatch",
    "IllegalTransition",
    "LocalProtocolError",
    "LongcallError",
    "NotFoundError",
    "OperationRecord",
    "Policy",
    "RemoteProtocolError",
    "RequestDigestMismatch",
    "ResultKind",
    "ServerStatus",
    "StaleEpoch",
    "StaleEvent",
    "State",
    "TerminalReceipt",
    "Transition",
    "UnknownCallNode",
    "handle",
    "new_operation",
    "next_deadline",
    "recovery_event",
    "resume",
]
