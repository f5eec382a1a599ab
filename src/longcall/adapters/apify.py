"""P4: Apify-style "early return + poll" tools over MCP, client side.

Owns: the wire ⇄ event mapping of an Apify-style MCP server (the reference Apify MCP
server's shapes): the start call of a direct Actor tool, whose early return (a run
handle with ``status`` not terminal) maps the ``runId`` to the operation id; polling
with ``get-actor-run`` inside the 45 s ``waitSecs`` cap and under the operation's
overall deadline; the result read page by page with ``get-dataset-items`` (never the
whole dataset in one call), checked against the run's item count; cancel as
``abort-actor-run``; and :data:`JSONRPC_FAILURES`, this adapter's table from JSON-RPC
codes to core failure kinds (X9). Both failure channels are checked on every call: a
JSON-RPC ``error`` and a tool result with ``isError: true`` (X9).

Must not: decide what happens next (the core does), keep state the ledger does not
(the last run view is a cache; ``fetch_result`` re-reads after a restart), import
``longcall.ledger``/``runtime``/``server``, or raise for a remote failure.

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
``isError`` "Run … not found"  ``OperationNotFound`` (X7)
JSON-RPC error                ``RequestFailed`` by :data:`JSONRPC_FAILURES` (-32602 is
                              VALIDATION: never retried)
============================  ======================================================

The result payload is ``{"run": …, "items": […], "usage": _meta["com.apify/ActorRun"]}``
in canonical JSON. A dataset page whose ``items`` contradict its ``itemCount``, its
``offset``, or the run's item count → ``ResultFetchFailed`` (not retried): the core
hands the operation to an operator with the reason; nothing is accepted.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Mapping
from typing import Any

import httpx

from longcall.adapters.base import Adapter, AdapterError, Outcome, ToolBinding, UnknownTool
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
from longcall.core.keys import canonical_json, digest_bytes, digest_json
from longcall.core.record import OperationRecord, ResultKind, ServerStatus
from longcall.core.retry import FailureKind, RequestKind

PROTOCOL = "apify"
ADAPTER_VERSION = "1"
MCP_VERSION = "2025-11-25"
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
HELPERS = ("get-actor-run", "get-dataset-items", "abort-actor-run")
WORKING_STATUSES = frozenset({"READY", "RUNNING", "TIMING-OUT", "ABORTING"})
FAILED_STATUSES = frozenset({"FAILED", "TIMED-OUT"})
RUN_VOLATILE_KEYS = frozenset({"summary", "nextStep"})

JSONRPC_FAILURES: Mapping[int, FailureKind] = {
    -32700: FailureKind.BAD_REQUEST,
    -32600: FailureKind.BAD_REQUEST,
    -32601: FailureKind.BAD_REQUEST,
    -32602: FailureKind.VALIDATION,
    -32603: FailureKind.SERVER_ERROR,
}
"""X9: JSON-RPC error code → failure kind; an unknown code is not retried."""


class _Answer:
    """One JSON-RPC answer: ``result`` or ``error``, or a wire ``failure``."""

    def __init__(
        self,
        *,
        result: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
        failure: FailureKind | None = None,
        detail: str = "",
        processed_possible: bool = True,
        retry_after_s: float | None = None,
    ) -> None:
        self.result = result
        self.error = error
        self.failure = failure
        self.detail = detail
        self.processed_possible = processed_possible
        self.retry_after_s = retry_after_s


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


class ApifyAdapter(Adapter):
    """P4 at one Apify-style MCP endpoint (e.g. ``http://host/apify/mcp``)."""

    protocol = PROTOCOL
    version = ADAPTER_VERSION

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        wait_secs: int = WAIT_SECS_DEFAULT,
        start_wait_secs: int | None = None,
        page_limit: int = PAGE_LIMIT_DEFAULT,
        abort_gracefully: bool = False,
        http: httpx.AsyncClient | None = None,
        clock: Any = time.time,
    ) -> None:
        if not 0 <= wait_secs <= WAIT_SECS_MAX:
            raise AdapterError(f"wait_secs must be within 0..{WAIT_SECS_MAX} (the server's cap)")
        self.url = url
        self.wait_secs = wait_secs
        self.start_wait_secs = wait_secs if start_wait_secs is None else start_wait_secs
        self.page_limit = page_limit
        self.abort_gracefully = abort_gracefully
        self.clock = clock
        headers = {"accept": "application/json, text/event-stream"}
        if token:
            headers["authorization"] = f"Bearer {token}"
        self._owns_http = http is None
        self.http = http or httpx.AsyncClient(
            timeout=httpx.Timeout(WAIT_SECS_MAX + HTTP_SLACK_S, connect=5.0), headers=headers
        )
        self._ids = itertools.count(1)
        self.submission_keys = False
        """The server deduplicates creates by ``dev.longcall/submissionKey`` (S3)."""
        self._bindings: dict[str, ToolBinding] = {}
        self._runs: dict[str, tuple[dict[str, Any], dict[str, Any] | None]] = {}
        """Last terminal run view and usage by run id (a cache; fetch re-reads)."""

    # --- JSON-RPC ------------------------------------------------------------------------

    async def _rpc(self, method: str, params: Mapping[str, Any]) -> _Answer:
        body = {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": dict(params)}
        try:
            reply = await self.http.post(self.url, json=body)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            return _Answer(
                failure=FailureKind.CONNECT_FAILED, detail=repr(exc), processed_possible=False
            )
        except httpx.TimeoutException as exc:
            return _Answer(failure=FailureKind.TIMEOUT, detail=repr(exc))
        except httpx.HTTPError as exc:
            return _Answer(failure=FailureKind.TRANSPORT, detail=repr(exc))
        if reply.status_code in (401, 403, 429) or reply.status_code >= 500:
            kind = {
                401: FailureKind.UNAUTHORIZED,
                403: FailureKind.FORBIDDEN,
                429: FailureKind.RATE_LIMITED,
                503: FailureKind.UNAVAILABLE,
            }.get(reply.status_code, FailureKind.SERVER_ERROR)
            return _Answer(
                failure=kind,
                detail=f"HTTP {reply.status_code}: {reply.text[:200]}",
                processed_possible=reply.status_code >= 500,
                retry_after_s=_retry_after(reply.headers.get("retry-after")),
            )
        message = _message_of(reply)
        if message is None or message.get("id") not in (body["id"], None):
            return _Answer(
                failure=FailureKind.MALFORMED_RESPONSE,
                detail=f"HTTP {reply.status_code}: not a JSON-RPC answer to {method}",
            )
        error = message.get("error")
        if isinstance(error, dict) and isinstance(error.get("code"), int):
            return _Answer(error=error)
        result = message.get("result")
        if not isinstance(result, dict):
            return _Answer(
                failure=FailureKind.MALFORMED_RESPONSE, detail=f"{method}: no result object"
            )
        return _Answer(result=result)

    async def _tool(self, name: str, arguments: Mapping[str, Any], **meta: Any) -> _Answer:
        params: dict[str, Any] = {"name": name, "arguments": dict(arguments)}
        if meta:
            params["_meta"] = meta
        return await self._rpc("tools/call", params)

    async def connect(self) -> None:
        """``initialize`` + ``notifications/initialized``; learns the submission-key capability."""
        answer = await self._rpc(
            "initialize",
            {
                "protocolVersion": MCP_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "longcall", "version": ADAPTER_VERSION},
            },
        )
        if answer.result is None:
            raise AdapterError(f"initialize at {self.url} failed: {_describe(answer)}")
        capabilities = answer.result.get("capabilities") or {}
        experimental = capabilities.get("experimental") if isinstance(capabilities, dict) else None
        self.submission_keys = isinstance(experimental, dict) and isinstance(
            experimental.get(SUBMISSION_KEY_META_KEY), dict
        )
        try:
            await self.http.post(
                self.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}
            )
        except httpx.HTTPError as exc:
            raise AdapterError(f"notifications/initialized at {self.url}: {exc!r}") from exc

    # --- negotiation (X1) --------------------------------------------------------------

    async def bind(self, tool_name: str) -> ToolBinding:
        answer = await self._rpc("tools/list", {})
        if answer.result is None or not isinstance(answer.result.get("tools"), list):
            raise AdapterError(f"tools/list at {self.url} failed: {_describe(answer)}")
        tools = {t.get("name"): t for t in answer.result["tools"] if isinstance(t, dict)}
        missing = [helper for helper in HELPERS if helper not in tools]
        if missing:
            raise AdapterError(f"{self.url} is not Apify-style: no {', '.join(missing)}")
        tool = tools.get(tool_name)
        if tool is None:
            raise UnknownTool(f"{self.url} does not list tool {tool_name!r}")
        annotations = tool.get("annotations") or {}
        binding = ToolBinding(
            server=self.url,
            tool_name=tool_name,
            protocol=PROTOCOL,
            adapter_version=ADAPTER_VERSION,
            descriptor_digest=digest_json(tool),
            task_support="required",
            # X2: no lookup by key here; a resend is safe only when the server deduplicates
            # by our submission key, or the tool itself says it is idempotent.
            idempotent=self.submission_keys or annotations.get("idempotentHint") is True,
            submission_lookup=False,
        )
        self._bindings[tool_name] = binding
        return binding

    # --- start (X2) ------------------------------------------------------------------------

    async def submit(self, record: OperationRecord, arguments: Mapping[str, Any]) -> Outcome:
        args = {**arguments, "waitSecs": self._wait_secs(record, self.start_wait_secs)}
        meta = {SUBMISSION_KEY_META_KEY: record.submission_key} if self.submission_keys else {}
        answer = await self._tool(record.tool_name, args, **meta)
        if answer.failure is not None:
            if answer.processed_possible:
                return Outcome(event=SubmitOutcomeLost(reason=answer.detail))
            return _failed(RequestKind.SUBMIT, answer)
        if answer.error is not None:
            code = answer.error.get("code")
            if code in (-32602, -32601, -32600):
                return _rejected(answer.error, f"JSON-RPC {code}: {answer.error.get('message')}")
            return Outcome(event=SubmitOutcomeLost(reason=_describe(answer)))
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

    async def lookup(self, record: OperationRecord) -> Outcome:
        return Outcome(
            event=RequestFailed(
                request=RequestKind.LOOKUP,
                failure=FailureKind.BAD_REQUEST,
                detail="Apify-style servers offer no lookup by submission key",
            )
        )

    # --- polling (X3) ------------------------------------------------------------------------

    def _wait_secs(self, record: OperationRecord, wanted: int) -> int:
        """Within the 45 s cap and the operation's overall deadline (X3)."""
        wait = min(WAIT_SECS_MAX, wanted)
        if record.deadline_at is not None:
            wait = min(wait, max(0, int(record.deadline_at - self.clock())))
        return max(0, wait)

    async def _get_run(
        self, record: OperationRecord, request: RequestKind, wait_secs: int
    ) -> tuple[dict[str, Any], dict[str, Any] | None] | Outcome:
        run_id = record.operation_id
        if run_id is None:
            return _no_id(request)
        answer = await self._tool("get-actor-run", {"runId": run_id, "waitSecs": wait_secs})
        if answer.failure is not None or answer.error is not None:
            return _failed(request, answer)
        result = answer.result or {}
        if result.get("isError") is True:
            text = _text_of(result)
            if "not found" in text.lower():
                return Outcome(event=OperationNotFound(detail=text[:300]))
            return Outcome(
                event=RequestFailed(
                    request=request, failure=FailureKind.SERVER_ERROR, detail=text[:300]
                )
            )
        run = run_of(result)
        if run is None or run["runId"] != run_id:
            return Outcome(
                event=RequestFailed(
                    request=request,
                    failure=FailureKind.MALFORMED_RESPONSE,
                    detail=f"get-actor-run answered no run {run_id!r}",
                )
            )
        return run, usage_of(result)

    async def poll(self, record: OperationRecord) -> Outcome:
        got = await self._get_run(record, RequestKind.POLL, self._wait_secs(record, self.wait_secs))
        if isinstance(got, Outcome):
            return got
        run, usage = got
        return self.map_run(record, run, usage)

    def map_run(
        self, record: OperationRecord, run: Mapping[str, Any], usage: Mapping[str, Any] | None
    ) -> Outcome:
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
        if status == "SUCCEEDED" or status in FAILED_STATUSES:
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

    # --- result (X6) ---------------------------------------------------------------------

    async def fetch_result(self, record: OperationRecord) -> Outcome:
        run_id = record.operation_id
        if run_id is None:
            return _no_id(RequestKind.FETCH)
        cached = self._runs.pop(run_id, None)
        if cached is None:
            got = await self._get_run(record, RequestKind.FETCH, 0)
            if isinstance(got, Outcome):
                return got
            cached = got
        run, usage = cached
        status = str(run["status"])
        if status != "SUCCEEDED" and status not in FAILED_STATUSES:
            return Outcome(
                event=ResultFetchFailed(
                    reason=f"the run reads {status} after a terminal was observed",
                    retryable=False,
                )
            )
        expected = run_item_count(run)
        dataset = _default_dataset(run)
        items: list[Any] = []
        if dataset is not None and isinstance(dataset.get("id"), str):
            if expected is None:
                return Outcome(
                    event=ResultFetchFailed(
                        reason="the run's dataset has no itemCount", retryable=True
                    )
                )
            paged = await self._read_dataset(str(dataset["id"]), expected)
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

    async def _read_dataset(self, dataset: str, expected: int) -> list[Any] | Outcome:
        """Every item, page by page, each page checked against the counts (X6)."""
        items: list[Any] = []
        for _page in range(PAGES_MAX):
            if len(items) >= expected and items:
                break
            answer = await self._tool(
                "get-dataset-items",
                {"datasetId": dataset, "offset": len(items), "limit": self.page_limit},
            )
            if answer.failure is not None or answer.error is not None:
                return _failed(RequestKind.FETCH, answer)
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

    # --- cancel and input (X5, X4) ------------------------------------------------------

    async def cancel(self, record: OperationRecord) -> Outcome:
        run_id = record.operation_id
        if run_id is None:
            return _no_id(RequestKind.CANCEL)
        arguments: dict[str, Any] = {"runId": run_id}
        if self.abort_gracefully:
            arguments["gracefully"] = True
        answer = await self._tool("abort-actor-run", arguments)
        if answer.failure is not None or answer.error is not None:
            return _failed(RequestKind.CANCEL, answer)
        result = answer.result or {}
        if result.get("isError") is True:
            text = _text_of(result)
            if "not found" in text.lower():
                return Outcome(event=OperationNotFound(detail=text[:300]))
            return Outcome(
                event=RequestFailed(
                    request=RequestKind.CANCEL, failure=FailureKind.SERVER_ERROR, detail=text
                )
            )
        run = run_of(result)
        status = run.get("status") if run else None
        if status == "ABORTED" and run is not None:
            # The run record after the abort already shows the terminal: that is proof.
            return self.map_run(record, run, None)
        if status in ("SUCCEEDED", "FAILED", "TIMED-OUT"):
            # X5: the run ended first; read that terminal, never rewrite it as cancelled.
            return Outcome(event=CancelRefused(reason=f"the run is already {status}"))
        return Outcome(event=CancelAcknowledged(cancel_generation=record.cancel_generation))

    async def send_input(
        self, record: OperationRecord, answers: Mapping[str, Any]
    ) -> Outcome | None:
        return Outcome(
            event=RequestFailed(
                request=RequestKind.INPUT,
                failure=FailureKind.BAD_REQUEST,
                detail="Apify-style runs take no input",
            )
        )

    async def aclose(self) -> None:
        if self._owns_http:
            await self.http.aclose()


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


