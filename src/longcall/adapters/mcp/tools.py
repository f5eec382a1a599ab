"""X1 for MCP: what a server lists about a tool, read once into a :class:`ToolBinding`.

Owns: ``tools/list`` (cursor pagination, bounded) as an exchange, the descriptor
digest (L1: a changed tool is another tool), the idempotency reading (X2:
``idempotentHint``/``readOnlyHint`` or an idempotency argument), the read-only hint
(R1: only such a tool is shadowed), the declared synchronous limit and
``execution.taskSupport``. Must not: perform I/O.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from longcall.adapters.base import ToolBinding
from longcall.adapters.exchange import Exchange, TransportFailure, malformed
from longcall.adapters.mcp.rpc import (
    SYNC_TIMEOUT_META_KEY,
    RpcChannel,
    RpcReply,
    call,
    header_value,
)
from longcall.core.keys import digest_json
from longcall.errors import AdapterError, InvalidToolHeaders, UnknownTool

PAGES_MAX = 50
IDEMPOTENCY_ARGUMENTS = frozenset({"idempotencyKey", "idempotency_key", "requestId", "request_id"})


def descriptor_digest(tool: Mapping[str, Any]) -> str:
    """Digest of the tool descriptor as listed (L1): a changed tool is another tool."""
    return digest_json(tool)


def tool_idempotent(tool: Mapping[str, Any]) -> bool:
    """idempotentHint / readOnlyHint, or an idempotency argument in the input schema (X2)."""
    annotations = tool.get("annotations") or {}
    if isinstance(annotations, Mapping) and (
        annotations.get("idempotentHint") is True or annotations.get("readOnlyHint") is True
    ):
        return True
    schema = tool.get("inputSchema") or {}
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    return isinstance(properties, Mapping) and bool(IDEMPOTENCY_ARGUMENTS & set(properties))


def tool_read_only(tool: Mapping[str, Any]) -> bool:
    """The tool declares that it changes nothing: ``readOnlyHint: true`` (R1)."""
    annotations = tool.get("annotations") or {}
    return isinstance(annotations, Mapping) and annotations.get("readOnlyHint") is True


def declared_sync_timeout_s(tool: Mapping[str, Any]) -> float | None:
    """The tool's declared synchronous limit, if its descriptor ``_meta`` names one."""
    meta = tool.get("_meta")
    value = meta.get(SYNC_TIMEOUT_META_KEY) if isinstance(meta, Mapping) else None
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    return None


HEADER_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
"""What an HTTP header name may be made of (RFC 9110 token)."""
HEADER_PARAM_TYPES = frozenset({"string", "integer", "number", "boolean"})


def header_params(tool: Mapping[str, Any]) -> dict[str, str]:
    """The arguments a tool asks to see as ``Mcp-Param-<name>`` headers (SEP-2243):
    argument → header name. Raises :class:`InvalidToolHeaders` when a declaration is
    invalid (an empty or non-token name, a non-primitive argument, a name used twice):
    such a tool is excluded, never called."""
    schema = tool.get("inputSchema")
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    if not isinstance(properties, Mapping):
        return {}
    found: dict[str, str] = {}
    seen: set[str] = set()
    for argument, spec in properties.items():
        if not isinstance(spec, Mapping) or "x-mcp-header" not in spec:
            continue
        name = spec["x-mcp-header"]
        problem = None
        if not isinstance(name, str) or not name:
            problem = "an empty or non-string header name"
        elif not HEADER_TOKEN.match(name):
            problem = f"the header name {name!r} has characters a header name cannot have"
        elif spec.get("type") not in HEADER_PARAM_TYPES:
            problem = f"argument {argument!r} is not a string, number or boolean"
        elif name.lower() in seen:
            problem = f"the header name {name!r} is declared twice"
        if problem is not None:
            raise InvalidToolHeaders(
                f"tool {tool.get('name')!r} declares {problem} in x-mcp-header; "
                "such a tool is excluded"
            )
        seen.add(name.lower())
        found[str(argument)] = name
    return found


def param_headers(
    binding_params: Mapping[str, str], arguments: Mapping[str, Any]
) -> dict[str, str]:
    """The ``Mcp-Param-*`` headers of one call: each designated argument's value (booleans
    and numbers as JSON, unsafe strings as the base64 sentinel); absent or null ones are
    left out (SEP-2243)."""
    headers: dict[str, str] = {}
    for argument, name in binding_params.items():
        value = arguments.get(argument)
        if value is None:
            continue
        text = value if isinstance(value, str) else json.dumps(value)
        headers[f"mcp-param-{name.lower()}"] = header_value(text)
    return headers


def find_tool(tools: Sequence[Mapping[str, Any]], name: str) -> dict[str, Any] | None:
    for tool in tools:
        if tool.get("name") == name:
            return dict(tool)
    return None


