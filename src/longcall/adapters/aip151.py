"""P3: Google AIP-151 long-running operations over HTTP/JSON, client side (+ AIP-155).

Owns: the wire ⇄ event mapping of ``google.longrunning.Operation`` at one server —
the start with a deterministic AIP-155 ``requestId`` (a UUID derived from the
submission key, X2), the lookup that proves an operation by that id, ``GetOperation``
polling, ``CancelOperation`` (a request only, X5), the strict check of every
``Operation`` we read, and :data:`HTTP_FAILURES`, this adapter's table from HTTP
statuses to core failure kinds (X9).

Must not: decide what happens next (the core does), keep state the ledger does not
(the start arguments it remembers are only a cache for the lookup), import
``longcall.ledger``/``runtime``/``server``, or raise for a remote failure.

Mapping (poll → event; fetch → outcome):

==========================================  =============================================
``done`` false (or absent)                  ``WorkingObserved`` (``statusMessage`` from
                                            the metadata Struct, when present)
``done`` + ``response``                     ``TerminalObserved(COMPLETED)``; fetch →
                                            ``ResultFetched(VALUE)``, payload = the
                                            ``response`` Any (``@type`` kept)
``done`` + ``error.code = 1``               ``CancellationObserved`` (digest of the Status)
``done`` + ``error`` with an ErrorInfo of   ``TerminalObserved(FAILED)``; fetch →
reason ``TOOL_ERROR``                       ``ResultFetched(FAILED, TOOL_ERROR)``
``done`` + any other ``error``              ``TerminalObserved(FAILED)``; fetch →
                                            ``ResultFetched(FAILED, PROTOCOL_ERROR)``,
                                            payload = the ``google.rpc.Status``
HTTP 404                                    ``OperationNotFound`` (X7: the core classifies)
not JSON, a field outside the proto, an     poll: ``RequestFailed(MALFORMED_RESPONSE)``;
``Any`` without ``@type``, ``done`` with    fetch: ``ResultFetchFailed(retryable=False)``
neither/both results, a ``name`` outside    — nothing is accepted; the core escalates to
``operations/`` or not ours                 reconciliation with the reason
==========================================  =============================================

Start: 200 + Operation → ``SubmitAcknowledged``; 400/404/409 → ``SubmitRejected`` (the
AIP-193 body is the outcome); 401/403/429 and a refused connection →
``RequestFailed`` (not processed); a 5xx, a timeout, a reset or an unreadable 200 →
``SubmitOutcomeLost`` (resolved by :meth:`Aip151Adapter.lookup`).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import jsonschema

from longcall.adapters.base import Adapter, AdapterError, Outcome, ToolBinding, UnknownTool
from longcall.core.events import (
    CancelAcknowledged,
    CancellationObserved,
    OperationNotFound,
    RequestFailed,
    ResultFetched,
    ResultFetchFailed,
    SubmissionFound,
    SubmissionNeverCreated,
    SubmitAcknowledged,
    SubmitOutcomeLost,
    SubmitRejected,
    TerminalObserved,
    WorkingObserved,
)
from longcall.core.keys import canonical_json, digest_bytes, digest_json
from longcall.core.record import OperationRecord, ResultKind, ServerStatus
from longcall.core.retry import FailureKind, RequestKind

PROTOCOL = "aip-151"
ADAPTER_VERSION = "1"
COLLECTION = "operations/"
OPERATION_FIELDS = frozenset({"name", "metadata", "done", "error", "response"})
STATUS_FIELDS = frozenset({"code", "message", "details"})
CANCELLED_CODE = 1
TOOL_ERROR_REASON = "TOOL_ERROR"
REQUEST_ID_NAMESPACE = uuid.UUID("6f1d6a52-4f0e-5b6c-9d43-2f1c0e0a8b15")
"""Fixed namespace: the AIP-155 ``requestId`` is ``uuid5(namespace, submission key)``."""
DEFAULT_TIMEOUT_S = 15.0
DEFAULT_CONNECT_TIMEOUT_S = 5.0

HTTP_FAILURES: Mapping[int, FailureKind] = {
    400: FailureKind.BAD_REQUEST,
    401: FailureKind.UNAUTHORIZED,
    403: FailureKind.FORBIDDEN,
    408: FailureKind.TIMEOUT,
    409: FailureKind.BAD_REQUEST,
    429: FailureKind.RATE_LIMITED,
    501: FailureKind.BAD_REQUEST,
    503: FailureKind.UNAVAILABLE,
}
"""X9: HTTP status → failure kind for this adapter; other 5xx are SERVER_ERROR."""

REJECTING_STATUSES = frozenset({400, 404})
"""A start answered with one of these created nothing: the AIP-193 error is the outcome.
409 (the requestId names another request, or an expired one) is not an outcome of this
call: it is a ``RequestFailed`` that the core hands to an operator."""


def request_id_for(submission_key: str) -> str:
    """The AIP-155 ``requestId`` of a submission key: the same key, the same UUID (X2)."""
    return str(uuid.uuid5(REQUEST_ID_NAMESPACE, submission_key))


def http_failure(status: int) -> FailureKind:
    if status in HTTP_FAILURES:
        return HTTP_FAILURES[status]
    return FailureKind.SERVER_ERROR if status >= 500 else FailureKind.BAD_REQUEST


class MalformedOperation(ValueError):
    """An ``Operation`` body that breaks the proto or names another operation."""


def check_operation(body: Any, *, expected_name: str | None = None) -> dict[str, Any]:
    """Validate one ``Operation`` in proto3 JSON strictly (the way Google's client parses).

    Raises :class:`MalformedOperation` with the reason; returns the body otherwise.
    """
    if not isinstance(body, dict):
        raise MalformedOperation("the Operation is not a JSON object")
    unknown = set(body) - OPERATION_FIELDS
    if unknown:
        raise MalformedOperation(f"the Operation has fields outside the proto: {sorted(unknown)}")
    name = body.get("name")
    if not isinstance(name, str) or not name.startswith(COLLECTION) or name == COLLECTION:
        raise MalformedOperation(f"the Operation name {name!r} is outside {COLLECTION}")
    if expected_name is not None and name != expected_name:
        raise MalformedOperation(f"asked for {expected_name!r}, the server answered {name!r}")
    done = body.get("done", False)
    if not isinstance(done, bool):
        raise MalformedOperation("done is not a boolean")
    for field in ("metadata", "response"):
        if field in body:
            _check_any(body[field], field)
    if "error" in body:
        _check_status(body["error"])
    has_result = ("error" in body) + ("response" in body)
    if done and has_result != 1:
        raise MalformedOperation("a done Operation must carry exactly one of error and response")
    if not done and has_result:
        raise MalformedOperation("an Operation that is not done carries a result")
    return body


def _check_any(value: Any, where: str) -> None:
    if not isinstance(value, dict):
        raise MalformedOperation(f"{where} is not an Any object")
    type_url = value.get("@type")
    if not isinstance(type_url, str) or "/" not in type_url:
        raise MalformedOperation(f"{where} is an Any without @type")


def _check_status(value: Any) -> None:
    if not isinstance(value, dict) or set(value) - STATUS_FIELDS:
        raise MalformedOperation("error is not a google.rpc.Status")
    if not isinstance(value.get("code", 0), int) or isinstance(value.get("code"), bool):
        raise MalformedOperation("error.code is not an integer")
    details = value.get("details", [])
    if not isinstance(details, list):
        raise MalformedOperation("error.details is not a list")
    for index, detail in enumerate(details):
        _check_any(detail, f"error.details[{index}]")


def is_tool_error(status: Mapping[str, Any]) -> bool:
    return any(
        isinstance(detail, Mapping) and detail.get("reason") == TOOL_ERROR_REASON
        for detail in status.get("details") or []
    )


def status_message_of(operation: Mapping[str, Any]) -> str | None:
    """The server's ``metadata.value.statusMessage``, if it sent one (X11)."""
    metadata = operation.get("metadata")
    value = metadata.get("value") if isinstance(metadata, Mapping) else None
    message = value.get("statusMessage") if isinstance(value, Mapping) else None
    return message if isinstance(message, str) else None


def poll_interval_hint_s(operation: Mapping[str, Any]) -> float | None:
    """The server's polling hint ``metadata.value.pollIntervalMs`` (a longcall convention)."""
    metadata = operation.get("metadata")
    value = metadata.get("value") if isinstance(metadata, Mapping) else None
    interval = value.get("pollIntervalMs") if isinstance(value, Mapping) else None
    if isinstance(interval, int | float) and not isinstance(interval, bool) and interval > 0:
        return float(interval) / 1000.0
    return None


def _error_detail(reply: httpx.Response) -> str:
    try:
        error = reply.json().get("error", {})
        message = error.get("message")
    except (ValueError, AttributeError):
        message = None
    return f"HTTP {reply.status_code}: {message or reply.text[:200]}"


def api_root(url: str) -> str:
    """``http://h:p/v1[/anything]`` → ``http://h:p`` (the bindings carry ``/v1``)."""
    parts = urlsplit(url)
    path = parts.path
    index = path.find("/v1")
    prefix = path[:index] if index >= 0 else path.rstrip("/")
    return urlunsplit((parts.scheme, parts.netloc, prefix, "", ""))


class Aip151Adapter(Adapter):
    """P3 at one server: ``url`` is the API root or any URL under its ``/v1``."""

    protocol = PROTOCOL
    version = ADAPTER_VERSION

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self.url = url
        self.root = api_root(url)
        headers = {"authorization": f"Bearer {token}"} if token else {}
        self._owns_http = http is None
        self.http = http or httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_s, connect=DEFAULT_CONNECT_TIMEOUT_S), headers=headers
        )
        self._bindings: dict[str, ToolBinding] = {}
        self._arguments: dict[str, dict[str, Any]] = {}
        """Start arguments by submission key: lets :meth:`lookup` resend the same start."""
        self._done: dict[str, dict[str, Any]] = {}
        """The done Operation seen by the last poll, by name (a cache; fetch re-reads)."""

    # --- negotiation (X1) --------------------------------------------------------------

    async def bind(self, tool_name: str) -> ToolBinding:
        try:
            reply = await self.http.get(f"{self.root}/v1/tools")
        except httpx.HTTPError as exc:
            raise AdapterError(f"GET /v1/tools at {self.root} failed: {exc!r}") from exc
        if reply.status_code != 200:
            raise AdapterError(f"GET /v1/tools at {self.root}: {_error_detail(reply)}")
        try:
            tools = reply.json().get("tools")
        except (ValueError, AttributeError) as exc:
            raise AdapterError(f"GET /v1/tools at {self.root}: not a tool list") from exc
        tool = next(
            (t for t in tools or [] if isinstance(t, dict) and t.get("name") == tool_name), None
        )
        if tool is None:
            raise UnknownTool(f"{self.root} does not offer tool {tool_name!r} as an operation")
        schema = tool.get("outputSchema")
        binding = ToolBinding(
            server=self.url,
            tool_name=tool_name,
            protocol=PROTOCOL,
            adapter_version=ADAPTER_VERSION,
            descriptor_digest=digest_json(tool),
            task_support="required",
            idempotent=tool.get("idempotent") is True,
            # X2: AIP-155 proves an operation by requestId, so a lost start is looked up.
            submission_lookup=True,
            output_schema=schema if isinstance(schema, Mapping) else None,
        )
        self._bindings[tool_name] = binding
        return binding

    # --- start and lookup (X2) -----------------------------------------------------------

    async def _start(
        self, record: OperationRecord, arguments: Mapping[str, Any]
    ) -> httpx.Response | BaseException:
        body = {"requestId": request_id_for(record.submission_key), "arguments": dict(arguments)}
        try:
            return await self.http.post(f"{self.root}/v1/tools/{record.tool_name}:start", json=body)
        except httpx.HTTPError as exc:
            return exc

    async def submit(self, record: OperationRecord, arguments: Mapping[str, Any]) -> Outcome:
        self._arguments[record.submission_key] = dict(arguments)
        reply = await self._start(record, arguments)
        if isinstance(reply, BaseException):
            if isinstance(reply, httpx.ConnectError | httpx.ConnectTimeout):
                return _failed(RequestKind.SUBMIT, FailureKind.CONNECT_FAILED, repr(reply))
            return Outcome(event=SubmitOutcomeLost(reason=f"start: {reply!r}"))
        if reply.status_code == 200:
            try:
                operation = check_operation(reply.json())
            except (ValueError, MalformedOperation) as exc:
                # The start may have created it: only the requestId can tell (X2).
                return Outcome(event=SubmitOutcomeLost(reason=f"start answered badly: {exc}"))
            return Outcome(
                event=SubmitAcknowledged(
                    operation_id=operation["name"],
                    server_status_raw=raw_status(operation),
                    status_message=status_message_of(operation),
                    poll_interval_s=poll_interval_hint_s(operation),
                )
            )
        if reply.status_code in REJECTING_STATUSES:
            payload = canonical_json(_error_body(reply))
            return Outcome(
                event=SubmitRejected(
                    reason=_error_detail(reply), result_digest=digest_bytes(payload)
                ),
                payload=payload,
            )
        if reply.status_code >= 500 or reply.status_code == 408:
            return Outcome(event=SubmitOutcomeLost(reason=_error_detail(reply)))
        return _failed(
            RequestKind.SUBMIT,
            http_failure(reply.status_code),
            _error_detail(reply),
            _retry_after(reply),
        )

    async def lookup(self, record: OperationRecord) -> Outcome:
        """Resend the start with the same ``requestId`` (AIP-155): the server answers the
        operation it already holds, or creates it now — either way exactly one exists."""
        arguments = self._arguments.get(record.submission_key)
        if arguments is None:
            return await self._lookup_by_listing(record)
        reply = await self._start(record, arguments)
        if isinstance(reply, BaseException):
            kind = (
                FailureKind.CONNECT_FAILED
                if isinstance(reply, httpx.ConnectError | httpx.ConnectTimeout)
                else FailureKind.TRANSPORT
            )
            return _failed(RequestKind.LOOKUP, kind, repr(reply))
        if reply.status_code != 200:
            return _failed(
                RequestKind.LOOKUP,
                http_failure(reply.status_code),
                _error_detail(reply),
                _retry_after(reply),
            )
        try:
            operation = check_operation(reply.json())
        except (ValueError, MalformedOperation) as exc:
            return _failed(RequestKind.LOOKUP, FailureKind.MALFORMED_RESPONSE, str(exc))
        return Outcome(
            event=SubmissionFound(
                operation_id=operation["name"],
                server_status_raw=raw_status(operation),
                poll_interval_s=poll_interval_hint_s(operation),
            )
        )

    async def _lookup_by_listing(self, record: OperationRecord) -> Outcome:
        # After a restart the arguments are not in memory: ask by requestId without
        # creating (the facade's requestId filter). Absent → proven never created.
        request_id = request_id_for(record.submission_key)
        try:
            reply = await self.http.get(
                f"{self.root}/v1/operations", params={"filter": f'requestId="{request_id}"'}
            )
        except httpx.HTTPError as exc:
            return _failed(RequestKind.LOOKUP, FailureKind.TRANSPORT, repr(exc))
        if reply.status_code != 200:
            return _failed(
                RequestKind.LOOKUP, http_failure(reply.status_code), _error_detail(reply)
            )
        try:
            listed = reply.json().get("operations", [])
            operations = [check_operation(op) for op in listed]
        except (ValueError, AttributeError, MalformedOperation) as exc:
            return _failed(RequestKind.LOOKUP, FailureKind.MALFORMED_RESPONSE, str(exc))
        if not operations:
            return Outcome(event=SubmissionNeverCreated())
        if len(operations) > 1:
            return _failed(
                RequestKind.LOOKUP,
                FailureKind.MALFORMED_RESPONSE,
                f"{len(operations)} operations under one requestId",
            )
        return Outcome(
            event=SubmissionFound(
                operation_id=operations[0]["name"], server_status_raw=raw_status(operations[0])
            )
        )

    # --- polling and result (X3, X6) -------------------------------------------------------

    async def _get(self, request: RequestKind, name: str) -> dict[str, Any] | Outcome:
        try:
            reply = await self.http.get(f"{self.root}/v1/{name}")
        except httpx.HTTPError as exc:
            kind = (
                FailureKind.TIMEOUT
                if isinstance(exc, httpx.TimeoutException)
                else FailureKind.TRANSPORT
            )
            return _failed(request, kind, repr(exc))
        if reply.status_code == 404:
            return Outcome(event=OperationNotFound(detail=_error_detail(reply)))
        if reply.status_code != 200:
            return _failed(
                request, http_failure(reply.status_code), _error_detail(reply), _retry_after(reply)
            )
        try:
            return check_operation(reply.json(), expected_name=name)
        except (ValueError, MalformedOperation) as exc:
            reason = f"GetOperation {name}: {exc}"
            if request is RequestKind.FETCH:
                return Outcome(event=ResultFetchFailed(reason=reason, retryable=False))
            return _failed(request, FailureKind.MALFORMED_RESPONSE, reason)

    async def poll(self, record: OperationRecord) -> Outcome:
        name = record.operation_id
        if name is None:
            return _failed(RequestKind.POLL, FailureKind.BAD_REQUEST, "no operation name")
        operation = await self._get(RequestKind.POLL, name)
        if isinstance(operation, Outcome):
            return operation
        return self.map_operation(record, operation)

    def map_operation(self, record: OperationRecord, operation: Mapping[str, Any]) -> Outcome:
        """One checked ``Operation`` as an event (see the module's table)."""
        raw = raw_status(operation)
        message = status_message_of(operation)
        if not operation.get("done", False):
            return Outcome(
                event=WorkingObserved(
                    server_status_raw=raw,
                    status_message=message,
                    poll_interval_s=poll_interval_hint_s(operation),
                    progressed=message is not None and message != record.status_message,
                )
            )
        error = operation.get("error")
        if isinstance(error, Mapping) and error.get("code", 0) == CANCELLED_CODE:
            payload = canonical_json(dict(error))
            return Outcome(
                event=CancellationObserved(
                    result_digest=digest_bytes(payload), server_status_raw=raw
                ),
                payload=payload,
            )
        self._done[str(operation["name"])] = dict(operation)
        status = ServerStatus.FAILED if error is not None else ServerStatus.COMPLETED
        return Outcome(
            event=TerminalObserved(status=status, server_status_raw=raw, status_message=message)
        )

    async def fetch_result(self, record: OperationRecord) -> Outcome:
        name = record.operation_id
        if name is None:
            return _failed(RequestKind.FETCH, FailureKind.BAD_REQUEST, "no operation name")
        operation = self._done.pop(name, None)
        if operation is None:
            fetched = await self._get(RequestKind.FETCH, name)
            if isinstance(fetched, Outcome):
                return fetched
            operation = fetched
        return self.result_of(record, operation)

    def result_of(self, record: OperationRecord, operation: Mapping[str, Any]) -> Outcome:
        """X6: the verified outcome of a done ``Operation``."""
        if not operation.get("done", False):
            return Outcome(
                event=ResultFetchFailed(
                    reason=f"{operation.get('name')} is no longer done", retryable=False
                )
            )
        error = operation.get("error")
        if isinstance(error, Mapping):
            if error.get("code", 0) == CANCELLED_CODE:
                return Outcome(
                    event=ResultFetchFailed(
                        reason="the operation now reads cancelled after a terminal was observed",
                        retryable=False,
                    )
                )
            payload = canonical_json(dict(error))
            kind = ResultKind.TOOL_ERROR if is_tool_error(error) else ResultKind.PROTOCOL_ERROR
            return Outcome(
                event=ResultFetched(
                    status=ServerStatus.FAILED,
                    result_kind=kind,
                    result_digest=digest_bytes(payload),
                    operation_id=str(operation["name"]),
                ),
                payload=payload,
            )
        response = dict(operation["response"])
        binding = self._bindings.get(record.tool_name)
        value = response.get("value")
        if binding is not None and binding.output_schema is not None:
            violation = schema_violation(value, binding.output_schema)
            if violation is not None:
                return Outcome(event=ResultFetchFailed(reason=violation, retryable=False))
        payload = canonical_json(response)
        return Outcome(
            event=ResultFetched(
                status=ServerStatus.COMPLETED,
                result_kind=ResultKind.VALUE,
                result_digest=digest_bytes(payload),
                empty=is_empty_result(value),
                operation_id=str(operation["name"]),
            ),
            payload=payload,
        )

    # --- cancel and input (X5, X4) -------------------------------------------------------

    async def cancel(self, record: OperationRecord) -> Outcome:
        name = record.operation_id
        if name is None:
            return _failed(RequestKind.CANCEL, FailureKind.BAD_REQUEST, "no operation name")
        try:
            reply = await self.http.post(f"{self.root}/v1/{name}:cancel", json={})
        except httpx.HTTPError as exc:
            return _failed(RequestKind.CANCEL, FailureKind.TRANSPORT, repr(exc))
        if reply.status_code == 404:
            return Outcome(event=OperationNotFound(detail=_error_detail(reply)))
        if reply.status_code != 200:
            return _failed(
                RequestKind.CANCEL,
                http_failure(reply.status_code),
                _error_detail(reply),
                _retry_after(reply),
            )
        # X5: best effort; only a later GetOperation shows the real terminal.
        return Outcome(event=CancelAcknowledged(cancel_generation=record.cancel_generation))

    async def send_input(
        self, record: OperationRecord, answers: Mapping[str, Any]
    ) -> Outcome | None:
        return _failed(
            RequestKind.INPUT, FailureKind.BAD_REQUEST, "AIP-151 operations take no input"
        )

    async def aclose(self) -> None:
        if self._owns_http:
            await self.http.aclose()


