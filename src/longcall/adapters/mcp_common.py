"""What the MCP adapters truly share: JSON-RPC over Streamable HTTP, wire failures,
the tool descriptor digest and result verification (SPEC X6, X9, X11).

Owns: :class:`RpcSession` (one POST per JSON-RPC message, ``application/json`` or
``text/event-stream`` replies, never raising for a remote failure), the HTTP-status
half of the failure classification, the two request dialects (2026-07-28 envelope
and routing headers; 2025-11-25 plain), the tool descriptor digest and binding, the X6
checks every result passes before it becomes a ``ResultFetched``, and the readings
both task adapters make alike: request and create failures classified by the caller's
JSON-RPC table (X2, X9), the not-found answer to ``tasks/*`` (X7), the submission-key
lookup (X2), the cancelled-status evidence and the status-message progress (X11);
and the push half of X3/S7: a long-lived event stream (:meth:`RpcSession.open_stream`)
kept open with backoff by :func:`keep_listening`, whose status notifications only
report "this task changed" (:func:`push_hook`).

Must not: decide protocol semantics (which wire status means what event, what a cancel
answer proves: that is each adapter's, as are the JSON-RPC tables), import
``longcall.ledger``/``runtime``/``server``, or patch the ``mcp`` SDK. Why httpx and
not the SDK's Streamable HTTP client: see docs/design/client-adapters.md (X2 needs to
know whether a failed request can have been processed; the SDK transport folds
refused connections, resets, 429 with ``Retry-After`` and 5xx into one exception, and
cannot put per-request ``_meta`` consent or ``Mcp-Name`` on ``tasks/*``).
"""

from __future__ import annotations

import dataclasses
import email.utils
import itertools
import json
import math
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import anyio
import httpx
import jsonschema

from longcall.adapters.base import (
    AdapterError,
    Outcome,
    ProgressSink,
    PushSink,
    ToolBinding,
    UnknownTool,
)
from longcall.core.events import (
    CancellationObserved,
    OperationNotFound,
    RequestFailed,
    ResultFetched,
    ResultFetchFailed,
    SubmissionFound,
    SubmissionNeverCreated,
    SubmitOutcomeLost,
    SubmitRejected,
)
from longcall.core.keys import canonical_json, digest_bytes, digest_json
from longcall.core.record import OperationRecord, ResultKind, ServerStatus
from longcall.core.retry import (
    FailureKind,
    RequestKind,
    RetryPolicy,
    backoff_delay_s,
    is_retryable,
)

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
        self.connect_timeout_s = connect_timeout_s
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

    async def open_stream(
        self,
        method: str | None,
        params: Mapping[str, Any] | None,
        *,
        headers: Mapping[str, str] = {},
        on_message: MessageHook,
        on_open: Callable[[], None],
    ) -> RpcAnswer | WireFailure:
        """Hold one push stream open: a POSTed request whose answer is an event stream
        (``method``), or the standalone GET stream (``method`` None). Every notification
        goes to ``on_message``; ``on_open`` runs once the server accepted the stream.
        Returns the request's final answer (the server ended the stream gracefully) or
        the failure that broke it. No read timeout: an idle stream is not a dead one."""
        timeout = httpx.Timeout(None, connect=self.connect_timeout_s)
        request_id = 0  # the GET stream answers no request of ours
        content: str | None = None
        if method is not None:
            request_id = self.next_id()
            body: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
            if params is not None:
                body["params"] = dict(params)
            content = json.dumps(body, separators=(",", ":"))
        accept = "text/event-stream" if method is None else "application/json, text/event-stream"
        try:
            async with self.http.stream(
                "GET" if method is None else "POST",
                self.url,
                content=content,
                headers=self._headers(headers, accept),
                timeout=timeout,
            ) as reply:
                status = reply.status_code
                if not reply.headers.get("content-type", "").startswith("text/event-stream"):
                    raw = await reply.aread()
                    if status >= 400 and method is None:
                        return _status_failure(status, reply.headers, raw)
                    return _json_answer(raw, request_id, status, reply.headers)
                on_open()
                return await _read_event_stream(reply, request_id, on_message, anyio.CancelScope())
        except httpx.HTTPError as exc:
            return failure_of_exception(exc)

    async def aclose(self) -> None:
        if self._owns_http:
            await self.http.aclose()


PUSH_RETRY = RetryPolicy(base_s=0.5, cap_s=30.0)
"""Reconnect backoff of a broken push stream (X3, X9): full jitter, capped."""

StreamOpener = Callable[[Callable[[], None]], Awaitable[RpcAnswer | WireFailure]]
"""Opens one push stream, calling its argument once the server accepted it."""


async def keep_listening(
    open_once: StreamOpener,
    *,
    retry: RetryPolicy = PUSH_RETRY,
    jitter: Callable[[], float] = random.random,
) -> None:
    """Reopen a push stream with backoff whenever it breaks (X3). Returns when the
    server ends it gracefully or refuses it for good (a JSON-RPC error, a 4xx): from
    then on polling alone carries the operations, as it always could."""
    attempt = 0
    while True:
        opened = False

        def note_open() -> None:
            nonlocal opened
            opened = True

        outcome = await open_once(note_open)
        if isinstance(outcome, RpcAnswer) or not is_retryable(outcome.kind):
            return
        attempt = 1 if opened else attempt + 1
        await anyio.sleep(backoff_delay_s(retry, attempt, jitter()))


