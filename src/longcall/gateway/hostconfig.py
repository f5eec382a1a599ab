"""Ready-to-paste host entries for the gateway (G1): Claude Desktop, Cursor, VS Code.

Owns: the JSON each host reads to start (stdio) or reach (Streamable HTTP) the gateway,
and where each host keeps it. Must not: read or write a host's files (a person pastes
the entry), or put a secret in an entry (a token is named by an input or environment
variable, never written out).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

HOSTS = ("claude-desktop", "cursor", "vscode")
WHERE = {
    "claude-desktop": "claude_desktop_config.json (Settings > Developer > Edit Config)",
    "cursor": "~/.cursor/mcp.json, or .cursor/mcp.json in a project",
    "vscode": ".vscode/mcp.json in the workspace (or: MCP: Open User Configuration)",
}
SERVER_NAME = "longcall"


def host_entry(
    host: str,
    *,
    command: str,
    arguments: Sequence[str],
    url: str | None = None,
    token_env: str | None = None,
) -> dict[str, Any]:
    """The host's configuration document holding the gateway: started over stdio with
    ``command arguments``, or reached at ``url`` (Cursor and VS Code) when given."""
    if host not in HOSTS:
        raise ValueError(f"no host {host!r} (use {', '.join(HOSTS)})")
    if host == "vscode":
        if url is not None:
            entry: dict[str, Any] = {"type": "http", "url": url}
            if token_env:
                entry["headers"] = {"Authorization": "Bearer ${input:longcall-token}"}
                inputs = [
                    {
                        "type": "promptString",
                        "id": "longcall-token",
                        "description": "The gateway's bearer token",
                        "password": True,
                    }
                ]
                return {"inputs": inputs, "servers": {SERVER_NAME: entry}}
            return {"servers": {SERVER_NAME: entry}}
        entry = {"type": "stdio", "command": command, "args": list(arguments)}
        return {"servers": {SERVER_NAME: entry}}
    if host == "cursor" and url is not None:
        entry = {"url": url}
        if token_env:
            entry["headers"] = {"Authorization": f"Bearer ${{env:{token_env}}}"}
        return {"mcpServers": {SERVER_NAME: entry}}
    return {"mcpServers": {SERVER_NAME: {"command": command, "args": list(arguments)}}}


def render(host: str, document: dict[str, Any]) -> str:
    """The entry as text, with where the host keeps it."""
    return f"// {WHERE[host]}\n" + json.dumps(document, indent=2) + "\n"
