"""P2: MCP protocol 2025-11-25 experimental tasks, client side — the pure mapping.

Owns: the wire ⇄ event mapping of this version, as exchanges: ``params.task {ttl}``
only for tools whose ``execution.taskSupport`` is ``optional``/``required``, the
nested ``CreateTaskResult``, ``tasks/get`` (its ``taskId`` checked against ours, C3),
``tasks/result`` only after a terminal ``tasks/get`` (X6; its related-task ``_meta``
checked against ours, C3), input through the ``tasks/result`` side channel (X4: the
server's ``elicitation/create`` requests on that stream become
``InputRequestObserved``; :meth:`LegacyMapping.send_input` answers them as JSON-RPC
responses with the related-task ``_meta``), ``tasks/cancel`` whose success is proof of
the cancelled terminal and whose -32602 on a terminal task is a refusal (X5), and
:data:`JSONRPC_FAILURES` (X9).

Must not: perform I/O, call ``tasks/result`` before the task is terminal except to open
the input side channel, treat a ``working`` status as completion, or raise for a
remote failure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from longcall.adapters.base import Outcome, ToolBinding
from longcall.adapters.exchange import Exchange, StreamWatch, TransportFailure
from longcall.adapters.mcp.common import (
    STATUSES,
    BindingCache,
    cancellation_observed,
    check_task_identity,
    fetch_failed,
    lookup_answer,
    lookup_unsupported,
    ms_to_s,
    request_failed,
    submission_lookup_of,
    submit_failure,
    task_request_failed,
    task_status,
    text_or_none,
    with_progress,
)
from longcall.adapters.mcp.results import protocol_error_result, verify_result
from longcall.adapters.mcp.rpc import (
    LEGACY,
    RELATED_TASK_META_KEY,
    SUBMISSION_KEY_EXTENSION,
    Dialect,
    RpcChannel,
    RpcReply,
    call,
    post,
)
from longcall.adapters.outcomes import foreign_identity, no_operation_id
from longcall.core.events import (
    CancelAcknowledged,
    CancelRefused,
    InputRequestObserved,
    OperationNotFound,
    SubmitAcknowledged,
    SubmitOutcomeLost,
    TerminalObserved,
    WorkingObserved,
)
from longcall.core.keys import canonical_json, digest_json
from longcall.core.record import OperationRecord, ServerStatus
from longcall.core.retry import FailureKind, RequestKind

PROTOCOL = LEGACY
ADAPTER_VERSION = "1"
DEFAULT_TTL_MS = 3_600_000
INPUT_METHODS = frozenset({"elicitation/create", "sampling/createMessage", "roots/list"})
"""Server requests that ask the client for input on the side channel (X4)."""
SIDE_CHANNEL = StreamWatch(stop_on=INPUT_METHODS, wait_s=5.0, gather_s=0.05)
"""Open ``tasks/result`` this long for the first input request, then gather its siblings."""

JSONRPC_FAILURES: Mapping[int, FailureKind] = {
    -32700: FailureKind.BAD_REQUEST,
    -32600: FailureKind.BAD_REQUEST,  # also "task augmentation required" (§2.4, MAY)
    -32601: FailureKind.BAD_REQUEST,  # also "task required/forbidden" (tool-level rule)
    -32602: FailureKind.VALIDATION,
    -32603: FailureKind.SERVER_ERROR,
    -32021: FailureKind.BAD_REQUEST,  # fastmcp-tasks answers this for required tools
}
"""X9: this version's table from JSON-RPC error codes to failure kinds."""

REJECTING_CODES = frozenset({-32602, -32601, -32600, -32021})
"""A create answered with one of these was not processed (unknown tool, invalid
arguments, task required/forbidden in any of its three spellings)."""


def input_key(request: Mapping[str, Any]) -> str:
    """A stable key for a side-channel request: its id when the server names it with a
    string (stable across streams), else a digest of what it asks."""
    request_id = request.get("id")
    if isinstance(request_id, str) and request_id:
        return request_id
    params = {k: v for k, v in (request.get("params") or {}).items() if k != "_meta"}
    return "rq-" + digest_json({"method": request.get("method"), "params": params})[7:39]


