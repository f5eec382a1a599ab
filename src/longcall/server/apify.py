"""An Apify-style MCP endpoint at ``/apify/mcp``: early return + poll tools (S8, P4, O4).

Owns: the wire of the reference Apify MCP server (reference doc Part A) for the
server's task tools — each served as a direct "Actor tool" (``longcall--<name>``) with
the injected ``waitSecs`` (0–45, default 30): the call starts a run, waits at most
``waitSecs`` and returns early with the run handle (structured part: ``runId``,
``status``, storages with the dataset id and item count; text part: the summary and
the exact next call) — and the helper tools ``get-actor-run``, ``get-dataset-items``,
``get-key-value-store-record`` and ``abort-actor-run``; the eight run statuses; the
usage ``_meta`` (``com.apify/ActorRun``); AJV-like argument handling (unknown
arguments dropped, ``"30"`` coerced, violations as JSON-RPC -32602 in the reference's
message shape). FAILED, ABORTED and TIMED-OUT are answered with ``isError: false``, as
the reference does: an observed terminal is a successful observation.

Must not: keep a store or run tools of its own — a run *is* a task of the server's
durable store (protocol ``apify``) run by the same task manager (S2, S4, S5); nor speak
MCP tasks (like the reference's stateless adapter, ``tasks/*`` are not offered).

Mapping of stored tasks to runs: ``working``/``input_required`` → RUNNING (READY before
the first update; TIMING-OUT past the run's ``timeoutSecs``; ABORTING during a graceful
abort); ``completed`` → SUCCEEDED, or FAILED when the tool reported ``isError``;
``failed`` → FAILED, or TIMED-OUT for the facade's time-out error; ``cancelled`` →
ABORTED. The default dataset holds the first list in the tool's structured result (or
the structured result as one item); the key-value store holds ``INPUT`` and ``OUTPUT``.
Items are written when the run ends (the reference tools produce their output at the
end), so a RUNNING run reports no "results so far".

Time: ``time_scale`` is real seconds per facade second (tests use 0.01, so a 30 s
``waitSecs`` window takes 0.3 s); every number a client reads is in facade seconds.
Time-outs and graceful aborts are enforced when the run is next observed.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from longcall import __version__
from longcall.server.app import LongcallServer
from longcall.server.errors import (
    InvalidParams,
    JsonRpcError,
    StoreUnavailable,
    TaskNotFound,
    ToolCallError,
)
from longcall.server.front import (
    REASON_STORE_UNAVAILABLE,
    admit,
    guarded_jsonrpc,
    read_jsonrpc,
    store_unavailable,
)
from longcall.server.model import (
    ACTIVE_STATUSES,
    Principal,
    ProtocolVersion,
    TaskRecord,
    TaskStatus,
)
from longcall.server.states import Cause
from longcall.server.tools import ToolSpec

logger = logging.getLogger(__name__)

PATH = "/apify/mcp"
PROTOCOL = ProtocolVersion.APIFY
USERNAME = "longcall"
WAIT_SECS_MAX = 45
"""Stays under the 60 s tool-call ceiling several MCP clients impose (reference A.3)."""
WAIT_SECS_DEFAULT = 30
POLL_HINT_WAIT_SECS = 30
GRACEFUL_ABORT_S = 30.0
TIMING_OUT_GRACE_S = 5.0
TIMED_OUT_CODE = -32001
TIMED_OUT_MESSAGE = "Run-time limit reached"
DATASET_LIMIT_DEFAULT = 20
KV_KEYS_MAX = 50
USD_PER_SECOND = 0.00005
MEM_MAX_BYTES = 268435456
RUN_META_KEY = "com.apify/ActorRun"
SUBMISSION_KEY_META_KEY = "dev.longcall/submissionKey"
SUPPORTED_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26")
TERMINAL = frozenset({"SUCCEEDED", "FAILED", "ABORTED", "TIMED-OUT"})
JSON_CONTENT_TYPE = "application/json; charset=utf-8"
CHECK_SCHEMA_HINT = (
    "Please check the tool's input schema using fetch-actor-details tool and ensure all"
    " required parameters are provided with correct types and values."
)

WAIT_SECS_ACTOR_SCHEMA: dict[str, Any] = {
    "type": "integer",
    "minimum": 0,
    "maximum": WAIT_SECS_MAX,
    "default": WAIT_SECS_DEFAULT,
    "description": "Max seconds (0–45, default 30) to cap the wait for the Actor run to reach"
    " terminal state. For long-running Actors the response returns at the cap with the current"
    " run status; follow `nextStep` to poll via get-actor-run. Set to 0 to fire-and-forget.",
}
TIMEOUT_SECS_SCHEMA: dict[str, Any] = {
    "type": "number",
    "minimum": 0,
    "description": "Maximum runtime of the run in seconds; 0 or absent means no limit.",
}
HELPER_SCHEMAS: dict[str, dict[str, Any]] = {
    "get-actor-run": {
        "type": "object",
        "properties": {
            "runId": {"type": "string", "minLength": 1, "description": "The ID of the Actor run."},
            "waitSecs": {
                "default": WAIT_SECS_DEFAULT,
                "description": "Maximum seconds to wait for the run to reach a terminal state"
                " (SUCCEEDED, FAILED, ABORTED, TIMED-OUT).\n0 returns immediately with the"
                " current status. Cap: 45. Default: 30.",
                "type": "integer",
                "minimum": 0,
                "maximum": WAIT_SECS_MAX,
            },
        },
        "required": ["runId"],
        "additionalProperties": False,
    },
    "abort-actor-run": {
        "type": "object",
        "properties": {
            "runId": {
                "type": "string",
                "minLength": 1,
                "description": "The ID of the Actor run to abort.",
            },
            "gracefully": {
                "description": "If true, the Actor run will abort gracefully with a 30-second"
                " timeout.",
                "type": "boolean",
            },
        },
        "required": ["runId"],
        "additionalProperties": False,
    },
    "get-dataset-items": {
        "type": "object",
        "properties": {
            "datasetId": {
                "type": "string",
                "minLength": 1,
                "description": "Dataset ID or username~dataset-name.",
            },
            "clean": {
                "description": "If true, returns only non-empty items and skips hidden fields"
                " (starting with #). Shortcut for skipHidden=true and skipEmpty=true.",
                "type": "boolean",
            },
            "offset": {
                "description": "Number of items to skip at the start. Default is 0.",
                "type": "number",
            },
            "limit": {
                "description": "Maximum number of items to return. Default is 20.",
                "type": "integer",
                "minimum": 1,
                "maximum": 9007199254740991,
            },
            "fields": {
                "description": "Comma-separated list of fields to include in results.",
                "type": "string",
            },
            "omit": {
                "description": "Comma-separated list of fields to exclude from results.",
                "type": "string",
            },
            "desc": {
                "description": "If true, results are returned in reverse order (newest to oldest).",
                "type": "boolean",
            },
            "flatten": {
                "description": "Comma-separated list of fields to flatten.",
                "type": "string",
            },
        },
        "required": ["datasetId"],
        "additionalProperties": False,
    },
    "get-key-value-store-record": {
        "type": "object",
        "properties": {
            "keyValueStoreId": {
                "type": "string",
                "minLength": 1,
                "description": "Key-value store ID or username~store-name.",
            },
            "recordKey": {
                "type": "string",
                "minLength": 1,
                "description": "Key of the record to retrieve.",
            },
        },
        "required": ["keyValueStoreId", "recordKey"],
        "additionalProperties": False,
    },
}
HELPER_ANNOTATIONS: dict[str, dict[str, Any]] = {
    "get-actor-run": {
        "title": "Get Actor run",
        "readOnlyHint": True,
        "destructiveHint": False,
        "idempotentHint": True,
        "openWorldHint": False,
    },
    "abort-actor-run": {
        "title": "Abort Actor run",
        "readOnlyHint": False,
        "destructiveHint": True,
        "idempotentHint": True,
        "openWorldHint": False,
    },
    "get-dataset-items": {
        "title": "Get dataset items",
        "readOnlyHint": True,
        "destructiveHint": False,
        "idempotentHint": True,
        "openWorldHint": False,
    },
    "get-key-value-store-record": {
        "title": "Get key-value store record",
        "readOnlyHint": True,
        "destructiveHint": False,
        "idempotentHint": True,
        "openWorldHint": False,
    },
}
RUN_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "runId": {"type": "string"},
        "actorId": {"type": "string"},
        "actorName": {"type": "string"},
        "status": {
            "type": "string",
            "description": "READY | RUNNING | TIMING-OUT | TIMED-OUT | ABORTING | ABORTED |"
            " SUCCEEDED | FAILED",
        },
        "storages": {"type": "object"},
        "summary": {"type": "string"},
        "nextStep": {"type": "string"},
    },
    "required": ["runId", "actorId", "status", "storages", "summary", "nextStep"],
}


def actor_tool_name(tool: str) -> str:
    return f"{USERNAME}--{tool.replace('_', '-')}"


DATASET_PREFIX = "dataset-"
KV_STORE_PREFIX = "kvstore-"


def dataset_id(run_id: str) -> str:
    """A run's default dataset id (the run id inside: no second index to keep)."""
    return DATASET_PREFIX + run_id