def push_hook(method: str, on_change: PushSink) -> MessageHook:
    """Report each ``method`` notification as (task id, wire status); never stops the
    stream, and never reads more into it than "this task changed" (X3)."""

    def hook(message: dict[str, Any]) -> bool:
        if message.get("method") != method:
            return False
        params = message.get("params")
        if not isinstance(params, Mapping):
            return False
        task_id, status = params.get("taskId"), params.get("status")
        if isinstance(task_id, str) and task_id:
            on_change(task_id, status if isinstance(status, str) else None)
        return False

    return hook


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


FailureDescriber = Callable[[RpcAnswer | WireFailure], str]
"""How an adapter words a failed ``tools/list`` in its ``AdapterError``."""


async def listed_tool(
    session: RpcSession,
    dialect: Dialect,
    tool_name: str,
    *,
    consent: bool,
    describe: FailureDescriber,
) -> dict[str, Any]:
    """The descriptor of ``tool_name`` as the server lists it (X1).

    Raises :class:`AdapterError` when ``tools/list`` fails and :class:`UnknownTool`
    when the server does not list the tool.
    """
    listed = await list_tools(session, dialect, consent=consent)
    if not isinstance(listed, list):
        raise AdapterError(f"tools/list failed at {session.url}: {describe(listed)}")
    tool = find_tool(listed, tool_name)
    if tool is None:
        raise UnknownTool(f"{session.url} does not list tool {tool_name!r}")
    return tool


async def binding_or_none(
    bindings: Mapping[str, ToolBinding],
    bind: Callable[[str], Awaitable[ToolBinding]],
    tool_name: str,
) -> ToolBinding | None:
    """The tool's binding from ``bindings``, made by ``bind`` on first use; None when the
    tool cannot be described (the result is then verified without an output schema)."""
    if tool_name not in bindings:
        try:
            await bind(tool_name)
        except AdapterError:
            return None
    return bindings.get(tool_name)


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


# --- what both task adapters read alike (X2, X5, X7, X9, X11) ---------------------------
# Each function takes the caller's own JSON-RPC table where a code must be classified:
# the tables are per version (X9); only the reading around them is shared.


def jsonrpc_failure(failures: Mapping[int, FailureKind], code: Any) -> FailureKind:
    """A JSON-RPC error code as a failure kind by ``failures``; an unknown or missing
    code is not retried (BAD_REQUEST)."""
    if not isinstance(code, int):
        return FailureKind.BAD_REQUEST
    return failures.get(code, FailureKind.BAD_REQUEST)


def error_detail(error: Mapping[str, Any]) -> str:
    """How a JSON-RPC error reads in an event's detail or reason."""
    return f"JSON-RPC {error.get('code')}: {error.get('message')}"


def failure_detail(failure: RpcAnswer | WireFailure) -> str:
    """A failed request in words: the wire failure's detail or the JSON-RPC code and
    message."""
    if isinstance(failure, WireFailure):
        return failure.detail
    return error_detail(failure.error or {})


def raw_failure_detail(failure: RpcAnswer | WireFailure) -> str:
    """A failed request in words: the wire failure's detail or the whole JSON-RPC error
    object as received (how the 2025-11-25 and sync adapters word a failed listing)."""
    if isinstance(failure, WireFailure):
        return failure.detail
    return str(failure.error)


def request_failed(
    request: RequestKind, failure: WireFailure | RpcAnswer, failures: Mapping[int, FailureKind]
) -> Outcome:
    """A request-level failure as ``RequestFailed`` (X9); a JSON-RPC error is classified
    by the caller's table ``failures``."""
    if isinstance(failure, WireFailure):
        return Outcome(
            event=RequestFailed(
                request=request,
                failure=failure.kind,
                retry_after_s=failure.retry_after_s,
                detail=failure.detail,
            )
        )
    error = failure.error or {}
    return Outcome(
        event=RequestFailed(
            request=request,
            failure=jsonrpc_failure(failures, error.get("code")),
            detail=error_detail(error),
        )
    )


def may_have_created(code: Any) -> bool:
    """An internal or implementation-defined server error may strike after the task was
    created, so a create answered with one is ambiguous (X2)."""
    return code == -32603 or (isinstance(code, int) and -32099 <= code <= -32000)


def submit_failure(
    failure: WireFailure | RpcAnswer,
    *,
    failures: Mapping[int, FailureKind],
    rejecting_codes: frozenset[int],
) -> Outcome:
    """X2: a failed create is lost (ambiguous), failed (proved unprocessed) or rejected
    (a JSON-RPC error in ``rejecting_codes`` is the outcome: kept as evidence)."""
    if isinstance(failure, WireFailure):
        if failure.processed_possible:
            return Outcome(event=SubmitOutcomeLost(reason=failure.detail))
        return request_failed(RequestKind.SUBMIT, failure, failures)
    error = failure.error or {}
    code = error.get("code")
    if code in rejecting_codes:
        payload = canonical_json(error_body(error))
        return Outcome(
            event=SubmitRejected(reason=error_detail(error), result_digest=digest_bytes(payload)),
            payload=payload,
        )
    if may_have_created(code):
        return Outcome(event=SubmitOutcomeLost(reason=error_detail(error)))
    return request_failed(RequestKind.SUBMIT, failure, failures)


