"""P1: MCP protocol 2026-07-28 with the ``io.modelcontextprotocol/tasks`` extension
(SEP-2663), client side — the pure mapping.

Owns: the wire ⇄ event mapping of this version, as exchanges: the per-request
``_meta`` consent, ``Mcp-Method``/``Mcp-Name`` on ``tasks/*``, dispatch on the
polymorphic ``resultType``, ``tasks/get`` with inlined ``result``/``error``/
``inputRequests`` (each body checked to be about OUR task, C3, on the poll and on the
re-fetch path alike), ``tasks/update``, ``tasks/cancel`` (an ack, never a terminal:
X5), the ``dev.longcall/submissionKey`` extension and its lookup (X2), and
:data:`JSONRPC_FAILURES`, this version's one table from JSON-RPC codes to core
failure kinds (X9). The I/O shell (:mod:`longcall.adapters.mcp.client`) and the
simulator both run these exchanges.

Must not: perform I/O, decide what happens next (the core does), keep state the
ledger does not (the inlined terminal it remembers is a cache: ``fetch_result``
re-reads ``tasks/get`` after a restart), or raise for a remote failure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from longcall.adapters.base import Outcome, ToolBinding
from longcall.adapters.exchange import Exchange, TransportFailure
from longcall.adapters.mcp.common import (
    STATUSES,
    BindingCache,
    cancellation_observed,
    check_task_identity,
    fetch_failed,
    lookup_answer,
    lookup_unsupported,
    ms_to_s,
    request_failed,
    submission_lookup_of,
    submit_failure,
    task_request_failed,
    task_status,
    text_or_none,
    with_progress,
)
from longcall.adapters.mcp.results import protocol_error_result, verify_result
from longcall.adapters.mcp.rpc import (
    MODERN,
    SUBMISSION_KEY_EXTENSION,
    ModernDialect,
    RpcChannel,
    RpcReply,
    call,
)
from longcall.adapters.mcp.tools import (
    param_headers,
)
from longcall.adapters.outcomes import no_operation_id
from longcall.core.events import (
    CancelAcknowledged,
    InputRequestObserved,
    RequestFailed,
    ResultFetchFailed,
    SubmitAcknowledged,
    SubmitOutcomeLost,
    TerminalObserved,
    WorkingObserved,
)
from longcall.core.keys import canonical_json, digest_json
from longcall.core.record import OperationRecord, ServerStatus
from longcall.core.retry import FailureKind, RequestKind

PROTOCOL = MODERN
ADAPTER_VERSION = "1"

JSONRPC_FAILURES: Mapping[int, FailureKind] = {
    -32700: FailureKind.BAD_REQUEST,
    -32600: FailureKind.BAD_REQUEST,
    -32601: FailureKind.BAD_REQUEST,
    -32602: FailureKind.VALIDATION,
    -32603: FailureKind.SERVER_ERROR,
    -32020: FailureKind.BAD_REQUEST,  # HeaderMismatch: our framing is wrong, never retry
    -32021: FailureKind.BAD_REQUEST,  # MissingRequiredClientCapability
    -32022: FailureKind.BAD_REQUEST,  # UnsupportedProtocolVersion
}
"""X9: this version's table from JSON-RPC error codes to failure kinds; an unknown code
is not retried (BAD_REQUEST)."""

REJECTING_CODES = frozenset({-32602, -32601, -32600, -32021})
"""A create answered with one of these was not processed: the error is the outcome."""


class ModernMapping(BindingCache):
    """P1 at one server, for one client process: the exchanges and the little state
    they share (request framing, tool bindings, caches of what a poll already read)."""

    protocol = PROTOCOL
    version = ADAPTER_VERSION
    unflagged_support = "optional"
    """2026-07-28 has no per-tool flag on the wire: the server decides per request."""
    reuses_listing = True
    """A create's framing takes no hint from the listing but its headers (SEP-2243),
    which :func:`hints_may_age` leaves out: the server decides task support per request."""

    def __init__(self, url: str, *, discovered: Mapping[str, Any] | None = None) -> None:
        self.url = url
        self.channel = RpcChannel(ModernDialect())
        capabilities = (discovered or {}).get("capabilities") or {}
        extensions = capabilities.get("extensions") if isinstance(capabilities, Mapping) else {}
        self.submission_lookup, self.lookup_method, self.store_id = submission_lookup_of(extensions)
        self.bindings: dict[str, ToolBinding] = {}
        self.listed_at: dict[str, int] = {}
        self._terminal: dict[str, dict[str, Any]] = {}
        """Inlined terminal bodies by task id: a cache only (X6 re-reads after restart)."""
        self._last_updated: dict[str, str] = {}

    # --- framing ---------------------------------------------------------------------------

    def _params(self, method: str, params: Mapping[str, Any], **meta: Any) -> dict[str, Any]:
        return {**params, "_meta": {**self.channel.dialect.meta(method, consent=True), **meta}}

    def _task_request(
        self, method: str, task_id: str, extra: Mapping[str, Any] | None = None
    ) -> Exchange[RpcReply]:
        params = self._params(method, {"taskId": task_id, **(extra or {})})
        return call(self.channel, method, params, name=task_id)

    # --- create (X2) ------------------------------------------------------------------------

    def submit(self, record: OperationRecord, arguments: Mapping[str, Any]) -> Exchange[Outcome]:
        meta: dict[str, Any] = {"progressToken": record.call_node_id}
        if self.submission_lookup:
            meta[SUBMISSION_KEY_EXTENSION] = record.submission_key  # X2, S3
        params = self._params(
            "tools/call", {"name": record.tool_name, "arguments": dict(arguments)}, **meta
        )
        binding = yield from self._binding(record.tool_name)
        headers = self.channel.dialect.headers("tools/call", record.tool_name)
        if binding is not None:
            headers.update(param_headers(binding.header_params, arguments))  # SEP-2243
        answer = yield from call(
            self.channel, "tools/call", params, name=record.tool_name, headers=headers
        )
        if not isinstance(answer, TransportFailure) and answer.error is not None:
            # Refused (an unknown tool, arguments it no longer takes): the next call of
            # the tool lists it again rather than trust the listing held.
            self.forget_listing(record.tool_name)
        if isinstance(answer, TransportFailure) or answer.error is not None:
            return submit_failure(
                answer, failures=JSONRPC_FAILURES, rejecting_codes=REJECTING_CODES
            )
        result = answer.result or {}
        kind = result.get("resultType", "complete")
        if kind == "task":
            return self._created(result)
        if kind == "complete":
            outcome = verify_result(
                result, output_schema=binding.output_schema if binding else None
            )
            return with_progress(outcome, answer.messages)
        if kind == "input_required":
            # SEP-2322 MRTR before any task exists: nothing was created; the runtime has
            # no multi-round create yet, so this is a refusal it must not retry.
            return Outcome(
                event=RequestFailed(
                    request=RequestKind.SUBMIT,
                    failure=FailureKind.BAD_REQUEST,
                    detail="the server asked for input (MRTR) before creating a task;"
                    " multi-round creation is not supported by this adapter",
                )
            )
        return Outcome(event=SubmitOutcomeLost(reason=f"unknown resultType {kind!r}"))

    def _created(self, result: Mapping[str, Any]) -> Outcome:
        task_id = result.get("taskId")
        status = STATUSES.get(str(result.get("status")))
        if not isinstance(task_id, str) or not task_id or status is None:
            return Outcome(event=SubmitOutcomeLost(reason="CreateTaskResult without a task id"))
        if isinstance(result.get("lastUpdatedAt"), str):
            self._last_updated[task_id] = result["lastUpdatedAt"]
        return Outcome(
            event=SubmitAcknowledged(
                operation_id=task_id,
                server_status=status,
                server_status_raw=str(result.get("status")),
                status_message=text_or_none(result.get("statusMessage")),
                poll_interval_s=ms_to_s(result.get("pollIntervalMs")),
                ttl_s=ms_to_s(result.get("ttlMs")),
            )
        )

    def lookup(self, record: OperationRecord) -> Exchange[Outcome]:
        if not self.submission_lookup:
            return lookup_unsupported()
        method = self.lookup_method
        params = self._params(method, {"submissionKey": record.submission_key})
        answer = yield from call(self.channel, method, params)
        return lookup_answer(answer, JSONRPC_FAILURES, submitted_to=record.server_store_id)

    # --- status (X3, X4) --------------------------------------------------------------------

    def poll(self, record: OperationRecord) -> Exchange[Outcome]:
        task_id = record.operation_id
        if task_id is None:
            return no_operation_id(RequestKind.POLL)
        answer = yield from self._task_request("tasks/get", task_id)
        if isinstance(answer, TransportFailure) or answer.error is not None:
            return task_request_failed(RequestKind.POLL, answer, JSONRPC_FAILURES)
        return self.map_task(record, answer.result or {})

    def map_task(self, record: OperationRecord, task: Mapping[str, Any]) -> Outcome:
        """One ``DetailedTask`` (from tasks/get or notifications/tasks) as an event."""
        task_id = record.operation_id or ""
        read = task_status(task, task_id, interval_key="pollIntervalMs")
        if isinstance(read, Outcome):
            return read
        status, raw, message, interval = read.status, read.raw, read.message, read.interval_s
        if status is ServerStatus.WORKING:
            updated = task.get("lastUpdatedAt")
            previous = self._last_updated.get(task_id)
            if isinstance(updated, str):
                self._last_updated[task_id] = updated
            progressed = message != record.status_message or (
                isinstance(updated, str) and previous is not None and updated != previous
            )
            return Outcome(
                event=WorkingObserved(
                    server_status_raw=raw,
                    status_message=message,
                    poll_interval_s=interval,
                    progressed=progressed,
                )
            )
        if status is ServerStatus.INPUT_REQUIRED:
            return _input_requested(task, raw, message, interval)
        self._last_updated.pop(task_id, None)  # terminal from here on: nothing to compare
        if status is ServerStatus.CANCELLED:
            return cancellation_observed(task, raw)
        self._terminal[task_id] = dict(task)
        return Outcome(
            event=TerminalObserved(status=status, server_status_raw=raw, status_message=message)
        )

    # --- result (X6) -------------------------------------------------------------------------

    def holds_result(self, record: OperationRecord) -> bool:
        """Whether the last poll's terminal reply inlined the result: the fetch that
        follows reads it from here and sends nothing."""
        return record.operation_id is not None and record.operation_id in self._terminal

    def fetch_result(self, record: OperationRecord) -> Exchange[Outcome]:
        task_id = record.operation_id
        if task_id is None:
            return no_operation_id(RequestKind.FETCH)
        task = self._terminal.pop(task_id, None)  # a cache entry is used once
        if task is None:
            # After a restart the cache is empty: the result is inlined in tasks/get (X6).
            answer = yield from self._task_request("tasks/get", task_id)
            if isinstance(answer, TransportFailure):
                return fetch_failed(answer, JSONRPC_FAILURES)
            if answer.error is not None:
                return task_request_failed(RequestKind.FETCH, answer, JSONRPC_FAILURES)
            task = answer.result or {}
            # C3: the re-fetch path checks identity exactly as the poll did.
            foreign = check_task_identity(RequestKind.FETCH, task, task_id, required=True)
            if foreign is not None:
                return foreign
        binding = yield from self._binding(record.tool_name)
        return result_of(task, binding, task_id)

    # --- cancel and input (X5, X4) -----------------------------------------------------------

    def cancel(self, record: OperationRecord) -> Exchange[Outcome]:
        task_id = record.operation_id
        if task_id is None:
            return no_operation_id(RequestKind.CANCEL)
        answer = yield from self._task_request("tasks/cancel", task_id)
        if isinstance(answer, TransportFailure) or answer.error is not None:
            return task_request_failed(RequestKind.CANCEL, answer, JSONRPC_FAILURES)
        # X5: the ack is a request, not a terminal; polling finds the real one.
        return Outcome(event=CancelAcknowledged(cancel_generation=record.cancel_generation))

    def send_input(
        self, record: OperationRecord, answers: Mapping[str, Any]
    ) -> Exchange[Outcome | None]:
        task_id = record.operation_id
        if task_id is None:
            return no_operation_id(RequestKind.INPUT)
        if not answers:
            return None
        # X4: the machine recorded these keys as answered (InputAnswered) before this
        # send, so each key reaches the wire once per round; a resend after a failure
        # is harmless (the server ignores already-answered keys, SEP-2663).
        answer = yield from self._task_request(
            "tasks/update", task_id, {"inputResponses": dict(answers)}
        )
        if isinstance(answer, TransportFailure) or answer.error is not None:
            # -32602 here may be an unknown task or a malformed answer: never retried (X9).
            return request_failed(RequestKind.INPUT, answer, JSONRPC_FAILURES)
        return None

    # --- push (X3) -----------------------------------------------------------------------------

    def listen_request(self, task_ids: list[str]) -> tuple[str, dict[str, Any]]:
        """``subscriptions/listen`` for exactly these task ids: the method and params."""
        method = "subscriptions/listen"
        return method, self._params(method, {"notifications": {"taskIds": task_ids}})


def _input_requested(
    task: Mapping[str, Any], raw: str, message: str | None, interval: float | None
) -> Outcome:
    requests = task.get("inputRequests")
    if not isinstance(requests, Mapping) or not requests:
        # Eventually consistent after tasks/update: nothing outstanding to show.
        return Outcome(
            event=WorkingObserved(
                server_status_raw=raw, status_message=message, poll_interval_s=interval
            )
        )
    payload = canonical_json(dict(requests))
    return Outcome(
        event=InputRequestObserved(
            keys=tuple(sorted(str(key) for key in requests)),
            schema_digest=digest_json(
                {key: _requested_schema(value) for key, value in requests.items()}
            ),
            server_status_raw=raw,
            status_message=message,
            poll_interval_s=interval,
        ),
        payload=payload,
    )


def result_of(task: Mapping[str, Any], binding: ToolBinding | None, task_id: str) -> Outcome:
    """X6: the verified outcome inlined in a terminal ``DetailedTask``."""
    status = task.get("status")
    if status == "completed":
        if "result" not in task:
            return Outcome(
                event=ResultFetchFailed(
                    reason="completed task without an inlined result", retryable=True
                )
            )
        return verify_result(
            task["result"],
            output_schema=binding.output_schema if binding else None,
            operation_id=task_id,
        )
    if status == "failed":
        if "error" not in task:
            return Outcome(
                event=ResultFetchFailed(
                    reason="failed task without an inlined error", retryable=True
                )
            )
        return protocol_error_result(task["error"], operation_id=task_id)
    return Outcome(
        event=ResultFetchFailed(
            reason=f"no result to fetch: the task is {status!r}", retryable=True
        )
    )


def _requested_schema(request: Any) -> Any:
    params = request.get("params") if isinstance(request, Mapping) else None
    if isinstance(params, Mapping):
        return {"method": request.get("method"), "schema": params.get("requestedSchema")}
    return request


__all__ = [
    "ADAPTER_VERSION",
    "JSONRPC_FAILURES",
    "PROTOCOL",
    "REJECTING_CODES",
    "ModernMapping",
    "result_of",
]