def kv_store_id(run_id: str) -> str:
    return KV_STORE_PREFIX + run_id


def iso(seconds: float) -> str:
    moment = datetime.fromtimestamp(seconds, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _first_text(result: Mapping[str, Any]) -> str | None:
    for block in result.get("content") or []:
        if isinstance(block, Mapping) and block.get("type") == "text":
            return str(block.get("text"))
    return None


def dataset_items(record: TaskRecord) -> list[Any]:
    """The run's default dataset: written when the run succeeded or timed out."""
    result = record.result or {}
    if record.status is not TaskStatus.COMPLETED or result.get("isError"):
        return []
    structured = result.get("structuredContent")
    if isinstance(structured, Mapping):
        for value in structured.values():
            if isinstance(value, list):
                return list(value)
        return [dict(structured)]
    return []


def kv_records(record: TaskRecord) -> dict[str, Any]:
    records: dict[str, Any] = {"INPUT": record.arguments}
    if record.status is TaskStatus.COMPLETED and record.result is not None:
        structured = record.result.get("structuredContent")
        records["OUTPUT"] = structured if structured is not None else _first_text(record.result)
    return records


def _fields(items: list[Any]) -> list[str]:
    fields: list[str] = []
    for item in items[:100]:
        if isinstance(item, Mapping):
            for key, value in item.items():
                if key not in fields and value not in ("", [], {}, None):
                    fields.append(str(key))
    return fields


def _message_part(message: str | None, fallback: str) -> str:
    if message:
        return f' Actor status: "{message.rstrip(".")}".'
    return fallback


@dataclass(frozen=True, slots=True)
class RunView:
    """What one observation of a run shows a client (facade seconds)."""

    record: TaskRecord
    status: str
    elapsed_s: int
    run_time_s: float
    items: list[Any]


class ApifyFacade:
    """The Apify-style MCP endpoint of one :class:`LongcallServer` (S8)."""

    def __init__(
        self,
        server: LongcallServer,
        *,
        time_scale: float = 1.0,
        path: str = PATH,
        truncate_dataset_page_at: int | None = None,
    ) -> None:
        if time_scale <= 0:
            raise ValueError("time_scale must be positive (real seconds per facade second)")
        self.server = server
        self.manager = server.manager
        self.registry = server.registry
        self.time_scale = time_scale
        self.path = path
        self._truncate_at = truncate_dataset_page_at
        self._dataset_calls = 0

    def routes(self) -> list[Route]:
        endpoint = guarded_jsonrpc(self.endpoint, self.server.metrics.observe_refused)
        return [Route(self.path, endpoint, methods=["GET", "POST", "DELETE"])]

    # ---- JSON-RPC framing -----------------------------------------------------------------

    async def endpoint(self, request: Request) -> Response:
        """The front door's checks, then one JSON-RPC request (S8)."""
        admitted = await admit(request, self.server.options, self.server.authenticate)
        if request.method != "POST":
            return Response(status_code=405)
        message = await read_jsonrpc(request, admitted, self.server.options)
        if "method" not in message or "id" not in message:
            return Response(status_code=202)
        request_id = message.get("id")
        params = message.get("params") or {}
        if not isinstance(params, dict):
            return _rpc_error(request_id, -32602, "params must be an object")
        try:
            result = await self._dispatch(str(message["method"]), params, admitted.principal)
        except JsonRpcError as exc:
            return _rpc_error(request_id, exc.code, exc.message, data=exc.data)
        except StoreUnavailable as exc:
            self.server.metrics.observe_refused(REASON_STORE_UNAVAILABLE)
            return store_unavailable(request_id, exc)
        except Exception:
            logger.exception("internal error answering %s", message["method"])
            return _rpc_error(request_id, -32603, "Internal error", status=500)
        return JSONResponse({"jsonrpc": "2.0", "id": request_id, "result": result})

    async def _dispatch(
        self, method: str, params: dict[str, Any], principal: Principal
    ) -> dict[str, Any]:
        if method == "initialize":
            requested = params.get("protocolVersion")
            version = requested if requested in SUPPORTED_VERSIONS else SUPPORTED_VERSIONS[0]
            return {
                "protocolVersion": version,
                "capabilities": {
                    "tools": {},
                    # S3: a create carrying this _meta key is deduplicated per principal.
                    "experimental": {
                        SUBMISSION_KEY_META_KEY: {"storeId": self.manager.store.store_id}
                    },
                },
                "serverInfo": {"name": "longcall-apify", "version": __version__},
            }
        if method == "ping":
            return {}
        if method == "tools/list":
            return {"tools": self.tool_list()}
        if method == "tools/call":
            return await self._call(params, principal)
        raise JsonRpcError(-32601, f"Method not found: {method}")

    # ---- tools ----------------------------------------------------------------------------

    def _actor_specs(self) -> dict[str, ToolSpec]:
        return {
            actor_tool_name(spec.name): spec
            for spec in self.registry
            if spec.task_support != "forbidden"
        }

    def tool_list(self) -> list[dict[str, Any]]:
        tools: list[dict[str, Any]] = []
        for name, spec in self._actor_specs().items():
            schema = json.loads(json.dumps(spec.input_schema))
            schema.setdefault("properties", {})
            schema["properties"]["waitSecs"] = dict(WAIT_SECS_ACTOR_SCHEMA)
            schema["properties"]["timeoutSecs"] = dict(TIMEOUT_SECS_SCHEMA)
            tools.append(
                {
                    "name": name,
                    "description": spec.description,
                    "inputSchema": schema,
                    "outputSchema": RUN_OUTPUT_SCHEMA,
                    "annotations": {
                        "title": f"{USERNAME}/{spec.name.replace('_', '-')}",
                        "readOnlyHint": False,
                        "destructiveHint": True,
                        "openWorldHint": True,
                        "idempotentHint": spec.idempotent,
                    },
                    "execution": {"taskSupport": "forbidden"},
                }
            )
        for name, schema in HELPER_SCHEMAS.items():
            tools.append(
                {
                    "name": name,
                    "description": HELPER_ANNOTATIONS[name]["title"],
                    "inputSchema": schema,
                    "annotations": HELPER_ANNOTATIONS[name],
                }
            )
        return tools

    async def _call(self, params: dict[str, Any], principal: Principal) -> dict[str, Any]:
        name = params.get("name")
        arguments = params.get("arguments")
        actors = self._actor_specs()
        if name not in actors and name not in HELPER_SCHEMAS:
            available = ", ".join([*actors, *HELPER_SCHEMAS])
            raise _invalid(f'Tool "{name}" was not found.\nAvailable tools: {available}')
        if not isinstance(arguments, dict):
            raise _invalid(f'Missing arguments for tool "{name}".')
        try:
            if name in actors:
                return await self._start_run(actors[name], arguments, params, principal)
            arguments = validate(str(name), HELPER_SCHEMAS[str(name)], arguments)
            match name:
                case "get-actor-run":
                    return await self._get_run(arguments, principal)
                case "abort-actor-run":
                    return await self._abort_run(arguments, principal)
                case "get-dataset-items":
                    return await self._dataset_items(arguments, principal)
                case _:
                    return await self._kv_record(arguments, principal)
        except ToolCallError as exc:
            return {"content": [{"type": "text", "text": str(exc)}], "isError": True}

    async def _start_run(
        self,
        spec: ToolSpec,
        arguments: dict[str, Any],
        params: Mapping[str, Any],
        principal: Principal,
    ) -> dict[str, Any]:
        name = actor_tool_name(spec.name)
        schema = {
            "type": "object",
            "properties": {"waitSecs": WAIT_SECS_ACTOR_SCHEMA, "timeoutSecs": TIMEOUT_SECS_SCHEMA},
        }
        control = validate(
            name, schema, {k: arguments[k] for k in ("waitSecs", "timeoutSecs") if k in arguments}
        )
        wait_secs = int(control.get("waitSecs", WAIT_SECS_DEFAULT))
        known = set((spec.input_schema.get("properties") or {}).keys())
        actor_input = {k: v for k, v in arguments.items() if k in known}  # AJV removeAdditional
        meta = params.get("_meta")
        key = meta.get(SUBMISSION_KEY_META_KEY) if isinstance(meta, Mapping) else None
        try:
            timeout = control.get("timeoutSecs")
            created = await self.manager.create(
                principal=principal,
                spec=spec,
                arguments=actor_input,
                protocol=PROTOCOL,
                submission_key=f"apify/{key}" if isinstance(key, str) and key else None,
                ttl_ms=spec.ttl_ms,
                # Stored with the run: a restart or another server process enforces it too.
                run_timeout_s=float(timeout)
                if isinstance(timeout, int | float) and timeout > 0
                else None,
            )
        except InvalidParams as exc:
            detail = exc.message
            if isinstance(exc.data, list):
                detail = "; ".join(
                    f"/{'/'.join(str(p) for p in item.get('loc', []))}: {item.get('msg')}"
                    for item in exc.data
                    if isinstance(item, Mapping)
                )
            raise _invalid(
                f'Invalid arguments for tool "{name}".\nValidation errors: {detail}.\n'
                + CHECK_SCHEMA_HINT
            ) from exc
        if wait_secs == 0 and created.created:
            # Fire-and-forget start: the run was created by this very call (READY).
            view = await self.observe(created.record.task_id, principal, just_created=True)
        else:
            # A new run's window counts from its creation, as the run's own clock does.
            since = created.record.created_at if created.created else None
            view = await self._wait(created.record.task_id, principal, wait_secs, since=since)
        return self.run_result(view, with_usage=True)

    async def _get_run(self, arguments: Mapping[str, Any], principal: Principal) -> dict[str, Any]:
        self.server.metrics.observe_status_read(PROTOCOL.value)
        run_id = str(arguments["runId"])
        await self._run(run_id, principal)
        view = await self._wait(
            run_id, principal, int(arguments.get("waitSecs", WAIT_SECS_DEFAULT))
        )
        return self.run_result(view, with_usage=True)

    async def _abort_run(
        self, arguments: Mapping[str, Any], principal: Principal
    ) -> dict[str, Any]:
        run_id = str(arguments["runId"])
        record = await self._run(run_id, principal)
        if record.status in ACTIVE_STATUSES:
            if arguments.get("gracefully") is True:
                # The platform sends "aborting" and force-stops after 30 s (reference A.7).
                deadline = self.manager.clock() + GRACEFUL_ABORT_S * self.time_scale
                await self.manager.store.set_abort_at(run_id, deadline)
            else:
                await self.manager.cancel(record)
        view = await self.observe(run_id, principal)
        return self.run_result(view, with_usage=False, storages_ids_only=True)

    # ---- observing runs ---------------------------------------------------------------------

    async def _run(self, run_id: str, principal: Principal) -> TaskRecord:
        try:
            return await self.manager.visible(principal, run_id, PROTOCOL)
        except (TaskNotFound, InvalidParams) as exc:
            raise ToolCallError(f"Run with ID '{run_id}' not found.") from exc

    async def observe(
        self, run_id: str, principal: Principal, *, just_created: bool = False
    ) -> RunView:
        """Read the run, apply due time-outs and graceful aborts, and name its status."""
        record = await self._run(run_id, principal)
        now = self.manager.clock()
        elapsed = (now - record.created_at) / self.time_scale
        timeout = record.run_timeout_s
        if record.status in ACTIVE_STATUSES:
            graceful = record.abort_at
            if graceful is not None and now >= graceful:
                await self.manager.cancel(record)
                record = await self._run(run_id, principal)
            elif timeout is not None and elapsed >= timeout + TIMING_OUT_GRACE_S:
                await self._time_out(record, timeout)
                record = await self._run(run_id, principal)
        status = self._status(record, elapsed, just_created=just_created)
        end = record.last_updated_at if record.status.is_terminal else now
        run_time = round((end - record.created_at) / self.time_scale, 1)
        return RunView(
            record=record,
            status=status,
            elapsed_s=round(elapsed),
            run_time_s=run_time,
            items=dataset_items(record),
        )

    async def _time_out(self, record: TaskRecord, limit_s: float) -> None:
        message = f"{TIMED_OUT_MESSAGE} ({limit_s:g}s)"
        # The tool body may still finish later; its completion then loses the CAS (S4).
        finished = await self.manager.transition(
            record.task_id,
            Cause.RUN_TIME_LIMIT,
            now=self.manager.clock(),
            status_message=message,
            error={"code": TIMED_OUT_CODE, "message": message},
        )
        if finished is not None:
            self.manager.hub.publish(record.task_id, record.principal)

    def _status(self, record: TaskRecord, elapsed: float, *, just_created: bool = False) -> str:
        if record.status is TaskStatus.CANCELLED:
            return "ABORTED"
        if record.status is TaskStatus.FAILED:
            error = record.error or {}
            return "TIMED-OUT" if error.get("code") == TIMED_OUT_CODE else "FAILED"
        if record.status is TaskStatus.COMPLETED:
            return "FAILED" if (record.result or {}).get("isError") else "SUCCEEDED"
        if record.abort_at is not None:
            return "ABORTING"
        timeout = record.run_timeout_s
        if timeout is not None and elapsed >= timeout:
            return "TIMING-OUT"
        if just_created or (record.last_updated_at == record.created_at and elapsed < 1.0):
            return "READY"
        return "RUNNING"

    async def _wait(
        self, run_id: str, principal: Principal, wait_secs: int, *, since: float | None = None
    ) -> RunView:
        """Wait up to ``wait_secs`` facade seconds (from ``since`` on the server's clock, else
        from now) for a terminal status (a long poll)."""
        already = 0.0 if since is None else max(0.0, self.manager.clock() - since)
        deadline = time.monotonic() + wait_secs * self.time_scale - already
        while True:
            with self.manager.hub.watch(run_id) as changed:
                view = await self.observe(run_id, principal)
                remaining = deadline - time.monotonic()
                if view.status in TERMINAL or remaining <= 0:
                    return view
                # Wake for a change, the end of the window, or a due time-out/abort.
                wake = min(
                    remaining, 1.0 * self.time_scale + 0.01, self.manager.options.change_poll_s
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), timeout=wake)

    # ---- rendering ------------------------------------------------------------------------

    def run_result(
        self, view: RunView, *, with_usage: bool, storages_ids_only: bool = False
    ) -> dict[str, Any]:
        structured = self.run_structured(view, storages_ids_only=storages_ids_only)
        result: dict[str, Any] = {
            "content": [
                {"type": "text", "text": json.dumps(structured, separators=(",", ":"))},
                {"type": "text", "text": f"{structured['summary']}\n{structured['nextStep']}"},
            ],
            "isError": False,
            "structuredContent": structured,
        }
        if with_usage:
            usage = round(view.run_time_s * USD_PER_SECOND, 6)
            result["_meta"] = {
                RUN_META_KEY: {"usageTotalUsd": usage, "usageUsd": {"ACTOR_COMPUTE_UNITS": usage}}
            }
        return result

    def run_structured(self, view: RunView, *, storages_ids_only: bool = False) -> dict[str, Any]:
        record = view.record
        run_id = record.task_id
        ds = dataset_id(run_id)
        kv = kv_store_id(run_id)
        items = view.items
        fields = _fields(items)
        keys = list(kv_records(record))[:KV_KEYS_MAX] if view.status in TERMINAL else []
        summary, next_step = self._templates(view, ds, fields, keys)
        structured: dict[str, Any] = {
            "runId": run_id,
            "actorId": "act" + hashlib.sha256(record.tool_name.encode()).hexdigest()[:14],
            "actorName": f"{USERNAME}/{record.tool_name.replace('_', '-')}",
            "status": view.status,
        }
        message = self._status_message(view)
        if message:
            structured["statusMessage"] = message
        if view.status in ("SUCCEEDED", "FAILED"):
            structured["exitCode"] = 0 if view.status == "SUCCEEDED" else 1
        structured["startedAt"] = iso(record.created_at)
        if view.status in TERMINAL:
            structured["finishedAt"] = iso(record.last_updated_at)
        if storages_ids_only:
            structured["storages"] = {
                "datasets": {"default": {"id": ds}},
                "keyValueStores": {"default": {"id": kv}},
            }
        else:
            dataset: dict[str, Any] = {"id": ds, "itemCount": len(items)}
            if fields:
                dataset["fields"] = fields
            store: dict[str, Any] = {"id": kv}
            if keys:
                store["keys"] = keys
                store["keyCount"] = len(keys)
            structured["stats"] = {
                "runTimeSecs": view.run_time_s,
                "computeUnits": round(view.run_time_s * 0.0003, 4),
                "memMaxBytes": MEM_MAX_BYTES,
            }
            structured["storages"] = {
                "datasets": {"default": dataset},
                "keyValueStores": {"default": store},
            }
        structured["summary"] = summary
        structured["nextStep"] = next_step
        return structured

    @staticmethod
    def _status_message(view: RunView) -> str | None:
        record = view.record
        if view.status == "FAILED" and record.status is TaskStatus.COMPLETED:
            return _first_text(record.result or {})
        if record.status in (TaskStatus.WORKING, TaskStatus.INPUT_REQUIRED):
            message = record.status_message
            return None if message == "The operation is now in progress." else message
        return record.status_message

    def _templates(
        self, view: RunView, ds: str, fields: list[str], keys: list[str]
    ) -> tuple[str, str]:
        """``buildStatusSummaryNextStep`` of the reference (A.5), word for word."""
        run_id = view.record.task_id
        count = len(view.items)
        so_far = f" {count} results so far." if count else ""
        message = self._status_message(view)
        poll = f"Use get-actor-run with runId={run_id} and waitSecs={POLL_HINT_WAIT_SECS}"
        run_time = f"{view.run_time_s:g}"
        match view.status:
            case "READY":
                return (
                    f"READY. Run {run_id} was created and is about to start.",
                    f"{poll} to wait for progress.",
                )
            case "RUNNING":
                return (
                    f"RUNNING for {view.elapsed_s}s."
                    + _message_part(message, " In progress.")
                    + so_far,
                    f"{poll} to poll for completion.",
                )
            case "TIMING-OUT":
                return (
                    f"TIMING-OUT after {view.elapsed_s}s."
                    + _message_part(message, " Run-time limit reached; cleanup in progress.")
                    + so_far,
                    f"{poll} to observe terminal state.",
                )
            case "ABORTING":
                return (
                    f"ABORTING after {view.elapsed_s}s."
                    + _message_part(message, " Cancellation in progress.")
                    + so_far,
                    f"{poll} to observe terminal state.",
                )
            case "SUCCEEDED" if count:
                kv_part = f" Key-value store has {len(keys)} keys." if keys else ""
                return (
                    f"SUCCEEDED in {run_time}s. {count} items; {len(fields)} fields available."
                    + kv_part,
                    (
                        f"Use get-dataset-items with datasetId={ds} and limit (for example 20) to"
                        f" fetch items ({count} total). Available fields (dot notation):"
                        f' {", ".join(fields)} — pass via fields="..." to project.'
                    ),
                )
            case "SUCCEEDED":
                return (
                    f"SUCCEEDED in {run_time}s. No dataset items found.",
                    (
                        f"Use get-dataset-items with datasetId={ds} and limit (for example 20) to"
                        " verify output (metadata reports 0 items)."
                    ),
                )
            case "FAILED":
                return (
                    f"FAILED after {run_time}s." + _message_part(message, ""),
                    (
                        "Diagnose using statusMessage and exitCode in this response; re-run the"
                        " Actor with adjusted input if the cause is fixable."
                    ),
                )
            case "ABORTED":
                return (
                    f"ABORTED after {run_time}s." + _message_part(message, ""),
                    "Re-run the Actor if you want to retry.",
                )
            case _:  # TIMED-OUT
                kv_part = f" Key-value store has {len(keys)} keys." if keys else ""
                return (
                    f"TIMED-OUT after {run_time}s." + kv_part,
                    (
                        f"Use get-dataset-items with datasetId={ds} and limit (for example 20) to"
                        f" fetch any partial output ({count} items written). Available fields:"
                        f" {', '.join(fields) or 'none'}."
                    ),
                )

    # ---- storages -------------------------------------------------------------------------

    async def _owned_run(self, storage_id: str, principal: Principal, prefix: str) -> TaskRecord:
        """The caller's run owning a storage id (S5: another's storage reads as missing)."""
        if not storage_id.startswith(prefix):
            raise KeyError(storage_id)
        try:
            return await self.manager.visible(principal, storage_id[len(prefix) :], PROTOCOL)
        except (TaskNotFound, InvalidParams) as exc:
            raise KeyError(storage_id) from exc

    async def _dataset_items(
        self, arguments: Mapping[str, Any], principal: Principal
    ) -> dict[str, Any]:
        ds = str(arguments["datasetId"])
        try:
            record = await self._owned_run(ds, principal, DATASET_PREFIX)
        except KeyError as exc:
            raise ToolCallError(f"Dataset '{ds}' not found.") from exc
        items = dataset_items(record)
        if arguments.get("desc") is True:
            items = list(reversed(items))
        total = len(items)
        offset = max(0, int(arguments.get("offset", 0)))
        limit = int(arguments.get("limit", DATASET_LIMIT_DEFAULT))
        page = [_project(item, arguments) for item in items[offset : offset + limit]]
        self._dataset_calls += 1
        count = len(page)
        if self._dataset_calls == self._truncate_at and page:
            page = page[:-1]  # fault injection: a page that contradicts its own count
        if offset == 0 and offset + count >= total:
            summary, next_step = (
                f"Fetched all {total} items.",
                "No more pages. Inspect the returned items directly.",
            )
        elif offset + count >= total:
            summary, next_step = (
                f"Fetched {count} of {total} items (offset={offset}); no more pages.",
                "No more pages. Inspect the returned items directly.",
            )
        else:
            summary, next_step = (
                f"Fetched {count} of {total} items (offset={offset}).",
                (
                    f"Call get-dataset-items again with offset={offset + count} to fetch the next"
                    " page."
                ),
            )
        body = {
            "datasetId": ds,
            "items": page,
            "itemCount": count,
            "totalItemCount": total,
            "offset": offset,
            "limit": limit,
        }
        structured = {**body, "summary": summary, "nextStep": next_step}
        return {
            "content": [
                {"type": "text", "text": json.dumps(body, separators=(",", ":"))},
                {"type": "text", "text": f"{summary}\n{next_step}"},
            ],
            "isError": False,
            "structuredContent": structured,
        }

    async def _kv_record(
        self, arguments: Mapping[str, Any], principal: Principal
    ) -> dict[str, Any]:
        store_id = str(arguments["keyValueStoreId"])
        key = str(arguments["recordKey"])
        try:
            record = await self._owned_run(store_id, principal, KV_STORE_PREFIX)
        except KeyError as exc:
            raise ToolCallError(f"Key-value store '{store_id}' not found.") from exc
        records = kv_records(record)
        if key not in records:
            raise ToolCallError(f"Record '{key}' not found in key-value store '{store_id}'.")
        value = records[key]
        size = len(json.dumps(value).encode())
        summary = f"Read '{key}' (contentType={JSON_CONTENT_TYPE}, {size} bytes)."
        body = {
            "keyValueStoreId": store_id,
            "key": key,
            "value": value if value is not None else "",
            "contentType": JSON_CONTENT_TYPE,
        }
        return {
            "content": [
                {"type": "text", "text": json.dumps(body, separators=(",", ":"))},
                {"type": "text", "text": summary},
            ],
            "isError": False,
            "structuredContent": {**body, "summary": summary},
        }


