"""The server package's error tree (one tree, translated to JSON-RPC at the boundary).

Owns: every exception type ``longcall.server`` raises or lets a tool raise, and the
JSON-RPC error codes they map to. Must not: import the HTTP layer or the store; the
translation to an HTTP response happens at the edge that answers (``longcall.server.app``,
the door in ``front``, the facades), never here.

The branch, under the one root (:mod:`longcall.errors`)::

    LongcallServerError
    ├── _WireErrorShape          code, message and data of a JSON-RPC error object
    │   ├── JsonRpcError            the request is answered with a JSON-RPC error
    │   │   ├── InvalidParams       -32602: malformed params, unknown tool or task
    │   │   │   └── TaskNotFound    unknown, expired or another principal's task (S5)
    │   │   ├── MethodNotFound      -32601: not at the request's protocol version
    │   │   └── TooManyOpenTasks    the caller holds as many open tasks as allowed (429)
    │   └── ToolProtocolError       a tool ends its task as a JSON-RPC error (failed)
    ├── StoreError               the task store failed or was asked the inconsistent
    │   ├── StoreUnavailable        busy, unreachable or gone: retry later (503)
    │   │   └── StoreLost           vanished or replaced under a running server
    │   ├── QuotaExceeded           a principal holds as many open tasks as allowed
    │   └── SubmissionKeyConflict   a submission key reused for another request (S3)
    ├── ToolError                a tool ends its task as a tool error (isError: true)
    ├── InputDeclined            the client declined or cancelled an input request
    ├── Refused                  refused at the door: HTTP status, JSON-RPC code, message
    ├── ApiError                 an AIP-151 facade error in the AIP-193 envelope
    └── ToolCallError            an Apify-style tool failure (isError: true)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from longcall.errors import LongcallError

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
HEADER_MISMATCH = -32020
MISSING_REQUIRED_CLIENT_CAPABILITY = -32021
UNSUPPORTED_PROTOCOL_VERSION = -32022
QUOTA_EXCEEDED = -32000
"""Implementation-defined (JSON-RPC's server-error range): too many open tasks (HTTP 429)."""
STORE_UNAVAILABLE = -32603


class LongcallServerError(LongcallError):
    """Root of every error raised by ``longcall.server`` (a branch of the one tree)."""


class _WireErrorShape(LongcallServerError):
    """``code``, ``message`` and ``data`` of a JSON-RPC error object, and its wire form."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def to_wire(self) -> dict[str, Any]:
        """The JSON-RPC ``error`` member."""
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


class JsonRpcError(_WireErrorShape):
    """A request that must be answered with a JSON-RPC error object."""


class InvalidParams(JsonRpcError):
    """-32602: malformed params, unknown tool, invalid arguments, unknown task (S5)."""

    def __init__(self, message: str, data: Any = None) -> None:
        super().__init__(INVALID_PARAMS, message, data)


class MethodNotFound(JsonRpcError):
    """-32601: the method does not exist at the request's protocol version."""

    def __init__(self, method: str, version: str) -> None:
        super().__init__(
            METHOD_NOT_FOUND,
            f"Method {method!r} is not available at protocol version {version!r}",
            data=method,
        )


class TooManyOpenTasks(JsonRpcError):
    """The caller already holds as many open tasks as the server allows (HTTP 429)."""

    def __init__(self, message: str, limit: int) -> None:
        super().__init__(QUOTA_EXCEEDED, message, {"limit": limit})


class TaskNotFound(InvalidParams):
    """Unknown, expired or another principal's task: all answered alike (S5)."""

    def __init__(self, task_id: str) -> None:
        super().__init__(f"Failed to retrieve task: task {task_id!r} not found")


class StoreError(LongcallServerError):
    """The task store failed or was asked for something inconsistent."""


class StoreUnavailable(StoreError):
    """The store is busy, unreachable or gone; the request may be retried later (HTTP 503)."""


class StoreLost(StoreUnavailable):
    """The store vanished or was replaced under a running server: every call fails closed."""


class QuotaExceeded(StoreError):
    """A principal already holds as many open tasks as the server allows."""


class SubmissionKeyConflict(StoreError):
    """A submission key reused with another tool or other arguments (S3)."""


class ToolError(LongcallServerError):
    """Raised by a tool body: the call ends as a tool error (``isError: true``)."""


class ToolProtocolError(_WireErrorShape):
    """Raised by a tool body: the call ends as a JSON-RPC error (task ``failed``).

    Not a :class:`JsonRpcError`: it is the task's stored outcome, never the answer to
    the request being served.
    """


class InputDeclined(LongcallServerError):
    """The client declined or cancelled an input request (the tool decides what follows)."""


# --- the door and the facades (their wire forms live beside them) ------------------------------

REFUSAL_REASONS = {
    401: "unauthorized",
    403: "forbidden_origin",
    404: "unknown_session",
    406: "not_acceptable",
    408: "body_timeout",
    413: "oversized",
    415: "unsupported_media_type",
}
"""A refusal's reason by HTTP status (a 400 is ``bad_json`` or ``invalid_request``)."""


class Refused(LongcallServerError):
    """A request refused at the door: an HTTP status, a JSON-RPC code and a message."""

    def __init__(
        self,
        status: int,
        code: int,
        message: str,
        *,
        headers: Mapping[str, str] | None = None,
        request_id: str | int | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = dict(headers or {})
        self.request_id = request_id

    @property
    def reason(self) -> str:
        """What the door refused, as a short label (the metrics' ``reason``)."""
        if self.status == 400:
            return "bad_json" if self.code == PARSE_ERROR else "invalid_request"
        return REFUSAL_REASONS.get(self.status, f"http_{self.status}")


class ApiError(LongcallServerError):
    """An error answered in the AIP-193 envelope with the matching HTTP status."""

    def __init__(
        self,
        code: int,
        message: str,
        reason: str | None = None,
        *,
        http_status: int | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason
        self.http_status = http_status
        self.headers = dict(headers or {})


class ToolCallError(LongcallServerError):
    """An Apify-style tool-side failure answered as a tool result with ``isError: true``."""
