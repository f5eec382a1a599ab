"""A simulated Google AIP-151 server on the wire: REST over HTTP/JSON (SPEC P3, F1).

:class:`Aip151Server` answers the :class:`~longcall.adapters.exchange.HttpRequest` s of
the real mapping (:mod:`longcall.adapters.aip151.mapping`) as a server of
``google.longrunning.Operation`` s would: ``GET /v1/tools``; ``POST
/v1/tools/{tool}:start`` deduplicated by its AIP-155 ``requestId`` only (a resend with
the same id answers the operation it created, a fresh id creates another);
``GET /v1/operations?filter=requestId="…"`` that proves an operation without creating
one; ``GetOperation`` (429/503 with ``Retry-After``, a 404 before and after the
retention the client is never told); ``CancelOperation`` (200, then the operation ends
cooperatively; a completion that wins stays completed, X5); AIP-193 error bodies.
Operations take no input. The server's truth is :class:`~longcall.sim.server.SimServer`'s.

Must not: read a clock or draw from any generator but the world's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

from longcall.adapters.aip151.mapping import (
    API_VERSION_PATH,
    CANCELLED_CODE,
    COLLECTION,
    PROTOCOL,
    TOOL_ERROR_REASON,
)
from longcall.adapters.exchange import HttpReply, HttpRequest, compact_json
from longcall.core.keys import canonical_json, digest_json
from longcall.sim.mcp import TOOL
from longcall.sim.server import Hop, Served, SimServer
from longcall.sim.truth import CANCELLED, FAILED, PROTOCOL_ERROR, TERMINAL, Task

METADATA_TYPE = "type.googleapis.com/longcall.v1.OperationMetadata"
RESPONSE_TYPE = "type.googleapis.com/google.protobuf.Struct"
ERROR_INFO_TYPE = "type.googleapis.com/google.rpc.ErrorInfo"
JSON_TYPE = {"content-type": "application/json"}
STATUS_NAMES = {404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED", 503: "UNAVAILABLE"}


def operation_result(task: Task) -> dict[str, Any]:
    """The ``response`` Any of a done operation, or its ``google.rpc.Status``."""
    if task.status == CANCELLED:
        return {"code": CANCELLED_CODE, "message": "the operation was cancelled"}
    if task.status == FAILED:
        status: dict[str, Any] = {"code": 2, "message": f"the tool failed on {task.request}"}
        if task.outcome != PROTOCOL_ERROR:
            status["details"] = [{"@type": ERROR_INFO_TYPE, "reason": TOOL_ERROR_REASON}]
        return status
    return {"@type": RESPONSE_TYPE, "value": {"request": task.request, "operation": task.task_id}}


def error_body(status: int, message: str) -> dict[str, Any]:
    """An AIP-193 error body."""
    return {"error": {"code": status, "message": message, "status": STATUS_NAMES.get(status)}}


class Aip151Server(SimServer):
    """One simulated AIP-151 server (+ AIP-155 ``requestId`` deduplication), P3."""

    protocol = PROTOCOL
    expired_counter = "not_found_after_retention"

    def __init__(self, name: str, **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self.by_request_id: dict[str, Task] = {}

    def _payload(self, task: Task) -> bytes:
        return canonical_json(operation_result(task))

    def retry_after_s(self) -> float | None:
        return self.rng.choice((None, 5.0))

    # --- the wire -------------------------------------------------------------------------

    def _json(self, status: int, body: Mapping[str, Any], **headers: str) -> HttpReply:
        encoded = compact_json(body).encode()
        return HttpReply(status=status, headers={**JSON_TYPE, **headers}, body=encoded)

    def _error(self, status: int, message: str, *, what: str, **notes: Any) -> Served:
        body = error_body(status, message)
        headers = {}
        if notes.get("retry_after_s") is not None:
            headers["retry-after"] = str(int(notes["retry_after_s"]))
        return Served(reply=self._json(status, body, **headers), what=what, **notes)

    def _operation(self, task: Task) -> dict[str, Any]:
        metadata = {"pollIntervalMs": round(self.poll_interval_s * 1000)}
        body: dict[str, Any] = {
            "name": task.task_id,
            "metadata": {"@type": METADATA_TYPE, "value": metadata},
            "done": task.status in TERMINAL,
        }
        if task.status in TERMINAL:
            result = operation_result(task)
            body["error" if task.status in (FAILED, CANCELLED) else "response"] = result
        return body

    def _answer(self, task: Task, *, what: str, **notes: Any) -> Served:
        body = self._operation(task)
        digest = None
        if task.status in TERMINAL and task.status != CANCELLED:
            digest = self.truth_digest(task)
        return Served(
            reply=self._json(200, body),
            what=what,
            task_id=task.task_id,
            interval_s=self.poll_interval_s,
            result_digest=digest,
            **notes,
        )

    def serve(
        self, request: HttpRequest, now: float, hop: Hop | None, *, held_since: float | None = None
    ) -> Served:
        """Answer one HTTP request (``hop`` None: before any call, without faults)."""
        path = request.path.removeprefix(API_VERSION_PATH)
        if request.method == "GET" and path == "/tools":
            tool = {"name": TOOL, "idempotent": self.idempotent, "description": "slow work"}
            return Served(reply=self._json(200, {"tools": [tool]}), what="session")
        if request.method == "POST" and path == f"/tools/{TOOL}:start":
            return self._start(request, now)
        if request.method == "GET" and path == "/operations":
            return self._list(request)
        if path.startswith("/" + COLLECTION):
            name = unquote(path[1:])
            if request.method == "POST" and name.endswith(":cancel"):
                return self._cancel(name.removesuffix(":cancel"), now, hop)
            if request.method == "GET":
                return self._get(name, now, hop)
        return self._error(404, f"no route {request.method} {request.path}", what="session")

    def _start(self, request: HttpRequest, now: float) -> Served:
        body = request.json_body if isinstance(request.json_body, dict) else {}
        request_id = body.get("requestId")
        arguments = body.get("arguments")
        business = digest_json(arguments if isinstance(arguments, dict) else {})
        if not isinstance(request_id, str) or business not in self.plans:
            message = "the start needs a requestId and known arguments"
            self.rejected[business] = digest_json(error_body(400, message))
            return self._error(400, message, what="create")
        task = self.by_request_id.get(request_id)
        if task is None:
            self.creates += 1
            task_id = f"{COLLECTION}{self.name}-t{self.creates}"
            task = self.new_task(request_id, business, now, task_id=task_id, reuse=False)
            self.by_request_id[request_id] = task
        task.advance(now)
        return self._answer(task, what="create", handed=task.task_id)

    def _list(self, request: HttpRequest) -> Served:
        """``ListOperations`` filtered by ``requestId``: proves an operation, creates none."""
        wanted = request.query.get("filter", "").removeprefix('requestId="').removesuffix('"')
        task = self.by_request_id.get(wanted)
        if task is None:
            return Served(
                reply=self._json(200, {"operations": []}), what="lookup", absent_key=wanted
            )
        body = {"operations": [self._operation(task)]}
        return Served(reply=self._json(200, body), what="lookup", handed=task.task_id)

    def _get(self, name: str, now: float, hop: Hop | None) -> Served:
        what = "result" if hop is not None and hop.action == "FetchResult" else "status"
        if hop is not None:
            throttled = self.throttled()
            if throttled is not None:
                status, retry_after = throttled
                text = "slow down" if status == 429 else "unavailable"
                return self._error(status, text, what=what, retry_after_s=retry_after)
        task = self.observe(name, now, hop)
        if task is None:
            return self._error(404, f"operation {name} not found", what=what)
        if hop is not None and self.rng.random() < self.faults.crossed_reply:
            others = [t for t in self.tasks if t.task_id != name and now < t.expires_at]
            if others:
                # An Operation about another operation (a cache or routing bug, C3).
                self._count("reply_crossed")
                other = self.rng.choice(others)
                other.advance(now)
                return Served(reply=self._json(200, self._operation(other)), what=what)
        return self._answer(task, what=what)

    def _cancel(self, name: str, now: float, hop: Hop | None) -> Served:
        """``CancelOperation``: 200 and a cooperative cancel; never a terminal (X5)."""
        task = self.live(name, now)
        if task is None:
            return self._error(404, f"operation {name} not found", what="cancel")
        self.note_cancel(hop)
        if task.status in TERMINAL:
            if task.status != CANCELLED:
                self._count("aip151_cancel_races_completion")
        else:
            # A completion landing exactly on the cancel is decided by the truth's coin,
            # and a completion that wins stays completed (X5).
            later = now + self.rng.uniform(0.0, 10.0)
            self.cancel_task(task, now, effective=later, tie="aip151_cancel_races_completion")
        return Served(reply=self._json(200, {}), what="cancel")


__all__ = ["Aip151Server", "operation_result"]
