"""The sim adapter: simulated server replies to core events, as the real adapters map them.

There is no wire in the simulator, so this layer stands where
``longcall.adapters.mcp_tasks_*`` stand in the runtime: it turns one engine
:class:`~longcall.runtime.engine.Action` into a normalised request, and one
:class:`~longcall.sim.server.Reply` (or a timeout) into exactly one
:class:`~longcall.adapters.base.Outcome` (SPEC P1, P2):

* 2026-07-28 cancel → ``CancelAcknowledged`` (an ack is never a terminal, X5);
  2025-11-25 cancel success → ``CancellationObserved``, -32602 → ``CancelRefused``;
* a create whose request or response was lost → ``SubmitOutcomeLost`` (X2);
* lookup by submission key → ``SubmissionFound`` / ``SubmissionNeverCreated``;
* 429/503 → ``RequestFailed(RATE_LIMITED | UNAVAILABLE, retry_after_s)`` (X9);
* a truncated result → ``ResultFetchFailed``; 404 → ``OperationNotFound`` (X7);
* a result → ``ResultFetched`` with the payload bytes and ``digest_bytes(payload)``.

Planted-bug tests subclass it (never a flag in ``core`` or ``runtime``). It must not
touch the ledger or the engine's state: it only translates.
"""

from __future__ import annotations

import dataclasses

from longcall.adapters.base import Outcome
from longcall.core import ResultKind, ServerStatus
from longcall.core import commands as c
from longcall.core import events as e
from longcall.core.keys import digest_bytes
from longcall.core.retry import FailureKind, RequestKind
from longcall.runtime.engine import Action
from longcall.sim.server import (
    CANCELLED,
    COMPLETED,
    FAILED,
    INPUT_REQUIRED,
    MODERN,
    TERMINAL,
    Reply,
)

_STATUS = {COMPLETED: ServerStatus.COMPLETED, FAILED: ServerStatus.FAILED}


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """A normalised request: what the simulated network carries to a server."""

    method: str
    """``create``, ``lookup``, ``get``, ``result``, ``cancel`` or ``answer``."""
    key: str = ""
    request: str = ""
    task_id: str = ""
    keys: tuple[str, ...] = ()


_REQUEST_KIND = {
    "SendSubmit": RequestKind.SUBMIT,
    "LookupSubmission": RequestKind.LOOKUP,
    "Poll": RequestKind.POLL,
    "FetchResult": RequestKind.FETCH,
    "SendCancel": RequestKind.CANCEL,
    "SendInputResponse": RequestKind.INPUT,
}


