"""P2: MCP protocol 2025-11-25 experimental tasks, client side.

Owns: the wire ⇄ event mapping of this version — ``params.task {ttl}`` only for tools
whose ``execution.taskSupport`` is ``optional``/``required``, the nested
``CreateTaskResult``, ``tasks/get``, ``tasks/result`` only after a terminal
``tasks/get`` (X6), input through the ``tasks/result`` side channel (X4: the server's
``elicitation/create`` requests on that stream become ``InputRequestObserved``;
``send_input`` answers them as JSON-RPC responses with the related-task ``_meta``),
``tasks/cancel`` whose success is proof of the cancelled terminal and whose -32602 on
a terminal task is a refusal (X5), the standalone GET stream whose
``notifications/tasks/status`` only wake the poller (X3, S7), and
:data:`JSONRPC_FAILURES` (X9).

Must not: call ``tasks/result`` before the task is terminal except to open the input
side channel, treat a ``working`` status as completion, or raise for a remote failure.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

import anyio

from longcall.adapters import mcp_common
from longcall.adapters.base import (
    Adapter,
    Outcome,
    ProgressSink,
    PushSink,
    ToolBinding,
)
from longcall.adapters.mcp_common import (
    LEGACY,
    RELATED_TASK_META_KEY,
    SUBMISSION_KEY_EXTENSION,
    Dialect,
    RpcAnswer,
    RpcSession,
    WireFailure,
    binding_or_none,
    cancellation_observed,
    fetch_failure,
    keep_listening,
    listed_tool,
    lookup_answer,
    lookup_unsupported,
    ms_to_s,
    no_task_id,
    progress_hook,
    protocol_error_result,
    push_hook,
    raw_failure_detail,
    report_status_message,
    submission_lookup_of,
    task_request_failed,
    task_support_of,
    text_or_none,
    tool_binding,
    verify_result,
    with_progress,
)
from longcall.core.events import (
    CancelAcknowledged,
    CancelRefused,
    InputRequestObserved,
    OperationNotFound,
    RequestFailed,
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
INPUT_GATHER_S = 0.05
"""After the first side-channel request, how long to wait for its siblings."""
INPUT_WAIT_S = 5.0
"""How long the side channel may take to show the first input request."""

JSONRPC_FAILURES: Mapping[int, FailureKind] = {
    -32700: FailureKind.BAD_REQUEST,
    -32600: FailureKind.BAD_REQUEST,  # also "task augmentation required" (§2.4, MAY)
    -32601: FailureKind.BAD_REQUEST,  # also "task required/forbidden" (tool-level rule)
    -32602: FailureKind.VALIDATION,
    -32603: FailureKind.SERVER_ERROR,
    -32021: FailureKind.BAD_REQUEST,  # fastmcp-tasks answers this for required tools
}
"""X9: this adapter's table from JSON-RPC error codes to failure kinds."""

REJECTING_CODES = frozenset({-32602, -32601, -32600, -32021})
"""A create answered with one of these was not processed (unknown tool, invalid
arguments, task required/forbidden in any of its three spellings)."""

STATUSES: Mapping[str, ServerStatus] = {status.value: status for status in ServerStatus}


def _failure(request: RequestKind, failure: WireFailure | RpcAnswer) -> Outcome:
    """A request-level failure as ``RequestFailed``, classified by this version's table."""
    return mcp_common.request_failed(request, failure, JSONRPC_FAILURES)


def _task_failure(request: RequestKind, failure: WireFailure | RpcAnswer) -> Outcome:
    """A failed ``tasks/*`` request (-32602: the task is not found, X7)."""
    return task_request_failed(request, failure, JSONRPC_FAILURES)


def _submit_failure(failure: WireFailure | RpcAnswer) -> Outcome:
    """X2: a failed create is lost (ambiguous), failed (proved unprocessed) or rejected."""
    return mcp_common.submit_failure(
        failure, failures=JSONRPC_FAILURES, rejecting_codes=REJECTING_CODES
    )


def input_key(request: Mapping[str, Any]) -> str:
    """A stable key for a side-channel request: its id when the server names it with a
    string (stable across streams), else a digest of what it asks."""
    request_id = request.get("id")
    if isinstance(request_id, str) and request_id:
        return request_id
    params = {k: v for k, v in (request.get("params") or {}).items() if k != "_meta"}
    return "rq-" + digest_json({"method": request.get("method"), "params": params})[7:39]


