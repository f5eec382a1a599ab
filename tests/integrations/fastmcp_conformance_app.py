"""The tools the official conformance suite's ``tasks-*`` scenarios call by name, written
as a FastMCP user writes them, on either task backend:
``python fastmcp_conformance_app.py {longcall,fastmcp-tasks} STORE PORT_FILE``.

``longcall`` adds ``LongcallTasks(store=STORE)``; ``fastmcp-tasks`` adds fastmcp-tasks'
``TasksExtension(url="memory://")`` (STORE unused) — the one line that differs. Input is
asked with FastMCP's guard pattern (a body returns ``InputRequiredResult``), the one
both backends support.
"""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import mcp_types
from fastmcp import Context, FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.utilities.tasks import TaskConfig
from mcp.shared.exceptions import MCPError
from tests.integrations.fastmcp_app import serve

NAME_FORM = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
CONFIRM_FORM = {
    "type": "object",
    "properties": {"confirm": {"type": "boolean"}},
    "required": ["confirm"],
}
COLOR_FORM = {"type": "object", "properties": {"color": {"type": "string"}}, "required": ["color"]}
OPTIONAL = TaskConfig(mode="optional", poll_interval=timedelta(milliseconds=100))
REQUIRED = TaskConfig(mode="required", poll_interval=timedelta(milliseconds=100))
SLOW_COMPUTE_SECONDS_MAX = 120.0


def ask(**questions: tuple[str, dict[str, Any]]) -> mcp_types.InputRequiredResult:
    """An ``InputRequiredResult`` of form elicitations, key → (message, schema)."""
    requests = {
        key: mcp_types.ElicitRequest(
            params=mcp_types.ElicitRequestFormParams(
                mode="form", message=message, requested_schema=schema
            )
        )
        for key, (message, schema) in questions.items()
    }
    return mcp_types.InputRequiredResult(input_requests=requests)


def content(answers: Any, key: str) -> dict[str, Any]:
    value = getattr(answers[key], "content", None)
    return value if isinstance(value, dict) else {}


def build(backend: str, store: str) -> FastMCP:
    mcp = FastMCP("longcall-fastmcp-conformance")
    if backend == "longcall":
        from longcall.integrations.fastmcp import LongcallTasks

        mcp.add_extension(LongcallTasks(store=store))
    else:
        from fastmcp_tasks import TasksExtension

        mcp.add_extension(TasksExtension(url="memory://"))

    @mcp.tool()
    async def greet(name: str = "World") -> str:
        """Answer ``Hello, {name}!`` synchronously."""
        return f"Hello, {name}!"

    @mcp.tool(task=OPTIONAL, annotations={"idempotentHint": True})
    async def slow_compute(seconds: float = 1.0, label: str = "") -> str:
        """Sleep ``seconds``, then report; a cancel ends it cancelled."""
        await asyncio.sleep(min(max(seconds, 0.0), SLOW_COMPUTE_SECONDS_MAX))
        return f"computed {label or 'result'} after {seconds:g}s"

    @mcp.tool(task=REQUIRED)
    async def failing_job() -> str:
        """Fail with a tool error after a moment."""
        await asyncio.sleep(0.2)
        raise ToolError("failing_job: the job failed on purpose")

    @mcp.tool(task=OPTIONAL)
    async def protocol_error_job() -> str:
        """Fail with a JSON-RPC error."""
        await asyncio.sleep(0.05)
        raise MCPError(-32603, "protocol_error_job: an internal failure on purpose")

    @mcp.tool(task=OPTIONAL)
    async def confirm_delete(ctx: Context, filename: str = "file.txt") -> Any:
        """Ask for confirmation, then report the decision."""
        answers = ctx.input_responses
        if not answers:
            return ask(confirm=(f"Delete {filename}?", CONFIRM_FORM))
        confirmed = bool(content(answers, "confirm").get("confirm"))
        return f"{filename}: {'deleted' if confirmed else 'kept'}"

    @mcp.tool(task=OPTIONAL)
    async def multi_input(ctx: Context) -> Any:
        """Ask two questions at once, then answer both."""
        answers = ctx.input_responses
        if not answers:
            return ask(
                name=("What is your name?", NAME_FORM),
                color=("What is your favourite colour?", COLOR_FORM),
            )
        return f"{content(answers, 'name').get('name')} likes {content(answers, 'color')}"

    @mcp.tool(task=REQUIRED)
    async def test_tool_with_task(ctx: Context) -> Any:
        """Ask the name, then greet from the task."""
        answers = ctx.input_responses
        if not answers:
            return ask(user_name=("What is your name?", NAME_FORM))
        return f"Hello, {content(answers, 'user_name').get('name')}! (from the task)"

    return mcp


if __name__ == "__main__":
    serve(build(sys.argv[1], sys.argv[2]), Path(sys.argv[3]))
