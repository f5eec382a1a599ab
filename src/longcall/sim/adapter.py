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

:class:`Aip151SimAdapter` (SPEC P3) and :class:`ApifySimAdapter` (SPEC P4) map the
wire bodies of :class:`~longcall.sim.server.Aip151Server` and
:class:`~longcall.sim.server.ApifyServer` with the real adapters' own rules (their
``check_operation``, status tables and page checks are imported, not copied):

* AIP-151: a start with ``requestId = request_id_for(submission key)`` (AIP-155); the
  lookup resends that start while this executor process still holds the arguments
  (→ ``SubmissionFound``) and, after a restart, lists by ``requestId`` without creating
  (→ ``SubmissionFound`` without a poll interval, or ``SubmissionNeverCreated``, then a
  resubmit with the same key); ``done`` false → ``WorkingObserved``, ``response`` →
  ``TerminalObserved(COMPLETED)``, ``error.code = 1`` → ``CancellationObserved``, other
  errors → ``TerminalObserved(FAILED)``; the fetch reuses the done ``Operation`` the poll
  saw (no request, as the real adapter's cache) or re-reads it after a restart; cancel
  200 → ``CancelAcknowledged`` only; a lost lookup or cancel → ``RequestFailed(TRANSPORT)``,
  a lost poll or fetch → ``RequestFailed(TIMEOUT)``.
* Apify: start / ``get-actor-run`` with ``waitSecs`` (≤ 45, within the deadline); run
  statuses by the real adapter's table (READY/RUNNING/TIMING-OUT/ABORTING → working,
  SUCCEEDED → completed, FAILED/TIMED-OUT → failed, ABORTED → ``CancellationObserved``);
  the result read page by page → ``ResultFetched`` (``empty`` with zero items); a lost
  page → ``RequestFailed(FETCH, TRANSPORT)``; a page contradicting its counts →
  ``ResultFetchFailed(retryable=False)``; abort → ``CancellationObserved`` (ABORTED),
  ``CancelRefused`` (SUCCEEDED/FAILED/TIMED-OUT), ``CancelAcknowledged`` (ABORTING);
  "not found" → ``OperationNotFound``; no reply → ``RequestFailed(TIMEOUT)`` (the start:
  ``SubmitOutcomeLost``). Apify has no lookup by key.

Planted-bug tests subclass it (never a flag in ``core`` or ``runtime``). It must not
touch the ledger or the engine's state: it only translates.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from longcall.adapters import aip151 as real_aip151
from longcall.adapters import apify as real_apify
from longcall.adapters.base import Outcome
from longcall.core import ResultKind, ServerStatus
from longcall.core import commands as c
from longcall.core import events as e
from longcall.core.keys import canonical_json, digest_bytes
from longcall.core.retry import FailureKind, RequestKind
from longcall.runtime.engine import Action
from longcall.sim.server import (
    AIP151,
    APIFY,
    CANCELLED,
    COMPLETED,
    FAILED,
    INPUT_REQUIRED,
    MODERN,
    TERMINAL,
    Reply,
)

TIMEOUT_S = 15.0
"""The real adapters' request timeout (``DEFAULT_TIMEOUT_S``; Apify's HTTP slack)."""
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
    request_id: str = ""
    """AIP-151: the AIP-155 ``requestId`` of a start."""
    wait_s: float = 0.0
    """Apify: the ``waitSecs`` of a start or ``get-actor-run`` (the server holds it)."""


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

    def request_at(self, action: Action, request_id: str, now: float) -> Request:
        """The request as sent at ``now`` (Apify adds its ``waitSecs``)."""
        return self.request(action, request_id)

    # --- incoming --------------------------------------------------------------------

    def timeout_s(self, request: Request) -> float:
        """How long after sending a request its missing reply is a timeout."""
        return TIMEOUT_S + request.wait_s

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


