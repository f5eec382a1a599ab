"""X6 for MCP: what a tool result must be before it becomes a ``ResultFetched``.

Owns: the payload we keep of a ``CallToolResult`` (without its volatile envelope), the
zero-item warning test, the output-schema check, and the JSON-RPC error kept as a
protocol-error outcome — a tool error (``isError: true``) and a protocol error stay
distinct in the receipt. Must not: perform I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from longcall.adapters.base import Outcome
from longcall.adapters.binding import schema_violation
from longcall.core.events import ResultFetched, ResultFetchFailed
from longcall.core.keys import canonical_json, digest_bytes
from longcall.core.record import ResultKind, ServerStatus

ENVELOPE_KEYS = frozenset({"resultType", "_meta"})
"""Wire envelope of an MCP result: not part of what the tool returned, and volatile
(server stamps), so it stays out of the digest."""


def kept_result(result: Mapping[str, Any]) -> dict[str, Any]:
    """The ``CallToolResult`` we keep as payload: the result without its envelope."""
    return {key: value for key, value in result.items() if key not in ENVELOPE_KEYS}


def is_empty_result(result: Mapping[str, Any]) -> bool:
    """No content, or structured content holding only empty collections (X6 warning)."""
    structured = result.get("structuredContent")
    if isinstance(structured, Mapping):
        collections = [v for v in structured.values() if isinstance(v, list | dict)]
        return not structured or (bool(collections) and not any(collections))
    if isinstance(structured, list):
        return not structured
    content = result.get("content") or []
    return all(
        isinstance(item, Mapping) and item.get("type") == "text" and not item.get("text")
        for item in content
    )


def error_body(error: Mapping[str, Any]) -> dict[str, Any]:
    """The canonical JSON-RPC error object we keep (code, message, data)."""
    body: dict[str, Any] = {"code": error.get("code"), "message": error.get("message")}
    if error.get("data") is not None:
        body["data"] = error.get("data")
    return body


def output_violation(structured: Any, schema: Mapping[str, Any]) -> str | None:
    """Why a result's ``structuredContent`` breaks the tool's declared output schema."""
    if structured is None:
        return "the tool declares an outputSchema but the result has no structuredContent"
    return schema_violation(structured, schema, subject="structuredContent")


def verify_result(
    result: Any,
    *,
    output_schema: Mapping[str, Any] | None,
    status: ServerStatus = ServerStatus.COMPLETED,
    operation_id: str | None = None,
) -> Outcome:
    """Check a tool result and turn it into ``ResultFetched`` or ``ResultFetchFailed`` (X6).

    ``status`` is the terminal the server reported (2025-11-25 reports a tool error as
    ``failed``); the result kind keeps a tool error apart from a protocol error.
    """
    if not isinstance(result, Mapping):
        return Outcome(
            event=ResultFetchFailed(reason="the result is not an object", retryable=True)
        )
    content = result.get("content", [])
    if not isinstance(content, list) or not all(isinstance(item, Mapping) for item in content):
        return Outcome(
            event=ResultFetchFailed(reason="result.content is not a list of blocks", retryable=True)
        )
    kept = kept_result(result)
    kept.setdefault("content", [])
    is_error = result.get("isError") is True
    if not is_error and output_schema is not None:
        violation = output_violation(result.get("structuredContent"), output_schema)
        if violation is not None:
            return Outcome(event=ResultFetchFailed(reason=violation, retryable=False))
    payload = canonical_json(kept)
    return Outcome(
        event=ResultFetched(
            status=status,
            result_kind=ResultKind.TOOL_ERROR if is_error else ResultKind.VALUE,
            result_digest=digest_bytes(payload),
            empty=not is_error and is_empty_result(kept),
            operation_id=operation_id,
        ),
        payload=payload,
    )


def kind_of_result(status: ServerStatus, body: Any) -> ResultKind | None:
    """The kind the fetch above gives a terminal whose result is ``body`` (parsed JSON):
    a tool error (``isError: true``, whether its task completed or failed) or, for a
    failed task, its own JSON-RPC error as a protocol error. None: the body says
    neither."""
    if not isinstance(body, Mapping) or status is ServerStatus.CANCELLED:
        return None
    if body.get("isError") is True:
        return ResultKind.TOOL_ERROR
    if status is ServerStatus.FAILED and isinstance(body.get("code"), int):
        return ResultKind.PROTOCOL_ERROR
    return None


def protocol_error_result(error: Any, *, operation_id: str | None = None) -> Outcome:
    """A task's own JSON-RPC error as its outcome: PROTOCOL_ERROR, status FAILED (X6).

    Only an error that answers OUR request for the task's result may come here; an error
    about no request (``id: null``) never does (C3, :mod:`longcall.adapters.mcp.rpc`).
    """
    if not isinstance(error, Mapping) or not isinstance(error.get("code"), int):
        return Outcome(
            event=ResultFetchFailed(
                reason="the task's error is not a JSON-RPC error", retryable=True
            )
        )
    payload = canonical_json(error_body(error))
    return Outcome(
        event=ResultFetched(
            status=ServerStatus.FAILED,
            result_kind=ResultKind.PROTOCOL_ERROR,
            result_digest=digest_bytes(payload),
            operation_id=operation_id,
        ),
        payload=payload,
    )
