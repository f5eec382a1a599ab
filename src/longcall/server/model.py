"""Value types of the tool-side task store: task rows, input requests, statuses.

Owns: the frozen records the store returns and the status vocabulary (S4). Must not:
do I/O or know any wire format; the protocol modules render these records.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class TaskStatus(StrEnum):
    """Server-side task status; the same words on both protocol versions (S4)."""

    WORKING = "working"
    INPUT_REQUIRED = "input_required"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        """Terminal statuses are absorbing (S4)."""
        return self in TERMINAL_STATUSES


TERMINAL_STATUSES = frozenset({TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED})
ACTIVE_STATUSES = frozenset({TaskStatus.WORKING, TaskStatus.INPUT_REQUIRED})


class ProtocolVersion(StrEnum):
    """The protocol version a task was created under; it is rendered in that version only."""

    MODERN = "2026-07-28"
    LEGACY = "2025-11-25"
    AIP151 = "aip-151"
    """A Google AIP-151 operation started through ``longcall.server.aip151`` (S8)."""
    APIFY = "apify"
    """An Apify-style run started through ``longcall.server.apify`` (S8)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Principal:
    """Who made a request (S5): a bearer-token subject, a client id, or ``anonymous``."""

    subject: str


ANONYMOUS = Principal(subject="anonymous")


@dataclass(frozen=True, slots=True, kw_only=True)
class NewTask:
    """Everything needed to create a task durably, before its id is returned (S2)."""

    task_id: str
    principal: str
    tool_name: str
    arguments: dict[str, Any]
    arguments_digest: str
    protocol: ProtocolVersion
    submission_key: str | None
    created_at: float
    ttl_ms: int | None
    poll_interval_ms: int
    status_message: str | None = None
    client_can_elicit: bool = True
    """Whether the creating client declared elicitation (no undeclared input requests, S6)."""
    progress_token: str | int | None = None
    """2025-11-25: the creating request's ``progressToken``, valid for the task's life."""
    run_timeout_s: float | None = None
    """An Apify-style run's ``timeoutSecs`` (facade seconds), stored with the task."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskRecord:
    """One task as stored: current status, outcome and bookkeeping."""

    task_id: str
    principal: str
    tool_name: str
    arguments: dict[str, Any]
    arguments_digest: str
    protocol: ProtocolVersion
    submission_key: str | None
    status: TaskStatus
    status_message: str | None
    created_at: float
    last_updated_at: float
    ttl_ms: int | None
    poll_interval_ms: int
    execution_epoch: int
    result: dict[str, Any] | None
    error: dict[str, Any] | None
    version: int
    client_can_elicit: bool = True
    owner: str | None = None
    """The server process running it (its lease holder), if any (D1)."""
    lease_until: float | None = None
    deleted: bool = False
    """Deleted by an AIP-151 ``DeleteOperation``: answered as not found, kept for key proofs."""
    run_timeout_s: float | None = None
    """The Apify-style run's ``timeoutSecs`` (facade seconds), if any."""
    progress_token: str | int | None = None
    abort_at: float | None = None
    """When a graceful Apify-style abort turns into a cancel (server clock), if requested."""

    def is_expired(self, now: float) -> bool:
        """The ttl counts from creation (both versions); ``None`` means unlimited."""
        return self.ttl_ms is not None and now >= self.created_at + self.ttl_ms / 1000.0


@dataclass(frozen=True, slots=True, kw_only=True)
class InputRequest:
    """One input request a running tool issued (S6): keyed, answered at most once."""

    task_id: str
    key: str
    sequence: int
    method: str
    params: dict[str, Any]
    response: dict[str, Any] | None
    created_at: float

    @property
    def is_answered(self) -> bool:
        """An answered key is never answered again (tasks/update is idempotent per key)."""
        return self.response is not None


@dataclass(frozen=True, slots=True, kw_only=True)
class StatusChange:
    """One row of the append-only status history (S4)."""

    task_id: str
    sequence: int
    status: TaskStatus
    at: float
    reason: str | None
