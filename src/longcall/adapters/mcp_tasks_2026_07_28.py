"""P1: MCP protocol 2026-07-28 with the ``io.modelcontextprotocol/tasks`` extension
(SEP-2663), client side.

Owns: the wire ⇄ event mapping of this version — the per-request ``_meta`` consent,
``Mcp-Method``/``Mcp-Name`` on ``tasks/*``, dispatch on the polymorphic ``resultType``,
``tasks/get`` with inlined ``result``/``error``/``inputRequests``, ``tasks/update``,
``tasks/cancel`` (an ack, never a terminal: X5), the ``dev.longcall/submissionKey``
extension and its lookup (X2), and :data:`JSONRPC_FAILURES`, this adapter's one table
from JSON-RPC codes to core failure kinds (X9).

Must not: decide what happens next (the core does), keep state the ledger does not
(the inlined result it remembers is only a cache: ``fetch_result`` re-reads
``tasks/get`` after a restart), or raise for a remote failure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from longcall.adapters.base import (
    Adapter,
    AdapterError,
    Outcome,
    ProgressSink,
    ToolBinding,
    UnknownTool,
)
from longcall.adapters.mcp_common import (
    DEFAULT_LOOKUP_METHOD,
    MODERN,
    SUBMISSION_KEY_EXTENSION,
    ModernDialect,
    RpcAnswer,
    RpcSession,
    WireFailure,
    descriptor_digest,
    error_body,
    fetch_failure,
    find_tool,
    list_tools,
    progress_hook,
    protocol_error_result,
    task_support_of,
    tool_idempotent,
    verify_result,
)
from longcall.core.events import (
    CancelAcknowledged,
    CancellationObserved,
    InputRequestObserved,
    OperationNotFound,
    RequestFailed,
    ResultFetchFailed,
    SubmissionFound,
    SubmissionNeverCreated,
    SubmitAcknowledged,
    SubmitOutcomeLost,
    SubmitRejected,
    TerminalObserved,
    WorkingObserved,
)
from longcall.core.keys import canonical_json, digest_bytes, digest_json
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
    return JSONRPC_FAILURES.get(code, FailureKind.BAD_REQUEST)


def request_failed(request: RequestKind, failure: WireFailure | RpcAnswer) -> Outcome:
    """A request-level failure as ``RequestFailed`` (X9)."""
    if isinstance(failure, WireFailure):
        return Outcome(
            event=RequestFailed(
                request=request,
                failure=failure.kind,
                retry_after_s=failure.retry_after_s,
                detail=failure.detail,
            )
        )
    error = failure.error or {}
    code = error.get("code")
    return Outcome(
        event=RequestFailed(
            request=request,
            failure=jsonrpc_failure(code) if isinstance(code, int) else FailureKind.BAD_REQUEST,
            detail=f"JSON-RPC {code}: {error.get('message')}",
        )
    )


def submit_failure(failure: WireFailure | RpcAnswer) -> Outcome:
    """X2: a failed create is lost (ambiguous), failed (proved unprocessed) or rejected."""
    if isinstance(failure, WireFailure):
        if failure.processed_possible:
            return Outcome(event=SubmitOutcomeLost(reason=failure.detail))
        return request_failed(RequestKind.SUBMIT, failure)
    error = failure.error or {}
    code = error.get("code")
    if code in REJECTING_CODES:
        body = error_body(error)
        payload = canonical_json(body)
        return Outcome(
            event=SubmitRejected(
                reason=f"JSON-RPC {code}: {error.get('message')}",
                result_digest=digest_bytes(payload),
            ),
            payload=payload,
        )
    if code == -32603 or (isinstance(code, int) and -32099 <= code <= -32000):
        # An internal error may strike after the task was created: ambiguous.
        return Outcome(event=SubmitOutcomeLost(reason=f"JSON-RPC {code}: {error.get('message')}"))
    return request_failed(RequestKind.SUBMIT, failure)


def _ms_to_s(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value) / 1000.0
    return None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


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
        extensions = extensions if isinstance(extensions, Mapping) else {}
        submission = extensions.get(SUBMISSION_KEY_EXTENSION)
        self.submission_lookup = isinstance(submission, Mapping)
        self.lookup_method = DEFAULT_LOOKUP_METHOD
        if isinstance(submission, Mapping) and isinstance(submission.get("lookupMethod"), str):
            self.lookup_method = submission["lookupMethod"]
        self._bindings: dict[str, ToolBinding] = {}
        self._terminal: dict[str, dict[str, Any]] = {}
        """Inlined terminal bodies by task id: a cache only (X6 re-reads after restart)."""
        self._last_updated: dict[str, str] = {}

    # --- negotiation (X1) ------------------------------------------------------------

    async def bind(self, tool_name: str) -> ToolBinding:
        listed = await list_tools(self.session, self.dialect, consent=True)
        if not isinstance(listed, list):
            raise AdapterError(f"tools/list failed at {self.session.url}: {_describe(listed)}")
        tool = find_tool(listed, tool_name)
        if tool is None:
            raise UnknownTool(f"{self.session.url} does not list tool {tool_name!r}")
        # 2026-07-28 has no per-tool flag on the wire: the server decides per request.
        support = task_support_of(tool) or "optional"
        schema = tool.get("outputSchema")
        binding = ToolBinding(
            server=self.session.url,
            tool_name=tool_name,
            protocol=PROTOCOL,
            adapter_version=ADAPTER_VERSION,
            descriptor_digest=descriptor_digest(tool),
            task_support=support,  # type: ignore[arg-type]
            idempotent=tool_idempotent(tool),
            submission_lookup=self.submission_lookup,
            output_schema=schema if isinstance(schema, Mapping) else None,
        )
        self._bindings[tool_name] = binding
        return binding

    async def _binding(self, tool_name: str) -> ToolBinding | None:
        if tool_name not in self._bindings:
            try:
                await self.bind(tool_name)
            except AdapterError:
                return None
        return self._bindings.get(tool_name)

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
            if seen:
                outcome = Outcome(event=outcome.event, payload=outcome.payload, progress=seen[-1])
            return outcome
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
                status_message=_text(result.get("statusMessage")),
                poll_interval_s=_ms_to_s(result.get("pollIntervalMs")),
                ttl_s=_ms_to_s(result.get("ttlMs")),
            )
        )

    async def lookup(self, record: OperationRecord) -> Outcome:
        if not self.submission_lookup:
            return Outcome(
                event=RequestFailed(
                    request=RequestKind.LOOKUP,
                    failure=FailureKind.BAD_REQUEST,
                    detail="the server offers no lookup by submission key",
                )
            )
        method = self.lookup_method
        params = self._params(method, {"submissionKey": record.submission_key})
        answer = await self.session.request(
            method, params, headers=self.dialect.headers(method, None)
        )
        if isinstance(answer, WireFailure) or answer.error is not None:
            return request_failed(RequestKind.LOOKUP, answer)
        result = answer.result or {}
        if result.get("found") is True and isinstance(result.get("taskId"), str):
            return Outcome(event=SubmissionFound(operation_id=result["taskId"]))
        if result.get("found") is False:
            return Outcome(event=SubmissionNeverCreated())
        return Outcome(
            event=RequestFailed(
                request=RequestKind.LOOKUP,
                failure=FailureKind.MALFORMED_RESPONSE,
                detail="lookup result has no boolean 'found'",
            )
        )

    async def poll(self, record: OperationRecord) -> Outcome:
        task_id = record.operation_id
        if task_id is None:
            return _no_id(RequestKind.POLL)
        answer = await self._task_request("tasks/get", task_id)
        if isinstance(answer, WireFailure):
            return request_failed(RequestKind.POLL, answer)
        if answer.error is not None:
            return self._task_error(RequestKind.POLL, answer)
        return self.map_task(record, answer.result or {})

    def map_task(self, record: OperationRecord, task: Mapping[str, Any]) -> Outcome:
        """One ``DetailedTask`` (from tasks/get or notifications/tasks) as an event."""
        raw = task.get("status")
        status = STATUSES.get(str(raw))
        task_id = record.operation_id or ""
        message = _text(task.get("statusMessage"))
        interval = _ms_to_s(task.get("pollIntervalMs"))
        if status is None or task.get("taskId") not in (None, task_id):
            return Outcome(
                event=RequestFailed(
                    request=RequestKind.POLL,
                    failure=FailureKind.MALFORMED_RESPONSE,
                    detail=f"tasks/get answered status {raw!r} for task {task.get('taskId')!r}",
                )
            )
        if message is not None and message != record.status_message and self.progress:
            self.progress(record.call_node_id, None, message)  # X11: a new status message
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
            payload = canonical_json(_status_body(task))
            return Outcome(
                event=CancellationObserved(
                    result_digest=digest_bytes(payload), server_status_raw=str(raw)
                ),
                payload=payload,
            )
        self._terminal[task_id] = dict(task)
        return Outcome(
            event=TerminalObserved(
                status=status, server_status_raw=str(raw), status_message=message
            )
        )

    async def fetch_result(self, record: OperationRecord) -> Outcome:
        task_id = record.operation_id
        if task_id is None:
            return _no_id(RequestKind.FETCH)
        task = self._terminal.pop(task_id, None)  # a cache entry is used once
        if task is None:
            # After a restart the cache is empty: the result is inlined in tasks/get (X6).
            answer = await self._task_request("tasks/get", task_id)
            if isinstance(answer, WireFailure):
                return fetch_failure(answer)
            if answer.error is not None:
                return self._task_error(RequestKind.FETCH, answer)
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
            return _no_id(RequestKind.CANCEL)
        answer = await self._task_request("tasks/cancel", task_id)
        if isinstance(answer, WireFailure):
            return request_failed(RequestKind.CANCEL, answer)
        if answer.error is not None:
            return self._task_error(RequestKind.CANCEL, answer)
        # X5: the ack is a request, not a terminal; polling finds the real one.
        return Outcome(event=CancelAcknowledged(cancel_generation=record.cancel_generation))

    async def send_input(
        self, record: OperationRecord, answers: Mapping[str, Any]
    ) -> Outcome | None:
        task_id = record.operation_id
        if task_id is None:
            return _no_id(RequestKind.INPUT)
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

    def _task_error(self, request: RequestKind, answer: RpcAnswer) -> Outcome:
        error = answer.error or {}
        if error.get("code") == -32602:
            # Unknown, expired or another principal's task: all answered alike (X7).
            return Outcome(event=OperationNotFound(detail=str(error.get("message"))))
        return request_failed(request, answer)

    async def aclose(self) -> None:
        await self.session.aclose()


def _requested_schema(request: Any) -> Any:
    params = request.get("params") if isinstance(request, Mapping) else None
    if isinstance(params, Mapping):
        return {"method": request.get("method"), "schema": params.get("requestedSchema")}
    return request


def _status_body(task: Mapping[str, Any]) -> dict[str, Any]:
    """The canonical status body kept as evidence of a cancellation (volatile keys out)."""
    return {
        key: value
        for key, value in task.items()
        if key in ("taskId", "status", "statusMessage", "createdAt")
    }


def _no_id(request: RequestKind) -> Outcome:
    return Outcome(
        event=RequestFailed(
            request=request, failure=FailureKind.BAD_REQUEST, detail="the record has no task id"
        )
    )


def _describe(failure: RpcAnswer | WireFailure) -> str:
    if isinstance(failure, WireFailure):
        return failure.detail
    return f"JSON-RPC {(failure.error or {}).get('code')}: {(failure.error or {}).get('message')}"