def related_task(message: Mapping[str, Any]) -> str | None:
    """The task a message says it belongs to (related-task ``_meta``), if it says."""
    meta = message.get("_meta")
    related = meta.get(RELATED_TASK_META_KEY) if isinstance(meta, Mapping) else None
    task_id = related.get("taskId") if isinstance(related, Mapping) else None
    return task_id if isinstance(task_id, str) else None


class LegacyMapping(BindingCache):
    """P2 at one server, for one client process."""

    protocol = PROTOCOL
    version = ADAPTER_VERSION

    def __init__(
        self,
        url: str,
        *,
        initialized: Mapping[str, Any] | None = None,
        ttl_ms: int = DEFAULT_TTL_MS,
        channel: RpcChannel | None = None,
    ) -> None:
        self.url = url
        self.channel = channel or RpcChannel(Dialect())
        self.ttl_ms = ttl_ms
        capabilities = (initialized or {}).get("capabilities") or {}
        experimental = capabilities.get("experimental") if isinstance(capabilities, Mapping) else {}
        self.submission_lookup, self.lookup_method, self.store_id = submission_lookup_of(
            experimental
        )
        self.bindings: dict[str, ToolBinding] = {}
        self.listed_at: dict[str, int] = {}
        self._side_requests: dict[tuple[str, str], Any] = {}
        """(task id, input key) -> the JSON-RPC id of the server's side-channel request."""

    def _call(self, method: str, params: Mapping[str, Any], **kw: Any) -> Exchange[RpcReply]:
        return call(self.channel, method, params, **kw)

    # --- create (X2) ------------------------------------------------------------------------

    def submit(self, record: OperationRecord, arguments: Mapping[str, Any]) -> Exchange[Outcome]:
        binding = yield from self._binding(record.tool_name)
        meta: dict[str, Any] = {"progressToken": record.call_node_id}
        if self.submission_lookup:
            meta[SUBMISSION_KEY_EXTENSION] = record.submission_key  # X2, S3
        params: dict[str, Any] = {
            "name": record.tool_name,
            "arguments": dict(arguments),
            "_meta": meta,
        }
        if binding is not None and binding.task_support in ("optional", "required"):
            params["task"] = {"ttl": self.ttl_ms}  # only where the tool declares support
        answer = yield from self._call("tools/call", params)
        if isinstance(answer, TransportFailure) or answer.error is not None:
            return submit_failure(
                answer, failures=JSONRPC_FAILURES, rejecting_codes=REJECTING_CODES
            )
        result = answer.result or {}
        task = result.get("task")
        if isinstance(task, Mapping):
            task_id = task.get("taskId")
            status = STATUSES.get(str(task.get("status")))
            if not isinstance(task_id, str) or not task_id or status is None:
                return Outcome(event=SubmitOutcomeLost(reason="CreateTaskResult without a task id"))
            return Outcome(
                event=SubmitAcknowledged(
                    operation_id=task_id,
                    server_status=status,
                    server_status_raw=str(task.get("status")),
                    status_message=text_or_none(task.get("statusMessage")),
                    poll_interval_s=ms_to_s(task.get("pollInterval")),
                    ttl_s=ms_to_s(task.get("ttl")),
                )
            )
        # A server without the capability processes the call normally (§2.1).
        outcome = verify_result(result, output_schema=binding.output_schema if binding else None)
        return with_progress(outcome, answer.messages)

    def lookup(self, record: OperationRecord) -> Exchange[Outcome]:
        if not self.submission_lookup:
            return lookup_unsupported()
        answer = yield from self._call(self.lookup_method, {"submissionKey": record.submission_key})
        return lookup_answer(answer, JSONRPC_FAILURES, submitted_to=record.server_store_id)

    # --- status and input (X3, X4) --------------------------------------------------------

    def poll(self, record: OperationRecord) -> Exchange[Outcome]:
        task_id = record.operation_id
        if task_id is None:
            return no_operation_id(RequestKind.POLL)
        answer = yield from self._call("tasks/get", {"taskId": task_id})
        if isinstance(answer, TransportFailure) or answer.error is not None:
            return task_request_failed(RequestKind.POLL, answer, JSONRPC_FAILURES)
        task = answer.result or {}
        read = task_status(task, task_id, interval_key="pollInterval")
        if isinstance(read, Outcome):
            return read
        status, raw, message, interval = read.status, read.raw, read.message, read.interval_s
        if status is ServerStatus.WORKING:
            return Outcome(
                event=WorkingObserved(
                    server_status_raw=raw,
                    status_message=message,
                    poll_interval_s=interval,
                    progressed=message != record.status_message,
                )
            )
        if status is ServerStatus.INPUT_REQUIRED:
            outcome = yield from self._side_channel(task_id, message, interval)
            return outcome
        if status is ServerStatus.CANCELLED:
            return cancellation_observed(task, raw)
        return Outcome(
            event=TerminalObserved(status=status, server_status_raw=raw, status_message=message)
        )

    def _side_channel(
        self, task_id: str, message: str | None, interval: float | None
    ) -> Exchange[Outcome]:
        """X4: open ``tasks/result`` and collect the server's input requests on it."""
        answer = yield from self._call("tasks/result", {"taskId": task_id}, watch=SIDE_CHANNEL)
        if isinstance(answer, TransportFailure):
            # The status read before it told an interval: the retry honours it (X3).
            return request_failed(
                RequestKind.POLL, answer, JSONRPC_FAILURES, poll_interval_s=interval
            )
        collected = [
            m
            for m in answer.messages
            if "id" in m
            and m.get("method") in INPUT_METHODS
            # C3: a request the server says belongs to another task is not ours to answer.
            and related_task(m.get("params") or {}) in (None, task_id)
        ]
        if not collected:
            # The task ended while we looked (the next poll reports the terminal), or
            # nothing was asked yet.
            return Outcome(
                event=WorkingObserved(
                    server_status_raw="input_required",
                    status_message=message,
                    poll_interval_s=interval,
                )
            )
        requests: dict[str, Any] = {}
        for request in collected:
            key = input_key(request)
            self._side_requests[(task_id, key)] = request["id"]
            params = {k: v for k, v in (request.get("params") or {}).items() if k != "_meta"}
            requests[key] = {"method": request.get("method"), "params": params}
        return Outcome(
            event=InputRequestObserved(
                keys=tuple(sorted(requests)),
                schema_digest=digest_json(
                    {k: v["params"].get("requestedSchema") for k, v in requests.items()}
                ),
                server_status_raw="input_required",
                status_message=message,
                poll_interval_s=interval,
            ),
            payload=canonical_json(requests),
        )

    def send_input(
        self, record: OperationRecord, answers: Mapping[str, Any]
    ) -> Exchange[Outcome | None]:
        task_id = record.operation_id
        if task_id is None:
            return no_operation_id(RequestKind.INPUT)
        # X4: the machine recorded these keys (InputAnswered) before this send.
        for key, value in answers.items():
            request_id = self._side_requests.get((task_id, key), key)
            body = dict(value) if isinstance(value, Mapping) else {"action": "accept"}
            body["_meta"] = {RELATED_TASK_META_KEY: {"taskId": task_id}}
            failure = yield from post(self.channel, self.channel.response(request_id, body))
            if failure is not None:
                # A 400 may be an unknown task or an invalid answer: never retried (X9).
                return request_failed(RequestKind.INPUT, failure, JSONRPC_FAILURES)
            self._side_requests.pop((task_id, key), None)
        return None

    # --- result (X6) -------------------------------------------------------------------------

    def fetch_result(self, record: OperationRecord) -> Exchange[Outcome]:
        task_id = record.operation_id
        if task_id is None:
            return no_operation_id(RequestKind.FETCH)
        # Only after a terminal tasks/get (the runtime calls this from TERMINAL_OBSERVED).
        answer = yield from self._call("tasks/result", {"taskId": task_id})
        if isinstance(answer, TransportFailure):
            return fetch_failed(answer, JSONRPC_FAILURES)
        if answer.error is not None:
            error = answer.error
            if error.get("code") == -32602:
                gone = yield from self._gone(record, task_id, str(error.get("message")))
                if gone is not None:
                    return gone
            # X6: the JSON-RPC error answering our tasks/result IS the task's outcome.
            return protocol_error_result(error, operation_id=task_id)
        result = answer.result or {}
        named = related_task(result)
        if named is not None and named != task_id:
            # C3: the result of another task is never accepted as ours.
            return foreign_identity(
                RequestKind.FETCH,
                f"asked for the result of task {task_id!r}, the server answered {named!r}'s",
            )
        binding = yield from self._binding(record.tool_name)
        status = record.server_status or ServerStatus.COMPLETED
        if status not in (ServerStatus.COMPLETED, ServerStatus.FAILED):
            status = ServerStatus.COMPLETED
        return verify_result(
            result,
            output_schema=binding.output_schema if binding else None,
            status=status,
            operation_id=task_id,
        )

    def _gone(
        self, record: OperationRecord, task_id: str, message: str
    ) -> Exchange[Outcome | None]:
        """-32602 from ``tasks/result`` is either "no such task" (unknown, or expired
        since its terminal was read) or the tool's own invalid-params error, which
        ``tasks/result`` returns as the task's outcome. Before a terminal was read it can
        only be the first; after one, ``tasks/get`` tells them apart: a task it still
        finds ended, and the error is its outcome (None); a task it cannot find is gone
        with its result (X7: not found is never an outcome)."""
        if record.server_status is None:
            return Outcome(event=OperationNotFound(detail=message))
        answer = yield from self._call("tasks/get", {"taskId": task_id})
        if isinstance(answer, TransportFailure):
            return fetch_failed(answer, JSONRPC_FAILURES)
        if answer.error is not None:
            if answer.error.get("code") == -32602:
                detail = f"tasks/result: {message}; tasks/get: {answer.error.get('message')}"
                return Outcome(event=OperationNotFound(detail=detail))
            return task_request_failed(RequestKind.FETCH, answer, JSONRPC_FAILURES)
        read = task_status(answer.result or {}, task_id, interval_key="pollInterval")
        if isinstance(read, Outcome):
            return read
        if read.status in (ServerStatus.COMPLETED, ServerStatus.FAILED):
            return None
        return Outcome(
            event=OperationNotFound(
                detail=f"tasks/result: {message}, while tasks/get says {read.raw!r} of a task"
                f" already read as {record.server_status_raw!r}"
            )
        )

    # --- cancel (X5) ---------------------------------------------------------------------------

    def cancel(self, record: OperationRecord) -> Exchange[Outcome]:
        task_id = record.operation_id
        if task_id is None:
            return no_operation_id(RequestKind.CANCEL)
        answer = yield from self._call("tasks/cancel", {"taskId": task_id})
        if isinstance(answer, TransportFailure):
            return task_request_failed(RequestKind.CANCEL, answer, JSONRPC_FAILURES)
        if answer.error is not None:
            error = answer.error
            data = error.get("data")
            text = str(error.get("message", ""))
            terminal = (isinstance(data, Mapping) and "status" in data) or "terminal" in text
            if error.get("code") == -32602 and terminal:
                # X5: already completed/failed: read that terminal, never rewrite it.
                return Outcome(event=CancelRefused(reason=text))
            return task_request_failed(RequestKind.CANCEL, answer, JSONRPC_FAILURES)
        task = answer.result or {}
        foreign = check_task_identity(RequestKind.CANCEL, task, task_id, required=False)
        if foreign is not None:
            return foreign
        if task.get("status") == "cancelled":
            # X5: a successful 2025-11-25 cancel is proof of the cancelled terminal.
            return cancellation_observed(task, "cancelled")
        return Outcome(event=CancelAcknowledged(cancel_generation=record.cancel_generation))


__all__ = [
    "ADAPTER_VERSION",
    "DEFAULT_TTL_MS",
    "JSONRPC_FAILURES",
    "PROTOCOL",
    "REJECTING_CODES",
    "LegacyMapping",
    "input_key",
    "related_task",
]