class Aip151SimAdapter(SimAdapter):
    """AIP-151 + AIP-155 as :mod:`longcall.adapters.aip151` maps it (SPEC P3).

    One instance stands for one executor process: like the real adapter it remembers
    the start arguments of the keys it submitted (the lookup resends them) and the done
    ``Operation`` its last poll saw (the fetch reuses it); a restarted executor gets a
    fresh instance and must list by ``requestId``.
    """

    def __init__(self, protocol: str = AIP151) -> None:
        super().__init__(protocol)
        self.started: set[str] = set()
        self.done: dict[str, Mapping[str, Any]] = {}

    def request_id(self, action: Action, key: str) -> str:
        """The AIP-155 ``requestId`` of a start: derived from the submission key (X2)."""
        return real_aip151.request_id_for(key)

    def shortcut(self, action: Action) -> Outcome | None:
        command = action.command
        if isinstance(command, c.FetchResult) and command.operation_id in self.done:
            return self.result_of(self.done.pop(command.operation_id))
        return None

    def request(self, action: Action, request_id: str) -> Request:
        command = action.command
        match command:
            case c.SendSubmit():
                self.started.add(command.submission_key)
                rid = self.request_id(action, command.submission_key)
                return Request(
                    method="create", key=command.submission_key, request=request_id, request_id=rid
                )
            case c.LookupSubmission():
                rid = self.request_id(action, command.submission_key)
                # The arguments are in this process's memory: resend the same start.
                method = "restart" if command.submission_key in self.started else "list"
                return Request(
                    method=method, key=command.submission_key, request=request_id, request_id=rid
                )
        return super().request(action, request_id)

    def timeout(self, action: Action) -> Outcome:
        kind = _REQUEST_KIND[action.kind]
        if kind is RequestKind.SUBMIT:
            return Outcome(event=e.SubmitOutcomeLost(reason="start: ReadTimeout"))
        failure = (
            FailureKind.TIMEOUT
            if kind in (RequestKind.POLL, RequestKind.FETCH)
            else FailureKind.TRANSPORT
        )
        return Outcome(event=e.RequestFailed(request=kind, failure=failure, detail="ReadTimeout"))

    def outcome(self, action: Action, reply: Reply) -> Outcome | None:
        kind = _REQUEST_KIND[action.kind]
        if reply.error in ("429", "503"):
            return Outcome(
                event=e.RequestFailed(
                    request=kind,
                    failure=real_aip151.http_failure(int(reply.error)),
                    retry_after_s=reply.retry_after_s,
                )
            )
        if reply.error == "404":
            return Outcome(event=e.OperationNotFound(detail="HTTP 404: operation not found"))
        match action.command:
            case c.SendSubmit():
                operation = real_aip151.check_operation(reply.body)
                return Outcome(
                    event=e.SubmitAcknowledged(
                        operation_id=operation["name"],
                        server_status_raw=real_aip151.raw_status(operation),
                        status_message=real_aip151.status_message_of(operation),
                        poll_interval_s=real_aip151.poll_interval_hint_s(operation),
                    )
                )
            case c.LookupSubmission():
                if not reply.found:
                    return Outcome(event=e.SubmissionNeverCreated())
                operation = real_aip151.check_operation(reply.body)
                listed = reply.poll_interval_s is None
                return Outcome(
                    event=e.SubmissionFound(
                        operation_id=operation["name"],
                        server_status_raw=real_aip151.raw_status(operation),
                        poll_interval_s=None
                        if listed
                        else real_aip151.poll_interval_hint_s(operation),
                    )
                )
            case c.Poll(operation_id=name):
                return self.map_operation(
                    real_aip151.check_operation(reply.body, expected_name=name)
                )
            case c.FetchResult(operation_id=name):
                return self.result_of(real_aip151.check_operation(reply.body, expected_name=name))
            case c.SendCancel() as cancel:
                return Outcome(
                    event=e.CancelAcknowledged(cancel_generation=cancel.cancel_generation)
                )
        raise TypeError(f"no AIP-151 outcome for {action.command!r}")

    def map_operation(self, operation: Mapping[str, Any]) -> Outcome:
        """``Aip151Adapter.map_operation`` (progress flags aside: the sim sends no text)."""
        raw = real_aip151.raw_status(operation)
        if not operation.get("done", False):
            return Outcome(
                event=e.WorkingObserved(
                    server_status_raw=raw,
                    status_message=real_aip151.status_message_of(operation),
                    poll_interval_s=real_aip151.poll_interval_hint_s(operation),
                )
            )
        error = operation.get("error")
        if isinstance(error, Mapping) and error.get("code", 0) == real_aip151.CANCELLED_CODE:
            payload = canonical_json(dict(error))
            return Outcome(
                event=e.CancellationObserved(
                    result_digest=digest_bytes(payload), server_status_raw=raw
                ),
                payload=payload,
            )
        self.done[str(operation["name"])] = dict(operation)
        status = ServerStatus.FAILED if error is not None else ServerStatus.COMPLETED
        return Outcome(event=e.TerminalObserved(status=status, server_status_raw=raw))

    def result_of(self, operation: Mapping[str, Any]) -> Outcome:
        """``Aip151Adapter.result_of`` (the sim's tool declares no output schema)."""
        if not operation.get("done", False):
            return Outcome(
                event=e.ResultFetchFailed(
                    reason=f"{operation.get('name')} is no longer done", retryable=False
                )
            )
        error = operation.get("error")
        if isinstance(error, Mapping):
            if error.get("code", 0) == real_aip151.CANCELLED_CODE:
                return Outcome(
                    event=e.ResultFetchFailed(
                        reason="the operation now reads cancelled after a terminal was observed",
                        retryable=False,
                    )
                )
            payload = canonical_json(dict(error))
            kind = (
                ResultKind.TOOL_ERROR
                if real_aip151.is_tool_error(error)
                else ResultKind.PROTOCOL_ERROR
            )
            return Outcome(
                event=e.ResultFetched(
                    status=ServerStatus.FAILED,
                    result_kind=kind,
                    result_digest=digest_bytes(payload),
                    operation_id=str(operation["name"]),
                ),
                payload=payload,
            )
        response = dict(operation["response"])
        payload = canonical_json(response)
        return Outcome(
            event=e.ResultFetched(
                status=ServerStatus.COMPLETED,
                result_kind=ResultKind.VALUE,
                result_digest=digest_bytes(payload),
                empty=real_aip151.is_empty_result(response.get("value")),
                operation_id=str(operation["name"]),
            ),
            payload=payload,
        )


