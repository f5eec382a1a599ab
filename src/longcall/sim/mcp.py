"""Simulated MCP task servers on the wire: JSON-RPC over Streamable HTTP (P1, P2, F1).

:class:`McpServer` answers the :class:`~longcall.adapters.exchange.HttpRequest` s the
real mappings (:mod:`longcall.adapters.mcp`) yield with the replies a real server would
send: HTTP status and the headers that matter (``content-type``, ``Retry-After``), the
JSON-RPC envelope, event streams (a priming event, then the messages) where the
protocol or the server streams, and each version's bodies —

* 2026-07-28 with the ``io.modelcontextprotocol/tasks`` extension: ``server/discover``,
  the flat ``CreateTaskResult`` (``resultType: "task"``, ``ttlMs``, ``pollIntervalMs``),
  ``tasks/get`` with ``inputRequests`` / ``result`` / ``error`` inlined, ``tasks/update``
  (answers, idempotent), ``tasks/cancel`` (an ack; the cancel lands cooperatively), the
  consent and ``Mcp-Name`` rules (-32021, -32020), -32602 for an unknown task (HTTP 400);
* 2025-11-25: ``initialize`` capabilities, ``execution.taskSupport``, ``params.task``,
  the nested ``CreateTaskResult``, ``tasks/get``, ``tasks/result`` that blocks until the
  terminal and carries the related-task ``_meta``, the input side channel on it
  (``elicitation/create`` requests on the stream, answered by posted JSON-RPC
  responses), ``tasks/cancel`` that cancels before answering and answers -32602 on a
  terminal task;
* the ``dev.longcall/submissionKey`` extension and its lookup where the server offers it.

The server's truth lives in :class:`~longcall.sim.server.SimServer`; this module adds
the wire and its faults (a request refused unread with ``id: null``, a reply about
another task, a replayed ``input_required``, a changed poll interval once input is
asked). Must not: read a clock or draw from any generator but the world's.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from longcall.adapters.exchange import HttpReply, HttpRequest, compact_json
from longcall.adapters.mcp.rpc import (
    CLIENT_CAPABILITIES_META_KEY,
    DEFAULT_LOOKUP_METHOD,
    RELATED_TASK_META_KEY,
    SUBMISSION_KEY_EXTENSION,
    TASKS_EXTENSION,
)
from longcall.adapters.sse import encode_event
from longcall.core.keys import canonical_json, digest_json
from longcall.sim.server import LEGACY, MODERN, Hold, Hop, Served, SimServer
from longcall.sim.truth import (
    CANCELLED,
    COMPLETED,
    FAILED,
    INPUT_REQUIRED,
    PROTOCOL_ERROR,
    TERMINAL,
    TOOL_ERROR,
    WORKING,
    InputRound,
    Task,
)

TOOL = "work"
JSON_TYPE = {"content-type": "application/json"}
STREAM_TYPE = {"content-type": "text/event-stream"}
EPOCH = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
"""Virtual time 0 on the wire's clock (``createdAt`` and friends)."""
HTTP_STATUS_OF_CODE = {-32700: 400, -32600: 400, -32602: 400, -32020: 400, -32021: 400, -32601: 404}
"""2026-07-28 (the SDK's table): the HTTP status of a JSON-RPC error; others are 200."""
WHAT = {
    "tools/call": "create",
    DEFAULT_LOOKUP_METHOD: "lookup",
    "tasks/get": "status",
    "tasks/result": "result",
    "tasks/update": "input",
    "tasks/cancel": "cancel",
}
APPROVAL_SCHEMA = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}, "for": {"type": "string"}},
}


@functools.lru_cache(maxsize=4096)
def iso(t: float) -> str:
    """Virtual time ``t`` as the wire's ISO 8601 timestamp."""
    return datetime.fromtimestamp(EPOCH + t, UTC).isoformat()


