"""The task-status table of the tool side: ``(status, cause) → status`` (SPEC S4).

Owns every status change a task may make and why. The store applies a change only as a
compare-and-set from the statuses this table lists for its cause; a cause that is not
allowed from the current status changes nothing (the caller learns it lost). Terminal
statuses appear in no row, so they are absorbing. Like ``longcall.core.states`` on the
caller side, this is data in one place, not ``allowed_from=`` sets scattered over the
code. Must not: do I/O.
"""

from __future__ import annotations

from enum import StrEnum

from longcall.server.model import TaskStatus


class Cause(StrEnum):
    """Why a task's status changes (recorded as the history row's reason)."""

    INPUT_REQUESTED = "input requested"
    INPUT_ANSWERED = "input answered"
    TOOL_RETURNED = "tool returned"
    TOOL_FAILED = "tool failed"
    """A JSON-RPC error from the tool, a result over the size cap, or (2025-11-25) ``isError``."""
    CANCEL_REQUESTED = "cancel requested"
    RUN_TIME_LIMIT = "run-time limit"
    """The Apify-style facade's ``timeoutSecs`` elapsed."""
    OWNER_LOST = "owner lost"
    """The process running it stopped and the tool is not idempotent: it is not re-run."""
    NOT_RESUMABLE = "not resumable"
    """Found without a runner, and its ttl elapsed or its tool is no longer served."""


W, IR = TaskStatus.WORKING, TaskStatus.INPUT_REQUIRED
C, F, X = TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED

TRANSITIONS: dict[tuple[TaskStatus, Cause], TaskStatus] = {
    (W, Cause.INPUT_REQUESTED): IR,
    (IR, Cause.INPUT_ANSWERED): W,
    (W, Cause.TOOL_RETURNED): C,
    (IR, Cause.TOOL_RETURNED): C,
    (W, Cause.TOOL_FAILED): F,
    (IR, Cause.TOOL_FAILED): F,
    (W, Cause.CANCEL_REQUESTED): X,
    (IR, Cause.CANCEL_REQUESTED): X,
    (W, Cause.RUN_TIME_LIMIT): F,
    (IR, Cause.RUN_TIME_LIMIT): F,
    (W, Cause.OWNER_LOST): F,
    (IR, Cause.OWNER_LOST): F,
    (W, Cause.NOT_RESUMABLE): F,
    (IR, Cause.NOT_RESUMABLE): F,
}


def target(cause: Cause) -> TaskStatus:
    """The one status a cause leads to (every cause has exactly one)."""
    (found,) = {to for (_, why), to in TRANSITIONS.items() if why is cause}
    return found


def sources(cause: Cause) -> frozenset[TaskStatus]:
    """The statuses a cause may leave (the compare-and-set's ``WHERE status IN``)."""
    return frozenset(status for (status, why) in TRANSITIONS if why is cause)


def _check_table() -> None:
    for (status, cause), to in TRANSITIONS.items():
        if status.is_terminal:
            raise AssertionError(f"terminal {status} must be absorbing, not left by {cause}")
        if to is not target(cause):
            raise AssertionError(f"{cause} leads to more than one status")


_check_table()
