"""The FastMCP seams ``LongcallTasks`` uses that are not public, and the one it no longer
needs: each test here fails the day upstream changes what the workaround rests on.

* The guard pattern's answers reach a re-entered leg through two private ``Context``
  fields: ``ctx.input_responses`` / ``ctx.request_state`` have no setter. The test fails
  when FastMCP gives them one (then ``_seams.set_task_input`` should use it).
* Whether a dispatch is the client's own ``tools/call`` is private
  (``_is_client_tool_call``); the test fails when a public name appears.
* fastmcp-tasks wraps ``mcp_types.methods.serialize_server_result`` process-wide because
  older SDKs stripped a ``CreateTaskResult`` from ``tools/call``. The SDK this project
  depends on (mcp 2.3) passes a result whose ``resultType`` is outside the core set
  through unvalidated, so longcall does not patch it; the tests fail if the SDK starts
  validating ``"task"`` results again, and check the extension never replaces the
  serializer.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import mcp_types
import mcp_types.methods
import pytest
from fastmcp.server import dependencies
from fastmcp.server.context import Context
from tests.integrations.conftest import RawClient, running

from longcall.integrations.fastmcp import _seams

pytestmark = pytest.mark.anyio


def test_input_responses_has_no_public_setter_yet() -> None:
    """ctx.input_responses / ctx.request_state are read-only: the private fields are needed."""
    assert isinstance(Context.input_responses, property)
    assert Context.input_responses.fset is None
    assert Context.request_state.fset is None


def test_the_private_fields_still_feed_the_public_properties() -> None:
    """Setting the two private fields is what ctx.input_responses / request_state return."""
    from fastmcp import FastMCP

    ctx = Context(FastMCP("probe"), task_id="t")
    answer = mcp_types.ElicitResult(action="accept", content={"x": 1})
    _seams.set_task_input(ctx, {"k": answer}, "state")
    assert ctx.input_responses == {"k": answer}
    assert ctx.request_state == "state"


def test_client_tool_call_check_is_still_private() -> None:
    """No public "is this the client's own tools/call" exists yet."""
    names = [name for name in dir(dependencies) if "client_tool_call" in name]
    assert "_is_client_tool_call" in names
    assert [name for name in names if not name.startswith("_")] == []


def test_seams_are_checked_when_the_lifespan_is_entered() -> None:
    """entered() passes on this FastMCP release (it raises naming a missing seam)."""
    with _seams.entered():
        pass


def test_the_sdk_passes_an_extension_result_type_through() -> None:
    """'task' is no core result type, so the SDK runner does not re-validate (strip) it."""
    assert "task" not in mcp_types.CORE_RESULT_TYPES


async def test_a_task_result_reaches_the_wire_and_the_serializer_is_untouched(
    http: httpx.AsyncClient, tmp_path: Path
) -> None:
    """The CreateTaskResult arrives whole (child process), and while the extension's
    lifespan runs here in this process the SDK's serializer stays the SDK's own."""
    from fastmcp import Client, FastMCP

    from longcall.integrations.fastmcp import LongcallTasks

    async with running(f"sqlite:///{tmp_path / 't.db'}", tmp_path) as app:
        created = await RawClient(http, app.url).create("add", {"a": 1, "b": 1})
        assert set(created) >= {"taskId", "status", "createdAt", "ttlMs", "pollIntervalMs"}
    original = mcp_types.methods.serialize_server_result
    mcp = FastMCP("probe")
    extension = LongcallTasks(store=f"sqlite:///{tmp_path / 'in-process.db'}")
    mcp.add_extension(extension)

    @mcp.tool(task=True)
    async def shout(text: str) -> str:
        return text.upper()

    async with Client(mcp) as client:
        assert (await client.call_tool("shout", {"text": "x"})).content[0].text == "X"
        assert len(extension.store_id) == 32  # the lifespan is running, here
        assert mcp_types.methods.serialize_server_result is original
