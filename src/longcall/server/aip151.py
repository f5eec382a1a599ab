"""Google AIP-151 long-running operations over HTTP/JSON for the server's tools (S8, P3).

Owns: the proto's HTTP bindings under ``/v1`` (``google.longrunning.Operations``:
``GET /v1/operations/{id}``, ``GET /v1/operations``, ``POST /v1/operations/{id}:cancel``,
``DELETE /v1/operations/{id}``, plus the ``:wait`` extension), the start method
``POST /v1/tools/{tool}:start`` with an AIP-155 ``requestId``, the tool listing
``GET /v1/tools`` (an extension the client adapter binds with), the rendering of a
stored task as an ``Operation`` in proto3 JSON, and the AIP-193 error envelope.

Must not: keep a store or run tools of its own. An operation *is* a task of the
server's durable store (protocol ``aip-151``), created, run, cancelled and recovered
by the same :class:`~longcall.server.tasks.TaskManager` as the MCP tasks (S2, S4, S5).

Wire decisions (see docs/design/aip151-and-apify.md):

- ``metadata`` and ``response`` are ``google.protobuf.Struct`` ``Any`` values: the
  portable choice every client can decode (reference §B.6.5). ``response.value`` is the
  tool's structured content, or ``{"content": [...]}`` when it has none.
- A tool error (``isError``) ends the operation with ``error.code = 2`` (UNKNOWN) and a
  ``google.rpc.ErrorInfo`` detail of reason ``TOOL_ERROR``; a JSON-RPC error raised by
  the tool ends with the mapped code (-32602 → 3, otherwise 13) and reason
  ``PROTOCOL_ERROR``; a cancelled task ends with ``error.code = 1`` (P3).
- The same ``requestId`` with the same tool and arguments returns the same operation;
  with anything else it is ``409 ALREADY_EXISTS`` naming the conflict (AIP-155).
- ``DeleteOperation`` marks the task deleted in the store (every server process sharing
  it then answers NOT_FOUND): it never cancels, and the row stays for submission-key
  proofs.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import re
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from longcall.server.app import LongcallServer
from longcall.server.errors import (
    ApiError,
    InvalidParams,
    Refused,
    StoreUnavailable,
    TaskNotFound,
    TooManyOpenTasks,
)
from longcall.server.front import (
    REASON_STORE_UNAVAILABLE,
    STORE_RETRY_AFTER_S,
    admit,
    parse_json,
    read_body,
    require_json_body,
)
from longcall.server.model import Principal, ProtocolVersion, TaskRecord, TaskStatus

logger = logging.getLogger(__name__)

PREFIX = "/v1"
COLLECTION = "operations"
PROTOCOL = ProtocolVersion.AIP151
STRUCT_TYPE = "type.googleapis.com/google.protobuf.Struct"
ERROR_INFO_TYPE = "type.googleapis.com/google.rpc.ErrorInfo"
ERROR_DOMAIN = "longcall.dev"
REQUEST_ID_KEY_PREFIX = "aip155/"
"""Namespace of AIP-155 request ids among the store's submission keys (S3)."""
PAGE_SIZE_DEFAULT = 50
PAGE_SIZE_MAX = 500
WAIT_TIMEOUT_MAX_S = 30.0
"""The ``:wait`` extension is bounded (WaitOperation is best effort, B.3)."""
REQUEST_ID_MAX_CHARS = 64

CANCELLED = 1
UNKNOWN = 2
INVALID_ARGUMENT = 3
NOT_FOUND = 5
ALREADY_EXISTS = 6
INTERNAL = 13
UNAUTHENTICATED = 16

PERMISSION_DENIED = 7
RESOURCE_EXHAUSTED = 8
UNAVAILABLE = 14

