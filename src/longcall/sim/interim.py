"""The AIP-151 and Apify-style sim adapters, until those protocols' mappings are exchanges.

MCP runs the real mappings (:mod:`longcall.adapters.mcp`) in the simulator; AIP-151
(P3) and Apify-style (P4) still run these adapters, which map the normalised
:class:`~longcall.sim.server.Reply` of :class:`~longcall.sim.server.Aip151Server` and
:class:`~longcall.sim.server.ApifyServer` with the real adapters' own rules (their
``check_operation``, status tables and page checks are imported, not copied). They go
when ``longcall.adapters.aip151`` and ``longcall.adapters.apify`` become pure mappings:
the routing (:mod:`longcall.sim.adapter`) then hands those servers the real exchanges.

Each instance stands for one executor process at one server (a restart forgets).
Must not: touch the ledger or the engine's state: it only translates.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Generator, Mapping
from typing import Any

from longcall.adapters import aip151 as real_aip151
from longcall.adapters import apify as real_apify
from longcall.adapters.base import Outcome
from longcall.adapters.outcomes import REQUEST_KINDS
from longcall.core import ResultKind, ServerStatus
from longcall.core import commands as c
from longcall.core import events as e
from longcall.core.keys import canonical_json, digest_bytes
from longcall.core.retry import FailureKind, RequestKind
from longcall.runtime.engine import Action
from longcall.sim.server import AIP151, APIFY, Reply

TIMEOUT_S = 15.0
"""The real adapters' request timeout (Apify adds its ``waitSecs``)."""
TIMED_OUT = object()
"""Sent into an interim exchange instead of a reply: no answer came in time."""
_REQUEST_KIND = REQUEST_KINDS


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """A normalised request: what the simulated network carries to these servers."""

    method: str
    """``create``, ``restart``, ``list``, ``get``, ``result`` or ``cancel``."""
    key: str = ""
    request: str = ""
    task_id: str = ""
    request_id: str = ""
    """AIP-151: the AIP-155 ``requestId`` of a start."""
    wait_s: float = 0.0
    """Apify: the ``waitSecs`` of a start or ``get-actor-run`` (the server holds it)."""
    timeout_s: float = TIMEOUT_S


class SimAdapter:
    """The shared part: one normalised request per action, the timeout outcome."""

    def __init__(self, protocol: str) -> None:
        self.protocol = protocol

    def shortcut(self, action: Action) -> Outcome | None:
        """An outcome decided without sending anything."""
        return None

    def request(self, action: Action, request_id: str) -> Request:
        """The request for an action; ``request_id`` names the business request."""
        command = action.command
        match command:
            case c.SendSubmit():
                return Request(method="create", key=command.submission_key, request=request_id)
            case c.Poll():
                return Request(method="get", task_id=command.operation_id)
            case c.FetchResult():
                return Request(method="result", task_id=command.operation_id)
            case c.SendCancel():
                return Request(method="cancel", task_id=command.operation_id)
        raise TypeError(f"no request for {command!r}")

    def request_at(self, action: Action, request_id: str, now: float) -> Request:
        """The request as sent at ``now`` (Apify adds its ``waitSecs``)."""
        return self.request(action, request_id)

    def timeout(self, action: Action) -> Outcome:
        """No reply came (request or response lost): what the executor can conclude."""
        kind = _REQUEST_KIND[action.kind]
        if kind is RequestKind.SUBMIT:
            return Outcome(event=e.SubmitOutcomeLost(reason="create timed out (no response)"))
        return Outcome(
            event=e.RequestFailed(request=kind, failure=FailureKind.TIMEOUT, detail="no response")
        )

    def outcome(self, action: Action, reply: Reply) -> Outcome | None:
        raise NotImplementedError

    def exchange(
        self, action: Action, request_id: str, now: float
    ) -> Generator[Request, Any, Outcome | None]:
        """The action as an exchange over the simulated network (like the mappings')."""
        shortcut = self.shortcut(action)
        if shortcut is not None:
            return shortcut
        reply = yield self.request_at(action, request_id, now)
        if reply is TIMED_OUT:
            return self.timeout(action)
        return self.outcome(action, reply)


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
            wait = self._wait(action, now)
            return dataclasses.replace(request, wait_s=wait, timeout_s=TIMEOUT_S + wait)
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


def interim_adapter(protocol: str) -> SimAdapter:
    """The interim sim adapter of AIP-151 or Apify-style (one per process and server)."""
    return Aip151SimAdapter() if protocol == AIP151 else ApifySimAdapter()


__all__ = [
    "TIMED_OUT",
    "Aip151SimAdapter",
    "ApifySimAdapter",
    "Request",
    "SimAdapter",
    "interim_adapter",
]
