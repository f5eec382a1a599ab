"""FastMCP's own client task API (fastmcp-tasks 4.1.4's ``Client`` extension and
``call_tool_task``) against a FastMCP app on ``LongcallTasks``, unmodified (it sends no
``Mcp-Name``, which the extension accepts as fastmcp-tasks does) — and the same scenarios
against the same app on fastmcp-tasks 4.1.4 (``memory://``), side by side: they agree
except where LongcallTasks does more (``ctx.elicit`` inside a task).

fastmcp-tasks exists only for FastMCP 4.1.x, so on the newest 4.2.x these skip: there
is no FastMCP client task API to install beside it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from tests.bounds import LOADED_MACHINE_S

pytest.importorskip("fastmcp_tasks")

from fastmcp import Client
from fastmcp.exceptions import ToolError
from fastmcp_tasks.client import call_tool_task
from tests.integrations.conftest import App

pytestmark = pytest.mark.anyio

LIMIT_S = LOADED_MACHINE_S
BACKENDS = ("longcall", "fastmcp-tasks")


@pytest.fixture(scope="module", params=BACKENDS)
def app(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[App]:
    """The test app on LongcallTasks, and the same app on fastmcp-tasks 4.1.4 (memory://)."""
    backend = str(request.param)
    workdir = tmp_path_factory.mktemp(f"client-{backend}")
    started = App(f"sqlite:///{workdir / 'tasks.db'}", workdir, "--backend", backend)
    yield started.start_blocking()
    started.stop()


async def test_client_call_tool_drives_a_task_to_its_result(app: App) -> None:
    """client.call_tool on a required task tool returns the tool's structured result."""
    with anyio.fail_after(LIMIT_S):
        async with Client(app.url, timeout=LIMIT_S) as client:
            result = await client.call_tool("add", {"a": 20, "b": 22})
    assert result.structured_content == {"sum": 42}


async def test_client_answers_guard_and_elicit_input(app: App) -> None:
    """The client's elicitation handler answers the guard pattern on both backends, and
    ctx.elicit inside the task on LongcallTasks; fastmcp-tasks refuses ctx.elicit there."""
    prompts: list[str] = []

    async def answer(message: str, response_type: Any, params: Any, context: Any) -> Any:
        prompts.append(message)
        return {"name": "Ada"} if "name" in message else {"value": "green"}

    with anyio.fail_after(LIMIT_S):
        async with Client(app.url, timeout=LIMIT_S, elicitation_handler=answer) as client:
            greeted = await client.call_tool("ask_name", {})
            assert greeted.content[0].text == "Hello, Ada! (asked-once)"
            if app.backend == "fastmcp-tasks":
                with pytest.raises(ToolError, match="not supported inside a background task"):
                    await client.call_tool("ask_colour", {})
                assert prompts == ["Please enter your name."]
                return
            coloured = await client.call_tool("ask_colour", {})
    assert coloured.content[0].text == "colour: green"
    assert prompts == ["Please enter your name.", "Favourite colour?"]


async def test_client_task_handle_reads_progress_and_cancels(app: App, tmp_path: Path) -> None:
    """call_tool_task: status() shows the progress message; cancel() ends the task."""
    with anyio.fail_after(LIMIT_S):
        async with Client(app.url, timeout=LIMIT_S) as client:
            task = await call_tool_task(client, "steps", {"gate": str(tmp_path / "never")})
            while (status := await task.status()).status_message != "step 1 of 2":  # noqa: ASYNC110
                await anyio.sleep(0.05)
            assert status.status == "working"
            await task.cancel()
            final = await task.wait(timeout=LIMIT_S)
            assert final.status == "cancelled"
            with pytest.raises(ToolError, match="cancelled"):
                await task.result()


async def test_client_sees_tool_and_protocol_errors(app: App) -> None:
    """A tool error is an error result; a failed task is a raised ToolError."""
    with anyio.fail_after(LIMIT_S):
        async with Client(app.url, timeout=LIMIT_S) as client:
            tool = await client.call_tool("tool_error", {}, raise_on_error=False)
            assert tool.is_error is True
            with pytest.raises(ToolError, match="upstream rate limit"):
                await client.call_tool("protocol_error", {})