def _message_of(reply: httpx.Response) -> dict[str, Any] | None:
    text = reply.text
    if reply.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
        text = data[-1] if data else ""
    try:
        message = json.loads(text)
    except ValueError:
        return None
    return message if isinstance(message, dict) and message.get("jsonrpc") == "2.0" else None


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def _describe(answer: _Answer) -> str:
    if answer.error is not None:
        return f"JSON-RPC {answer.error.get('code')}: {answer.error.get('message')}"
    return answer.detail


def _failed(request: RequestKind, answer: _Answer) -> Outcome:
    if answer.error is not None:
        code = answer.error.get("code")
        failure = (
            JSONRPC_FAILURES.get(code, FailureKind.BAD_REQUEST)
            if isinstance(code, int)
            else (FailureKind.BAD_REQUEST)
        )
        return Outcome(
            event=RequestFailed(request=request, failure=failure, detail=_describe(answer))
        )
    return Outcome(
        event=RequestFailed(
            request=request,
            failure=answer.failure or FailureKind.TRANSPORT,
            detail=answer.detail,
            retry_after_s=answer.retry_after_s,
        )
    )


def _rejected(body: Mapping[str, Any], reason: str) -> Outcome:
    payload = canonical_json(dict(body))
    return Outcome(
        event=SubmitRejected(reason=reason, result_digest=digest_bytes(payload)), payload=payload
    )


def _no_id(request: RequestKind) -> Outcome:
    return Outcome(
        event=RequestFailed(
            request=request, failure=FailureKind.BAD_REQUEST, detail="the record has no run id"
        )
    )
