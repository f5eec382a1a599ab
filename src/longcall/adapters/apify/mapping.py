"""P4: Apify-style "early return + poll" tools over MCP, client side — the pure mapping.

Owns: the wire ⇄ event mapping of an Apify-style MCP server (the reference Apify MCP
server's shapes), as exchanges over the JSON-RPC framing of
:mod:`longcall.adapters.mcp.rpc` (so only an answer carrying OUR request id is read; an
error with ``id: null`` or an HTTP status that is not an answer is a transport failure,
never an outcome: C3): ``initialize`` (the submission-key capability, S3), the start
call of a direct Actor tool, whose early return (a run handle with ``status`` not
terminal) maps the ``runId`` to the operation id; polling with ``get-actor-run`` inside
the 45 s ``waitSecs`` cap and under the operation's overall deadline (read from the
injected clock); the result read page by page with ``get-dataset-items`` (never the
whole dataset in one call), checked against the run's item count; cancel as
``abort-actor-run``; the ``runId`` of every run we read checked against ours (C3); and
:data:`JSONRPC_FAILURES`, this protocol's table from JSON-RPC codes to core failure
kinds (X9). Both failure channels are checked on every call: a JSON-RPC ``error`` and a
tool result with ``isError: true``.

Must not: perform I/O, read a clock other than the one injected, decide what happens
next (the core does), keep state the ledger does not (the last run view is a cache;
``fetch_result`` re-reads after a restart), put credentials in a request, or raise for a
remote failure.

Run status → event:

============================  ======================================================
READY, RUNNING, TIMING-OUT,   ``WorkingObserved`` (the raw status kept, L3)
ABORTING
SUCCEEDED                     ``TerminalObserved(COMPLETED)``; fetch pages the default
                              dataset → ``ResultFetched(VALUE)``; zero items →
                              ``empty`` (the core adds the ``empty_result`` warning)
FAILED, TIMED-OUT             ``TerminalObserved(FAILED)``; fetch →
                              ``ResultFetched(FAILED, TOOL_ERROR)`` with the run and any
                              partial items (the reference answers these with
                              ``isError: false``; the failure is the run's, not the
                              protocol's)
ABORTED                       ``CancellationObserved`` (digest of the run view)
another status                ``RequestFailed(MALFORMED_RESPONSE)``
a run with another ``runId``  ``RequestFailed(FOREIGN_IDENTITY)`` on the poll, the
                              re-fetch and the abort (C3): never read as ours
``isError`` "Run … not found"  ``OperationNotFound`` (X7)
JSON-RPC error (our id)       ``RequestFailed`` by :data:`JSONRPC_FAILURES` (-32602 is
                              VALIDATION: never retried)
no answer (``id: null``, a    ``RequestFailed`` of the transport failure's kind
refusing HTTP status, reset,  (TOO_LARGE never retried)
timeout, over the size cap)
============================  ======================================================

Start: a run handle → ``SubmitAcknowledged`` (whatever its status); ``isError: true``
or a JSON-RPC -32600/-32601/-32602 answering our call → ``SubmitRejected`` (no run
exists; the error is the outcome); -32603 or a server-defined code, a timeout, a reset,
a 5xx or an answer without a run handle → ``SubmitOutcomeLost``; a refusal that proves
nothing was processed (401/403/429, ``id: null``) → ``RequestFailed``.

The result payload is ``{"run": …, "items": […], "usage": _meta["com.apify/ActorRun"]}``
in canonical JSON. A dataset page whose ``items`` contradict its ``itemCount``, its
``offset``, or the run's item count → ``ResultFetchFailed`` (not retried): the core
hands the operation to an operator with the reason; nothing is accepted.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from typing import Any

from longcall.adapters.base import Outcome, ToolBinding
from longcall.adapters.exchange import Exchange, TransportFailure, settled
from longcall.adapters.mcp.common import request_failed, submit_failure
from longcall.adapters.mcp.legacy import JSONRPC_FAILURES as LEGACY_JSONRPC_FAILURES
from longcall.adapters.mcp.legacy import REJECTING_CODES as LEGACY_REJECTING_CODES
from longcall.adapters.mcp.rpc import LEGACY, RpcChannel, RpcReply, call, post
from longcall.adapters.mcp.tools import describe_failure, find_tool, list_tools, tool_binding
from longcall.adapters.outcomes import foreign_identity, no_operation_id, unsupported
from longcall.core.events import (
    CancelAcknowledged,
    CancellationObserved,
    CancelRefused,
    OperationNotFound,
    RequestFailed,
    ResultFetched,
    ResultFetchFailed,
    SubmitAcknowledged,
    SubmitOutcomeLost,
    SubmitRejected,
    TerminalObserved,
    WorkingObserved,
)
from longcall.core.keys import canonical_json, digest_bytes
from longcall.core.record import OperationRecord, ResultKind, ServerStatus
from longcall.core.retry import FailureKind, RequestKind
from longcall.errors import AdapterError, UnknownTool

PROTOCOL = "apify"
ADAPTER_VERSION = "1"
MCP_VERSION = LEGACY
WAIT_SECS_MAX = 45
WAIT_SECS_DEFAULT = 30
PAGE_LIMIT_DEFAULT = 100
PAGES_MAX = 10_000
"""A bound on one result read (a million items at the default page size)."""
POLL_INTERVAL_S = 0.1
"""``get-actor-run`` long-polls on the server, so the next poll may follow at once."""
HTTP_SLACK_S = 15.0
"""Beyond the ``waitSecs`` window, how long a call may take before it is a timeout."""
RUN_META_KEY = "com.apify/ActorRun"
SUBMISSION_KEY_META_KEY = "dev.longcall/submissionKey"
CLIENT_INFO = {"name": "longcall", "version": ADAPTER_VERSION}
HELPERS = ("get-actor-run", "get-dataset-items", "abort-actor-run")
WORKING_STATUSES = frozenset({"READY", "RUNNING", "TIMING-OUT", "ABORTING"})
FAILED_STATUSES = frozenset({"FAILED", "TIMED-OUT"})
TERMINAL_STATUSES = FAILED_STATUSES | {"SUCCEEDED"}
RUN_VOLATILE_KEYS = frozenset({"summary", "nextStep"})

JSONRPC_FAILURES = LEGACY_JSONRPC_FAILURES
"""X9: an Apify-style server speaks MCP 2025-11-25, so that version's table maps its
JSON-RPC codes (-32602 VALIDATION, -32603 SERVER_ERROR; an unknown code is not
retried)."""

REJECTING_CODES = LEGACY_REJECTING_CODES
"""A start answered with one of these (invalid arguments, unknown tool) started no run:
the error is the outcome."""

Clock = Callable[[], float]
"""Seconds since the epoch: ``time.time`` in the I/O shell, virtual in the simulator."""


def _text_of(result: Mapping[str, Any]) -> str:
    for block in result.get("content") or []:
        if isinstance(block, Mapping) and isinstance(block.get("text"), str):
            return str(block["text"])
    return ""


def model_text(result: Mapping[str, Any]) -> str:
    """The text part a model reads (the reference's ``summary\\nnextStep`` block)."""
    texts = [
        str(block.get("text"))
        for block in result.get("content") or []
        if isinstance(block, Mapping) and block.get("type") == "text"
    ]
    return texts[-1] if texts else ""


def run_of(result: Mapping[str, Any]) -> dict[str, Any] | None:
    """The run in a run-shaped result (``structuredContent``, or the JSON mirror)."""
    structured = result.get("structuredContent")
    if not isinstance(structured, dict):
        try:
            structured = json.loads(_text_of(result))
        except ValueError:
            return None
    if not isinstance(structured, dict):
        return None
    if not isinstance(structured.get("runId"), str) or not isinstance(
        structured.get("status"), str
    ):
        return None
    return structured


def run_item_count(run: Mapping[str, Any]) -> int | None:
    dataset = _default_dataset(run)
    count = dataset.get("itemCount") if dataset else None
    return count if isinstance(count, int) and not isinstance(count, bool) else None


def _default_dataset(run: Mapping[str, Any]) -> Mapping[str, Any] | None:
    storages = run.get("storages")
    datasets = storages.get("datasets") if isinstance(storages, Mapping) else None
    default = datasets.get("default") if isinstance(datasets, Mapping) else None
    return default if isinstance(default, Mapping) else None


def usage_of(result: Mapping[str, Any]) -> dict[str, Any] | None:
    """Usage ``_meta``, current (``com.apify/ActorRun``) or pre-0.10 (bare keys) (A.6)."""
    meta = result.get("_meta")
    if not isinstance(meta, Mapping):
        return None
    usage = meta.get(RUN_META_KEY)
    if isinstance(usage, Mapping):
        return dict(usage)
    if "usageTotalUsd" in meta:
        return {"usageTotalUsd": meta.get("usageTotalUsd"), "usageUsd": meta.get("usageUsd")}
    return None


def page_problem(page: Any, *, offset: int, expected: int) -> str | None:
    """Why a dataset page contradicts the run (shape, offset, count), or None (P4, X6)."""
    if not isinstance(page, Mapping) or not isinstance(page.get("items"), list):
        return "the page has no items list"
    count = page.get("itemCount")
    total = page.get("totalItemCount")
    if page.get("offset") != offset:
        return f"asked for offset {offset}, the page says {page.get('offset')!r}"
    if count != len(page["items"]):
        return f"the page holds {len(page['items'])} items but says itemCount={count!r}"
    if total != expected:
        return f"the page says totalItemCount={total!r}, the run reports {expected} items"
    if offset + len(page["items"]) > expected:
        return f"the pages hold more than the {expected} items the run reports"
    return None


def stable_run(run: Mapping[str, Any]) -> dict[str, Any]:
    """The run without its model-facing text (kept out of digests; it is derived)."""
    return {key: value for key, value in run.items() if key not in RUN_VOLATILE_KEYS}


def _summary(run: Mapping[str, Any]) -> str | None:
    summary = run.get("summary")
    return summary if isinstance(summary, str) else None


def _tool_error(request: RequestKind, result: Mapping[str, Any]) -> Outcome:
    """An ``isError`` answer to a run helper: "not found" is X7's, anything else the
    server's failure (retried)."""
    text = _text_of(result)[:300]
    if "not found" in text.lower():
        return Outcome(event=OperationNotFound(detail=text))
    return Outcome(
        event=RequestFailed(request=request, failure=FailureKind.SERVER_ERROR, detail=text)
    )


def _rejected(body: Mapping[str, Any], reason: str) -> Outcome:
    payload = canonical_json(dict(body))
    return Outcome(
        event=SubmitRejected(reason=reason, result_digest=digest_bytes(payload)), payload=payload
    )


Run = tuple[dict[str, Any], dict[str, Any] | None]
"""A run view and its usage ``_meta``."""


class ApifyMapping:
    """P4 at one Apify-style MCP endpoint, for one client process: the exchanges and the
    little state they share (the JSON-RPC channel, what ``initialize`` offered, tool
    bindings, the terminal run views a poll already read)."""

    protocol = PROTOCOL
    version = ADAPTER_VERSION

    def __init__(
        self,
        url: str,
        *,
        clock: Clock,
        wait_secs: int = WAIT_SECS_DEFAULT,
        start_wait_secs: int | None = None,
        page_limit: int = PAGE_LIMIT_DEFAULT,
        abort_gracefully: bool = False,
        submission_keys: bool = False,
        channel: RpcChannel | None = None,
    ) -> None:
        if not 0 <= wait_secs <= WAIT_SECS_MAX:
            raise AdapterError(f"wait_secs must be within 0..{WAIT_SECS_MAX} (the server's cap)")
        start = wait_secs if start_wait_secs is None else start_wait_secs
        if not 0 <= start <= WAIT_SECS_MAX:
            raise AdapterError(
                f"start_wait_secs must be within 0..{WAIT_SECS_MAX} (the server's cap)"
            )
        if page_limit < 1:
            raise AdapterError("page_limit must be at least 1")
        self.url = url
        self.clock = clock
        self.wait_secs = wait_secs
        self.start_wait_secs = start
        self.page_limit = page_limit
        self.abort_gracefully = abort_gracefully
        self.submission_keys = submission_keys
        """The server deduplicates starts by ``dev.longcall/submissionKey`` (S3); learnt
        by :meth:`connect`."""
        self.channel = channel or RpcChannel()
        self.bindings: dict[str, ToolBinding] = {}
        self._runs: dict[str, Run] = {}
        """Last terminal run view and usage by run id (a cache; fetch re-reads)."""

    # --- JSON-RPC --------------------------------------------------------------------------

    def call_tool(
        self, name: str, arguments: Mapping[str, Any], *, wait_secs: int = 0, **meta: Any
    ) -> Exchange[RpcReply]:
        """``tools/call`` of ``name``; a call the server may hold ``wait_secs`` gets that
        long beyond the usual time budget."""
        params: dict[str, Any] = {"name": name, "arguments": dict(arguments)}
        if meta:
            params["_meta"] = meta
        return call(self.channel, "tools/call", params, timeout_s=wait_secs + HTTP_SLACK_S)

    def connect(self) -> Exchange[None]:
        """``initialize`` + ``notifications/initialized``; learns the submission-key
        capability. Raises :class:`AdapterError` when the server does not take them."""
        params = {"protocolVersion": MCP_VERSION, "capabilities": {}, "clientInfo": CLIENT_INFO}
        answer = yield from call(self.channel, "initialize", params)
        if isinstance(answer, TransportFailure) or answer.result is None:
            raise AdapterError(f"initialize at {self.url} failed: {describe_failure(answer)}")
        version = answer.result.get("protocolVersion")
        if isinstance(version, str) and version:
            self.channel.dialect.version = version
        capabilities = answer.result.get("capabilities")
        experimental = (
            capabilities.get("experimental") if isinstance(capabilities, Mapping) else None
        )
        self.submission_keys = isinstance(experimental, Mapping) and isinstance(
            experimental.get(SUBMISSION_KEY_META_KEY), Mapping
        )
        refused = yield from post(
            self.channel, self.channel.notification("notifications/initialized")
        )
        if refused is not None:
            raise AdapterError(f"notifications/initialized at {self.url}: {refused.detail}")

    # --- negotiation (X1) ------------------------------------------------------------------

    def bind(self, tool_name: str) -> Exchange[ToolBinding]:
        listed = yield from list_tools(self.channel, None)
        if not isinstance(listed, list):
            raise AdapterError(f"tools/list at {self.url} failed: {describe_failure(listed)}")
        missing = [helper for helper in HELPERS if find_tool(listed, helper) is None]
        if missing:
            raise AdapterError(f"{self.url} is not Apify-style: no {', '.join(missing)}")
        tool = find_tool(listed, tool_name)
        if tool is None:
            raise UnknownTool(f"{self.url} does not list tool {tool_name!r}")
        listed_binding = tool_binding(
            self.url,
            tool_name,
            tool,
            protocol=PROTOCOL,
            adapter_version=ADAPTER_VERSION,
            task_support="required",
            submission_lookup=False,
        )
        binding = dataclasses.replace(
            listed_binding,
            # X2: no lookup by key here; a resend is safe only when the server deduplicates
            # by our submission key, or the tool itself says it is idempotent.
            idempotent=self.submission_keys or listed_binding.idempotent,
            # The result is the run, its items and usage, not the tool's structured output.
            output_schema=None,
        )
        self.bindings[tool_name] = binding
        return binding

    # --- start (X2) ------------------------------------------------------------------------

    def wait_secs_for(self, record: OperationRecord, wanted: int) -> int:
        """Within the 45 s cap and the operation's overall deadline (X3)."""
        wait = min(WAIT_SECS_MAX, wanted)
        if record.deadline_at is not None:
            wait = min(wait, max(0, int(record.deadline_at - self.clock())))
        return max(0, wait)

    def submit(self, record: OperationRecord, arguments: Mapping[str, Any]) -> Exchange[Outcome]:
        wait = self.wait_secs_for(record, self.start_wait_secs)
        meta = {SUBMISSION_KEY_META_KEY: record.submission_key} if self.submission_keys else {}
        answer = yield from self.call_tool(
            record.tool_name, {**arguments, "waitSecs": wait}, wait_secs=wait, **meta
        )
        if isinstance(answer, TransportFailure) or answer.error is not None:
            return submit_failure(
                answer, failures=JSONRPC_FAILURES, rejecting_codes=REJECTING_CODES
            )
        result = answer.result or {}
        if result.get("isError") is True:
            # The tool refused to start a run (unknown actor, input, auth): no run exists.
            return _rejected(
                {"isError": True, "content": result.get("content")}, _text_of(result)[:200]
            )
        run = run_of(result)
        if run is None:
            return Outcome(event=SubmitOutcomeLost(reason="the start answer carries no run handle"))
        # The early return (status not terminal) and a finished run both start polling:
        # the first get-actor-run reads the terminal and its result phase follows (X6).
        return Outcome(
            event=SubmitAcknowledged(
                operation_id=run["runId"],
                server_status_raw=run["status"],
                status_message=_summary(run),
                poll_interval_s=POLL_INTERVAL_S,
            )
        )

    def lookup(self, record: OperationRecord) -> Exchange[Outcome]:
        return settled(
            unsupported(RequestKind.LOOKUP, "Apify-style servers offer no lookup by submission key")
        )

    # --- polling (X3) ----------------------------------------------------------------------

    def _get_run(
        self, request: RequestKind, run_id: str, wait_secs: int
    ) -> Exchange[Run | Outcome]:
        """``get-actor-run``: our run (its ``runId`` checked, C3) and usage, or the outcome."""
        answer = yield from self.call_tool(
            "get-actor-run", {"runId": run_id, "waitSecs": wait_secs}, wait_secs=wait_secs
        )
        if isinstance(answer, TransportFailure) or answer.error is not None:
            return request_failed(request, answer, JSONRPC_FAILURES)
        result = answer.result or {}
        if result.get("isError") is True:
            return _tool_error(request, result)
        run = run_of(result)
        if run is None:
            return Outcome(
                event=RequestFailed(
                    request=request,
                    failure=FailureKind.MALFORMED_RESPONSE,
                    detail=f"get-actor-run answered no run for {run_id!r}",
                )
            )
        foreign = _check_run_identity(request, run, run_id)
        if foreign is not None:
            return foreign
        return run, usage_of(result)

    def poll(self, record: OperationRecord) -> Exchange[Outcome]:
        run_id = record.operation_id
        if run_id is None:
            return no_operation_id(RequestKind.POLL)
        wait = self.wait_secs_for(record, self.wait_secs)
        got = yield from self._get_run(RequestKind.POLL, run_id, wait)
        if isinstance(got, Outcome):
            return got
        run, usage = got
        return self.map_run(record, run, usage)

    def map_run(
        self, record: OperationRecord, run: Mapping[str, Any], usage: Mapping[str, Any] | None
    ) -> Outcome:
        """One run view (ours: checked by the caller) as an event (the module's table)."""
        status = str(run["status"])
        message = _summary(run)
        if status in WORKING_STATUSES:
            return Outcome(
                event=WorkingObserved(
                    server_status_raw=status,
                    status_message=message,
                    poll_interval_s=POLL_INTERVAL_S,
                    progressed=message != record.status_message,
                )
            )
        if status == "ABORTED":
            payload = canonical_json(stable_run(run))
            return Outcome(
                event=CancellationObserved(
                    result_digest=digest_bytes(payload), server_status_raw=status
                ),
                payload=payload,
            )
        if status in TERMINAL_STATUSES:
            self._runs[str(run["runId"])] = (dict(run), dict(usage) if usage else None)
            terminal = ServerStatus.COMPLETED if status == "SUCCEEDED" else ServerStatus.FAILED
            return Outcome(
                event=TerminalObserved(
                    status=terminal, server_status_raw=status, status_message=message
                )
            )
        return Outcome(
            event=RequestFailed(
                request=RequestKind.POLL,
                failure=FailureKind.MALFORMED_RESPONSE,
                detail=f"unknown run status {status!r}",
            )
        )

    # --- result (X6) -----------------------------------------------------------------------

    def fetch_result(self, record: OperationRecord) -> Exchange[Outcome]:
        run_id = record.operation_id
        if run_id is None:
            return no_operation_id(RequestKind.FETCH)
        cached = self._runs.pop(run_id, None)  # a cache entry is used once
        if cached is None:
            # After a restart (or a failed first fetch): re-read the run, its runId checked
            # exactly as the poll's was (C3).
            got = yield from self._get_run(RequestKind.FETCH, run_id, 0)
            if isinstance(got, Outcome):
                return got
            cached = got
        run, usage = cached
        status = str(run["status"])
        if status not in TERMINAL_STATUSES:
            return Outcome(
                event=ResultFetchFailed(
                    reason=f"the run reads {status} after a terminal was observed",
                    retryable=False,
                )
            )
        dataset = _default_dataset(run)
        items: list[Any] = []
        if dataset is not None and isinstance(dataset.get("id"), str):
            expected = run_item_count(run)
            if expected is None:
                return Outcome(
                    event=ResultFetchFailed(
                        reason="the run's dataset has no itemCount", retryable=True
                    )
                )
            paged = yield from self.read_dataset(str(dataset["id"]), expected)
            if isinstance(paged, Outcome):
                return paged
            items = paged
        payload = canonical_json({"run": stable_run(run), "items": items, "usage": usage})
        succeeded = status == "SUCCEEDED"
        return Outcome(
            event=ResultFetched(
                status=ServerStatus.COMPLETED if succeeded else ServerStatus.FAILED,
                result_kind=ResultKind.VALUE if succeeded else ResultKind.TOOL_ERROR,
                result_digest=digest_bytes(payload),
                empty=succeeded and not items,
                operation_id=run_id,
            ),
            payload=payload,
        )

    def read_dataset(self, dataset: str, expected: int) -> Exchange[list[Any] | Outcome]:
        """Every item, page by page, each page checked against the counts (X6)."""
        items: list[Any] = []
        for _page in range(PAGES_MAX):
            if len(items) >= expected and items:
                break
            answer = yield from self.call_tool(
                "get-dataset-items",
                {"datasetId": dataset, "offset": len(items), "limit": self.page_limit},
            )
            if isinstance(answer, TransportFailure) or answer.error is not None:
                return request_failed(RequestKind.FETCH, answer, JSONRPC_FAILURES)
            result = answer.result or {}
            if result.get("isError") is True:
                return Outcome(
                    event=ResultFetchFailed(reason=_text_of(result)[:300], retryable=True)
                )
            page = result.get("structuredContent")
            problem = page_problem(page, offset=len(items), expected=expected)
            if problem is not None:
                return Outcome(
                    event=ResultFetchFailed(reason=f"dataset {dataset}: {problem}", retryable=False)
                )
            assert isinstance(page, Mapping)
            items.extend(page["items"])
            if not page["items"]:
                break
        if len(items) != expected:
            return Outcome(
                event=ResultFetchFailed(
                    reason=f"dataset {dataset}: read {len(items)} items, the run reports"
                    f" {expected}",
                    retryable=False,
                )
            )
        return items

    # --- cancel and input (X5, X4) ---------------------------------------------------------

    def cancel(self, record: OperationRecord) -> Exchange[Outcome]:
        run_id = record.operation_id
        if run_id is None:
            return no_operation_id(RequestKind.CANCEL)
        arguments: dict[str, Any] = {"runId": run_id}
        if self.abort_gracefully:
            arguments["gracefully"] = True
        answer = yield from self.call_tool("abort-actor-run", arguments)
        if isinstance(answer, TransportFailure) or answer.error is not None:
            return request_failed(RequestKind.CANCEL, answer, JSONRPC_FAILURES)
        result = answer.result or {}
        if result.get("isError") is True:
            return _tool_error(RequestKind.CANCEL, result)
        run = run_of(result)
        if run is None:
            return Outcome(event=CancelAcknowledged(cancel_generation=record.cancel_generation))
        foreign = _check_run_identity(RequestKind.CANCEL, run, run_id)
        if foreign is not None:
            return foreign
        status = run["status"]
        if status == "ABORTED":
            # The run record after the abort already shows the terminal: that is proof.
            return self.map_run(record, run, None)
        if status in TERMINAL_STATUSES:
            # X5: the run ended first; read that terminal, never rewrite it as cancelled.
            return Outcome(event=CancelRefused(reason=f"the run is already {status}"))
        return Outcome(event=CancelAcknowledged(cancel_generation=record.cancel_generation))

    def send_input(
        self, record: OperationRecord, answers: Mapping[str, Any]
    ) -> Exchange[Outcome | None]:
        return settled(unsupported(RequestKind.INPUT, "Apify-style runs take no input"))


def _check_run_identity(
    request: RequestKind, run: Mapping[str, Any], run_id: str
) -> Outcome | None:
    """C3: a run view naming another run is not ours (never read as ours)."""
    if run.get("runId") != run_id:
        return foreign_identity(
            request, f"asked about run {run_id!r}, the server answered for {run.get('runId')!r}"
        )
    return None


__all__ = [
    "ADAPTER_VERSION",
    "FAILED_STATUSES",
    "HELPERS",
    "HTTP_SLACK_S",
    "JSONRPC_FAILURES",
    "MCP_VERSION",
    "PAGES_MAX",
    "PAGE_LIMIT_DEFAULT",
    "POLL_INTERVAL_S",
    "PROTOCOL",
    "REJECTING_CODES",
    "RUN_META_KEY",
    "RUN_VOLATILE_KEYS",
    "SUBMISSION_KEY_META_KEY",
    "TERMINAL_STATUSES",
    "WAIT_SECS_DEFAULT",
    "WAIT_SECS_MAX",
    "WORKING_STATUSES",
    "ApifyMapping",
    "Clock",
    "model_text",
    "page_problem",
    "run_item_count",
    "run_of",
    "stable_run",
    "usage_of",
]
