"""What the MCP adapters truly share: JSON-RPC over Streamable HTTP, wire failures,
the tool descriptor digest and result verification (SPEC X6, X9, X11).

Owns: :class:`RpcSession` (one POST per JSON-RPC message, ``application/json`` or
``text/event-stream`` replies, never raising for a remote failure), the HTTP-status
half of the failure classification, the two request dialects (2026-07-28 envelope
and routing headers; 2025-11-25 plain), the tool descriptor digest, and the X6
checks every result passes before it becomes a ``ResultFetched``.

Must not: decide protocol semantics (which wire status means what event: that is each
adapter's table), import ``longcall.ledger``/``runtime``/``server``, or patch the
``mcp`` SDK. Why httpx and not the SDK's Streamable HTTP client: see
docs/design/client-adapters.md (X2 needs to know whether a failed request can have
been processed; the SDK transport folds refused connections, resets, 429 with
``Retry-After`` and 5xx into one exception, and cannot put per-request ``_meta``
consent or ``Mcp-Name`` on ``tasks/*``).
"""

from __future__ import annotations

import dataclasses
import email.utils
import itertools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import anyio
import httpx
import jsonschema

from longcall.adapters.base import Outcome, ProgressSink
from longcall.core.events import RequestFailed, ResultFetched, ResultFetchFailed
from longcall.core.keys import canonical_json, digest_bytes, digest_json
from longcall.core.record import ResultKind, ServerStatus
from longcall.core.retry import FailureKind, RequestKind

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
SUBMISSION_KEY_EXTENSION = "dev.longcall/submissionKey"
"""The project's submission-key extension (S3): its id is also the request ``_meta`` key."""
DEFAULT_LOOKUP_METHOD = "longcall/tasks/lookup"
RELATED_TASK_META_KEY = "io.modelcontextprotocol/related-task"
PROTOCOL_VERSION_META_KEY = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES_META_KEY = "io.modelcontextprotocol/clientCapabilities"
CLIENT_INFO_META_KEY = "io.modelcontextprotocol/clientInfo"
SYNC_TIMEOUT_META_KEY = "dev.longcall/syncTimeoutS"
"""A tool may declare its synchronous limit in its descriptor ``_meta`` (X1, X10)."""

DEFAULT_REQUEST_TIMEOUT_S = 15.0
DEFAULT_CONNECT_TIMEOUT_S = 5.0
CLIENT_INFO = {"name": "longcall", "version": "0"}


# --- failures (X9) -----------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class WireFailure:
    """A request that produced no JSON-RPC answer we can use."""

    kind: FailureKind
    detail: str
    processed_possible: bool
    """False only when the failure proves the server did not process the request
    (refused connection, 401/403, 429): the X2 line between RequestFailed and
    SubmitOutcomeLost for a create."""
    retry_after_s: float | None = None
    http_status: int | None = None


HTTP_STATUS_FAILURES: Mapping[int, tuple[FailureKind, bool]] = {
    # status -> (kind, processed_possible). 429 proves non-processing; a 5xx does not.
    401: (FailureKind.UNAUTHORIZED, False),
    403: (FailureKind.FORBIDDEN, False),
    408: (FailureKind.TIMEOUT, True),
    429: (FailureKind.RATE_LIMITED, False),
    503: (FailureKind.UNAVAILABLE, True),
}


