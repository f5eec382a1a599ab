"""The pure core: records, states, events, commands, the machine and its policies.

Nothing in this package reads a clock, draws a random number, awaits, or touches a
file or socket (docs/design/layers.md; enforced by ruff's banned-api rule and import-linter).
``now`` and every random draw are arguments, so the simulator replays it exactly.
The error types it raises live in :mod:`longcall.errors` (the one tree) and are
re-exported here for the core's callers.
"""

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
from longcall.errors import (
    AcceptanceMismatch,
    ConflictError,
    DigestMismatch,
    IllegalTransition,
    IntegrityError,
    LocalProtocolError,
    LongcallError,
    NotFoundError,
    RequestDigestMismatch,
    StaleEpoch,
    StaleEvent,
    UnknownCallNode,
    VersionConflict,
)

__all__ = [
    "DEFAULT_POLICY",
    "RECORD_SCHEMA",
    "TERMINAL_STATES",
    "TRANSITIONS",
    "AcceptanceMismatch",
    "ConflictError",
    "DigestMismatch",
    "IllegalTransition",
    "IntegrityError",
    "LocalProtocolError",
    "LongcallError",
    "NotFoundError",
    "OperationRecord",
    "Policy",
    "RequestDigestMismatch",
    "ResultKind",
    "ServerStatus",
    "StaleEpoch",
    "StaleEvent",
    "State",
    "TerminalReceipt",
    "Transition",
    "UnknownCallNode",
    "VersionConflict",
    "handle",
    "new_operation",
    "next_deadline",
    "recovery_event",
    "resume",
]
