"""Classifying "not found" (SPEC X7).

A 404, an unknown task id or an AIP-151 NOT_FOUND means different things depending
on what we already hold. Only a proof by submission key may lead to a resubmit, and
never one that would repeat a refusal the server already gave to that very request.
"""

from __future__ import annotations

import enum

from longcall.core.record import OperationRecord
from longcall.core.retry import FailureKind, RequestKind


class NotFoundClass(enum.Enum):
    NEVER_CREATED = "never_created"
    """The server proved, by our submission key, that it never created it: resubmit is safe."""
    EXPIRED_WITH_RECEIPT = "expired_with_receipt"
    """We already accepted its terminal outcome: keep the receipt, nothing to do."""
    UNKNOWN = "unknown"
    """Anything else: an operator decides; the record stays findable by id and key."""

    def __repr__(self) -> str:
        return f"NotFoundClass.{self.name}"


def classify_not_found(record: OperationRecord, *, proven_by_key: bool) -> NotFoundClass:
    """What a not-found answer about ``record``'s operation means."""
    if record.is_terminal:
        return NotFoundClass.EXPIRED_WITH_RECEIPT
    if proven_by_key and record.operation_id is None:
        return NotFoundClass.NEVER_CREATED
    return NotFoundClass.UNKNOWN


def unknown_reason(record: OperationRecord, now: float) -> str:
    """The operator-facing reason for an UNKNOWN not-found."""
    where = f"operation {record.operation_id!r}" if record.operation_id else "the operation"
    if record.expires_at is not None and now >= record.expires_at:
        return (
            f"{where} is gone after its expiry; the outcome was never received "
            f"(last server status: {record.server_status_raw or 'none'})"
        )
    return (
        f"{where} is unknown to the server before its expiry "
        "(id reused, purged early, or no longer ours)"
    )


_REFUSED_UNREAD_MARKS = (
    f"{RequestKind.SUBMIT.value} failed ({FailureKind.REFUSED_UNREAD.value})",
    # Records escalated before the refusal had its own kind: the same proof, in words.
    f"{RequestKind.SUBMIT.value} failed ({FailureKind.BAD_REQUEST.value}): HTTP 413",
    "refused before it was read (JSON-RPC -32700",
)


def resubmit_repeats_refusal(record: OperationRecord) -> bool:
    """Whether resubmitting ``record`` (an operator's ``never_created``) would send the
    very request the server already refused unread, and so be refused the same way:
    that resolution would only bring the operation back to the operator (X7, X9)."""
    reason = record.reconciliation_reason or ""
    return record.operation_id is None and any(mark in reason for mark in _REFUSED_UNREAD_MARKS)
