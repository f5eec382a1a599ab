"""Protocol 2025-11-25 with its experimental in-core tasks (S1).

Owns: ``initialize`` with ``capabilities.tasks``, per-tool ``execution.taskSupport``,
``params.task {ttl}``, the nested ``CreateTaskResult``, ``tasks/get``, the blocking
``tasks/result`` (with the input side channel, S6), ``tasks/list`` (the caller's own
tasks only, S5), ``tasks/cancel`` (cancelled before answering; -32602 on a terminal
task, S4), ``notifications/tasks/status`` on the standalone GET stream (S7), and
the related-task ``_meta``. Must not: touch HTTP or the store directly.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

from longcall.server import sync
from longcall.server.errors import (
    INVALID_PARAMS,
    InvalidParams,
    JsonRpcError,
    MethodNotFound,
    TaskNotFound,
)
from longcall.server.inputs import validated_answer
from longcall.server.model import Principal, ProtocolVersion, TaskRecord, TaskStatus
from longcall.server.options import ServerOptions
from longcall.server.tasks import Progress, SyncContext, TaskManager
from longcall.server.wire import (
    LOOKUP_METHOD,
    RELATED_TASK_META_KEY,
    SERVER_INPUT_ID_PREFIX,
    SUBMISSION_KEY_EXTENSION,
    Reply,
    RpcRequest,
    Streamed,
    error_response,
    iso8601,
    lookup_result,
    notification,
    request_meta,
    require_string,
    response,
    submission_key,
    submission_key_capability,
    tool_arguments,
    validate_core_params,
)

VERSION = ProtocolVersion.LEGACY
CANCELLED_RESULT_CODE = -32000
"""``tasks/result`` of a cancelled task: the spec names no code; we answer -32000 "cancelled"."""


def task_fields(record: TaskRecord) -> dict[str, Any]:
    """The 2025-11-25 ``Task`` (``ttl`` / ``pollInterval``)."""
    fields: dict[str, Any] = {
        "taskId": record.task_id,
        "status": record.status.value,
        "createdAt": iso8601(record.created_at),
        "lastUpdatedAt": iso8601(record.last_updated_at),
        "ttl": record.ttl_ms,
        "pollInterval": record.poll_interval_ms,
    }
    if record.status_message is not None:
        fields["statusMessage"] = record.status_message
    return fields


def related_task_meta(task_id: str) -> dict[str, Any]:
    """The related-task ``_meta`` entry (2025-11-25 correlation)."""
    return {RELATED_TASK_META_KEY: {"taskId": task_id}}


def requested_ttl(params: Mapping[str, Any]) -> tuple[bool, int | None]:
    """(augmented?, requested ttl) from ``params.task``; -32602 for a malformed one."""
    task = params.get("task")
    if task is None:
        return False, None
    if not isinstance(task, Mapping):
        raise InvalidParams("params.task must be an object")
    ttl = task.get("ttl")
    if ttl is not None and (not isinstance(ttl, int) or isinstance(ttl, bool) or ttl <= 0):
        raise InvalidParams("params.task.ttl must be a positive integer (milliseconds)")
    return True, ttl


class LegacyProtocol:
    """Answers 2025-11-25 requests."""

    def __init__(self, *, manager: TaskManager, options: ServerOptions) -> None:
        self._manager = manager
        self._options = options

    async def handle(self, request: RpcRequest) -> Reply | Streamed:
        """Dispatch one request."""
        handler = self._handlers().get(request.method)
        if handler is None:
            raise MethodNotFound(request.method, VERSION.value)
        reply: Reply | Streamed = await handler(request)
        return reply

    def _handlers(self) -> dict[str, Any]:
        return {
            "initialize": self._initialize,
            "ping": self._ping,
            "tools/list": self._tools_list,
            "tools/call": self._tools_call,
            "tasks/get": self._tasks_get,
            "tasks/result": self._tasks_result,
            "tasks/list": self._tasks_list,
            "tasks/cancel": self._tasks_cancel,
            LOOKUP_METHOD: self._lookup,
        }

    async def _initialize(self, request: RpcRequest) -> Reply:
        validate_core_params(request, VERSION.value)
        return Reply(
            result={
                "protocolVersion": VERSION.value,
                "capabilities": {
                    "tools": {"listChanged": False},
                    "tasks": {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}},
                    "experimental": {
                        SUBMISSION_KEY_EXTENSION: submission_key_capability(
                            self._manager.store.store_id
                        )
                    },
                },
                "serverInfo": {"name": self._options.name, "version": self._options.version},
            }
        )

    async def _ping(self, request: RpcRequest) -> Reply:
        return Reply(result={})

    async def _tools_list(self, request: RpcRequest) -> Reply:
        validate_core_params(request, VERSION.value)
        tools = [spec.tool_definition(with_execution=True) for spec in self._manager.registry]
        return Reply(result={"tools": tools})

    async def _tools_call(self, request: RpcRequest) -> Reply | Streamed:
        validate_core_params(request, VERSION.value)
        spec = self._manager.registry.require(request.params.get("name"))
        arguments = tool_arguments(request.params)
        augmented, ttl = requested_ttl(request.params)
        if augmented and spec.task_support == "forbidden":
            raise JsonRpcError(-32601, f"Tool {spec.name!r} does not support task-augmented calls")
        if not augmented and spec.task_support == "required":
            raise JsonRpcError(-32601, f"Tool {spec.name!r} requires task-augmented execution")
        if not augmented:

            async def run(context: SyncContext) -> dict[str, Any]:
                return await self._manager.call_synchronously(
                    principal=request.principal, spec=spec, arguments=arguments, context=context
                )

            return await sync.answer(request, SyncContext(request.principal), run, dict)
        # The receiver may lower the requested ttl and must report the actual one (§2.3).
        actual_ttl = (
            spec.ttl_ms if ttl is None else (ttl if spec.ttl_ms is None else min(ttl, spec.ttl_ms))
        )
        token = request_meta(request.params).get("progressToken")
        if not isinstance(token, str | int) or isinstance(token, bool):
            token = None
        # The token stays valid for the task's life (§2.7): it is stored with the task.
        outcome = await self._manager.create(
            principal=request.principal,
            spec=spec,
            arguments=arguments,
            protocol=VERSION,
            submission_key=submission_key(request.params),
            ttl_ms=actual_ttl,
            progress_token=token,
            # In stateful mode the session knows whether the client can answer input (S6);
            # a stateless 2025-11-25 call cannot tell, so the request is issued.
            client_can_elicit=(
                request.session_capabilities is None
                or isinstance(request.session_capabilities.get("elicitation"), Mapping)
            ),
        )
        return Reply(result={"task": task_fields(outcome.record)})

    async def _task(self, request: RpcRequest) -> TaskRecord:
        task_id = require_string(request.params, "taskId")
        return await self._manager.visible(request.principal, task_id, VERSION)

    async def _tasks_get(self, request: RpcRequest) -> Reply:
        self._manager.metrics.observe_status_read(VERSION.value)
        return Reply(result=task_fields(await self._task(request)))

    async def _tasks_cancel(self, request: RpcRequest) -> Reply:
        record = await self._task(request)
        cancelled = await self._manager.cancel(record)
        if cancelled is None:
            current = await self._task(request)
            raise InvalidParams(
                f"Cannot cancel task: already in terminal status {current.status.value!r}",
                {"status": current.status.value},
            )
        return Reply(result=task_fields(cancelled))

    async def _tasks_list(self, request: RpcRequest) -> Reply:
        cursor = request.params.get("cursor")
        if cursor is not None:
            if not isinstance(cursor, str):
                raise InvalidParams("params.cursor must be a string")
            try:
                await self._manager.visible(request.principal, cursor, VERSION)
            except TaskNotFound as exc:
                raise InvalidParams(f"invalid cursor {cursor!r}") from exc
        page_size = self._options.list_page_size
        records = await self._manager.store.list_for_principal(
            request.principal.subject, VERSION, after=cursor, limit=page_size + 1
        )
        now = self._manager.clock()
        visible = [record for record in records if not record.is_expired(now)]
        page = visible[:page_size]
        result: dict[str, Any] = {"tasks": [task_fields(record) for record in page]}
        if len(records) > page_size and page:
            result["nextCursor"] = page[-1].task_id
        return Reply(result=result)

    async def _lookup(self, request: RpcRequest) -> Reply:
        key = require_string(request.params, "submissionKey")
        found = await self._manager.lookup_submission(request.principal, key)
        return Reply(result=lookup_result(found, self._manager.store.store_id))

    async def _tasks_result(self, request: RpcRequest) -> Reply | Streamed:
        record = await self._task(request)
        if request.accepts_event_stream and not record.status.is_terminal:
            return Streamed(messages=self._result_stream(request, record.task_id))
        final = await self._manager.wait_terminal(request.principal, record.task_id, VERSION)
        return Reply(result=self._final_payload(final))

    async def _result_stream(
        self, request: RpcRequest, task_id: str
    ) -> AsyncIterator[dict[str, Any]]:
        """Side channel (§2.6): input requests as server->client requests, then the final result."""
        sent: set[str] = set()
        while True:
            with self._manager.hub.watch(task_id) as changed:
                try:
                    record = await self._manager.visible(request.principal, task_id, VERSION)
                except JsonRpcError as exc:
                    yield error_response(request.id, exc.to_wire())
                    return
                if record.status.is_terminal:
                    yield self._final_message(request.id, record)
                    return
                # A request is stored a commit before its task is parked for it: asked
                # only once the task says input_required, so a client that checks the
                # status on receiving it sees the same (the park wakes this loop).
                parked = record.status is TaskStatus.INPUT_REQUIRED
                for pending in await self._manager.outstanding_inputs(task_id) if parked else []:
                    if pending.key in sent:
                        continue
                    sent.add(pending.key)
                    yield {
                        "jsonrpc": "2.0",
                        "id": f"{SERVER_INPUT_ID_PREFIX}{task_id}:{pending.key}",
                        "method": pending.method,
                        "params": {**pending.params, "_meta": related_task_meta(task_id)},
                    }
                await self._manager.wait_change(changed)

    def _final_message(self, request_id: str | int | None, record: TaskRecord) -> dict[str, Any]:
        try:
            return response(request_id, self._final_payload(record))
        except JsonRpcError as exc:
            return error_response(request_id, exc.to_wire())

    def _final_payload(self, record: TaskRecord) -> dict[str, Any]:
        """Exactly what the original call would have returned, plus related-task ``_meta``."""
        if record.status is TaskStatus.CANCELLED:
            raise JsonRpcError(
                CANCELLED_RESULT_CODE,
                f"Task {record.task_id} was cancelled",
                {"status": "cancelled"},
            )
        if record.error is not None:
            error = record.error
            raise JsonRpcError(
                int(error.get("code", INVALID_PARAMS)), str(error.get("message")), error.get("data")
            )
        result = dict(record.result or {"content": [], "isError": False})
        meta = dict(result.get("_meta") or {})
        meta.update(related_task_meta(record.task_id))
        result["_meta"] = meta
        return result

    async def answer_side_channel(self, principal: Principal, message: Mapping[str, Any]) -> None:
        """A client's JSON-RPC response to a side-channel input request (S6)."""
        message_id = message.get("id")
        if not isinstance(message_id, str) or not message_id.startswith(SERVER_INPUT_ID_PREFIX):
            raise InvalidParams("unknown response id")
        task_id, _, key = message_id[len(SERVER_INPUT_ID_PREFIX) :].partition(":")
        record = await self._manager.visible(principal, task_id, VERSION)
        if "result" not in message:
            # The client refused the request (a JSON-RPC error): the tool sees a cancel.
            await self._manager.answer(record, {key: {"action": "cancel"}})
            return
        result = message["result"]
        if isinstance(result, dict):
            result = {k: v for k, v in result.items() if k != "_meta"}
        methods = {req.key: req.method for req in await self._manager.outstanding_inputs(task_id)}
        if key not in methods:
            return  # answered already, or never asked: ignored like an unknown tasks/update key
        await self._manager.answer(record, {key: validated_answer(key, methods[key], result)})

    async def status_stream(self, principal: Principal) -> AsyncIterator[dict[str, Any]]:
        """The standalone GET stream (S7): ``notifications/tasks/status`` for the caller's tasks,
        and ``notifications/progress`` for those created with a ``progressToken``."""
        # Only this principal's changes reach the stream (filtered before any store read),
        # coalesced per task and bounded; changes made by another server process sharing
        # the store are not pushed here (polling stays the truth, S7).
        async with self._manager.watching(principal.subject) as changes:
            while True:
                change = await changes.get()
                record = await self._manager.store.get(change.task_id)
                if (
                    record is None
                    or record.principal != principal.subject
                    or record.protocol is not VERSION
                ):
                    continue
                token = record.progress_token
                if token is not None and change.progress is not None:
                    yield progress_notification(record.task_id, token, change.progress)
                yield notification("notifications/tasks/status", task_fields(record))


def progress_notification(task_id: str, token: str | int, progress: Progress) -> dict[str, Any]:
    """``notifications/progress`` for a task's progressToken, with related-task ``_meta``."""
    params: dict[str, Any] = {"progressToken": token, "progress": progress.progress}
    if progress.total is not None:
        params["total"] = progress.total
    if progress.message is not None:
        params["message"] = progress.message
    params["_meta"] = related_task_meta(task_id)
    return notification("notifications/progress", params)