def mount_apify(
    server: LongcallServer,
    *,
    time_scale: float = 1.0,
    truncate_dataset_page_at: int | None = None,
) -> ApifyFacade:
    """Serve ``server``'s task tools Apify-style at ``/apify/mcp`` (S8)."""
    facade = ApifyFacade(
        server, time_scale=time_scale, truncate_dataset_page_at=truncate_dataset_page_at
    )
    server.routes.extend(facade.routes())
    return facade


def _project(item: Any, arguments: Mapping[str, Any]) -> Any:
    if not isinstance(item, Mapping):
        return item
    fields = arguments.get("fields")
    omit = arguments.get("omit")
    out = dict(item)
    if isinstance(fields, str) and fields.strip():
        wanted = [f.strip().split(".")[0] for f in fields.split(",") if f.strip()]
        out = {key: out[key] for key in wanted if key in out}
    if isinstance(omit, str) and omit.strip():
        for key in omit.split(","):
            out.pop(key.strip(), None)
    if arguments.get("clean") is True:
        out = {k: v for k, v in out.items() if not k.startswith("#")}
    return out


# ---- AJV-like validation (reference A.2) --------------------------------------------------


def _invalid(message: str) -> JsonRpcError:
    # Both reference SDKs prefix the error's message like this (reference A.2).
    return JsonRpcError(-32602, f"MCP error -32602: {message}")


