"""Protocol 2026-07-28 with the ``io.modelcontextprotocol/tasks`` extension (SEP-2663) (S1).

Owns: the request ladder for this version (envelope, routing headers, ``Mcp-Name`` on
``tasks/*``), the server-decides rule for ``tools/call``, the flat ``CreateTaskResult``,
``tasks/get`` with inlined ``result``/``error``/``inputRequests``, ``tasks/update``,
``tasks/cancel`` (ack), ``subscriptions/listen`` + ``notifications/tasks`` (S7), and the
``longcall/tasks/lookup`` extension method (S3). Must not: touch HTTP or the store
directly; it works through ``TaskManager``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

from mcp.shared.inbound import (
    MCP_NAME_HEADER,
    InboundLadderRejection,
    classify_inbound_request,
    decode_header_value,
)
from mcp_types import CLIENT_CAPABILITIES_META_KEY, SERVER_INFO_META_KEY

from longcall.server import sync
from longcall.server.errors import (
    HEADER_MISMATCH,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    InvalidParams,
    JsonRpcError,
    MethodNotFound,
)
from longcall.server.inputs import (
    InputNeeded,
    RequestStates,
    Round,
    missing_capability,
    undeclared,
    validated_answer,
)
from longcall.server.model import ProtocolVersion, TaskRecord, TaskStatus
from longcall.server.options import ServerOptions
from longcall.server.tasks import SyncContext, TaskManager
from longcall.server.tools import ToolSpec, arguments_digest
from longcall.server.wire import (
    LOOKUP_METHOD,
    SUBMISSION_KEY_EXTENSION,
    SUBSCRIPTION_ID_META_KEY,
    TASKS_EXTENSION,
    Reply,
    RpcRequest,
    Streamed,
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

VERSION = ProtocolVersion.MODERN
TASK_METHODS = frozenset({"tasks/get", "tasks/update", "tasks/cancel"})
REMOVED_METHODS = frozenset({"tasks/result", "tasks/list", "ping"})
"""Methods this version does not have: ``tasks/*`` of 2025-11-25 (SEP-2663) and ``ping``
(SEP-2575 removed it; a stateless server has no connection to keep alive)."""
COMPLETE = {"resultType": "complete"}
NOT_CACHEABLE = {"ttlMs": 0, "cacheScope": "private"}
"""Cacheable results (discover, tools/list) must carry these on the 2026-07-28 wire."""


def missing_tasks_capability(what: str) -> JsonRpcError:
    """-32021 with the ``requiredCapabilities`` data the extension defines."""
    return JsonRpcError(
        MISSING_REQUIRED_CLIENT_CAPABILITY,
        f"{what} requires the tasks extension ({TASKS_EXTENSION}); the client did not"
        " declare it in this request's _meta",
        {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
    )


def declares_tasks(params: Mapping[str, Any]) -> bool:
    """Per-request consent: this request's ``_meta`` client capabilities carry the extension."""
    capabilities = request_meta(params).get(CLIENT_CAPABILITIES_META_KEY)
    if not isinstance(capabilities, Mapping):
        return False
    extensions = capabilities.get("extensions")
    return isinstance(extensions, Mapping) and isinstance(extensions.get(TASKS_EXTENSION), Mapping)


def client_capabilities(params: Mapping[str, Any]) -> Mapping[str, Any]:
    """The client capabilities this request declares (2026-07-28: per request, in ``_meta``)."""
    capabilities = request_meta(params).get(CLIENT_CAPABILITIES_META_KEY)
    return capabilities if isinstance(capabilities, Mapping) else {}


def declares_elicitation(params: Mapping[str, Any]) -> bool:
    """The creating request's client capabilities include (form) elicitation."""
    capabilities = request_meta(params).get(CLIENT_CAPABILITIES_META_KEY)
    return isinstance(capabilities, Mapping) and isinstance(
        capabilities.get("elicitation"), Mapping
    )


def is_modern(body: Mapping[str, Any], headers: Mapping[str, str]) -> bool:
    """A request belongs to this version when its envelope or header names it."""
    params = body.get("params")
    meta = params.get("_meta") if isinstance(params, Mapping) else None
    if isinstance(meta, Mapping) and "io.modelcontextprotocol/protocolVersion" in meta:
        return True
    return headers.get("mcp-protocol-version") == VERSION.value


def check_envelope(body: Mapping[str, Any], headers: Mapping[str, str]) -> None:
    """The SDK's modern ladder (envelope, version, Mcp-Method/Mcp-Name headers), then ours."""
    verdict = classify_inbound_request(body, headers=headers)
    if isinstance(verdict, InboundLadderRejection):
        raise JsonRpcError(verdict.code, verdict.message, verdict.data)
    if body.get("method") in TASK_METHODS:
        # SEP-2663: Mcp-Name MUST carry the taskId on tasks/*; missing counts as mismatch.
        params = body.get("params")
        task_id = params.get("taskId") if isinstance(params, Mapping) else None
        if decode_header_value(headers.get(MCP_NAME_HEADER)) != task_id or task_id is None:
            raise JsonRpcError(
                HEADER_MISMATCH,
                "Mcp-Name header must equal the request body's 'taskId' parameter",
            )


class ModernProtocol:
    """Answers 2026-07-28 requests."""

    def __init__(self, *, manager: TaskManager, options: ServerOptions) -> None:
        self._manager = manager
        self._options = options
        self._by_method = self._handlers()

    async def handle(self, request: RpcRequest) -> Reply | Streamed:
        """Dispatch one request (the envelope was already checked)."""
        method = request.method
        if method in REMOVED_METHODS:
            raise MethodNotFound(method, VERSION.value)
        handler = self._by_method.get(method)
        if handler is None:
            raise MethodNotFound(method, VERSION.value)
        reply: Reply | Streamed = await handler(request)
        return reply

    def _handlers(self) -> dict[str, Any]:
        return {
            "server/discover": self._discover,
            "tools/list": self._tools_list,
            "tools/call": self._tools_call,
            "tasks/get": self._tasks_get,
            "tasks/update": self._tasks_update,
            "tasks/cancel": self._tasks_cancel,
            "subscriptions/listen": self._subscriptions_listen,
            LOOKUP_METHOD: self._lookup,
        }

    async def _discover(self, request: RpcRequest) -> Reply:
        return Reply(
            result={
                "supportedVersions": [VERSION.value],
                "capabilities": {
                    "tools": {"listChanged": False},
                    "extensions": {
                        TASKS_EXTENSION: {},
                        SUBMISSION_KEY_EXTENSION: submission_key_capability(
                            self._manager.store.store_id
                        ),
                    },
                },
                "resultType": "complete",
                **NOT_CACHEABLE,
                "_meta": {
                    SERVER_INFO_META_KEY: {
                        "name": self._options.name,
                        "version": self._options.version,
                    }
                },
            }
        )

    async def _tools_list(self, request: RpcRequest) -> Reply:
        validate_core_params(request, VERSION.value)
        tools = [spec.tool_definition(with_execution=False) for spec in self._manager.registry]
        return Reply(result={"tools": tools, **NOT_CACHEABLE, **COMPLETE})

    async def _tools_call(self, request: RpcRequest) -> Reply | Streamed:
        validate_core_params(request, VERSION.value)
        spec = self._manager.registry.require(request.params.get("name"))
        arguments = tool_arguments(request.params)
        consent = declares_tasks(request.params)
        capabilities = client_capabilities(request.params)
        # The server decides (SEP-2663): `params.task` is ignored; consent is per request.
        if spec.task_support == "required" and not consent:
            raise missing_tasks_capability(f"Tool {spec.name!r}")
        call = self._round(request, spec, arguments)
        if spec.task_support == "forbidden" or not consent:
            context = SyncContext(
                request.principal,
                answers=call.state.answers,
                capabilities=capabilities,
                rounds=call.state.rounds,
                multi_round=True,
            )

            async def run(context: SyncContext) -> dict[str, Any]:
                try:
                    return await self._manager.call_synchronously(
                        principal=request.principal, spec=spec, arguments=arguments, context=context
                    )
                except InputNeeded as needed:
                    return self._ask(call, needed.requests)

            return await sync.answer(request, context, run, lambda result: {**COMPLETE, **result})
        # SEP-2322 rounds settle the tool's ask-first questions before the task exists.
        questions = spec.ask_first or {}
        missing = {key: ask for key, ask in questions.items() if key not in call.state.answers}
        if missing:
            if undeclared(missing, capabilities):
                raise missing_capability(missing, capabilities)
            return Reply(result=self._ask(call, missing))
        outcome = await self._manager.create(
            principal=request.principal,
            spec=spec,
            arguments=arguments,
            protocol=VERSION,
            submission_key=submission_key(request.params),
            ttl_ms=spec.ttl_ms,
            client_can_elicit=declares_elicitation(request.params),
            answered=[(key, ask, call.state.answers[key]) for key, ask in questions.items()],
        )
        return Reply(result={**task_fields(outcome.record), "resultType": "task"})

    def _round(self, request: RpcRequest, spec: ToolSpec, arguments: dict[str, Any]) -> Round:
        """This ``tools/call``'s SEP-2322 round: the verified state plus the new answers."""
        call = Round.of(
            request.params,
            states=RequestStates(self._manager.store.secret),
            tool=spec.name,
            arguments_digest=arguments_digest(arguments),
            principal=request.principal.subject,
            known_questions=spec.ask_first or {},
        )
        responses = request.params.get("inputResponses")
        if isinstance(responses, dict):
            taken = sum(1 for key in responses if key in call.state.answers)
            if taken:
                self._manager.metrics.observe_inputs_answered("round", taken)
        return call

    def _ask(self, call: Round, requests: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        """End this round asking for ``requests`` (counted as asked)."""
        self._manager.metrics.observe_inputs_asked("round", len(requests))
        return call.input_required(requests)

    async def _task(self, request: RpcRequest) -> TaskRecord:
        if not declares_tasks(request.params):
            raise missing_tasks_capability(request.method)
        task_id = require_string(request.params, "taskId")
        return await self._manager.visible(request.principal, task_id, VERSION)

    async def _tasks_get(self, request: RpcRequest) -> Reply:
        self._manager.metrics.observe_status_read(VERSION.value)
        record = await self._task(request)
        return Reply(result=await self.detailed_task(record))

    async def _tasks_update(self, request: RpcRequest) -> Reply:
        record = await self._task(request)
        responses = request.params.get("inputResponses")
        if not isinstance(responses, dict):
            raise InvalidParams("params.inputResponses must be an object")
        # Unknown, never-issued or already answered keys are ignored, not refused (SEP-2663
        # SHOULD): a client answering a superseded round must not fail the whole update.
        outstanding = {
            req.key: req.method for req in await self._manager.outstanding_inputs(record.task_id)
        }
        answers = {
            key: validated_answer(key, outstanding[key], value)
            for key, value in responses.items()
            if key in outstanding
        }
        await self._manager.answer(record, answers)
        return Reply(result=dict(COMPLETE))

    async def _tasks_cancel(self, request: RpcRequest) -> Reply:
        record = await self._task(request)
        # Ack either way (SEP-2663); a terminal task stays as it is (S4).
        await self._manager.cancel(record)
        return Reply(result=dict(COMPLETE))

    async def _lookup(self, request: RpcRequest) -> Reply:
        key = require_string(request.params, "submissionKey")
        found = await self._manager.lookup_submission(request.principal, key)
        return Reply(result={**lookup_result(found, self._manager.store.store_id), **COMPLETE})

    async def _subscriptions_listen(self, request: RpcRequest) -> Streamed:
        validate_core_params(request, VERSION.value)
        filters = request.params.get("notifications")
        task_ids = filters.get("taskIds") if isinstance(filters, Mapping) else None
        if task_ids is not None:
            if not declares_tasks(request.params):
                raise missing_tasks_capability("subscriptions/listen with taskIds")
            if not isinstance(task_ids, list) or not all(isinstance(t, str) for t in task_ids):
                raise InvalidParams("params.notifications.taskIds must be a list of strings")
        accepted: list[str] = []
        for task_id in task_ids or []:
            try:
                await self._manager.visible(request.principal, task_id, VERSION)
            except JsonRpcError:
                continue  # another principal's or unknown ids are silently not accepted (S5)
            accepted.append(task_id)
        return Streamed(messages=self._listen_stream(request, accepted))

    async def _listen_stream(
        self, request: RpcRequest, task_ids: list[str]
    ) -> AsyncIterator[dict[str, Any]]:
        # SEP-2575: every frame on the stream carries the listen request's id as its
        # subscription id, the acknowledgement first.
        tag = {SUBSCRIPTION_ID_META_KEY: request.id}
        ack: dict[str, Any] = {"notifications": {"taskIds": task_ids} if task_ids else {}}
        yield notification("notifications/subscriptions/acknowledged", {**ack, "_meta": tag})
        sent: dict[str, int] = {}
        pending = set(task_ids)
        async with self._manager.watching(request.principal.subject) as changes:
            while pending:
                for task_id in sorted(pending):
                    record = await self._manager.store.get(task_id)
                    if record is None:
                        pending.discard(task_id)
                        continue
                    if sent.get(task_id) == record.version:
                        continue
                    sent[task_id] = record.version
                    params = {**await self.detailed_task(record), "_meta": tag}
                    yield notification("notifications/tasks", params)
                    if record.status.is_terminal:
                        pending.discard(task_id)
                if pending:
                    # A change here wakes at once; one made by another server process
                    # sharing the store is read at the next poll (D1).
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(self._manager.options.change_poll_s):
                            await changes.get()
        # Every subscribed task is terminal: nothing more will come, so end gracefully.
        yield response(request.id, {"resultType": "complete", "_meta": tag})

    async def detailed_task(self, record: TaskRecord) -> dict[str, Any]:
        """``DetailedTask`` + ``resultType: complete``, as tasks/get and notifications carry it."""
        detailed = {**task_fields(record), **COMPLETE}
        if record.status is TaskStatus.COMPLETED and record.result is not None:
            detailed["result"] = {**record.result, **COMPLETE}
        elif record.status is TaskStatus.FAILED and record.error is not None:
            detailed["error"] = record.error
        elif record.status is TaskStatus.INPUT_REQUIRED:
            outstanding = await self._manager.outstanding_inputs(record.task_id)
            detailed["inputRequests"] = {
                req.key: {"method": req.method, "params": req.params} for req in outstanding
            }
        return detailed


def task_fields(record: TaskRecord) -> dict[str, Any]:
    """The flat ``Task`` of this version (``ttlMs`` / ``pollIntervalMs``)."""
    fields: dict[str, Any] = {
        "taskId": record.task_id,
        "status": record.status.value,
        "createdAt": iso8601(record.created_at),
        "lastUpdatedAt": iso8601(record.last_updated_at),
        "ttlMs": record.ttl_ms,
        "pollIntervalMs": record.poll_interval_ms,
    }
    if record.status_message is not None:
        fields["statusMessage"] = record.status_message
    return fields