def task_request_failed(
    request: RequestKind, failure: WireFailure | RpcAnswer, failures: Mapping[int, FailureKind]
) -> Outcome:
    """A failed ``tasks/*`` request. -32602 says the task is unknown, expired or another
    principal's (all answered alike, X7) in both versions; any other failure is the
    request's own (X9)."""
    if isinstance(failure, RpcAnswer) and (failure.error or {}).get("code") == -32602:
        return Outcome(event=OperationNotFound(detail=str((failure.error or {}).get("message"))))
    return request_failed(request, failure, failures)


def no_task_id(request: RequestKind) -> Outcome:
    """A task request for a record that never learned its task id: nothing to ask."""
    return Outcome(
        event=RequestFailed(
            request=request, failure=FailureKind.BAD_REQUEST, detail="the record has no task id"
        )
    )


def submission_lookup_of(offered: Any) -> tuple[bool, str]:
    """Whether a server's capability section (``extensions`` in 2026-07-28,
    ``experimental`` in 2025-11-25) offers the submission-key lookup (X2, S3), and the
    method to call for it."""
    offered = offered if isinstance(offered, Mapping) else {}
    submission = offered.get(SUBMISSION_KEY_EXTENSION)
    if not isinstance(submission, Mapping):
        return False, DEFAULT_LOOKUP_METHOD
    method = submission.get("lookupMethod")
    return True, method if isinstance(method, str) else DEFAULT_LOOKUP_METHOD


def lookup_unsupported() -> Outcome:
    """A lookup asked of a server that offers none: a refusal never worth retrying."""
    return Outcome(
        event=RequestFailed(
            request=RequestKind.LOOKUP,
            failure=FailureKind.BAD_REQUEST,
            detail="the server offers no lookup by submission key",
        )
    )


def lookup_answer(answer: RpcAnswer | WireFailure, failures: Mapping[int, FailureKind]) -> Outcome:
    """X2: what a submission-key lookup proves: the task exists (its id), it was never
    created, or nothing (a failed or malformed answer)."""
    if isinstance(answer, WireFailure) or answer.error is not None:
        return request_failed(RequestKind.LOOKUP, answer, failures)
    result = answer.result or {}
    if result.get("found") is True and isinstance(result.get("taskId"), str):
        return Outcome(event=SubmissionFound(operation_id=result["taskId"]))
    if result.get("found") is False:
        return Outcome(event=SubmissionNeverCreated())
    return Outcome(
        event=RequestFailed(
            request=RequestKind.LOOKUP,
            failure=FailureKind.MALFORMED_RESPONSE,
            detail="lookup result has no boolean 'found'",
        )
    )


def ms_to_s(value: Any) -> float | None:
    """A positive wire duration in milliseconds as seconds; None when absent or invalid."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value) / 1000.0
    return None


def text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


STATUS_BODY_KEYS = ("taskId", "status", "statusMessage", "createdAt")
"""What a task status body keeps as evidence; volatile keys (timestamps of the last
update, poll intervals) stay out so the digest is stable."""


def cancellation_observed(task: Mapping[str, Any], server_status_raw: str) -> Outcome:
    """A cancelled task status as ``CancellationObserved``, its body kept as evidence."""
    payload = canonical_json({k: v for k, v in task.items() if k in STATUS_BODY_KEYS})
    return Outcome(
        event=CancellationObserved(
            result_digest=digest_bytes(payload), server_status_raw=server_status_raw
        ),
        payload=payload,
    )


def report_status_message(
    progress: ProgressSink | None, record: OperationRecord, message: str | None
) -> None:
    """X11: surface a status message the record has not seen yet."""
    if message is not None and message != record.status_message and progress:
        progress(record.call_node_id, None, message)


def with_progress(outcome: Outcome, seen: Sequence[float]) -> Outcome:
    """``outcome`` carrying the last progress the call reported, if any (X11)."""
    return Outcome(
        event=outcome.event, payload=outcome.payload, progress=seen[-1] if seen else None
    )


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
) -> ToolBinding:
    """The binding of one listed tool (X1): its digest, idempotency and output schema."""
    schema = tool.get("outputSchema")
    return ToolBinding(
        server=server,
        tool_name=tool_name,
        protocol=protocol,
        adapter_version=adapter_version,
        descriptor_digest=descriptor_digest(tool),
        task_support=task_support,  # type: ignore[arg-type]
        idempotent=tool_idempotent(tool),
        submission_lookup=submission_lookup,
        output_schema=schema if isinstance(schema, Mapping) else None,
        sync_timeout_s=sync_timeout_s,
    )
