"""P2: MCP protocol 2025-11-25 experimental tasks, client side.

Owns: the wire ⇄ event mapping of this version — ``params.task {ttl}`` only for tools
whose ``execution.taskSupport`` is ``optional``/``required``, the nested
``CreateTaskResult``, ``tasks/get``, ``tasks/result`` only after a terminal
``tasks/get`` (X6), input through the ``tasks/result`` side channel (X4: the server's
``elicitation/create`` requests on that stream become ``InputRequestObserved``;
``send_input`` answers them as JSON-RPC responses with the related-task ``_meta``),
``tasks/cancel`` whose success is proof of the cancelled terminal and whose -32602 on
a terminal task is a refusal (X5), and :data:`JSONRPC_FAILURES` (X9).

Must not: call ``tasks/result`` before the task is terminal except to open the input
side channel, treat a ``working`` status as completion, or raise for a remote failure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio

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
    LEGACY,
    RELATED_TASK_META_KEY,
    SUBMISSION_KEY_EXTENSION,
    Dialect,
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
    CancelRefused,
    InputRequestObserved,
    OperationNotFound,
    RequestFailed,
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
    kind = JSONRPC_FAILURES.get(code, FailureKind.BAD_REQUEST) if isinstance(code, int) else None
    return Outcome(
        event=RequestFailed(
            request=request,
            failure=kind or FailureKind.BAD_REQUEST,
            detail=f"JSON-RPC {code}: {error.get('message')}",
        )
    )


def _submit_failure(failure: WireFailure | RpcAnswer) -> Outcome:
    if isinstance(failure, WireFailure):
        if failure.processed_possible:
            return Outcome(event=SubmitOutcomeLost(reason=failure.detail))
        return _failure(RequestKind.SUBMIT, failure)
    error = failure.error or {}
    code = error.get("code")
    if code in REJECTING_CODES:
        payload = canonical_json(error_body(error))
        return Outcome(
            event=SubmitRejected(
                reason=f"JSON-RPC {code}: {error.get('message')}",
                result_digest=digest_bytes(payload),
            ),
            payload=payload,
        )
    if code == -32603 or (isinstance(code, int) and -32099 <= code <= -32000):
        return Outcome(event=SubmitOutcomeLost(reason=f"JSON-RPC {code}: {error.get('message')}"))
    return _failure(RequestKind.SUBMIT, failure)


def _ms_to_s(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value) / 1000.0
    return None


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
        experimental = experimental if isinstance(experimental, Mapping) else {}
        submission = experimental.get(SUBMISSION_KEY_EXTENSION)
        self.submission_lookup = isinstance(submission, Mapping)
        self.lookup_method = DEFAULT_LOOKUP_METHOD
        if isinstance(submission, Mapping) and isinstance(submission.get("lookupMethod"), str):
            self.lookup_method = submission["lookupMethod"]
        self._bindings: dict[str, ToolBinding] = {}
        self._side_requests: dict[tuple[str, str], Any] = {}
        """(task id, input key) -> the JSON-RPC id of the server's side-channel request."""

    async def bind(self, tool_name: str) -> ToolBinding:
        listed = await list_tools(self.session, self.dialect, consent=False)
        if not isinstance(listed, list):
            detail = listed.detail if isinstance(listed, WireFailure) else str(listed.error)
            raise AdapterError(f"tools/list failed at {self.session.url}: {detail}")
        tool = find_tool(listed, tool_name)
        if tool is None:
            raise UnknownTool(f"{self.session.url} does not list tool {tool_name!r}")
        schema = tool.get("outputSchema")
        binding = ToolBinding(
            server=self.session.url,
            tool_name=tool_name,
            protocol=PROTOCOL,
            adapter_version=ADAPTER_VERSION,
            descriptor_digest=descriptor_digest(tool),
            task_support=task_support_of(tool) or "forbidden",  # type: ignore[arg-type]
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
                    status_message=task.get("statusMessage")
                    if isinstance(task.get("statusMessage"), str)
                    else None,
                    poll_interval_s=_ms_to_s(task.get("pollInterval")),
                    ttl_s=_ms_to_s(task.get("ttl")),
                )
            )
        # A server without the capability processes the call normally (§2.1).
        outcome = verify_result(result, output_schema=binding.output_schema if binding else None)
        return Outcome(
            event=outcome.event, payload=outcome.payload, progress=seen[-1] if seen else None
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
        answer = await self._call(self.lookup_method, {"submissionKey": record.submission_key})
        if isinstance(answer, WireFailure) or answer.error is not None:
            return _failure(RequestKind.LOOKUP, answer)
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
        answer = await self._call("tasks/get", {"taskId": task_id})
        if isinstance(answer, WireFailure):
            return _failure(RequestKind.POLL, answer)
        if answer.error is not None:
            return self._task_error(RequestKind.POLL, answer)
        task = answer.result or {}
        raw = task.get("status")
        status = STATUSES.get(str(raw))
        message = task.get("statusMessage") if isinstance(task.get("statusMessage"), str) else None
        if status is None:
            return Outcome(
                event=RequestFailed(
                    request=RequestKind.POLL,
                    failure=FailureKind.MALFORMED_RESPONSE,
                    detail=f"tasks/get answered status {raw!r}",
                )
            )
        if message is not None and message != record.status_message and self.progress:
            self.progress(record.call_node_id, None, message)  # X11: a new status message
        if status is ServerStatus.WORKING:
            return Outcome(
                event=WorkingObserved(
                    server_status_raw=str(raw),
                    status_message=message,
                    poll_interval_s=_ms_to_s(task.get("pollInterval")),
                    progressed=message != record.status_message,
                )
            )
        if status is ServerStatus.INPUT_REQUIRED:
            return await self._side_channel(record, task_id, message)
        if status is ServerStatus.CANCELLED:
            payload = canonical_json(_status_body(task))
            return Outcome(
                event=CancellationObserved(
                    result_digest=digest_bytes(payload), server_status_raw=str(raw)
                ),
                payload=payload,
            )
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
            return _no_id(RequestKind.INPUT)
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
            return _no_id(RequestKind.FETCH)
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
            return _no_id(RequestKind.CANCEL)
        answer = await self._call("tasks/cancel", {"taskId": task_id})
        if isinstance(answer, WireFailure):
            return _failure(RequestKind.CANCEL, answer)
        if answer.error is not None:
            error = answer.error
            data = error.get("data")
            text = str(error.get("message", ""))
            terminal = (isinstance(data, Mapping) and "status" in data) or "terminal" in text
            if error.get("code") == -32602 and terminal:
                # X5: already completed/failed: read that terminal, never rewrite it.
                return Outcome(event=CancelRefused(reason=text))
            return self._task_error(RequestKind.CANCEL, answer)
        task = answer.result or {}
        if task.get("status") == "cancelled":
            # X5: a successful 2025-11-25 cancel is proof of the cancelled terminal.
            payload = canonical_json(_status_body(task))
            return Outcome(
                event=CancellationObserved(
                    result_digest=digest_bytes(payload), server_status_raw="cancelled"
                ),
                payload=payload,
            )
        return Outcome(event=CancelAcknowledged(cancel_generation=record.cancel_generation))

    def _task_error(self, request: RequestKind, answer: RpcAnswer) -> Outcome:
        error = answer.error or {}
        if error.get("code") == -32602:
            return Outcome(event=OperationNotFound(detail=str(error.get("message"))))
        return _failure(request, answer)

    async def aclose(self) -> None:
        await self.session.aclose()


def _status_body(task: Mapping[str, Any]) -> dict[str, Any]:
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