HTTP_OF_CODE = {
    INVALID_ARGUMENT: (400, "INVALID_ARGUMENT"),
    NOT_FOUND: (404, "NOT_FOUND"),
    ALREADY_EXISTS: (409, "ALREADY_EXISTS"),
    PERMISSION_DENIED: (403, "PERMISSION_DENIED"),
    RESOURCE_EXHAUSTED: (429, "RESOURCE_EXHAUSTED"),
    UNAUTHENTICATED: (401, "UNAUTHENTICATED"),
    12: (501, "UNIMPLEMENTED"),
    INTERNAL: (500, "INTERNAL"),
    UNAVAILABLE: (503, "UNAVAILABLE"),
}
CODE_OF_HTTP = {401: UNAUTHENTICATED, 403: PERMISSION_DENIED, 429: RESOURCE_EXHAUSTED}
JSONRPC_TO_RPC_CODE = {-32602: INVALID_ARGUMENT, -32601: 12}
"""A JSON-RPC error raised inside a tool, as a ``google.rpc.Code`` (else INTERNAL)."""

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)s$")


def api_error_of_refusal(refusal: Refused) -> ApiError:
    """A refusal of the front door in this facade's envelope (same HTTP status)."""
    code = CODE_OF_HTTP.get(refusal.status, INVALID_ARGUMENT)
    return ApiError(code, refusal.message, http_status=refusal.status, headers=refusal.headers)


def api_error_response(error: ApiError) -> JSONResponse:
    """The error in the AIP-193 envelope, with the matching HTTP status."""
    http_status, status = HTTP_OF_CODE.get(error.code, (500, "INTERNAL"))
    if error.http_status is not None:
        http_status = error.http_status
    details: list[dict[str, Any]] = []
    if error.reason is not None:
        details.append({"@type": ERROR_INFO_TYPE, "reason": error.reason, "domain": ERROR_DOMAIN})
    body = {
        "error": {
            "code": http_status,
            "message": error.message,
            "status": status,
            "details": details,
        }
    }
    return JSONResponse(body, status_code=http_status, headers=error.headers)


def operation_name(task_id: str) -> str:
    return f"{COLLECTION}/{task_id}"


