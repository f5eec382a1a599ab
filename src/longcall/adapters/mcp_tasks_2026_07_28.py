"""P1: MCP protocol 2026-07-28 with the ``io.modelcontextprotocol/tasks`` extension
(SEP-2663), client side.

Owns: the wire ⇄ event mapping of this version — the per-request ``_meta`` consent,
``Mcp-Method``/``Mcp-Name`` on ``tasks/*``, dispatch on the polymorphic ``resultType``,
``tasks/get`` with inlined ``result``/``error``/``inputRequests``, ``tasks/update``,
``tasks/cancel`` (an ack, never a terminal: X5), ``subscriptions/listen`` for the
tasks we hold, whose ``notifications/tasks`` only wake the poller (X3, S7), the
``dev.longcall/submissionKey``
extension and its lookup (X2), and :data:`JSONRPC_FAILURES`, this adapter's one table
from JSON-RPC codes to core failure kinds (X9).

Must not: decide what happens next (the core does), keep state the ledger does not
(the inlined result it remembers is only a cache: ``fetch_result`` re-reads
``tasks/get`` after a restart), or raise for a remote failure.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from longcall.adapters import mcp_common
from longcall.adapters.base import (
    Adapter,
    Outcome,
    ProgressSink,
    PushSink,
    ToolBinding,
)
from longcall.adapters.mcp_common import (
    MODERN,
    SUBMISSION_KEY_EXTENSION,
    ModernDialect,
    RpcAnswer,
    RpcSession,
    WireFailure,
    binding_or_none,
    cancellation_observed,
    failure_detail,
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
    InputRequestObserved,
    RequestFailed,
    ResultFetchFailed,
    SubmitAcknowledged,
    SubmitOutcomeLost,
    TerminalObserved,
    WorkingObserved,
)
from longcall.core.keys import canonical_json, digest_json
from longcall.core.record import OperationRecord, ServerStatus
from longcall.core.retry import FailureKind, RequestKind

PROTOCOL = MODERN
ADAPTER_VERSION = "1"

JSONRPC_FAILURES: Mapping[int, FailureKind] = {
    -32700: FailureKind.BAD_REQUEST,
    -32600: FailureKind.BAD_REQUEST,
    -32601: FailureKind.BAD_REQUEST,
    -32602: FailureKind.VALIDATION,
    -32603: FailureKind.SERVER_ERROR,
    -32020: FailureKind.BAD_REQUEST,  # HeaderMismatch: our framing is wrong, never retry
    -32021: FailureKind.BAD_REQUEST,  # MissingRequiredClientCapability
    -32022: FailureKind.BAD_REQUEST,  # UnsupportedProtocolVersion
}
"""X9: this adapter's table from JSON-RPC error codes to failure kinds; an unknown
code is not retried (BAD_REQUEST)."""

REJECTING_CODES = frozenset({-32602, -32601, -32600, -32021})
"""A create answered with one of these was not processed: the error is the outcome."""

STATUSES: Mapping[str, ServerStatus] = {status.value: status for status in ServerStatus}


def jsonrpc_failure(code: int) -> FailureKind:
    return mcp_common.jsonrpc_failure(JSONRPC_FAILURES, code)


def request_failed(request: RequestKind, failure: WireFailure | RpcAnswer) -> Outcome:
    """A request-level failure as ``RequestFailed``, classified by this version's table."""
    return mcp_common.request_failed(request, failure, JSONRPC_FAILURES)


def submit_failure(failure: WireFailure | RpcAnswer) -> Outcome:
    """X2: a failed create is lost (ambiguous), failed (proved unprocessed) or rejected."""
    return mcp_common.submit_failure(
        failure, failures=JSONRPC_FAILURES, rejecting_codes=REJECTING_CODES
    )