def http_status_failure(status: int) -> tuple[FailureKind, bool]:
    """The failure kind of an HTTP status that carried no JSON-RPC answer (X9)."""
    if status in HTTP_STATUS_FAILURES:
        return HTTP_STATUS_FAILURES[status]
    if status >= 500:
        return FailureKind.SERVER_ERROR, True
    return FailureKind.BAD_REQUEST, False


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """``Retry-After`` as seconds (delta-seconds or an HTTP date), None if absent/garbled."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - (now or datetime.now(UTC))).total_seconds()
    if math.isnan(seconds) or math.isinf(seconds):
        return None
    return max(0.0, seconds)


def failure_of_exception(exc: BaseException) -> WireFailure:
    """Translate an httpx exception once, at the boundary (DESIGN.md)."""
    name = type(exc).__name__
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        return WireFailure(
            kind=FailureKind.CONNECT_FAILED, detail=f"{name}: {exc}", processed_possible=False
        )
    if isinstance(exc, httpx.PoolTimeout):
        return WireFailure(
            kind=FailureKind.TIMEOUT, detail=f"{name}: {exc}", processed_possible=False
        )
    if isinstance(exc, httpx.TimeoutException):
        return WireFailure(
            kind=FailureKind.TIMEOUT, detail=f"{name}: {exc}", processed_possible=True
        )
    return WireFailure(kind=FailureKind.TRANSPORT, detail=f"{name}: {exc}", processed_possible=True)


# --- the JSON-RPC session ------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RpcAnswer:
    """A JSON-RPC answer to our request: exactly one of ``result`` / ``error`` is set,
    unless ``stopped`` (the caller ended an event stream before the answer came)."""

    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    http_status: int = 200
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict)
    stopped: bool = False


MessageHook = Callable[[dict[str, Any]], bool]
"""Called with every notification or server request seen on an event stream; returning
True ends the stream early (the answer is then ``stopped``)."""


class Dialect:
    """How one protocol version frames a request: ``_meta`` and headers."""

    version: str = LEGACY

    def meta(self, method: str, *, consent: bool) -> dict[str, Any]:
        return {}

    def headers(self, method: str, name: str | None) -> dict[str, str]:
        return {"mcp-protocol-version": self.version}


class ModernDialect(Dialect):
    """2026-07-28: the per-request envelope, ``Mcp-Method`` always, ``Mcp-Name`` where
    required (tools/call: the tool; tasks/*: the task id; SEP-2663)."""

    version = MODERN

    def meta(self, method: str, *, consent: bool) -> dict[str, Any]:
        # X4: form elicitation is answered through the approval gate, so it is declared
        # (a server must not send input requests the client did not declare, SEP-2322).
        capabilities: dict[str, Any] = {"elicitation": {"form": {}}}
        if consent:
            # P1: consent is per request, on every request that may return a task and on
            # every tasks/* request ("Servers MUST NOT infer capabilities").
            capabilities["extensions"] = {TASKS_EXTENSION: {}}
        return {
            PROTOCOL_VERSION_META_KEY: MODERN,
            CLIENT_CAPABILITIES_META_KEY: capabilities,
            CLIENT_INFO_META_KEY: dict(CLIENT_INFO),
        }

    def headers(self, method: str, name: str | None) -> dict[str, str]:
        headers = {"mcp-protocol-version": MODERN, "mcp-method": method}
        if name is not None:
            headers["mcp-name"] = header_value(name)
        return headers


def header_value(value: str) -> str:
    """A header-safe value: as is when printable ASCII, else the SEP-2663 base64 sentinel."""
    if value.isascii() and value.isprintable() and value == value.strip():
        return value
    import base64

    return "=?base64?" + base64.b64encode(value.encode()).decode() + "?="


class RpcSession:
    """JSON-RPC over one Streamable HTTP endpoint. Never raises for a remote failure.

    ``session_id`` is kept when a (2025-11-25) server issues one.
    """

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self.url = url
        self.token = token
        self.timeout_s = timeout_s
        self._owns_http = http is None
        self.http = http or httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_s, connect=connect_timeout_s)
        )
        self.session_id: str | None = None
        self._ids = itertools.count(1)

    def next_id(self) -> int:
        return next(self._ids)

    def _headers(self, extra: Mapping[str, str], accept: str) -> dict[str, str]:
        headers = {"accept": accept, "content-type": "application/json"}
        if self.token is not None:
            headers["authorization"] = f"Bearer {self.token}"
        if self.session_id is not None:
            headers["mcp-session-id"] = self.session_id
        headers.update(extra)
        return headers

    async def request(
        self,
        method: str,
        params: Mapping[str, Any] | None,
        *,
        headers: Mapping[str, str] = {},
        timeout_s: float | None = None,
        on_message: MessageHook | None = None,
        accept: str = "application/json, text/event-stream",
    ) -> RpcAnswer | WireFailure:
        """Send one request and wait (bounded) for its answer."""
        request_id = self.next_id()
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            body["params"] = dict(params)
        limit_s = self.timeout_s if timeout_s is None else timeout_s
        outcome: RpcAnswer | WireFailure | None = None
        with anyio.move_on_after(limit_s) as scope:
            outcome = await self._exchange(body, headers, accept, on_message, scope)
        if outcome is None:
            return WireFailure(
                kind=FailureKind.TIMEOUT,
                detail=f"{method}: no answer within {limit_s:g} s",
                processed_possible=True,
            )
        return outcome

    async def post_message(
        self,
        message: Mapping[str, Any],
        *,
        headers: Mapping[str, str] = {},
    ) -> WireFailure | None:
        """POST a notification or a response to a server request; None when accepted."""
        try:
            with anyio.fail_after(self.timeout_s):
                reply = await self.http.post(
                    self.url,
                    content=json.dumps(message, separators=(",", ":")),
                    headers=self._headers(headers, "application/json, text/event-stream"),
                )
        except TimeoutError:
            return WireFailure(
                kind=FailureKind.TIMEOUT,
                detail="no answer to a posted message",
                processed_possible=True,
            )
        except httpx.HTTPError as exc:
            return failure_of_exception(exc)
        if reply.status_code in (200, 202, 204):
            return None
        return _status_failure(reply.status_code, reply.headers, reply.content)

    async def _exchange(
        self,
        body: dict[str, Any],
        extra: Mapping[str, str],
        accept: str,
        on_message: MessageHook | None,
        scope: anyio.CancelScope,
    ) -> RpcAnswer | WireFailure:
        try:
            async with self.http.stream(
                "POST",
                self.url,
                content=json.dumps(body, separators=(",", ":")),
                headers=self._headers(extra, accept),
            ) as reply:
                session_id = reply.headers.get("mcp-session-id")
                if session_id:
                    self.session_id = session_id
                content_type = reply.headers.get("content-type", "")
                status = reply.status_code
                if status == 429 or status >= 500 or status in (401, 403, 408):
                    raw = await reply.aread()
                    return _status_failure(status, reply.headers, raw)
                if content_type.startswith("text/event-stream"):
                    return await _read_event_stream(reply, body["id"], on_message, scope)
                raw = await reply.aread()
                return _json_answer(raw, body["id"], status, reply.headers)
        except httpx.HTTPError as exc:
            return failure_of_exception(exc)

    async def aclose(self) -> None:
        if self._owns_http:
            await self.http.aclose()


def _status_failure(status: int, headers: Mapping[str, str], raw: bytes) -> WireFailure:
    kind, processed_possible = http_status_failure(status)
    text = raw[:200].decode("utf-8", "replace")
    return WireFailure(
        kind=kind,
        detail=f"HTTP {status}: {text}",
        processed_possible=processed_possible,
        retry_after_s=parse_retry_after(headers.get("retry-after")),
        http_status=status,
    )


def _json_answer(
    raw: bytes, request_id: int, status: int, headers: Mapping[str, str]
) -> RpcAnswer | WireFailure:
    try:
        message = json.loads(raw)
    except ValueError:
        if status >= 400:
            return _status_failure(status, headers, raw)
        return WireFailure(
            kind=FailureKind.MALFORMED_RESPONSE,
            detail=f"HTTP {status}: body is not JSON ({len(raw)} bytes)",
            processed_possible=True,
            http_status=status,
        )
    answer = _answer_of(message, request_id, status, headers)
    if answer is None:
        if status >= 400:
            return _status_failure(status, headers, raw)
        return WireFailure(
            kind=FailureKind.MALFORMED_RESPONSE,
            detail=f"HTTP {status}: not a JSON-RPC answer to request {request_id}",
            processed_possible=True,
            http_status=status,
        )
    return answer


def _answer_of(
    message: Any, request_id: int, status: int, headers: Mapping[str, str]
) -> RpcAnswer | None:
    """The answer to ``request_id`` in ``message``, or None when it is not one."""
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0" or "method" in message:
        return None
    error = message.get("error")
    result = message.get("result")
    if isinstance(error, dict) and isinstance(error.get("code"), int):
        # An error may carry a null id when the server could not read ours.
        if message.get("id") not in (request_id, None):
            return None
        return RpcAnswer(error=error, http_status=status, headers=dict(headers))
    if message.get("id") != request_id or not isinstance(result, dict):
        return None
    return RpcAnswer(result=result, http_status=status, headers=dict(headers))


async def _read_event_stream(
    reply: httpx.Response,
    request_id: int,
    on_message: MessageHook | None,
    scope: anyio.CancelScope,
) -> RpcAnswer | WireFailure:
    data: list[str] = []
    async for line in reply.aiter_lines():
        if line.startswith("data:"):
            data.append(line[5:].lstrip(" "))
            continue
        if line or not data:
            continue
        payload, data = "\n".join(data), []
        try:
            message = json.loads(payload)
        except ValueError:
            return WireFailure(
                kind=FailureKind.MALFORMED_RESPONSE,
                detail="an event-stream message is not JSON",
                processed_possible=True,
            )
        answer = _answer_of(message, request_id, reply.status_code, reply.headers)
        if answer is not None:
            return answer
        is_request = isinstance(message, dict) and "method" in message
        if is_request and on_message is not None and on_message(message):
            return RpcAnswer(stopped=True, http_status=reply.status_code)
    return WireFailure(
        kind=FailureKind.TRANSPORT,
        detail="the event stream ended before the answer",
        processed_possible=True,
    )


def progress_hook(sink: ProgressSink | None, call_node_id: str, seen: list[float]) -> MessageHook:
    """Report ``notifications/progress`` through ``sink`` (X11); never stops the stream."""

    def hook(message: dict[str, Any]) -> bool:
        if message.get("method") != "notifications/progress":
            return False
        params = message.get("params") or {}
        progress, total = params.get("progress"), params.get("total")
        fraction: float | None = None
        if isinstance(progress, int | float) and isinstance(total, int | float) and total > 0:
            fraction = max(0.0, min(1.0, float(progress) / float(total)))
            seen.append(fraction)
        text = params.get("message")
        if sink is not None:
            sink(call_node_id, fraction, text if isinstance(text, str) else None)
        return False

    return hook


# --- descriptors -----------------------------------------------------------------------


def descriptor_digest(tool: Mapping[str, Any]) -> str:
    """Digest of the tool descriptor as listed (L1): a changed tool is another tool."""
    return digest_json(tool)


IDEMPOTENCY_ARGUMENTS = frozenset({"idempotencyKey", "idempotency_key", "requestId", "request_id"})


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


def declared_sync_timeout_s(tool: Mapping[str, Any]) -> float | None:
    """The tool's declared synchronous limit, if its descriptor ``_meta`` names one."""
    meta = tool.get("_meta")
    value = meta.get(SYNC_TIMEOUT_META_KEY) if isinstance(meta, Mapping) else None
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    return None


def error_body(error: Mapping[str, Any]) -> dict[str, Any]:
    """The canonical JSON-RPC error object we keep (code, message, data)."""
    body: dict[str, Any] = {"code": error.get("code"), "message": error.get("message")}
    if error.get("data") is not None:
        body["data"] = error.get("data")
    return body


# --- result verification (X6) ---------------------------------------------------------


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
        violation = schema_violation(result.get("structuredContent"), output_schema)
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


def fetch_failure(failure: WireFailure) -> Outcome:
    """A failed result fetch: a truncated or garbled body is ``ResultFetchFailed``
    (retryable, X6); any other failure is the request's (``RequestFailed``, X9)."""
    if failure.kind in (FailureKind.MALFORMED_RESPONSE, FailureKind.TRANSPORT):
        return Outcome(
            event=ResultFetchFailed(
                reason=f"result truncated or malformed: {failure.detail}",
                retryable=True,
                retry_after_s=failure.retry_after_s,
            )
        )
    return Outcome(
        event=RequestFailed(
            request=RequestKind.FETCH,
            failure=failure.kind,
            retry_after_s=failure.retry_after_s,
            detail=failure.detail,
        )
    )


def protocol_error_result(error: Any, *, operation_id: str | None = None) -> Outcome:
    """A JSON-RPC error as the operation's outcome: PROTOCOL_ERROR, status FAILED (X6)."""
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


def schema_violation(structured: Any, schema: Mapping[str, Any]) -> str | None:
    """Why ``structured`` breaks the tool's declared ``outputSchema``, or None."""
    if structured is None:
        return "the tool declares an outputSchema but the result has no structuredContent"
    try:
        validator_class = jsonschema.validators.validator_for(schema)
        validator_class.check_schema(schema)
        error = jsonschema.exceptions.best_match(validator_class(schema).iter_errors(structured))
    except jsonschema.exceptions.SchemaError as exc:
        return f"the tool's outputSchema is invalid: {exc.message}"
    if error is None:
        return None
    where = "/".join(str(part) for part in error.absolute_path) or "(root)"
    return f"structuredContent violates the outputSchema at {where}: {error.message}"


def first_text(items: Sequence[Any]) -> str:
    for item in items:
        if isinstance(item, Mapping) and isinstance(item.get("text"), str):
            return str(item["text"])
    return ""


# --- tools/list (X1) ----------------------------------------------------------------

PAGES_MAX = 50


async def list_tools(
    session: RpcSession, dialect: Dialect, *, consent: bool
) -> list[dict[str, Any]] | RpcAnswer | WireFailure:
    """Every tool the server lists (cursor pagination, bounded); an error as is."""
    tools: list[dict[str, Any]] = []
    cursor: str | None = None
    for _page in range(PAGES_MAX):
        params: dict[str, Any] = {}
        if cursor is not None:
            params["cursor"] = cursor
        meta = dialect.meta("tools/list", consent=consent)
        if meta:
            params["_meta"] = meta
        answer = await session.request(
            "tools/list", params or None, headers=dialect.headers("tools/list", None)
        )
        if isinstance(answer, WireFailure) or answer.result is None:
            return answer
        listed = answer.result.get("tools")
        if not isinstance(listed, list):
            return WireFailure(
                kind=FailureKind.MALFORMED_RESPONSE,
                detail="tools/list result has no tools list",
                processed_possible=True,
            )
        tools.extend(tool for tool in listed if isinstance(tool, dict))
        next_cursor = answer.result.get("nextCursor")
        if not isinstance(next_cursor, str) or not next_cursor:
            return tools
        cursor = next_cursor
    return tools


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
