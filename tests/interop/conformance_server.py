"""The fixture server the official conformance suite's server scenarios call, built with
``longcall.server`` (nothing here speaks the protocol: the library does).

Tools (named as the scenarios expect): the SEP-2663 task fixtures (``greet``,
``slow_compute``, ``failing_job``, ``protocol_error_job``, ``confirm_delete``,
``multi_input``, ``test_tool_with_task``), the core content tools (``test_simple_text``,
``test_image_content``, ``test_audio_content``, ``test_embedded_resource``,
``test_multiple_content_types``, ``test_error_handling``), and the SEP-2322 input tools
(``test_input_required_result_*``, ``test_missing_capability``). What the library does
not offer (resources, prompts, completion, logging, in-request sampling/elicitation at
2025-11-25) is not faked here; the conformance test lists those scenarios with why.

Run as ``python tests/interop/conformance_server.py --store PATH --port PORT``.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from longcall.server import LongcallServer, TaskContext, ToolError, ToolProtocolError
from longcall.server.inputs import elicitation, roots, sampling

IMAGE_PNG_BASE64 = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5"
    "ErkJggg=="
)
AUDIO_WAV_BASE64 = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="
NAME_FORM = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
CONFIRM_FORM = {
    "type": "object",
    "properties": {"confirm": {"type": "boolean"}},
    "required": ["confirm"],
}
OK_FORM = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
COLOR_FORM = {"type": "object", "properties": {"color": {"type": "string"}}, "required": ["color"]}
SLOW_COMPUTE_SECONDS_MAX = 120.0


def text(value: str) -> dict[str, Any]:
    """A ``CallToolResult`` with one text block."""
    return {"content": [{"type": "text", "text": value}], "isError": False}


def content_of(answer: dict[str, Any]) -> dict[str, Any]:
    """The form content of an elicitation answer (empty when declined)."""
    content = answer.get("content")
    return content if isinstance(content, dict) else {}


def build(store: str) -> LongcallServer:
    """The conformance fixture server on a task store."""
    server = LongcallServer(store=store)
    register_task_fixtures(server)
    register_content_tools(server)
    register_input_tools(server)
    return server


def register_task_fixtures(server: LongcallServer) -> None:
    """SEP-2663 fixtures: ``tools/list`` of every ``tasks-*`` scenario names these."""

    @server.tool(task="forbidden")
    async def greet(name: str = "World") -> str:
        """Answer ``Hello, {name}!`` synchronously."""
        return f"Hello, {name}!"

    @server.tool(task="optional", poll_interval_ms=100, idempotent=True)
    async def slow_compute(seconds: float = 1.0, label: str = "") -> str:
        """Sleep ``seconds`` (0: at once), then report; a cancel ends it cancelled."""
        await asyncio.sleep(min(max(seconds, 0.0), SLOW_COMPUTE_SECONDS_MAX))
        return f"computed {label or 'result'} after {seconds:g}s"

    @server.tool(task="required", poll_interval_ms=100)
    async def failing_job() -> str:
        """Fail with a tool error (``completed`` + ``isError``) after a moment."""
        await asyncio.sleep(0.2)
        raise ToolError("failing_job: the job failed on purpose")

    @server.tool(task="optional", poll_interval_ms=100)
    async def protocol_error_job() -> str:
        """Fail with a JSON-RPC error (``failed`` + ``error``)."""
        await asyncio.sleep(0.05)
        raise ToolProtocolError(-32603, "protocol_error_job: an internal failure on purpose")

    @server.tool(task="optional", poll_interval_ms=100)
    async def confirm_delete(ctx: TaskContext, filename: str = "file.txt") -> str:
        """Ask for confirmation (one input request), then report the decision."""
        answer = await ctx.elicit(f"Delete {filename}?", CONFIRM_FORM)
        confirmed = answer.get("action") == "accept" and bool(content_of(answer).get("confirm"))
        return f"{filename}: {'deleted' if confirmed else 'kept'}"

    @server.tool(task="optional", poll_interval_ms=100)
    async def multi_input(ctx: TaskContext) -> str:
        """Ask two questions at once (two keys pending together), then answer both."""
        answers = await ctx.request_inputs(
            {
                "name": elicitation("What is your name?", NAME_FORM),
                "color": elicitation("What is your favourite colour?", COLOR_FORM),
            }
        )
        return f"{content_of(answers['name']).get('name')} likes {content_of(answers['color'])}"

    @server.tool(
        task="required",
        poll_interval_ms=100,
        ask_first={"user_name": elicitation("What is your name?", NAME_FORM)},
    )
    async def test_tool_with_task(ctx: TaskContext) -> str:
        """Ask the name before the task exists (SEP-2322), then greet from the task."""
        answer = await ctx.elicit("What is your name?", NAME_FORM, key="user_name")
        await asyncio.sleep(0.1)
        return f"Hello, {content_of(answer).get('name')}! (from the task)"


def register_content_tools(server: LongcallServer) -> None:
    """The core tool scenarios' fixtures: content kinds and a tool error."""

    @server.tool(task="forbidden")
    async def test_simple_text() -> dict[str, Any]:
        """Tests simple text content response."""
        return text("This is a simple text response for testing.")

    @server.tool(task="forbidden")
    async def test_image_content() -> dict[str, Any]:
        """Tests image content response."""
        image = {"type": "image", "data": IMAGE_PNG_BASE64, "mimeType": "image/png"}
        return {"content": [image], "isError": False}

    @server.tool(task="forbidden")
    async def test_audio_content() -> dict[str, Any]:
        """Tests audio content response."""
        audio = {"type": "audio", "data": AUDIO_WAV_BASE64, "mimeType": "audio/wav"}
        return {"content": [audio], "isError": False}

    @server.tool(task="forbidden")
    async def test_embedded_resource() -> dict[str, Any]:
        """Tests embedded resource content response."""
        resource = {
            "uri": "test://embedded-resource",
            "mimeType": "text/plain",
            "text": "This is an embedded resource content.",
        }
        return {"content": [{"type": "resource", "resource": resource}], "isError": False}

    @server.tool(task="forbidden")
    async def test_multiple_content_types() -> dict[str, Any]:
        """Tests response with multiple content types (text, image, resource)."""
        resource = {
            "uri": "test://mixed-content-resource",
            "mimeType": "application/json",
            "text": '{"test":"data","value":123}',
        }
        blocks = [
            {"type": "text", "text": "Multiple content types test:"},
            {"type": "image", "data": IMAGE_PNG_BASE64, "mimeType": "image/png"},
            {"type": "resource", "resource": resource},
        ]
        return {"content": blocks, "isError": False}

    @server.tool(task="forbidden")
    async def test_error_handling() -> str:
        """Tests error response handling."""
        raise ToolError("This tool intentionally returns an error for testing")

    @server.tool(task="forbidden")
    async def test_tool_with_progress(ctx: TaskContext) -> str:
        """Report progress 0, 50, 100 of 100 (sent when the request has a progressToken)."""
        for step in (0, 50, 100):
            await ctx.report_progress(step, 100, f"Completed step {step} of 100")
            await asyncio.sleep(0.02)
        return "Progress test completed"


