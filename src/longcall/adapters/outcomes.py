"""What a transport failure means for each of our requests, in the core's words (X2, X9).

Owns: the one classification every protocol mapping, the I/O shell and the executor use
when a request produced no answer: a create whose failure does not prove it was not
processed is *lost* (``SubmitOutcomeLost``: resolved by key, never by a blind resend);
every other request *failed* (``RequestFailed``: retried or escalated by the core). A
transport failure is never an operation's outcome (C3).

Must not: perform I/O, or read protocol bodies (each mapping reads its own).
"""

from __future__ import annotations

from longcall.adapters.base import Outcome
from longcall.adapters.exchange import TransportFailure
from longcall.core.commands import Command, SendInputResponse
from longcall.core.events import (
    Event,
    InputRefused,
    RequestFailed,
    SubmitOutcomeLost,
    SubmitRejected,
)
from longcall.core.keys import canonical_json, digest_bytes
from longcall.core.retry import FailureKind, RequestKind, settles_create

REQUEST_KINDS: dict[str, RequestKind] = {
    "SendSubmit": RequestKind.SUBMIT,
    "LookupSubmission": RequestKind.LOOKUP,
    "Poll": RequestKind.POLL,
    "FetchResult": RequestKind.FETCH,
    "SendCancel": RequestKind.CANCEL,
    "SendInputResponse": RequestKind.INPUT,
}
"""Engine command name → the request it sends."""
REFUSED_ANSWER = frozenset({FailureKind.BAD_REQUEST, FailureKind.VALIDATION})
"""How a server says "this answer is wrong": it keeps waiting for a better one."""


def request_failed(
    request: RequestKind, failure: TransportFailure, *, poll_interval_s: float | None = None
) -> Outcome:
    """A failed request as ``RequestFailed`` (X9): the core retries or escalates it.
    ``poll_interval_s``: the interval an earlier reply of the same exchange gave (X3)."""
    return Outcome(
        event=RequestFailed(
            request=request,
            failure=failure.kind,
            retry_after_s=failure.retry_after_s,
            detail=failure.detail,
            poll_interval_s=poll_interval_s,
        )
    )


def submit_failed(failure: TransportFailure) -> Outcome:
    """X2: a create that may have been processed is lost; one proven unprocessed failed;
    one refused unread (over the server's size limit, unparseable) is the call's outcome:
    nothing exists, and the same bytes would be refused again."""
    if failure.processed_possible:
        return Outcome(event=SubmitOutcomeLost(reason=f"{failure.kind.value}: {failure.detail}"))
    if settles_create(RequestKind.SUBMIT, failure.kind):
        return refused_unread(failure)
    return request_failed(RequestKind.SUBMIT, failure)


def refused_unread(failure: TransportFailure) -> Outcome:
    """A create the server refused unread, as its terminal error: the refusal (the HTTP
    status and the server's words, which name the limit) is the evidence kept."""
    reason = f"the server refused the request unread, so nothing was created: {failure.detail}"
    payload = canonical_json(
        {"error": {"refused_unread": True, "http_status": failure.http_status, "message": reason}}
    )
    return Outcome(
        event=SubmitRejected(reason=reason, result_digest=digest_bytes(payload)), payload=payload
    )


def failure_outcome(command: str, failure: TransportFailure) -> Outcome:
    """The outcome of engine command ``command`` (its class name) when it got no answer."""
    request = REQUEST_KINDS[command]
    if request is RequestKind.SUBMIT:
        return submit_failed(failure)
    return request_failed(request, failure)


def unsupported(request: RequestKind, detail: str) -> Outcome:
    """A request this protocol cannot make (no lookup by key, no input): never retried."""
    return request_failed(
        request,
        TransportFailure(kind=FailureKind.BAD_REQUEST, detail=detail, processed_possible=False),
    )


def no_operation_id(request: RequestKind) -> Outcome:
    """A request about an operation whose id the record never learned: nothing to ask."""
    return unsupported(request, "the record has no operation id")


def foreign_identity(request: RequestKind, detail: str) -> Outcome:
    """C3: an answer about another operation than ours is never read as ours."""
    return request_failed(
        request,
        TransportFailure(kind=FailureKind.FOREIGN_IDENTITY, detail=detail, processed_possible=True),
    )


__all__ = [
    "REQUEST_KINDS",
    "failure_outcome",
    "foreign_identity",
    "no_operation_id",
    "refused_unread",
    "request_failed",
    "submit_failed",
    "unsupported",
]


def as_input_refusal(command: Command, event: Event) -> Event:
    """A delivery of answers the server refused as invalid is an InputRefused of that
    round's keys (X4): a person answers again, instead of the operation going to an
    operator with the bad answer stored for every resend. Any other reply is itself."""
    if (
        isinstance(command, SendInputResponse)
        and isinstance(event, RequestFailed)
        and event.failure in REFUSED_ANSWER
    ):
        return InputRefused(
            input_round=command.input_round,
            keys=command.keys,
            reason=event.detail or event.failure.value,
            execution_epoch=event.execution_epoch,
        )
    return event
