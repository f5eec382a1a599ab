"""A FastMCP tool run as a longcall task: its ``ToolSpec`` and the body's ``Context``.

Owns: turning a FastMCP ``Tool`` into the ``ToolSpec`` longcall's task manager runs
(name, task mode, poll interval, idempotency from ``annotations.idempotentHint``), the
run of one task (the tool body under a FastMCP ``Context`` whose progress and input go
to the task), the guard pattern's legs (a body that *returns* an ``InputRequiredResult``
parks the task for input and is re-run with the answers), and the mapping of the body's
outcome onto longcall's (tool error, protocol error, result). Must not: create, read or
end tasks (the task manager does), nor render wire shapes.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import mcp_types
import pydantic
from fastmcp.exceptions import FastMCPError
from fastmcp.server.context import Context
from fastmcp.server.dependencies import fastmcp_request_ctx
from fastmcp.server.elicitation import (
    AcceptedElicitation,
    CancelledElicitation,
    DeclinedElicitation,
    handle_elicit_accept,
    parse_elicit_response_type,
)
from fastmcp.server.server import FastMCP
from fastmcp.tools.base import InputRequiredToolResult, Tool, ToolResult
from mcp.shared.exceptions import MCPError

from longcall.integrations.fastmcp import _seams
from longcall.server.errors import InvalidParams, ToolError, ToolProtocolError
from longcall.server.inputs import ELICIT, ROOTS, SAMPLE
from longcall.server.tools import TaskContext, ToolSpec

logger = logging.getLogger(__name__)

TASK_PARAMETER = "task"
"""The name under which the task manager hands a run its longcall ``TaskContext``."""

_ANSWER_MODELS: dict[str, type[pydantic.BaseModel]] = {
    ELICIT: mcp_types.ElicitResult,
    SAMPLE: mcp_types.CreateMessageResult,
    ROOTS: mcp_types.ListRootsResult,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class FastMCPToolSpec(ToolSpec):
    """A FastMCP tool as the task manager sees it: the arguments travel as one object.

    FastMCP validates and coerces arguments itself when the body runs (its own rules,
    strict or lax), so here only what both agree on is checked before a task exists:
    an object, with every required property.
    """

    required: frozenset[str] = frozenset()

    def validate_arguments(self, arguments: Any) -> dict[str, Any]:
        if not isinstance(arguments, dict):
            raise InvalidParams(f"arguments of tool {self.name!r} must be an object")
        missing = sorted(self.required - arguments.keys())
        if missing:
            raise InvalidParams(
                f"invalid arguments for tool {self.name!r}: missing {', '.join(missing)}",
                [{"loc": [name], "msg": "Field required"} for name in missing],
            )
        return {"arguments": dict(arguments)}


def tool_spec(server: FastMCP, tool: Tool) -> FastMCPToolSpec:
    """The spec the task manager runs for a task-capable FastMCP tool."""
    annotations = tool.annotations
    idempotent = bool(annotations is not None and annotations.idempotent_hint)
    parameters = dict(tool.parameters or {})
    required = parameters.get("required") or []
    name = tool.name

    async def run(arguments: dict[str, Any], task: TaskContext) -> Any:
        return await run_task(server, tool, arguments, task)

    return FastMCPToolSpec(
        name=name,
        description=tool.description or "",
        function=run,
        task_support=tool.task_config.mode,
        poll_interval_ms=max(1, int(tool.task_config.poll_interval.total_seconds() * 1000)),
        ttl_ms=None,
        idempotent=idempotent,
        input_schema=parameters,
        output_schema=tool.output_schema,
        arguments_model=pydantic.BaseModel,
        context_parameter=TASK_PARAMETER,
        required=frozenset(str(name) for name in required),
    )


class TaskRunContext(Context):
    """The ``Context`` a FastMCP tool body gets while it runs as a longcall task.

    ``report_progress`` becomes the task's ``statusMessage`` (and a real
    ``lastUpdatedAt``); ``elicit`` asks through the task (``tasks/update`` answers it),
    where FastMCP's own ``Context`` refuses to elicit in a background task. Everything
    else is FastMCP's.
    """

    def __init__(self, fastmcp: FastMCP, *, task: TaskContext) -> None:
        super().__init__(fastmcp, session=None, task_id=task.task_id)
        self._longcall_task = task

    async def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        await self._longcall_task.report_progress(progress, total, message)

    async def elicit(
        self,
        message: str,
        response_type: Any,
        *,
        response_title: str | None = None,
        response_description: str | None = None,
    ) -> Any:
        config = parse_elicit_response_type(
            response_type,
            response_title=response_title,
            response_description=response_description,
        )
        answer = await self._longcall_task.elicit(message, config.schema)
        action = answer.get("action")
        if action == "accept":
            accepted: AcceptedElicitation[Any] = handle_elicit_accept(config, answer.get("content"))
            return accepted
        if action == "decline":
            return DeclinedElicitation()
        return CancelledElicitation()


async def run_task(
    server: FastMCP, tool: Tool, arguments: dict[str, Any], task: TaskContext
) -> dict[str, Any]:
    """Run the tool body to its result; a guard leg's ask parks the task for input."""
    # This run is an asyncio task of its own, copied from the creating request's context:
    # that request has been answered, so nothing here may write to it.
    fastmcp_request_ctx.set(None)
    context = TaskRunContext(server, task=task)
    responses: dict[str, Any] = {}
    request_state: str | None = None
    while True:
        _seams.set_task_input(context, dict(responses) or None, request_state)
        result = await _one_leg(context, tool, arguments)
        ask = result.input_required if isinstance(result, InputRequiredToolResult) else None
        if ask is None:
            return _call_tool_result(result)
        requests = {
            key: request.model_dump(by_alias=True, mode="json", exclude_none=True)
            for key, request in (ask.input_requests or {}).items()
        }
        if not requests:
            raise ToolError(
                "The tool returned an InputRequiredResult that asks nothing; a task can"
                " only wait for input it asks the client for."
            )
        answers = await task.request_inputs(requests)
        responses.update(_typed_answers(requests, answers))
        request_state = ask.request_state


async def _one_leg(context: TaskRunContext, tool: Tool, arguments: dict[str, Any]) -> ToolResult:
    """One run of the body, its errors mapped to longcall's outcomes."""
    try:
        async with context:
            return await tool.run(dict(arguments))
    except FastMCPError as exc:
        # ToolError, ValidationError: the author's (or FastMCP's) message for the caller.
        raise ToolError(str(exc)) from exc
    except MCPError as exc:
        # A protocol fault: the task ends `failed` with this JSON-RPC error.
        error = exc.error
        raise ToolProtocolError(error.code, error.message, error.data) from exc


def _typed_answers(
    requests: Mapping[str, Mapping[str, Any]], answers: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """The answers as FastMCP's ``ctx.input_responses`` holds them (SDK result models)."""
    typed: dict[str, Any] = {}
    for key, answer in answers.items():
        model = _ANSWER_MODELS.get(str(requests[key].get("method")))
        typed[key] = model.model_validate(answer) if model is not None else answer
    return typed


def _call_tool_result(result: ToolResult) -> dict[str, Any]:
    """The ``CallToolResult`` body of a FastMCP ``ToolResult``."""
    wire = mcp_types.CallToolResult(
        content=result.content,
        structured_content=result.structured_content,
        is_error=result.is_error,
        _meta=result.meta,
    )
    body = wire.model_dump(by_alias=True, mode="json", exclude_none=True)
    body.setdefault("isError", False)
    return body
