"""Wire vocabulary shared by both protocol modules: keys, timestamps, request value types.

Owns: the ``_meta`` keys (MCP's and this project's own ``dev.longcall/*``), the
request/response value types the app hands to a protocol module, ISO-8601 rendering,
and small validators for params. Must not: know HTTP (Starlette) or the store.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pydantic
from mcp_types import methods as sdk_methods

from longcall.server.errors import InvalidParams
from longcall.server.model import Principal

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
RELATED_TASK_META_KEY = "io.modelcontextprotocol/related-task"
SUBSCRIPTION_ID_META_KEY = "io.modelcontextprotocol/subscriptionId"
SUBMISSION_KEY_EXTENSION = "dev.longcall/submissionKey"
"""The project's extension id and the request ``_meta`` key carrying a submission key (S3)."""
SUBMISSION_KEY_META_KEY = SUBMISSION_KEY_EXTENSION
LOOKUP_METHOD = "longcall/tasks/lookup"
SUBMISSION_KEY_MAX_CHARS = 256

SERVER_INPUT_ID_PREFIX = "longcall-input:"
"""JSON-RPC ids of side-channel input requests (2025-11-25): ``longcall-input:<taskId>:<key>``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RpcRequest:
    """One inbound JSON-RPC request or notification, authenticated."""

    id: str | int | None
    method: str
    params: dict[str, Any]
    headers: Mapping[str, str]
    principal: Principal
    accepts_event_stream: bool
    session_capabilities: Mapping[str, Any] | None = None
    """2025-11-25 in stateful mode: what the client declared at ``initialize``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Streamed:
    """A reply sent as an SSE stream: each item is a full JSON-RPC message."""

    messages: AsyncIterator[dict[str, Any]]


@dataclass(frozen=True, slots=True, kw_only=True)
class Reply:
    """A JSON reply."""

    result: dict[str, Any]


def iso8601(epoch_seconds: float) -> str:
    """UTC ISO-8601 with microseconds, e.g. ``2026-11-29T19:23:03.324800Z``."""
    return datetime.fromtimestamp(epoch_seconds, UTC).isoformat().replace("+00:00", "Z")


def response(request_id: str | int | None, result: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON-RPC success response."""
    return {"jsonrpc": "2.0", "id": request_id, "result": dict(result)}


def error_response(request_id: str | int | None, error: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON-RPC error response."""
    return {"jsonrpc": "2.0", "id": request_id, "error": dict(error)}


def notification(method: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON-RPC notification."""
    return {"jsonrpc": "2.0", "method": method, "params": dict(params)}


def require_string(params: Mapping[str, Any], key: str) -> str:
    """``params[key]`` as a non-empty string, else -32602 naming the key."""
    value = params.get(key)
    if not isinstance(value, str) or not value:
        raise InvalidParams(f"params.{key} must be a non-empty string")
    return value


def request_meta(params: Mapping[str, Any]) -> Mapping[str, Any]:
    """``params._meta`` (an object) or an empty mapping; -32602 if it is not an object."""
    meta = params.get("_meta", {})
    if not isinstance(meta, Mapping):
        raise InvalidParams("params._meta must be an object")
    return meta


def submission_key(params: Mapping[str, Any]) -> str | None:
    """The caller's submission key from ``_meta`` (S3), validated."""
    value = request_meta(params).get(SUBMISSION_KEY_META_KEY)
    if value is None:
        return None
    if not isinstance(value, str) or not 0 < len(value) <= SUBMISSION_KEY_MAX_CHARS:
        raise InvalidParams(
            f"_meta[{SUBMISSION_KEY_META_KEY!r}] must be a string of"
            f" 1..{SUBMISSION_KEY_MAX_CHARS} characters"
        )
    return value


def tool_arguments(params: Mapping[str, Any]) -> dict[str, Any]:
    """``params.arguments`` as an object (the size cap is the task manager's, on every path)."""
    arguments = params.get("arguments", {})
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise InvalidParams("params.arguments must be an object")
    return arguments


def validation_details(exc: pydantic.ValidationError) -> list[dict[str, Any]]:
    """A compact, JSON-safe list of pydantic errors for ``error.data``."""
    return [
        {"loc": [str(part) for part in err["loc"]], "msg": err["msg"]}
        for err in exc.errors(include_url=False, include_input=False, include_context=False)
    ]


def validate_core_params(request: RpcRequest, version: str) -> None:
    """Check a core MCP request's params against the SDK's own schema for ``version``."""
    try:
        sdk_methods.validate_client_request(request.method, version, request.params)
    except pydantic.ValidationError as exc:
        raise InvalidParams(
            f"invalid params for {request.method}", validation_details(exc)
        ) from exc


def lookup_result(found: tuple[str, bool] | None, store_id: str) -> dict[str, Any]:
    """The answer of the submission-key lookup (S3): "exists: id" or "never created", and
    by which store (C5): ``found: false`` proves nothing to a client that submitted while
    the server advertised another ``storeId``."""
    if found is None:
        return {"found": False, "storeId": store_id}
    task_id, expired = found
    return {"found": True, "taskId": task_id, "expired": expired, "storeId": store_id}


def submission_key_capability(store_id: str) -> dict[str, Any]:
    """The settings of the ``dev.longcall/submissionKey`` extension a server advertises."""
    return {"lookupMethod": LOOKUP_METHOD, "storeId": store_id}