class ApifySimAdapter(SimAdapter):
    """Apify-style early return + poll as :mod:`longcall.adapters.apify` maps it (P4).

    One instance per executor process: it keeps the terminal run view its last poll saw
    (the fetch then reads only the dataset pages; after a restart the reply's run view).
    """

    def __init__(self, protocol: str = APIFY, *, wait_secs: int = 30) -> None:
        super().__init__(protocol)
        self.wait_secs = wait_secs
        self.runs: dict[str, tuple[dict[str, Any], dict[str, Any] | None]] = {}

    def _wait(self, action: Action, now: float) -> float:
        """``ApifyAdapter._wait_secs``: within the 45 s cap and the overall deadline (X3)."""
        wait = min(real_apify.WAIT_SECS_MAX, self.wait_secs)
        deadline = action.record.deadline_at
        if deadline is not None:
            wait = min(wait, max(0, int(deadline - now)))
        return float(max(0, wait))

    def request_at(self, action: Action, request_id: str, now: float) -> Request:
        request = self.request(action, request_id)
        if request.method in ("create", "get"):
            return dataclasses.replace(request, wait_s=self._wait(action, now))
        return request

    def outcome(self, action: Action, reply: Reply) -> Outcome | None:
        kind = _REQUEST_KIND[action.kind]
        if reply.error in ("429", "503"):
            failure = FailureKind.RATE_LIMITED if reply.error == "429" else FailureKind.UNAVAILABLE
            return Outcome(
                event=e.RequestFailed(
                    request=kind, failure=failure, retry_after_s=reply.retry_after_s
                )
            )
        if reply.error == "404":
            return Outcome(event=e.OperationNotFound(detail="Run not found"))
        match action.command:
            case c.SendSubmit():
                run = reply.body
                if run is None or real_apify.run_of({"structuredContent": run}) is None:
                    return Outcome(
                        event=e.SubmitOutcomeLost(reason="the start answer carries no run handle")
                    )
                return Outcome(
                    event=e.SubmitAcknowledged(
                        operation_id=run["runId"],
                        server_status_raw=run["status"],
                        poll_interval_s=real_apify.POLL_INTERVAL_S,
                    )
                )
            case c.Poll(operation_id=run_id):
                return self.map_run(run_id, reply)
            case c.FetchResult(operation_id=run_id):
                return self.fetch(run_id, reply)
            case c.SendCancel() as cancel:
                run = reply.body or {}
                status = run.get("status")
                if status == "ABORTED":
                    return self.map_run(str(run["runId"]), reply)
                if status in ("SUCCEEDED", "FAILED", "TIMED-OUT"):
                    return Outcome(event=e.CancelRefused(reason=f"the run is already {status}"))
                return Outcome(
                    event=e.CancelAcknowledged(cancel_generation=cancel.cancel_generation)
                )
        raise TypeError(f"no Apify outcome for {action.command!r}")

    def map_run(self, run_id: str, reply: Reply) -> Outcome:
        """``ApifyAdapter.map_run``."""
        run = reply.body
        if run is None or run.get("runId") != run_id:
            return Outcome(
                event=e.RequestFailed(
                    request=RequestKind.POLL,
                    failure=FailureKind.MALFORMED_RESPONSE,
                    detail=f"get-actor-run answered no run {run_id!r}",
                )
            )
        status = str(run["status"])
        if status in real_apify.WORKING_STATUSES:
            return Outcome(
                event=e.WorkingObserved(
                    server_status_raw=status, poll_interval_s=real_apify.POLL_INTERVAL_S
                )
            )
        if status == "ABORTED":
            payload = canonical_json(real_apify.stable_run(run))
            return Outcome(
                event=e.CancellationObserved(
                    result_digest=digest_bytes(payload), server_status_raw=status
                ),
                payload=payload,
            )
        if status == "SUCCEEDED" or status in real_apify.FAILED_STATUSES:
            self.runs[run_id] = (dict(run), dict(reply.usage) if reply.usage else None)
            terminal = ServerStatus.COMPLETED if status == "SUCCEEDED" else ServerStatus.FAILED
            return Outcome(event=e.TerminalObserved(status=terminal, server_status_raw=status))
        return Outcome(
            event=e.RequestFailed(
                request=RequestKind.POLL,
                failure=FailureKind.MALFORMED_RESPONSE,
                detail=f"unknown run status {status!r}",
            )
        )

    def fetch(self, run_id: str, reply: Reply) -> Outcome:
        """``ApifyAdapter.fetch_result`` + ``_read_dataset``: every page checked (X6)."""
        cached = self.runs.pop(run_id, None)
        run, usage = cached if cached is not None else (reply.body or {}, reply.usage)
        status = str(run.get("status"))
        if status != "SUCCEEDED" and status not in real_apify.FAILED_STATUSES:
            return Outcome(
                event=e.ResultFetchFailed(
                    reason=f"the run reads {status} after a terminal was observed",
                    retryable=False,
                )
            )
        expected = real_apify.run_item_count(run)
        if expected is None:
            return Outcome(
                event=e.ResultFetchFailed(
                    reason="the run's dataset has no itemCount", retryable=True
                )
            )
        items: list[Any] = []
        pages = iter(reply.pages)
        for _page in range(real_apify.PAGES_MAX):
            if len(items) >= expected and items:
                break
            page = next(pages, None)
            if page is None:
                # The page's response never came: a transport failure, retried (X9).
                return Outcome(
                    event=e.RequestFailed(
                        request=RequestKind.FETCH,
                        failure=FailureKind.TRANSPORT,
                        detail="get-dataset-items: the response was lost",
                    )
                )
            problem = real_apify.page_problem(page, offset=len(items), expected=expected)
            if problem is not None:
                return Outcome(
                    event=e.ResultFetchFailed(reason=f"dataset: {problem}", retryable=False)
                )
            items.extend(page["items"])
            if not page["items"]:
                break
        if len(items) != expected:
            return Outcome(
                event=e.ResultFetchFailed(
                    reason=f"dataset: read {len(items)} items, the run reports {expected}",
                    retryable=False,
                )
            )
        payload = canonical_json(
            {"run": real_apify.stable_run(run), "items": items, "usage": usage}
        )
        succeeded = status == "SUCCEEDED"
        return Outcome(
            event=e.ResultFetched(
                status=ServerStatus.COMPLETED if succeeded else ServerStatus.FAILED,
                result_kind=ResultKind.VALUE if succeeded else ResultKind.TOOL_ERROR,
                result_digest=digest_bytes(payload),
                empty=succeeded and not items,
                operation_id=run_id,
            ),
            payload=payload,
        )


AdapterFactory = Callable[[str], SimAdapter]


def sim_adapter(protocol: str) -> SimAdapter:
    """The sim adapter of a protocol (one per executor process and server)."""
    if protocol == AIP151:
        return Aip151SimAdapter()
    if protocol == APIFY:
        return ApifySimAdapter()
    return SimAdapter(protocol)
