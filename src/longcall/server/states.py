"""The task-status table of the tool side: ``(status, cause) → status`` (SPEC S4).

Owns every status change a task may make and why. The store applies a change only as a
compare-and-set from the statuses this table lists for its cause; a cause that is not
allowed from the current status changes nothing (the caller learns it lost). Terminal
statuses appear in no row, so they are absorbing. Like ``longcall.core.states`` on the
caller side, this is data in one place, not ``allowed_from=`` sets scattered over the
code. Must not: do I/O.
"""

from __future__ import annotations

import functools
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


_OPEN = (TaskStatus.WORKING, TaskStatus.INPUT_REQUIRED)
_ENDINGS = {
    Cause.TOOL_RETURNED: TaskStatus.COMPLETED,
    Cause.TOOL_FAILED: TaskStatus.FAILED,
    Cause.CANCEL_REQUESTED: TaskStatus.CANCELLED,
    Cause.RUN_TIME_LIMIT: TaskStatus.FAILED,
    Cause.OWNER_LOST: TaskStatus.FAILED,
    Cause.NOT_RESUMABLE: TaskStatus.FAILED,
}
"""How each cause ends a task, from either open status."""

TRANSITIONS: dict[tuple[TaskStatus, Cause], TaskStatus] = {
    (TaskStatus.WORKING, Cause.INPUT_REQUESTED): TaskStatus.INPUT_REQUIRED,
    (TaskStatus.INPUT_REQUIRED, Cause.INPUT_ANSWERED): TaskStatus.WORKING,
    **{(status, cause): ending for status in _OPEN for cause, ending in _ENDINGS.items()},
}


@functools.cache  # the table is constant; every status write asks
def target(cause: Cause) -> TaskStatus:
    """The one status a cause leads to (every cause has exactly one)."""
    (found,) = {to for (_, why), to in TRANSITIONS.items() if why is cause}
    return found


@functools.cache
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