class McpTasks20251125Adapter(Adapter):
    """P2 at one server; build it with :func:`longcall.adapters.negotiate.connect`."""

    protocol = PROTOCOL
    version = ADAPTER_VERSION

    def __init__(
        self,
        session: RpcSession,
        *,
        initialized: Mapping[str, Any] | None = None,
        progress: ProgressSink | None = None,
        ttl_ms: int = DEFAULT_TTL_MS,
    ) -> None:
        self.session = session
        self.dialect = Dialect()
        self.progress = progress
        self.ttl_ms = ttl_ms
        capabilities = (initialized or {}).get("capabilities") or {}
        experimental = capabilities.get("experimental") if isinstance(capabilities, Mapping) else {}
        self.submission_lookup, self.lookup_method = submission_lookup_of(experimental)
        self._bindings: dict[str, ToolBinding] = {}
        self._side_requests: dict[tuple[str, str], Any] = {}
        """(task id, input key) -> the JSON-RPC id of the server's side-channel request."""

    async def bind(self, tool_name: str) -> ToolBinding:
        tool = await listed_tool(
            self.session, self.dialect, tool_name, consent=False, describe=raw_failure_detail
        )
        binding = tool_binding(
            self.session.url,
            tool_name,
            tool,
            protocol=PROTOCOL,
            adapter_version=ADAPTER_VERSION,
            task_support=task_support_of(tool) or "forbidden",
            submission_lookup=self.submission_lookup,
        )
        self._bindings[tool_name] = binding
        return binding

    async def _binding(self, tool_name: str) -> ToolBinding | None:
        return await binding_or_none(self._bindings, self.bind, tool_name)

    async def _call(
        self, method: str, params: Mapping[str, Any], **kw: Any
    ) -> RpcAnswer | WireFailure:
        return await self.session.request(
            method, params, headers=self.dialect.headers(method, None), **kw
        )

    async def submit(self, record: OperationRecord, arguments: Mapping[str, Any]) -> Outcome:
        binding = await self._binding(record.tool_name)
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
        seen: list[float] = []
        answer = await self._call(
            "tools/call",
            params,
            on_message=progress_hook(self.progress, record.call_node_id, seen),
        )
        if isinstance(answer, WireFailure) or answer.error is not None:
            return _submit_failure(answer)
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
        return with_progress(outcome, seen)

    async def lookup(self, record: OperationRecord) -> Outcome:
        if not self.submission_lookup:
            return lookup_unsupported()
        answer = await self._call(self.lookup_method, {"submissionKey": record.submission_key})
        return lookup_answer(answer, JSONRPC_FAILURES)

    async def poll(self, record: OperationRecord) -> Outcome:
        task_id = record.operation_id
        if task_id is None:
            return no_task_id(RequestKind.POLL)
        answer = await self._call("tasks/get", {"taskId": task_id})
        if isinstance(answer, WireFailure) or answer.error is not None:
            return _task_failure(RequestKind.POLL, answer)
        task = answer.result or {}
        raw = task.get("status")
        status = STATUSES.get(str(raw))
        message = text_or_none(task.get("statusMessage"))
        if status is None:
            return Outcome(
                event=RequestFailed(
                    request=RequestKind.POLL,
                    failure=FailureKind.MALFORMED_RESPONSE,
                    detail=f"tasks/get answered status {raw!r}",
                )
            )
        report_status_message(self.progress, record, message)
        if status is ServerStatus.WORKING:
            return Outcome(
                event=WorkingObserved(
                    server_status_raw=str(raw),
                    status_message=message,
                    poll_interval_s=ms_to_s(task.get("pollInterval")),
                    progressed=message != record.status_message,
                )
            )
        if status is ServerStatus.INPUT_REQUIRED:
            return await self._side_channel(record, task_id, message)
        if status is ServerStatus.CANCELLED:
            return cancellation_observed(task, str(raw))
        return Outcome(
            event=TerminalObserved(
                status=status, server_status_raw=str(raw), status_message=message
            )
        )

    async def _side_channel(
        self, record: OperationRecord, task_id: str, message: str | None
    ) -> Outcome:
        """X4: open ``tasks/result`` and collect the server's input requests on it."""
        collected: list[dict[str, Any]] = []
        scope_holder: list[anyio.CancelScope] = []

        progress = progress_hook(self.progress, record.call_node_id, [])

        def on_message(incoming: dict[str, Any]) -> bool:
            progress(incoming)  # X11: progress for the task may share this stream
            if "id" in incoming and incoming.get("method") in (
                "elicitation/create",
                "sampling/createMessage",
                "roots/list",
            ):
                collected.append(incoming)
                if scope_holder:
                    scope_holder[0].deadline = anyio.current_time() + INPUT_GATHER_S
            return False

        answer: RpcAnswer | WireFailure | None = None
        with anyio.CancelScope(deadline=anyio.current_time() + INPUT_WAIT_S) as scope:
            scope_holder.append(scope)
            answer = await self._call("tasks/result", {"taskId": task_id}, on_message=on_message)
        if not collected:
            if isinstance(answer, RpcAnswer) and answer.result is not None:
                # The task ended while we looked: the next poll reports the terminal.
                return Outcome(event=WorkingObserved(server_status_raw="input_required"))
            if isinstance(answer, WireFailure):
                return _failure(RequestKind.POLL, answer)
            return Outcome(
                event=WorkingObserved(server_status_raw="input_required", status_message=message)
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
            ),
            payload=canonical_json(requests),
        )

    async def send_input(
        self, record: OperationRecord, answers: Mapping[str, Any]
    ) -> Outcome | None:
        task_id = record.operation_id
        if task_id is None:
            return no_task_id(RequestKind.INPUT)
        # X4: the machine recorded these keys (InputAnswered) before this send.
        for key, value in answers.items():
            request_id = self._side_requests.get((task_id, key), key)
            body = dict(value) if isinstance(value, Mapping) else {"action": "accept"}
            body["_meta"] = {RELATED_TASK_META_KEY: {"taskId": task_id}}
            failure = await self.session.post_message(
                {"jsonrpc": "2.0", "id": request_id, "result": body},
                headers=self.dialect.headers("", None),
            )
            if failure is not None:
                # A 400 may be an unknown task or an invalid answer: never retried (X9).
                return _failure(RequestKind.INPUT, failure)
            self._side_requests.pop((task_id, key), None)
        return None

    async def fetch_result(self, record: OperationRecord) -> Outcome:
        task_id = record.operation_id
        if task_id is None:
            return no_task_id(RequestKind.FETCH)
        # Only after a terminal tasks/get (the runtime calls this from TERMINAL_OBSERVED);
        # plain JSON so a (wrongly) non-terminal task cannot open a side channel here.
        answer = await self._call("tasks/result", {"taskId": task_id}, accept="application/json")
        if isinstance(answer, WireFailure):
            return fetch_failure(answer)
        binding = await self._binding(record.tool_name)
        if answer.error is not None:
            error = answer.error
            if error.get("code") == -32602 and record.server_status is None:
                return Outcome(event=OperationNotFound(detail=str(error.get("message"))))
            # X6: the JSON-RPC error IS the task's outcome (protocol error, failed).
            return protocol_error_result(error, operation_id=task_id)
        status = record.server_status or ServerStatus.COMPLETED
        if status not in (ServerStatus.COMPLETED, ServerStatus.FAILED):
            status = ServerStatus.COMPLETED
        return verify_result(
            answer.result,
            output_schema=binding.output_schema if binding else None,
            status=status,
            operation_id=task_id,
        )

    async def cancel(self, record: OperationRecord) -> Outcome:
        task_id = record.operation_id
        if task_id is None:
            return no_task_id(RequestKind.CANCEL)
        answer = await self._call("tasks/cancel", {"taskId": task_id})
        if isinstance(answer, WireFailure):
            return _task_failure(RequestKind.CANCEL, answer)
        if answer.error is not None:
            error = answer.error
            data = error.get("data")
            text = str(error.get("message", ""))
            terminal = (isinstance(data, Mapping) and "status" in data) or "terminal" in text
            if error.get("code") == -32602 and terminal:
                # X5: already completed/failed: read that terminal, never rewrite it.
                return Outcome(event=CancelRefused(reason=text))
            return _task_failure(RequestKind.CANCEL, answer)
        task = answer.result or {}
        if task.get("status") == "cancelled":
            # X5: a successful 2025-11-25 cancel is proof of the cancelled terminal.
            return cancellation_observed(task, "cancelled")
        return Outcome(event=CancelAcknowledged(cancel_generation=record.cancel_generation))

    async def listen(self, operation_ids: Collection[str], on_change: PushSink) -> None:
        """The standalone GET stream: ``notifications/tasks/status`` for every task of our
        principal (ids we do not hold are the caller's to ignore); reopened with backoff
        when it breaks, given up on a 4xx such as 405 (no stream offered) (X3, S7)."""
        if not operation_ids:
            return
        hook = push_hook("notifications/tasks/status", on_change)

        async def open_once(on_open: Callable[[], None]) -> RpcAnswer | WireFailure:
            return await self.session.open_stream(
                None,
                None,
                headers=self.dialect.headers("GET", None),
                on_message=hook,
                on_open=on_open,
            )

        await keep_listening(open_once)

    async def aclose(self) -> None:
        await self.session.aclose()