def validate(tool: str, schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> dict[str, Any]:
    """Drop unknown arguments, coerce scalars, check the schema; -32602 like the reference."""
    properties: Mapping[str, Any] = schema.get("properties") or {}
    out: dict[str, Any] = {}
    errors = [
        f"root: must have required property '{name}'"
        for name in schema.get("required") or []
        if name not in arguments
    ]
    for name, value in arguments.items():
        spec = properties.get(name)
        if spec is None:
            continue  # removeAdditional
        coerced, error = _coerce(value, spec)
        if error is not None:
            errors.append(f"/{name}: {error}")
            continue
        out[name] = coerced
    if errors:
        raise _invalid(
            f'Invalid arguments for tool "{tool}".\nValidation errors: {"; ".join(errors)}.\n'
            + CHECK_SCHEMA_HINT
        )
    return out


def _coerce(value: Any, spec: Mapping[str, Any]) -> tuple[Any, str | None]:
    kind = spec.get("type")
    if kind in ("integer", "number"):
        if isinstance(value, str):
            try:
                value = float(value) if "." in value else int(value)
            except ValueError:
                return value, f"must be {kind}"
        if isinstance(value, bool) or not isinstance(value, int | float):
            return value, f"must be {kind}"
        if isinstance(value, float) and not math.isfinite(value):
            return value, f"must be a finite {kind}"
        if kind == "integer":
            if float(value) != int(value):
                return value, "must be integer"
            value = int(value)
        if "minimum" in spec and value < spec["minimum"]:
            return value, f"must be >= {spec['minimum']}"
        if "maximum" in spec and value > spec["maximum"]:
            return value, f"must be <= {spec['maximum']}"
        return value, None
    if kind == "boolean":
        if isinstance(value, str) and value in ("true", "false"):
            return value == "true", None
        return (value, None) if isinstance(value, bool) else (value, "must be boolean")
    if kind == "string":
        if isinstance(value, int | float) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str):
            return value, "must be string"
        if len(value) < spec.get("minLength", 0):
            return value, f"must NOT have fewer than {spec['minLength']} characters"
        return value, None
    return value, None


def _rpc_error(
    request_id: Any, code: int, message: str, *, data: Any = None, status: int = 200
) -> JSONResponse:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return JSONResponse({"jsonrpc": "2.0", "id": request_id, "error": error}, status_code=status)
