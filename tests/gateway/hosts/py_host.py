"""A task-unaware MCP host, as a person would set one up with a real package, against
`longcall gateway` (run by tests/gateway/test_hosts.py in interop/hosts/.venv, where
the package and its mcp 1.x SDK live).

    python py_host.py PACKAGE URL TOOL ARGS_JSON SHORT_TIMEOUT_S TIMEOUT_S

PACKAGE is langchain, pydantic-ai or openai-agents. The host calls TOOL once with
SHORT_TIMEOUT_S as its timeout (it times out: the gateway's window is longer), retries
the same call with TIMEOUT_S, and then follows what the answer says to call until it
has the result. One JSON line per step on stdout; exit 0 on a result. Bounded: at most
FOLLOW_MAX follow-ups.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from datetime import timedelta
from typing import Any

FOLLOW_MAX = 40
HANDLE = re.compile(r"handle=(lc-[0-9a-z]{4}-[0-9a-z]{5})")


def say(**event: Any) -> None:
    print(json.dumps(event, default=str), flush=True)


class Langchain:
    """langchain-mcp-adapters: a tool is a LangChain tool; the model reads its text.
    URL may be a JSON list instead: the command that starts the gateway over stdio."""

    reads = "text"

    def __init__(self, url: str, timeout_s: float) -> None:
        from langchain_mcp_adapters.client import MultiServerMCPClient

        session = {"read_timeout_seconds": timedelta(seconds=timeout_s)}
        if url.startswith("["):
            command, *args = json.loads(url)
            connection: dict[str, Any] = {
                "transport": "stdio",
                "command": command,
                "args": args,
                "session_kwargs": session,
            }
        else:
            connection = {"transport": "streamable_http", "url": url, "session_kwargs": session}
        self.client = MultiServerMCPClient({"gateway": connection})  # type: ignore[dict-item]
        self.tools: dict[str, Any] = {}

    async def call(self, name: str, arguments: dict[str, Any]) -> Any:
        if not self.tools:
            self.tools = {tool.name: tool for tool in await self.client.get_tools()}
        return await self.tools[name].ainvoke(arguments)

    async def close(self) -> None:
        return None


class PydanticAI:
    """pydantic-ai's MCP client: structured content comes back as the tool's value."""

    reads = "structured"

    def __init__(self, url: str, timeout_s: float) -> None:
        from pydantic_ai.mcp import MCPToolset

        self.server = MCPToolset(url, read_timeout=timeout_s)
        self.entered = False

    async def call(self, name: str, arguments: dict[str, Any]) -> Any:
        if not self.entered:
            await self.server.__aenter__()
            self.entered = True
        return await self.server.direct_call_tool(name, arguments)

    async def close(self) -> None:
        if self.entered:
            await self.server.__aexit__(None, None, None)


class OpenAIAgents:
    """The openai-agents SDK's MCP client: a CallToolResult with structured content."""

    reads = "structured"

    def __init__(self, url: str, timeout_s: float) -> None:
        from agents.mcp import MCPServerStreamableHttp

        # The session's timeout is the host's request timeout; the transport's own read
        # bounds must not be shorter, or they end a call the session still waits for.
        transport_s = max(30.0, timeout_s)
        self.server = MCPServerStreamableHttp(
            params={"url": url, "timeout": transport_s, "sse_read_timeout": transport_s},
            client_session_timeout_seconds=timeout_s,
        )
        self.connected = False

    async def call(self, name: str, arguments: dict[str, Any]) -> Any:
        if not self.connected:
            await self.server.connect()
            self.connected = True
        result = await self.server.call_tool(name, arguments)
        return result.structuredContent if result.structuredContent is not None else result

    async def close(self) -> None:
        if self.connected:
            await self.server.cleanup()


HOSTS = {"langchain": Langchain, "pydantic-ai": PydanticAI, "openai-agents": OpenAIAgents}


def next_step(host: Any, answer: Any) -> tuple[str, dict[str, Any]] | None:
    """What the answer says to call next, read the way this host's model reads it."""
    if host.reads == "structured":
        if isinstance(answer, dict) and isinstance(answer.get("next"), dict):
            return answer["next"]["tool"], answer["next"]["arguments"]
        return None
    text = answer if isinstance(answer, str) else json.dumps(answer, default=str)
    match = HANDLE.search(text)
    if match and "Call longcall_status" in text:
        return "longcall_status", {"handle": match.group(1), "wait_s": 2}
    return None


async def main() -> int:
    package, url, tool, raw, short_s, timeout_s = sys.argv[1:7]
    arguments = json.loads(raw)
    impatient = HOSTS[package](url, float(short_s))
    try:
        await impatient.call(tool, arguments)
        say(attempt=1, timed_out=False)
    except BaseException as exc:  # the host's own timeout, as each package raises it
        say(attempt=1, timed_out=True, error=f"{type(exc).__name__}: {exc}"[:300])
    finally:
        await impatient.close()
    host = HOSTS[package](url, float(timeout_s))
    try:
        began = time.monotonic()
        answer = await host.call(tool, arguments)
        say(attempt=2, early=answer, took_s=round(time.monotonic() - began, 3))
        for _ in range(FOLLOW_MAX):
            step = next_step(host, answer)
            if step is None:
                say(result=answer)
                return 0
            answer = await host.call(*step)
            say(followed=step[0], answer=answer)
        say(error="no result after following next")
        return 1
    finally:
        await host.close()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
