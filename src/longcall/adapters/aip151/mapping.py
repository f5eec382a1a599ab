"""P3: Google AIP-151 long-running operations over HTTP/JSON (+ AIP-155), client side —
the pure mapping.

Owns: the wire ⇄ event mapping of ``google.longrunning.Operation`` at one server, as
exchanges of :class:`~longcall.adapters.exchange.HttpRequest` (a ``path`` under the API
root, a ``query``): the start with a deterministic AIP-155 ``requestId`` (a UUID derived
from the submission key, X2), the lookup that proves an operation by that id (the same
start resent while this process holds the arguments; a listing by ``requestId`` after a
restart), ``GetOperation`` polling, the result (the done ``Operation`` a poll already
read, or a re-read), ``CancelOperation`` (a request only, X5), the strict check of every
``Operation`` we read — its ``name`` against ours on every read where ours is known
(C3) — and :data:`HTTP_FAILURES`, this protocol's one table from HTTP statuses to core
failure kinds (X9). The I/O shell (:mod:`longcall.adapters.aip151.client`) and the
simulator both run these exchanges.

Must not: perform I/O, read a clock, decide what happens next (the core does), keep
state the ledger does not (the start arguments and the done ``Operation`` it remembers
are caches: the lookup lists and the fetch re-reads without them), put credentials in a
request (the driver adds them), or raise for a remote failure.

Poll → event; fetch → outcome:

==========================================  =============================================
``done`` false (or absent)                  ``WorkingObserved`` (``statusMessage`` and
                                            ``pollIntervalMs`` from the metadata Struct)
``done`` + ``response``                     ``TerminalObserved(COMPLETED)``; fetch →
                                            ``ResultFetched(VALUE)``, payload = the
                                            ``response`` Any (``@type`` kept)
``done`` + ``error.code = 1``               ``CancellationObserved`` (digest of the Status)
``done`` + ``error`` with an ErrorInfo of   ``TerminalObserved(FAILED)``; fetch →
reason ``TOOL_ERROR``                       ``ResultFetched(FAILED, TOOL_ERROR)``
``done`` + any other ``error``              ``TerminalObserved(FAILED)``; fetch →
                                            ``ResultFetched(FAILED, PROTOCOL_ERROR)``,
                                            payload = the ``google.rpc.Status``
a ``name`` other than ours (C3)             ``RequestFailed(FOREIGN_IDENTITY)`` on the poll
                                            and on the re-fetch: never read as ours, never
                                            retried; the core escalates to reconciliation
HTTP 404                                    ``OperationNotFound`` (X7: the core classifies)
not JSON, a field outside the proto, an     poll: ``RequestFailed(MALFORMED_RESPONSE)``;
``Any`` without ``@type``, ``done`` with    fetch: ``ResultFetchFailed(retryable=False)``
neither/both results, a ``name`` outside    — nothing is accepted; the core escalates to
``operations/``                             reconciliation with the reason
another HTTP status, or no answer at all    ``RequestFailed`` by :data:`HTTP_FAILURES` or
(reset, timeout, over the size cap)         the transport failure's kind (TOO_LARGE is
                                            never retried)
==========================================  =============================================

Start (``POST /v1/tools/{tool}:start``):

==========================================  =============================================
200 + a valid Operation                     ``SubmitAcknowledged`` (its name, status words,
                                            message, polling hint)
400, 404                                    ``SubmitRejected``: the AIP-193 body is the
                                            outcome (nothing was created)
401, 403, 409, 429, another 4xx, 501, a     ``RequestFailed`` (not processed; 409: the
refused connection                          requestId names another request — an operator
                                            looks)
a 5xx, 408, a timeout, a reset, an          ``SubmitOutcomeLost`` (resolved by
unreadable 200                              :meth:`Aip151Mapping.lookup`)
==========================================  =============================================

Lookup: the resent start's 200 → ``SubmissionFound``; the listing's one operation →
``SubmissionFound``, none → ``SubmissionNeverCreated``, more than one → malformed.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from longcall.adapters.base import Outcome, ToolBinding
from longcall.adapters.binding import binding_of, schema_violation
from longcall.adapters.exchange import (
    DEFAULT_TIMEOUT_S,
    Exchange,
    HttpReply,
    HttpRequest,
    TransportFailure,
    compact_json,
    parse_retry_after,
    settled,
)
from longcall.adapters.outcomes import (
    foreign_identity,
    no_operation_id,
    request_failed,
    submit_failed,
    unsupported,
)
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
from longcall.errors import AdapterError, UnknownTool

PROTOCOL = "aip-151"
ADAPTER_VERSION = "1"
API_VERSION_PATH = "/v1"
COLLECTION = "operations/"
OPERATION_FIELDS = frozenset({"name", "metadata", "done", "error", "response"})
STATUS_FIELDS = frozenset({"code", "message", "details"})
CANCELLED_CODE = 1
TOOL_ERROR_REASON = "TOOL_ERROR"
REQUEST_ID_NAMESPACE = uuid.UUID("6f1d6a52-4f0e-5b6c-9d43-2f1c0e0a8b15")
"""Fixed namespace: the AIP-155 ``requestId`` is ``uuid5(namespace, submission key)``."""
JSON_HEADERS: Mapping[str, str] = {"accept": "application/json"}

HTTP_FAILURES: Mapping[int, FailureKind] = {
    400: FailureKind.BAD_REQUEST,
    401: FailureKind.UNAUTHORIZED,
    403: FailureKind.FORBIDDEN,
    408: FailureKind.TIMEOUT,
    409: FailureKind.BAD_REQUEST,
    413: FailureKind.REFUSED_UNREAD,
    429: FailureKind.RATE_LIMITED,
    501: FailureKind.BAD_REQUEST,
    503: FailureKind.UNAVAILABLE,
}
"""X9: HTTP status → failure kind for this protocol; other 5xx are SERVER_ERROR, other
4xx BAD_REQUEST (never retried)."""

REJECTING_STATUSES = frozenset({400, 404})
"""A start answered with one of these created nothing: the AIP-193 error is the outcome.
409 (the requestId names another request, or an expired one) is not an outcome of this
call: it is a ``RequestFailed`` that the core hands to an operator."""


def request_id_for(submission_key: str) -> str:
    """The AIP-155 ``requestId`` of a submission key: the same key, the same UUID (X2)."""
    return str(uuid.uuid5(REQUEST_ID_NAMESPACE, submission_key))


def http_failure(status: int) -> FailureKind:
    """The failure kind of an HTTP status that is not an answer (:data:`HTTP_FAILURES`)."""
    if status in HTTP_FAILURES:
        return HTTP_FAILURES[status]
    return FailureKind.SERVER_ERROR if status >= 500 else FailureKind.BAD_REQUEST


def processed_possible(status: int) -> bool:
    """Whether a request answered with this status may have been processed: a 5xx (but
    501, not implemented) or a 408 may strike after the work; a 4xx is a refusal."""
    return status == 408 or (status >= 500 and status != 501)


class MalformedOperation(ValueError):
    """An ``Operation`` body that breaks the proto."""


class ForeignOperation(MalformedOperation):
    """An ``Operation`` that names another operation than the one asked about (C3)."""


def check_operation(body: Any, *, expected_name: str | None = None) -> dict[str, Any]:
    """Validate one ``Operation`` in proto3 JSON strictly (the way Google's client parses).

    Raises :class:`MalformedOperation` with the reason — :class:`ForeignOperation` when
    the name is not ``expected_name`` — and returns the body otherwise.
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
        raise ForeignOperation(f"asked for {expected_name!r}, the server answered {name!r}")
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


def kind_of_result(status: ServerStatus, body: Any) -> ResultKind | None:
    """The kind :func:`result_of` gives a failed operation whose ``error`` is ``body``
    (a ``google.rpc.Status``): a tool error when its details say so, else a protocol
    error. None for anything else (a response holds a value)."""
    failed = status is ServerStatus.FAILED
    if failed and isinstance(body, Mapping) and isinstance(body.get("code"), int):
        return ResultKind.TOOL_ERROR if is_tool_error(body) else ResultKind.PROTOCOL_ERROR
    return None


def _metadata_value(operation: Mapping[str, Any], key: str) -> Any:
    metadata = operation.get("metadata")
    value = metadata.get("value") if isinstance(metadata, Mapping) else None
    return value.get(key) if isinstance(value, Mapping) else None


def status_message_of(operation: Mapping[str, Any]) -> str | None:
    """The server's ``metadata.value.statusMessage``, if it sent one (X11)."""
    message = _metadata_value(operation, "statusMessage")
    return message if isinstance(message, str) else None


def poll_interval_hint_s(operation: Mapping[str, Any]) -> float | None:
    """The server's polling hint ``metadata.value.pollIntervalMs`` (a longcall convention)."""
    interval = _metadata_value(operation, "pollIntervalMs")
    if isinstance(interval, int | float) and not isinstance(interval, bool) and interval > 0:
        return float(interval) / 1000.0
    return None


def raw_status(operation: Mapping[str, Any]) -> str:
    """The protocol's own status words, kept beside the normalised status (L3)."""
    if not operation.get("done", False):
        return "done=false"
    error = operation.get("error")
    if isinstance(error, Mapping):
        return f"done=true error.code={error.get('code', 0)}"
    return "done=true response"


def is_empty_result(value: Any) -> bool:
    """Nothing in it, or only empty collections: the zero-item warning outcome (X6)."""
    if isinstance(value, Mapping):
        collections = [v for v in value.values() if isinstance(v, list | dict)]
        return not value or (bool(collections) and not any(collections))
    return value is None or value == []


def api_root(url: str) -> str:
    """``http://h:p/v1[/anything]`` → ``http://h:p`` (the bindings carry ``/v1``)."""
    parts = urlsplit(url)
    path = parts.path
    index = path.find(API_VERSION_PATH)
    prefix = path[:index] if index >= 0 else path.rstrip("/")
    return urlunsplit((parts.scheme, parts.netloc, prefix, "", ""))


# --- reading replies ---------------------------------------------------------------------


def _json_of(reply: HttpReply) -> Any:
    """The body as JSON; raises ValueError when it is not."""
    return json.loads(reply.body)


def error_detail(reply: HttpReply) -> str:
    """An HTTP error in words: its AIP-193 message, else the start of its body."""
    try:
        error = _json_of(reply).get("error", {})
        message = error.get("message")
    except (ValueError, AttributeError):
        message = None
    text = reply.body[:200].decode("utf-8", "replace")
    return f"HTTP {reply.status}: {message or text}"


def error_body(reply: HttpReply) -> dict[str, Any]:
    """The AIP-193 error body we keep as a rejection's evidence."""
    try:
        body = _json_of(reply)
    except ValueError:
        text = reply.body[:500].decode("utf-8", "replace")
        return {"error": {"code": reply.status, "message": text}}
    return body if isinstance(body, dict) else {"error": {"code": reply.status}}


def reply_failure(reply: HttpReply, what: str) -> TransportFailure:
    """An HTTP status that carried no answer, as a transport failure (X9)."""
    return TransportFailure(
        kind=http_failure(reply.status),
        detail=f"{what}: {error_detail(reply)}",
        processed_possible=processed_possible(reply.status),
        retry_after_s=parse_retry_after(reply.headers.get("retry-after")),
        http_status=reply.status,
    )


class Aip151Mapping:
    """P3 at one server, for one client process: the exchanges and the little state they
    share (tool bindings; the start arguments and done Operations already read, caches)."""

    protocol = PROTOCOL
    version = ADAPTER_VERSION

    def __init__(self, url: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.url = url
        """The server as the caller named it (the binding's ``server``)."""
        self.timeout_s = timeout_s
        self.bindings: dict[str, ToolBinding] = {}
        self._arguments: dict[str, dict[str, Any]] = {}
        """Start arguments by submission key, kept while the start's fate is unknown: lets
        :meth:`lookup` resend the same start; dropped once an answer settles it."""
        self._done: dict[str, dict[str, Any]] = {}
        """The done Operation seen by the last poll, by name (a cache; fetch re-reads)."""

    # --- framing ---------------------------------------------------------------------------

    def _request(
        self,
        method: str,
        path: str,
        *,
        body: Mapping[str, Any] | None = None,
        query: Mapping[str, str] | None = None,
    ) -> HttpRequest:
        """A request under the API root (``/v1…``)."""
        encoded = None if body is None else compact_json(dict(body))
        headers = dict(JSON_HEADERS)
        if encoded is not None:
            headers["content-type"] = "application/json"
        return HttpRequest(
            method=method,
            path=API_VERSION_PATH + path,
            query=dict(query or {}),
            headers=headers,
            body=None if encoded is None else encoded.encode(),
            json_body=None if body is None else dict(body),
            timeout_s=self.timeout_s,
        )

    def request_id(self, submission_key: str) -> str:
        """The AIP-155 ``requestId`` of a start (X2): derived, never drawn."""
        return request_id_for(submission_key)

    def _start(self, record: OperationRecord, arguments: Mapping[str, Any]) -> HttpRequest:
        body = {"requestId": self.request_id(record.submission_key), "arguments": dict(arguments)}
        return self._request("POST", f"/tools/{quote(record.tool_name, safe='')}:start", body=body)

    # --- negotiation (X1) ------------------------------------------------------------------

    def tools(self) -> Exchange[list[dict[str, Any]]]:
        """Every tool ``GET /v1/tools`` lists, each ``taskSupport: required`` (a start is
        always a long-running operation). Raises :class:`AdapterError` as :meth:`bind`."""
        listed = yield from self._listed()
        return [{**tool, "taskSupport": "required"} for tool in listed]

    def _listed(self) -> Exchange[list[dict[str, Any]]]:
        """``GET /v1/tools``: the descriptors of the tools offered. AIP-151 itself has no
        tool list: this is the extension the reference facade serves and :meth:`bind`
        needs, so a server without it is one this adapter cannot call (it says so)."""
        reply = yield self._request("GET", "/tools")
        root = api_root(self.url)
        where = f"GET /v1/tools at {root}"
        if isinstance(reply, TransportFailure):
            raise AdapterError(f"{where} failed: {reply.detail}")
        if reply.status == 404:
            raise AdapterError(
                f"{root} lists no tools: AIP-151 has no tool list, and this server does not"
                " serve GET /v1/tools (the listing longcall binds a tool with, so longcall"
                " cannot call it either); its methods are in its API documentation"
            )
        if reply.status != 200:
            raise AdapterError(f"{where}: {error_detail(reply)}")
        try:
            tools = _json_of(reply).get("tools")
        except (ValueError, AttributeError) as exc:
            raise AdapterError(f"{where}: not a tool list") from exc
        if not isinstance(tools, list):
            raise AdapterError(f"{where}: not a tool list")
        return [tool for tool in tools if isinstance(tool, dict)]

    def bind(self, tool_name: str) -> Exchange[ToolBinding]:
        """``GET /v1/tools``: the tool's descriptor. Raises :class:`AdapterError` when the
        list cannot be read and :class:`UnknownTool` when the tool is not offered."""
        tools = yield from self._listed()
        tool = next((t for t in tools if t.get("name") == tool_name), None)
        if tool is None:
            raise UnknownTool(f"{api_root(self.url)} does not offer tool {tool_name!r}")
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
        self.bindings[tool_name] = binding
        return binding

    # --- start and lookup (X2) -------------------------------------------------------------

    def submit(self, record: OperationRecord, arguments: Mapping[str, Any]) -> Exchange[Outcome]:
        self._arguments[record.submission_key] = dict(arguments)
        reply = yield self._start(record, arguments)
        if isinstance(reply, TransportFailure):
            return submit_failed(reply)
        if reply.status == 200:
            try:
                operation = check_operation(_json_of(reply))
            except (ValueError, MalformedOperation) as exc:
                # The start may have created it: only the requestId can tell (X2).
                return Outcome(event=SubmitOutcomeLost(reason=f"start answered badly: {exc}"))
            self._arguments.pop(record.submission_key, None)  # settled: no lookup follows
            return Outcome(
                event=SubmitAcknowledged(
                    operation_id=operation["name"],
                    server_status_raw=raw_status(operation),
                    status_message=status_message_of(operation),
                    poll_interval_s=poll_interval_hint_s(operation),
                )
            )
        if reply.status in REJECTING_STATUSES:
            self._arguments.pop(record.submission_key, None)  # settled: nothing was created
            payload = canonical_json(error_body(reply))
            return Outcome(
                event=SubmitRejected(
                    reason=error_detail(reply), result_digest=digest_bytes(payload)
                ),
                payload=payload,
            )
        return submit_failed(reply_failure(reply, "start"))

    def lookup(self, record: OperationRecord) -> Exchange[Outcome]:
        """Resend the start with the same ``requestId`` (AIP-155): the server answers the
        operation it already holds, or creates it now — either way exactly one exists.
        Without the arguments (a restarted process) list by ``requestId`` instead."""
        arguments = self._arguments.get(record.submission_key)
        if arguments is None:
            return (yield from self._lookup_by_listing(record))
        reply = yield self._start(record, arguments)
        if isinstance(reply, TransportFailure):
            return request_failed(RequestKind.LOOKUP, reply)
        if reply.status != 200:
            return request_failed(RequestKind.LOOKUP, reply_failure(reply, "start resent"))
        try:
            operation = check_operation(_json_of(reply))
        except (ValueError, MalformedOperation) as exc:
            return _malformed(RequestKind.LOOKUP, f"start resent: {exc}")
        self._arguments.pop(record.submission_key, None)  # found: the key is settled
        return Outcome(
            event=SubmissionFound(
                operation_id=operation["name"],
                server_status_raw=raw_status(operation),
                poll_interval_s=poll_interval_hint_s(operation),
            )
        )

    def _lookup_by_listing(self, record: OperationRecord) -> Exchange[Outcome]:
        # Ask by requestId without creating (the facade's requestId filter, an AIP-160
        # extension). Absent → proven never created; every listed Operation is checked.
        request_id = self.request_id(record.submission_key)
        reply = yield self._request(
            "GET", "/operations", query={"filter": f'requestId="{request_id}"'}
        )
        if isinstance(reply, TransportFailure):
            return request_failed(RequestKind.LOOKUP, reply)
        if reply.status != 200:
            return request_failed(RequestKind.LOOKUP, reply_failure(reply, "ListOperations"))
        try:
            listed = _json_of(reply).get("operations", [])
            if not isinstance(listed, list):
                raise MalformedOperation("operations is not a list")
            operations = [check_operation(op) for op in listed]
        except (ValueError, AttributeError, MalformedOperation) as exc:
            return _malformed(RequestKind.LOOKUP, f"ListOperations: {exc}")
        if not operations:
            return Outcome(event=SubmissionNeverCreated())
        if len(operations) > 1:
            return _malformed(
                RequestKind.LOOKUP,
                f"ListOperations: {len(operations)} operations under one requestId",
            )
        return Outcome(
            event=SubmissionFound(
                operation_id=operations[0]["name"], server_status_raw=raw_status(operations[0])
            )
        )

    # --- polling and result (X3, X6) -------------------------------------------------------

    def _get(self, request: RequestKind, name: str) -> Exchange[dict[str, Any] | Outcome]:
        """``GetOperation``: our Operation, checked (name included, C3), or the outcome."""
        reply = yield self._request("GET", "/" + quote(name, safe="/"))
        if isinstance(reply, TransportFailure):
            return request_failed(request, reply)
        if reply.status == 404:
            return Outcome(event=OperationNotFound(detail=error_detail(reply)))
        if reply.status != 200:
            return request_failed(request, reply_failure(reply, "GetOperation"))
        try:
            return check_operation(_json_of(reply), expected_name=name)
        except ForeignOperation as exc:
            return foreign_identity(request, f"GetOperation {name}: {exc}")
        except (ValueError, MalformedOperation) as exc:
            reason = f"GetOperation {name}: {exc}"
            if request is RequestKind.FETCH:
                return Outcome(event=ResultFetchFailed(reason=reason, retryable=False))
            return _malformed(request, reason)

    def poll(self, record: OperationRecord) -> Exchange[Outcome]:
        name = record.operation_id
        if name is None:
            return no_operation_id(RequestKind.POLL)
        operation = yield from self._get(RequestKind.POLL, name)
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

    def fetch_result(self, record: OperationRecord) -> Exchange[Outcome]:
        name = record.operation_id
        if name is None:
            return no_operation_id(RequestKind.FETCH)
        operation = self._done.pop(name, None)  # a cache entry is used once
        if operation is None:
            # After a restart (or a failed first fetch) the cache is empty: re-read, with
            # the same checks as the poll, the name against ours included (X6, C3).
            fetched = yield from self._get(RequestKind.FETCH, name)
            if isinstance(fetched, Outcome):
                return fetched
            operation = fetched
        binding = yield from binding_of(self.bindings, self.bind, record.tool_name)
        return result_of(operation, binding)

    # --- cancel and input (X5, X4) ---------------------------------------------------------

    def cancel(self, record: OperationRecord) -> Exchange[Outcome]:
        name = record.operation_id
        if name is None:
            return no_operation_id(RequestKind.CANCEL)
        reply = yield self._request("POST", "/" + quote(name, safe="/") + ":cancel", body={})
        if isinstance(reply, TransportFailure):
            return request_failed(RequestKind.CANCEL, reply)
        if reply.status == 404:
            return Outcome(event=OperationNotFound(detail=error_detail(reply)))
        if reply.status != 200:
            return request_failed(RequestKind.CANCEL, reply_failure(reply, "CancelOperation"))
        # X5: best effort; only a later GetOperation shows the real terminal.
        return Outcome(event=CancelAcknowledged(cancel_generation=record.cancel_generation))

    def send_input(
        self, record: OperationRecord, answers: Mapping[str, Any]
    ) -> Exchange[Outcome | None]:
        return settled(unsupported(RequestKind.INPUT, "AIP-151 operations take no input"))


def result_of(operation: Mapping[str, Any], binding: ToolBinding | None = None) -> Outcome:
    """X6: the verified outcome of a done ``Operation`` (checked by the caller)."""
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
    value = response.get("value")
    if binding is not None and binding.output_schema is not None:
        violation = schema_violation(value, binding.output_schema, subject="the response")
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


def _malformed(request: RequestKind, detail: str) -> Outcome:
    """An answer we cannot read as an Operation: retried, then escalated with the reason."""
    return Outcome(
        event=RequestFailed(request=request, failure=FailureKind.MALFORMED_RESPONSE, detail=detail)
    )


__all__ = [
    "ADAPTER_VERSION",
    "API_VERSION_PATH",
    "CANCELLED_CODE",
    "COLLECTION",
    "HTTP_FAILURES",
    "PROTOCOL",
    "REJECTING_STATUSES",
    "REQUEST_ID_NAMESPACE",
    "TOOL_ERROR_REASON",
    "Aip151Mapping",
    "ForeignOperation",
    "MalformedOperation",
    "api_root",
    "check_operation",
    "error_body",
    "error_detail",
    "http_failure",
    "is_empty_result",
    "is_tool_error",
    "poll_interval_hint_s",
    "raw_status",
    "reply_failure",
    "request_id_for",
    "result_of",
    "status_message_of",
]