class SimAdapter:
    """Maps engine actions to requests and replies to outcomes, for one protocol."""

    def __init__(self, protocol: str) -> None:
        self.protocol = protocol

    # --- outgoing --------------------------------------------------------------------

    def shortcut(self, action: Action) -> Outcome | None:
        """An outcome decided without sending anything (the real adapters have none)."""
        return None

    def request(self, action: Action, request_id: str) -> Request:
        """The request for an action; ``request_id`` names the business request."""
        command = action.command
        match command:
            case c.SendSubmit():
                return Request(method="create", key=command.submission_key, request=request_id)
            case c.LookupSubmission():
                return Request(method="lookup", key=command.submission_key)
            case c.Poll():
                return Request(method="get", task_id=command.operation_id)
            case c.FetchResult():
                return Request(method="result", task_id=command.operation_id)
            case c.SendCancel():
                return Request(method="cancel", task_id=command.operation_id)
            case c.SendInputResponse():
                return Request(method="answer", task_id=command.operation_id, keys=command.keys)
        raise TypeError(f"no request for {command!r}")

    # --- incoming --------------------------------------------------------------------

    def timeout(self, action: Action) -> Outcome:
        """No reply came (request or response lost): what the executor can conclude."""
        kind = _REQUEST_KIND[action.kind]
        if kind is RequestKind.SUBMIT:
            # X2: the create may or may not have happened.
            return Outcome(event=e.SubmitOutcomeLost(reason="create timed out (no response)"))
        return Outcome(
            event=e.RequestFailed(request=kind, failure=FailureKind.TIMEOUT, detail="no response")
        )

    def outcome(self, action: Action, reply: Reply) -> Outcome | None:
        """The one outcome of a reply (None: an input delivery acknowledged)."""
        kind = _REQUEST_KIND[action.kind]
        if reply.error in ("429", "503"):
            failure = FailureKind.RATE_LIMITED if reply.error == "429" else FailureKind.UNAVAILABLE
            return Outcome(
                event=e.RequestFailed(
                    request=kind, failure=failure, retry_after_s=reply.retry_after_s
                )
            )
        match action.command:
            case c.SendSubmit():
                assert reply.task_id is not None
                return Outcome(
                    event=e.SubmitAcknowledged(
                        operation_id=reply.task_id,
                        server_status_raw=reply.status,
                        poll_interval_s=reply.poll_interval_s,
                        ttl_s=reply.ttl_s,
                    )
                )
            case c.LookupSubmission():
                if not reply.found:
                    return Outcome(event=e.SubmissionNeverCreated())
                assert reply.task_id is not None
                return Outcome(
                    event=e.SubmissionFound(
                        operation_id=reply.task_id, poll_interval_s=reply.poll_interval_s
                    )
                )
            case c.Poll():
                return self.poll_outcome(reply)
            case c.FetchResult():
                return self.fetch_outcome(reply)
            case c.SendCancel() as cancel:
                return self.cancel_outcome(reply, cancel.cancel_generation)
            case c.SendInputResponse():
                if reply.error == "404":
                    return Outcome(event=e.OperationNotFound(detail="input delivery: unknown task"))
                return None
        raise TypeError(f"no outcome for {action.command!r}")

    def poll_outcome(self, reply: Reply) -> Outcome:
        if reply.error == "404":
            return Outcome(event=e.OperationNotFound(detail="tasks/get: unknown task"))
        status = reply.status
        if status == CANCELLED:
            evidence = reply.payload or b""
            return Outcome(
                event=e.CancellationObserved(
                    result_digest=digest_bytes(evidence), server_status_raw=status
                ),
                payload=evidence,
            )
        if status in _STATUS:
            return Outcome(
                event=e.TerminalObserved(status=_STATUS[status], server_status_raw=status)
            )
        if status == INPUT_REQUIRED:
            return Outcome(
                event=e.InputRequestObserved(
                    keys=reply.input_keys,
                    server_status_raw=status,
                    poll_interval_s=reply.poll_interval_s,
                )
            )
        return Outcome(
            event=e.WorkingObserved(server_status_raw=status, poll_interval_s=reply.poll_interval_s)
        )

    def fetch_outcome(self, reply: Reply) -> Outcome:
        if reply.error == "404":
            return Outcome(event=e.OperationNotFound(detail="result: unknown task"))
        if reply.status not in TERMINAL or reply.payload is None:
            return Outcome(
                event=e.ResultFetchFailed(reason="result not available yet", retryable=True)
            )
        if reply.status == CANCELLED:
            return Outcome(
                event=e.ResultFetchFailed(reason="the task reports cancelled", retryable=False)
            )
        payload = reply.payload
        if reply.content_length is not None and len(payload) != reply.content_length:
            # X6: a truncated body is never accepted.
            return Outcome(event=e.ResultFetchFailed(reason="truncated result", retryable=True))
        status = _STATUS[reply.status]
        kind = ResultKind.TOOL_ERROR if status is ServerStatus.FAILED else ResultKind.VALUE
        return Outcome(
            event=e.ResultFetched(
                status=status, result_kind=kind, result_digest=digest_bytes(payload)
            ),
            payload=payload,
        )

    def cancel_outcome(self, reply: Reply, generation: int) -> Outcome:
        if reply.error == "404":
            return Outcome(event=e.OperationNotFound(detail="tasks/cancel: unknown task"))
        if self.protocol == MODERN:
            # 2026-07-28: an empty ack; the terminal is still to be polled (X5).
            return Outcome(event=e.CancelAcknowledged(cancel_generation=generation))
        if reply.error == "-32602":
            return Outcome(event=e.CancelRefused(reason=f"task already {reply.status}"))
        evidence = reply.payload or b""
        return Outcome(
            event=e.CancellationObserved(
                result_digest=digest_bytes(evidence), server_status_raw=CANCELLED
            ),
            payload=evidence,
        )