class McpTasks20260728Adapter(Adapter):
    """P1 at one server. Build it with :func:`longcall.adapters.negotiate.connect`, or
    directly with a ``server/discover`` result."""

    protocol = PROTOCOL
    version = ADAPTER_VERSION

    def __init__(
        self,
        session: RpcSession,
        *,
        discovered: Mapping[str, Any] | None = None,
        progress: ProgressSink | None = None,
    ) -> None:
        self.session = session
        self.dialect = ModernDialect()
        self.progress = progress
        capabilities = (discovered or {}).get("capabilities") or {}
        extensions = capabilities.get("extensions") if isinstance(capabilities, Mapping) else {}
        self.submission_lookup, self.lookup_method = submission_lookup_of(extensions)
        self._bindings: dict[str, ToolBinding] = {}
        self._terminal: dict[str, dict[str, Any]] = {}
        """Inlined terminal bodies by task id: a cache only (X6 re-reads after restart)."""
        self._last_updated: dict[str, str] = {}

    # --- negotiation (X1) ------------------------------------------------------------

    async def bind(self, tool_name: str) -> ToolBinding:
        tool = await listed_tool(
            self.session, self.dialect, tool_name, consent=True, describe=failure_detail
        )
        # 2026-07-28 has no per-tool flag on the wire: the server decides per request.
        binding = tool_binding(
            self.session.url,
            tool_name,
            tool,
            protocol=PROTOCOL,
            adapter_version=ADAPTER_VERSION,
            task_support=task_support_of(tool) or "optional",
            submission_lookup=self.submission_lookup,
        )
        self._bindings[tool_name] = binding
        return binding

    async def _binding(self, tool_name: str) -> ToolBinding | None:
        return await binding_or_none(self._bindings, self.bind, tool_name)

    # --- requests ----------------------------------------------------------------------

    def _params(self, method: str, params: Mapping[str, Any], **meta: Any) -> dict[str, Any]:
        return {**params, "_meta": {**self.dialect.meta(method, consent=True), **meta}}

    async def _task_request(
        self, method: str, task_id: str, extra: Mapping[str, Any] | None = None
    ) -> RpcAnswer | WireFailure:
        params = self._params(method, {"taskId": task_id, **(extra or {})})
        return await self.session.request(
            method, params, headers=self.dialect.headers(method, task_id)
        )

    async def submit(self, record: OperationRecord, arguments: Mapping[str, Any]) -> Outcome:
        meta: dict[str, Any] = {"progressToken": record.call_node_id}
        if self.submission_lookup:
            meta[SUBMISSION_KEY_EXTENSION] = record.submission_key  # X2, S3
        params = self._params(
            "tools/call", {"name": record.tool_name, "arguments": dict(arguments)}, **meta
        )
        seen: list[float] = []
        answer = await self.session.request(
            "tools/call",
            params,
            headers=self.dialect.headers("tools/call", record.tool_name),
            on_message=progress_hook(self.progress, record.call_node_id, seen),
        )
        if isinstance(answer, WireFailure) or answer.error is not None:
            return submit_failure(answer)
        result = answer.result or {}
        kind = result.get("resultType", "complete")
        if kind == "task":
            return self._created(result)
        if kind == "complete":
            binding = await self._binding(record.tool_name)
            outcome = verify_result(
                result, output_schema=binding.output_schema if binding else None
            )
            return with_progress(outcome, seen)
        if kind == "input_required":
            # SEP-2322 MRTR before any task exists: nothing was created; the runtime has
            # no multi-round create yet, so this is a refusal it must not retry.
            return Outcome(
                event=RequestFailed(
                    request=RequestKind.SUBMIT,
                    failure=FailureKind.BAD_REQUEST,
                    detail="the server asked for input (MRTR) before creating a task;"
                    " multi-round creation is not supported by this adapter",
                )
            )
        return Outcome(event=SubmitOutcomeLost(reason=f"unknown resultType {kind!r}"))

    def _created(self, result: Mapping[str, Any]) -> Outcome:
        task_id = result.get("taskId")
        status = STATUSES.get(str(result.get("status")))
        if not isinstance(task_id, str) or not task_id or status is None:
            return Outcome(event=SubmitOutcomeLost(reason="CreateTaskResult without a task id"))
        if isinstance(result.get("lastUpdatedAt"), str):
            self._last_updated[task_id] = result["lastUpdatedAt"]
        return Outcome(
            event=SubmitAcknowledged(
                operation_id=task_id,
                server_status=status,
                server_status_raw=str(result.get("status")),
                status_message=text_or_none(result.get("statusMessage")),
                poll_interval_s=ms_to_s(result.get("pollIntervalMs")),
                ttl_s=ms_to_s(result.get("ttlMs")),
            )
        )

    async def lookup(self, record: OperationRecord) -> Outcome:
        if not self.submission_lookup:
            return lookup_unsupported()
        method = self.lookup_method
        params = self._params(method, {"submissionKey": record.submission_key})
        answer = await self.session.request(
            method, params, headers=self.dialect.headers(method, None)
        )
        return lookup_answer(answer, JSONRPC_FAILURES)

    async def poll(self, record: OperationRecord) -> Outcome:
        task_id = record.operation_id
        if task_id is None:
            return no_task_id(RequestKind.POLL)
        answer = await self._task_request("tasks/get", task_id)
        if isinstance(answer, WireFailure) or answer.error is not None:
            return task_request_failed(RequestKind.POLL, answer, JSONRPC_FAILURES)
        return self.map_task(record, answer.result or {})

    def map_task(self, record: OperationRecord, task: Mapping[str, Any]) -> Outcome:
        """One ``DetailedTask`` (from tasks/get or notifications/tasks) as an event."""
        raw = task.get("status")
        status = STATUSES.get(str(raw))
        task_id = record.operation_id or ""
        message = text_or_none(task.get("statusMessage"))
        interval = ms_to_s(task.get("pollIntervalMs"))
        if status is None or task.get("taskId") not in (None, task_id):
            return Outcome(
                event=RequestFailed(
                    request=RequestKind.POLL,
                    failure=FailureKind.MALFORMED_RESPONSE,
                    detail=f"tasks/get answered status {raw!r} for task {task.get('taskId')!r}",
                )
            )
        report_status_message(self.progress, record, message)
        if status is ServerStatus.WORKING:
            updated = task.get("lastUpdatedAt")
            previous = self._last_updated.get(task_id)
            if isinstance(updated, str):
                self._last_updated[task_id] = updated
            progressed = message != record.status_message or (
                isinstance(updated, str) and previous is not None and updated != previous
            )
            return Outcome(
                event=WorkingObserved(
                    server_status_raw=str(raw),
                    status_message=message,
                    poll_interval_s=interval,
                    progressed=progressed,
                )
            )
        if status is ServerStatus.INPUT_REQUIRED:
            requests = task.get("inputRequests")
            if not isinstance(requests, Mapping) or not requests:
                # Eventually consistent after tasks/update: nothing outstanding to show.
                return Outcome(
                    event=WorkingObserved(
                        server_status_raw=str(raw), status_message=message, poll_interval_s=interval
                    )
                )
            payload = canonical_json(dict(requests))
            return Outcome(
                event=InputRequestObserved(
                    keys=tuple(sorted(str(key) for key in requests)),
                    schema_digest=digest_json(
                        {key: _requested_schema(value) for key, value in requests.items()}
                    ),
                    server_status_raw=str(raw),
                    status_message=message,
                ),
                payload=payload,
            )
        self._last_updated.pop(task_id, None)  # terminal from here on: nothing to compare
        if status is ServerStatus.CANCELLED:
            return cancellation_observed(task, str(raw))
        self._terminal[task_id] = dict(task)
        return Outcome(
            event=TerminalObserved(
                status=status, server_status_raw=str(raw), status_message=message
            )
        )

    async def fetch_result(self, record: OperationRecord) -> Outcome:
        task_id = record.operation_id
        if task_id is None:
            return no_task_id(RequestKind.FETCH)
        task = self._terminal.pop(task_id, None)  # a cache entry is used once
        if task is None:
            # After a restart the cache is empty: the result is inlined in tasks/get (X6).
            answer = await self._task_request("tasks/get", task_id)
            if isinstance(answer, WireFailure):
                return fetch_failure(answer)
            if answer.error is not None:
                return task_request_failed(RequestKind.FETCH, answer, JSONRPC_FAILURES)
            task = answer.result or {}
        binding = await self._binding(record.tool_name)
        return self.result_of(task, binding, task_id)

    def result_of(
        self, task: Mapping[str, Any], binding: ToolBinding | None, task_id: str
    ) -> Outcome:
        status = task.get("status")
        if status == "completed":
            if "result" not in task:
                return Outcome(
                    event=ResultFetchFailed(
                        reason="completed task without an inlined result", retryable=True
                    )
                )
            return verify_result(
                task["result"],
                output_schema=binding.output_schema if binding else None,
                operation_id=task_id,
            )
        if status == "failed":
            if "error" not in task:
                return Outcome(
                    event=ResultFetchFailed(
                        reason="failed task without an inlined error", retryable=True
                    )
                )
            return protocol_error_result(task["error"], operation_id=task_id)
        return Outcome(
            event=ResultFetchFailed(
                reason=f"no result to fetch: the task is {status!r}", retryable=True
            )
        )

    async def cancel(self, record: OperationRecord) -> Outcome:
        task_id = record.operation_id
        if task_id is None:
            return no_task_id(RequestKind.CANCEL)
        answer = await self._task_request("tasks/cancel", task_id)
        if isinstance(answer, WireFailure) or answer.error is not None:
            return task_request_failed(RequestKind.CANCEL, answer, JSONRPC_FAILURES)
        # X5: the ack is a request, not a terminal; polling finds the real one.
        return Outcome(event=CancelAcknowledged(cancel_generation=record.cancel_generation))

    async def send_input(
        self, record: OperationRecord, answers: Mapping[str, Any]
    ) -> Outcome | None:
        task_id = record.operation_id
        if task_id is None:
            return no_task_id(RequestKind.INPUT)
        if not answers:
            return None
        # X4: the machine recorded these keys as answered (InputAnswered) before this
        # send, so each key reaches the wire once per round; a resend after a failure
        # is harmless (the server ignores already-answered keys, SEP-2663).
        answer = await self._task_request(
            "tasks/update", task_id, {"inputResponses": dict(answers)}
        )
        if isinstance(answer, WireFailure):
            return request_failed(RequestKind.INPUT, answer)
        if answer.error is not None:
            # -32602 here may be an unknown task or a malformed answer: never retried (X9).
            return request_failed(RequestKind.INPUT, answer)
        return None

    async def listen(self, operation_ids: Collection[str], on_change: PushSink) -> None:
        """``subscriptions/listen`` for exactly these task ids (the server acks the ids it
        accepts, sends a snapshot of each, then ``notifications/tasks``, and ends the
        stream once all are terminal); reopened with backoff when it breaks (X3, S7)."""
        task_ids = sorted(operation_ids)
        if not task_ids:
            return
        method = "subscriptions/listen"
        hook = push_hook("notifications/tasks", on_change)

        async def open_once(on_open: Callable[[], None]) -> RpcAnswer | WireFailure:
            params = self._params(method, {"notifications": {"taskIds": task_ids}})
            return await self.session.open_stream(
                method,
                params,
                headers=self.dialect.headers(method, None),
                on_message=hook,
                on_open=on_open,
            )

        await keep_listening(open_once)

    async def aclose(self) -> None:
        await self.session.aclose()


def _requested_schema(request: Any) -> Any:
    params = request.get("params") if isinstance(request, Mapping) else None
    if isinstance(params, Mapping):
        return {"method": request.get("method"), "schema": params.get("requestedSchema")}
    return request