def raw_status(operation: Mapping[str, Any]) -> str:
    """The protocol's own status words, kept beside the normalised status (L3)."""
    if not operation.get("done", False):
        return "done=false"
    error = operation.get("error")
    if isinstance(error, Mapping):
        return f"done=true error.code={error.get('code', 0)}"
    return "done=true response"


def schema_violation(value: Any, schema: Mapping[str, Any]) -> str | None:
    """Why the response value breaks the tool's declared output schema, or None (X6)."""
    try:
        validator_class = jsonschema.validators.validator_for(schema)
        validator_class.check_schema(schema)
        error = jsonschema.exceptions.best_match(validator_class(schema).iter_errors(value))
    except jsonschema.exceptions.SchemaError as exc:
        return f"the tool's output schema is invalid: {exc.message}"
    if error is None:
        return None
    where = "/".join(str(part) for part in error.absolute_path) or "(root)"
    return f"the response violates the output schema at {where}: {error.message}"


def is_empty_result(value: Any) -> bool:
    """Nothing in it, or only empty collections: the zero-item warning outcome (X6)."""
    if isinstance(value, Mapping):
        collections = [v for v in value.values() if isinstance(v, list | dict)]
        return not value or (bool(collections) and not any(collections))
    return value is None or value == []


def _error_body(reply: httpx.Response) -> dict[str, Any]:
    try:
        body = reply.json()
    except ValueError:
        return {"error": {"code": reply.status_code, "message": reply.text[:500]}}
    return body if isinstance(body, dict) else {"error": {"code": reply.status_code}}


def _retry_after(reply: httpx.Response) -> float | None:
    value = reply.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def _failed(
    request: RequestKind, failure: FailureKind, detail: str, retry_after_s: float | None = None
) -> Outcome:
    return Outcome(
        event=RequestFailed(
            request=request, failure=failure, detail=detail, retry_after_s=retry_after_s
        )
    )