def timestamp(seconds: float) -> str:
    """RFC 3339 UTC with milliseconds (proto3 JSON ``Timestamp``)."""
    moment = datetime.fromtimestamp(seconds, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def struct_any(value: Mapping[str, Any]) -> dict[str, Any]:
    return {"@type": STRUCT_TYPE, "value": dict(value)}


def render_operation(record: TaskRecord) -> dict[str, Any]:
    """A stored task as a ``google.longrunning.Operation`` in proto3 JSON (strict fields)."""
    metadata: dict[str, Any] = {
        "tool": record.tool_name,
        "state": record.status.value.upper(),
        "createTime": timestamp(record.created_at),
        "updateTime": timestamp(record.last_updated_at),
        # A polling hint (a longcall convention inside the metadata Struct; X3).
        "pollIntervalMs": record.poll_interval_ms,
    }
    if record.status_message:
        metadata["statusMessage"] = record.status_message
    operation: dict[str, Any] = {
        "name": operation_name(record.task_id),
        "metadata": struct_any(metadata),
        "done": record.status.is_terminal,
    }
    if record.status is TaskStatus.CANCELLED:
        operation["error"] = {
            "code": CANCELLED,
            "message": "Operation was cancelled.",
            "details": [],
        }
    elif record.status is TaskStatus.FAILED:
        operation["error"] = _protocol_error_status(record.error)
    elif record.status is TaskStatus.COMPLETED:
        result = record.result or {}
        if result.get("isError"):
            operation["error"] = {
                "code": UNKNOWN,
                "message": _first_text(result) or "the tool reported an error",
                "details": [_error_info("TOOL_ERROR")],
            }
        else:
            operation["response"] = struct_any(_response_value(result))
    return operation


def _response_value(result: Mapping[str, Any]) -> dict[str, Any]:
    structured = result.get("structuredContent")
    if isinstance(structured, Mapping):
        return dict(structured)
    return {"content": list(result.get("content") or [])}


def _protocol_error_status(error: Mapping[str, Any] | None) -> dict[str, Any]:
    error = error or {}
    jsonrpc_code = error.get("code")
    code = (
        JSONRPC_TO_RPC_CODE.get(jsonrpc_code, INTERNAL)
        if isinstance(jsonrpc_code, int)
        else INTERNAL
    )
    return {
        "code": code,
        "message": str(error.get("message") or "the operation failed"),
        "details": [_error_info("PROTOCOL_ERROR", {"jsonrpcCode": str(jsonrpc_code)})],
    }


def _error_info(reason: str, metadata: Mapping[str, str] | None = None) -> dict[str, Any]:
    info: dict[str, Any] = {"@type": ERROR_INFO_TYPE, "reason": reason, "domain": ERROR_DOMAIN}
    if metadata:
        info["metadata"] = dict(metadata)
    return info


def _first_text(result: Mapping[str, Any]) -> str | None:
    for block in result.get("content") or []:
        if isinstance(block, Mapping) and block.get("type") == "text":
            return str(block.get("text"))
    return None


class Aip151Facade:
    """The AIP-151 HTTP/JSON facade of one :class:`LongcallServer` (S8)."""

    def __init__(self, server: LongcallServer) -> None:
        self.server = server
        self.manager = server.manager
        self.registry = server.registry

    def routes(self) -> list[Route]:
        return [Route(PREFIX + "/{rest:path}", self.endpoint, methods=["GET", "POST", "DELETE"])]

    async def endpoint(self, request: Request) -> Response:
        """The front door's checks, then the route; every failure in the AIP-193 envelope."""
        try:
            admitted = await admit(request, self.server.options, self.server.authenticate)
            return await self._route(request, admitted.principal)
        except Refused as exc:
            self.server.metrics.observe_refused(exc.reason)
            return api_error_response(api_error_of_refusal(exc))
        except ApiError as exc:
            return api_error_response(exc)
        except StoreUnavailable as exc:
            self.server.metrics.observe_refused(REASON_STORE_UNAVAILABLE)
            retry = {"retry-after": str(STORE_RETRY_AFTER_S)}
            unavailable = ApiError(UNAVAILABLE, f"Task store unavailable: {exc}", headers=retry)
            return api_error_response(unavailable)
        except Exception:
            logger.exception("internal error on %s %s", request.method, request.url.path)
            return api_error_response(ApiError(INTERNAL, "Internal error"))

    async def _route(self, request: Request, principal: Principal) -> Response:
        rest: str = request.path_params["rest"]
        method = request.method
        if rest == "tools" and method == "GET":
            return JSONResponse({"tools": [self._tool_view(spec) for spec in self._tools()]})
        if rest.startswith("tools/") and rest.endswith(":start") and method == "POST":
            return await self._start(request, principal, rest[len("tools/") : -len(":start")])
        if rest == COLLECTION and method == "GET":
            return await self._list(request, principal)
        if rest.startswith(COLLECTION + "/"):
            tail = rest[len(COLLECTION) + 1 :]
            task_id, _, verb = tail.partition(":")
            if method == "GET" and not verb:
                self.server.metrics.observe_status_read(PROTOCOL.value)
                return JSONResponse(render_operation(await self._visible(principal, task_id)))
            if method == "DELETE" and not verb:
                record = await self._visible(principal, task_id)
                # DeleteOperation never cancels (B.3); the row stays for key proofs (S3).
                await self.manager.store.mark_deleted(record.task_id)
                return JSONResponse({})
            if method == "POST" and verb == "cancel":
                return await self._cancel(principal, task_id)
            if method == "POST" and verb == "wait":
                return await self._wait(request, principal, task_id)
        raise ApiError(NOT_FOUND, f"no method {method} /v1/{rest}")

    async def _json_body(self, request: Request) -> dict[str, Any]:
        """The capped, strictly parsed JSON object body (an empty body reads as ``{}``)."""
        options = self.server.options
        raw = await read_body(request, options)
        if not raw.strip():
            return {}
        require_json_body({"content-type": request.headers.get("content-type", "")})
        body = parse_json(raw, max_depth=options.max_json_depth)
        if not isinstance(body, dict):
            raise ApiError(INVALID_ARGUMENT, "the request body must be a JSON object")
        return body

    # ---- tools and start ----------------------------------------------------------------

    def _tools(self) -> list[Any]:
        return [spec for spec in self.registry if spec.task_support != "forbidden"]

    @staticmethod
    def _tool_view(spec: Any) -> dict[str, Any]:
        view: dict[str, Any] = {
            "name": spec.name,
            "description": spec.description,
            "inputSchema": spec.input_schema,
            "idempotent": spec.idempotent,
        }
        if spec.output_schema is not None:
            view["outputSchema"] = spec.output_schema
        return view

    async def _start(self, request: Request, principal: Principal, tool: str) -> Response:
        body = await self._json_body(request)
        spec = self.registry.get(tool)
        if spec is None or spec.task_support == "forbidden":
            raise ApiError(NOT_FOUND, f"tool {tool!r} cannot be started as an operation")
        arguments = body.get("arguments", {})
        if not isinstance(arguments, dict):
            raise ApiError(INVALID_ARGUMENT, "arguments must be an object")
        request_id = body.get("requestId", body.get("request_id"))
        key = None
        if request_id is not None:
            key = REQUEST_ID_KEY_PREFIX + _checked_request_id(request_id)
        try:
            created = await self.manager.create(
                principal=principal,
                spec=spec,
                arguments=arguments,
                protocol=PROTOCOL,
                submission_key=key,
                ttl_ms=spec.ttl_ms,
            )
        except TooManyOpenTasks as exc:
            raise ApiError(RESOURCE_EXHAUSTED, exc.message, "TOO_MANY_OPEN_OPERATIONS") from exc
        except InvalidParams as exc:
            if key is not None and "submission key" in exc.message:
                # AIP-155: a request id names one request; another body under it is refused.
                raise ApiError(
                    ALREADY_EXISTS,
                    f"requestId {request_id!r} was already used for a different request"
                    f" ({exc.message})",
                    "REQUEST_ID_REUSED",
                ) from exc
            raise ApiError(INVALID_ARGUMENT, exc.message, "INVALID_ARGUMENTS") from exc
        if created.record.is_expired(self.manager.clock()):
            raise ApiError(
                ALREADY_EXISTS,
                f"requestId {request_id!r} named an operation that has expired",
                "REQUEST_ID_EXPIRED",
            )
        return JSONResponse(render_operation(created.record))

    # ---- Operations service -----------------------------------------------------------

    async def _visible(self, principal: Principal, task_id: str) -> TaskRecord:
        if not task_id:
            raise ApiError(NOT_FOUND, f"operation {operation_name(task_id)!r} not found")
        try:
            return await self.manager.visible(principal, task_id, PROTOCOL)
        except TaskNotFound as exc:
            # S5: another principal's, expired and unknown operations all read alike.
            raise ApiError(NOT_FOUND, f"operation {operation_name(task_id)!r} not found") from exc

    async def _cancel(self, principal: Principal, task_id: str) -> Response:
        record = await self._visible(principal, task_id)
        if not record.status.is_terminal:
            # Best effort (B.4): the CAS to cancelled loses to a completion that came first.
            await self.manager.cancel(record)
        else:
            self.manager.metrics.observe_cancel(cancelled=False, seconds=0.0)
        return JSONResponse({})

    async def _wait(self, request: Request, principal: Principal, task_id: str) -> Response:
        body = await self._json_body(request)
        timeout_s = WAIT_TIMEOUT_MAX_S
        raw = body.get("timeout")
        if raw is not None:
            match = _DURATION.match(raw) if isinstance(raw, str) else None
            if match is None:
                raise ApiError(INVALID_ARGUMENT, 'timeout must be a Duration such as "30s"')
            timeout_s = min(WAIT_TIMEOUT_MAX_S, float(match.group(1)))
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                while True:
                    with self.manager.hub.watch(task_id) as changed:
                        record = await self._visible(principal, task_id)
                        if record.status.is_terminal:
                            break
                        await self.manager.wait_change(changed)
        return JSONResponse(render_operation(await self._visible(principal, task_id)))

    async def _list(self, request: Request, principal: Principal) -> Response:
        query = request.query_params
        page_size = _page_size(query.get("pageSize") or query.get("page_size"))
        token = query.get("pageToken") or query.get("page_token") or None
        done_filter, request_id = _parse_filter(query.get("filter", ""))
        after = await self._page_start(principal, token) if token else None
        if request_id is not None:
            # AIP-155 lookup without creating: the caller's operation under that id, if any.
            task_id = await self.manager.store.lookup_submission(
                principal.subject, REQUEST_ID_KEY_PREFIX + request_id
            )
            record = None if task_id is None else await self.manager.store.get(task_id)
            rows = [] if record is None or record.protocol is not PROTOCOL else [record]
        else:
            rows = await self.manager.store.list_for_principal(
                principal.subject, PROTOCOL, after=after, limit=page_size
            )
        now = self.manager.clock()
        operations = [
            render_operation(row)
            for row in rows
            if not row.deleted
            and not row.is_expired(now)
            and (done_filter is None or row.status.is_terminal is done_filter)
        ]
        body: dict[str, Any] = {"operations": operations}
        if request_id is None and len(rows) == page_size:
            body["nextPageToken"] = _encode_token(rows[-1].task_id)
        return JSONResponse(body)

    async def _page_start(self, principal: Principal, token: str) -> str:
        """The task a page token continues after: only one of the caller's own operations.

        A token naming another principal's operation, or nothing at all, is refused like
        garbage: it must not reveal that the operation exists or where it sorts (S5).
        """
        task_id = _decode_token(token)
        record = await self.manager.store.get(task_id)
        owned = record is not None and record.principal == principal.subject
        if not owned or record is None or record.protocol is not PROTOCOL:
            raise ApiError(INVALID_ARGUMENT, "invalid pageToken")
        return task_id


def mount_aip151(server: LongcallServer) -> Aip151Facade:
    """Serve ``server``'s task tools as AIP-151 operations under ``/v1`` (S8)."""
    facade = Aip151Facade(server)
    server.routes.extend(facade.routes())
    return facade


def _checked_request_id(value: Any) -> str:
    if not isinstance(value, str) or not value or len(value) > REQUEST_ID_MAX_CHARS:
        raise ApiError(INVALID_ARGUMENT, "requestId must be a UUID string (AIP-155)")
    try:
        return str(uuid.UUID(value))
    except ValueError as exc:
        raise ApiError(INVALID_ARGUMENT, "requestId must be a UUID string (AIP-155)") from exc


_PAGE_SIZE = re.compile(r"[0-9]{1,9}")
"""ASCII digits only (``str.isdigit`` admits ``²``), short enough for ``int`` to be cheap."""


def _page_size(raw: str | None) -> int:
    if raw is None or raw == "":
        return PAGE_SIZE_DEFAULT
    if not _PAGE_SIZE.fullmatch(raw):
        raise ApiError(
            INVALID_ARGUMENT, f"pageSize must be an integer from 0 to {PAGE_SIZE_MAX} (0: default)"
        )
    size = int(raw)
    return PAGE_SIZE_DEFAULT if size == 0 else min(size, PAGE_SIZE_MAX)


_REQUEST_ID_FILTER = re.compile(r'^request_?id\s*=\s*"([^"]+)"$', re.IGNORECASE)


def _parse_filter(raw: str) -> tuple[bool | None, str | None]:
    """The filters supported (an AIP-160 subset): ``done=true|false`` and
    ``requestId="<uuid>"`` (the lookup by AIP-155 request id, an extension)."""
    text = raw.strip()
    if not text:
        return None, None
    match = _REQUEST_ID_FILTER.match(text)
    if match is not None:
        return None, _checked_request_id(match.group(1))
    compact = text.replace(" ", "").lower()
    if compact in ("done=true", "done=false"):
        return compact.endswith("true"), None
    raise ApiError(
        INVALID_ARGUMENT, f'unsupported filter {raw!r} (done=true|false or requestId="…")'
    )


def _encode_token(task_id: str) -> str:
    return base64.urlsafe_b64encode(task_id.encode()).decode().rstrip("=")


def _decode_token(token: str) -> str:
    try:
        return base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    except ValueError as exc:  # binascii.Error and UnicodeDecodeError are ValueErrors
        raise ApiError(INVALID_ARGUMENT, "invalid pageToken") from exc