def tool_result(task: Task) -> dict[str, Any]:
    """The ``CallToolResult`` the tool returns (without wire envelope keys)."""
    return {
        "content": [{"type": "text", "text": f"done: {task.request[7:23]}"}],
        "structuredContent": {"request": task.request, "task": task.task_id},
        "isError": task.outcome == TOOL_ERROR,
    }


def tool_error(task: Task) -> dict[str, Any]:
    """The JSON-RPC error a failing call produces (the task's own error, X6)."""
    return {"code": -32603, "message": "the tool failed", "data": {"request": task.request}}


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Call:
    """One JSON-RPC request as a handler sees it."""

    rid: Any
    params: dict[str, Any]
    request: HttpRequest
    now: float
    hop: Hop | None
    held_since: float | None
    """When a held request (a blocking stream) first arrived; None on arrival."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Wire:
    """How one MCP server presents itself beyond its protocol version."""

    streams: bool = False
    """It answers calls and results as event streams, not JSON bodies."""
    input_interval_s: float | None = None
    """The poll interval it tells once a task has asked for input (it MAY change)."""


class McpServer(SimServer):
    """One simulated MCP task server at one protocol version, answering HTTP."""

    def __init__(
        self, name: str, *, protocol: str, wire: Wire | None = None, **kwargs: Any
    ) -> None:
        super().__init__(name, **kwargs)
        wire = wire or Wire()
        self.protocol = protocol
        self.modern = protocol == MODERN
        self.streams = wire.streams
        self.input_interval_s = wire.input_interval_s or self.poll_interval_s
        self._event_ids = itertools.count(1)
        self._methods: dict[str, Callable[[Call], Served | Hold]] = {
            "server/discover": self._discover,
            "initialize": self._initialize,
            "tools/list": self._tools_list,
            "tools/call": self._create,
            DEFAULT_LOOKUP_METHOD: self._lookup,
            "tasks/get": self._get,
            "tasks/cancel": self._cancel,
            ("tasks/update" if self.modern else "tasks/result"): (
                self._update if self.modern else self._result
            ),
        }

    # --- truth as the protocol defines the accepted bytes (X6) --------------------------

    def terminal_status(self, outcome: str) -> str:
        if outcome == PROTOCOL_ERROR:
            return FAILED
        # 2026-07-28 reports a tool error as a completed task whose result says
        # isError; 2025-11-25 as a failed task (wire reference §1).
        return COMPLETED if self.modern or outcome != TOOL_ERROR else FAILED

    def _payload(self, task: Task) -> bytes:
        if task.status == CANCELLED:
            return canonical_json({"taskId": task.task_id, "status": CANCELLED})
        if task.outcome == PROTOCOL_ERROR:
            return canonical_json(tool_error(task))
        return canonical_json(tool_result(task))

    # --- the front door -----------------------------------------------------------------

    def serve(
        self, request: HttpRequest, now: float, hop: Hop | None, *, held_since: float | None = None
    ) -> Served | Hold:
        """Answer one HTTP request (``hop`` None: negotiation, which sees no fault)."""
        if request.method != "POST":
            # No event history is kept, so a stream cannot be resumed (Streamable HTTP:
            # a server without resumability answers a GET with 405).
            return Served(reply=HttpReply(status=405), what="session")
        message = request.json_body
        if not isinstance(message, dict):
            return Served(reply=HttpReply(status=400, body=b"the body is not JSON"), what="session")
        method = message.get("method")
        if method is None:
            return self._client_response(message, now)
        if "id" not in message:
            return Served(reply=HttpReply(status=202), what="session")  # a notification
        rid = message["id"]
        what = WHAT.get(method, "session")
        if (
            hop is not None
            and held_since is None
            and self.rng.random() < self.faults.refused_unread
        ):
            # A front door that could not read the request answers about no request
            # (id: null): never the operation's outcome (C3).
            self._count("request_refused_unread")
            code, text = self.rng.choice(((-32700, "Parse error"), (-32600, "Invalid Request")))
            if what == "create":
                # A parse error of a create proves its bytes cannot be read, which ends
                # the call (X2): a front door's passing refusal of one is the other kind.
                code, text = -32600, "Invalid Request"
            body = {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": text}}
            return Served(reply=self._json(400, body), what=what)
        handler = self._methods.get(method)
        if handler is None:
            return self._error(rid, -32601, f"Method not found: {method}", what=what)
        params = message.get("params")
        call = Call(
            rid=rid,
            params=params if isinstance(params, dict) else {},
            request=request,
            now=now,
            hop=hop,
            held_since=held_since,
        )
        return handler(call)

    # --- framing ------------------------------------------------------------------------

    def _json(
        self, status: int, message: Mapping[str, Any], headers: Mapping[str, str] | None = None
    ) -> HttpReply:
        body = compact_json(message).encode()
        return HttpReply(status=status, headers={**JSON_TYPE, **(headers or {})}, body=body)

    def _stream(self, *messages: Mapping[str, Any]) -> bytes:
        """An event stream: a priming event (an id, no data, SEP-1699), then the messages."""
        parts = [f"id: {next(self._event_ids)}\ndata: \n\n".encode()]
        for message in messages:
            data = compact_json(message)
            parts.append(encode_event(data, id=str(next(self._event_ids))))
        return b"".join(parts)

    def _send(
        self,
        message: Mapping[str, Any],
        *,
        what: str,
        status: int = 200,
        stream: bool = False,
        **notes: Any,
    ) -> Served:
        if stream:
            reply = HttpReply(status=200, headers=STREAM_TYPE)
            return Served(reply=reply, stream=self._stream(message), what=what, **notes)
        return Served(reply=self._json(status, message), what=what, **notes)

    def _answer(self, rid: Any, result: Mapping[str, Any], *, what: str, **notes: Any) -> Served:
        # A streaming server answers its calls and results as event streams.
        stream = self.streams and what in ("create", "result")
        message = {"jsonrpc": "2.0", "id": rid, "result": dict(result)}
        return self._send(message, what=what, stream=stream, **notes)

    def _error(
        self,
        rid: Any,
        code: int,
        text: str,
        *,
        what: str,
        data: Any = None,
        stream: bool = False,
        **notes: Any,
    ) -> Served:
        error: dict[str, Any] = {"code": code, "message": text}
        if data is not None:
            error["data"] = data
        status = HTTP_STATUS_OF_CODE.get(code, 200) if self.modern else 200
        message = {"jsonrpc": "2.0", "id": rid, "error": error}
        return self._send(message, what=what, status=status, stream=stream, **notes)

    def _not_found(self, call: Call, task_id: Any, *, what: str) -> Served:
        text = f"Failed to retrieve task: Task {task_id} not found"
        return self._error(call.rid, -32602, text, what=what)

    def _refused(self, call: Call, task_id: str | None, what: str) -> Served | None:
        """2026-07-28's per-request rules: consent in ``_meta`` (-32021) and ``Mcp-Name``
        naming the task on ``tasks/*`` (-32020). None when the request may proceed."""
        if not self.modern:
            return None
        meta = call.params.get("_meta")
        capabilities = meta.get(CLIENT_CAPABILITIES_META_KEY) if isinstance(meta, Mapping) else None
        extensions = capabilities.get("extensions") if isinstance(capabilities, Mapping) else None
        if not isinstance(extensions, Mapping) or TASKS_EXTENSION not in extensions:
            required: dict[str, Any] = {
                "requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}
            }
            text = "Missing required client capability"
            return self._error(call.rid, -32021, text, what=what, data=required)
        if task_id is not None and call.request.headers.get("mcp-name") != task_id:
            text = "mcp-name header does not match the request body's 'taskId' parameter"
            return self._error(call.rid, -32020, text, what=what)
        return None

    def _throttle(self, what: str) -> Served | None:
        """429/503 on a status read, with Retry-After in half of them (F1)."""
        refused = self.throttled()
        if refused is None:
            return None
        status, retry_after = refused
        headers = {"content-type": "text/plain"}
        if retry_after is not None:
            headers["retry-after"] = str(int(retry_after))
        text = b"Too Many Requests" if status == 429 else b"Service Unavailable"
        reply = HttpReply(status=status, headers=headers, body=text)
        return Served(reply=reply, what=what, retry_after_s=retry_after)

    # --- what a task looks like on the wire ---------------------------------------------

    def interval_s(self, task: Task) -> float:
        """The interval told about ``task``: another one once it has asked for input."""
        asked = task.status == INPUT_REQUIRED or task.last_answered() is not None
        return self.input_interval_s if asked else self.poll_interval_s

    def _fields(self, task: Task, status: str) -> dict[str, Any]:
        answered = [r.answered_at for r in task.rounds if r.answered_at is not None]
        updated = task.terminal_at
        if updated is None:
            updated = max([task.created_at, *answered])
        interval_ms = round(self.interval_s(task) * 1000)
        fields: dict[str, Any] = {
            "taskId": task.task_id,
            "status": status,
            "createdAt": iso(task.created_at),
            "lastUpdatedAt": iso(updated),
        }
        if self.modern:
            fields.update(ttlMs=int(task.ttl_s * 1000), pollIntervalMs=interval_ms)
        else:
            fields.update(ttl=int(task.ttl_s * 1000), pollInterval=interval_ms)
        if status == INPUT_REQUIRED:
            fields["statusMessage"] = "waiting for approval"
        return fields

    def _elicitation(self, round_: InputRound) -> dict[str, Any]:
        params = {
            "mode": "form",
            "message": f"Approve {round_.key}?",
            "requestedSchema": APPROVAL_SCHEMA,
        }
        return {"method": "elicitation/create", "params": params}

    def _open_rounds(self, task: Task) -> None:
        task.rounds = [
            InputRound(offset_s=offset, key=f"{self.name}-e{self.creates}-{n}")
            for n, offset in enumerate(task.plan.input_offsets_s)
        ]

    def _other_task(self, task: Task, now: float, *, terminal: bool) -> Task | None:
        """A task a crossed reply may describe instead (F1: another task's body, C3).

        A crossed ``tasks/result`` (``terminal``) is drawn only among tasks whose final
        answer names its task: a result with the related-task ``_meta``. A task failed
        by a protocol error answers with the JSON-RPC error itself, which has no place
        for ``_meta`` and names no task; another task's error in answer to our request
        is a mix-up no client can detect (C3 is about what a server sends to identify),
        so it is not drawn (docs/design/simulator.md, "crossed replies")."""
        others = []
        for other in self.tasks:
            if other.task_id == task.task_id or now >= other.expires_at:
                continue
            other.advance(now)
            names_itself = other.status == COMPLETED or (
                other.status == FAILED and other.outcome != PROTOCOL_ERROR
            )
            if not terminal or names_itself:
                others.append(other)
        return self.rng.choice(others) if others else None

    # --- negotiation (X1) ---------------------------------------------------------------

    def _discover(self, call: Call) -> Served:
        if not self.modern:
            return self._error(
                call.rid, -32601, "Method not found: server/discover", what="session"
            )
        extensions: dict[str, Any] = {TASKS_EXTENSION: {}}
        if self.lookup_offered:
            extensions[SUBMISSION_KEY_EXTENSION] = {"lookupMethod": DEFAULT_LOOKUP_METHOD}
        result = {
            "supportedVersions": [MODERN],
            "capabilities": {"tools": {"listChanged": False}, "extensions": extensions},
            "serverInfo": {"name": self.name, "version": "sim"},
            "resultType": "complete",
        }
        return self._answer(call.rid, result, what="session")

    def _initialize(self, call: Call) -> Served:
        capabilities: dict[str, Any] = {
            "tools": {},
            "tasks": {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}},
        }
        if self.lookup_offered:
            offered = {"lookupMethod": DEFAULT_LOOKUP_METHOD}
            capabilities["experimental"] = {SUBMISSION_KEY_EXTENSION: offered}
        return self._initialized(call, capabilities)

    def _initialized(self, call: Call, capabilities: Mapping[str, Any]) -> Served:
        """The ``initialize`` answer at 2025-11-25 with these capabilities."""
        info = {"name": self.name, "version": "sim"}
        result = {"protocolVersion": LEGACY, "capabilities": dict(capabilities), "serverInfo": info}
        return self._answer(call.rid, result, what="session")

    def _tools_list(self, call: Call) -> Served:
        tool: dict[str, Any] = {
            "name": TOOL,
            "inputSchema": {"type": "object", "properties": {"node": {"type": "string"}}},
            "annotations": {"idempotentHint": self.idempotent},
        }
        if not self.modern:
            tool["execution"] = {"taskSupport": "required"}
        return self._answer(call.rid, {"tools": [tool]}, what="session")

    # --- create and lookup (X2, S3) -----------------------------------------------------

    def _create(self, call: Call) -> Served:
        refused = self._refused(call, None, "create")
        if refused is not None:
            return refused
        params = call.params
        arguments = params.get("arguments")
        business = digest_json(arguments if isinstance(arguments, dict) else {})
        if params.get("name") != TOOL or business not in self.plans:
            return self._reject(call, business, -32602, "Invalid params: unknown tool or arguments")
        if not self.modern and not isinstance(params.get("task"), Mapping):
            return self._reject(call, business, -32601, f"Tool '{TOOL}' requires task augmentation")
        meta = params.get("_meta")
        key = meta.get(SUBMISSION_KEY_EXTENSION) if isinstance(meta, Mapping) else None
        key = key if isinstance(key, str) and key and self.lookup_offered else None
        task = self.existing(key, business)
        if task is None:
            self.creates += 1
            task_id = f"{self.name}-t{self.creates}"
            task = self.new_task(key or "", business, call.now, task_id=task_id)
            self._open_rounds(task)
        task.advance(call.now)
        fields = self._fields(task, task.status)
        result = {"resultType": "task", **fields} if self.modern else {"task": fields}
        interval = self.interval_s(task)
        return self._answer(
            call.rid,
            result,
            what="create",
            task_id=task.task_id,
            interval_s=interval,
            handed=task.task_id,
        )

    def _reject(self, call: Call, business: str, code: int, text: str) -> Served:
        """A create refused with a JSON-RPC error: that error is the call's truth (X6)."""
        self.rejected[business] = digest_json({"code": code, "message": text})
        return self._error(call.rid, code, text, what="create")

    def _lookup(self, call: Call) -> Served:
        if not self.lookup_offered:
            text = f"Method not found: {DEFAULT_LOOKUP_METHOD}"
            return self._error(call.rid, -32601, text, what="lookup")
        refused = self._refused(call, None, "lookup")
        if refused is not None:
            return refused
        key = call.params.get("submissionKey")
        task = self.by_key.get(key) if isinstance(key, str) and key else None
        extra = {"resultType": "complete"} if self.modern else {}
        if task is None:
            return self._answer(call.rid, {"found": False, **extra}, what="lookup", absent_key=key)
        expired = call.now >= task.expires_at
        found = {"found": True, "taskId": task.task_id, "expired": expired, **extra}
        return self._answer(call.rid, found, what="lookup", handed=task.task_id)

    # --- status (X3, X4) ---------------------------------------------------------------

    def _get(self, call: Call) -> Served:
        task_id = str(call.params.get("taskId"))
        what = "result" if call.hop is not None and call.hop.action == "FetchResult" else "status"
        refused = self._refused(call, task_id, what)
        if refused is not None:
            return refused
        throttled = self._throttle(what)
        if throttled is not None:
            return throttled
        task = self.observe(task_id, call.now, call.hop)
        if task is None:
            return self._not_found(call, task_id, what=what)
        if self.rng.random() < self.faults.crossed_reply:
            other = self._other_task(task, call.now, terminal=False)
            if other is not None:
                # A reply about another task (a cache or routing bug, C3).
                self._count("reply_crossed")
                body = self._detailed(other, other.status, call.now)
                return self._answer(call.rid, body, what=what)
        status = task.status
        replayed = task.last_answered()
        replay = status == WORKING and replayed is not None
        if replay and self.rng.random() < self.faults.input_replay:
            # F1 "input_required replayed": a stale snapshot of a round already answered.
            self._count("input_required_replayed")
            status = INPUT_REQUIRED
        else:
            replayed = None
        body = self._detailed(task, status, call.now, replayed=replayed)
        digest = None
        if self.modern and status in (COMPLETED, FAILED):
            digest = self.truth_digest(task)
        return self._answer(
            call.rid,
            body,
            what=what,
            task_id=task.task_id,
            interval_s=self.interval_s(task),
            result_digest=digest,
        )

    def _detailed(
        self, task: Task, status: str, now: float, *, replayed: InputRound | None = None
    ) -> dict[str, Any]:
        body = self._fields(task, status)
        if not self.modern:
            return body
        body["resultType"] = "complete"
        if status == INPUT_REQUIRED:
            asked = replayed or task.pending_round(now)
            if asked is not None:
                body["inputRequests"] = {asked.key: self._elicitation(asked)}
        elif status == COMPLETED:
            body["result"] = {**tool_result(task), "resultType": "complete"}
        elif status == FAILED:
            body["error"] = tool_error(task)
        return body

    # --- result (X6) and the 2025-11-25 input side channel (X4) ------------------------

    def _result(self, call: Call) -> Served | Hold:
        task_id = str(call.params.get("taskId"))
        fetching = call.hop is None or call.hop.action == "FetchResult"
        what = "result" if fetching else "input"
        task = self.live(task_id, call.now)
        if task is None:
            return self._not_found(call, task_id, what=what)
        first = call.held_since is None
        if fetching and first and self.rng.random() < self.faults.crossed_reply:
            other = self._other_task(task, call.now, terminal=True)
            if other is not None:
                self._count("reply_crossed")
                return self._final(call, other, what=what, notes=False)
        if task.status in TERMINAL:
            return self._final(call, task, what=what, notes=True)
        since = call.now if call.held_since is None else call.held_since
        watch = call.request.watch
        if watch is not None:
            return self._side_channel(call, task, since)
        # tasks/result blocks until the terminal; past the request's time budget the
        # client gives up (its driver's timeout).
        sent = call.hop.sent_at if call.hop is not None else since
        deadline = sent + call.request.timeout_s
        if call.now >= deadline:
            return Served(reply=HttpReply(status=200), what=what, timed_out=True)
        return Hold(min(task.next_change(call.now), deadline))

    def _side_channel(self, call: Call, task: Task, since: float) -> Served | Hold:
        """The input side channel: the pending round's request on the stream (the client
        stops reading a moment later), or nothing for as long as the client watches."""
        watch = call.request.watch
        assert watch is not None
        pending = task.pending_round(call.now)
        if pending is not None:
            related = {RELATED_TASK_META_KEY: {"taskId": task.task_id}}
            ask = self._elicitation(pending)
            ask["params"]["_meta"] = related
            request = {"jsonrpc": "2.0", "id": pending.key, **ask}
            return Served(
                reply=HttpReply(status=200, headers=STREAM_TYPE),
                stream=self._stream(request),
                stopped=True,
                delay_s=watch.gather_s,
                what="input",
                task_id=task.task_id,
            )
        # The same expression the hold was planned with: ``now - since >= wait_s`` can
        # be false at ``now == since + wait_s`` (rounding), holding to now for ever.
        watched_until = since + watch.wait_s
        if call.now >= watched_until:
            reply = HttpReply(status=200, headers=STREAM_TYPE)
            return Served(reply=reply, stream=self._stream(), stopped=True, what="input")
        return Hold(min(task.next_change(call.now), watched_until))

    def _final(self, call: Call, task: Task, *, what: str, notes: bool) -> Served:
        """``tasks/result`` of a terminal task: exactly the call's result or error, with
        the related-task ``_meta`` (``notes``: it answers the task asked about)."""
        digest = None
        if notes and task.status != CANCELLED:
            digest = self.truth_digest(task)
        task_id = task.task_id if notes else None
        if task.status == FAILED and task.outcome == PROTOCOL_ERROR:
            error = tool_error(task)
            return self._error(
                call.rid,
                error["code"],
                error["message"],
                what=what,
                data=error["data"],
                stream=self.streams,
                task_id=task_id,
                result_digest=digest,
            )
        related = {RELATED_TASK_META_KEY: {"taskId": task.task_id}}
        result = {"_meta": related}
        if task.status != CANCELLED:
            result = {**tool_result(task), "_meta": related}
        return self._answer(call.rid, result, what=what, task_id=task_id, result_digest=digest)

    def _client_response(self, message: dict[str, Any], now: float) -> Served:
        """A posted JSON-RPC response: the 2025-11-25 answer to a side-channel request."""
        result = message.get("result")
        meta = result.get("_meta") if isinstance(result, Mapping) else None
        related = meta.get(RELATED_TASK_META_KEY) if isinstance(meta, Mapping) else None
        task_id = related.get("taskId") if isinstance(related, Mapping) else None
        task = self.live(str(task_id), now) if task_id is not None else None
        if task is not None:
            self._take_answer(task, str(message.get("id")), result, now)
        return Served(reply=HttpReply(status=202), what="input")

    def _addressed(self, call: Call, what: str) -> Task | Served:
        """The live task a ``tasks/*`` request names, or the answer refusing the request."""
        task_id = str(call.params.get("taskId"))
        refused = self._refused(call, task_id, what)
        if refused is not None:
            return refused
        task = self.live(task_id, call.now)
        return self._not_found(call, task_id, what=what) if task is None else task

    def _update(self, call: Call) -> Served:
        """2026-07-28 ``tasks/update``: answers by key; unknown or answered keys are
        ignored (idempotent, SEP-2663)."""
        task = self._addressed(call, "input")
        if isinstance(task, Served):
            return task
        responses = call.params.get("inputResponses")
        if isinstance(responses, Mapping):
            for key, value in responses.items():
                self._take_answer(task, str(key), value, call.now)
        return self._answer(call.rid, {"resultType": "complete"}, what="input")

    def _take_answer(self, task: Task, key: str, value: Any, now: float) -> None:
        content = value.get("content") if isinstance(value, Mapping) else None
        meant = content.get("for") if isinstance(content, Mapping) else None
        if meant is not None and meant != key:
            # X4: an answer is bound to the request the approver saw.
            detail = f"{task.task_id}: the answer to {meant!r} was delivered for {key!r}"
            self._violation("input answered for its own request", detail)
            return
        task.answer(key, now)

    # --- cancel (X5) --------------------------------------------------------------------

    def _cancel(self, call: Call) -> Served:
        task = self._addressed(call, "cancel")
        if isinstance(task, Served):
            return task
        self.note_cancel(call.hop)
        if self.modern:
            # An ack; the cancel lands cooperatively a little later, unless the work
            # finishes first (S4, X5).
            if task.status not in TERMINAL:
                later = call.now + self.rng.uniform(0.0, 10.0)
                self.cancel_task(task, call.now, effective=later, tie="completion_cancel_together")
            return self._answer(call.rid, {"resultType": "complete"}, what="cancel")
        if task.status not in TERMINAL:
            # 2025-11-25: cancelled before answering, unless the completion lands at the
            # same instant and wins the truth's coin.
            self.cancel_task(task, call.now, effective=call.now, tie="completion_cancel_together")
        if task.status == CANCELLED:
            body = self._fields(task, CANCELLED)
            return self._answer(call.rid, body, what="cancel", task_id=task.task_id)
        text = f"Cannot cancel task: already in terminal status '{task.status}'"
        return self._error(call.rid, -32602, text, what="cancel", data={"status": task.status})


__all__ = ["TOOL", "Call", "McpServer", "Wire", "tool_error", "tool_result"]