def register_input_tools(server: LongcallServer) -> None:
    """SEP-2322 fixtures: input asked in rounds of ``tools/call`` (no task)."""

    @server.tool(task="forbidden")
    async def test_input_required_result_elicitation(ctx: TaskContext) -> str:
        """Round 1 asks ``user_name``; round 2 greets."""
        answer = await ctx.elicit("What is your name?", NAME_FORM, key="user_name")
        return f"Hello, {content_of(answer).get('name')}!"

    @server.tool(task="forbidden")
    async def test_input_required_result_sampling(ctx: TaskContext) -> str:
        """Asks the client's model (``sample_request``), then reports its answer."""
        messages = [{"role": "user", "content": {"type": "text", "text": "What is 2+2?"}}]
        answer = (await ctx.request_inputs({"sample_request": sampling(messages, 50)}))[
            "sample_request"
        ]
        reply = answer.get("content")
        said = reply.get("text") if isinstance(reply, dict) else None
        return f"The model said: {said}"

    @server.tool(task="forbidden")
    async def test_input_required_result_list_roots(ctx: TaskContext) -> str:
        """Asks for the client's roots (``client_roots``), then lists them."""
        answer = (await ctx.request_inputs({"client_roots": roots()}))["client_roots"]
        listed = answer.get("roots")
        uris = [root.get("uri") for root in listed] if isinstance(listed, list) else []
        return f"Roots: {', '.join(str(uri) for uri in uris)}"

    @server.tool(task="forbidden")
    async def test_input_required_result_request_state(ctx: TaskContext) -> str:
        """Asks ``confirm``; the answer round runs on a verified requestState (state-ok)."""
        answer = await ctx.elicit("Please confirm", OK_FORM, key="confirm")
        verdict = "state-ok" if ctx.rounds >= 1 else "state-missing"
        return f"{verdict}: confirmed={content_of(answer).get('ok')}"

    @server.tool(task="forbidden")
    async def test_input_required_result_multiple_inputs(ctx: TaskContext) -> str:
        """Asks three kinds of input in one round: a form, the model, the roots."""
        messages = [{"role": "user", "content": {"type": "text", "text": "Generate a greeting"}}]
        answers = await ctx.request_inputs(
            {
                "user_name": elicitation("What is your name?", NAME_FORM),
                "greeting": sampling(messages, 50),
                "client_roots": roots(),
            }
        )
        name = content_of(answers["user_name"]).get("name")
        said = answers["greeting"].get("content")
        greeting = said.get("text") if isinstance(said, dict) else "Hello there!"
        listed = answers["client_roots"].get("roots")
        return f"Name: {name}; Greeting: {greeting}; Roots: {len(listed or [])}"

    @server.tool(task="forbidden")
    async def test_input_required_result_multi_round(ctx: TaskContext) -> str:
        """Round 1 asks ``step1`` (name), round 2 asks ``step2`` (colour), round 3 answers."""
        name = content_of(await ctx.elicit("Step 1: What is your name?", NAME_FORM, key="step1"))
        color = content_of(
            await ctx.elicit("Step 2: What is your favorite color?", COLOR_FORM, key="step2")
        )
        return f"{name.get('name')} likes {color.get('color')}"

    @server.tool(task="forbidden")
    async def test_input_required_result_tampered_state(ctx: TaskContext) -> str:
        """Asks ``confirm``; a tampered requestState is refused by the library (-32602)."""
        answer = await ctx.elicit("Please confirm", OK_FORM, key="confirm")
        return f"confirmed={content_of(answer).get('ok')}"

    @server.tool(task="forbidden")
    async def test_input_required_result_capabilities(ctx: TaskContext) -> str:
        """Asks only for what the client declared it can answer."""
        declared = ctx.client_capabilities or {}
        wanted: dict[str, dict[str, Any]] = {}
        if "elicitation" in declared:
            wanted["user_name"] = elicitation("What is your name?", NAME_FORM)
        if "sampling" in declared:
            messages = [{"role": "user", "content": {"type": "text", "text": "Hello?"}}]
            wanted["sample_request"] = sampling(messages, 20)
        if not wanted:
            return "The client declared no input capability."
        answers = await ctx.request_inputs(wanted)
        return f"Answered: {', '.join(sorted(answers))}"

    @server.tool(task="forbidden")
    async def test_streaming_elicitation(ctx: TaskContext) -> str:
        """Reports progress while answering: a stream may carry notifications, never a
        request the server makes of the client (SEP-2575)."""
        await ctx.report_progress(50, 100, "half way")
        return "Streaming complete"

    @server.tool(task="forbidden")
    async def test_logging_tool() -> str:
        """The library sends no log notifications at all, so none without a log level."""
        return "Logging evaluated"

    @server.tool(task="forbidden")
    async def test_missing_capability(ctx: TaskContext) -> str:
        """Needs sampling: a client that did not declare it gets -32021 from the library."""
        messages = [{"role": "user", "content": {"type": "text", "text": "Hello?"}}]
        await ctx.request_inputs({"sample_request": sampling(messages, 20)})
        return "Success"


def main() -> None:
    """Serve until killed."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    asyncio.run(build(args.store).serve(host="127.0.0.1", port=args.port))


if __name__ == "__main__":
    main()