def task_support_of(tool: Mapping[str, Any]) -> str | None:
    """``execution.taskSupport`` as listed (2025-11-25), or None when absent."""
    execution = tool.get("execution")
    value = execution.get("taskSupport") if isinstance(execution, Mapping) else None
    return value if value in ("forbidden", "optional", "required") else None


def describe_failure(failure: RpcReply) -> str:
    """A failed request in words: the transport failure or the JSON-RPC code and message."""
    if isinstance(failure, TransportFailure):
        return failure.detail
    error = failure.error or {}
    return f"JSON-RPC {error.get('code')}: {error.get('message')}"


def list_tools(
    channel: RpcChannel, meta: Mapping[str, Any] | None
) -> Exchange[list[dict[str, Any]] | RpcReply]:
    """Every tool the server lists (cursor pagination, bounded); a failure as is."""
    tools: list[dict[str, Any]] = []
    cursor: str | None = None
    for _page in range(PAGES_MAX):
        params: dict[str, Any] = {}
        if cursor is not None:
            params["cursor"] = cursor
        if meta:
            params["_meta"] = dict(meta)
        answer = yield from call(channel, "tools/list", params or None)
        if isinstance(answer, TransportFailure) or answer.result is None:
            return answer
        listed = answer.result.get("tools")
        if not isinstance(listed, list):
            return malformed("tools/list result has no tools list")
        tools.extend(tool for tool in listed if isinstance(tool, dict))
        next_cursor = answer.result.get("nextCursor")
        if not isinstance(next_cursor, str) or not next_cursor:
            return tools
        cursor = next_cursor
    return tools


def listed_tool(
    channel: RpcChannel, meta: Mapping[str, Any] | None, tool_name: str, *, url: str
) -> Exchange[dict[str, Any]]:
    """The descriptor of ``tool_name`` as the server lists it (X1).

    Raises :class:`AdapterError` when ``tools/list`` fails and :class:`UnknownTool`
    when the server does not list the tool.
    """
    listed = yield from list_tools(channel, meta)
    if not isinstance(listed, list):
        raise AdapterError(f"tools/list failed at {url}: {describe_failure(listed)}")
    tool = find_tool(listed, tool_name)
    if tool is None:
        raise UnknownTool(f"{url} does not list tool {tool_name!r}{suggestion(listed, tool_name)}")
    return tool


def listed_tools(
    channel: RpcChannel, meta: Mapping[str, Any] | None, unflagged: str, *, url: str
) -> Exchange[list[dict[str, Any]]]:
    """Every tool the server lists, each with ``taskSupport`` set as read (its own
    declaration, else ``unflagged``); AdapterError when ``tools/list`` fails."""
    listed = yield from list_tools(channel, meta)
    if not isinstance(listed, list):
        raise AdapterError(f"tools/list failed at {url}: {describe_failure(listed)}")
    return [{**tool, "taskSupport": task_support_of(tool) or unflagged} for tool in listed]


def suggestion(tools: Sequence[Mapping[str, Any]], name: str) -> str:
    """``; did you mean …?`` for the listed names closest to ``name``, else the names
    it lists (a few), so a misspelt tool is one edit away."""
    names = [str(t.get("name")) for t in tools if isinstance(t.get("name"), str)]
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    if close:
        return f"; did you mean {' or '.join(map(repr, close))}?"
    if names:
        shown = ", ".join(sorted(names)[:10]) + (", …" if len(names) > 10 else "")
        return f" (it lists: {shown})"
    return " (it lists no tools)"


def tool_binding(
    server: str,
    tool_name: str,
    tool: Mapping[str, Any],
    *,
    protocol: str,
    adapter_version: str,
    task_support: str,
    submission_lookup: bool,
    sync_timeout_s: float | None = None,
    store_id: str | None = None,
) -> ToolBinding:
    """The binding of one listed tool (X1): its digest, idempotency and output schema."""
    schema = tool.get("outputSchema")
    arguments = tool.get("inputSchema")
    return ToolBinding(
        server=server,
        tool_name=tool_name,
        protocol=protocol,
        adapter_version=adapter_version,
        descriptor_digest=descriptor_digest(tool),
        task_support=task_support,  # type: ignore[arg-type]
        idempotent=tool_idempotent(tool),
        read_only=tool_read_only(tool),
        submission_lookup=submission_lookup,
        output_schema=schema if isinstance(schema, Mapping) else None,
        input_schema=arguments if isinstance(arguments, Mapping) else None,
        sync_timeout_s=sync_timeout_s,
        store_id=store_id,
        header_params=header_params(tool),
    )


__all__ = [
    "IDEMPOTENCY_ARGUMENTS",
    "PAGES_MAX",
    "declared_sync_timeout_s",
    "describe_failure",
    "descriptor_digest",
    "find_tool",
    "list_tools",
    "listed_tool",
    "listed_tools",
    "suggestion",
    "task_support_of",
    "tool_binding",
    "tool_idempotent",
    "tool_read_only",
]
